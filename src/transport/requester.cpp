// transport/requester.cpp — the requester engine (IBA 9.7.1-9.7.4, rxe_req.c): turns send WQEs
// into request packets. Segmentation by path MTU (9.7.2.1), 24-bit PSNs, AckReq, the initiator
// depth (max_rd_atomic, 9.7.4.1.4), fences (10.8.3.3), end-to-end credits (9.7.7.2),
// go-back-N rewind (9.7.4.1.3) and selective-repeat single-PSN resends.
//
// Zero copy: a packet's payload points into registered memory (or the WQE's inline bytes); only
// a packet whose payload straddles two SGEs is gathered into the Device's bounce buffer.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

#include "src/transport/device_impl.hpp"
#include "src/transport/ib_tables.hpp"
#include "src/transport/qp.hpp"

namespace weft::transport {
namespace {

// Periodic AckReq inside long streams of unsignaled or multi-packet messages, so the completer's
// window keeps moving without waiting for a message end.
constexpr std::uint32_t kAckReqEveryPackets = 32;

using wire::Opcode;

// Payload bytes [offset, offset+len) of a WQE: a pointer into one SGE, or a gather into bounce.
const std::uint8_t* gather_payload(QpImpl& qp, std::uint64_t slot, const SendWqe& w,
                                   std::uint64_t offset, std::uint32_t len);
inline const std::uint8_t* payload_ptr(QpImpl& qp, std::uint64_t slot, const SendWqe& w,
                                       std::uint64_t offset, std::uint32_t len) {
  if (len == 0) return nullptr;
  if (w.contiguous) return w.contiguous + offset;  // inline, or inside the first SGE
  return gather_payload(qp, slot, w, offset, len);
}

// Payload bytes [offset, offset+len) past the first SGE: a pointer into one SGE, or a gather
// into the Device's bounce buffer when they straddle SGEs.
[[gnu::noinline]] const std::uint8_t* gather_payload(QpImpl& qp, std::uint64_t slot,
                                                     const SendWqe& w, std::uint64_t offset,
                                                     std::uint32_t len) {
  const Sge* sges = qp.sq_sges(slot);
  std::uint32_t i = 0;
  while (i < w.num_sge && offset >= sges[i].length) offset -= sges[i++].length;
  WEFT_ASSERT(i < w.num_sge);
  if (offset + len <= sges[i].length)
    return reinterpret_cast<const std::uint8_t*>(sges[i].addr) + offset;
  std::uint8_t* b = qp.dev_->bounce(len);
  std::uint32_t done = 0;
  for (; i < w.num_sge && done < len; ++i, offset = 0) {
    const auto k =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(sges[i].length - offset, len - done));
    std::memcpy(b + done, reinterpret_cast<const std::uint8_t*>(sges[i].addr) + offset, k);
    done += k;
  }
  return b;
}

// SEND / WRITE request opcodes (IBA 9.2.1 Table 39) by [SEND, SEND+Imm, WRITE, WRITE+Imm]
// (the WrOpcode values 0..3) and position in the message [ONLY, FIRST, MIDDLE, LAST].
constexpr Opcode kDataOpcodes[4][4] = {
    {Opcode::kRcSendOnly, Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLast},
    {Opcode::kRcSendOnlyImm, Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastImm},
    {Opcode::kRcWriteOnly, Opcode::kRcWriteFirst, Opcode::kRcWriteMiddle, Opcode::kRcWriteLast},
    {Opcode::kRcWriteOnlyImm, Opcode::kRcWriteFirst, Opcode::kRcWriteMiddle,
     Opcode::kRcWriteLastImm},
};
static_assert(static_cast<int>(WrOpcode::kSend) == 0 &&
              static_cast<int>(WrOpcode::kSendWithImm) == 1 &&
              static_cast<int>(WrOpcode::kRdmaWrite) == 2 &&
              static_cast<int>(WrOpcode::kRdmaWriteWithImm) == 3);

// Index of the launched WQE whose PSN range holds psn, or sq_launched_.
std::uint64_t find_wqe(QpImpl& qp, std::uint32_t psn) {
  for (std::uint64_t i = qp.sq_comp_; i < qp.sq_launched_; ++i) {
    const SendWqe& w = qp.sq_at(i);
    if (psn_le(w.first_psn, psn) && psn_lt(psn, psn_add(w.first_psn, w.npkts))) return i;
  }
  return qp.sq_launched_;
}

inline void st16(std::uint8_t* p, unsigned v) {
  const auto w = __builtin_bswap16(static_cast<std::uint16_t>(v));
  std::memcpy(p, &w, 2);
}
inline void st32(std::uint8_t* p, std::uint32_t v) {
  const auto w = __builtin_bswap32(v);
  std::memcpy(p, &w, 4);
}
inline void st64(std::uint8_t* p, std::uint64_t v) {
  const auto w = __builtin_bswap64(v);
  std::memcpy(p, &w, 8);
}

// A lean packet's fields after its headers, in three 8-byte stores instead of eight field
// stores (the loops below build one per WQE or per PMTU): payload_bytes and pad_bytes; the CRC
// fields (zero, not valid) and corrupt (false); port_num, dlid and sl (the route's, the same for
// the whole burst: route_word). Bytes between fields are padding. Little-endian layout only;
// elsewhere the fields one by one.
constexpr std::size_t kTxLenOffset = offsetof(TxPacket, payload_bytes);
constexpr bool kTxWide =
    std::endian::native == std::endian::little &&
    offsetof(TxPacket, pad_bytes) == kTxLenOffset + 4 &&
    offsetof(TxPacket, icrc) == kTxLenOffset + 8 && offsetof(TxPacket, vcrc) == kTxLenOffset + 12 &&
    offsetof(TxPacket, crcs_valid) == kTxLenOffset + 14 &&
    offsetof(TxPacket, corrupt) == kTxLenOffset + 15 &&
    offsetof(TxPacket, port_num) == kTxLenOffset + 16 &&
    offsetof(TxPacket, dlid) == kTxLenOffset + 18 && offsetof(TxPacket, sl) == kTxLenOffset + 20 &&
    sizeof(TxPacket) >= kTxLenOffset + 24;
// SendWqe::first_psn and npkts in one 8-byte store (the ONLY loop launches a WQE per packet).
constexpr bool kWqePsnsWide = std::endian::native == std::endian::little &&
                              offsetof(SendWqe, npkts) == offsetof(SendWqe, first_psn) + 4;
constexpr std::uint64_t tx_route_word(std::uint8_t port, std::uint16_t dlid, std::uint8_t sl) {
  return std::uint64_t{port} | std::uint64_t{dlid} << 16 | std::uint64_t{sl} << 32;
}
inline void store_tx_fields(TxPacket& o, std::uint32_t len, std::uint8_t pad,
                            std::uint64_t route_word, std::uint8_t port, std::uint16_t dlid,
                            std::uint8_t sl) {
  if constexpr (kTxWide) {
    // Three separate stores: as one array, GCC wrote the words to the stack and copied 16 of
    // them with one vector load, which cannot be forwarded from two 8-byte stores and waited
    // for them to reach the cache (~half of req_poll_burst's time in send64, perf).
    std::uint8_t* const f = reinterpret_cast<std::uint8_t*>(&o) + kTxLenOffset;
    const std::uint64_t lens = len | std::uint64_t{pad} << 32, crcs = 0;
    std::memcpy(f, &lens, 8);
    std::memcpy(f + 8, &crcs, 8);
    std::memcpy(f + 16, &route_word, 8);
  } else {
    o.payload_bytes = len;
    o.pad_bytes = pad;
    o.icrc = 0;
    o.vcrc = 0;
    o.crcs_valid = false;
    o.corrupt = false;
    o.port_num = port;
    o.dlid = dlid;
    o.sl = sl;
  }
}

// Encodes the QP's LRH [GRH] BTH once (through the wire codec, so the bytes are exactly what
// encode_headers makes); the per-packet fields are patched by encode_from_template.
[[gnu::noinline]] void build_template(QpImpl& qp) {
  DeviceImpl& dev = *qp.dev_;
  wire::Headers h{};
  dev.fill_route(h, qp.attr_.av, qp.attr_.pkey_index, qp.attr_.port_num);
  h.bth.dest_qp = qp.attr_.dest_qpn;
  h.bth.opcode = Opcode::kRcSendMiddle;  // no extension headers: routing + BTH only
  wire::fill_lengths(h, 0);
  const std::size_t n = wire::encode_headers(h, qp.hdr_tmpl_);
  WEFT_ASSERT(n <= QpImpl::kTmplBytesMax);
  qp.hdr_tmpl_bytes_ = static_cast<std::uint8_t>(n);
  qp.hdr_tmpl_epoch_ = dev.route_epoch_;
  if (n == QpImpl::kMidHdrBytes) {
    // MIDDLE packets (IBA 9.7.2: exactly one PMTU, no pad): the bytes encode_from_template
    // makes for them, but the PSN and AckReq.
    const std::uint32_t mtu = qp.mtu();
    const Opcode ops[2] = {Opcode::kRcSendMiddle, Opcode::kRcWriteMiddle};
    for (int k = 0; k < 2; ++k) {
      std::uint8_t* o = qp.mid_hdr_[k].data();
      std::memcpy(o, qp.hdr_tmpl_.data(), QpImpl::kMidHdrBytes);
      std::uint8_t* bth = o + wire::kLrhBytes;
      bth[0] = static_cast<std::uint8_t>(ops[k]);
      bth[1] = 0;
      st32(bth + 8, 0);
      st16(o + 4, static_cast<unsigned>((QpImpl::kMidHdrBytes + mtu + wire::kIcrcBytes) / 4));
    }
  }
}

// A SEND or WRITE request packet from the template (IBA 7.7 LRH, 8.3 GRH, 9.2 BTH, 9.3.3 RETH,
// 9.3.1 ImmDt): the same bytes DeviceImpl::finish_packet would encode from a wire::Headers.
void encode_from_template(QpImpl& qp, Opcode op, bool se, bool ack_req, std::uint32_t psn,
                          const SendWqe& w, const std::uint8_t* payload, std::uint32_t len,
                          TxPacket& out) {
  if (qp.hdr_tmpl_bytes_ == 0 || qp.hdr_tmpl_epoch_ != qp.dev_->route_epoch_) build_template(qp);
  std::uint8_t* o = out.headers.data();
  std::memcpy(o, qp.hdr_tmpl_.data(), QpImpl::kTmplBytesMax);  // fixed size: a few vector moves
  const std::size_t routing = qp.hdr_tmpl_bytes_ - wire::kBthBytes;
  std::uint8_t* bth = o + routing;
  const std::uint16_t mask = wire::opcode_info(op).mask;
  const auto pad = static_cast<std::uint8_t>((4 - len % 4) % 4);
  bth[0] = static_cast<std::uint8_t>(op);
  bth[1] = static_cast<std::uint8_t>((se ? 0x80u : 0u) | (unsigned{pad} << 4));
  st32(bth + 8, (ack_req ? 0x80000000u : 0u) | (psn & kPsnMask));
  std::uint8_t* e = bth + wire::kBthBytes;
  if (mask & wire::kHasReth) {
    st64(e, w.remote_addr);
    st32(e + 8, w.rkey);
    st32(e + 12, w.total_bytes);
    e += wire::kRethBytes;
  }
  if (mask & wire::kHasImm) {
    st32(e, w.imm);
    e += wire::kImmBytes;
  }
  const auto hb = static_cast<std::size_t>(e - o);
  const std::size_t through_icrc = hb + len + pad + wire::kIcrcBytes;
  st16(o + 4, static_cast<unsigned>(through_icrc / 4));  // LRH PktLen (7.7.8)
  if (routing > wire::kLrhBytes)                         // GRH PayLen (8.3.3)
    st16(o + wire::kLrhBytes + 4, static_cast<unsigned>(through_icrc - routing));
  out.header_bytes = static_cast<std::uint16_t>(hb);
  out.dlid = qp.attr_.av.dlid;
  out.sl = qp.attr_.av.sl;
  qp.dev_->finish_encoded(payload, len, pad, qp.attr_.port_num, out);
}

// READ and atomic requests: rarer, built through wire::Headers (kept out of line so the SEND/WRITE
// path of build_request keeps a small frame).
[[gnu::noinline]] std::uint32_t build_rd_atomic_request(QpImpl& qp, const SendWqe& w,
                                                        std::uint32_t psn, std::uint64_t offset,
                                                        TxPacket& out) {
  DeviceImpl& dev = *qp.dev_;
  const std::uint32_t next = psn_add(psn, 1);
  wire::Headers h{};
  dev.fill_route(h, qp.attr_.av, qp.attr_.pkey_index, qp.attr_.port_num);
  h.bth.dest_qp = qp.attr_.dest_qpn;
  h.bth.psn = psn;
  std::uint32_t after = next;
  if (w.opcode == WrOpcode::kRdmaRead) {
    // IBA 9.7.4.1.3: a retried READ restarts at the first missing response, with the
    // virtual address and length advanced to match.
    h.bth.opcode = Opcode::kRcReadRequest;
    h.reth = wire::Reth{
        w.remote_addr + offset, w.rkey,
        static_cast<std::uint32_t>(w.total_bytes - std::min<std::uint64_t>(offset, w.total_bytes))};
    after = psn_add(w.first_psn, w.npkts);
  } else {
    h.bth.opcode =
        w.opcode == WrOpcode::kAtomicCmpAndSwp ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd;
    h.atomic_eth = wire::AtomicEth{w.remote_addr, w.rkey,
                                   w.opcode == WrOpcode::kAtomicCmpAndSwp ? w.swap : w.compare_add,
                                   w.compare_add};
  }
  // READs and atomics are always answered, so they need no AckReq; they restart the count.
  qp.pkts_since_ackreq_ = 0;
  dev.finish_packet(h, nullptr, 0, qp.attr_.port_num, out);
  if (psn_lt(psn, qp.psn_high_)) ++dev.counters_.retransmit_packets;
  if (psn_lt(qp.psn_high_, after)) qp.psn_high_ = after;
  return after;
}

// Builds the request packet of WQE `slot` at `psn` (inside its range). Returns the PSN after it.
std::uint32_t build_request(QpImpl& qp, std::uint64_t slot, std::uint32_t psn, TxPacket& out) {
  DeviceImpl& dev = *qp.dev_;
  SendWqe& w = qp.sq_at(slot);
  const std::uint32_t idx = psn_sub(psn, w.first_psn);
  const std::uint32_t mtu = qp.mtu();
  const std::uint64_t offset = std::uint64_t{idx} * mtu;
  const std::uint32_t next = psn_add(psn, 1);
  ++qp.pkts_since_ackreq_;
  if (!is_rd_atomic(w.opcode)) {
    // SEND and WRITE: the data path, from the header template.
    const bool last = idx + 1 == w.npkts;
    const unsigned position = w.npkts == 1 ? 0 : idx == 0 ? 1 : last ? 3 : 2;
    const Opcode op = kDataOpcodes[static_cast<unsigned>(w.opcode)][position];
    const auto len =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(mtu, w.total_bytes - offset));
    const std::uint8_t* payload = payload_ptr(qp, slot, w, offset, len);
    // IBA 9.7.6.1.2: AckReq where the requester needs to hear back — the end of a signaled or
    // credit-consuming message, the end of what is queued, and periodically in long streams.
    // (With delayed ACKs the responder acknowledges an unsignaled tail by itself.)
    const bool tail = slot + 1 == qp.sq_head_ && dev.config_.ack_delay_ns == 0;
    const bool ack_req = (last && (w.signaled || tail || consumes_credit(w.opcode))) ||
                         qp.pkts_since_ackreq_ >= kAckReqEveryPackets;
    if (ack_req) qp.pkts_since_ackreq_ = 0;
    encode_from_template(qp, op, last && w.solicited, ack_req, psn, w, payload, len, out);
    if (psn_lt(psn, qp.psn_high_)) ++dev.counters_.retransmit_packets;
    if (psn_lt(qp.psn_high_, next)) qp.psn_high_ = next;
    return next;
  }
  return build_rd_atomic_request(qp, w, psn, offset, out);
}

