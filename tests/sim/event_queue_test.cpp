// tests/sim/event_queue_test.cpp — EventQueue: order, ties, cancellation, re-arming, stale
// handles, bounded memory under cancel churn, sequence renumbering, and a large random
// schedule checked against a reference model (std::set ordered by (time, sequence)).
#include "emu/sim/event_queue.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace weft::sim {
namespace {

std::vector<std::uint64_t> drain_data(EventQueue& q) {
  std::vector<std::uint64_t> out;
  Event ev;
  while (q.pop(ev)) out.push_back(ev.data);
  return out;
}

TEST(EventQueue, PopsInTimeOrder) {
  EventQueue q;
  const TimeNs times[] = {50, 10, 40, 20, 30, 0, 100, 70, 60, 90, 80};
  for (TimeNs t : times) q.push(t, 0, 0, t);
  EXPECT_EQ(q.size(), 11u);
  EXPECT_EQ(q.peek_time(), 0u);
  std::vector<std::uint64_t> want = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  EXPECT_EQ(drain_data(q), want);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.peek_time(), kNoDeadline);
}

TEST(EventQueue, EqualTimesKeepInsertionOrder) {
  EventQueue q;
  for (std::uint64_t i = 0; i < 1000; ++i) q.push(i % 3 == 0 ? 5 : 7, 0, 0, i);
  std::vector<std::uint64_t> got = drain_data(q);
  std::vector<std::uint64_t> want;
  for (std::uint64_t i = 0; i < 1000; i += 3) want.push_back(i);
  for (std::uint64_t i = 0; i < 1000; ++i)
    if (i % 3 != 0) want.push_back(i);
  EXPECT_EQ(got, want);
}

TEST(EventQueue, EventCarriesComponentKindData) {
  EventQueue q;
  EventId id = q.push(9, 3, 4, 0xabcdef);
  Event ev;
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.time_ns, 9u);
  EXPECT_EQ(ev.component, 3u);
  EXPECT_EQ(ev.kind, 4u);
  EXPECT_EQ(ev.data, 0xabcdefu);
  EXPECT_EQ(ev.id, id);
  EXPECT_FALSE(q.pending(id));
}

TEST(EventQueue, PostedAndPushedEventsShareOneOrder) {
  EventQueue q;
  q.post(10, 0, 0, 1);
  EventId b = q.push(10, 0, 0, 2);
  q.post(5, 0, 0, 3);
  q.post(10, 0, 0, 4);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.slab_slots(), 1u);  // only the pushed event has a record
  Event ev;
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.data, 3u);
  EXPECT_FALSE(ev.id.valid());
  EXPECT_FALSE(q.cancel(ev.id));
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.data, 1u);
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.data, 2u);
  EXPECT_EQ(ev.id, b);
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{4}));
}

TEST(EventQueue, CancelRemovesOnlyThatEvent) {
  EventQueue q;
  EventId a = q.push(10, 0, 0, 1);
  EventId b = q.push(10, 0, 0, 2);
  EventId c = q.push(5, 0, 0, 3);
  EXPECT_TRUE(q.cancel(b));
  EXPECT_FALSE(q.cancel(b));  // already cancelled
  EXPECT_FALSE(q.pending(b));
  EXPECT_TRUE(q.pending(a));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_TRUE(q.cancel(c));
  EXPECT_EQ(q.peek_time(), 10u);
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{1}));
  EXPECT_FALSE(q.cancel(a));  // fired
  EXPECT_FALSE(q.cancel(EventId{}));
}

TEST(EventQueue, StaleHandleDoesNotTouchReusedSlot) {
  EventQueue q;
  EventId a = q.push(1, 0, 0, 1);
  Event ev;
  ASSERT_TRUE(q.pop(ev));
  EventId b = q.push(2, 0, 0, 2);  // reuses a's slot
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_FALSE(q.cancel(a));
  EXPECT_FALSE(q.reschedule(a, 100));
  EXPECT_TRUE(q.pending(b));
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{2}));
}

TEST(EventQueue, RescheduleLaterAndEarlier) {
  EventQueue q;
  EventId t = q.push(10, 0, 0, 100);
  q.push(20, 0, 0, 1);
  q.push(30, 0, 0, 2);
  EXPECT_TRUE(q.reschedule(t, 25));  // later: lazy carry
  EXPECT_EQ(q.time_of(t), 25u);
  EXPECT_EQ(q.peek_time(), 20u);
  EXPECT_TRUE(q.reschedule(t, 35));
  EXPECT_TRUE(q.reschedule(t, 5));   // earlier: a new key
  EXPECT_TRUE(q.reschedule(t, 30));  // same time as event 2, scheduled after it
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{1, 2, 100}));
  EXPECT_EQ(q.keys(), 0u);
}

TEST(EventQueue, RescheduledEventOrderedAsIfScheduledNow) {
  EventQueue q;
  EventId t = q.push(10, 0, 0, 100);
  q.push(50, 0, 0, 1);
  EXPECT_TRUE(q.reschedule(t, 50));
  q.push(50, 0, 0, 2);
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{1, 100, 2}));
}

