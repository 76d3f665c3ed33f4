// emu/sim/event_queue.cpp — a 1-ns timing wheel for the near future and a 4-ary heap for the
// rest, self-contained keys, pooled slab for cancellable events, lazy cancellation and
// re-arming (see event_queue.hpp).
#include "emu/sim/event_queue.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/assert.hpp"

namespace weft::sim {

// 4 children of 32 bytes: two cache lines per level. Measured against 2 and 8 (1M pending,
// same binary): 2 was 1.8x slower, 8 about 10-30% slower at 1k pending and no better at 1M.
static constexpr std::size_t kArity = 4;
// Below this many keys (256 KiB) pops do not prefetch grandchildren.
static constexpr std::size_t kPrefetchKeysMin = 8192;

EventQueue::EventQueue(const EventQueueConfig& config)
    : config_(config), seq_limit_(config.seq_limit ? config.seq_limit : kSeqLimit) {
  WEFT_ASSERT(seq_limit_ <= kSeqLimit);
  heap_reserve(std::max<std::size_t>(config.reserve_events, 16));
  buckets_.assign(kWheelSlots, Bucket{kNil, kNil});
  nodes_.reserve(std::max<std::size_t>(config.reserve_events, 16));
}

void EventQueue::grow_nodes() {
  // Grow by half (at least 64): the new nodes form the free list, lowest index first.
  const std::size_t old = nodes_.size();
  const std::size_t add = std::max<std::size_t>(64, old / 2);
  WEFT_ASSERT_MSG(old + add < kNil, "EventQueue: wheel nodes");
  nodes_.resize(old + add);
  for (std::size_t i = old; i < old + add; ++i)
    nodes_[i].next = i + 1 < old + add ? static_cast<std::uint32_t>(i + 1) : free_node_;
  free_node_ = static_cast<std::uint32_t>(old);
}

void EventQueue::wheel_pop_front(std::size_t b) {
  Bucket& bucket = buckets_[b];
  const std::uint32_t head = bucket.head;
  const std::uint32_t next = nodes_[head].next;
  bucket.head = next;
  if (next == kNil) {
    std::uint64_t& word = bits_[b >> 6];
    word &= ~(1ULL << (b & 63));
    if (word == 0) summary_ &= ~(1ULL << (b >> 6));
  }
  nodes_[head].next = free_node_;
  free_node_ = head;
  --wheel_keys_;
}

void EventQueue::wheel_clear() {
  for (std::uint64_t sum = summary_; sum != 0; sum &= sum - 1) {
    const auto w = static_cast<std::size_t>(__builtin_ctzll(sum));
    for (std::uint64_t bits = bits_[w]; bits != 0; bits &= bits - 1)
      buckets_[(w << 6) | static_cast<std::size_t>(__builtin_ctzll(bits))] = Bucket{kNil, kNil};
    bits_[w] = 0;
  }
  summary_ = 0;
  wheel_keys_ = 0;
  // Every node free again, lowest index first.
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    nodes_[i].next = i + 1 < nodes_.size() ? static_cast<std::uint32_t>(i + 1) : kNil;
  free_node_ = nodes_.empty() ? kNil : 0;
}

void EventQueue::remove_top() {
  WEFT_ASSERT(top_ == Top::kWheel || top_ == Top::kHeap);
  if (top_ == Top::kWheel)
    wheel_pop_front(top_bucket_);
  else
    heap_pop_top();
  top_ = Top::kUnknown;
}

void EventQueue::heap_reserve(std::size_t n) {
  if (n <= heap_cap_) return;
  std::size_t cap = std::max(n, heap_cap_ * 2);
  // One key of padding in front puts key 1 at the start of a cache line.
  auto* raw = static_cast<Key*>(::operator new ((cap + 1) * sizeof(Key), std::align_val_t{64}));
  Key* base = raw + 1;
  if (heap_size_ > 0) std::memcpy(static_cast<void*>(base), heap_.get(), heap_size_ * sizeof(Key));
  heap_.reset(base);
  heap_cap_ = cap;
}

std::uint64_t EventQueue::next_seq() {
  if (seq_ >= seq_limit_) [[unlikely]]
    rebuild(/*renumber=*/true);
  return seq_++;
}

void EventQueue::heap_push(Key k) {
  if (heap_size_ == heap_cap_) [[unlikely]]
    heap_reserve(heap_size_ + 1);
  Key* h = heap_.get();
  std::size_t i = heap_size_++;
  while (i > 0) {
    std::size_t parent = (i - 1) / kArity;
    if (!less(k, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = k;
}

// Index of the least of the kArity children starting at c (all exist).
static inline std::size_t min_of_four(const auto* h, std::size_t c, auto less) {
  if constexpr (kArity == 4) {
    std::size_t b01 = c + static_cast<std::size_t>(less(h[c + 1], h[c]));
    std::size_t b23 = c + 2 + static_cast<std::size_t>(less(h[c + 3], h[c + 2]));
    return less(h[b23], h[b01]) ? b23 : b01;
  } else {
    std::size_t best = c;
    for (std::size_t j = 1; j < kArity; ++j) best = less(h[c + j], h[best]) ? c + j : best;
    return best;
  }
}

void EventQueue::sift_down(std::size_t i, Key k) {
  Key* h = heap_.get();
  const std::size_t n = heap_size_;
  for (;;) {
    std::size_t c = kArity * i + 1;
    if (c >= n) break;
    std::size_t best = c;
    if (n - c >= kArity) {
      best = min_of_four(h, c, less);
    } else {
      for (std::size_t j = c + 1; j < n; ++j)
        if (less(h[j], h[best])) best = j;
    }
    if (!less(h[best], k)) break;
    h[i] = h[best];
    i = best;
  }
  h[i] = k;
}

// Bottom-up deletion (Wegener): move the hole from the root to a leaf along least children
// without comparing against the element being placed, then sift that element (the old last
// leaf, which usually belongs near the bottom) up from there. Saves a comparison and an
// unpredictable branch per level over the textbook sift-down.
void EventQueue::heap_pop_top() {
  WEFT_ASSERT(heap_size_ > 0);
  Key* h = heap_.get();
  const std::size_t n = --heap_size_;
  if (n == 0) return;
  const Key last = h[n];
  std::size_t i = 0;
  // A heap this small sits in L1/L2: prefetching would only cost instructions.
  const bool prefetch = n > kPrefetchKeysMin;
  for (;;) {
    std::size_t c = kArity * i + 1;
    if (c + kArity <= n) {
      // The next level's address depends on this level's comparisons, so its cache misses
      // would be serial; fetch all grandchildren now, while the comparisons run.
      if (prefetch) {
        std::size_t g = kArity * c + 1;
        std::size_t g_end = std::min(g + kArity * kArity, n);
        for (; g < g_end; g += 2) __builtin_prefetch(&h[g]);  // 2 keys per cache line
      }
      std::size_t best = min_of_four(h, c, less);
      h[i] = h[best];
      i = best;
      continue;
    }
    if (c < n) {
      std::size_t best = c;
      for (std::size_t j = c + 1; j < n; ++j)
        if (less(h[j], h[best])) best = j;
      h[i] = h[best];
      i = best;
    }
    break;
  }
  while (i > 0) {
    std::size_t parent = (i - 1) / kArity;
    if (!less(last, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = last;
}

void EventQueue::release_key(std::uint32_t slot) {
  Slot& s = slots_[slot];
  WEFT_ASSERT(s.keys > 0);
  if (--s.keys == 0 && s.state != SlotState::kPending) {
    s.state = SlotState::kFree;
    free_.push_back(slot);
  }
}

EventId EventQueue::push(TimeNs time_ns, ComponentId component, EventKind kind,
                         std::uint64_t data) {
  std::uint64_t seq = next_seq();  // may rebuild: take it before touching the slab
  std::uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    WEFT_ASSERT_MSG(slots_.size() < kSlotsMax, "EventQueue: kSlotsMax cancellable events");
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back(Slot{});
  }
  Slot& s = slots_[slot];
  s.time_ns = time_ns;
  s.seq = seq;
  s.data = data;
  s.component = component;
  s.kind = kind;
  s.keys = 1;
  s.state = SlotState::kPending;
  s.live_key = true;
  ++pending_;
  insert_fresh(Key{time_ns, (seq << kSlotBits) | slot, data, component, kind});
  return EventId{slot, s.gen};
}

const EventQueue::Key* EventQueue::find_top() {
  const Key* top;
  if (wheel_keys_ > 0) {
    top_bucket_ = wheel_first_bucket();
    top = &nodes_[buckets_[top_bucket_].head].key;
    top_ = Top::kWheel;
    if (heap_size_ > 0 && less(heap_.get()[0], *top)) {
      top = &heap_.get()[0];
      top_ = Top::kHeap;
    }
  } else if (heap_size_ > 0) {
    top = &heap_.get()[0];
    top_ = Top::kHeap;
  } else {
    top_ = Top::kEmpty;
    return nullptr;
  }
  return top;
}

void EventQueue::retire_top(const Key& top, std::uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.state == SlotState::kPending && !s.live_key && top.time_ns <= s.time_ns) {
    // A carrier: the event was pushed back after this key was made; re-insert it at its
    // current time. Its sequence number is not the newest, so it goes to the heap.
    s.live_key = true;
    Key k = top;
    k.time_ns = s.time_ns;
    k.tag = (s.seq << kSlotBits) | slot;
    remove_top();
    heap_push(k);
    return;
  }
  remove_top();
  release_key(slot);
}

void EventQueue::settle_top() {
  for (;;) {
    const Key* top = find_top();
    if (top == nullptr) return;
    const std::uint32_t slot = slot_of(*top);
    if (slot == kNoSlot) return;  // posted events are always live
    const Slot& s = slots_[slot];
    if (s.state == SlotState::kPending && seq_of(*top) == s.seq) return;  // the live key
    retire_top(*top, slot);
  }
}

void EventQueue::take_top(const Key& key, Event& out) {
  const Key top = key;  // (the removal below overwrites the node or the heap's root)
  if (top_ == Top::kWheel)
    wheel_pop_front(top_bucket_);
  else
    heap_pop_top();
  top_ = Top::kUnknown;
  if (top.time_ns > base_) base_ = top.time_ns;  // the window moves on
  --pending_;
  out.time_ns = top.time_ns;
  out.component = top.component;
  out.kind = top.kind;
  out.data = top.data;
  const std::uint32_t slot = slot_of(top);
  if (slot == kNoSlot) {
    out.id = EventId{};
    return;
  }
  Slot& s = slots_[slot];
  out.id = EventId{slot, s.gen};
  s.state = SlotState::kDone;
  ++s.gen;
  release_key(slot);
}

bool EventQueue::pop(Event& out) {
  if (peek_time() == kNoDeadline) return false;
  pop_peeked(out);
  return true;
}

void EventQueue::pop_peeked(Event& out) {
  WEFT_ASSERT_MSG(top_ == Top::kWheel || top_ == Top::kHeap, "pop_peeked without peek_time");
  take_top(top_ == Top::kWheel ? nodes_[buckets_[top_bucket_].head].key : heap_.get()[0], out);
}

void EventQueue::post_slow(TimeNs time_ns, ComponentId component, EventKind kind,
                           std::uint64_t data) {
  const std::uint64_t tag = next_tag(kNoSlot);  // may renumber: before counting this one
  ++pending_;
  insert_fresh(Key{time_ns, tag, data, component, kind});
}

bool EventQueue::pop_until_slow(TimeNs limit, Event& out) {
  for (;;) {
    const Key* top = find_top();
    if (top == nullptr) return false;
    const std::uint32_t slot = slot_of(*top);
    if (slot != kNoSlot) {
      const Slot& s = slots_[slot];
      if (s.state != SlotState::kPending || seq_of(*top) != s.seq) {
        retire_top(*top, slot);
        continue;
      }
    }
    if (top->time_ns > limit) return false;  // top_ stays settled for peek_time()
    take_top(*top, out);
    return true;
  }
}

TimeNs EventQueue::peek_time() {
  if (top_ == Top::kUnknown) settle_top();
  switch (top_) {
    case Top::kWheel:
      return nodes_[buckets_[top_bucket_].head].key.time_ns;
    case Top::kHeap:
      return heap_.get()[0].time_ns;
    default:
      return kNoDeadline;
  }
}

bool EventQueue::pending(EventId id) const {
  return id.slot < slots_.size() && slots_[id.slot].gen == id.gen &&
         slots_[id.slot].state == SlotState::kPending;
}

TimeNs EventQueue::time_of(EventId id) const {
  return pending(id) ? slots_[id.slot].time_ns : kNoDeadline;
}

bool EventQueue::cancel(EventId id) {
  if (!pending(id)) return false;
  Slot& s = slots_[id.slot];
  s.state = SlotState::kDone;
  ++s.gen;
  --pending_;
  top_ = Top::kUnknown;
  // Its keys stay in the heap as stale keys until they surface or a compaction drops them.
  maybe_rebuild();
  return true;
}

bool EventQueue::reschedule(EventId id, TimeNs time_ns) {
  if (!pending(id)) return false;
  std::uint64_t seq = next_seq();  // may renumber: read the slot after it
  Slot& s = slots_[id.slot];
  top_ = Top::kUnknown;
  if (time_ns >= s.time_ns) {
    // Later (or same time, ordered after what is already there): the key in the heap, whose
    // time is <= the old time, carries the event forward when it surfaces. O(1).
    s.time_ns = time_ns;
    s.seq = seq;
    s.live_key = false;
    return true;
  }
  // Earlier: a new key; the old one goes stale.
  Key k{time_ns, (seq << kSlotBits) | id.slot, s.data, s.component, s.kind};
  s.time_ns = time_ns;
  s.seq = seq;
  s.live_key = true;
  ++s.keys;
  insert_fresh(k);
  maybe_rebuild();
  return true;
}

void EventQueue::maybe_rebuild() {
  if (keys() > 2 * pending_ + config_.stale_slack_keys) rebuild(/*renumber=*/false);
}

void EventQueue::rebuild(bool renumber) {
  ++rebuilds_;
  top_ = Top::kUnknown;
  // Compact in place: keep posted keys and one live key per pending slot (a carrier becomes
  // the live key); drop the rest. Then every pending slot has one key, every other none.
  // Returns false for a key to drop; turns a carrier into the live key.
  auto keep = [&](Key& k, bool& converted) {
    converted = false;
    const std::uint32_t slot = slot_of(k);
    if (slot == kNoSlot) return true;
    Slot& s = slots_[slot];
    if (s.state != SlotState::kPending) return false;
    if (s.live_key) return seq_of(k) == s.seq;
    k.time_ns = s.time_ns;
    k.tag = (s.seq << kSlotBits) | slot;
    s.live_key = true;
    converted = true;
    return true;
  };
  Key* h = heap_.get();
  std::size_t out = 0;
  bool converted;
  for (std::size_t i = 0; i < heap_size_; ++i) {
    Key k = h[i];
    if (keep(k, converted)) h[out++] = k;
  }
  heap_size_ = out;
  // The wheel, bucket by bucket in FIFO order; a carrier's live key (an old sequence number)
  // moves to the heap.
  std::vector<Key> moved;
  for (std::uint64_t sum = summary_; sum != 0; sum &= sum - 1) {
    const auto w = static_cast<std::size_t>(__builtin_ctzll(sum));
    for (std::uint64_t bits = bits_[w]; bits != 0; bits &= bits - 1) {
      const std::size_t b = (w << 6) | static_cast<std::size_t>(__builtin_ctzll(bits));
      std::uint32_t kept_head = kNil, kept_tail = kNil;
      for (std::uint32_t n = buckets_[b].head; n != kNil;) {
        const std::uint32_t next = nodes_[n].next;
        Key k = nodes_[n].key;
        if (keep(k, converted) && !converted) {
          if (kept_tail == kNil)
            kept_head = n;
          else
            nodes_[kept_tail].next = n;
          kept_tail = n;
        } else {
          if (converted) moved.push_back(k);
          nodes_[n].next = free_node_;
          free_node_ = n;
          --wheel_keys_;
        }
        n = next;
      }
      if (kept_tail == kNil) {
        bits_[w] &= ~(1ULL << (b & 63));
      } else {
        nodes_[kept_tail].next = kNil;
      }
      buckets_[b] = Bucket{kept_head, kept_tail};
    }
    if (bits_[w] == 0) summary_ &= ~(1ULL << w);
  }
  heap_reserve(heap_size_ + moved.size());
  h = heap_.get();
  for (const Key& k : moved) h[heap_size_++] = k;
  for (std::uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state == SlotState::kPending) {
      s.keys = 1;
    } else if (s.state == SlotState::kDone) {
      s.keys = 0;
      s.state = SlotState::kFree;
      free_.push_back(i);
    }
  }
  WEFT_ASSERT(keys() == pending_);
  if (renumber) {
    // Every key in order, new sequence numbers 0..n-1 (the order kept), then each key back to
    // the wheel (in order, so each bucket stays in sequence order) or the heap (sorted keys
    // form a valid heap).
    std::vector<Key> all(h, h + heap_size_);
    all.reserve(pending_);
    for (std::uint64_t sum = summary_; sum != 0; sum &= sum - 1) {
      const auto w = static_cast<std::size_t>(__builtin_ctzll(sum));
      for (std::uint64_t bits = bits_[w]; bits != 0; bits &= bits - 1) {
        const std::size_t b = (w << 6) | static_cast<std::size_t>(__builtin_ctzll(bits));
        for (std::uint32_t n = buckets_[b].head; n != kNil; n = nodes_[n].next)
          all.push_back(nodes_[n].key);
      }
    }
    wheel_clear();
    heap_size_ = 0;
    heap_reserve(all.size());
    h = heap_.get();
    std::sort(all.begin(), all.end(), less);
    for (std::size_t i = 0; i < all.size(); ++i) {
      Key& k = all[i];
      const std::uint32_t slot = slot_of(k);
      if (slot != kNoSlot) slots_[slot].seq = i;
      k.tag = (static_cast<std::uint64_t>(i) << kSlotBits) | slot;
      if (k.time_ns - base_ < kWheelSlots)
        wheel_append(k);
      else
        h[heap_size_++] = k;
    }
    seq_ = all.size();
    WEFT_ASSERT_MSG(seq_ < seq_limit_, "EventQueue: more pending events than sequence numbers");
    return;
  }
  // Floyd's bottom-up heap construction, O(n).
  if (heap_size_ > 1) {
    for (std::size_t i = (heap_size_ - 2) / kArity + 1; i-- > 0;) sift_down(i, h[i]);
  }
}

}  // namespace weft::sim
