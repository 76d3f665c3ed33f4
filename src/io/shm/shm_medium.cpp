// io/shm/shm_medium.cpp — rings, records, zero copy and peer death (see shm_medium.hpp).
#include "src/io/shm/shm_medium.hpp"

#include <spdlog/spdlog.h>
#include <poll.h>
#include <sys/mman.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>

#include "src/base/log.hpp"
#include "src/io/clock.hpp"

namespace weft::io::shm {
namespace {

constexpr std::uint8_t kOpRcSendMiddle = 0x01;   // IBA Table 35: RC SEND MIDDLE
constexpr std::uint8_t kOpRcWriteMiddle = 0x07;  // RC RDMA WRITE MIDDLE
constexpr std::uint8_t kOpRcCmpSwap = 0x13;      // RC COMPARE SWAP
constexpr std::uint8_t kOpRcFetchAdd = 0x14;     // RC FETCH ADD
// In the BTH (IBA 9.2): byte 8 holds AckReq (its top bit), bytes 9-11 the PSN (big-endian).
constexpr std::size_t kBthAckReqAt = 8, kBthPsnAt = 9;
constexpr std::uint8_t kAckReqBit = 0x80;
constexpr std::uint32_t kPsnMask = 0xFFFFFF;  // PSNs are 24 bits, modulo 2^24 (IBA 9.7.1)

// Where the BTH starts in serialized headers: LRH.LNH 3 means a GRH sits between LRH and BTH
// (IBA 7.7.1).
std::size_t bth_at(const std::uint8_t* headers) {
  return (headers[1] & 3) == 3 ? 48 : 8;
}
std::uint8_t bth_opcode(const std::uint8_t* headers) {
  return headers[bth_at(headers)];
}
std::uint32_t psn_at(const std::uint8_t* bth) {
  return std::uint32_t{bth[kBthPsnAt]} << 16 | std::uint32_t{bth[kBthPsnAt + 1]} << 8 |
         bth[kBthPsnAt + 2];
}
void set_psn(std::uint8_t* bth, std::uint32_t psn) {
  bth[kBthPsnAt] = static_cast<std::uint8_t>(psn >> 16);
  bth[kBthPsnAt + 1] = static_cast<std::uint8_t>(psn >> 8);
  bth[kBthPsnAt + 2] = static_cast<std::uint8_t>(psn);
}

// Whether pkt may travel by reference: zero copy on, a payload worth it, and one that stays put
// until the receiver has pulled it. The Device vouches for the buffer (payload_stable: registered
// memory, not its gather bounce buffer), and the buffer is the application's again only when the
// WR completes, which for RC (BTH opcode bits 7-5 = 000, IBA 9.2) is after the responder's ACK,
// sent after its pull. UD and UC sends complete as soon as they leave (IBA 10.8.3.1): the
// application may reuse or free the buffer before the receiver even looks at the record, so
// their payloads are always copied onto the ring.
// A payload in a pool the peer maps (shm_pool.hpp) qualifies without cross-memory attach.
bool by_reference(bool zero_copy_tx, const Device& dev, const TxPacket& pkt, std::uint8_t op) {
  return zero_copy_tx && pkt.payload_bytes >= kZeroCopyBytesMin && (op >> 5) == 0 &&
         dev.payload_stable(pkt);
}

std::uint64_t slot_bytes(const CopySlot& slot) {
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < slot.count && i < kCopyIovMax; ++i) n += slot.iov[i].len;
  return n;
}

}  // namespace

void CrossMemory::add_window(std::uint64_t remote_base, const std::uint8_t* local,
                             std::size_t bytes) {
  windows_.push_back({remote_base, local, bytes});
}

const CrossMemory::Window* CrossMemory::in_window(const std::uint8_t* src, std::size_t len) const {
  const auto a = reinterpret_cast<std::uint64_t>(src);
  for (const Window& w : windows_)
    if (a >= w.remote_base && len <= w.bytes && a - w.remote_base <= w.bytes - len) return &w;
  return nullptr;
}

const std::uint8_t* CrossMemory::local_of(const std::uint8_t* src, std::size_t len) const {
  const Window* w = in_window(src, len);
  return w ? w->local + (reinterpret_cast<std::uint64_t>(src) - w->remote_base) : nullptr;
}

void CrossMemory::place(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) {
  if (len == 0) return;
  // Bytes over a chunk the peer may be writing: that chunk first (the later bytes must win).
  if (!inflight_.empty() && overlaps_inflight(dst, len)) wait_inflight();
  const auto orig = reinterpret_cast<std::uint64_t>(src);
  // The engine places a message packet by packet, each the continuation of the last on both
  // sides: extend the pending run without looking the source up again (within its window).
  if (!local_.empty() && orig == run_src_end_ && orig + len <= run_src_max_ &&
      static_cast<std::uint8_t*>(local_.back().iov_base) + local_.back().iov_len == dst) {
    local_.back().iov_len += len;
    remote_.back().iov_len += len;
    pending_bytes_ += len;
    run_src_end_ += len;
    if (area_ && pending_bytes_ >= kDelegateBytesMin) hand_off();
    return;
  }
  const Window* w = windows_.empty() ? nullptr : in_window(src, len);
  const std::uint8_t* local = w ? w->local + (orig - w->remote_base) : nullptr;
  const bool is_local = local != nullptr;
  if (local) src = local;
  run_src_end_ = orig + len;
  run_src_max_ = w ? w->remote_base + w->bytes : UINT64_MAX;
  if (!local_.empty()) {
    iovec& l = local_.back();
    iovec& r = remote_.back();
    if (pending_local_ == is_local && static_cast<std::uint8_t*>(l.iov_base) + l.iov_len == dst &&
        static_cast<std::uint8_t*>(r.iov_base) + r.iov_len == src) {
      l.iov_len += len;
      r.iov_len += len;
      pending_bytes_ += len;
      if (area_ && pending_bytes_ >= kDelegateBytesMin) hand_off();
      return;
    }
    if (local_.size() == kIovMax || pending_local_ != is_local) flush_pending();
  }
  pending_local_ = is_local;
  local_.push_back({dst, len});
  remote_.push_back({const_cast<std::uint8_t*>(src), len});
  orig_.push_back(orig);
  pending_bytes_ += len;
  if (area_ && pending_bytes_ >= kDelegateBytesMin) hand_off();
}

bool CrossMemory::flush() {
  // The tail chunk is copied here: the peer would start on it no sooner than this process.
  bool ok = flush_pending();
  if (!inflight_.empty()) ok = wait_inflight() && ok;
  return ok;
}

