// tests/sim/simulator_test.cpp — Simulator: dispatch, clock, run limits, timers re-armed from
// handlers, trace-hash determinism, RNG stream independence.
#include "emu/sim/simulator.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace weft::sim {
namespace {

struct Recorder final : Component {
  std::vector<std::pair<TimeNs, std::uint64_t>> seen;
  void on_event(Simulator& sim, const Event& ev) override {
    EXPECT_EQ(sim.now(), ev.time_ns);
    seen.emplace_back(ev.time_ns, ev.data);
  }
};

TEST(Simulator, DispatchesToComponentsInOrder) {
  Simulator sim;
  Recorder a, b;
  ComponentId ia = sim.add_component(a, "a");
  ComponentId ib = sim.add_component(b, "b");
  EXPECT_EQ(sim.component_name(ib), "b");
  sim.schedule_at(30, ia, 0, 3);
  sim.schedule_at(10, ib, 0, 1);
  sim.schedule_at(20, ia, 0, 2);
  sim.schedule_at(20, ib, 0, 4);
  EXPECT_EQ(sim.run(100), StopReason::kEmpty);
  EXPECT_EQ(a.seen, (std::vector<std::pair<TimeNs, std::uint64_t>>{{20, 2}, {30, 3}}));
  EXPECT_EQ(b.seen, (std::vector<std::pair<TimeNs, std::uint64_t>>{{10, 1}, {20, 4}}));
  EXPECT_EQ(sim.now(), 30u);
  EXPECT_EQ(sim.events_dispatched(), 4u);
}

TEST(Simulator, StepRunAndRunUntil) {
  Simulator sim;
  Recorder r;
  ComponentId id = sim.add_component(r, "r");
  for (TimeNs t = 1; t <= 10; ++t) sim.schedule_at(t * 100, id, 0, t);
  EXPECT_EQ(sim.step(), StopReason::kCallEventLimit);
  EXPECT_EQ(sim.now(), 100u);
  EXPECT_EQ(sim.run(3), StopReason::kCallEventLimit);
  EXPECT_EQ(sim.now(), 400u);
  EXPECT_EQ(sim.run_until(650), StopReason::kTimeReached);
  EXPECT_EQ(sim.now(), 650u);  // the clock moves to the bound
  EXPECT_EQ(r.seen.size(), 6u);
  EXPECT_EQ(sim.run_until(700), StopReason::kTimeReached);  // an event at exactly t runs
  EXPECT_EQ(r.seen.size(), 7u);
  EXPECT_EQ(sim.next_time(), 800u);
  EXPECT_EQ(sim.run(UINT64_MAX), StopReason::kEmpty);
  EXPECT_EQ(sim.run_until(5000), StopReason::kTimeReached);
  EXPECT_EQ(sim.now(), 5000u);
}

TEST(Simulator, ConfigLimitsStopRuns) {
  SimConfig cfg;
  cfg.events_max = 5;
  cfg.time_ns_max = 1000;
  Simulator sim(cfg);
  Recorder r;
  ComponentId id = sim.add_component(r, "r");
  for (TimeNs t = 1; t <= 8; ++t) sim.schedule_at(t * 100, id, 0, t);
  sim.schedule_at(2000, id, 0, 99);
  EXPECT_EQ(sim.run(UINT64_MAX), StopReason::kEventsMax);
  EXPECT_EQ(r.seen.size(), 5u);

  Simulator sim2(SimConfig{.seed = 1, .time_ns_max = 1000});
  Recorder r2;
  ComponentId id2 = sim2.add_component(r2, "r");
  sim2.schedule_at(900, id2, 0, 1);
  sim2.schedule_at(2000, id2, 0, 2);
  EXPECT_EQ(sim2.run(UINT64_MAX), StopReason::kTimeMax);
  EXPECT_EQ(r2.seen.size(), 1u);
  EXPECT_EQ(sim2.now(), 1000u);
}

// A component with a retransmission-style timer: every "ack" pushes the timer back; the
// timer fires only when acks stop.
struct TimerOwner final : Component {
  enum : EventKind { kAck = 1, kTimeout = 2 };
  EventId timer{};
  int timeouts = 0;
  TimeNs fired_at = 0;
  void on_event(Simulator& sim, const Event& ev) override {
    if (ev.kind == kAck) {
      EXPECT_TRUE(sim.reschedule(timer, sim.now() + 1000));
    } else {
      ++timeouts;
      fired_at = sim.now();
    }
  }
};

TEST(Simulator, RearmedTimerFiresOnceAfterLastAck) {
  Simulator sim;
  TimerOwner t;
  ComponentId id = sim.add_component(t, "qp");
  t.timer = sim.schedule_at(1000, id, TimerOwner::kTimeout);
  for (TimeNs a = 1; a <= 500; ++a) sim.schedule_at(a * 10, id, TimerOwner::kAck);
  EXPECT_EQ(sim.run(UINT64_MAX), StopReason::kEmpty);
  EXPECT_EQ(t.timeouts, 1);
  EXPECT_EQ(t.fired_at, 5000u + 1000u);
}

struct Stopper final : Component {
  void on_event(Simulator& sim, const Event& ev) override {
    if (ev.data == 1) sim.request_stop();
  }
};

TEST(Simulator, ComponentCanStopTheRun) {
  Simulator sim;
  Stopper s;
  ComponentId id = sim.add_component(s, "s");
  sim.schedule_at(1, id, 0, 0);
  sim.schedule_at(2, id, 0, 1);
  sim.schedule_at(3, id, 0, 0);
  EXPECT_EQ(sim.run(UINT64_MAX), StopReason::kStopped);
  EXPECT_EQ(sim.now(), 2u);
  EXPECT_EQ(sim.run(UINT64_MAX), StopReason::kEmpty);
}

// A random self-driving model: each node, on each event, draws from its own stream to pick a
// delay and a peer, and sometimes cancels its pending timer.
struct Chatter final : Component {
  std::vector<ComponentId>* peers = nullptr;
  EventId timer{};
  void on_event(Simulator& sim, const Event& ev) override {
    SeededRng& rng = sim.rng(ev.component);
    if (ev.data > 0) {
      ComponentId peer = (*peers)[rng.below(peers->size())];
      sim.schedule_in(rng.below(50), peer, 1, ev.data - 1);
    }
    if (rng.chance(0.3)) sim.cancel(timer);
    timer = sim.schedule_in(100 + rng.below(100), ev.component, 2, 0);
  }
};

std::uint64_t run_chatter(std::uint64_t seed, int nodes) {
  Simulator sim(SimConfig{.seed = seed});
  std::vector<Chatter> cs(nodes);
  std::vector<ComponentId> ids;
  for (int i = 0; i < nodes; ++i) {
    cs[i].peers = &ids;
    ids.push_back(sim.add_component(cs[i], "node" + std::to_string(i)));
  }
  for (int i = 0; i < nodes; ++i) sim.schedule_at(i, ids[i], 1, 200);
  sim.run(1'000'000);
  EXPECT_GT(sim.events_dispatched(), 1000u);
  return sim.trace_hash();
}

TEST(Simulator, TraceHashIsDeterministicPerSeed) {
  std::uint64_t h1 = run_chatter(42, 16);
  EXPECT_EQ(h1, run_chatter(42, 16));
  EXPECT_NE(h1, run_chatter(43, 16));
  EXPECT_NE(h1, TraceHash{}.value());
}

struct Golden final : Component {
  void on_event(Simulator&, const Event&) override {}
};

TEST(Simulator, TraceHashGolden) {
  // FNV-1a over words (time, component, kind), computed by hand for two events.
  Simulator sim;
  Golden g;
  ComponentId id = sim.add_component(g, "g");
  sim.schedule_at(5, id, 7);
  sim.schedule_at(6, id, 8);
  sim.run(10);
  TraceHash h;
  for (std::uint64_t w : {5ULL, 0ULL, 7ULL, 6ULL, 0ULL, 8ULL}) h.add(w);
  EXPECT_EQ(sim.trace_hash(), h.value());
}

TEST(RngStream, StreamsDependOnSeedAndNameOnly) {
  // Adding a component before "b" must not change b's stream.
  Simulator s1(SimConfig{.seed = 7});
  Simulator s2(SimConfig{.seed = 7});
  Golden g;
  ComponentId b1 = s1.add_component(g, "b");
  s2.add_component(g, "a");
  s2.add_component(g, "z");
  ComponentId b2 = s2.add_component(g, "b");
  EXPECT_NE(b1, b2);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s1.rng(b1).next_u64(), s2.rng(b2).next_u64());
  // Drawing from one stream does not move another.
  SeededRng fresh = make_stream(7, "a");
  for (int i = 0; i < 100; ++i) ASSERT_EQ(s2.rng(0).next_u64(), fresh.next_u64());
}

