// transport/completer.cpp — the completer engine (IBA 9.7.5.1 requester side of ACK/NAK
// processing, 9.7.6 timers, 10.8 completions; rxe_comp.c): matches ACKs, read responses and atomic
// ACKs to send WQEs, completes them in order, runs the retransmission and RNR timers, and turns
// fatal NAKs and exhausted retries into an error completion, a flush and ERR.
#include <algorithm>
#include <cstring>

#include "src/transport/device_impl.hpp"
#include "src/transport/ib_tables.hpp"
#include "src/transport/qp.hpp"

namespace weft::transport {
namespace {

using wire::Opcode;

bool outstanding(const QpImpl& qp) {
  return qp.sq_comp_ != qp.sq_launched_;
}

void arm_rto(QpImpl& qp, TimeNs now) {
  if (!outstanding(qp) || qp.rnr_deadline_ != kNoDeadline) {
    qp.rto_deadline_ = kNoDeadline;
    qp.comp_state_ = qp.rnr_deadline_ != kNoDeadline ? CompState::kRnrWait : CompState::kIdle;
    return;
  }
  const TimeNs t = ack_timeout_ns(qp.attr_.timeout);
  qp.rto_deadline_ = t == kNoDeadline ? kNoDeadline : now + t;
  qp.comp_state_ = CompState::kWaitAck;
  qp.dev_->note_deadline(qp);
}

// Completes the WQE at sq_comp_ successfully and moves on.
void complete_front(QpImpl& qp) {
  const SendWqe& w = qp.sq_at(qp.sq_comp_);
  ++qp.sq_comp_;
  if (is_rd_atomic(w.opcode) && qp.sq_comp_ <= qp.sq_req_ && qp.rd_atomic_inflight_ > 0)
    --qp.rd_atomic_inflight_;
  if (consumes_credit(w.opcode)) qp.cseq_acked_ = w.cseq + 1;
  if (qp.sq_req_ < qp.sq_comp_) qp.sq_req_ = qp.sq_comp_;
  qp.complete_send_ok(w);
}

void progress(QpImpl& qp, TimeNs now) {
  qp.retry_left_ = qp.attr_.retry_cnt;  // IBA 9.7.6.1.3: forward progress resets the count
  qp.gap_rewound_ = false;
  // Everything the requester was about to resend below comp_psn_ is now acknowledged.
  if (psn_lt(qp.req_psn_, qp.comp_psn_) && qp.sq_req_ <= qp.sq_comp_) {
    qp.sq_req_ = qp.sq_comp_;
    qp.req_psn_ = qp.sq_comp_ < qp.sq_launched_ ? qp.comp_psn_ : qp.psn_high_;
  } else if (psn_lt(qp.req_psn_, qp.comp_psn_)) {
    req_rewind(qp, qp.comp_psn_);
  }
  arm_rto(qp, now);
  if (qp.state_ == QpState::kSqd && qp.sq_drained_event_pending_ && qp.sq_comp_ == qp.sq_req_) {
    qp.sq_drained_event_pending_ = false;
    qp.dev_->raise(AsyncEventType::kSqDrained, qp.qpn_);
  }
  qp.dev_->schedule(qp);
}

// The responses of a READ/atomic before `psn` never came: an implied NAK (IBA 9.7.5.1.3 /
// C9-120): go back to the first missing PSN, once per gap.
void implied_nak(QpImpl& qp) {
  if (qp.gap_rewound_) return;
  qp.gap_rewound_ = true;
  req_rewind(qp, qp.comp_psn_);
}

// All PSNs up to and including `psn` are acknowledged (IBA 9.7.5.1.1 coalesced ACKs).
// Returns false when the walk stopped at a READ/atomic whose responses are missing.
bool ack_through(QpImpl& qp, std::uint32_t psn, TimeNs now) {
  if (psn_lt(psn, qp.comp_psn_)) return true;   // old: nothing new
  if (!psn_lt(psn, qp.psn_high_)) return true;  // acks something never sent: ignore
  bool moved = false;
  bool ok = true;
  // The commonest case first, with the walk's state in locals: SEND/WRITE WQEs that this ACK
  // covers entirely and whose completion (if signaled) has a free CQ slot. Each is what
  // complete_front does; the loop below takes over at anything else, with the state stored back.
  if (qp.state_ != QpState::kErr) {
    std::uint64_t comp = qp.sq_comp_;
    const std::uint64_t launched = qp.sq_launched_;
    auto* cq = static_cast<CqImpl*>(qp.init_.send_cq);
    // The CQ slots taken, committed once after the loop (nothing else completes into the CQ
    // meanwhile); a signaled WQE without a free slot stops the loop (complete_front's overrun).
    const std::uint64_t room = cq->overrun_ ? 0 : cq->room();
    std::uint64_t wcs = 0;
    const CqImpl::Slots slots = cq->slots();
    const WorkCompletion tmpl = qp.wc_tmpl_;
    const SendWqe* const sq = qp.sq_.data();
    const std::uint64_t mask = qp.sq_mask_;
    // The completed WQEs' effects on comp_psn and cseq_acked are those of the last one (and of
    // the last credit-consuming one): taken from them after the loop, not stored per WQE.
    const SendWqe* credit_last = nullptr;
    for (; comp < launched; ++comp) {
      const SendWqe& w = sq[comp & mask];
      const WrOpcode op = w.opcode;
      // is_rd_atomic(op) as one compare: READ and the atomics are the opcodes after WRITE with
      // immediate (the table lookup was 3 instructions per WQE).
      static_assert(static_cast<unsigned>(WrOpcode::kRdmaRead) ==
                        static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) + 1 &&
                    static_cast<unsigned>(WrOpcode::kAtomicFetchAndAdd) ==
                        static_cast<unsigned>(WrOpcode::kRdmaRead) + 2);
      if (static_cast<unsigned>(op) > static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm)) break;
      const std::uint32_t last = psn_add(w.first_psn, w.npkts - 1);
      if (!psn_le(last, psn)) break;
      if (w.signaled && wcs == room) break;
      if (send_write_consumes_credit(op)) credit_last = &w;
      if (w.signaled) {
        const std::uint64_t wr_id = w.wr_id;
        const std::uint32_t bytes = w.total_bytes;
        WorkCompletion* wc = slots.after(wcs++);
        *wc = tmpl;
        wc->wr_id = wr_id;
        wc->opcode = kSendWcOpcode[static_cast<unsigned>(op)];
        wc->byte_len = bytes;
      }
    }
    if (wcs != 0) {
      cq->commit(wcs);  // commit_cqe's counts, for wcs successful completions
      qp.dev_->counters_.completions += wcs;
    }
    if (credit_last != nullptr) qp.cseq_acked_ = credit_last->cseq + 1;
    if (comp != qp.sq_comp_) {
      const SendWqe& w = sq[(comp - 1) & mask];
      qp.comp_psn_ = psn_add(w.first_psn, w.npkts);
      qp.sq_comp_ = comp;
      if (qp.sq_req_ < comp) qp.sq_req_ = comp;
      moved = true;
    }
  }
  while (qp.sq_comp_ < qp.sq_launched_ && qp.state_ != QpState::kErr) {
    const SendWqe& w = qp.sq_at(qp.sq_comp_);
    if (is_rd_atomic(w.opcode)) {
      if (psn_le(w.first_psn, psn)) {
        implied_nak(qp);
        ok = false;
      }
      break;
    }
    const std::uint32_t last = psn_add(w.first_psn, w.npkts - 1);
    if (psn_le(last, psn)) {
      qp.comp_psn_ = psn_add(last, 1);
      complete_front(qp);
      moved = true;
    } else {
      if (psn_lt(qp.comp_psn_, psn_add(psn, 1))) {
        qp.comp_psn_ = psn_add(psn, 1);
        moved = true;
      }
      break;
    }
  }
  if (moved && qp.state_ != QpState::kErr) progress(qp, now);
  return ok;
}