bool CrossMemory::flush_pending() {
  if (local_.empty()) return true;
  bool ok = true;
  if (pending_local_) {
    // From this process's mapping of the peer's pool: the sender wrote the bytes before it
    // published the records (release), which the ring's consumer read with acquire.
    for (std::size_t i = 0; i < local_.size(); ++i)
      std::memcpy(local_[i].iov_base, remote_[i].iov_base, local_[i].iov_len);
    memcpy_bytes_ += pending_bytes_;
  } else {
    ++calls_;
    const ssize_t n =
        process_vm_readv(pid_, local_.data(), local_.size(), remote_.data(), remote_.size(), 0);
    ok = n >= 0 && static_cast<std::size_t>(n) == pending_bytes_;
    if (n > 0) bytes_ += static_cast<std::uint64_t>(n);
    errno_ = ok ? 0 : (n < 0 ? errno : EFAULT);
    if (!ok) ++failures_;
  }
  local_.clear();
  remote_.clear();
  orig_.clear();
  pending_bytes_ = 0;
  return ok;
}

bool CrossMemory::overlaps_inflight(const std::uint8_t* dst, std::size_t len) const {
  const auto a = reinterpret_cast<std::uint64_t>(dst);
  return a < inflight_hi_ && a + len > inflight_lo_;
}

void CrossMemory::hand_off() {
  // A slot the peer finished goes back to the free list first (oldest first: they are posted
  // and finished roughly in order).
  while (!inflight_.empty()) {
    const std::uint32_t st = area_->state[inflight_.front()].load(std::memory_order_acquire);
    if (st != kCopyDone) break;
    delegated_bytes_ += slot_bytes(area_->slot[inflight_.front()]);
    area_->state[inflight_.front()].store(kCopyFree, std::memory_order_relaxed);
    inflight_.erase(inflight_.begin());
  }
  if (inflight_.empty()) inflight_lo_ = UINT64_MAX, inflight_hi_ = 0;
  std::size_t s = kCopySlots;
  // A slot is kFree exactly when it is not in inflight_ (this side frees it when it leaves).
  if (local_.size() <= kCopyIovMax && !area_->refused.load(std::memory_order_relaxed))
    for (std::size_t i = 0; i < kCopySlots; ++i)
      if (area_->state[i].load(std::memory_order_relaxed) == kCopyFree) {
        s = i;
        break;
      }
  if (s == kCopySlots) {
    flush_pending();
    return;
  }
  CopySlot& slot = area_->slot[s];
  slot.count = static_cast<std::uint32_t>(local_.size());
  for (std::size_t i = 0; i < local_.size(); ++i) {
    const auto d = reinterpret_cast<std::uint64_t>(local_[i].iov_base);
    slot.iov[i] = {d, orig_[i], local_[i].iov_len};
    inflight_lo_ = std::min(inflight_lo_, d);
    inflight_hi_ = std::max<std::uint64_t>(inflight_hi_, d + local_[i].iov_len);
  }
  slot.reserved = pending_local_ ? 1 : 0;
  area_->state[s].store(kCopyPosted, std::memory_order_release);
  inflight_.push_back(s);
  local_.clear();
  remote_.clear();
  orig_.clear();
  pending_bytes_ = 0;
}

bool CrossMemory::take_back(std::size_t s) {
  const CopySlot& slot = area_->slot[s];
  const bool was_local = slot.reserved != 0;
  bool ok = true;
  for (std::uint32_t i = 0; i < slot.count && i < kCopyIovMax; ++i) {
    auto* dst = reinterpret_cast<std::uint8_t*>(slot.iov[i].dst);
    const auto* src = reinterpret_cast<const std::uint8_t*>(slot.iov[i].src);
    const std::size_t len = slot.iov[i].len;
    const std::uint8_t* local = was_local ? local_of(src, len) : nullptr;
    pending_local_ = local != nullptr;
    local_.push_back({dst, len});
    remote_.push_back({const_cast<std::uint8_t*>(local ? local : src), len});
    orig_.push_back(slot.iov[i].src);
    pending_bytes_ += len;
    ok = flush_pending() && ok;  // one chunk, one iovec at a time: kinds may differ
  }
  return ok;
}

bool CrossMemory::peer_gone() const {
  return kill(pid_, 0) != 0 && errno == ESRCH;
}

bool CrossMemory::wait_inflight() {
  bool ok = flush_pending();  // take_back uses the pending list
  for (const std::size_t s : inflight_) {
    std::atomic<std::uint32_t>& st = area_->state[s];
    std::uint32_t v = kCopyPosted;
    if (st.compare_exchange_strong(v, kCopyStolen, std::memory_order_acquire)) {
      ok = take_back(s) && ok;
    } else {
      // The peer is copying it (a chunk takes it microseconds); it may be preempted, so after a
      // while yield the CPU, and give up on a peer that has exited.
      for (std::uint32_t spins = 0; (v = st.load(std::memory_order_acquire)) == kCopyClaimed;
           ++spins) {
        if (spins < 4096) {
          __builtin_ia32_pause();
        } else {
          sched_yield();
          if (spins % 1024 == 0 && peer_gone()) break;
        }
      }
      if (v == kCopyDone) {
        delegated_bytes_ += slot_bytes(area_->slot[s]);
      } else {
        // Failed or abandoned: do it here (a dead peer's bytes cannot be read either: counted).
        ok = take_back(s) && ok;
      }
    }
    st.store(kCopyFree, std::memory_order_relaxed);
  }
  inflight_.clear();
  inflight_lo_ = UINT64_MAX;
  inflight_hi_ = 0;
  return ok;
}

std::uint64_t CrossMemory::serve(CopyArea* area) {
  std::uint64_t bytes = 0;
  if (serve_refused_) return 0;
  for (std::size_t s = 0; s < kCopySlots; ++s) {
    std::atomic<std::uint32_t>& st = area->state[s];
    if (st.load(std::memory_order_relaxed) != kCopyPosted) continue;
    std::uint32_t v = kCopyPosted;
    if (!st.compare_exchange_strong(v, kCopyClaimed, std::memory_order_acquire)) continue;
    const CopySlot& slot = area->slot[s];
    iovec l[kCopyIovMax], r[kCopyIovMax];
    std::size_t n = 0, want = 0;
    bool ok = true;
    for (std::uint32_t i = 0; i < slot.count && i < kCopyIovMax; ++i) {
      auto* dst = reinterpret_cast<std::uint8_t*>(slot.iov[i].dst);
      auto* src = reinterpret_cast<std::uint8_t*>(slot.iov[i].src);
      const std::size_t len = slot.iov[i].len;
      // The destination in the peer's pool, which this process maps: a plain memcpy.
      if (const std::uint8_t* mine = windows_.empty() ? nullptr : local_of(dst, len)) {
        std::memcpy(const_cast<std::uint8_t*>(mine), src, len);
        continue;
      }
      l[n] = {src, len};
      r[n] = {dst, len};
      ++n;
      want += len;
    }
    if (n) {
      const ssize_t got = process_vm_writev(pid_, l, n, r, n, 0);
      ok = got >= 0 && static_cast<std::size_t>(got) == want;
      if (got < 0 && (errno == EPERM || errno == EACCES)) {
        // Not allowed to write the receiver (ptrace access mode, Yama): it copies from now on.
        serve_refused_ = true;
        area->refused.store(1, std::memory_order_relaxed);
      }
    }
    if (ok) bytes += slot_bytes(slot);
    st.store(ok ? kCopyDone : kCopyFailed, std::memory_order_release);
  }
  served_bytes_ += bytes;
  return bytes;
}