// The commonest packet, built in req_poll without a call: a MIDDLE packet (IBA 9.7.2: one whole
// PMTU, no pad) of a SEND/WRITE whose payload is contiguous, on a route without a GRH, from the
// prepared header (QpImpl::mid_hdr_) with its PSN and the periodic AckReq (a MIDDLE is never
// `last`, so only the every-kAckReqEveryPackets part of build_request's rule applies). The same
// bytes and state changes as build_request; false (nothing changed) for anything else.
[[gnu::always_inline]] inline bool build_middle(QpImpl& qp, SendWqe& w, std::uint32_t psn,
                                                TxPacket& out) {
  DeviceImpl& dev = *qp.dev_;
  const std::uint32_t idx = psn_sub(psn, w.first_psn);
  if (idx == 0 || idx + 1 >= w.npkts || !w.contiguous || is_rd_atomic(w.opcode) ||
      qp.hdr_tmpl_bytes_ != QpImpl::kMidHdrBytes || qp.hdr_tmpl_epoch_ != dev.route_epoch_)
    return false;
  const std::uint32_t mtu = qp.mtu();
  const std::uint32_t next = psn_add(psn, 1);
  const bool ack_req = ++qp.pkts_since_ackreq_ >= kAckReqEveryPackets;
  if (ack_req) qp.pkts_since_ackreq_ = 0;
  const bool write = w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kRdmaWriteWithImm;
  std::uint8_t* o = out.headers.data();
  std::memcpy(o, qp.mid_hdr_[write].data(), QpImpl::kMidHdrBytes);
  st32(o + wire::kLrhBytes + 8, (ack_req ? 0x80000000u : 0u) | (psn & kPsnMask));
  out.header_bytes = QpImpl::kMidHdrBytes;
  out.dlid = qp.attr_.av.dlid;
  out.sl = qp.attr_.av.sl;
  dev.finish_encoded(w.contiguous + std::uint64_t{idx} * mtu, mtu, 0, qp.attr_.port_num, out);
  if (psn_lt(psn, qp.psn_high_)) ++dev.counters_.retransmit_packets;
  if (psn_lt(qp.psn_high_, next)) qp.psn_high_ = next;
  return true;
}

