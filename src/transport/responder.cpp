// transport/responder.cpp — the responder engine (IBA 9.7.5 receiving side; rxe_resp.c): PSN
// checks (9.7.5.1.2: in sequence, duplicate, out of sequence), receive WQE consumption, R_Key and
// access checks (10.6.3.3, 9.7.5.1.4: a remote access NAK with nothing written), RDMA READ
// responses and atomics with responder resources (9.7.5.1.4 duplicates), ACK coalescing, RNR NAKs
// (9.7.5.2.8), credits in the AETH (9.7.7.2), selective-repeat buffering, and UD receives
// (Q_Key check 10.2.5, the 40-byte GRH area 11.4.1.2).
#include <algorithm>
#include <cstring>
#include <utility>

#include "src/transport/device_impl.hpp"
#include "src/transport/ib_tables.hpp"
#include "src/transport/qp.hpp"

namespace weft::transport {
namespace {

using wire::AethKind;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint32_t kOooSlotBytesMax = 4096;  // one path-MTU payload per buffered packet

RespItem* push_item(QpImpl& qp) {
  if (qp.respq_count_ >= kRespQueueMax) return nullptr;  // the requester's timer recovers
  RespItem* it = &qp.respq_[(qp.respq_head_ + qp.respq_count_) % kRespQueueMax];
  ++qp.respq_count_;
  *it = RespItem{};
  qp.dev_->schedule(qp);
  return it;
}

// An ACK for everything through `psn` with MSN `msn`; merges with an ACK already waiting at the
// tail.
void push_ack(QpImpl& qp, std::uint32_t psn, std::uint32_t msn) {
  if (psn == psn_sub(qp.epsn_, 1)) qp.ack_deadline_ = kNoDeadline;  // it covers what was owed
  if (qp.respq_count_ > 0) {
    RespItem& tail = qp.respq_[(qp.respq_head_ + qp.respq_count_ - 1) % kRespQueueMax];
    if (tail.kind == RespItem::Kind::kAck) {
      if (psn_lt(tail.psn, psn)) tail.psn = psn;
      tail.msn = msn;
      return;
    }
  }
  if (RespItem* it = push_item(qp)) {
    it->kind = RespItem::Kind::kAck;
    it->psn = psn;
    it->msn = msn;
  }
}

void queue_ack(QpImpl& qp, std::uint32_t psn) {
  qp.since_ack_ = 0;
  push_ack(qp, psn, qp.msn_);
}

void queue_nak(QpImpl& qp, std::uint32_t psn, AethKind kind, std::uint8_t value) {
  if (RespItem* it = push_item(qp)) {
    it->kind = RespItem::Kind::kNak;
    it->psn = psn;
    it->msn = qp.msn_;
    it->syndrome = wire::aeth_syndrome(kind, value);
  }
}

// Class A/C responder errors (IBA 9.9.3.1): NAK, then the QP goes to ERR once the NAK is out.
void fatal_nak(QpImpl& qp, std::uint32_t psn, NakCode code) {
  DeviceCounters& c = qp.dev_->counters_;
  switch (code) {
    case NakCode::kRemoteAccessError:
      ++c.naks_tx_access;
      break;
    case NakCode::kRemoteOperationalError:
      ++c.naks_tx_op;
      break;
    default:
      ++c.naks_tx_inv;
      break;
  }
  queue_nak(qp, psn, AethKind::kNak, static_cast<std::uint8_t>(code));
  qp.resp_fatal_pending_ = true;
  qp.resp_state_ = RespState::kError;
}

void rnr_nak(QpImpl& qp, std::uint32_t psn) {
  ++qp.dev_->counters_.naks_tx_rnr;
  queue_nak(qp, psn, AethKind::kRnrNak, qp.attr_.min_rnr_timer);
  // Later packets of this burst are dropped silently: the requester resends from psn anyway.
  qp.seq_nak_sent_ = true;
}

bool take_recv(QpImpl& qp) {
  RecvQueue& rq = qp.recv_queue();
  if (rq.empty()) return false;
  qp.cur_recv_ = rq.front();
  std::copy_n(rq.front_sges(), qp.cur_recv_.num_sge, qp.cur_sges_.begin());
  rq.pop();
  qp.have_recv_ = true;
  return true;
}

// R_Key check (IBA 10.6.3.3 / 9.7.5.1.4): the region exists, is in the QP's PD, allows
// `access`, and holds [va, va+len).
std::uint8_t* check_rkey(QpImpl& qp, std::uint32_t rkey, std::uint64_t va, std::uint64_t len,
                         std::uint32_t access) {
  const MrImpl* mr = qp.dev_->find_mr(rkey);
  if (!mr || mr->pd_ != qp.init_.pd || !(mr->access() & access) || !mr->contains(va, len))
    return nullptr;
  return reinterpret_cast<std::uint8_t*>(va);
}

std::uint32_t read_npkts(const QpImpl& qp, std::uint32_t len) {
  return std::max<std::uint32_t>(1, (len + qp.mtu() - 1) / qp.mtu());
}

void queue_read_response(QpImpl& qp, std::uint32_t psn, const std::uint8_t* data,
                         std::uint32_t len) {
  if (RespItem* it = push_item(qp)) {
    it->kind = RespItem::Kind::kReadResponse;
    it->psn = psn;
    it->data = data;
    it->len = len;
    it->sent = 0;
    it->msn = qp.msn_;
  }
}

// ---- duplicates (IBA 9.7.5.1.2 / 9.7.5.1.4) -------------------------------------------------

void on_duplicate(QpImpl& qp, const wire::Headers& h) {
  DeviceCounters& c = qp.dev_->counters_;
  const std::uint32_t psn = h.bth.psn;
  const std::uint32_t nres = qp.attr_.max_dest_rd_atomic;
  if (h.bth.opcode == Opcode::kRcReadRequest) {
    for (std::uint32_t i = 0; i < nres; ++i) {
      const RdAtomicRes& r = qp.res_[i];
      if (!r.valid || r.atomic || psn_lt(psn, r.first_psn) ||
          !psn_lt(psn, psn_add(r.first_psn, r.npkts)))
        continue;
      // Answer again from memory, from the PSN the requester asks for (its RETH is advanced).
      const std::uint8_t* src = h.reth.dma_len == 0 ? nullptr
                                                    : check_rkey(qp, h.reth.rkey, h.reth.va,
                                                                 h.reth.dma_len, kAccessRemoteRead);
      if (h.reth.dma_len != 0 && !src) return;
      ++c.dup_reads_replayed;
      queue_read_response(qp, psn, src, h.reth.dma_len);
      return;
    }
    return;  // no resource: too old, dropped
  }
  if (h.bth.opcode == Opcode::kRcCompareSwap || h.bth.opcode == Opcode::kRcFetchAdd) {
    for (std::uint32_t i = 0; i < nres; ++i) {
      const RdAtomicRes& r = qp.res_[i];
      if (!r.valid || !r.atomic || r.first_psn != psn) continue;
      ++c.dup_atomics_replayed;  // the saved result; the atomic does not run again
      if (RespItem* it = push_item(qp)) {
        it->kind = RespItem::Kind::kAtomicAck;
        it->psn = psn;
        it->orig = r.orig;
        it->msn = qp.msn_;
      }
      return;
    }
    return;
  }
  ++c.dup_requests;
  queue_ack(qp, psn_sub(qp.epsn_, 1));
}

// ---- in-sequence requests -----------------------------------------------------------------

bool opcode_sequence_ok(const QpImpl& qp, Opcode op) {
  const std::uint16_t mask = wire::opcode_info(op).mask;
  const bool cont = (mask & (wire::kIsMiddle | wire::kIsLast)) && !(mask & wire::kIsOnly);
  switch (qp.resp_state_) {
    case RespState::kInSend:
      return cont && (mask & wire::kIsSend);
    case RespState::kInWrite:
      return cont && (mask & wire::kIsWrite);
    default:
      return !cont;
  }
}

// Processes the request at epsn_. Returns true when epsn_ advanced.
bool process(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
             bool placed = false) {
  DeviceImpl& dev = *qp.dev_;
  const Opcode op = h.bth.opcode;
  const std::uint32_t psn = h.bth.psn;
  const std::uint16_t mask = wire::opcode_info(op).mask;
  const std::uint32_t mtu = qp.mtu();
  const std::uint32_t len = static_cast<std::uint32_t>(payload.size());
  if (op == Opcode::kRcSendLastInv || op == Opcode::kRcSendOnlyInv || !(mask & wire::kIsRequest)) {
    fatal_nak(qp, psn, NakCode::kInvalidRequest);  // IBA 9.7.5.2.3: unsupported opcode
    return false;
  }
  if (!opcode_sequence_ok(qp, op)) {
    fatal_nak(qp, psn, NakCode::kInvalidRequest);  // IBA 9.7.5.1.3: opcode sequence error
    return false;
  }
  const bool first = (mask & (wire::kIsFirst | wire::kIsOnly)) != 0;
  const bool last = (mask & wire::kIsLast) != 0;
  // IBA 9.7.2.1: FIRST/MIDDLE carry exactly one PMTU; LAST/ONLY at most one.
  if (((mask & (wire::kIsFirst | wire::kIsMiddle)) && !(mask & wire::kIsOnly) && len != mtu) ||
      len > mtu) {
    fatal_nak(qp, psn, NakCode::kInvalidRequest);
    return false;
  }

  if (mask & wire::kIsSend) {
    if (first) {
      if (!take_recv(qp)) {
        rnr_nak(qp, psn);
        return false;
      }
      qp.msg_bytes_ = 0;
    }
    if (qp.msg_bytes_ + len > qp.cur_recv_.total_bytes) {
      // IBA 9.7.5.1.? / 10.8.3.2: the receive is too small: Invalid Request NAK, LOC_LEN_ERR.
      qp.have_recv_ = false;
      qp.complete_recv(qp.cur_recv_.wr_id, WcStatus::kLocLenErr, WcOpcode::kRecv,
                       static_cast<std::uint32_t>(qp.msg_bytes_ + len), 0, 0);
      fatal_nak(qp, psn, NakCode::kInvalidRequest);
      return false;
    }
    copy_to_sges(qp.cur_sges_.data(), qp.cur_recv_.num_sge, qp.msg_bytes_, payload.data(), len,
                 dev.remote_payload_);
    qp.msg_bytes_ += len;
    if (last) {
      const bool imm = (mask & wire::kHasImm) != 0;
      qp.have_recv_ = false;
      qp.msn_ = psn_add(qp.msn_, 1);
      qp.resp_state_ = RespState::kIdle;
      qp.complete_recv(qp.cur_recv_.wr_id, WcStatus::kSuccess, WcOpcode::kRecv,
                       static_cast<std::uint32_t>(qp.msg_bytes_), imm ? h.imm : 0,
                       imm ? std::uint32_t{kWcWithImm} : 0u);
    } else {
      qp.resp_state_ = RespState::kInSend;
    }
  } else if (mask & wire::kIsWrite) {
    if (first) {
      if (!(qp.attr_.access_flags & kAccessRemoteWrite)) {
        fatal_nak(qp, psn, NakCode::kRemoteAccessError);
        return false;
      }
      const std::uint32_t dma = h.reth.dma_len;
      std::uint8_t* dst = nullptr;
      if (dma != 0) {
        dst = check_rkey(qp, h.reth.rkey, h.reth.va, dma, kAccessRemoteWrite);
        if (!dst) {
          fatal_nak(qp, psn, NakCode::kRemoteAccessError);
          return false;
        }
      }
      // The RETH length must agree with the packets (IBA 9.7.5.1.3 length errors).
      if ((mask & wire::kIsOnly) ? len != dma : dma <= mtu) {
        fatal_nak(qp, psn, NakCode::kInvalidRequest);
        return false;
      }
      qp.write_dst_ = dst;
      qp.write_len_ = dma;
      qp.msg_bytes_ = 0;
      qp.msg_first_psn_ = psn;
    } else if (last ? qp.msg_bytes_ + len != qp.write_len_ : qp.msg_bytes_ + len >= qp.write_len_) {
      fatal_nak(qp, psn, NakCode::kInvalidRequest);
      return false;
    }
    const bool imm = (mask & wire::kHasImm) != 0;
    if (imm && !take_recv(qp)) {  // WRITE with immediate consumes a receive (IBA 9.7.5.1.7)
      rnr_nak(qp, psn);
      return false;
    }
    if (len && !placed && dev.remote_payload_)
      dev.remote_payload_->place(qp.write_dst_ + qp.msg_bytes_, payload.data(), len);
    else if (len && !placed)
      copy_payload(qp.write_dst_ + qp.msg_bytes_, payload.data(), len);
    qp.msg_bytes_ += len;
    if (last) {
      qp.msn_ = psn_add(qp.msn_, 1);
      qp.resp_state_ = RespState::kIdle;
      if (imm) {
        qp.have_recv_ = false;
        qp.complete_recv(qp.cur_recv_.wr_id, WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm,
                         qp.write_len_, h.imm, kWcWithImm);
      }
    } else {
      qp.resp_state_ = RespState::kInWrite;
    }
  } else if (op == Opcode::kRcReadRequest) {
    const std::uint32_t dma = h.reth.dma_len;
    if (qp.attr_.max_dest_rd_atomic == 0) {
      fatal_nak(qp, psn, NakCode::kInvalidRequest);
      return false;
    }
    if (!(qp.attr_.access_flags & kAccessRemoteRead)) {
      fatal_nak(qp, psn, NakCode::kRemoteAccessError);
      return false;
    }
    const std::uint8_t* src = nullptr;
    if (dma != 0) {
      src = check_rkey(qp, h.reth.rkey, h.reth.va, dma, kAccessRemoteRead);
      if (!src) {
        fatal_nak(qp, psn, NakCode::kRemoteAccessError);
        return false;
      }
    }
    const std::uint32_t n = read_npkts(qp, dma);
    RdAtomicRes& r = qp.res_[qp.res_next_++ % qp.attr_.max_dest_rd_atomic];
    r = RdAtomicRes{true, false, psn, n, 0};
    qp.msn_ = psn_add(qp.msn_, 1);
    queue_read_response(qp, psn, src, dma);
    qp.since_ack_ = 0;
    qp.epsn_ = psn_add(psn, n);
    return true;
  } else if (op == Opcode::kRcCompareSwap || op == Opcode::kRcFetchAdd) {
    const wire::AtomicEth& a = h.atomic_eth;
    if (qp.attr_.max_dest_rd_atomic == 0) {
      fatal_nak(qp, psn, NakCode::kInvalidRequest);
      return false;
    }
    if (!(qp.attr_.access_flags & kAccessRemoteAtomic)) {
      fatal_nak(qp, psn, NakCode::kRemoteAccessError);
      return false;
    }
    if (a.va % kAtomicBytes != 0) {  // IBA 9.4.5 / C9-..: misaligned atomic: Invalid Request
      fatal_nak(qp, psn, NakCode::kInvalidRequest);
      return false;
    }
    std::uint8_t* p = check_rkey(qp, a.rkey, a.va, kAtomicBytes, kAccessRemoteAtomic);
    if (!p) {
      fatal_nak(qp, psn, NakCode::kRemoteAccessError);
      return false;
    }
    std::uint64_t orig;
    std::memcpy(&orig, p, kAtomicBytes);
    std::uint64_t nv = orig;
    if (op == Opcode::kRcCompareSwap) {
      if (orig == a.compare) nv = a.swap_add;
    } else {
      nv = orig + a.swap_add;
    }
    std::memcpy(p, &nv, kAtomicBytes);
    RdAtomicRes& r = qp.res_[qp.res_next_++ % qp.attr_.max_dest_rd_atomic];
    r = RdAtomicRes{true, true, psn, 1, orig};
    qp.msn_ = psn_add(qp.msn_, 1);
    if (RespItem* it = push_item(qp)) {
      it->kind = RespItem::Kind::kAtomicAck;
      it->psn = psn;
      it->orig = orig;
      it->msn = qp.msn_;
    }
    qp.since_ack_ = 0;
    qp.epsn_ = psn_add(psn, 1);
    return true;
  } else {
    fatal_nak(qp, psn, NakCode::kInvalidRequest);
    return false;
  }
  (void)dev;
  qp.epsn_ = psn_add(psn, 1);
  ++qp.since_ack_;
  // IBA 9.7.6.1.2: always ACK when asked; otherwise coalesce up to ack_coalesce_max packets.
  if (h.bth.ack_req || qp.since_ack_ >= qp.dev_->config_.ack_coalesce_max)
    queue_ack(qp, psn);
  else if (qp.dev_->config_.ack_delay_ns && qp.ack_deadline_ == kNoDeadline)
    resp_owe_ack(qp);
  return true;
}

// ---- selective repeat -----------------------------------------------------------------------

// A WRITE MIDDLE/LAST of the message in progress whose bytes fit where its PSN puts them.
// (The checks process() makes later — lengths — are made here too, so a bad packet is never
// placed: it is buffered and NAKed in order instead.)
bool can_place_directly(const QpImpl& qp, const wire::Headers& h, std::size_t len) {
  if (qp.resp_state_ != RespState::kInWrite || len == 0) return false;
  const auto op = h.bth.opcode;
  const bool middle = op == Opcode::kRcWriteMiddle;
  const bool last = op == Opcode::kRcWriteLast || op == Opcode::kRcWriteLastImm;
  if (!middle && !last) return false;
  const std::uint32_t mtu = qp.mtu();
  const std::uint32_t npkts = (qp.write_len_ + mtu - 1) / mtu;
  const std::uint32_t idx = psn_sub(h.bth.psn, qp.msg_first_psn_);
  if (idx == 0 || idx >= npkts) return false;
  const std::uint64_t off = std::uint64_t{idx} * mtu;
  if (middle) return idx + 1 < npkts && len == mtu;
  return idx + 1 == npkts && off + len == qp.write_len_;
}

// A payload copy out of a received packet: local memcpy, or through the medium's RemotePayload.
void place_bytes(QpImpl& qp, std::uint8_t* dst, const std::uint8_t* src, std::size_t len) {
  if (RemotePayload* rp = qp.dev_->remote_payload_)
    rp->place(dst, src, len);
  else
    copy_payload(dst, src, len);
}

void buffer_ooo(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload) {
  DeviceCounters& c = qp.dev_->counters_;
  const std::uint32_t window = qp.dev_->config_.ooo_window_packets;
  const std::uint32_t psn = h.bth.psn;
  const std::uint32_t dist = psn_sub(psn, qp.epsn_);
  if (window == 0 || dist >= window || payload.size() > kOooSlotBytesMax) {
    ++c.rx_dropped_ooo;
    if (!qp.seq_nak_sent_) {
      qp.seq_nak_sent_ = true;
      ++c.naks_tx_seq;
      queue_nak(qp, qp.epsn_, AethKind::kNak,
                static_cast<std::uint8_t>(NakCode::kPsnSequenceError));
    }
    return;
  }
  if (qp.ooo_.empty()) {
    qp.ooo_.resize(window);
    qp.ooo_data_.resize(std::size_t{window} * kOooSlotBytesMax);
  }
  OooSlot& s = qp.ooo_[psn % window];
  if (s.valid && s.psn == psn) {
    ++c.dup_requests;
    return;
  }
  s.valid = true;
  s.psn = psn;
  s.h = h;
  s.payload_bytes = static_cast<std::uint32_t>(payload.size());
  s.placed = can_place_directly(qp, h, payload.size());
  if (s.placed) {
    // IRN-style direct placement: inside the current WRITE the offset follows from the PSN
    // and the message's first PSN, so the payload goes straight to its final address.
    const std::uint64_t off = std::uint64_t{psn_sub(psn, qp.msg_first_psn_)} * qp.mtu();
    place_bytes(qp, qp.write_dst_ + off, payload.data(), payload.size());
  } else if (!payload.empty()) {
    place_bytes(qp, &qp.ooo_data_[std::size_t{psn % window} * kOooSlotBytesMax], payload.data(),
                payload.size());
  }
  ++c.rx_buffered_ooo;
  // NAK each missing PSN once (IRN): from the first not yet NAKed up to this packet.
  std::uint32_t from = qp.epsn_;
  if (qp.nak_high_valid_ && psn_lt(qp.epsn_, qp.nak_high_)) from = qp.nak_high_;
  for (std::uint32_t p = from; psn_lt(p, psn); p = psn_add(p, 1)) {
    const OooSlot& o = qp.ooo_[p % window];
    if (o.valid && o.psn == p) continue;
    ++c.naks_tx_seq;
    queue_nak(qp, p, AethKind::kNak, static_cast<std::uint8_t>(NakCode::kPsnSequenceError));
  }
  std::uint32_t high = psn_add(psn, 1);
  if (h.bth.opcode == Opcode::kRcReadRequest) high = psn_add(psn, read_npkts(qp, h.reth.dma_len));
  if (!qp.nak_high_valid_ || psn_lt(qp.nak_high_, high)) qp.nak_high_ = high;
  qp.nak_high_valid_ = true;
}

void drain_ooo(QpImpl& qp) {
  if (qp.ooo_.empty()) return;
  const std::uint32_t window = qp.dev_->config_.ooo_window_packets;
  bool drained = false;
  // Buffered payloads are local copies, whatever the medium of the packet that freed them; those
  // buffered earlier in this burst by a deferred place() must have landed first.
  RemotePayload* const rp = std::exchange(qp.dev_->remote_payload_, nullptr);
  if (rp) rp->complete();
  while (!qp.resp_fatal_pending_) {
    OooSlot& s = qp.ooo_[qp.epsn_ % window];
    if (!s.valid || s.psn != qp.epsn_) break;
    s.valid = false;
    const std::span<const std::uint8_t> pl(
        &qp.ooo_data_[std::size_t{qp.epsn_ % window} * kOooSlotBytesMax], s.payload_bytes);
    if (!process(qp, s.h, pl, s.placed)) break;
    drained = true;
  }
  qp.dev_->remote_payload_ = rp;
  if (drained && !qp.resp_fatal_pending_) queue_ack(qp, psn_sub(qp.epsn_, 1));
}

// resp_fast_request's WRITE FIRST and WRITE ONLY (no immediate), as process(): opcode sequence
// (9.7.5.1.3), one whole PMTU for a FIRST (9.7.2.1), remote write allowed, the R_Key (10.6.3.3;
// none for a zero-length ONLY), a RETH length beyond one packet for a FIRST and equal to the
// payload for an ONLY; any failure is the general path's NAK (false, nothing changed). Out of
// line: once per message.
[[gnu::noinline]] bool fast_write_first(QpImpl& qp, const std::uint8_t* bth, std::uint32_t psn,
                                        std::span<const std::uint8_t> payload, bool only) {
  const std::uint32_t mtu = qp.mtu();
  const auto len = static_cast<std::uint32_t>(payload.size());
  if (qp.resp_state_ != RespState::kIdle || (!only && len != mtu) ||
      !(qp.attr_.access_flags & kAccessRemoteWrite))
    return false;
  const std::uint8_t* reth = bth + wire::kBthBytes;
  // IBA 9.3.3: VA (8 bytes), R_Key (4), DMA Length (4), big-endian.
  const std::uint64_t va = load_be64(reth);
  const std::uint32_t rkey = load_be32(reth + 8);
  const std::uint32_t dma = load_be32(reth + 12);
  if (only ? dma != len : dma <= mtu) return false;
  std::uint8_t* dst = nullptr;
  if (dma != 0) {
    dst = check_rkey(qp, rkey, va, dma, kAccessRemoteWrite);
    if (!dst) return false;
  }
  qp.seq_nak_sent_ = false;
  qp.write_dst_ = dst;
  qp.write_len_ = dma;
  qp.msg_first_psn_ = psn;
  DeviceImpl& dev = *qp.dev_;
  if (len == 0) {
  } else if (!only && dev.hold_first_copy_) {
    dev.held_copy_ = DeviceImpl::HeldCopy{dst, payload.data(), len};
  } else {
    place_bytes(qp, dst, payload.data(), len);
  }
  qp.msg_bytes_ = len;
  if (only) {
    qp.msn_ = psn_add(qp.msn_, 1);
    qp.resp_state_ = RespState::kIdle;
  } else {
    qp.resp_state_ = RespState::kInWrite;
  }
  return true;
}

}  // namespace

void resp_on_request(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                     TimeNs /*now*/) {
  if (qp.resp_fatal_pending_ || qp.resp_state_ == RespState::kError) return;
  const std::int32_t d = psn_diff(h.bth.psn, qp.epsn_);
  if (d < 0) {
    on_duplicate(qp, h);
    return;
  }
  if (d > 0) {
    if (qp.attr_.recovery == RecoveryMode::kSelectiveRepeat) {
      buffer_ooo(qp, h, payload);
      return;
    }
    // Go-back-N (IBA 9.7.5.1.2): drop, and NAK once until the expected PSN arrives.
    ++qp.dev_->counters_.rx_dropped_ooo;
    if (!qp.seq_nak_sent_) {
      qp.seq_nak_sent_ = true;
      ++qp.dev_->counters_.naks_tx_seq;
      queue_nak(qp, qp.epsn_, AethKind::kNak,
                static_cast<std::uint8_t>(NakCode::kPsnSequenceError));
    }
    return;
  }
  qp.seq_nak_sent_ = false;
  if (process(qp, h, payload) && qp.attr_.recovery == RecoveryMode::kSelectiveRepeat) drain_ooo(qp);
}

void resp_queue_ack(QpImpl& qp, std::uint32_t psn) {
  queue_ack(qp, psn);
}

void resp_push_ack(QpImpl& qp, std::uint32_t psn, std::uint32_t msn) {
  push_ack(qp, psn, msn);
}

void resp_owe_ack(QpImpl& qp) {
  qp.ack_deadline_ = qp.dev_->rx_now_ + qp.dev_->config_.ack_delay_ns;
  qp.dev_->note_deadline(qp);
}

void resp_on_deadline(QpImpl& qp, TimeNs now) {
  if (qp.ack_deadline_ > now) return;
  qp.ack_deadline_ = kNoDeadline;
  if (qp.resp_state_ != RespState::kError && !qp.resp_fatal_pending_)
    queue_ack(qp, psn_sub(qp.epsn_, 1));  // everything accepted so far (IBA 9.7.5.1.1)
}

bool resp_fast_write_first(QpImpl& qp, const std::uint8_t* bth, std::uint32_t psn,
                           std::span<const std::uint8_t> payload) {
  return fast_write_first(qp, bth, psn, payload, false);
}

bool resp_fast_write_only(QpImpl& qp, const std::uint8_t* bth, std::uint32_t psn,
                          std::span<const std::uint8_t> payload) {
  return fast_write_first(qp, bth, psn, payload, true);
}

namespace {

// A positive ACK (IBA 9.7.5.1: LRH [GRH] BTH AETH) from the QP's header template: the bytes
// finish_packet would encode from a wire::Headers.
void encode_ack(QpImpl& qp, const RespItem& it, std::uint8_t syndrome, TxPacket& out) {
  req_ensure_template(qp);
  std::uint8_t* o = out.headers.data();
  std::memcpy(o, qp.hdr_tmpl_.data(), QpImpl::kTmplBytesMax);
  const std::size_t routing = qp.hdr_tmpl_bytes_ - wire::kBthBytes;
  std::uint8_t* bth = o + routing;
  const auto st32 = [](std::uint8_t* p, std::uint32_t v) {
    const auto w = __builtin_bswap32(v);
    std::memcpy(p, &w, 4);
  };
  const auto st16 = [](std::uint8_t* p, unsigned v) {
    const auto w = __builtin_bswap16(static_cast<std::uint16_t>(v));
    std::memcpy(p, &w, 2);
  };
  bth[0] = static_cast<std::uint8_t>(Opcode::kRcAcknowledge);
  bth[1] = 0;                        // SE, MigReq, PadCnt, TVer
  st32(bth + 8, it.psn & kPsnMask);  // AckReq 0
  st32(bth + wire::kBthBytes, (std::uint32_t{syndrome} << 24) | (it.msn & kPsnMask));
  const std::size_t hb = routing + wire::kBthBytes + wire::kAethBytes;
  const std::size_t through_icrc = hb + wire::kIcrcBytes;
  st16(o + 4, static_cast<unsigned>(through_icrc / 4));  // LRH PktLen (7.7.8)
  if (routing > wire::kLrhBytes)                         // GRH PayLen (8.3.3)
    st16(o + wire::kLrhBytes + 4, static_cast<unsigned>(through_icrc - routing));
  out.header_bytes = static_cast<std::uint16_t>(hb);
  out.dlid = qp.attr_.av.dlid;
  out.sl = qp.attr_.av.sl;
  qp.dev_->finish_encoded(nullptr, 0, 0, qp.attr_.port_num, out);
}

}  // namespace

bool resp_poll(QpImpl& qp, TxPacket& out) {
  if (qp.respq_count_ == 0) return false;
  DeviceImpl& dev = *qp.dev_;
  RespItem& it = qp.respq_[qp.respq_head_];
  if (it.kind == RespItem::Kind::kAck) {
    // IBA 9.7.7.2.6: the credit field counts free receive WQEs; 31 = none kept (SRQ).
    const std::uint8_t credits =
        qp.uses_srq() ? kCreditCodeInvalid : credit_code_for(qp.recv_queue().outstanding());
    encode_ack(qp, it, wire::aeth_syndrome(AethKind::kAck, credits), out);
    ++dev.counters_.acks_tx;
    qp.respq_head_ = (qp.respq_head_ + 1) % kRespQueueMax;
    --qp.respq_count_;
    if (qp.respq_count_ == 0 && qp.resp_fatal_pending_) {
      qp.resp_fatal_pending_ = false;
      qp.enter_error();
      dev.raise(AsyncEventType::kQpFatal, qp.qpn_);
    }
    return true;
  }
  wire::Headers h{};
  dev.fill_route(h, qp.attr_.av, qp.attr_.pkey_index, qp.attr_.port_num);
  h.bth.dest_qp = qp.attr_.dest_qpn;
  h.bth.psn = it.psn;
  h.aeth.msn = it.msn;
  // IBA 9.7.7.2.6: the credit field counts free receive WQEs; 31 = none kept (SRQ).
  const std::uint8_t credits =
      qp.uses_srq() ? kCreditCodeInvalid : credit_code_for(qp.recv_queue().outstanding());
  const std::uint8_t ack = wire::aeth_syndrome(AethKind::kAck, credits);
  const std::uint8_t* payload = nullptr;
  std::uint32_t len = 0;
  bool done = true;
  switch (it.kind) {
    case RespItem::Kind::kAck:
      h.bth.opcode = Opcode::kRcAcknowledge;
      h.aeth.syndrome = ack;
      ++dev.counters_.acks_tx;
      break;
    case RespItem::Kind::kNak:
      h.bth.opcode = Opcode::kRcAcknowledge;
      h.aeth.syndrome = it.syndrome;
      break;
    case RespItem::Kind::kAtomicAck:
      h.bth.opcode = Opcode::kRcAtomicAcknowledge;
      h.aeth.syndrome = ack;
      h.atomic_ack_eth.orig = it.orig;
      break;
    case RespItem::Kind::kReadResponse: {
      const std::uint32_t mtu = qp.mtu();
      len = std::min(mtu, it.len - it.sent);
      const bool first = it.sent == 0;
      const bool last = it.sent + len == it.len;
      h.bth.opcode = first && last ? Opcode::kRcReadResponseOnly
                     : first       ? Opcode::kRcReadResponseFirst
                     : last        ? Opcode::kRcReadResponseLast
                                   : Opcode::kRcReadResponseMiddle;
      h.aeth.syndrome = ack;
      payload = len ? it.data + it.sent : nullptr;
      it.sent += len;
      ++it.psn;
      it.psn &= kPsnMask;
      done = last;
      break;
    }
  }
  dev.finish_packet(h, payload, len, qp.attr_.port_num, out);
  if (done) {
    qp.respq_head_ = (qp.respq_head_ + 1) % kRespQueueMax;
    --qp.respq_count_;
    if (qp.respq_count_ == 0 && qp.resp_fatal_pending_) {
      qp.resp_fatal_pending_ = false;
      qp.enter_error();
      dev.raise(AsyncEventType::kQpFatal, qp.qpn_);
    }
  }
  return true;
}

void resp_on_ud(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                std::span<const std::uint8_t> grh_bytes) {
  DeviceCounters& c = qp.dev_->counters_;
  if (qp.state_ != QpState::kRtr && qp.state_ != QpState::kRts && qp.state_ != QpState::kSqd &&
      qp.state_ != QpState::kSqe) {
    ++c.rx_no_qp;
    return;
  }
  if (h.deth.qkey != qp.attr_.qkey) {  // IBA 10.2.5: Q_Key violation, silently dropped
    ++c.rx_bad_qkey;
    return;
  }
  RecvQueue& rq = qp.recv_queue();
  if (rq.empty()) {  // UD has no RNR: the datagram is lost (IBA 9.8.3)
    ++c.rx_ud_no_wqe;
    return;
  }
  const RecvWqe w = rq.front();
  std::array<Sge, kSgeMax> sges;
  std::copy_n(rq.front_sges(), w.num_sge, sges.begin());
  rq.pop();
  const bool imm = h.bth.opcode == Opcode::kUdSendOnlyImm;
  const std::uint64_t need = kUdGrhBytes + payload.size();
  const auto byte_len = static_cast<std::uint32_t>(need);
  if (need > w.total_bytes) {
    qp.complete_recv(w.wr_id, WcStatus::kLocLenErr, WcOpcode::kRecv, byte_len, 0, 0);
    return;
  }
  // IBA 11.4.1.2: the first 40 bytes of a UD receive hold the GRH when one came.
  std::uint32_t flags = imm ? std::uint32_t{kWcWithImm} : 0u;
  if (!grh_bytes.empty()) {
    copy_to_sges(sges.data(), w.num_sge, 0, grh_bytes.data(), kUdGrhBytes);
    flags |= kWcGrh;
  }
  copy_to_sges(sges.data(), w.num_sge, kUdGrhBytes, payload.data(), payload.size(),
               qp.dev_->remote_payload_);
  qp.complete_recv(w.wr_id, WcStatus::kSuccess, WcOpcode::kRecv, byte_len, imm ? h.imm : 0, flags,
                   h.deth.src_qp, h.lrh.slid, h.lrh.sl);
}

}  // namespace weft::transport