bool ShmMedium::format(int memfd, std::size_t ring_bytes) {
  const std::size_t bytes = segment_bytes(ring_bytes);
  if (ftruncate(memfd, static_cast<off_t>(bytes)) != 0) return false;
  void* p = mmap(nullptr, kSegmentHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) return false;
  auto* h = static_cast<SegmentHeader*>(p);
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->ring_bytes = ring_bytes;
  h->forwarded_refused = 0;
  auto* rings = reinterpret_cast<RingShared*>(static_cast<std::uint8_t*>(p) + kRingSharedOffset);
  for (int i = 0; i < 2; ++i) {
    new (&rings[i].tail) std::atomic<std::uint64_t>(0);
    new (&rings[i].head) std::atomic<std::uint64_t>(0);
    new (&rings[i].consumer_sleeping) std::atomic<std::uint32_t>(0);
    new (&rings[i].producer_waiting) std::atomic<std::uint32_t>(0);
    new (&rings[i].producer_beat_ns) std::atomic<std::uint64_t>(0);
    new (&rings[i].producer_cpu) std::atomic<std::uint32_t>(kNoCpu);
  }
  auto* areas = reinterpret_cast<CopyArea*>(static_cast<std::uint8_t*>(p) + kCopyAreaOffset);
  for (int i = 0; i < 2; ++i) {
    for (auto& st : areas[i].state) new (&st) std::atomic<std::uint32_t>(kCopyFree);
    new (&areas[i].refused) std::atomic<std::uint32_t>(0);
  }
  munmap(p, kSegmentHeaderBytes);
  return true;
}

ShmMedium::ShmMedium(const ShmLinkConfig& cfg) : cfg_(cfg), cma_(cfg.peer_pid) {
  by_ref_max_ = cfg.by_ref_bytes_max ? cfg.by_ref_bytes_max : cfg.ring_bytes;
  map_bytes_ = segment_bytes(cfg.ring_bytes);
  void* p =
      mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, cfg.memfd, 0);
  if (p == MAP_FAILED) return;
  const auto* h = static_cast<const SegmentHeader*>(p);
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion ||
      h->ring_bytes != cfg.ring_bytes) {
    // A peer of another build (formats differ in the records they may write: a format-6 peer
    // would drop a run record unread) is refused, and says why.
    if (h->magic == kSegmentMagic && h->version != kSegmentVersion)
      base::get_logger("weft.io")->error(
          "shm: the peer's segment is format {}, this build speaks format {} only; refusing the "
          "link (run the same Weft on both ends)",
          h->version, kSegmentVersion);
    munmap(p, map_bytes_);
    return;
  }
  base_ = p;
  auto* bytes = static_cast<std::uint8_t*>(p);
  auto* rings = reinterpret_cast<RingShared*>(bytes + kRingSharedOffset);
  std::uint8_t* data0 = bytes + kSegmentHeaderBytes;
  std::uint8_t* data1 = data0 + cfg.ring_bytes;
  if (cfg.side_a) {
    tx_ = RingProducer(&rings[0], data0, cfg.ring_bytes);
    rx_ = RingConsumer(&rings[1], data1, cfg.ring_bytes);
  } else {
    tx_ = RingProducer(&rings[1], data1, cfg.ring_bytes);
    rx_ = RingConsumer(&rings[0], data0, cfg.ring_bytes);
  }
  // Area 0 holds the copies A hands to B (A receives its payloads through it), area 1 B's.
  auto* areas = reinterpret_cast<CopyArea*>(bytes + kCopyAreaOffset);
  if (cfg.delegate_copies) cma_.set_delegation(&areas[cfg.side_a ? 0 : 1]);
  serve_area_ = &areas[cfg.side_a ? 1 : 0];
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, cfg.peer_pid, 0));
}

void ShmMedium::prefault_rings(bool tx_too) {
  if (!base_) return;
  constexpr std::size_t kPageBytes = 4096;  // the smallest x86-64 page: one touch per mapping
  auto* data = static_cast<std::uint8_t*>(base_) + kSegmentHeaderBytes;
  std::uint8_t* tx = data + (cfg_.side_a ? 0 : cfg_.ring_bytes);
  const std::uint8_t* rx = data + (cfg_.side_a ? cfg_.ring_bytes : 0);
  for (std::size_t off = 0; off < cfg_.ring_bytes; off += kPageBytes) {
    // fetch_or(0) keeps the word: the peer may already poll this ring's first header (atomic
    // loads), and nothing else writes our tx ring.
    if (tx_too) detail::word_at(tx + off).fetch_or(0, std::memory_order_relaxed);
    (void)detail::word_at(rx + off).load(std::memory_order_relaxed);
    counters_.prefaulted_pages += tx_too ? 2 : 1;
  }
}

ShmMedium::~ShmMedium() {
  if (base_) munmap(base_, map_bytes_);
  for (int fd : {cfg_.memfd, cfg_.rx_doorbell, cfg_.tx_doorbell, pidfd_})
    if (fd >= 0) close(fd);
  for (const Source& src : sources_)
    if (src.pidfd >= 0) close(src.pidfd);
}

void ShmMedium::beat(TimeNs now) {
  // At most once per kBeatIntervalNs (see there); sched_getcpu() is a read of the rseq area. A
  // time earlier than the last beat (after a look-ahead beat, beat_until) is stored at once.
  if (now >= beat_ns_ && now - beat_ns_ < kBeatIntervalNs) return;
  beat_until(now);
}

void ShmMedium::beat_until(TimeNs t) {
  beat_ns_ = t;
  const int cpu = sched_getcpu();
  tx_.beat(t, cpu < 0 ? kNoCpu : static_cast<std::uint32_t>(cpu));
}

