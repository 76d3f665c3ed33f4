// transport/qp.cpp — QP verbs: the state machine of IBA 10.3.1 with attribute validation on every
// transition (IBA 11.2.5), work request validation at post time (IBA 11.4.1), completions,
// and the error path (IBA 10.3.1: ERR flushes both work queues).
#include "src/transport/qp.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include "src/transport/device_impl.hpp"
#include "src/transport/ib_tables.hpp"
#include "src/transport/qp_attr_table.hpp"

namespace weft::transport {
namespace {

constexpr std::uint32_t kRemoteAccessBits =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return WcOpcode::kSend;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpAndSwp:
      return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAndAdd:
      return WcOpcode::kFetchAdd;
  }
  return WcOpcode::kSend;
}

}  // namespace

std::string_view to_string(ReqState s) {
  switch (s) {
    case ReqState::kIdle:
      return "IDLE";
    case ReqState::kSending:
      return "SENDING";
    case ReqState::kWaitCredits:
      return "WAIT_CREDITS";
    case ReqState::kWaitRdAtomic:
      return "WAIT_RD_ATOMIC";
    case ReqState::kWaitFence:
      return "WAIT_FENCE";
    case ReqState::kRnrWait:
      return "RNR_WAIT";
    case ReqState::kDrained:
      return "DRAINED";
    case ReqState::kError:
      return "ERROR";
  }
  return "?";
}

std::string_view to_string(RespState s) {
  switch (s) {
    case RespState::kIdle:
      return "IDLE";
    case RespState::kInSend:
      return "IN_SEND";
    case RespState::kInWrite:
      return "IN_WRITE";
    case RespState::kError:
      return "ERROR";
  }
  return "?";
}

std::string_view to_string(CompState s) {
  switch (s) {
    case CompState::kIdle:
      return "IDLE";
    case CompState::kWaitAck:
      return "WAIT_ACK";
    case CompState::kRnrWait:
      return "RNR_WAIT";
    case CompState::kError:
      return "ERROR";
  }
  return "?";
}

QpImpl::QpImpl(DeviceImpl* dev, std::uint32_t qpn, const QpInitAttr& init)
    : dev_(dev), qpn_(qpn), init_(init) {
  const QpCaps& c = init.caps;
  sq_.resize(ring_slots(c.max_send_wr));
  sq_mask_ = sq_.size() - 1;
  sq_depth_ = c.max_send_wr;
  max_send_sge_ = c.max_send_sge;
  inline_max_ = c.max_inline_data;
  sq_sge_.resize(sq_.size() * c.max_send_sge);
  sq_inline_.resize(sq_.size() * c.max_inline_data);
  if (!init.srq) rq_ = RecvQueue(c.max_recv_wr, c.max_recv_sge);
  cur_sges_.resize(kSgeMax);
  pkey_ = dev_->pkey_at(attr_.port_num, attr_.pkey_index);
  update_wc_tmpl();
  res_.resize(kRdAtomicMax);
}

QpImpl::~QpImpl() = default;

RecvQueue& QpImpl::srq_rq() {
  return static_cast<SrqImpl*>(init_.srq)->rq_;
}

TimeNs QpImpl::next_deadline() const {
  if (state_ == QpState::kErr || state_ == QpState::kReset) return kNoDeadline;
  return std::min({rto_deadline_, rnr_deadline_, ack_deadline_});
}

// ---- modify (IBA 11.2.5) ------------------------------------------------------------------

