// transport/objects.hpp — the passive verbs objects of a Device: protection domain, memory
// region (IBA 10.6), completion queue (IBA 11.4.2), receive queue storage shared by QPs and
// SRQs (IBA 10.2.9), address handle (IBA 10.2.2).
//
// Lifetime: owned by DeviceImpl, destroyed through it. Thread-safety: one owner thread, the
// Device's.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <weft/device.hpp>

#include "src/base/assert.hpp"

namespace weft::transport {

// Copies a packet's payload (up to a PMTU: the wire image's copy in TxPacket::write_to and the
// responder's copy into the destination), as memmove. glibc's
// memcpy copies a 4 KiB payload with `rep movsb` (ERMS) on this EPYC, which costs ~35 % more
// than four 64-byte loads and stores per step when one side is the cache-hot wire image
// (bench/transport/README.md: 32 copies of 4 KiB per 64 KiB WRITE, 1.60 -> 1.16 us); for a 64
// KiB copy the two cost the same, so the memcpy baseline is not the slow one. Also CqImpl::poll's
// batch of completions (32 x 48 bytes in send64).
void copy_payload(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes);

class DeviceImpl;
class QpImpl;

// Slots of a ring that holds up to n entries: the next power of two, so a position maps to its
// slot with a mask (a 64-bit modulo is a division, tens of cycles, on every WQE and completion).
inline std::uint32_t ring_slots(std::uint32_t n) {
  return std::bit_ceil(std::max<std::uint32_t>(n, 1));
}

class PdImpl final : public ProtectionDomain {
 public:
  explicit PdImpl(std::uint32_t handle) : handle_(handle) {}
  std::uint32_t handle() const override { return handle_; }
  std::uint32_t users_ = 0;  // MRs, QPs, SRQs, AHs that name this PD

 private:
  std::uint32_t handle_;
};

// lkey == rkey == (table index << 8) | a per-registration variant byte, so a stale key of a
// deregistered slot does not match a new registration in the same slot.
class MrImpl final : public MemoryRegion {
 public:
  MrImpl(PdImpl* pd, std::uint8_t* addr, std::size_t length, std::uint32_t access,
         std::uint32_t key)
      : pd_(pd), addr_(addr), length_(length), access_(access), key_(key) {}
  std::uint32_t lkey() const override { return key_; }
  std::uint32_t rkey() const override { return key_; }
  std::uint8_t* addr() const override { return addr_; }
  std::size_t length() const override { return length_; }
  std::uint32_t access() const override { return access_; }
  // True when [va, va+len) lies inside the region (len 0 is inside when va is).
  bool contains(std::uint64_t va, std::uint64_t len) const {
    const std::uint64_t base = reinterpret_cast<std::uintptr_t>(addr_);
    return va >= base && len <= length_ && va - base <= length_ - len;
  }
  PdImpl* pd_;