void recount_rd_atomic(QpImpl& qp) {
  qp.rd_atomic_inflight_ = 0;
  for (std::uint64_t i = qp.sq_comp_; i < qp.sq_req_; ++i)
    if (is_rd_atomic(qp.sq_at(i).opcode)) ++qp.rd_atomic_inflight_;
}

bool ud_poll(QpImpl& qp, TxPacket& out) {
  if (qp.state_ != QpState::kRts || qp.sq_req_ == qp.sq_head_) return false;
  DeviceImpl& dev = *qp.dev_;
  const std::uint64_t slot = qp.sq_req_;
  SendWqe& w = qp.sq_at(slot);
  wire::Headers h{};
  dev.fill_route(h, w.av, qp.attr_.pkey_index, w.av.port_num);
  h.bth.opcode = w.opcode == WrOpcode::kSendWithImm ? Opcode::kUdSendOnlyImm : Opcode::kUdSendOnly;
  h.bth.dest_qp = w.remote_qpn;
  h.bth.psn = qp.req_psn_;
  h.bth.se = w.solicited;
  h.deth = wire::Deth{w.remote_qkey, qp.qpn_};  // IBA 9.3.2
  h.imm = w.imm;
  qp.req_psn_ = psn_add(qp.req_psn_, 1);
  const std::uint8_t* payload = payload_ptr(qp, slot, w, 0, w.total_bytes);
  dev.finish_packet(h, payload, w.total_bytes, w.av.port_num, out);
  // UD: a send completes once it is on the wire (IBA 10.8.3.1, unreliable service).
  ++qp.sq_req_;
  qp.sq_launched_ = qp.sq_comp_ = qp.sq_req_;
  qp.complete_send(w, WcStatus::kSuccess);
  return true;
}

}  // namespace