TEST(RngStream, StreamsAreDistinctAndLookIndependent) {
  // Adjacent keys and adjacent seeds give unrelated streams: no equal first words among 4096
  // streams, and the bitwise correlation between neighbouring streams is near 1/2.
  std::set<std::uint64_t> firsts;
  for (std::uint64_t k = 0; k < 4096; ++k) firsts.insert(make_stream(1, k).next_u64());
  for (std::uint64_t s = 0; s < 4096; ++s) firsts.insert(make_stream(s + 2, 0).next_u64());
  EXPECT_EQ(firsts.size(), 8192u);
  SeededRng x = make_stream(1, 1), y = make_stream(1, 2);
  int same_bits = 0;
  const int words = 10'000;
  for (int i = 0; i < words; ++i)
    same_bits += 64 - __builtin_popcountll(x.next_u64() ^ y.next_u64());
  double frac = static_cast<double>(same_bits) / (64.0 * words);
  EXPECT_NEAR(frac, 0.5, 0.01);
  // Uniformity of below(): chi-square over 16 buckets.
  SeededRng u = make_stream(9, "uniform");
  int buckets[16] = {};
  const int draws = 160'000;
  for (int i = 0; i < draws; ++i) ++buckets[u.below(16)];
  double chi2 = 0;
  for (int b : buckets) chi2 += (b - draws / 16.0) * (b - draws / 16.0) / (draws / 16.0);
  EXPECT_LT(chi2, 37.7);  // p = 0.001 at 15 degrees of freedom
}

}  // namespace
}  // namespace weft::sim
