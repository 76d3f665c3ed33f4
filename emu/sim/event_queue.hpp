// emu/sim/event_queue.hpp — the pending-event set of the simulation kernel.
//
// What it is: a priority queue of events ordered by (time, insertion sequence), so events at
// the same virtual time come out in the order they were scheduled and every run replays
// exactly. It holds millions of pending events without a heap allocation per event. Two
// structures hold 32-byte keys {time, seq<<kSlotBits | slot, data, component, kind} that carry
// the whole event:
//   - a timing wheel of 1-ns buckets covering the next kWheelSlots ns after the last popped
//     time (`base_`): a key scheduled inside that window with a fresh sequence number (every
//     post() and push(), the bulk of a fabric simulation: serialization, propagation, switch
//     and HCA latencies are all well under 4 us) is appended to its bucket's FIFO (a singly-linked
//     list of pooled nodes, head and tail per bucket); a bitmap of non-empty buckets with a
//     one-word summary finds the next bucket with two tzcnt. One bucket holds one time, and keys
//     enter it in sequence order, so its FIFO order is the (time, seq) order. O(1) both ways;
//   - a 4-ary min-heap (children of a node fill two aligned 64-byte cache lines; bottom-up
//     deletion) for everything else: keys beyond the window (timers), keys earlier than the
//     window (EventQueue used on its own may schedule before the last popped time) and keys
//     re-inserted with an old sequence number (a re-armed timer's carrier, below).
//   The earliest event is the lesser of the wheel's first key and the heap's top by (time,
//   seq), so the order is exactly that of one priority queue (measured against a binary heap
//   and the previous 4-ary heap alone in bench/sim/event_queue_bench.cpp).
//   - events that can be cancelled or re-armed (push(): timers) also own a record in a pooled
//     slab (recycled through a free list) that holds their handle generation and current
//     time; fire-and-forget events (post(): packet arrivals) have none, so popping them
//     touches nothing but the wheel or the heap.
// Cancellation and re-arming are lazy, so neither structure has to track where a key sits:
//   - cancel() marks the slot; its key stays as a stale key, skipped when it surfaces. When
//     stale keys outnumber live ones both structures are compacted in place (amortized O(1)
//     per cancel), so a timer cancelled over and over cannot grow memory.
//   - reschedule() to a later time (the common case: a retransmission timer pushed back on every
//     ACK) is O(1): the slot takes the new time and sequence and its old key becomes a carrier
//     that re-inserts the event (into the heap) when it surfaces. To an earlier time it
//     schedules a new key.
// Sequence numbers are 37 bits (kSeqLimit); on overflow the pending events are renumbered in
// order, which keeps the order and costs one O(n log n) pass every 1.3e11 events.
//
// Handles (EventId) carry a generation, so a stale handle (fired, cancelled, slot reused) is
// recognised and refused rather than acting on somebody else's event.
//
// Thread-safety: none; one owner (the Simulator). Lifetime: handles stay safe to pass (they
// are refused) after their event fired; Event values returned by pop() are copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include <weft/types.hpp>

namespace weft::sim {

using ComponentId = std::uint32_t;
using EventKind = std::uint32_t;

inline constexpr ComponentId kNoComponent = UINT32_MAX;

// A handle to a scheduled event. Default-constructed = "no event" (refused by cancel etc.).
struct EventId {
  std::uint32_t slot = UINT32_MAX;
  std::uint32_t gen = 0;
  bool valid() const { return slot != UINT32_MAX; }
  friend bool operator==(const EventId&, const EventId&) = default;
};

// What a component receives. `data` is an opaque 64-bit word chosen by whoever scheduled it
// (a packet slot, a port number, a pointer); the kernel never looks at it. `id` is the handle
// push() returned, or invalid for a post()ed event.
struct Event {
  TimeNs time_ns = 0;
  ComponentId component = kNoComponent;
  EventKind kind = 0;
  std::uint64_t data = 0;
  EventId id{};
};

struct EventQueueConfig {
  std::size_t reserve_events = 1024;  // slab and heap capacity reserved up front
  // Renumber sequence numbers when this many have been handed out (tests lower it).
  std::uint64_t seq_limit = 0;  // 0 = kSeqLimit
  // Rebuild when stale keys exceed live keys plus this slack.
  std::size_t stale_slack_keys = 4096;
};

class EventQueue {
 public:
  static constexpr unsigned kSlotBits = 27;
  static constexpr std::uint64_t kSlotsMax = (1ULL << kSlotBits) - 1;  // slab records
  static constexpr std::uint32_t kNoSlot = (1U << kSlotBits) - 1;      // a post()ed key
  static constexpr std::uint64_t kSeqLimit = 1ULL << (64 - kSlotBits);
  // The wheel: 4,096 buckets of 1 ns (16 KiB of bucket tails, 512 bytes of bitmap).
  static constexpr unsigned kWheelBits = 12;
  static constexpr std::size_t kWheelSlots = std::size_t{1} << kWheelBits;