void req_ensure_template(QpImpl& qp) {
  if (qp.hdr_tmpl_bytes_ == 0 || qp.hdr_tmpl_epoch_ != qp.dev_->route_epoch_) build_template(qp);
}

std::uint32_t wqe_npkts(const QpImpl& qp, const SendWqe& w) {
  if (w.opcode == WrOpcode::kAtomicCmpAndSwp || w.opcode == WrOpcode::kAtomicFetchAndAdd) return 1;
  const std::uint32_t mtu = qp.mtu();
  return std::max<std::uint32_t>(1, (w.total_bytes + mtu - 1) / mtu);
}

void req_rewind(QpImpl& qp, std::uint32_t psn) {
  qp.sq_req_ = find_wqe(qp, psn);
  qp.req_psn_ = qp.sq_req_ < qp.sq_launched_ ? psn : qp.psn_high_;
  qp.resend_count_ = 0;
  recount_rd_atomic(qp);
  qp.dev_->schedule(qp);
}

void req_queue_resend(QpImpl& qp, std::uint32_t psn) {
  if (qp.resend_count_ >= kResendQueueMax) return;  // the timer recovers the rest
  qp.resend_[(qp.resend_head_ + qp.resend_count_) % kResendQueueMax] = psn;
  ++qp.resend_count_;
  qp.dev_->schedule(qp);
}