Errc QpImpl::modify(const QpAttr& a, std::uint32_t mask) {
  const QpState cur = state_;
  const QpState to = (mask & kQpState) ? a.qp_state : cur;
  if (static_cast<unsigned>(to) > static_cast<unsigned>(QpState::kErr))
    return Errc::kInvalidArgument;
  if ((mask & kQpCurState) && a.cur_qp_state != cur) return Errc::kInvalidArgument;
  const TransitionRule rule = transition_rule(init_.type, cur, to);
  if (!rule.valid) return Errc::kInvalidTransition;
  const std::uint32_t need = rule.required & ~kQpState;
  if ((need & mask) != need) return Errc::kMissingAttribute;
  if ((mask & ~kQpState) & ~(rule.required | rule.optional)) return Errc::kExtraAttribute;

  // Range checks (IBA 11.2.5.2): nothing changes unless all pass.
  const auto& ports = dev_->config_.ports;
  const std::uint8_t port = (mask & kQpPort) ? a.port_num : attr_.port_num;
  if ((mask & kQpPort) && (a.port_num == 0 || a.port_num > ports.size()))
    return Errc::kInvalidArgument;
  if ((mask & kQpPkeyIndex) &&
      (port == 0 || port > ports.size() || a.pkey_index >= ports[port - 1].pkeys.size()))
    return Errc::kInvalidArgument;
  if ((mask & kQpAccessFlags) && (a.access_flags & ~kRemoteAccessBits))
    return Errc::kInvalidArgument;
  if (mask & kQpAv) {
    if (a.av.port_num == 0 || a.av.port_num > ports.size() || a.av.sl > 15 ||
        a.av.flow_label > 0xFFFFF)
      return Errc::kInvalidArgument;
  }
  if (mask & kQpPathMtu) {
    const auto m = static_cast<unsigned>(a.path_mtu);
    if (m < 1 || m > 5 || m > static_cast<unsigned>(ports[port - 1].max_mtu))
      return Errc::kInvalidArgument;
  }
  if ((mask & kQpDestQpn) && a.dest_qpn > kPsnMask) return Errc::kInvalidArgument;
  if ((mask & kQpRqPsn) && a.rq_psn > kPsnMask) return Errc::kInvalidArgument;
  if ((mask & kQpSqPsn) && a.sq_psn > kPsnMask) return Errc::kInvalidArgument;
  if ((mask & kQpMaxDestRdAtomic) && a.max_dest_rd_atomic > kRdAtomicMax)
    return Errc::kInvalidArgument;
  if ((mask & kQpMaxRdAtomic) && a.max_rd_atomic > kRdAtomicMax) return Errc::kInvalidArgument;
  if ((mask & kQpMinRnrTimer) && a.min_rnr_timer > 31) return Errc::kInvalidArgument;
  if ((mask & kQpTimeout) && a.timeout > 31) return Errc::kInvalidArgument;
  if ((mask & kQpRetryCnt) && a.retry_cnt > 7) return Errc::kInvalidArgument;
  if ((mask & kQpRnrRetry) && a.rnr_retry > 7) return Errc::kInvalidArgument;
  if ((mask & kQpRecoveryMode) && static_cast<unsigned>(a.recovery) > 1)
    return Errc::kInvalidArgument;

  if (mask & kQpPkeyIndex) attr_.pkey_index = a.pkey_index;
  if (mask & kQpPort) attr_.port_num = a.port_num;
  if (mask & kQpQkey) attr_.qkey = a.qkey;
  if (mask & kQpAccessFlags) attr_.access_flags = a.access_flags;
  if (mask & kQpAv) attr_.av = a.av;
  if (mask & kQpPathMtu) attr_.path_mtu = a.path_mtu;
  if (mask & kQpDestQpn) attr_.dest_qpn = a.dest_qpn;
  if (mask & kQpRqPsn) attr_.rq_psn = a.rq_psn;
  if (mask & kQpSqPsn) attr_.sq_psn = a.sq_psn;
  if (mask & kQpMaxDestRdAtomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kQpMaxRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpMinRnrTimer) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpTimeout) attr_.timeout = a.timeout;
  if (mask & kQpRetryCnt) attr_.retry_cnt = a.retry_cnt;
  if (mask & kQpRnrRetry) attr_.rnr_retry = a.rnr_retry;
  if (mask & kQpRecoveryMode) attr_.recovery = a.recovery;
  hdr_tmpl_bytes_ = 0;  // the route, P_Key or destination QP may have changed
  pkey_ = dev_->pkey_at(attr_.port_num, attr_.pkey_index);
  update_wc_tmpl();

  if (to == cur) return Errc::kOk;
  switch (to) {
    case QpState::kReset: {
      // IBA 10.3.1: RESET empties both queues without completions.
      const QpInitAttr init = init_;
      const QpState keep = QpState::kReset;
      sq_head_ = sq_comp_ = sq_req_ = sq_launched_ = 0;
      rq_.clear();
      req_state_ = ReqState::kIdle;
      resp_state_ = RespState::kIdle;
      comp_state_ = CompState::kIdle;
      rd_atomic_inflight_ = 0;
      cseq_next_ = credit_limit_ = cseq_acked_ = 0;
      pkts_since_ackreq_ = 0;
      gap_rewound_ = false;
      credits_unlimited_ = false;
      resend_head_ = resend_count_ = 0;
      rto_deadline_ = rnr_deadline_ = ack_deadline_ = kNoDeadline;
      respq_head_ = respq_count_ = 0;
      have_recv_ = false;
      resp_fatal_pending_ = false;
      seq_nak_sent_ = false;
      nak_high_valid_ = false;
      for (auto& r : res_) r = RdAtomicRes{};
      for (auto& s : ooo_) s.valid = false;
      msn_ = 0;
      since_ack_ = 0;
      attr_ = QpAttr{};
      pkey_ = dev_->pkey_at(attr_.port_num, attr_.pkey_index);
      update_wc_tmpl();
      (void)init;
      state_ = keep;
      return Errc::kOk;
    }
    case QpState::kErr:
      enter_error();
      return Errc::kOk;
    case QpState::kRtr:
      epsn_ = attr_.rq_psn;
      state_ = to;
      return Errc::kOk;
    case QpState::kRts:
      if (cur == QpState::kRtr) {
        req_psn_ = comp_psn_ = psn_high_ = attr_.sq_psn;
        last_ack_psn_ = psn_sub(attr_.sq_psn, 1);
        retry_left_ = attr_.retry_cnt;
        rnr_retry_left_ = attr_.rnr_retry;
      }
      req_state_ = ReqState::kIdle;
      state_ = to;
      dev_->schedule(*this);
      return Errc::kOk;
    case QpState::kSqd:
      state_ = to;
      req_state_ = ReqState::kDrained;
      // IBA 11.6.3: "SQ drained" once nothing is outstanding.
      if (sq_comp_ == sq_req_)
        dev_->raise(AsyncEventType::kSqDrained, qpn_);
      else
        sq_drained_event_pending_ = true;
      return Errc::kOk;
    default:
      state_ = to;
      return Errc::kOk;
  }
}