  explicit EventQueue(const EventQueueConfig& config = {});
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // Schedules an event that can be cancelled or re-armed; returns its handle.
  EventId push(TimeNs time_ns, ComponentId component, EventKind kind, std::uint64_t data = 0);
  // Schedules an event that cannot be cancelled (no slab record): the fast path.
  // The common case (inside the window, a free node, no renumbering due) makes no call.
  void post(TimeNs time_ns, ComponentId component, EventKind kind, std::uint64_t data = 0) {
    if (time_ns - base_ < kWheelSlots && free_node_ != kNil && seq_ < seq_limit_) [[likely]] {
      ++pending_;
      top_ = Top::kUnknown;
      wheel_link(Key{time_ns, (seq_++ << kSlotBits) | kNoSlot, data, component, kind});
      return;
    }
    post_slow(time_ns, component, kind, data);
  }

  // Removes the earliest pending event into `out`; false when nothing is pending.
  bool pop(Event& out);
  // pop() right after peek_time() returned a time (not kNoDeadline): the top is settled, so
  // this skips looking at it again.
  void pop_peeked(Event& out);
  // Removes the earliest pending event into `out` if its time is <= limit; false (nothing
  // removed) when nothing is pending or the earliest lies later. The Simulator's loop: one call
  // per event instead of peek_time() and pop_peeked().
  bool pop_until(TimeNs limit, Event& out) {
    if (wheel_keys_ > 0) {
      const std::size_t b = wheel_first_bucket();
      Bucket& bucket = buckets_[b];
      const std::uint32_t n = bucket.head;
      Node& node = nodes_[n];
      if (slot_of(node.key) == kNoSlot && node.key.time_ns <= limit &&
          (heap_size_ == 0 || less(node.key, heap_.get()[0]))) [[likely]] {
        out.time_ns = node.key.time_ns;
        out.component = node.key.component;
        out.kind = node.key.kind;
        out.data = node.key.data;
        out.id = EventId{};
        base_ = node.key.time_ns;  // (a wheel key is never before base_)
        bucket.head = node.next;
        if (node.next == kNil) {
          std::uint64_t& word = bits_[b >> 6];
          word &= ~(1ULL << (b & 63));
          if (word == 0) summary_ &= ~(1ULL << (b >> 6));
        }
        node.next = free_node_;
        free_node_ = n;
        --wheel_keys_;
        --pending_;
        top_ = Top::kUnknown;
        return true;
      }
    }
    return pop_until_slow(limit, out);
  }

  // Time of the earliest pending event, kNoDeadline when none. Not const: it discards stale
  // keys that have surfaced at the top.
  TimeNs peek_time();

  // False (and no effect) when `id` is not pending (fired, cancelled, or never was).
  bool cancel(EventId id);
  // Moves a pending event to `time_ns`, keeping its handle; it is ordered as if scheduled now
  // (after events already scheduled for the same time). False when `id` is not pending.
  bool reschedule(EventId id, TimeNs time_ns);
  bool pending(EventId id) const;
  // Scheduled time of a pending event, kNoDeadline if not pending.
  TimeNs time_of(EventId id) const;

  std::size_t size() const { return pending_; }  // pushed and posted, not yet popped
  bool empty() const { return pending_ == 0; }
  // Internal figures for tests and benchmarks: keys held (live, stale and carriers) in the
  // wheel and the heap, and in the heap alone.
  std::size_t keys() const { return heap_size_ + wheel_keys_; }
  std::size_t heap_keys() const { return heap_size_; }
  std::size_t slab_slots() const { return slots_.size(); }
  std::uint64_t rebuilds() const { return rebuilds_; }

 private:
  enum class SlotState : std::uint8_t { kFree, kPending, kDone };

  // The slab record of a push()ed event: what cancel and reschedule need.
  struct Slot {
    TimeNs time_ns;
    std::uint64_t seq;
    std::uint64_t data;  // the payload again, for a re-arm to an earlier time
    ComponentId component;
    EventKind kind;
    std::uint32_t gen;
    std::uint32_t keys;  // heap keys that name this slot
    SlotState state;
    bool live_key;  // a key with (time_ns, seq) is in the heap
  };

  struct Key {
    TimeNs time_ns;
    std::uint64_t tag;  // seq << kSlotBits | slot (kNoSlot for post())
    std::uint64_t data;
    ComponentId component;
    EventKind kind;
  };
  static_assert(sizeof(Key) == 32);

  // (time, tag) as one 128-bit number: compiles to cmp/sbb, no branch.
  static bool less(const Key& a, const Key& b) {
    return ((static_cast<unsigned __int128>(a.time_ns) << 64) | a.tag) <
           ((static_cast<unsigned __int128>(b.time_ns) << 64) | b.tag);
  }
  static std::uint32_t slot_of(const Key& k) { return static_cast<std::uint32_t>(k.tag & kNoSlot); }
  static std::uint64_t seq_of(const Key& k) { return k.tag >> kSlotBits; }