bool req_poll(QpImpl& qp, TimeNs now, TxPacket& out) {
  if (qp.init_.type == QpType::kUd) return ud_poll(qp, out);
  if (qp.state_ != QpState::kRts && qp.state_ != QpState::kSqd) return false;
  if (qp.rnr_deadline_ != kNoDeadline) {
    qp.req_state_ = ReqState::kRnrWait;
    return false;
  }
  // Selective repeat: single-PSN resends go first.
  while (qp.resend_count_ > 0) {
    const std::uint32_t psn = qp.resend_[qp.resend_head_];
    qp.resend_head_ = (qp.resend_head_ + 1) % kResendQueueMax;
    --qp.resend_count_;
    if (psn_lt(psn, qp.comp_psn_) || !psn_lt(psn, qp.psn_high_)) continue;  // acked or unsent
    const std::uint64_t slot = find_wqe(qp, psn);
    if (slot == qp.sq_launched_) continue;
    build_request(qp, slot, psn, out);
    comp_after_send(qp, now);
    return true;
  }
  if (qp.sq_req_ == qp.sq_head_) {
    qp.req_state_ = ReqState::kIdle;
    return false;
  }
  const std::uint64_t slot = qp.sq_req_;
  SendWqe& w = qp.sq_at(slot);
  if (slot >= qp.sq_launched_) {
    // Starting a new WQE: every check that can hold it back (rxe_req.c's req_next_wqe).
    if (qp.state_ == QpState::kSqd) {
      qp.req_state_ = ReqState::kDrained;
      return false;
    }
    const bool rd_atomic = is_rd_atomic(w.opcode);
    if (w.fence && qp.rd_atomic_inflight_ > 0) {
      qp.req_state_ = ReqState::kWaitFence;
      return false;
    }
    if (rd_atomic && qp.rd_atomic_inflight_ >= qp.attr_.max_rd_atomic) {
      qp.req_state_ = ReqState::kWaitRdAtomic;
      return false;
    }
    // IBA 9.7.7.2.5: without credits, a requester may still send one message at a time (when
    // nothing credit-consuming is unacknowledged) so the next ACK tells it the count.
    if (consumes_credit(w.opcode) && !qp.credits_unlimited_ && w.cseq >= qp.credit_limit_ &&
        w.cseq != qp.cseq_acked_) {
      if (!w.credit_stalled) {
        w.credit_stalled = true;
        ++qp.dev_->counters_.credit_stalls;
      }
      qp.req_state_ = ReqState::kWaitCredits;
      return false;
    }
    w.first_psn = qp.req_psn_;
    w.npkts = wqe_npkts(qp, w);
    qp.sq_launched_ = slot + 1;
  }
  qp.req_state_ = ReqState::kSending;
  const std::uint32_t next = build_middle(qp, w, qp.req_psn_, out)
                                 ? psn_add(qp.req_psn_, 1)
                                 : build_request(qp, slot, qp.req_psn_, out);
  qp.req_psn_ = next;
  if (next == psn_add(w.first_psn, w.npkts)) {
    ++qp.sq_req_;
    if (is_rd_atomic(w.opcode)) ++qp.rd_atomic_inflight_;
  }
  comp_after_send(qp, now);
  return true;
}

namespace {

// An ONLY packet's headers (build_request's, IBA 9.7.2: the whole message in one packet), from
// the template's LRH and first 8 BTH bytes with PktLen (7.7.8), opcode, SE and PadCnt (9.2) set
// (lrh, bth_word), then the AckReq/PSN word; WRITE ONLY: the RETH (9.3.3); with immediate: ImmDt
// (9.3.1). The WQE's RETH and ImmDt fields are read where they are stored (each is used once).
inline void store_only_headers(std::uint8_t* h, std::uint64_t lrh, std::uint64_t bth_word,
                               bool ack_req, std::uint32_t psn, unsigned opi, const SendWqe& w,
                               std::uint32_t len) {
  std::memcpy(h, &lrh, 8);
  std::memcpy(h + wire::kLrhBytes, &bth_word, 8);
  st32(h + wire::kLrhBytes + 8, (ack_req ? 0x80000000u : 0u) | psn);
  std::uint8_t* e = h + QpImpl::kMidHdrBytes;
  if (opi >= static_cast<unsigned>(WrOpcode::kRdmaWrite)) {
    st64(e, w.remote_addr);
    st32(e + 8, w.rkey);
    st32(e + 12, len);
    e += wire::kRethBytes;
  }
  if (opi & 1) st32(e, w.imm);
}

// The headers' length of an ONLY packet by WrOpcode (SEND, SEND with immediate, WRITE, WRITE with
// immediate): LRH + BTH, + RETH for a WRITE (9.3.3), + ImmDt with immediate (9.3.1).
constexpr std::array<std::uint8_t, 4> kOnlyHeaderBytes = {
    QpImpl::kMidHdrBytes, QpImpl::kMidHdrBytes + wire::kImmBytes,
    QpImpl::kMidHdrBytes + wire::kRethBytes,
    QpImpl::kMidHdrBytes + wire::kRethBytes + wire::kImmBytes};

// The tx route of a burst: what store_tx_fields writes after the headers.
struct TxRoute {
  std::uint64_t word;
  std::uint8_t port;
  std::uint16_t dlid;
  std::uint8_t sl;
};

// req_poll_burst for a send queue holding exactly one new WQE (sq_req_ == sq_launched_ ==
// sq_head_ - 1) under the lean conditions: the ONLY run below for a run of one, without its
// setup for longer runs (the table of BTH words by opcode, the run's bounds and sums, the
// outer loop, the end_run round): a latency ping-pong posts one WR per round trip. The same
// checks, the same bytes (test RcData.OneWqeFastPathEqualsTheRunPathByteForByte) and the same
// state afterwards. Returns false, having changed nothing, when the WQE is not one the ONLY run
// takes (a READ or atomic, a fence behind READs/atomics, more than a PMTU, a gathered payload,
// no end-to-end credit: 9.7.7.2.5); req_poll_burst's general rounds take it then.
bool req_one_only(QpImpl& qp, TimeNs now, TxPacket& o, std::uint64_t lrh_base,
                  std::uint64_t bth_base, std::uint32_t mtu, const TxRoute& route) {
  const std::uint64_t slot = qp.sq_req_;
  SendWqe& w = qp.sq_at(slot);
  const std::uint32_t len = w.total_bytes;
  const unsigned opi = static_cast<unsigned>(w.opcode);
  if (opi > static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) ||
      (w.fence && qp.rd_atomic_inflight_ > 0) || len > mtu || (len != 0 && !w.contiguous))
    return false;
  // The run's credit rule (cseq < max(credit_limit_, cseq_acked_ + 1); see there).
  const bool credit = send_write_consumes_credit(w.opcode);
  if (credit && !qp.credits_unlimited_ && w.cseq >= std::max(qp.credit_limit_, qp.cseq_acked_ + 1))
    return false;
  DeviceImpl& dev = *qp.dev_;
  // The WQE is the queue's last (slot + 1 == head): AckReq unless ACKs may be delayed.
  std::uint32_t since = qp.pkts_since_ackreq_ + 1;
  const bool ack_req =
      w.signaled || dev.config_.ack_delay_ns == 0 || credit || since >= kAckReqEveryPackets;
  if (ack_req) since = 0;
  const std::uint32_t psn = qp.req_psn_, next = psn_add(psn, 1);
  w.first_psn = psn;
  w.npkts = 1;
  const std::uint8_t pad = static_cast<std::uint8_t>(-len & 3);
  const std::uint16_t hb = kOnlyHeaderBytes[opi];
  const auto words = static_cast<std::uint16_t>((hb + len + pad + wire::kIcrcBytes) / 4);
  const std::uint64_t lrh = lrh_base | std::uint64_t{__builtin_bswap16(words)} << 32;
  const std::uint64_t bth_word = bth_base | static_cast<std::uint8_t>(kDataOpcodes[opi][0]) |
                                 std::uint64_t{pad} << 12 |
                                 std::uint64_t{w.solicited ? 0x80u : 0u} << 8;
  store_only_headers(o.headers.data(), lrh, bth_word, ack_req, psn, opi, w, len);
  o.header_bytes = hb;
  o.payload = len ? w.contiguous : nullptr;
  store_tx_fields(o, len, pad, route.word, route.port, route.dlid, route.sl);
  if (dev.config_.crc == CrcMode::kCompute) dev.compute_crcs(o);
  // req_poll's PSN bookkeeping: a PSN before psn_high_ is a resend (9.7.1).
  const std::uint32_t high = qp.psn_high_;
  dev.counters_.retransmit_packets += psn_lt(psn, high) ? 1 : 0;
  if (psn_lt(high, next)) qp.psn_high_ = next;
  qp.req_psn_ = next;
  qp.pkts_since_ackreq_ = since;
  qp.sq_req_ = qp.sq_launched_ = slot + 1;
  ++dev.counters_.tx_packets;
  dev.counters_.tx_bytes += std::uint64_t{words} * 4 + wire::kVcrcBytes;
  comp_after_send(qp, now);
  return true;
}

}  // namespace