 private:
  std::uint8_t* addr_;
  std::size_t length_;
  std::uint32_t access_;
  std::uint32_t key_;
};

class CqImpl final : public CompletionQueue {
 public:
  CqImpl(DeviceImpl* dev, std::uint32_t depth)
      : dev_(dev), ring_(ring_slots(depth)), mask_(ring_slots(depth) - 1), depth_(depth) {}
  std::size_t poll(std::span<WorkCompletion> out) override {
    // A batch in at most two copies (the ring may wrap once).
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), head_ - tail_));
    const auto at = static_cast<std::size_t>(tail_ & mask_);
    const std::size_t k = std::min(n, ring_.size() - at);
    static_assert(std::is_trivially_copyable_v<WorkCompletion>);
    auto* o = reinterpret_cast<std::uint8_t*>(out.data());
    copy_payload(o, reinterpret_cast<const std::uint8_t*>(&ring_[at]), k * sizeof(WorkCompletion));
    copy_payload(o + k * sizeof(WorkCompletion),
                 reinterpret_cast<const std::uint8_t*>(ring_.data()),
                 (n - k) * sizeof(WorkCompletion));
    tail_ += n;
    // Drained: the next completions go to the ring's first slots again. Where a position in the
    // ring is kept nothing can tell (completions are copied out, and no slot pointer lives
    // across a poll: Slots and slot() are used within one engine call), and an application that
    // drains what it polls (perftest, `weft perf`) then completes into the same few cache lines
    // instead of walking a deep CQ's whole ring (send64's two 4096-deep CQs: 134 -> 81 L1 misses
    // per burst of 32 SENDs in callgrind's cache simulation).
    if (tail_ == head_) head_ = tail_ = 0;
    return n;
  }
  std::uint32_t depth() const override { return depth_; }
  std::size_t size() const override { return static_cast<std::size_t>(head_ - tail_); }
  bool overrun() const override { return overrun_; }
  // The slot the next completion goes to, or nullptr when full; commit() appends it. Filling the
  // slot in place saves building the completion on the stack and copying it.
  WorkCompletion* slot() { return head_ - tail_ >= depth_ ? nullptr : &ring_[head_ & mask_]; }
  void commit() { ++head_; }
  // The batch form, for a loop that completes several WRs with nothing else completing into this
  // CQ meanwhile: the free slots now (room()), the k-th slot after the head (slots().after(k),
  // k < room()), and commit(n) appending the first n of them. Keeps the head out of memory across
  // the loop (each completion's stores would otherwise make the compiler reload it).
  std::uint64_t room() const { return depth_ - (head_ - tail_); }
  struct Slots {  // the ring as it is now, copied into the caller's locals
    WorkCompletion* ring;
    std::uint64_t head, mask;
    WorkCompletion* after(std::uint64_t k) const { return &ring[(head + k) & mask]; }
  };
  Slots slots() { return Slots{ring_.data(), head_, mask_}; }
  void commit(std::uint64_t n) { head_ += n; }
  // Appends; false when full (the caller turns that into an overrun, IBA 11.4.2.1).
  bool push(const WorkCompletion& wc) {
    if (head_ - tail_ >= depth_) return false;
    ring_[head_++ & mask_] = wc;
    return true;
  }
  DeviceImpl* dev_;
  std::uint32_t users_ = 0;  // QPs completing into it
  bool overrun_ = false;

 private:
  std::vector<WorkCompletion> ring_;  // ring_slots(depth_) entries, at most depth_ in use
  std::uint64_t head_ = 0, tail_ = 0;
  std::uint64_t mask_;
  std::uint32_t depth_;
};

// A posted receive: its SGEs live in RecvQueue's flat array.
struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::uint32_t num_sge = 0;
  std::uint64_t total_bytes = 0;
};