void update_credits(QpImpl& qp, std::uint32_t psn, std::uint8_t code) {
  if (code == kCreditCodeInvalid) {  // IBA 9.7.7.2.6: no end-to-end flow control (SRQ)
    qp.credits_unlimited_ = true;
    return;
  }
  qp.credits_unlimited_ = false;
  // Credits count receive WQEs beyond those consumed by the messages this ACK covers.
  std::uint64_t consumed = qp.cseq_next_;
  if (qp.sq_comp_ < qp.sq_head_) {
    const SendWqe& w = qp.sq_at(qp.sq_comp_);
    consumed = w.cseq;
    const bool send = w.opcode == WrOpcode::kSend || w.opcode == WrOpcode::kSendWithImm;
    if (send && qp.sq_comp_ < qp.sq_launched_ && psn_le(w.first_psn, psn)) ++consumed;
  }
  qp.credit_limit_ = consumed + credit_code_value(code);
  qp.dev_->schedule(qp);
}

void on_nak(QpImpl& qp, std::uint32_t psn, std::uint8_t code, TimeNs now) {
  DeviceCounters& c = qp.dev_->counters_;
  WcStatus status = WcStatus::kRemOpErr;
  switch (static_cast<wire::NakCode>(code)) {
    case wire::NakCode::kPsnSequenceError:
      ++c.naks_rx_seq;
      if (qp.attr_.recovery == RecoveryMode::kSelectiveRepeat) {
        // IRN-style: the responder names one missing PSN; resend just that one.
        req_queue_resend(qp, psn);
        return;
      }
      // IBA 9.7.5.2.2: everything before the NAKed PSN arrived; resend from it.
      if (!ack_through(qp, psn_sub(psn, 1), now)) return;
      if (qp.state_ == QpState::kErr) return;
      if (!psn_lt(psn, qp.psn_high_) || psn_lt(psn, qp.comp_psn_)) return;
      if (qp.retry_left_ == 0) {
        ++c.retry_exc;
        qp.fatal(WcStatus::kRetryExcErr, true);
        return;
      }
      --qp.retry_left_;
      req_rewind(qp, psn);
      arm_rto(qp, now);
      return;
    case wire::NakCode::kInvalidRequest:
      ++c.naks_rx_inv;
      status = WcStatus::kRemInvReqErr;
      break;
    case wire::NakCode::kRemoteAccessError:
      ++c.naks_rx_access;
      status = WcStatus::kRemAccessErr;
      break;
    case wire::NakCode::kRemoteOperationalError:
      ++c.naks_rx_op;
      status = WcStatus::kRemOpErr;
      break;
    case wire::NakCode::kInvalidRdRequest:
      ++c.naks_rx_inv;
      status = WcStatus::kRemInvReqErr;
      break;
    default:
      ++c.naks_rx_op;
      status = WcStatus::kRemOpErr;
      break;
  }
  // IBA 9.7.5.1.4: a fatal NAK completes the WQE it names in error; earlier ones are done.
  if (!psn_lt(psn, qp.psn_high_) || psn_lt(psn, qp.comp_psn_)) return;  // stale
  // A READ/atomic before the NAKed PSN still lacks its response (lost): the NAK cannot be
  // matched to its WQE yet. As rxe, retry from the READ (implied NAK) and let the NAK go; if
  // the responder is gone, the retries end in RETRY_EXC_ERR on that READ.
  if (!ack_through(qp, psn_sub(psn, 1), now)) return;
  if (qp.state_ == QpState::kErr) return;
  qp.fatal(status, true);
}