Medium::PeerState ShmMedium::peer_state(TimeNs seen_after, int cpu) const {
  if (peer_dead()) return PeerState::kUnknown;
  // A peer last seen on this CPU cannot run while this process polls: it is asleep or waits for
  // this CPU. Otherwise its heartbeat says whether it ran lately.
  const std::uint32_t peer_cpu = rx_.producer_cpu();
  if (cpu >= 0 && peer_cpu == static_cast<std::uint32_t>(cpu)) return PeerState::kStalled;
  return rx_.producer_beat_ns() >= seen_after ? PeerState::kRunning : PeerState::kStalled;
}

void ShmMedium::ring_peer() {
  ++counters_.doorbells;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto r = write(cfg_.tx_doorbell, &one, sizeof one);
}

namespace {
// A wire record's body that fits in its first line (an ACK, a small WRITE or SEND) is written
// with fixed-size stores: the headers as a whole line's worth (the bytes past them are then
// overwritten or are the record's padding), the payload and the zero pad + ICRC/VCRC in a few
// overlapping word moves, instead of two variable-length memcpy calls and a memset (their size
// dispatch on the path of every ping-pong reply; callgrind, weft perf write --lat -s 8: 122.5 ->
// 112.5 instructions per write_record, bench/io/README.md session 25).
constexpr std::size_t kLineBodyBytes = kRecordAlign - sizeof(RecordHeader);
static_assert(TxPacket::kHeaderBytesMax >= kLineBodyBytes);
constexpr std::size_t kWireTrailerBytes = 6;  // ICRC + VCRC, left zero (CrcMode::kModel)
// Copies n bytes (a short payload) with word moves that read only [s, s + n) and write only
// [d, d + n).
inline void copy_short(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
  if (n >= 8) {
    std::uint64_t w;
    for (std::size_t i = 0; i + 8 < n; i += 8) {
      std::memcpy(&w, s + i, 8);
      std::memcpy(d + i, &w, 8);
    }
    std::memcpy(&w, s + n - 8, 8);
    std::memcpy(d + n - 8, &w, 8);
  } else if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + n - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + n - 4, &b, 4);
  } else if (n != 0) {
    d[0] = s[0];
    d[n / 2] = s[n / 2];
    d[n - 1] = s[n - 1];
  }
}
}  // namespace

bool ShmMedium::write_record(const Device& dev, const TxPacket& pkt) {
  const std::uint8_t op = bth_opcode(pkt.headers.data());
  const std::uint16_t flags =
      (pkt.payload_bytes || op == kOpRcCmpSwap || op == kOpRcFetchAdd) ? kFlagTouchesMemory : 0;
  if (by_reference(cfg_.zero_copy_tx || in_tx_pool(pkt), dev, pkt, op)) {
    const std::size_t body = sizeof(ByRef) + pkt.header_bytes;
    std::uint8_t* p = tx_.reserve(body);
    const ByRef ref{reinterpret_cast<std::uint64_t>(pkt.payload), pkt.payload_bytes, pkt.pad_bytes,
                    static_cast<std::uint8_t>(pkt.header_bytes), 0};
    std::memcpy(p, &ref, sizeof ref);
    std::memcpy(p + sizeof ref, pkt.headers.data(), pkt.header_bytes);
    tx_.commit(body, RecordKind::kByRef, flags);
    ++counters_.tx_by_ref;
    return true;
  }
  const std::size_t body = pkt.wire_bytes();
  std::uint8_t* p = tx_.reserve(body);
  const std::size_t end = std::size_t{pkt.header_bytes} + pkt.payload_bytes;
  if (pkt.crcs_valid || pkt.corrupt) {
    pkt.write_to({p, body});
  } else if (end + 9 <= kLineBodyBytes && pkt.pad_bytes < 4) {
    // One line (see kLineBodyBytes): the zeros as 8 bytes from `end` (pad + trailer <= 9: the
    // ninth, pad 3, as one more byte), within the line.
    std::memcpy(p, pkt.headers.data(), kLineBodyBytes);
    copy_short(p + pkt.header_bytes, pkt.payload, pkt.payload_bytes);
    const std::uint64_t zero = 0;
    std::memcpy(p + end, &zero, 8);
    if (pkt.pad_bytes + kWireTrailerBytes > 8) p[end + 8] = 0;
  } else {
    // CrcMode::kModel: the same IBA layout with the ICRC/VCRC fields left zero (write_to would
    // compute them; shared memory does not corrupt and the receiver does not check).
    std::memcpy(p, pkt.headers.data(), pkt.header_bytes);
    if (pkt.payload_bytes) std::memcpy(p + pkt.header_bytes, pkt.payload, pkt.payload_bytes);
    std::memset(p + pkt.header_bytes + pkt.payload_bytes, 0, pkt.pad_bytes + 6u);
  }
  tx_.commit(body, RecordKind::kWire, flags);
  ++counters_.tx_wire;
  return false;
}

std::size_t ShmMedium::run_length(const Device& dev, std::span<const TxPacket> pkts) const {
  const TxPacket& f = pkts[0];
  const std::uint8_t* h = f.headers.data();
  const std::size_t bth = bth_at(h);
  const std::uint8_t op = h[bth];
  // A run starts at a MIDDLE packet that does not ask for an ACK (only a run's last may).
  if (pkts.size() < 2 || (op != kOpRcWriteMiddle && op != kOpRcSendMiddle) ||
      (h[bth + kBthAckReqAt] & kAckReqBit) != 0 || f.pad_bytes != 0 ||
      f.header_bytes > TxPacket::kHeaderBytesMax ||
      !by_reference(cfg_.zero_copy_tx || in_tx_pool(f), dev, f, op))
    return 1;
  const std::size_t psn_end = bth + kBthPsnAt + 3;  // the bytes after it must match as well
  std::uint32_t psn = psn_at(h + bth);
  const std::uint8_t* end = f.payload + f.payload_bytes;
  std::size_t k = 1;
  while (k < pkts.size()) {
    const TxPacket& p = pkts[k];
    const std::uint8_t* ph = p.headers.data();
    psn = (psn + 1) & kPsnMask;
    if (p.header_bytes != f.header_bytes || p.payload != end ||
        p.payload_bytes != f.payload_bytes || p.pad_bytes != 0 || psn_at(ph + bth) != psn ||
        std::memcmp(ph, h, bth + kBthAckReqAt) != 0 ||
        (ph[bth + kBthAckReqAt] & ~kAckReqBit) != h[bth + kBthAckReqAt] ||
        std::memcmp(ph + psn_end, h + psn_end, f.header_bytes - psn_end) != 0 ||
        !by_reference(cfg_.zero_copy_tx || in_tx_pool(p), dev, p, op))
      break;
    end += p.payload_bytes;
    ++k;
    if (ph[bth + kBthAckReqAt] & kAckReqBit) break;  // it ends the run
  }
  return k;
}