// Fixed-capacity ring of receive WQEs and their SGEs (no allocation after construction).
class RecvQueue {
 public:
  RecvQueue() = default;
  RecvQueue(std::uint32_t max_wr, std::uint32_t max_sge)
      : wqes_(ring_slots(max_wr)),
        sges_(std::size_t{ring_slots(max_wr)} * max_sge),
        mask_(ring_slots(max_wr) - 1),
        max_wr_(max_wr),
        max_sge_(max_sge) {}
  std::uint32_t max_wr() const { return max_wr_; }
  std::uint32_t max_sge() const { return max_sge_; }
  std::size_t outstanding() const { return static_cast<std::size_t>(head_ - tail_); }
  bool empty() const { return head_ == tail_; }
  bool full() const { return head_ - tail_ >= max_wr_; }
  // The caller has validated wr.
  void push(const RecvWr& wr) {
    const std::uint64_t slot = head_ & mask_;
    RecvWqe& w = wqes_[slot];
    w.wr_id = wr.wr_id;
    w.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
    w.total_bytes = 0;
    for (std::size_t i = 0; i < wr.sg_list.size(); ++i) {
      sges_[slot * max_sge_ + i] = wr.sg_list[i];
      w.total_bytes += wr.sg_list[i].length;
    }
    ++head_;
  }
  const RecvWqe& front() const { return wqes_[tail_ & mask_]; }
  const Sge* front_sges() const { return &sges_[(tail_ & mask_) * max_sge_]; }
  // A run of pops with the positions in the caller's locals (DeviceImpl::receive_run): the WQE
  // and SGEs `k` places after the front (front_view(), k < outstanding()), then pop_n(k) for
  // the k taken.
  struct Front {  // the ring as it is now, copied into the caller's locals
    const RecvWqe* wqes;
    const Sge* sges;
    std::uint64_t tail, mask, stride;
    const RecvWqe& wqe(std::uint64_t k) const { return wqes[(tail + k) & mask]; }
    const Sge* sges_of(std::uint64_t k) const { return &sges[((tail + k) & mask) * stride]; }
  };
  Front front_view() const { return Front{wqes_.data(), sges_.data(), tail_, mask_, max_sge_}; }
  void pop_n(std::uint64_t k) {
    WEFT_ASSERT(k <= head_ - tail_);
    tail_ += k;
  }
  // push() over a list (post_recv_burst): from the front of `wrs`, the WRs of one SGE with L_Key
  // `lkey` inside [base, base + length), while there is room and up to the ring's end; returns
  // how many were pushed. The caller has checked that key's region (PD, local write) and
  // max_sge >= 1.
  std::size_t push1_run(std::span<const RecvWr> wrs, std::uint32_t lkey, std::uint64_t base,
                        std::uint64_t length) {
    // The run's length bound once: the list, the queue's room (head_ - tail_ <= max_wr_), and
    // the ring's end, so that its WQEs and SGEs are consecutive in memory (pointers that step,
    // not masked positions); the caller's next run goes on from the ring's start.
    const std::uint64_t at = head_ & mask_;
    const std::size_t n =
        std::min<std::uint64_t>({wrs.size(), tail_ + max_wr_ - head_, mask_ + 1 - at});
    RecvWqe* const wqes = wqes_.data() + at;
    Sge* sge = sges_.data() + at * max_sge_;
    const std::uint64_t stride = max_sge_;
    std::size_t i = 0;
    for (; i < n; ++i, sge += stride) {
      const RecvWr& wr = wrs[i];
      if (wr.sg_list.size() != 1) break;
      const Sge s = wr.sg_list[0];
      const std::uint64_t wr_id = wr.wr_id;  // loaded before the stores, which may alias it
      // MrImpl::contains (an address below the region wraps its offset past length)
      const std::uint64_t offset = s.addr - base;
      if (s.lkey != lkey || offset > length || s.length > length - offset) break;
      *sge = s;
      wqes[i] = RecvWqe{wr_id, 1, s.length};
    }
    head_ += i;
    return i;
  }
  void pop() {
    WEFT_ASSERT(head_ != tail_);
    ++tail_;
  }
  void clear() { tail_ = head_; }

 private:
  std::vector<RecvWqe> wqes_;  // ring_slots(max_wr_) entries, at most max_wr_ in use
  std::vector<Sge> sges_;
  std::uint64_t head_ = 0, tail_ = 0;
  std::uint64_t mask_ = 0;
  std::uint32_t max_wr_ = 0, max_sge_ = 0;
};

class SrqImpl final : public SharedReceiveQueue {
 public:
  SrqImpl(DeviceImpl* dev, PdImpl* pd, std::uint32_t max_wr, std::uint32_t max_sge)
      : dev_(dev), pd_(pd), rq_(max_wr, max_sge) {}
  Errc post_recv(const RecvWr& wr) override;
  std::size_t outstanding() const override { return rq_.outstanding(); }
  DeviceImpl* dev_;
  PdImpl* pd_;
  RecvQueue rq_;
  std::uint32_t users_ = 0;
};

class AhImpl final : public AddressHandle {
 public:
  AhImpl(PdImpl* pd, const AddressVector& av) : pd_(pd), av_(av) {}
  const AddressVector& av() const override { return av_; }
  PdImpl* pd_;

 private:
  AddressVector av_;
};

// Copies `len` bytes of `src` into the gather list starting `offset` bytes in. The caller has
// checked offset + len <= the list's total. With rp, src is in another process (RemotePayload).
inline void copy_to_sges(const Sge* sges, std::uint32_t n, std::uint64_t offset,
                         const std::uint8_t* src, std::uint64_t len, RemotePayload* rp = nullptr) {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    if (offset >= sges[i].length) {
      offset -= sges[i].length;
      continue;
    }
    const std::uint64_t k = std::min<std::uint64_t>(sges[i].length - offset, len);
    if (rp)
      rp->place(reinterpret_cast<std::uint8_t*>(sges[i].addr) + offset, src, k);
    else
      std::memcpy(reinterpret_cast<std::uint8_t*>(sges[i].addr) + offset, src, k);
    src += k;
    len -= k;
    offset = 0;
  }
}

}  // namespace weft::transport