void on_rnr_nak(QpImpl& qp, std::uint32_t psn, std::uint8_t timer_code, TimeNs now) {
  DeviceCounters& c = qp.dev_->counters_;
  ++c.naks_rx_rnr;
  if (!psn_lt(psn, qp.psn_high_) || psn_lt(psn, qp.comp_psn_)) return;  // stale
  if (!ack_through(qp, psn_sub(psn, 1), now) || qp.state_ == QpState::kErr) return;
  // IBA 9.7.5.2.8 / 9.7.6.1.4: rnr_retry 7 retries forever.
  if (qp.attr_.rnr_retry != 7) {
    if (qp.rnr_retry_left_ == 0) {
      ++c.rnr_retry_exc;
      qp.fatal(WcStatus::kRnrRetryExcErr, true);
      return;
    }
    --qp.rnr_retry_left_;
  }
  ++c.rnr_waits;
  req_rewind(qp, psn);
  qp.rnr_deadline_ = now + rnr_timer_ns(timer_code);
  qp.rto_deadline_ = kNoDeadline;
  qp.dev_->note_deadline(qp);
  qp.comp_state_ = CompState::kRnrWait;
  qp.req_state_ = ReqState::kRnrWait;
}

void on_read_response(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                      TimeNs now) {
  const std::uint32_t psn = h.bth.psn;
  if (psn_lt(psn, qp.comp_psn_) || !psn_lt(psn, qp.psn_high_)) return;  // duplicate or bogus
  // A response implicitly acknowledges the sends and writes before its READ (IBA 9.7.5.1.1).
  while (qp.sq_comp_ < qp.sq_launched_) {
    const SendWqe& w = qp.sq_at(qp.sq_comp_);
    if (is_rd_atomic(w.opcode)) break;
    if (!psn_lt(psn_add(w.first_psn, w.npkts - 1), psn)) break;
    qp.comp_psn_ = psn_add(w.first_psn, w.npkts);
    complete_front(qp);
    if (qp.state_ == QpState::kErr) return;
  }
  if (qp.sq_comp_ == qp.sq_launched_) return;
  const std::uint64_t slot = qp.sq_comp_;
  const SendWqe& w = qp.sq_at(slot);
  if (w.opcode != WrOpcode::kRdmaRead || psn != qp.comp_psn_) {
    // A gap: responses before this one are missing.
    if (psn_lt(qp.comp_psn_, psn)) implied_nak(qp);
    return;
  }
  const std::uint32_t idx = psn_sub(psn, w.first_psn);
  const auto op = h.bth.opcode;
  Opcode want;
  if (w.npkts == 1)
    want = Opcode::kRcReadResponseOnly;
  else if (idx == 0)
    want = Opcode::kRcReadResponseFirst;
  else if (idx + 1 == w.npkts)
    want = Opcode::kRcReadResponseLast;
  else
    want = Opcode::kRcReadResponseMiddle;
  // A retried READ restarts at idx, so its first response may be FIRST/ONLY for a middle/last.
  const bool restart_ok =
      (want == Opcode::kRcReadResponseMiddle && op == Opcode::kRcReadResponseFirst) ||
      (want == Opcode::kRcReadResponseLast && op == Opcode::kRcReadResponseOnly);
  const std::uint32_t mtu = qp.mtu();
  const std::uint64_t offset = std::uint64_t{idx} * mtu;
  const std::uint64_t expect_len = std::min<std::uint64_t>(mtu, w.total_bytes - offset);
  if ((op != want && !restart_ok) || payload.size() != expect_len) {
    // IBA 9.7.5.1.3: an unexpected response opcode or length is a bad response.
    qp.fatal(WcStatus::kBadRespErr, true);
    return;
  }
  copy_to_sges(qp.sq_sges(slot), w.num_sge, offset, payload.data(), payload.size(),
               qp.dev_->remote_payload_);
  qp.comp_psn_ = psn_add(psn, 1);
  if (idx + 1 == w.npkts) complete_front(qp);
  if (qp.state_ != QpState::kErr) progress(qp, now);
}

