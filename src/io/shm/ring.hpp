// io/shm/ring.hpp — a single-producer single-consumer ring of variable-length records in shared
// memory (one per direction of a shared-memory link).
//
// Layout: a RingShared control block (three cache lines) and `capacity` data bytes (a power of
// two), both inside the segment both processes map. Indices are free-running byte counts.
// Protocol (who writes what, with which memory order):
// - Record headers carry the publication. Every record starts with an 8-byte RecordHeader, stored
//   as one 64-bit word; kind kEmpty (0) means "nothing published here yet". The producer keeps
//   the header word at its tail position zero (kEmpty) at all times a consumer may look at it:
//   when it publishes a batch it first stores a zero header just past the batch's last record
//   (relaxed), then the batch's first header (release; the others were stored before it,
//   relaxed). The consumer loads the header at its head with acquire and stops at kEmpty. So a
//   record arrives in one cache-line transfer (the line the consumer polls is the one holding the
//   record) instead of two (the tail index, then the record), and a batch appears all at once.
//   The producer never fills the ring completely: it keeps 8 bytes free for that zero header.
//   The batch's last header carries kFlagBatchEnd (stored before the first header's release).
//   It zeroes the header words ahead of time (kZeroAheadBytes past its tail, free space only, right
//   after each publish), so a batch ending there needs no zero store at publish: that store's line
//   was one the consumer had prefetched, and under x86's store order the batch's first header
//   could not become visible before that line came back (an extra line round trip per message).
// - tail: stored by the producer at publish (relaxed), informational (a producer re-created on
//   the same ring starts there); the consumer does not read it.
// - head: written only by the consumer, with release, after it is done reading the records it
//   frees; read by the producer with acquire (before it reuses the bytes).
// - consumer_sleeping: the consumer stores 1 (seq_cst) and then re-reads the header at its head
//   (seq_cst) before it blocks; the producer, after storing the batch's first header, issues a
//   seq_cst fence and, if it sees 1, exchanges it to 0 and rings the consumer's doorbell (an
//   eventfd). Either the consumer sees the new record or the producer sees the flag (Dekker), so
//   no wake-up is lost and a busy consumer costs the producer no syscall.
// - producer_waiting: the same handshake the other way. A producer that cannot go on (the ring is
//   full, or the medium bounds what it may queue) stores 1 (seq_cst) and re-checks head; the
//   consumer, after storing head, fences and, if it sees 1, exchanges it to 0 and rings the
//   producer's doorbell. Without it a producer whose peer sends nothing back (READ responses,
//   unacknowledged WRITE streams) would wait for its retransmission timer.
// - producer_beat_ns / producer_cpu: see RingShared; a hint for the consumer's idle policy, no
//   part of the record protocol.
// Each side keeps its own index and a cached copy of the other's in private memory, so the head
// line moves only when the producer runs out of space it knows to be free.
// Records: an 8-byte RecordHeader {bytes, kind, flags}, then `bytes` bytes, padded to a cache
// line (kRecordAlign, 64). A record
// never wraps; a kSkip record fills the end of the data area instead.
//
// Thread-safety: one producer thread and one consumer thread (in any processes).
#pragma once

#include <algorithm>
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
  // The producer process's heartbeat (segment version 5): the monotonic time of its latest pass
  // over this medium and the CPU it ran on, both stored relaxed by the producer (at most once per
  // clock reading), read relaxed by the consumer when it idles (a hint: a torn pair only makes
  // one idle decision wrong). Before one long copy the time may lie ahead: when the copy should
  // be done (shm_medium.hpp kSlowCopyBytesPerNs). Lets the consumer tell a peer that is running on
  // another CPU (keep polling) from one that is asleep, preempted or waiting for this very CPU
  // (block).
  alignas(64) std::atomic<std::uint64_t> producer_beat_ns;
  std::atomic<std::uint32_t> producer_cpu;
};
static_assert(sizeof(RingShared) == 256);
inline constexpr std::uint32_t kNoCpu = ~0u;  // producer_cpu before the first beat
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// kEmpty must be 0: a zeroed data area holds no records. kByRefFrom: a by-reference record whose
// payload is in a third process, named in the record (the fabric daemon forwards a sender's
// record to the receiver untouched; shm_medium.hpp ByRefFrom). kByRefRun: one record for a run of
// one QP's MIDDLE packets by reference (segment format 7; shm_medium.hpp ByRefRun).
enum class RecordKind : std::uint16_t {
  kEmpty = 0,
  kWire = 1,
  kByRef = 2,
  kUser = 3,
  kSkip = 4,
  kByRefFrom = 5,
  kByRefRun = 6
};