// req_poll's answer for a drained send queue, out of line: inline, its second return path made
// GCC lay out req_poll_burst's loop with ~3 more instructions per packet.
[[gnu::noinline]] ReqBurst req_burst_idle(QpImpl& qp, std::size_t n) {
  qp.req_state_ = ReqState::kIdle;
  return ReqBurst{n, ReqBurst::kIdle};
}

ReqBurst req_poll_burst(QpImpl& qp, TimeNs now, std::span<TxPacket> out) {
  DeviceImpl& dev = *qp.dev_;
  // The lean build's conditions, once (none of them changes inside the burst): RC in RTS (SQD
  // starts nothing new), no RNR wait, no selective-repeat resends, a route without a GRH.
  bool lean = qp.init_.type == QpType::kRc && qp.state_ == QpState::kRts &&
              qp.rnr_deadline_ == kNoDeadline && qp.resend_count_ == 0;
  if (lean) {
    req_ensure_template(qp);
    lean = qp.hdr_tmpl_bytes_ == QpImpl::kMidHdrBytes;
  }
  const std::uint32_t mtu = qp.mtu();
  const bool compute = dev.config_.crc == CrcMode::kCompute;
  const std::uint16_t dlid = qp.attr_.av.dlid;
  const std::uint8_t sl = qp.attr_.av.sl, port = qp.attr_.port_num;
  const std::uint64_t route_word = tx_route_word(port, dlid, sl);
  // The headers are built in registers and stored in words: byte stores into the packet may
  // alias anything, and would make the compiler reload every QP field after each one.
  // The template's LRH and first 8 BTH bytes, without the fields each packet sets: LRH PktLen
  // (bytes 4-5), BTH opcode and SE/M/PadCnt/TVer (bytes 0-1). Words in memory order.
  constexpr std::uint64_t kLrhNoLen = std::bit_cast<std::uint64_t>(
      std::array<std::uint8_t, 8>{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF});
  constexpr std::uint64_t kBthNoOp = std::bit_cast<std::uint64_t>(
      std::array<std::uint8_t, 8>{0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  std::uint64_t lrh_base, bth_base;
  std::memcpy(&lrh_base, qp.hdr_tmpl_.data(), 8);
  std::memcpy(&bth_base, qp.hdr_tmpl_.data() + wire::kLrhBytes, 8);
  lrh_base &= kLrhNoLen;
  bth_base &= kBthNoOp;
  // One new WQE queued and nothing else (a latency ping-pong's round): req_one_only.
  if (lean && qp.sq_head_ - qp.sq_req_ == 1 && qp.sq_req_ >= qp.sq_launched_ && !out.empty() &&
      req_one_only(qp, now, out[0], lrh_base, bth_base, mtu, TxRoute{route_word, port, dlid, sl})) {
    // As the ONLY run's end: the drained queue's answer when out had room for more.
    qp.req_state_ = ReqState::kSending;
    if (out.size() > 1) return req_burst_idle(qp, 1);
    return ReqBurst{1, ReqBurst::kFull};
  }
  std::size_t n = 0;
  while (n < out.size()) {
    // The send queue drained by the runs before: req_poll would find an idle requester (the
    // lean conditions still hold: a run's end, comp_after_send, only arms the retransmission
    // timer), after this round had reloaded the whole state for nothing (~150 instructions
    // per burst; a latency ping-pong posts one WR per burst).
    // A run of lean packets, with the requester's state in locals, stored back after the run.
    std::uint64_t slot = qp.sq_req_;
    const std::uint64_t head = qp.sq_head_;
    const bool delayed_acks = dev.config_.ack_delay_ns != 0;
    std::uint32_t psn = qp.req_psn_, high = qp.psn_high_, since = qp.pkts_since_ackreq_;
    const bool fence_held = qp.rd_atomic_inflight_ > 0, unlimited = qp.credits_unlimited_;
    const std::uint64_t climit = qp.credit_limit_, cacked = qp.cseq_acked_;
    std::uint64_t retransmits = 0, tx_bytes = 0;
    const std::size_t run_first = n;
    // The run's state stored back; the first call of comp_after_send arms the timer and the
    // others find it armed (or, with no timeout, do the same again), so once after the run is
    // the same as after each packet in req_poll.
    const auto end_run = [&] {
      qp.req_psn_ = psn;
      qp.psn_high_ = high;
      qp.pkts_since_ackreq_ = since;
      qp.req_state_ = ReqState::kSending;
      dev.counters_.tx_packets += n - run_first;
      dev.counters_.tx_bytes += tx_bytes;
      dev.counters_.retransmit_packets += retransmits;
      comp_after_send(qp, now);
    };
    if (lean && slot >= qp.sq_launched_) {
      SendWqe* const sq = qp.sq_.data();
      const std::uint64_t mask = qp.sq_mask_;
      // Fewer values live across the loop (they would be spilled): its end as one slot, the
      // packet count from the slot, the bytes as 4-byte words up to the ICRC (+ the VCRC's 2).
      const std::uint64_t first_slot = slot;
      const std::uint64_t stop = slot + std::min<std::uint64_t>(out.size() - n, head - slot);
      TxPacket* o_next = out.data() + n;
      std::uint64_t words_sum = 0;
      // req_poll's rule (9.7.7.2.5): a credit-consuming WQE starts if cseq < credit_limit_, or
      // if it is the oldest one not acknowledged (cseq == cseq_acked_: without credits one at a
      // time). A WQE not yet launched cannot be acknowledged, so its cseq >= cseq_acked_, and
      // the rule is cseq < max(credit_limit_, cseq_acked_ + 1): one compare per WQE. AETH credit
      // code 31 (unlimited) as a limit no WQE reaches.
      const std::uint64_t credit_allow =
          unlimited ? ~std::uint64_t{0} : std::max(climit, cacked + 1);
      // The BTH's first 8 bytes but SE and PadCnt by WrOpcode (SEND, SEND with immediate,
      // WRITE, WRITE with immediate): the ONLY opcode (IBA 9.2.1 Table 39).
      std::array<std::uint64_t, 4> bth_by_op;
      for (unsigned op = 0; op < 4; ++op)
        bth_by_op[op] = bth_base | static_cast<std::uint8_t>(kDataOpcodes[op][0]);
      // The WQE's opcode and fence tested in its flags word (kWqeFlagsWide): an opcode past
      // WRITE with immediate (4..6, READ and atomics) has a bit of 0xFC, a fence behind
      // READs/atomics the fence byte.
      static_assert(static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) == 3);
      const std::uint64_t flags_reject = 0xFCu | (fence_held ? 0xFFull << 16 : 0);
      // The header fields that follow from the opcode and the length alone (PadCnt, PktLen, the
      // BTH's opcode byte), kept for the previous WQE's: a run of one size and opcode, the
      // commonest (a stream of equal messages), computes them once (~15 instructions per
      // packet; callgrind, transport_profile send64). sized_key is never a real key (an opcode
      // above 3 stops the loop before it is used).
      std::uint64_t sized_key = ~std::uint64_t{0}, lrh = 0, bth_sized = 0;
      std::uint16_t words = 0;
      std::uint8_t pad = 0;
      for (; slot != stop; ++slot, ++o_next) {
        SendWqe& w = sq[slot & mask];
        const std::uint32_t len = w.total_bytes;
        unsigned opi;
        bool signaled, blocked;
        std::uint32_t solicited;  // the BTH SE bit (byte 1, bit 7)
        if constexpr (kWqeFlagsWide) {
          std::uint64_t fw;
          std::memcpy(&fw, reinterpret_cast<const std::uint8_t*>(&w) + kWqeFlagsOffset, 8);
          opi = static_cast<std::uint8_t>(fw);
          signaled = static_cast<std::uint8_t>(fw >> 8) != 0;
          solicited = static_cast<std::uint32_t>(fw >> 25) & 0x80u;
          blocked = (fw & flags_reject) != 0;
        } else {
          opi = static_cast<unsigned>(w.opcode);
          signaled = w.signaled;
          solicited = w.solicited ? 0x80u : 0u;
          blocked =
              opi > static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm) || (w.fence && fence_held);
        }
        const bool credit = send_write_consumes_credit(static_cast<WrOpcode>(opi));
        // A new WQE of one packet, SEND/WRITE with a contiguous payload, that req_poll would
        // not hold back: no fence behind READs/atomics (a SEND/WRITE is not one itself),
        // end-to-end credits (9.7.7.2.5).
        if (blocked || len > mtu || (len != 0 && !w.contiguous) ||
            (credit && w.cseq >= credit_allow))
          break;
        // req_poll's launch and build_request's ONLY packet (IBA 9.7.2: the whole message).
        ++since;
        const bool ack_req = signaled || (slot + 1 == head && !delayed_acks) || credit ||
                             since >= kAckReqEveryPackets;
        if (ack_req) since = 0;
        const std::uint8_t* payload = len ? w.contiguous : nullptr;
        if constexpr (kWqePsnsWide) {
          const std::uint64_t psns = psn | std::uint64_t{1} << 32;  // first_psn, npkts = 1
          std::memcpy(&w.first_psn, &psns, 8);
        } else {
          w.first_psn = psn;
          w.npkts = 1;
        }
        // encode_from_template (store_only_headers). The WQE's RETH and ImmDt fields are read
        // where they are stored (read before the packet's first store, they stayed live across
        // the loop body and were spilled).
        const std::uint16_t hb = kOnlyHeaderBytes[opi];
        const std::uint64_t size_key = len | std::uint64_t{opi} << 32;
        if (size_key != sized_key) {
          sized_key = size_key;
          pad = static_cast<std::uint8_t>(-len & 3);
          words = static_cast<std::uint16_t>((hb + len + pad + wire::kIcrcBytes) / 4);
          lrh = lrh_base | std::uint64_t{__builtin_bswap16(words)} << 32;
          bth_sized = bth_by_op[opi] | std::uint64_t{pad} << 12;
        }
        const std::uint64_t bth_word = bth_sized | std::uint64_t{solicited} << 8;
        TxPacket& o = *o_next;
        store_only_headers(o.headers.data(), lrh, bth_word, ack_req, psn, opi, w, len);
        psn = psn_add(psn, 1);
        words_sum += words;
        o.header_bytes = hb;
        // finish_encoded.
        o.payload = payload;
        store_tx_fields(o, len, pad, route_word, port, dlid, sl);
      }
      // The CRCs after the loop: a call inside it would keep its state out of the registers a
      // call clobbers.
      if (compute)
        for (TxPacket* o = out.data() + n; o != o_next; ++o) dev.compute_crcs(*o);
      // The run's PSNs are psn0 .. psn0 + k - 1, one per packet: those before psn_high_ are
      // resent (req_poll counts them one by one), and psn_high_ moves to the run's end if that
      // is later; the same as per packet, given that the PSNs in flight span less than half the
      // PSN space (IBA 9.7.1).
      const std::uint64_t k = slot - first_slot;
      if (k != 0) {
        const std::uint32_t psn0 = psn_sub(psn, static_cast<std::uint32_t>(k));
        if (psn_lt(psn0, high)) retransmits = std::min<std::uint64_t>(k, psn_sub(high, psn0));
        if (psn_lt(high, psn)) high = psn;
      }
      n += k;
      tx_bytes = words_sum * 4 + k * wire::kVcrcBytes;
    }
    if (n != run_first) {
      qp.sq_req_ = qp.sq_launched_ = slot;
      end_run();
      if (slot == head && n < out.size()) return req_burst_idle(qp, n);
      continue;
    }
    if (lean && slot < qp.sq_launched_ && slot != head) {
      // A WQE under way (or resent by go-back-N): its run of MIDDLE packets, as build_middle
      // makes them in req_poll (the same header, PSN and periodic AckReq), with the state in
      // locals.
      SendWqe& w = qp.sq_at(slot);
      std::uint32_t idx = psn_sub(psn, w.first_psn);
      if (idx != 0 && idx + 1 < w.npkts && w.contiguous && !is_rd_atomic(w.opcode)) {
        const bool write =
            w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kRdmaWriteWithImm;
        // The header from registers: the LRH and the BTH's first 8 bytes as prepared, then the
        // AckReq/PSN word. Patched in a stack copy and copied from it instead, the 8-byte reload
        // of the 4-byte PSN store could not be forwarded and waited for every store before it to
        // reach the cache (58 % of this function's samples in BM_WriteCrcModel/65536, perf).
        static_assert(QpImpl::kMidHdrBytes == 20);
        std::uint64_t hdr_lrh, hdr_bth;
        std::memcpy(&hdr_lrh, qp.mid_hdr_[write].data(), 8);
        std::memcpy(&hdr_bth, qp.mid_hdr_[write].data() + 8, 8);
        const std::uint8_t* payload = w.contiguous + std::uint64_t{idx} * mtu;
        const std::size_t wire = QpImpl::kMidHdrBytes + mtu + wire::kIcrcBytes + wire::kVcrcBytes;
        for (; n < out.size() && idx + 1 < w.npkts; ++n, ++idx, payload += mtu) {
          const bool ack_req = ++since >= kAckReqEveryPackets;
          if (ack_req) since = 0;
          const std::uint32_t psn_word = (ack_req ? 0x80000000u : 0u) | psn;
          const std::uint32_t next = psn_add(psn, 1);
          if (psn_lt(psn, high)) ++retransmits;
          if (psn_lt(high, next)) high = next;
          psn = next;
          TxPacket& o = out[n];
          std::uint8_t* const h = o.headers.data();
          std::memcpy(h, &hdr_lrh, 8);
          std::memcpy(h + 8, &hdr_bth, 8);
          st32(h + 16, psn_word);
          o.header_bytes = QpImpl::kMidHdrBytes;
          o.payload = payload;
          store_tx_fields(o, mtu, 0, route_word, port, dlid, sl);
        }
        // The CRCs after the loop, as for the ONLY run: right after the header's narrow stores,
        // the CRC pass's wide loads of it would wait for them to reach the cache.
        if (compute)
          for (std::size_t i = run_first; i != n; ++i) dev.compute_crcs(out[i]);
        tx_bytes = (n - run_first) * wire;
      }
    }
    if (n != run_first) {
      end_run();
      continue;
    }
    // Anything else: req_poll itself.
    if (!req_poll(qp, now, out[n])) return ReqBurst{n, ReqBurst::kIdle};
    if (!dev.payload_stable(out[n++])) return ReqBurst{n, ReqBurst::kUnstable};
  }
  return ReqBurst{n, ReqBurst::kFull};
}

}  // namespace weft::transport