void on_atomic_ack(QpImpl& qp, const wire::Headers& h, TimeNs now) {
  const std::uint32_t psn = h.bth.psn;
  if (psn_lt(psn, qp.comp_psn_) || !psn_lt(psn, qp.psn_high_)) return;
  while (qp.sq_comp_ < qp.sq_launched_) {
    const SendWqe& w = qp.sq_at(qp.sq_comp_);
    if (is_rd_atomic(w.opcode)) break;
    if (!psn_lt(psn_add(w.first_psn, w.npkts - 1), psn)) break;
    qp.comp_psn_ = psn_add(w.first_psn, w.npkts);
    complete_front(qp);
    if (qp.state_ == QpState::kErr) return;
  }
  if (qp.sq_comp_ == qp.sq_launched_) return;
  const std::uint64_t slot = qp.sq_comp_;
  const SendWqe& w = qp.sq_at(slot);
  const bool atomic =
      w.opcode == WrOpcode::kAtomicCmpAndSwp || w.opcode == WrOpcode::kAtomicFetchAndAdd;
  if (!atomic || psn != qp.comp_psn_) {
    if (psn_lt(qp.comp_psn_, psn)) implied_nak(qp);
    return;
  }
  const std::uint64_t orig = h.atomic_ack_eth.orig;
  std::uint8_t bytes[kAtomicBytes];
  std::memcpy(bytes, &orig, kAtomicBytes);  // the original value, in host order
  copy_to_sges(qp.sq_sges(slot), w.num_sge, 0, bytes, kAtomicBytes);
  qp.comp_psn_ = psn_add(psn, 1);
  complete_front(qp);
  if (qp.state_ != QpState::kErr) progress(qp, now);
}

}  // namespace