struct RecordHeader {
  std::uint32_t bytes;  // record body, without this header and without padding
  RecordKind kind;
  std::uint16_t flags;
};
static_assert(sizeof(RecordHeader) == 8 && alignof(RecordHeader) <= 8);
// A RecordHeader::flags bit the ring itself sets (segment format 6): this record is the last of
// its batch (publish() sets it). A consumer may stop there and leave the next record's line alone
// until its next poll: that line is in the producer's cache (zero_ahead stored its header word,
// or the producer is writing the next record there), so a look right after the batch waits for a
// line transfer (0.05-0.2 us here, by the placement of the two vCPUs) before the consumer can
// act on what it read, e.g. send the reply: on a ping-pong's path once per message (8 B WRITE
// latency -20 ns, bench/io/README.md session 21). A hint: a consumer that reads on finds the
// same records. The callers' flags stay below it.
inline constexpr std::uint16_t kFlagBatchEnd = 0x8000;

// Records take whole cache lines: every header the consumer polls starts a line, so a small
// record (an ACK, an 8-byte WRITE: at most 64 bytes with its header) arrives in one line transfer
// and never straddles two (with 8-byte padding, a mix of 40- and 64-byte records left most
// WRITEs across a line boundary).
inline constexpr std::size_t kRecordAlign = 64;
// How far ahead of its head the consumer prefetches (RingConsumer::peek).
inline constexpr std::size_t kPrefetchAheadBytes = 8 * kRecordAlign;
// How far past its tail the producer keeps the header words zero (RingProducer::zero_ahead):
// beyond what a batch of small records spans, so that publishing one stores only its own lines.
inline constexpr std::size_t kZeroAheadBytes = 64 * kRecordAlign;
inline constexpr std::size_t record_span(std::size_t body) {
  return (sizeof(RecordHeader) + body + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

namespace detail {
// A header is published and read as one 64-bit word (records start 8-byte aligned).
inline std::uint64_t pack(const RecordHeader& h) {
  std::uint64_t w;
  std::memcpy(&w, &h, sizeof w);
  return w;
}
inline RecordHeader unpack(std::uint64_t w) {
  RecordHeader h;
  std::memcpy(&h, &w, sizeof h);
  return h;
}
inline std::atomic_ref<std::uint64_t> word_at(const std::uint8_t* p) {
  return std::atomic_ref<std::uint64_t>(
      *reinterpret_cast<std::uint64_t*>(const_cast<std::uint8_t*>(p)));
}
}  // namespace detail

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingShared* shared, std::uint8_t* data, std::size_t capacity)
      : s_(shared), data_(data), cap_(capacity) {
    WEFT_ASSERT(capacity >= 4096 && (capacity & (capacity - 1)) == 0);
    tail_ = published_ = zeroed_until_ = s_->tail.load(std::memory_order_relaxed);
    head_cached_ = s_->head.load(std::memory_order_acquire);
  }
  // Largest body one record may have.
  std::size_t body_max() const { return cap_ / 4; }

  // Room for a record of `body` bytes (allowing for a skip at the end and the zero header after
  // it)? Refreshes head on need.
  bool can_reserve(std::size_t body) {
    const std::size_t need = record_span(body) + skip_needed(body) + sizeof(RecordHeader);
    if (free_bytes() >= need) return true;
    head_cached_ = s_->head.load(std::memory_order_acquire);
    return free_bytes() >= need;
  }
  // Free bytes, counting what the consumer freed: head is re-read only when fewer than `want`
  // are known free (the head line moves only when the producer runs short).
  std::size_t free_bytes_refreshed(std::size_t want) {
    if (free_bytes() < want) head_cached_ = s_->head.load(std::memory_order_acquire);
    return free_bytes();
  }
  // A body of `body` bytes to fill, or nullptr when the ring is full. Complete it with commit().
  std::uint8_t* reserve(std::size_t body) {
    WEFT_ASSERT(body <= body_max());
    if (!can_reserve(body)) return nullptr;
    if (const std::size_t skip = skip_needed(body)) {
      put_header(RecordHeader{static_cast<std::uint32_t>(skip - sizeof(RecordHeader)),
                              RecordKind::kSkip, 0});
      tail_ += skip;
    }
    return data_ + pos_in(tail_) + sizeof(RecordHeader);
  }
  void commit(std::size_t body, RecordKind kind, std::uint16_t flags = 0) {
    WEFT_ASSERT(kind != RecordKind::kEmpty && (flags & kFlagBatchEnd) == 0);
    last_ = tail_;
    put_header(RecordHeader{static_cast<std::uint32_t>(body), kind, flags});
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
  // The heartbeat (RingShared::producer_beat_ns): this process ran a pass at now_ns on `cpu`.
  void beat(std::uint64_t now_ns, std::uint32_t cpu) {
    s_->producer_beat_ns.store(now_ns, std::memory_order_relaxed);
    s_->producer_cpu.store(cpu, std::memory_order_relaxed);
  }
  // Withdraws the announcement (the producer did not sleep after all, or woke up).
  void cancel_wait() { s_->producer_waiting.store(0, std::memory_order_relaxed); }
  // Makes committed records visible. Returns true when the consumer sleeps and must be woken.
  bool publish() {
    if (published_ == tail_) return false;
    // The header word at the new tail must read kEmpty before the batch appears (can_reserve
    // kept these 8 bytes free): zero_ahead stored it already unless the batch ran past what it
    // zeroed. Then the batch's first header releases the whole batch.
    if (tail_ >= zeroed_until_) {
      detail::word_at(data_ + pos_in(tail_)).store(0, std::memory_order_relaxed);
      zeroed_until_ = tail_ + kRecordAlign;
    }
    // The batch's last record says so (kFlagBatchEnd); its header is not visible yet (the first
    // one releases the batch), so it may be rewritten.
    constexpr std::uint64_t kBatchEndBit = std::uint64_t{kFlagBatchEnd}
                                           << (8 * offsetof(RecordHeader, flags));
    if (last_ == published_) {
      first_ |= kBatchEndBit;
    } else if (last_ > published_) {  // (a batch of nothing but a kSkip has no such record)
      const auto w = detail::word_at(data_ + pos_in(last_));
      w.store(w.load(std::memory_order_relaxed) | kBatchEndBit, std::memory_order_relaxed);
    }
    detail::word_at(data_ + pos_in(published_)).store(first_, std::memory_order_release);
    published_ = tail_;
    s_->tail.store(tail_, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool wake = s_->consumer_sleeping.load(std::memory_order_relaxed) &&
                      s_->consumer_sleeping.exchange(0, std::memory_order_acq_rel);
    zero_ahead();
    return wake;
  }
  // Line starts past the tail known to hold a zero header word (tests look at it).
  std::uint64_t zeroed_until() const { return zeroed_until_; }

 private:
  std::size_t pos_in(std::uint64_t idx) const { return idx & (cap_ - 1); }
  std::size_t free_bytes() const { return cap_ - (tail_ - head_cached_); }
  // Stores a zero header word at every line start in [tail, tail + kZeroAheadBytes) not zeroed
  // yet, within the space known free (below head + capacity: never over an unconsumed record).
  // Every header position is a line start (records are kRecordAlign-aligned, and so is tail).
  // The batches written later cover these words from the tail up, so the words past a batch's
  // end still read zero when it is published. After the publish: these stores queue behind the
  // batch's header, not before it, and their line transfers overlap the peer's work on it.
  void zero_ahead() {
    const std::uint64_t end = std::min<std::uint64_t>(tail_ + kZeroAheadBytes, head_cached_ + cap_);
    for (std::uint64_t i = std::max(zeroed_until_, tail_); i < end; i += kRecordAlign)
      detail::word_at(data_ + pos_in(i)).store(0, std::memory_order_relaxed);
    zeroed_until_ = std::max(zeroed_until_, end);
  }
  // Bytes of kSkip needed before a record of `body` bytes (0 when it fits before the end).
  std::size_t skip_needed(std::size_t body) const {
    const std::size_t left = cap_ - pos_in(tail_);
    return left >= record_span(body) ? 0 : left;
  }
  // The header at tail_: the batch's first is kept back until publish(), the rest are stored
  // now (the consumer cannot reach them before the first).
  void put_header(const RecordHeader& h) {
    if (tail_ == published_)
      first_ = detail::pack(h);
    else
      detail::word_at(data_ + pos_in(tail_)).store(detail::pack(h), std::memory_order_relaxed);
  }
  RingShared* s_ = nullptr;
  std::uint8_t* data_ = nullptr;
  std::size_t cap_ = 0;
  std::uint64_t tail_ = 0, head_cached_ = 0, published_ = 0;
  std::uint64_t zeroed_until_ = 0;  // line starts in [tail_, this) hold zero header words
  std::uint64_t first_ = 0;         // the unpublished batch's first header
  std::uint64_t last_ = 0;          // where the batch's last record starts
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(RingShared* shared, std::uint8_t* data, std::size_t capacity)
      : s_(shared), data_(data), cap_(capacity) {
    head_ = released_ = s_->head.load(std::memory_order_relaxed);
  }
  // The next record, or nullptr when the ring is empty. Stays valid until pop().
  const RecordHeader* peek() {
    for (;;) {
      const std::uint8_t* p = data_ + (head_ & (cap_ - 1));
      const RecordHeader h = detail::unpack(detail::word_at(p).load(std::memory_order_acquire));
      if (h.kind == RecordKind::kEmpty) return nullptr;
      if (h.kind != RecordKind::kSkip) {
        // A batch usually spans more than this line (an ACK and a request are ~110 bytes; a
        // bandwidth stream is one 64-byte by-reference record per 4 KiB): start fetching the
        // next lines while this record is handled, several ahead so that their transfers from
        // the producer's core overlap (each is a cache miss here).
        __builtin_prefetch(p + kRecordAlign);
        __builtin_prefetch(data_ + ((head_ + kPrefetchAheadBytes) & (cap_ - 1)));
        return reinterpret_cast<const RecordHeader*>(p);
      }
      head_ += record_span(h.bytes);
    }
  }
  // Starts fetching the published records of the next `bytes` of the ring (past what peek()
  // prefetches), e.g. before a long copy, so that they arrive while it runs instead of one cache
  // miss per record after it. Reads the producer's tail (relaxed: a stale tail only prefetches
  // less); lines past it are left alone, the producer may be writing them.
  void prefetch_published(std::size_t bytes) const {
    const std::uint64_t tail = s_->tail.load(std::memory_order_relaxed);
    const std::uint64_t end = std::min<std::uint64_t>(tail, head_ + bytes);
    for (std::uint64_t i = head_ + kPrefetchAheadBytes; i < end; i += kRecordAlign)
      __builtin_prefetch(data_ + (i & (cap_ - 1)));
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
    if (released_ == head_) return false;
    released_ = head_;
    s_->head.store(head_, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return s_->producer_waiting.load(std::memory_order_relaxed) &&
           s_->producer_waiting.exchange(0, std::memory_order_acq_rel);
  }
  // Frees everything popped so far without looking at producer_waiting: a waiting producer sees
  // the space when it next looks, and a later release() rings it (the caller must make one).
  void release_quiet() {
    if (released_ == head_) return;
    released_ = head_;
    s_->head.store(head_, std::memory_order_release);
  }
  // Bytes popped but not yet freed for the producer.
  std::uint64_t unreleased() const { return head_ - released_; }
  bool empty() { return header_kind(std::memory_order_acquire) == RecordKind::kEmpty; }
  // A hint for an idle poller (relaxed; peek() is what reads a record): something is at head.
  bool ready() const { return header_kind(std::memory_order_relaxed) != RecordKind::kEmpty; }
  // Sleep protocol (see the file comment). prepare_sleep() returns false when records arrived.
  bool prepare_sleep() {
    s_->consumer_sleeping.store(1, std::memory_order_seq_cst);
    if (header_kind(std::memory_order_seq_cst) != RecordKind::kEmpty) {
      s_->consumer_sleeping.store(0, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void finish_sleep() { s_->consumer_sleeping.store(0, std::memory_order_relaxed); }
  // The producer's heartbeat (RingShared): when and on which CPU it last ran a pass.
  std::uint64_t producer_beat_ns() const {
    return s_->producer_beat_ns.load(std::memory_order_relaxed);
  }
  std::uint32_t producer_cpu() const { return s_->producer_cpu.load(std::memory_order_relaxed); }

 private:
  RecordKind header_kind(std::memory_order mo) const {
    return detail::unpack(detail::word_at(data_ + (head_ & (cap_ - 1))).load(mo)).kind;
  }
  RingShared* s_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::size_t cap_ = 0;
  std::uint64_t head_ = 0;
  std::uint64_t released_ = 0;  // the head last stored (saves reading the shared line)
};

}  // namespace weft::io::shm
