// emu/sim/event_queue.hpp — the pending-event set of the simulation kernel.
//
// What it is: a priority queue of events ordered by (time, insertion sequence), so events at
// the same virtual time come out in the order they were scheduled and every run replays
// exactly. It holds millions of pending events without a heap allocation per event:
//   - the order lives in a 4-ary min-heap of 32-byte keys {time, seq<<kSlotBits | slot, data,
//     component, kind} that carry the whole event, laid out so that the four children of a
//     node fill two aligned 64-byte cache lines (a binary heap needs twice the levels).
//     Deletion is bottom-up (Wegener) with the grandchildren prefetched, because each level's
//     address depends on the previous level's comparisons and the misses would be serial;
//   - events that can be cancelled or re-armed (push(): timers) also own a record in a pooled
//     slab (recycled through a free list) that holds their handle generation and current
//     time; fire-and-forget events (post(): packet arrivals, the bulk of a fabric simulation)
//     have none, so popping them touches nothing but the heap.
// Cancellation and re-arming are lazy, so the heap never has to track where a key sits (which
// would cost a random write into the slab at every level of every sift):
//   - cancel() marks the slot; its key stays in the heap as a stale key, skipped when it
//     surfaces. When stale keys outnumber live ones the heap is compacted in place
//     (amortized O(1) per cancel), so a timer cancelled over and over cannot grow memory.
//   - reschedule() to a later time (the common case: a retransmission timer pushed back on every
//     ACK) is O(1): the slot takes the new time and sequence and its old key becomes a carrier
//     that re-inserts the event when it surfaces. To an earlier time it pushes a new key.
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

  explicit EventQueue(const EventQueueConfig& config = {});
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // Schedules an event that can be cancelled or re-armed; returns its handle.
  EventId push(TimeNs time_ns, ComponentId component, EventKind kind, std::uint64_t data = 0);
  // Schedules an event that cannot be cancelled (no slab record): the fast path.
  void post(TimeNs time_ns, ComponentId component, EventKind kind, std::uint64_t data = 0) {
    ++pending_;
    heap_push(Key{time_ns, next_tag(kNoSlot), data, component, kind});
  }

  // Removes the earliest pending event into `out`; false when nothing is pending.
  bool pop(Event& out);
  // pop() right after peek_time() returned a time (not kNoDeadline): the top is settled, so
  // this skips looking at it again.
  void pop_peeked(Event& out);

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
  // Internal figures for tests and benchmarks.
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

  std::uint64_t next_seq();
  void heap_push(Key k);
  void heap_pop_top();
  void sift_down(std::size_t i, Key k);
  void heap_reserve(std::size_t n);
  void release_key(std::uint32_t slot);
  // Drops stale keys from the top and turns surfacing carriers into live keys, until the top
  // key is a live key or the heap is empty.
  void settle_top();
  void maybe_rebuild();
  void rebuild(bool renumber);
  std::uint64_t next_tag(std::uint32_t slot) { return (next_seq() << kSlotBits) | slot; }

  EventQueueConfig config_;
  std::uint64_t seq_limit_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::unique_ptr<Key, AlignedFree> heap_;
  std::size_t heap_size_ = 0;
  std::size_t heap_cap_ = 0;
  std::size_t pending_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t rebuilds_ = 0;
};

}  // namespace weft::sim