QpAttr QpImpl::query() const {
  QpAttr a = attr_;
  a.qp_state = state_;
  a.cur_qp_state = state_;
  if (state_ == QpState::kRts || state_ == QpState::kSqd) a.sq_psn = req_psn_;
  if (state_ != QpState::kReset && state_ != QpState::kInit) a.rq_psn = epsn_;
  return a;
}

// ---- posting (IBA 11.4.1.1) -----------------------------------------------------------------

namespace {
// fill_lean_wqe's word stores: the WQE's byte fields (opcode, signaled, fence, is_inline,
// solicited, credit_stalled; bytes 14-15 padding) as one 8-byte store, and num_sge with
// total_bytes as another, instead of eight narrow stores per WQE (a burst of 32 SENDs posts
// 32). Little-endian layout only; elsewhere the fields one by one.
constexpr bool kWqeWide = kWqeFlagsWide && offsetof(SendWqe, total_bytes) == kWqeFlagsOffset + 12;
// The send flags kSignaled (bit 0), kFence (bit 1) and kSolicited (bit 3) moved to the low bit
// of the signaled (byte 1), fence (byte 2) and solicited (byte 4) fields of the flags word by
// one multiplication: bit i times 2^8 + 2^15 + 2^29 lands on i+8, i+15 and i+29, nine distinct
// positions for i in {0, 1, 3} (no carries), of which the mask keeps 8, 16 and 32.
static_assert(kSignaled == 1 && kFence == 2 && kSolicited == 8);
constexpr std::uint64_t kFlagSpread = (1ull << 8) | (1ull << 15) | (1ull << 29);
constexpr std::uint64_t kFlagKeep = (1ull << 8) | (1ull << 16) | (1ull << 32);
constexpr std::uint64_t wqe_flags_word(WrOpcode op, std::uint32_t flags, bool sig_all) {
  return static_cast<std::uint8_t>(op) |
         ((std::uint64_t{flags & (kSignaled | kFence | kSolicited)} * kFlagSpread) & kFlagKeep) |
         std::uint64_t{sig_all} << 8;
}
static_assert(wqe_flags_word(WrOpcode::kRdmaWrite, kSignaled | kFence | kSolicited | kInline,
                             false) == 0x0100010102ull);
static_assert(wqe_flags_word(WrOpcode::kSend, 0, true) == 0x100ull);

// post_send's WQE for a SEND/WRITE (with or without immediate) of one SGE, not inline, field
// by field. Not written: the atomic operands and the UD destination (read for atomics and UD
// QPs only), which post_send zeroes for other WRs, and the SGE's copy in sq_sge_: it is read
// only to gather a payload that is not contiguous (this one is, at w.contiguous) and by READ
// and atomic responses. The WR's fields are read before the first store (the stores may alias
// the WR and would make the compiler reload it).
inline void fill_lean_wqe(SendWqe& w, const SendWr& wr, const Sge& sge, bool sig_all,
                          std::uint64_t cseq) {
  const std::uint64_t wr_id = wr.wr_id, remote_addr = wr.remote_addr;
  const std::uint32_t flags = wr.send_flags, imm = wr.imm_data, rkey = wr.rkey;
  const WrOpcode op = wr.opcode;
  w.wr_id = wr_id;
  if constexpr (kWqeWide) {
    auto* const f = reinterpret_cast<std::uint8_t*>(&w) + kWqeFlagsOffset;
    const std::uint64_t flag_word = wqe_flags_word(op, flags, sig_all);
    const std::uint64_t sizes = 1u | std::uint64_t{sge.length} << 32;  // num_sge, total_bytes
    std::memcpy(f, &flag_word, 8);
    std::memcpy(f + 8, &sizes, 8);
  } else {
    w.opcode = op;
    w.signaled = sig_all | ((flags & kSignaled) != 0);
    w.fence = (flags & kFence) != 0;
    w.is_inline = false;
    w.solicited = (flags & kSolicited) != 0;
    w.credit_stalled = false;
    w.num_sge = 1;
    w.total_bytes = sge.length;
  }
  w.imm = imm;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  w.first_psn = 0;
  w.npkts = 0;
  w.contiguous = reinterpret_cast<const std::uint8_t*>(sge.addr);
  w.cseq = cseq;
}
}  // namespace

