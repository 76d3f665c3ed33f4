// transport/responder_lean.hpp — the responder's lean path (resp_fast_request, declared in
// qp.hpp), inline so the Device's lean receive path (device_impl.cpp) runs it without a call.
// It belongs to the responder (responder.cpp): the same checks and state changes as
// resp_on_request for the requests it takes; keep the two in step, and DeviceImpl::receive_run
// (device_impl.cpp: runs of WRITE MIDDLE/LAST and SEND ONLY in on_packet_burst) with them
// (RcData.LeanReceivePathMatchesTheGeneralPath compares them).
#pragma once

#include <cstring>

#include "src/transport/device_impl.hpp"
#include "src/transport/ib_tables.hpp"
#include "src/transport/qp.hpp"

namespace weft::transport {

// queue_ack (responder.cpp) with its commonest case inline: an ACK already waits at the tail of
// the response queue and absorbs this one.
[[gnu::always_inline]] inline void resp_queue_ack_lean(QpImpl& qp, std::uint32_t psn) {
  if (qp.respq_count_ > 0) {
    RespItem& tail = qp.respq_[(qp.respq_head_ + qp.respq_count_ - 1) % kRespQueueMax];
    if (tail.kind == RespItem::Kind::kAck) {
      qp.since_ack_ = 0;
      if (psn == psn_sub(qp.epsn_, 1)) qp.ack_deadline_ = kNoDeadline;  // as push_ack
      if (psn_lt(tail.psn, psn)) tail.psn = psn;
      tail.msn = qp.msn_;
      return;
    }
  }
  resp_queue_ack(qp, psn);
}

[[gnu::always_inline]] inline bool resp_fast_request(QpImpl& qp, const std::uint8_t* bth,
                                                     std::span<const std::uint8_t> payload,
                                                     DeferredAck* defer) {
  if (qp.resp_fatal_pending_ || qp.resp_state_ == RespState::kError) return false;
  // Selective repeat with packets buffered: the general path drains them after this one.
  if (qp.attr_.recovery != RecoveryMode::kGoBackN && !qp.ooo_.empty()) return false;
  std::uint32_t psn;  // BTH PSN: the low 24 bits of the big-endian word at byte 8
  std::memcpy(&psn, bth + 8, 4);
  psn = __builtin_bswap32(psn) & kPsnMask;
  if (psn != qp.epsn_) return false;  // duplicate or out of sequence (9.7.5.1.2)
  const auto op = static_cast<wire::Opcode>(bth[0]);
  const auto len = static_cast<std::uint32_t>(payload.size());
  const std::uint32_t mtu = qp.mtu();
  if (len > mtu) return false;  // 9.7.2.1: at most one PMTU
  if (op == wire::Opcode::kRcSendOnly) {
    if (qp.resp_state_ != RespState::kIdle) return false;  // 9.7.5.1.3 opcode sequence
    RecvQueue& rq = qp.recv_queue();
    if (rq.empty()) return false;  // RNR NAK
    const RecvWqe& r = rq.front();
    if (r.total_bytes < len) return false;  // LOC_LEN_ERR
    // A held ACK must not be queued after a CQ overrun has errored the QP (the per-packet path
    // queued it before): such a packet takes that path, after the ACK.
    if (defer && !qp.dev_->cqe_slot(static_cast<CqImpl*>(qp.init_.recv_cq))) return false;
    qp.seq_nak_sent_ = false;
    // The receive is taken and completed by this packet: its SGEs are used where they are (the
    // general path stages them in cur_sges_ for messages that span packets).
    const Sge* sges = rq.front_sges();
    RemotePayload* rp = qp.dev_->remote_payload_;
    if (r.num_sge == 1 && !rp && len != 0)  // one SGE: it holds len bytes (total_bytes >= len)
      std::memcpy(reinterpret_cast<std::uint8_t*>(sges[0].addr), payload.data(), len);
    else
      copy_to_sges(sges, r.num_sge, 0, payload.data(), len, rp);
    const std::uint64_t wr_id = r.wr_id;
    rq.pop();
    qp.msg_bytes_ = len;
    qp.have_recv_ = false;
    qp.msn_ = psn_add(qp.msn_, 1);
    qp.complete_recv_ok(wr_id, len);
  } else if (op == wire::Opcode::kRcWriteOnly) {
    if (!resp_fast_write_only(qp, bth, psn, payload)) return false;
  } else if (op == wire::Opcode::kRcWriteFirst) {
    if (!resp_fast_write_first(qp, bth, psn, payload)) return false;
  } else if (op == wire::Opcode::kRcWriteMiddle || op == wire::Opcode::kRcWriteLast) {
    if (qp.resp_state_ != RespState::kInWrite) return false;
    const bool last = op == wire::Opcode::kRcWriteLast;
    // 9.7.2.1 / 9.7.5.1.3: a MIDDLE is one PMTU and leaves bytes to come; a LAST ends the RETH
    // length exactly.
    if (last ? qp.msg_bytes_ + len != qp.write_len_
             : (len != mtu || qp.msg_bytes_ + len >= qp.write_len_))
      return false;
    qp.seq_nak_sent_ = false;
    if (len == 0) {
    } else if (RemotePayload* rp = qp.dev_->remote_payload_) {
      rp->place(qp.write_dst_ + qp.msg_bytes_, payload.data(), len);
    } else {
      copy_payload(qp.write_dst_ + qp.msg_bytes_, payload.data(), len);
    }
    qp.msg_bytes_ += len;
    if (last) {
      qp.msn_ = psn_add(qp.msn_, 1);
      qp.resp_state_ = RespState::kIdle;
    }
  } else {
    return false;
  }
  qp.epsn_ = psn_add(psn, 1);
  ++qp.since_ack_;
  // IBA 9.7.6.1.2: always ACK when asked; otherwise coalesce up to ack_coalesce_max packets.
  if ((bth[8] & 0x80) || qp.since_ack_ >= qp.dev_->config_.ack_coalesce_max) {
    if (defer) {
      // queue_ack's effects on the responder now, the queueing when the run ends. A later ACK of
      // the run replaces this one, as it would merge into it in the response queue.
      qp.since_ack_ = 0;
      *defer = DeferredAck{&qp, psn, qp.msn_};
    } else {
      resp_queue_ack_lean(qp, psn);
    }
  } else if (qp.dev_->config_.ack_delay_ns && qp.ack_deadline_ == kNoDeadline) {
    resp_owe_ack(qp);
  }
  return true;
}

}  // namespace weft::transport