void ShmMedium::write_run(std::span<const TxPacket> run) {
  const TxPacket& f = run.front();
  const std::size_t body = sizeof(ByRefRun) + f.header_bytes;
  std::uint8_t* p = tx_.reserve(body);
  const bool ack_req = (run.back().headers[bth_at(f.headers.data()) + kBthAckReqAt] & kAckReqBit);
  const ByRefRun r{{reinterpret_cast<std::uint64_t>(f.payload), f.payload_bytes, 0,
                    static_cast<std::uint8_t>(f.header_bytes), 0},
                   static_cast<std::uint16_t>(run.size()),
                   ack_req ? kRunLastAckReq : std::uint16_t{0},
                   0};
  std::memcpy(p, &r, sizeof r);
  std::memcpy(p + sizeof r, f.headers.data(), f.header_bytes);
  tx_.commit(body, RecordKind::kByRefRun, kFlagTouchesMemory);
  counters_.tx_by_ref += run.size();
  ++counters_.tx_runs;
  note_by_ref(static_cast<std::uint32_t>(run.size() * f.payload_bytes));
}

namespace {
// The largest record body a packet makes (a wire image of a 4 KiB payload).
constexpr std::size_t kBodyMax = TxPacket::kHeaderBytesMax + 4096 + 3 + 6;
constexpr std::size_t kPayloadMax = 4096;
}  // namespace

std::size_t ShmMedium::tx_batch_room() {
  // Each packet takes at most record_span(kBodyMax); a batch wraps the ring at most once (one
  // kSkip shorter than a record) and the zero header after it stays free (ring.hpp).
  constexpr std::size_t kSpan = record_span(kBodyMax);
  const std::size_t ring = tx_.free_bytes_refreshed(kPacketsPerBatch * kSpan + kSpan + 8);
  const std::size_t by_ring = ring > kSpan + 8 ? (ring - kSpan - 8) / kSpan : 0;
  // The by-reference bound as before (by_ref_room): a packet may start while less than
  // ring_bytes of payload is referred to, so the batch may pass it by less than one packet.
  if (!by_ref_room()) return 0;
  const std::size_t by_ref = (by_ref_max_ - by_ref_bytes_ + kPayloadMax - 1) / kPayloadMax;
  return std::min({by_ring, by_ref, kPacketsPerBatch});
}

std::size_t ShmMedium::tx_burst(Device& dev, TimeNs now, std::size_t max) {
  beat(now);
  std::size_t n = 0;
  const bool dead = peer_dead();
  // tx_batch_ entries are blank except while the Device's packets are in them: an entry is reset
  // after its record is written, and only the fields after the headers (the headers are read up
  // to header_bytes, which the Device writes), so an idle poll costs no clearing at all.
  static_assert(offsetof(TxPacket, headers) == 0 && std::is_trivially_copyable_v<TxPacket>);
  static const TxPacket kBlank{};
  constexpr std::size_t kTail = sizeof kBlank - sizeof kBlank.headers;
  tx_blocked_ = false;
  while (n < max) {
    std::size_t k = std::min(max - n, kPacketsPerBatch);
    if (!dead) {
      // A full ring: stop; prepare_sleep asks the peer to ring us only if we go to sleep.
      k = std::min(k, tx_batch_room());
      if (k == 0) {
        tx_blocked_ = true;
        ++counters_.tx_full;
        if (by_ref_bytes_ >= by_ref_max_) ++counters_.tx_full_by_ref;
        break;
      }
    }
    const std::size_t got = dev.poll_transmit_burst(now, {tx_batch_.data(), k});
    n += got;
    for (std::size_t i = 0; i < got;) {
      TxPacket& pkt = tx_batch_[i];
      // A run of MIDDLE packets is one record (ByRefRun); tx_batch_room counted a record per
      // packet, so it fits.
      const std::size_t run =
          dead || !cfg_.run_records ? 1 : run_length(dev, {tx_batch_.data() + i, got - i});
      if (dead)
        ++counters_.dropped_dead;
      else if (run > 1)
        write_run({tx_batch_.data() + i, run});
      else if (write_record(dev, pkt))
        note_by_ref(pkt.payload_bytes);
      for (const std::size_t end = i + run; i < end; ++i)
        std::memcpy(reinterpret_cast<std::uint8_t*>(&tx_batch_[i]) + sizeof kBlank.headers,
                    reinterpret_cast<const std::uint8_t*>(&kBlank) + sizeof kBlank.headers, kTail);
    }
    // One publish per batch (kPacketsPerBatch <= kRecordsPerPublish): the peer starts on it
    // while the next batch is built.
    if (got && tx_.publish()) ring_peer();
    if (got < k) {
      // The entry the Device looked at last but did not fill may hold what it wrote there.
      std::memcpy(reinterpret_cast<std::uint8_t*>(&tx_batch_[got]) + sizeof kBlank.headers,
                  reinterpret_cast<const std::uint8_t*>(&kBlank) + sizeof kBlank.headers, kTail);
      break;
    }
  }
  // Also when the Device had nothing: records written through tx_packet since the last pass (the
  // fabric daemon puts packets for its client straight on this ring) wait for this publish.
  if (tx_.publish()) ring_peer();
  return n;
}

bool ShmMedium::tx_packet(const Device& dev, const TxPacket& pkt) {
  if (peer_dead()) {
    ++counters_.dropped_dead;
    return false;
  }
  // No by-reference bound here: a caller of tx_packet has already taken the packet from its
  // Device, and a copy instead would only fill the ring and lose it (tx_burst checks first).
  const std::uint8_t op = bth_opcode(pkt.headers.data());
  const std::size_t body = by_reference(cfg_.zero_copy_tx || in_tx_pool(pkt), dev, pkt, op)
                               ? sizeof(ByRef) + pkt.header_bytes
                               : pkt.wire_bytes();
  if (!tx_.can_reserve(body)) {
    ++counters_.tx_full;
    return false;
  }
  write_record(dev, pkt);
  return true;
}