Errc QpImpl::post_send(const SendWr& wr) {
  // The commonest WR (a latency ping-pong posts one per round trip): a SEND/WRITE (with or
  // without immediate) of one SGE, not inline, on an RC QP in RTS with room. post_send's checks
  // below that can fail for it are the room and the SGE's (check_sges with no access bit: a
  // region of this PD holding the bytes; max_send_sge_ >= 1, create_qp's rule; kMessageBytesMax);
  // its WQE is post_send_burst's (the atomic operands and the UD destination, read for atomics
  // and UD QPs only, not written). Any other WR, or one that fails a check, takes the general
  // path, which returns the error.
  rewind_sq_if_drained();
  if (init_.type == QpType::kRc && state_ == QpState::kRts &&
      static_cast<unsigned>(wr.opcode) <= static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) &&
      wr.sg_list.size() == 1 && !(wr.send_flags & kInline) && sq_head_ - sq_comp_ < sq_depth_) {
    const Sge sge = wr.sg_list[0];
    const MrImpl* mr = dev_->find_mr(sge.lkey);
    if (mr && mr->pd_ == init_.pd && sge.length <= kMessageBytesMax &&
        mr->contains(sge.addr, sge.length)) {
      const std::uint64_t slot = sq_head_;
      fill_lean_wqe(sq_at(slot), wr, sge, init_.sq_sig_all, cseq_next_);
      if (consumes_credit(wr.opcode)) ++cseq_next_;
      sq_head_ = slot + 1;
      dev_->schedule(*this);
      return Errc::kOk;
    }
  }
  if (state_ == QpState::kReset || state_ == QpState::kInit || state_ == QpState::kRtr)
    return Errc::kInvalidState;
  const bool ud = init_.type == QpType::kUd;
  if (static_cast<unsigned>(wr.opcode) > static_cast<unsigned>(WrOpcode::kAtomicFetchAndAdd))
    return Errc::kInvalidArgument;
  const bool is_send = wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithImm;
  if (ud && !is_send) return Errc::kWrongQpType;
  if (ud && !wr.ah) return Errc::kInvalidArgument;
  if (wr.sg_list.size() > max_send_sge_) return Errc::kTooManySge;
  if (sq_head_ - sq_comp_ >= sq_depth_) return Errc::kQueueFull;
  const bool atomic =
      wr.opcode == WrOpcode::kAtomicCmpAndSwp || wr.opcode == WrOpcode::kAtomicFetchAndAdd;
  const bool read = wr.opcode == WrOpcode::kRdmaRead;
  std::uint64_t total = 0;
  for (const Sge& s : wr.sg_list) total += s.length;
  if (total > kMessageBytesMax) return Errc::kInvalidArgument;
  const bool inl = (wr.send_flags & kInline) != 0;
  if (inl) {
    if (read || atomic) return Errc::kInvalidArgument;
    if (total > inline_max_) return Errc::kInlineTooLarge;
    for (const Sge& s : wr.sg_list)
      if (s.length && !s.addr) return Errc::kInvalidArgument;
  } else {
    const std::uint32_t need = (read || atomic) ? std::uint32_t{kAccessLocalWrite} : 0u;
    if (Errc e = dev_->check_sges(static_cast<PdImpl*>(init_.pd), wr.sg_list, need); e != Errc::kOk)
      return e;
  }
  if (atomic && (wr.sg_list.size() != 1 || total != kAtomicBytes)) return Errc::kInvalidArgument;
  const AhImpl* ah = nullptr;
  if (ud) {
    // wr.ah is the caller's pointer: it may be stale or another Device's, so it is looked up by
    // identity before anything reads it.
    ah = dev_->find_ah(wr.ah);
    if (!ah || ah->pd_ != init_.pd) return Errc::kInvalidArgument;
    const auto& ports = dev_->config_.ports;
    const std::uint8_t port = attr_.port_num;
    if (total > mtu_bytes(ports[port - 1].max_mtu)) return Errc::kInvalidArgument;
  }

  const std::uint64_t slot = sq_head_;
  SendWqe& w = sq_at(slot);
  // Every field is set (the slot holds an older WQE); the UD address vector only on UD QPs,
  // the only ones that read it.
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.signaled = init_.sq_sig_all || (wr.send_flags & kSignaled);
  w.fence = (wr.send_flags & kFence) != 0;
  w.is_inline = inl;
  w.solicited = (wr.send_flags & kSolicited) != 0;
  w.credit_stalled = false;
  w.total_bytes = static_cast<std::uint32_t>(total);
  w.imm = wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.first_psn = 0;
  w.npkts = 0;
  if (ud) {
    w.av = ah->av();
    w.remote_qpn = wr.remote_qpn & kPsnMask;
    // IBA 10.2.5 / o9-..: a Q_Key with the high bit set means "use the QP's own Q_Key".
    w.remote_qkey = (wr.remote_qkey & 0x80000000u) ? attr_.qkey : wr.remote_qkey;
  } else {
    w.remote_qpn = 0;
    w.remote_qkey = 0;
  }
  if (inl) {
    std::uint8_t* dst = sq_inline(slot);
    w.contiguous = dst;
    for (const Sge& s : wr.sg_list) {
      if (s.length) std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
      dst += s.length;
    }
    w.num_sge = 0;
  } else {
    w.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
    w.contiguous = !wr.sg_list.empty() && total <= wr.sg_list[0].length
                       ? reinterpret_cast<const std::uint8_t*>(wr.sg_list[0].addr)
                       : nullptr;
    std::copy(wr.sg_list.begin(), wr.sg_list.end(), &sq_sge_[(slot & sq_mask_) * max_send_sge_]);
  }
  w.cseq = cseq_next_;
  if (!ud && consumes_credit(wr.opcode)) ++cseq_next_;
  ++sq_head_;

  if (state_ == QpState::kErr || state_ == QpState::kSqe) {
    // Verbs: a WR posted to a QP in error completes at once, flushed.
    complete_send(w, WcStatus::kWrFlushErr);
    sq_comp_ = sq_req_ = sq_launched_ = sq_head_;
    return Errc::kOk;
  }
  dev_->schedule(*this);
  return Errc::kOk;
}