  // The heap buffer: index 0 sits at byte 32 of a 64-byte line, so children 4i+1..4i+4 of
  // every node fill exactly two cache lines.
  struct AlignedFree {
    void operator()(Key* p) const { ::operator delete (p - 1, std::align_val_t{64}); }
  };

  // A wheel node: a key and the next node of its bucket's list (or of the free list).
  struct Node {
    Key key;
    std::uint32_t next;
  };
  static constexpr std::uint32_t kNil = UINT32_MAX;
  // Where the settled top key is (valid until the next change to the queue).
  enum class Top : std::uint8_t { kUnknown, kWheel, kHeap, kEmpty };

  // A key with a sequence number newer than every key held: the wheel if its time lies in
  // the window, else the heap.
  void insert_fresh(const Key& k) {
    top_ = Top::kUnknown;
    if (k.time_ns - base_ < kWheelSlots)  // (unsigned: a time before base_ goes to the heap)
      wheel_append(k);
    else
      heap_push(k);
  }
  void wheel_append(const Key& k) {
    if (free_node_ == kNil) [[unlikely]]
      grow_nodes();
    wheel_link(k);
  }
  // wheel_append with a free node at hand.
  void wheel_link(const Key& k) {
    const std::uint32_t n = free_node_;
    Node& node = nodes_[n];
    free_node_ = node.next;
    node.key = k;
    node.next = kNil;
    const std::size_t b = k.time_ns & (kWheelSlots - 1);
    Bucket& bucket = buckets_[b];
    if (bucket.head == kNil) {
      bucket.head = n;
      bits_[b >> 6] |= 1ULL << (b & 63);
      summary_ |= 1ULL << (b >> 6);
    } else {
      nodes_[bucket.tail].next = n;
    }
    bucket.tail = n;
    ++wheel_keys_;
  }
  // The first non-empty bucket at or after base_'s (circularly); the wheel is not empty.
  std::size_t wheel_first_bucket() const {
    const std::size_t p = base_ & (kWheelSlots - 1);
    std::size_t w = p >> 6;
    const std::uint64_t here = bits_[w] & (~0ULL << (p & 63));
    if (here != 0) return (w << 6) | static_cast<std::size_t>(__builtin_ctzll(here));
    const std::uint64_t above = summary_ & (~1ULL << w);  // words after w
    w = static_cast<std::size_t>(__builtin_ctzll(above != 0 ? above : summary_));
    return (w << 6) | static_cast<std::size_t>(__builtin_ctzll(bits_[w]));
  }
  void wheel_pop_front(std::size_t b);
  void post_slow(TimeNs time_ns, ComponentId component, EventKind kind, std::uint64_t data);
  // pop_until past its fast path (a posted key first in the wheel, nothing earlier in the heap).
  bool pop_until_slow(TimeNs limit, Event& out);
  // The least key of the wheel and the heap, with top_ and top_bucket_ set; nullptr (top_ =
  // kEmpty) when nothing is held.
  const Key* find_top();
  // For a top key that names a slot and is not its live key: drops it (stale) or turns it into
  // the live key (a carrier, re-inserted in the heap).
  void retire_top(const Key& top, std::uint32_t slot);
  // Removes the top key (found by find_top) into `out`.
  void take_top(const Key& top, Event& out);
  void grow_nodes();
  void wheel_clear();
  void remove_top();

  std::uint64_t next_seq();
  void heap_push(Key k);
  void heap_pop_top();
  void sift_down(std::size_t i, Key k);
  void heap_reserve(std::size_t n);
  void release_key(std::uint32_t slot);
  // Drops stale keys from the top and turns surfacing carriers into live keys, until the top
  // key is a live key or nothing is held; sets top_ (and top_bucket_).
  void settle_top();
  void maybe_rebuild();
  void rebuild(bool renumber);
  std::uint64_t next_tag(std::uint32_t slot) { return (next_seq() << kSlotBits) | slot; }

  EventQueueConfig config_;
  std::uint64_t seq_limit_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  // The wheel. All its keys lie in [base_, base_ + kWheelSlots).
  std::vector<Node> nodes_;
  std::uint32_t free_node_ = kNil;
  struct Bucket {
    std::uint32_t head;  // kNil: empty
    std::uint32_t tail;
  };
  std::vector<Bucket> buckets_;
  std::uint64_t bits_[kWheelSlots / 64] = {};  // non-empty buckets
  std::uint64_t summary_ = 0;                  // non-empty words of bits_
  static_assert(kWheelSlots / 64 <= 64, "one summary word");
  std::size_t wheel_keys_ = 0;
  TimeNs base_ = 0;  // the latest popped time (never decreases)
  Top top_ = Top::kUnknown;
  std::size_t top_bucket_ = 0;
  std::unique_ptr<Key, AlignedFree> heap_;
  std::size_t heap_size_ = 0;
  std::size_t heap_cap_ = 0;
  std::size_t pending_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t rebuilds_ = 0;
};

}  // namespace weft::sim