// Events at one time scheduled before it entered the wheel's window (heap) and after (wheel)
// still come out in scheduling order, and so do events before the last popped time.
TEST(EventQueue, EqualTimesSplitBetweenHeapAndWheelKeepOrder) {
  EventQueue q;
  q.post(10'000, 0, 0, 1);  // beyond the window (0 + 4,096): the heap
  q.post(7'000, 0, 0, 2);
  EventId t = q.push(10'000, 0, 0, 3);
  Event ev;
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.data, 2u);                // the window now starts at 7,000
  q.post(10'000, 0, 0, 4);               // the wheel
  EXPECT_TRUE(q.reschedule(t, 10'000));  // after 4 now
  q.post(10'000, 0, 0, 5);
  q.post(9'000, 0, 0, 6);
  EXPECT_EQ(q.heap_keys(), 2u);  // 1 and 3's key (its carrier)
  q.post(6'000, 0, 0, 7);        // before the last popped time: the heap, first out
  EXPECT_EQ(drain_data(q), (std::vector<std::uint64_t>{7, 6, 1, 4, 3, 5}));
  EXPECT_EQ(q.keys(), 0u);
}

TEST(EventQueue, CancelChurnKeepsMemoryBounded) {
  EventQueueConfig cfg;
  cfg.stale_slack_keys = 64;
  EventQueue q(cfg);
  for (int i = 0; i < 100; ++i) {
    if (i % 2)
      q.push(1'000'000 + i, 0, 0, i);
    else
      q.post(1'000'000 + i, 0, 0, i);
  }
  // A timer armed far in the future and cancelled again, a million times.
  for (int i = 0; i < 1'000'000; ++i) {
    EventId id = q.push(2'000'000'000ULL + i, 0, 0, 0);
    ASSERT_TRUE(q.cancel(id));
  }
  EXPECT_EQ(q.size(), 100u);
  EXPECT_LE(q.keys(), 2 * 100u + 64u + 1u);
  EXPECT_LE(q.slab_slots(), 2 * 100u + 64u + 2u);
  EXPECT_GT(q.rebuilds(), 0u);
  std::vector<std::uint64_t> got = drain_data(q);
  ASSERT_EQ(got.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(got[i], static_cast<std::uint64_t>(i));
}

TEST(EventQueue, RearmChurnKeepsMemoryBounded) {
  EventQueueConfig cfg;
  cfg.stale_slack_keys = 64;
  EventQueue q(cfg);
  EventId timer = q.push(1000, 0, 0, 7);
  // Alternately earlier and later: each earlier re-arm leaves a stale key behind.
  for (int i = 0; i < 100'000; ++i)
    ASSERT_TRUE(q.reschedule(timer, (i % 2) ? 2000 + i : 1000 - (i % 500)));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_LE(q.keys(), 2u + 64u + 1u);
  Event ev;
  ASSERT_TRUE(q.pop(ev));
  EXPECT_EQ(ev.data, 7u);
  EXPECT_EQ(ev.time_ns, 2000u + 99'999u);
  EXPECT_FALSE(q.pop(ev));
}

TEST(EventQueue, SequenceRenumberingKeepsOrder) {
  EventQueueConfig cfg;
  cfg.seq_limit = 64;  // renumber every few dozen pushes
  EventQueue q(cfg);
  std::vector<EventId> ids;
  for (std::uint64_t i = 0; i < 40; ++i) ids.push_back(q.push(1000 + (i % 4), 0, 0, i));
  // 20 rounds of re-arming every fifth event to the back of 1003: 160 sequence numbers with
  // 40 pending, so the queue renumbers several times.
  for (int round = 0; round < 20; ++round)
    for (std::uint64_t i = 0; i < 40; i += 5) ASSERT_TRUE(q.reschedule(ids[i], 1003));
  EXPECT_GE(q.rebuilds(), 2u);
  std::vector<std::uint64_t> got = drain_data(q);
  std::vector<std::uint64_t> want;
  for (TimeNs t = 1000; t < 1004; ++t)
    for (std::uint64_t i = 0; i < 40; ++i)
      if (i % 4 == t - 1000 && i % 5 != 0) want.push_back(i);
  for (std::uint64_t i = 0; i < 40; i += 5) want.push_back(i);
  EXPECT_EQ(got, want);
}

// Reference model (pop() and pop_until() against it): an ordered set of (time, seq, token); tokens
// map to queue handles.
struct Reference {
  std::set<std::tuple<TimeNs, std::uint64_t, std::uint64_t>> order;
  std::map<std::uint64_t, std::pair<TimeNs, std::uint64_t>> where;  // token -> (time, seq)
  std::uint64_t seq = 0;
  void push(TimeNs t, std::uint64_t token) {
    order.emplace(t, seq, token);
    where[token] = {t, seq++};
  }
  bool cancel(std::uint64_t token) {
    auto it = where.find(token);
    if (it == where.end()) return false;
    order.erase({it->second.first, it->second.second, token});
    where.erase(it);
    return true;
  }
  bool reschedule(std::uint64_t token, TimeNs t) {
    if (!cancel(token)) return false;
    push(t, token);
    return true;
  }
  bool pop(TimeNs& t, std::uint64_t& token) {
    if (order.empty()) return false;
    auto [tt, s, tok] = *order.begin();
    order.erase(order.begin());
    where.erase(tok);
    t = tt;
    token = tok;
    return true;
  }
};

// `far`: the upper bound of the far half of the delays (the wheel covers 4,096 ns: 100,000
// sends most of them to the heap, 6,000 straddles the window's end).
void run_random_schedule(std::uint64_t seed, int ops, bool small_seq_limit, TimeNs far = 100'000) {
  SCOPED_TRACE(::testing::Message() << "SEED=" << seed);
  SeededRng rng(seed);
  EventQueueConfig cfg;
  cfg.stale_slack_keys = 16;
  if (small_seq_limit) cfg.seq_limit = 1 << 15;
  EventQueue q(cfg);
  Reference ref;
  std::vector<EventId> handles;    // token -> handle (tokens are dense)
  std::set<std::uint64_t> posted;  // tokens scheduled with post()
  TimeNs now = 0;
  for (int op = 0; op < ops; ++op) {
    std::uint64_t r = rng.below(100);
    if (r < 40) {
      // Coarse times so that ties are frequent; a third are posted (no handle).
      TimeNs t = now + rng.below(rng.chance(0.5) ? 16 : far);
      std::uint64_t token = handles.size();
      if (rng.below(3) == 0) {
        q.post(t, static_cast<ComponentId>(token % 7), 1, token);
        handles.push_back(EventId{});
        posted.insert(token);
      } else {
        handles.push_back(q.push(t, static_cast<ComponentId>(token % 7), 1, token));
      }
      ref.push(t, token);
    } else if (r < 55 && !handles.empty()) {
      std::uint64_t token = rng.below(handles.size());
      if (posted.count(token)) {
        ASSERT_FALSE(q.cancel(handles[token]));
        continue;
      }
      ASSERT_EQ(q.cancel(handles[token]), ref.cancel(token)) << "op " << op;
    } else if (r < 75 && !handles.empty()) {
      std::uint64_t token = rng.below(handles.size());
      TimeNs t = now + rng.below(rng.chance(0.5) ? 16 : far);
      if (posted.count(token)) {
        ASSERT_FALSE(q.reschedule(handles[token], t));
        continue;
      }
      ASSERT_EQ(q.reschedule(handles[token], t), ref.reschedule(token, t)) << "op " << op;
    } else {
      Event ev;
      TimeNs rt = 0;
      std::uint64_t rtok = 0;
      bool got;
      if (rng.chance(0.5)) {
        got = q.pop(ev);
      } else {
        // The Simulator's call: only an event at or before the limit.
        const TimeNs limit = now + rng.below(2'000);
        got = q.pop_until(limit, ev);
        if (!ref.order.empty() && std::get<0>(*ref.order.begin()) > limit) {
          ASSERT_FALSE(got) << "op " << op;
          ASSERT_EQ(q.peek_time(), std::get<0>(*ref.order.begin())) << "op " << op;
          continue;
        }
      }
      ASSERT_EQ(got, ref.pop(rt, rtok)) << "op " << op;
      if (got) {
        ASSERT_EQ(ev.time_ns, rt) << "op " << op;
        ASSERT_EQ(ev.data, rtok) << "op " << op;
        ASSERT_EQ(ev.component, rtok % 7);
        ASSERT_EQ(ev.id, handles[rtok]);
        now = ev.time_ns;
      }
    }
    ASSERT_EQ(q.size(), ref.order.size()) << "op " << op;
  }
  // Drain both.
  Event ev;
  TimeNs rt;
  std::uint64_t rtok;
  while (q.pop(ev)) {
    ASSERT_TRUE(ref.pop(rt, rtok));
    ASSERT_EQ(ev.time_ns, rt);
    ASSERT_EQ(ev.data, rtok);
  }
  EXPECT_TRUE(ref.order.empty());
  EXPECT_EQ(q.keys(), 0u);
  if (small_seq_limit) {
    EXPECT_GT(q.rebuilds(), 0u);  // sequence numbers were renumbered
  }
}

TEST(EventQueue, LargeRandomScheduleMatchesReference) {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) run_random_schedule(seed, 200'000, false);
}

TEST(EventQueue, RandomScheduleWithRenumberingMatchesReference) {
  for (std::uint64_t seed = 100; seed <= 104; ++seed) run_random_schedule(seed, 100'000, true);
}

TEST(EventQueue, RandomScheduleAcrossTheWheelWindowMatchesReference) {
  for (std::uint64_t seed = 200; seed <= 204; ++seed)
    run_random_schedule(seed, 100'000, seed % 2 == 0, 6'000);
}

}  // namespace
}  // namespace weft::sim