Errc QpImpl::post_send_burst(std::span<const SendWr> wrs, std::size_t& posted) {
  posted = 0;
  rewind_sq_if_drained();
  // The lean loop posts into an RC QP in RTS; anything else is post_send's, WR by WR.
  if (init_.type != QpType::kRc || state_ != QpState::kRts)
    return QueuePair::post_send_burst(wrs, posted);
  const auto* pd = static_cast<const PdImpl*>(init_.pd);
  // The region of the previous WR's SGE: the lookup of its L_Key is made once per run of WRs
  // from one region (nothing deregisters it inside this call).
  const MrImpl* mr = nullptr;
  std::uint32_t mr_key = 0;
  std::uint64_t mr_base = 0, mr_bytes = 0;  // mr's extent
  Errc err = Errc::kOk;
  std::size_t i = 0;
  while (i < wrs.size()) {
    if (mr != nullptr) {
      // A run of WRs posted inline: post_send's checks for a SEND/WRITE (with or without
      // immediate) of one SGE in the cached region, not inline, in RTS: the opcode, the queue's
      // room, the L_Key (IBA 10.6.3.2: region of this PD, holding the bytes; a local read needs
      // no access bit) and the size. No call inside it, so the queue's state and the region stay
      // in registers; it stops at the first WR it does not take, which the code below handles.
      // Its end is a WR pointer (the list's end or the queue's room, whichever comes first) and
      // the region's check two compares, so that the loop keeps few values live (every one more
      // was spilled).
      std::uint64_t head = sq_head_, cseq = cseq_next_;
      const std::uint64_t mask = sq_mask_;
      const std::uint64_t room = sq_comp_ + sq_depth_ - head;  // head <= sq_comp_ + sq_depth_
      const bool sig_all = init_.sq_sig_all;
      SendWqe* const sq = sq_.data();
      const SendWr* const first = wrs.data() + i;
      const SendWr* const end = first + std::min<std::uint64_t>(wrs.size() - i, room);
      const SendWr* wr = first;
      for (; wr != end; ++wr, ++head) {
        if (static_cast<unsigned>(wr->opcode) >
                static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) ||
            wr->sg_list.size() != 1 || (wr->send_flags & kInline))
          break;
        // The WR's fields loaded before the WQE's stores (which may alias the WR, and would make
        // the compiler reload it).
        const Sge sge = wr->sg_list[0];
        // kMessageBytesMax and MrImpl::contains on the extent (an address below the region
        // wraps its offset past mr_bytes).
        const std::uint64_t offset = sge.addr - mr_base;
        if (sge.lkey != mr_key || sge.length > kMessageBytesMax || offset > mr_bytes ||
            sge.length > mr_bytes - offset)
          break;
        const WrOpcode op = wr->opcode;
        fill_lean_wqe(sq[head & mask], *wr, sge, sig_all, cseq);
        cseq += send_write_consumes_credit(op);
      }
      i += static_cast<std::size_t>(wr - first);
      sq_head_ = head;
      cseq_next_ = cseq;
      if (i == wrs.size()) break;
      if (wr != first && wrs[i].sg_list.size() == 1 && wrs[i].sg_list[0].lkey == mr_key) {
        // Stopped on a WR of the same region for a reason the lookup cannot change: post_send.
        posted = i;
        err = post_send(wrs[i]);
        if (err != Errc::kOk) break;
        ++i;
        continue;
      }
    }
    // The first WR, or one the run did not take: its region looked up (once per run of WRs
    // from one region) for the next run; a WR the run cannot take goes through post_send,
    // which posts it or returns its error.
    const SendWr& wr = wrs[i];
    const bool lean =
        static_cast<unsigned>(wr.opcode) <= static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) &&
        wr.sg_list.size() == 1 && !(wr.send_flags & kInline);
    if (lean && (mr == nullptr || wr.sg_list[0].lkey != mr_key)) {
      const std::uint32_t key = wr.sg_list[0].lkey;
      const MrImpl* found = dev_->find_mr(key);
      if (found != nullptr && found->pd_ == pd) {
        mr = found;
        mr_key = key;
        mr_base = reinterpret_cast<std::uintptr_t>(mr->addr());
        mr_bytes = mr->length();
        continue;  // the run takes it, or stops on it with this region cached
      }
    }
    // Not a lean WR, no region of this PD for its L_Key, or one the run stopped on.
    mr = nullptr;
    posted = i;
    err = post_send(wr);
    if (err != Errc::kOk) break;
    ++i;
  }
  posted = i;
  // post_send schedules the QP on every post; the first schedule is the one that counts.
  if (posted != 0) dev_->schedule(*this);
  return err;
}