bool ShmMedium::tx_forwarded(const TxPacket& pkt, pid_t pid) {
  if (peer_dead()) {
    ++counters_.dropped_dead;
    return false;
  }
  const std::size_t body = sizeof(ByRefFrom) + pkt.header_bytes;
  if (!by_ref_room() || !tx_.can_reserve(body)) {
    ++counters_.tx_full;
    return false;
  }
  std::uint8_t* p = tx_.reserve(body);
  const ByRefFrom f{{reinterpret_cast<std::uint64_t>(pkt.payload), pkt.payload_bytes, pkt.pad_bytes,
                     static_cast<std::uint8_t>(pkt.header_bytes), 0},
                    static_cast<std::uint32_t>(pid),
                    0};
  std::memcpy(p, &f, sizeof f);
  std::memcpy(p + sizeof f, pkt.headers.data(), pkt.header_bytes);
  tx_.commit(body, RecordKind::kByRefFrom, kFlagTouchesMemory);
  note_by_ref(pkt.payload_bytes);
  ++counters_.tx_forwarded;
  return true;
}

bool ShmMedium::forwarded_refused() const {
  auto* h = static_cast<SegmentHeader*>(base_);
  return std::atomic_ref<std::uint32_t>(h->forwarded_refused).load(std::memory_order_relaxed) != 0;
}

CrossMemory* ShmMedium::source_for(pid_t pid, const ByRef& ref) {
  Source* src = nullptr;
  for (Source& s : sources_)
    if (s.pid == pid) src = &s;
  if (src && src->dead && src->checked != rx_bursts_seen_) {
    // Gone in an earlier burst: a new process may have its pid (its records name it again).
    fwd_retired_[0] += src->cma->calls();
    fwd_retired_[1] += src->cma->bytes();
    fwd_retired_[2] += src->cma->failures();
    if (src->pidfd >= 0) close(src->pidfd);
    *src = Source{};
    src->pid = pid;
  }
  if (!src) {
    sources_.emplace_back();
    src = &sources_.back();
    src->pid = pid;
  }
  if (!src->cma) {
    src->cma = std::make_unique<CrossMemory>(pid);
    src->pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    src->dead = src->pidfd < 0;
    src->checked = rx_bursts_seen_;
  }
  if (src->dead) return nullptr;
  // Once per burst: is the process still there? (A dead peer's records are dropped likewise, see
  // rx_burst; its buffers are gone and its pid may be reused.)
  if (src->checked != rx_bursts_seen_) {
    src->checked = rx_bursts_seen_;
    pollfd p{src->pidfd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      src->dead = true;
      return nullptr;
    }
  }
  if (!src->ok) {
    // The first record: may this process read that one (ptrace access mode, Yama)? One byte of
    // the payload, before the Device sees the packet: a refused pull found at flush() would come
    // after the packet was taken (and acknowledged).
    std::uint8_t b;
    iovec l{&b, 1}, r{reinterpret_cast<void*>(ref.src), 1};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != 1) {
      const int e = errno;
      if (e == EPERM || e == EACCES) {
        auto* h = static_cast<SegmentHeader*>(base_);
        std::atomic_ref<std::uint32_t>(h->forwarded_refused).store(1, std::memory_order_relaxed);
      }
      if (!fwd_error_logged_) {
        fwd_error_logged_ = true;
        base::get_logger("weft.io")->warn(
            "shm: cannot read pid {} (forwarded by the fabric daemon): {}; dropping its packets{}",
            pid, std::strerror(e),
            e == EPERM || e == EACCES ? " (the daemon copies them from now on)" : "");
      }
      if (e == ESRCH) src->dead = true;
      return nullptr;
    }
    src->ok = true;
  }
  return src->cma.get();
}

bool ShmMedium::rx_copies_pending() const {
  if (cma_.pending()) return true;
  for (const Source& s : sources_)
    if (s.cma && s.cma->pending()) return true;
  return false;
}

bool ShmMedium::flush_rx_copies() {
  bool ok = cma_.flush();
  for (Source& s : sources_)
    if (s.cma) ok = s.cma->flush() && ok;
  return ok;
}

void ShmMedium::add_tx_pool(const std::uint8_t* base, std::size_t bytes) {
  tx_pools_.emplace_back(base, bytes);
}

void ShmMedium::add_rx_pool(std::uint64_t remote_base, const std::uint8_t* local,
                            std::size_t bytes) {
  cma_.add_window(remote_base, local, bytes);
}

bool ShmMedium::in_tx_pool(const TxPacket& pkt) const {
  const auto a = reinterpret_cast<std::uintptr_t>(pkt.payload);
  for (const auto& [base, bytes] : tx_pools_) {
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    if (a >= b && pkt.payload_bytes <= bytes && a - b <= bytes - pkt.payload_bytes) return true;
  }
  return false;
}

bool ShmMedium::tx_room() {
  return tx_.can_reserve(kBodyMax) && by_ref_room();
}

bool ShmMedium::prepare_sleep() {
  // The by-reference records the peer has consumed are not in flight any more (tx_in_flight):
  // one look at its index per sleep, not one per idle pass (its line moves with every release).
  if (!by_ref_.empty()) trim_by_ref();
  if (!rx_.prepare_sleep()) return false;
  if (tx_blocked_ && !peer_dead()) {
    // Announce, then look once more: the peer may have freed space in between (Dekker).
    tx_.wait_for_consumer();
    if (tx_room()) {
      tx_.cancel_wait();
      rx_.finish_sleep();
      return false;
    }
  }
  return true;
}

void ShmMedium::trim_by_ref() {
  const std::uint64_t head = tx_.consumed();
  while (!by_ref_.empty() && by_ref_.front().first <= head) {
    by_ref_bytes_ -= by_ref_.front().second;
    by_ref_.pop_front();
  }
}

bool ShmMedium::by_ref_room() {
  if (by_ref_bytes_ < by_ref_max_) return true;
  const std::uint64_t before = by_ref_bytes_;
  trim_by_ref();
  ++counters_.by_ref_looks;
  if (by_ref_bytes_ != before) {
    ++counters_.by_ref_moved;
    counters_.by_ref_freed_bytes += before - by_ref_bytes_;
  }
  return by_ref_bytes_ < by_ref_max_;
}

void ShmMedium::note_by_ref(std::uint32_t payload_bytes) {
  by_ref_.emplace_back(tx_.tail(), payload_bytes);
  by_ref_bytes_ += payload_bytes;
}

void ShmMedium::tx_publish() {
  if (tx_.publish()) ring_peer();
}

namespace {
// rx_burst frees ring space at its end when at least this much was consumed, else on the next
// pass that finds the ring empty.
constexpr std::size_t kReleaseBytesMin = kRecordsPerPublish * kRecordAlign;
// A by-reference record's headers that share its first line with the RecordHeader and ByRef.
constexpr std::size_t kLineHeaderBytes = kRecordAlign - sizeof(RecordHeader) - sizeof(ByRef);
static_assert(kLineHeaderBytes <= TxPacket::kHeaderBytesMax);
// ... and a kByRefRun record's.
constexpr std::size_t kRunLineHeaderBytes = kRecordAlign - sizeof(RecordHeader) - sizeof(ByRefRun);
static_assert(kRunLineHeaderBytes <= TxPacket::kHeaderBytesMax);
}  // namespace