void comp_arm_rto(QpImpl& qp, TimeNs now) {
  arm_rto(qp, now);
}

void comp_on_response(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                      TimeNs now) {
  switch (h.bth.opcode) {
    case Opcode::kRcAcknowledge: {
      const std::uint8_t syn = h.aeth.syndrome;
      switch (wire::aeth_kind(syn)) {
        case wire::AethKind::kAck:
          if (!ack_through(qp, h.bth.psn, now)) return;
          if (qp.state_ != QpState::kErr) update_credits(qp, h.bth.psn, wire::aeth_value(syn));
          return;
        case wire::AethKind::kRnrNak:
          on_rnr_nak(qp, h.bth.psn, wire::aeth_value(syn), now);
          return;
        case wire::AethKind::kNak:
          on_nak(qp, h.bth.psn, wire::aeth_value(syn), now);
          return;
        default:
          return;  // reserved syndrome: ignored (IBA 9.7.5.1.5)
      }
    }
    case Opcode::kRcAtomicAcknowledge:
      on_atomic_ack(qp, h, now);
      return;
    case Opcode::kRcReadResponseFirst:
    case Opcode::kRcReadResponseMiddle:
    case Opcode::kRcReadResponseLast:
    case Opcode::kRcReadResponseOnly:
      on_read_response(qp, h, payload, now);
      if (qp.state_ != QpState::kErr &&
          (h.bth.opcode == Opcode::kRcReadResponseLast ||
           h.bth.opcode == Opcode::kRcReadResponseOnly) &&
          wire::aeth_kind(h.aeth.syndrome) == wire::AethKind::kAck)
        update_credits(qp, h.bth.psn, wire::aeth_value(h.aeth.syndrome));
      return;
    default:
      return;
  }
}

bool comp_fast_ack(QpImpl& qp, const std::uint8_t* bth, TimeNs now) {
  const std::uint8_t syn = bth[wire::kBthBytes];  // AETH Syndrome
  if (wire::aeth_kind(syn) != wire::AethKind::kAck) return false;
  std::uint32_t psn;  // BTH PSN: the low 24 bits of the big-endian word at byte 8
  std::memcpy(&psn, bth + 8, 4);
  psn = __builtin_bswap32(psn) & kPsnMask;
  // As comp_on_response's kAck case.
  if (!ack_through(qp, psn, now)) return true;
  if (qp.state_ != QpState::kErr) update_credits(qp, psn, wire::aeth_value(syn));
  return true;
}

void comp_on_deadline(QpImpl& qp, TimeNs now) {
  if (qp.rnr_deadline_ <= now) {
    qp.rnr_deadline_ = kNoDeadline;
    qp.req_state_ = ReqState::kSending;
    arm_rto(qp, now);
    qp.dev_->schedule(qp);
  }
  if (qp.rto_deadline_ <= now) {
    if (!outstanding(qp)) {
      qp.rto_deadline_ = kNoDeadline;
      return;
    }
    ++qp.dev_->counters_.timeouts;
    // IBA 9.7.6.1.3: retry_cnt retries, then RETRY_EXC_ERR.
    if (qp.retry_left_ == 0) {
      ++qp.dev_->counters_.retry_exc;
      qp.fatal(WcStatus::kRetryExcErr, true);
      return;
    }
    --qp.retry_left_;
    qp.gap_rewound_ = false;
    req_rewind(qp, qp.comp_psn_);
    const TimeNs t = ack_timeout_ns(qp.attr_.timeout);
    qp.rto_deadline_ = t == kNoDeadline ? kNoDeadline : now + t;
  }
}

}  // namespace weft::transport