Errc QpImpl::post_recv_burst(std::span<const RecvWr> wrs, std::size_t& posted) {
  posted = 0;
  if (init_.srq || state_ == QpState::kReset || state_ == QpState::kErr)
    return QueuePair::post_recv_burst(wrs, posted);
  const auto* pd = static_cast<const PdImpl*>(init_.pd);
  const MrImpl* mr = nullptr;  // as post_send_burst
  std::uint32_t mr_key = 0;
  while (posted < wrs.size()) {
    // WRs of one SGE in the region of the previous WR's (the commonest list): a run of them
    // with its checks inline (RecvQueue::push1_run).
    if (mr != nullptr && 1 <= rq_.max_sge()) {
      posted += rq_.push1_run(wrs.subspan(posted), mr_key,
                              reinterpret_cast<std::uintptr_t>(mr->addr()), mr->length());
      if (posted == wrs.size()) break;
    }
    const RecvWr& wr = wrs[posted];
    // A WR of one SGE in another region (the list's first): its region is looked up and, if the
    // run may use it (this PD's, local write), the run takes the WR (push1_run checks the rest)
    // instead of the general push below. Once per region: the run stops on this WR again only
    // with the key cached, and then it goes on below.
    if (wr.sg_list.size() == 1 && (mr == nullptr || wr.sg_list[0].lkey != mr_key)) {
      const std::uint32_t key = wr.sg_list[0].lkey;
      const MrImpl* found = dev_->find_mr(key);
      if (found != nullptr && found->pd_ == pd && (found->access() & kAccessLocalWrite)) {
        mr = found;
        mr_key = key;
        continue;
      }
    }
    // post_recv's checks (SGE count, room, IBA 10.6.3.2 L_Keys with local write); a WR that
    // fails one goes through post_recv for its error.
    bool ok = wr.sg_list.size() <= rq_.max_sge() && !rq_.full();
    for (std::size_t i = 0; ok && i < wr.sg_list.size(); ++i) {
      const Sge& s = wr.sg_list[i];
      if (mr == nullptr || s.lkey != mr_key) {
        mr = dev_->find_mr(s.lkey);
        mr_key = s.lkey;
        if (mr != nullptr && (mr->pd_ != pd || !(mr->access() & kAccessLocalWrite))) mr = nullptr;
      }
      ok = mr != nullptr && mr->contains(s.addr, s.length);
    }
    if (!ok) {
      mr = nullptr;
      if (Errc e = post_recv(wr); e != Errc::kOk) return e;
    } else {
      rq_.push(wr);
    }
    ++posted;
  }
  return Errc::kOk;
}

