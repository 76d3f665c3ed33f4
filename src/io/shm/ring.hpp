// io/shm/ring.hpp — a single-producer single-consumer ring of variable-length records in shared
// memory (one per direction of a shared-memory link).
//
// Layout: a RingShared control block (three cache lines) and `capacity` data bytes (a power of
// two), both inside the segment both processes map. Indices are free-running byte counts.
// Protocol (who writes what, with which memory order):
// - tail: written only by the producer, with release, after the records it covers are fully
//   written; read by the consumer with acquire.
// - head: written only by the consumer, with release, after it is done reading the records it
//   frees; read by the producer with acquire (before it reuses the bytes).
// - consumer_sleeping: the consumer stores 1 (seq_cst) and then re-reads tail (seq_cst) before it
//   blocks; the producer, after storing tail, issues a seq_cst fence and, if it sees 1, exchanges
//   it to 0 and rings the consumer's doorbell (an eventfd). Either the consumer sees the new tail
//   or the producer sees the flag (Dekker), so no wake-up is lost and a busy consumer costs the
//   producer no syscall.
// - producer_waiting: the same handshake the other way. A producer that cannot go on (the ring is
//   full, or the medium bounds what it may queue) stores 1 (seq_cst) and re-checks head; the
//   consumer, after storing head, fences and, if it sees 1, exchanges it to 0 and rings the
//   producer's doorbell. Without it a producer whose peer sends nothing back (READ responses,
//   unacknowledged WRITE streams) would wait for its retransmission timer.
// Each side keeps its own index and a cached copy of the other's in private memory, so the shared
// lines move only when a side runs out of what it knows.
// Records: an 8-byte RecordHeader {bytes, kind, flags}, then `bytes` bytes, padded to 8. A record
// never wraps; a kSkip record fills the end of the data area instead.
//
// Thread-safety: one producer thread and one consumer thread (in any processes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/base/assert.hpp"