std::size_t ShmMedium::rx_burst(Device& dev, TimeNs now, std::size_t max) {
  beat(now);
  std::size_t n = 0;
  const bool dead = peer_dead();
  // Copies the peer handed to us (it receives our by-reference payloads): this side is the
  // sender of those bytes and has little else to do while the peer works on its packets.
  if (!dead && cma_.serve(serve_area_)) counters_.served_bytes = cma_.served_bytes();
  // By-reference packets go to the Device in batches (on_packet_burst), in ring order: a batch
  // is handed over before any record that is not part of it.
  std::size_t batched = 0, since_beat = 0, in_batch = 0;
  // Records popped, and packets since the last release (a run record is many packets).
  std::size_t records = 0, since_release = 0;
  bool runs = false;  // a kByRefRun came in this burst
  // Where the batch's payloads are: the peer (cma_), or a process kByRefFrom records name.
  CrossMemory* batch_cma = &cma_;
  ++rx_bursts_seen_;
  const auto hand_over = [&] {
    if (batched == 0) return;
    const std::size_t k = batched;
    dev.set_remote_payload(batch_cma);
    dev.on_packet_burst({rx_batch_.data(), batched}, now);
    dev.set_remote_payload(nullptr);
    counters_.rx_by_ref += batched;
    batched = 0;
    // A long burst keeps the heartbeat fresh (kCopyPieceBytes): memcpys from a shared pool are
    // done in pieces, each followed by a beat; a burst pulled by process_vm_readv beats every
    // kBeatPackets packets (one syscall per burst costs less here than one per piece).
    since_beat += k;
    if (batch_cma->pending_local() && batch_cma->pending_bytes() >= kCopyPieceBytes) {
      // The records of the next piece's packets, one line per 4 KiB packet, come in meanwhile
      // (as run records they are a line or two, which peek() prefetches anyway).
      if (!runs) rx_.prefetch_published(kCopyPieceBytes / kPayloadMax * kRecordAlign);
      batch_cma->flush();
    } else if (since_beat < kBeatPackets) {
      return;
    }
    since_beat = 0;
    beat(monotonic_ns());
  };
  static const TxPacket kBlank{};
  while (n < max) {
    const RecordHeader* h = rx_.peek();
    if (!h) break;
    const std::uint8_t* body = RingConsumer::body(h);
    const bool batch_end = (h->flags & kFlagBatchEnd) != 0;
    // A run record's packets are taken whole: one that would pass `max` waits for the next
    // call, unless it is the first (it would wait for ever).
    std::size_t count = 1;
    if (h->kind == RecordKind::kByRefRun) {
      std::uint16_t packets;
      std::memcpy(&packets, body + offsetof(ByRefRun, packets), sizeof packets);
      count = packets;
      if (n != 0 && n + count > max) break;
    }
    n += count;
    // After the peer died its by-reference payloads are gone with it, but a copied record is
    // whole in the segment (published, so completely written): it still arrives, as a packet
    // already on the wire would. A process's last MAD (a DREP) is often its last record.
    if (dead && h->kind != RecordKind::kWire) {
      counters_.dropped_dead += count;
    } else if (h->kind == RecordKind::kByRefRun) {
      runs = true;
      ++counters_.rx_runs;
      ByRefRun run;
      std::memcpy(&run, body, sizeof run);
      if (batch_cma != &cma_) {
        hand_over();
        batch_cma->flush();
        batch_cma = &cma_;
      }
      // The run's packets as they were sent (ByRefRun): its headers with each one's PSN, and
      // the last one's AckReq.
      const std::size_t hb = std::min<std::size_t>(run.ref.header_bytes, TxPacket::kHeaderBytesMax);
      // Headers that end within the record's line (LRH BTH: 20 bytes) are copied as the rest of
      // that line, a fixed size (two vector moves; a copy of exactly hb bytes was a `rep movsq`,
      // half of rx_burst's time per packet).
      const bool in_line = hb <= kRunLineHeaderBytes;
      const std::size_t copy = in_line ? kRunLineHeaderBytes : hb;
      std::array<std::uint8_t, TxPacket::kHeaderBytesMax> hdr;
      std::memcpy(hdr.data(), body + sizeof run, copy);
      const std::size_t bth = bth_at(hdr.data());
      const std::uint32_t psn0 = psn_at(hdr.data() + bth);
      const auto* src = reinterpret_cast<const std::uint8_t*>(run.ref.src);
      for (std::size_t k = 0; k < count; ++k) {
        TxPacket& pkt = rx_batch_[batched++];
        std::memcpy(reinterpret_cast<std::uint8_t*>(&pkt) + sizeof kBlank.headers,
                    reinterpret_cast<const std::uint8_t*>(&kBlank) + sizeof kBlank.headers,
                    sizeof kBlank - sizeof kBlank.headers);
        pkt.header_bytes = static_cast<std::uint16_t>(hb);
        if (in_line)
          std::memcpy(pkt.headers.data(), hdr.data(), kRunLineHeaderBytes);
        else
          std::memcpy(pkt.headers.data(), hdr.data(), copy);
        set_psn(pkt.headers.data() + bth, (psn0 + static_cast<std::uint32_t>(k)) & kPsnMask);
        if (k + 1 == count && (run.flags & kRunLastAckReq))
          pkt.headers[bth + kBthAckReqAt] |= kAckReqBit;
        pkt.payload = src + k * run.ref.payload_bytes;
        pkt.payload_bytes = run.ref.payload_bytes;
        if (batched == rx_batch_.size()) hand_over();
      }
    } else if (h->kind == RecordKind::kByRef || h->kind == RecordKind::kByRefFrom) {
      ByRef ref;
      std::memcpy(&ref, body, sizeof ref);
      CrossMemory* from = &cma_;
      std::size_t at = sizeof ref;  // where the headers start
      if (h->kind == RecordKind::kByRefFrom) {
        std::uint32_t pid;
        std::memcpy(&pid, body + offsetof(ByRefFrom, pid), sizeof pid);
        at = sizeof(ByRefFrom);
        from = source_for(static_cast<pid_t>(pid), ref);
        ++(from ? counters_.rx_forwarded : counters_.forwarded_dropped);
      }
      // A kByRefFrom payload that cannot be pulled is lost, as on a wire (the transport resends).
      if (from && from != batch_cma) {
        // One RemotePayload per hand-over; the other's copies land first (the later bytes win
        // where two senders' payloads overlap).
        hand_over();
        batch_cma->flush();
        batch_cma = from;
      }
      if (from) {
        TxPacket& pkt = rx_batch_[batched++];
        // The headers are read up to header_bytes: only the fields after them are reset.
        std::memcpy(reinterpret_cast<std::uint8_t*>(&pkt) + sizeof kBlank.headers,
                    reinterpret_cast<const std::uint8_t*>(&kBlank) + sizeof kBlank.headers,
                    sizeof kBlank - sizeof kBlank.headers);
        pkt.header_bytes = static_cast<std::uint16_t>(
            std::min<std::size_t>(ref.header_bytes, TxPacket::kHeaderBytesMax));
        // The headers of a data packet (LRH BTH [RETH]: 20-36 bytes) end within the record's one
        // line: copy the whole rest of that line, a fixed size the compiler does with two vector
        // moves (a copy of exactly header_bytes was a `rep movsq`, a third of this loop's time).
        if (at == sizeof ref && pkt.header_bytes <= kLineHeaderBytes)
          std::memcpy(pkt.headers.data(), body + sizeof ref, kLineHeaderBytes);
        else
          std::memcpy(pkt.headers.data(), body + at, pkt.header_bytes);
        pkt.payload = reinterpret_cast<const std::uint8_t*>(ref.src);
        pkt.payload_bytes = ref.payload_bytes;
        pkt.pad_bytes = ref.pad_bytes;
        if (batched == rx_batch_.size()) hand_over();
      }
    } else if (h->kind == RecordKind::kWire) {
      hand_over();
      // Deferred cross-memory copies land before anything that writes memory after them (the
      // inline look first: with none, as in a ping-pong, no call on the reply's path).
      if ((h->flags & kFlagTouchesMemory) && rx_copies_pending()) flush_rx_copies();
      dev.on_packet({body, h->bytes}, now);
      ++counters_.rx_wire;
    }
    rx_.pop();
    ++records;
    records_since_wake_ += count;
    // Nothing refers to the popped records any more (a batched packet's headers were copied, a
    // by-reference payload lives in the sender and stays put until acknowledged), so their space
    // may go back before the Device has seen them. Counted in packets: the sender's
    // by-reference bound is in payload bytes.
    since_release += count;
    if (since_release >= kRecordsPerPublish) {
      since_release = 0;
      release();
    }
    // A short batch is all there is for now, unless the producer published more meanwhile:
    // looking would wait for the next line (ring.hpp kFlagBatchEnd), and what these packets
    // caused (a reply, an ACK) should not. A full batch (kPacketsPerBatch: the sender had more)
    // and a burst with copies go on: a stream's burst moves more per pass, and its copies are
    // cheaper in one call per burst than per batch (bench/io/README.md, sessions 18 and 21).
    in_batch += count;
    if (batch_end) {
      if (in_batch < kPacketsPerBatch && batched == 0 && !rx_copies_pending()) break;
      in_batch = 0;
    }
  }
  if (n) {
    ++counters_.rx_bursts;
    counters_.rx_records += records;
  }
  hand_over();
  const auto finish = [&](CrossMemory& cm) {
    if (cm.pending_bytes() >= kCopyPieceBytes) {
      // One system call for the rest of the burst (up to 2 MiB, ~130 us): the heartbeat says we
      // are busy until it should be done (a hint; see kCopyPieceBytes).
      const TimeNs t = monotonic_ns();
      beat_until(t + cm.pending_bytes() / kSlowCopyBytesPerNs);
      cm.flush();
      beat(monotonic_ns());
    } else if (cm.pending()) {
      cm.flush();
    }
  };
  finish(cma_);
  if (!sources_.empty()) {
    std::uint64_t calls = fwd_retired_[0], bytes = fwd_retired_[1], failures = fwd_retired_[2];
    for (Source& src : sources_) {
      if (!src.cma) continue;
      finish(*src.cma);
      calls += src.cma->calls();
      bytes += src.cma->bytes();
      failures += src.cma->failures();
    }
    if (failures != counters_.fwd_cma_errors && !fwd_error_logged_) {
      fwd_error_logged_ = true;
      base::get_logger("weft.io")->error("shm: a pull of a forwarded payload failed");
    }
    counters_.fwd_cma_calls = calls;
    counters_.fwd_cma_bytes = bytes;
    counters_.fwd_cma_errors = failures;
  }
  // Every refused or short flush counts (also those place() makes when its iovecs run out).
  if (cma_.failures() != counters_.cma_errors) {
    if (counters_.cma_errors == 0)
      base::get_logger("weft.io")->error("shm: process_vm_readv from pid {} failed: {}",
                                         cfg_.peer_pid, std::strerror(cma_.last_errno()));
    counters_.cma_errors = cma_.failures();
  }
  // A short burst (the records of a ping-pong) frees its space on the next pass that finds
  // nothing: the store to the head line and its fence are then off the path of the reply these
  // packets cause (done() posts it and pass_out publishes it before the next rx_burst). Nothing
  // waits on so little space: the producer keeps the ring's last 8 bytes free only.
  if (n == 0 || rx_.unreleased() >= kReleaseBytesMin) release();
  return n;
}