Errc QpImpl::post_recv(const RecvWr& wr) {
  if (init_.srq) return Errc::kInvalidState;  // receives come from the SRQ
  if (state_ == QpState::kReset) return Errc::kInvalidState;
  if (wr.sg_list.size() > rq_.max_sge()) return Errc::kTooManySge;
  if (rq_.full()) return Errc::kQueueFull;
  if (Errc e = dev_->check_sges(static_cast<PdImpl*>(init_.pd), wr.sg_list, kAccessLocalWrite);
      e != Errc::kOk)
    return e;
  if (state_ == QpState::kErr) {
    complete_recv(wr.wr_id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0);
    return Errc::kOk;
  }
  rq_.push(wr);
  return Errc::kOk;
}

// ---- completions and errors -----------------------------------------------------------------

// Completions are written in place into the CQ's next slot (or, when it is full or in error,
// given to push_cqe, which turns that into an overrun); every field is set once.
void QpImpl::complete_send(const SendWqe& w, WcStatus status) {
  if (status == WcStatus::kSuccess && !w.signaled) return;
  auto* cq = static_cast<CqImpl*>(init_.send_cq);
  const auto fill = [&](WorkCompletion& wc) {
    wc.wr_id = w.wr_id;
    wc.status = status;
    wc.opcode = wc_opcode(w.opcode);
    wc.vendor_err = 0;
    wc.byte_len = w.total_bytes;
    wc.imm_data = 0;
    wc.qp_num = qpn_;
    wc.src_qp = 0;
    wc.wc_flags = 0;
    wc.pkey_index = attr_.pkey_index;
    wc.slid = 0;
    wc.sl = 0;
    wc.dlid_path_bits = 0;
  };
  if (WorkCompletion* slot = dev_->cqe_slot(cq)) {
    fill(*slot);
    dev_->commit_cqe(cq, status);
  } else {
    WorkCompletion local;
    fill(local);
    dev_->push_cqe(cq, local);
  }
}