namespace weft::io::shm {

struct alignas(64) RingShared {
  alignas(64) std::atomic<std::uint64_t> tail;  // producer -> consumer
  alignas(64) std::atomic<std::uint64_t> head;  // consumer -> producer
  alignas(64) std::atomic<std::uint32_t> consumer_sleeping;
  std::atomic<std::uint32_t> producer_waiting;
};
static_assert(sizeof(RingShared) == 192);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

enum class RecordKind : std::uint16_t { kSkip = 0, kWire = 1, kByRef = 2, kUser = 3 };

struct RecordHeader {
  std::uint32_t bytes;  // record body, without this header and without padding
  RecordKind kind;
  std::uint16_t flags;
};
static_assert(sizeof(RecordHeader) == 8);

inline constexpr std::size_t record_span(std::size_t body) {
  return sizeof(RecordHeader) + ((body + 7) & ~std::size_t{7});
}

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingShared* shared, std::uint8_t* data, std::size_t capacity)
      : s_(shared), data_(data), cap_(capacity) {
    WEFT_ASSERT(capacity >= 4096 && (capacity & (capacity - 1)) == 0);
    tail_ = published_ = s_->tail.load(std::memory_order_relaxed);
    head_cached_ = s_->head.load(std::memory_order_acquire);
  }
  // Largest body one record may have.
  std::size_t body_max() const { return cap_ / 4; }

  // Room for a record of `body` bytes (allowing for a skip at the end)? Refreshes head on need.
  bool can_reserve(std::size_t body) {
    const std::size_t need = record_span(body) + skip_needed(body);
    if (free_bytes() >= need) return true;
    head_cached_ = s_->head.load(std::memory_order_acquire);
    return free_bytes() >= need;
  }
  // A body of `body` bytes to fill, or nullptr when the ring is full. Complete it with commit().
  std::uint8_t* reserve(std::size_t body) {
    WEFT_ASSERT(body <= body_max());
    if (!can_reserve(body)) return nullptr;
    if (const std::size_t skip = skip_needed(body)) {
      auto* h = reinterpret_cast<RecordHeader*>(data_ + pos_in(tail_));
      *h = RecordHeader{static_cast<std::uint32_t>(skip - sizeof(RecordHeader)), RecordKind::kSkip,
                        0};
      tail_ += skip;
    }
    return data_ + pos_in(tail_) + sizeof(RecordHeader);
  }
  void commit(std::size_t body, RecordKind kind, std::uint16_t flags = 0) {
    auto* h = reinterpret_cast<RecordHeader*>(data_ + pos_in(tail_));
    *h = RecordHeader{static_cast<std::uint32_t>(body), kind, flags};
    tail_ += record_span(body);
  }
  // The producer's index (after the last committed record) and the consumer's, refreshed.
  std::uint64_t tail() const { return tail_; }
  std::uint64_t consumed() {
    head_cached_ = s_->head.load(std::memory_order_acquire);
    return head_cached_;
  }
  // Announces that the producer waits for the consumer to free space (see the file comment);
  // returns the consumer's index as re-read afterwards, so the caller can re-check its condition.
  std::uint64_t wait_for_consumer() {
    s_->producer_waiting.store(1, std::memory_order_seq_cst);
    head_cached_ = s_->head.load(std::memory_order_seq_cst);
    return head_cached_;
  }
  // Makes committed records visible. Returns true when the consumer sleeps and must be woken.
  bool publish() {
    // Compare with a private copy: reading the shared tail line on every idle pass costs a
    // cache miss whenever the consumer has just read it.
    if (published_ == tail_) return false;
    published_ = tail_;
    s_->tail.store(tail_, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return s_->consumer_sleeping.load(std::memory_order_relaxed) &&
           s_->consumer_sleeping.exchange(0, std::memory_order_acq_rel);
  }

 private:
  std::size_t pos_in(std::uint64_t idx) const { return idx & (cap_ - 1); }
  std::size_t free_bytes() const { return cap_ - (tail_ - head_cached_); }
  // Bytes of kSkip needed before a record of `body` bytes (0 when it fits before the end).
  std::size_t skip_needed(std::size_t body) const {
    const std::size_t left = cap_ - pos_in(tail_);
    return left >= record_span(body) ? 0 : left;
  }
  RingShared* s_ = nullptr;
  std::uint8_t* data_ = nullptr;
  std::size_t cap_ = 0;
  std::uint64_t tail_ = 0, head_cached_ = 0, published_ = 0;
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingShared* shared, std::uint8_t* data, std::size_t capacity)
      : s_(shared), data_(data), cap_(capacity) {
    head_ = s_->head.load(std::memory_order_relaxed);
    tail_cached_ = s_->tail.load(std::memory_order_acquire);
  }
  // The next record, or nullptr when the ring is empty. Stays valid until pop().
  const RecordHeader* peek() {
    for (;;) {
      if (head_ == tail_cached_) {
        // Start fetching the next record's line with the tail's, not after it: two cache-line
        // transfers overlap instead of following each other when a record arrives.
        __builtin_prefetch(data_ + (head_ & (cap_ - 1)));
        tail_cached_ = s_->tail.load(std::memory_order_acquire);
        if (head_ == tail_cached_) return nullptr;
      }
      const auto* h = reinterpret_cast<const RecordHeader*>(data_ + (head_ & (cap_ - 1)));
      if (h->kind != RecordKind::kSkip) return h;
      head_ += record_span(h->bytes);
    }
  }
  static const std::uint8_t* body(const RecordHeader* h) {
    return reinterpret_cast<const std::uint8_t*>(h + 1);
  }
  void pop() {
    const auto* h = reinterpret_cast<const RecordHeader*>(data_ + (head_ & (cap_ - 1)));
    head_ += record_span(h->bytes);
  }
  // Frees everything popped so far for the producer. Returns true when the producer waits for
  // space and must be woken.
  bool release() {
    if (s_->head.load(std::memory_order_relaxed) == head_) return false;
    s_->head.store(head_, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return s_->producer_waiting.load(std::memory_order_relaxed) &&
           s_->producer_waiting.exchange(0, std::memory_order_acq_rel);
  }
  bool empty() {
    return head_ == tail_cached_ &&
           (tail_cached_ = s_->tail.load(std::memory_order_acquire)) == head_;
  }
  // Sleep protocol (see the file comment). prepare_sleep() returns false when records arrived.
  bool prepare_sleep() {
    s_->consumer_sleeping.store(1, std::memory_order_seq_cst);
    if (s_->tail.load(std::memory_order_seq_cst) != head_) {
      s_->consumer_sleeping.store(0, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void finish_sleep() { s_->consumer_sleeping.store(0, std::memory_order_relaxed); }

 private:
  RingShared* s_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::size_t cap_ = 0;
  std::uint64_t head_ = 0, tail_cached_ = 0;
};

}  // namespace weft::io::shm