void ShmMedium::release() {
  if (rx_.unreleased() == 0) return;
  ++counters_.rx_releases;
  if (cfg_.wake_producer_records && records_since_wake_ < cfg_.wake_producer_records &&
      rx_.ready()) {
    // More records wait, so a later release comes (at the latest when the ring is empty): a
    // producer on this very CPU is left asleep until then (wake_producer_records).
    const int cpu = sched_getcpu();
    if (cpu >= 0 && rx_.producer_cpu() == static_cast<std::uint32_t>(cpu)) {
      ++counters_.rx_releases_quiet;
      rx_.release_quiet();
      return;
    }
  }
  records_since_wake_ = 0;
  if (rx_.release()) ring_peer();
}

void ShmMedium::finish_sleep() {
  rx_.finish_sleep();
  tx_.cancel_wait();
  std::uint64_t v;
  [[maybe_unused]] auto r = read(cfg_.rx_doorbell, &v, sizeof v);  // nonblocking eventfd
}

void ShmMedium::on_event(TimeNs now) {
  (void)now;
  if (peer_dead_.exchange(true)) return;
  base::get_logger("weft.io")->warn(
      "shm: peer pid {} exited; dropping its traffic (its QPs here will time out with "
      "RETRY_EXC)",
      cfg_.peer_pid);
}

}  // namespace weft::io::shm