void QpImpl::complete_recv(std::uint64_t wr_id, WcStatus status, WcOpcode op,
                           std::uint32_t byte_len, std::uint32_t imm, std::uint32_t wc_flags,
                           std::uint32_t src_qp, std::uint16_t slid, std::uint8_t sl) {
  auto* cq = static_cast<CqImpl*>(init_.recv_cq);
  const auto fill = [&](WorkCompletion& wc) {
    wc.wr_id = wr_id;
    wc.status = status;
    wc.opcode = op;
    wc.vendor_err = 0;
    wc.byte_len = byte_len;
    wc.imm_data = imm;
    wc.qp_num = qpn_;
    wc.src_qp = src_qp;
    wc.wc_flags = wc_flags;
    wc.pkey_index = attr_.pkey_index;
    wc.slid = slid;
    wc.sl = sl;
    wc.dlid_path_bits = 0;
  };
  if (WorkCompletion* slot = dev_->cqe_slot(cq)) {
    fill(*slot);
    dev_->commit_cqe(cq, status);
  } else {
    WorkCompletion local;
    fill(local);
    dev_->push_cqe(cq, local);
  }
}

void QpImpl::flush_all() {
  // Send queue: every outstanding WR completes with WR_FLUSH_ERR, signaled or not.
  while (sq_comp_ != sq_head_) {
    const SendWqe& w = sq_at(sq_comp_);
    ++sq_comp_;
    complete_send(w, WcStatus::kWrFlushErr);
  }
  sq_req_ = sq_launched_ = sq_comp_;
  if (have_recv_) {
    have_recv_ = false;
    complete_recv(cur_recv_.wr_id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0);
  }
  if (!init_.srq) {
    while (!rq_.empty()) {
      const std::uint64_t id = rq_.front().wr_id;
      rq_.pop();
      complete_recv(id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0);
    }
  } else {
    dev_->raise(AsyncEventType::kQpLastWqeReached, qpn_);  // IBA 11.6.3.1
  }
}

void QpImpl::enter_error() {
  if (state_ == QpState::kErr) return;
  state_ = QpState::kErr;
  req_state_ = ReqState::kError;
  resp_state_ = RespState::kError;
  comp_state_ = CompState::kError;
  rto_deadline_ = rnr_deadline_ = ack_deadline_ = kNoDeadline;
  respq_count_ = 0;
  resend_count_ = 0;
  resp_fatal_pending_ = false;
  flush_all();
}

void QpImpl::fatal(WcStatus status, bool send_side) {
  if (state_ == QpState::kErr) return;
  if (send_side && sq_comp_ != sq_head_) {
    const SendWqe& w = sq_at(sq_comp_);
    ++sq_comp_;
    if (sq_req_ < sq_comp_) sq_req_ = sq_comp_;
    if (sq_launched_ < sq_comp_) sq_launched_ = sq_comp_;
    complete_send(w, status);
  }
  enter_error();
  dev_->raise(AsyncEventType::kQpFatal, qpn_);
}

}  // namespace weft::transport
