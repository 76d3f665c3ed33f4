// transport/device_impl.cpp — Device: object tables, receive dispatch (IBA 9.6 packet checks,
// 10.9.3 P_Key), the transmit scheduler, timers, completions and async events.
#include "src/transport/device_impl.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <spdlog/spdlog.h>

#include "src/base/assert.hpp"
#include "src/base/log.hpp"
#include "src/transport/responder_lean.hpp"

namespace weft::transport {
namespace {

// The caller's pointers (a PD, CQ, QP, ... passed back into the Device) may be stale, null or
// another Device's. They are found among the owned objects by identity, comparing base-class
// pointers, before anything dereferences or downcasts them (a downcast of a destroyed object is
// undefined, and UBSan's vptr check reads it).
template <class Base, class U>
auto find_owned(std::vector<std::unique_ptr<U>>& v, const Base* obj) {
  if (obj == nullptr) return v.end();
  return std::find_if(v.begin(), v.end(),
                      [&](const auto& p) { return p && static_cast<const Base*>(p.get()) == obj; });
}
template <class Base, class U>
U* lookup(std::vector<std::unique_ptr<U>>& v, const Base* obj) {
  auto it = find_owned(v, obj);
  return it == v.end() ? nullptr : it->get();
}

constexpr std::uint32_t kAccessAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

}  // namespace

DeviceImpl::DeviceImpl(const DeviceConfig& config, Rng& rng) : config_(config), rng_(rng) {
  WEFT_ASSERT(!config_.ports.empty());
  qps_.resize(kQpnFirst);
}

DeviceImpl::~DeviceImpl() = default;

std::uint16_t DeviceImpl::lid(std::uint8_t port_num) const {
  if (port_num == 0 || port_num > config_.ports.size()) return 0;
  return config_.ports[port_num - 1].lid;
}

Errc DeviceImpl::set_port_lid(std::uint8_t port_num, std::uint16_t lid) {
  if (port_num == 0 || port_num > config_.ports.size()) return Errc::kInvalidArgument;
  config_.ports[port_num - 1].lid = lid;
  ++route_epoch_;  // SLIDs in the QPs' header templates are stale
  return Errc::kOk;
}

Errc DeviceImpl::set_port_state(std::uint8_t port_num, PortState state) {
  if (port_num == 0 || port_num > config_.ports.size()) return Errc::kInvalidArgument;
  PortState& s = config_.ports[port_num - 1].state;
  if (s == state) return Errc::kOk;
  s = state;
  raise(state == PortState::kActive ? AsyncEventType::kPortActive : AsyncEventType::kPortError, 0,
        port_num);
  return Errc::kOk;
}

// ---- objects ----------------------------------------------------------------------------------

Result<ProtectionDomain*, Errc> DeviceImpl::alloc_pd() {
  pds_.push_back(std::make_unique<PdImpl>(next_pd_handle_++));
  return static_cast<ProtectionDomain*>(pds_.back().get());
}

Result<MemoryRegion*, Errc> DeviceImpl::reg_mr(ProtectionDomain* pd_base, void* addr,
                                               std::size_t length, std::uint32_t access) {
  PdImpl* pd = lookup(pds_, pd_base);
  if (!pd) return Errc::kNotFound;
  if ((access & ~kAccessAll) != 0) return Errc::kInvalidArgument;
  if (addr == nullptr && length != 0) return Errc::kInvalidArgument;
  // IBA 10.6.3.1 (o10-..): remote write or atomic access needs local write.
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return Errc::kInvalidArgument;
  std::uint32_t index;
  if (!mr_free_.empty()) {
    index = mr_free_.back();
    mr_free_.pop_back();
  } else {
    if (mrs_.size() >= kMrMax) return Errc::kNoResources;
    if (mrs_.empty()) {  // index 0 unused: key 0 is never valid
      mrs_.resize(1);
      mr_variant_.resize(1);
    }
    index = static_cast<std::uint32_t>(mrs_.size());
    mrs_.emplace_back();
    mr_variant_.push_back(0);
  }
  const std::uint8_t variant = ++mr_variant_[index];
  const std::uint32_t key = (index << 8) | variant;
  mrs_[index] = std::make_unique<MrImpl>(pd, static_cast<std::uint8_t*>(addr), length, access, key);
  ++pd->users_;
  return static_cast<MemoryRegion*>(mrs_[index].get());
}

Result<CompletionQueue*, Errc> DeviceImpl::create_cq(std::uint32_t depth) {
  if (depth == 0 || depth > kCqDepthMax) return Errc::kInvalidArgument;
  cqs_.push_back(std::make_unique<CqImpl>(this, depth));
  return static_cast<CompletionQueue*>(cqs_.back().get());
}

Result<SharedReceiveQueue*, Errc> DeviceImpl::create_srq(ProtectionDomain* pd_base,
                                                         std::uint32_t max_wr,
                                                         std::uint32_t max_sge) {
  PdImpl* pd = lookup(pds_, pd_base);
  if (!pd) return Errc::kNotFound;
  if (max_wr == 0 || max_wr > kWrMax || max_sge == 0 || max_sge > kSgeMax)
    return Errc::kInvalidArgument;
  srqs_.push_back(std::make_unique<SrqImpl>(this, pd, max_wr, max_sge));
  ++pd->users_;
  return static_cast<SharedReceiveQueue*>(srqs_.back().get());
}

Result<QueuePair*, Errc> DeviceImpl::create_qp(const QpInitAttr& attr) {
  PdImpl* pd = lookup(pds_, attr.pd);
  CqImpl* scq = lookup(cqs_, attr.send_cq);
  CqImpl* rcq = lookup(cqs_, attr.recv_cq);
  SrqImpl* srq = lookup(srqs_, attr.srq);
  if (!pd || !scq || !rcq) return Errc::kInvalidArgument;
  if (attr.srq && !srq) return Errc::kInvalidArgument;
  const QpCaps& c = attr.caps;
  if (c.max_send_wr == 0 || c.max_send_wr > kWrMax || c.max_recv_wr > kWrMax ||
      (c.max_recv_wr == 0 && !attr.srq) || c.max_send_sge == 0 || c.max_send_sge > kSgeMax ||
      c.max_recv_sge > kSgeMax || (c.max_recv_sge == 0 && !attr.srq) ||
      c.max_inline_data > kInlineBytesMax)
    return Errc::kInvalidArgument;
  if (qps_.size() >= kQpMax) return Errc::kNoResources;
  const auto qpn = static_cast<std::uint32_t>(qps_.size());
  qps_.push_back(std::make_unique<QpImpl>(this, qpn, attr));
  ++pd->users_;
  ++scq->users_;
  ++rcq->users_;
  if (srq) ++srq->users_;
  return static_cast<QueuePair*>(qps_.back().get());
}

Result<AddressHandle*, Errc> DeviceImpl::create_ah(ProtectionDomain* pd_base,
                                                   const AddressVector& av) {
  PdImpl* pd = lookup(pds_, pd_base);
  if (!pd) return Errc::kNotFound;
  if (av.port_num == 0 || av.port_num > config_.ports.size() || av.sl > 15 ||
      av.flow_label > 0xFFFFF)
    return Errc::kInvalidArgument;
  ahs_.push_back(std::make_unique<AhImpl>(pd, av));
  live_ahs_.emplace(ahs_.back().get(), ahs_.back().get());
  ++pd->users_;
  return static_cast<AddressHandle*>(ahs_.back().get());
}

Errc DeviceImpl::destroy_qp(QueuePair* base) {
  // A stale pointer (already destroyed) must not be dereferenced, not even to read its QPN or by
  // a checked downcast: find it by identity first (as dereg_mr).
  auto it = find_owned(qps_, base);
  if (it == qps_.end()) return Errc::kNotFound;
  QpImpl* qp = it->get();
  --static_cast<PdImpl*>(qp->init_.pd)->users_;
  --static_cast<CqImpl*>(qp->init_.send_cq)->users_;
  --static_cast<CqImpl*>(qp->init_.recv_cq)->users_;
  if (qp->init_.srq) --static_cast<SrqImpl*>(qp->init_.srq)->users_;
  it->reset();
  return Errc::kOk;
}

template <class Base, class U>
static Errc erase_owned(std::vector<std::unique_ptr<U>>& v, const Base* obj) {
  auto it = find_owned(v, obj);
  if (it == v.end()) return Errc::kNotFound;
  if ((*it)->users_ != 0) return Errc::kBusy;
  v.erase(it);
  return Errc::kOk;
}

Errc DeviceImpl::destroy_cq(CompletionQueue* cq) {
  return erase_owned(cqs_, cq);
}

Errc DeviceImpl::destroy_srq(SharedReceiveQueue* base) {
  auto it = find_owned(srqs_, base);
  if (it == srqs_.end()) return Errc::kNotFound;
  if ((*it)->users_ != 0) return Errc::kBusy;
  --(*it)->pd_->users_;
  srqs_.erase(it);
  return Errc::kOk;
}

Errc DeviceImpl::dereg_mr(MemoryRegion* base) {
  // A stale pointer (already deregistered) must not be dereferenced, not even by a checked
  // downcast (UBSan's vptr check reads the object): find it by identity first.
  auto it = find_owned(mrs_, base);
  if (it == mrs_.end()) return Errc::kNotFound;
  MrImpl* mr = it->get();
  --mr->pd_->users_;
  const auto index = static_cast<std::uint32_t>(it - mrs_.begin());
  it->reset();
  mr_free_.push_back(index);
  return Errc::kOk;
}

Errc DeviceImpl::destroy_ah(AddressHandle* base) {
  auto it = find_owned(ahs_, base);
  if (it == ahs_.end()) return Errc::kNotFound;
  --(*it)->pd_->users_;
  live_ahs_.erase(base);
  ahs_.erase(it);
  return Errc::kOk;
}

const AhImpl* DeviceImpl::find_ah(const AddressHandle* ah) {
  // A hash lookup by address: every UD post validates its AH, so no scan of ahs_.
  auto it = live_ahs_.find(ah);
  return it == live_ahs_.end() ? nullptr : it->second;
}

Errc DeviceImpl::dealloc_pd(ProtectionDomain* base) {
  return erase_owned(pds_, base);
}

// ---- completions and events -------------------------------------------------------------------

void DeviceImpl::push_cqe(CqImpl* cq, const WorkCompletion& wc) {
  if (wc.status == WcStatus::kWrFlushErr) ++counters_.flushed_wrs;
  if (cq->overrun_) return;  // IBA 11.4.2.1: a CQ in error takes no more completions
  if (cq->push(wc)) {
    ++counters_.completions;
    if (wc.status != WcStatus::kSuccess) ++counters_.completions_error;
    return;
  }
  // IBA 11.4.2.1 / 10.10.2.3: overrun. The CQ is in error, the consumer gets kCqError, and
  // the QPs completing into it go to the error state.
  cq->overrun_ = true;
  ++counters_.cq_overruns;
  base::get_logger("weft.transport")->warn("CQ overrun (depth {})", cq->depth());
  raise(AsyncEventType::kCqError, 0);
  for (auto& q : qps_) {
    if (!q || (q->init_.send_cq != cq && q->init_.recv_cq != cq)) continue;
    if (q->state_ == QpState::kErr || q->state_ == QpState::kReset) continue;
    q->enter_error();
    raise(AsyncEventType::kQpFatal, q->qpn_);
  }
}

void DeviceImpl::raise(AsyncEventType type, std::uint32_t qpn, std::uint8_t port) {
  if (events_.size() >= kAsyncEventsMax) events_.pop_front();
  events_.push_back(AsyncEvent{type, qpn, port});
}

bool DeviceImpl::poll_async_event(AsyncEvent& out) {
  if (events_.empty()) return false;
  out = events_.front();
  events_.pop_front();
  return true;
}

// ---- transmit ---------------------------------------------------------------------------------

void DeviceImpl::schedule(QpImpl& qp) {
  if (qp.scheduled_) return;
  qp.scheduled_ = true;
  if (ready_tail_ - ready_head_ == ready_.size()) {
    std::vector<std::uint32_t> bigger(ready_.size() * 2);
    for (std::uint64_t i = ready_head_, k = 0; i != ready_tail_; ++i, ++k)
      bigger[k] = ready_[i & (ready_.size() - 1)];
    ready_tail_ -= ready_head_;
    ready_head_ = 0;
    ready_.swap(bigger);
  }
  ready_[ready_tail_++ & (ready_.size() - 1)] = qp.qpn_;
}

bool DeviceImpl::poll_transmit(TimeNs now, TxPacket& out) {
  // The QP at the head stays flagged as scheduled while it builds its packet (a schedule() of it
  // meanwhile is a no-op); afterwards it goes to the tail if it has more to send — or simply
  // stays where it is when it is the only one — and leaves the ring otherwise.
  while (ready_head_ != ready_tail_) {
    const std::uint32_t qpn = ready_[ready_head_ & (ready_.size() - 1)];
    QpImpl* qp = qpn < qps_.size() ? qps_[qpn].get() : nullptr;
    if (!qp) {
      ++ready_head_;
      continue;
    }
    const bool sent = (qp->respq_count_ > 0 && resp_poll(*qp, out)) || req_poll(*qp, now, out);
    if (sent && qp->can_transmit()) {
      if (ready_tail_ - ready_head_ > 1) {
        ++ready_head_;
        ready_[ready_tail_++ & (ready_.size() - 1)] = qpn;  // the slot just freed
      }
      return true;
    }
    ++ready_head_;
    qp->scheduled_ = false;
    if (sent) return true;
  }
  return false;
}

std::size_t DeviceImpl::poll_transmit_burst(TimeNs now, std::span<TxPacket> out) {
  std::size_t n = 0;
  while (n < out.size()) {
    // One QP ready and no responses of its own queued: poll_transmit would take that QP's
    // req_poll packets one after another, so they come from req_poll_burst, with poll_transmit's
    // bookkeeping of the ready ring after it. With several QPs ready, poll_transmit's round robin
    // goes packet by packet.
    if (ready_tail_ - ready_head_ == 1) {
      const std::uint32_t qpn = ready_[ready_head_ & (ready_.size() - 1)];
      QpImpl* qp = qpn < qps_.size() ? qps_[qpn].get() : nullptr;
      if (qp && qp->respq_count_ == 0) {
        const ReqBurst b = req_poll_burst(*qp, now, out.subspan(n));
        n += b.packets;
        // poll_transmit drops a QP from the ring when it sent nothing, or sent its last packet.
        if (b.end == ReqBurst::kIdle || !qp->can_transmit()) {
          ++ready_head_;
          qp->scheduled_ = false;
        }
        if (b.end != ReqBurst::kFull) return n;  // the ring is empty, or the bounce buffer in use
        continue;
      }
    }
    if (!poll_transmit(now, out[n])) break;
    if (!payload_stable(out[n++])) break;  // the bounce buffer is reused by the next packet
  }
  return n;
}

void DeviceImpl::fill_route(wire::Headers& h, const AddressVector& av, std::uint16_t pkey_index,
                            std::uint8_t port_num) const {
  const PortConfig& port = config_.ports[port_num - 1];
  h.lrh.vl = 0;
  h.lrh.sl = av.sl;
  h.lrh.dlid = av.dlid;
  h.lrh.slid = static_cast<std::uint16_t>(port.lid | av.src_path_bits);
  h.has_grh = av.global;
  if (av.global) {
    h.grh.tclass = av.traffic_class;
    h.grh.flow_label = av.flow_label;
    h.grh.hop_limit = av.hop_limit;
    std::memcpy(h.grh.sgid, port.gid.data(), 16);
    std::memcpy(h.grh.dgid, av.dgid.data(), 16);
  }
  h.bth.pkey = pkey_at(port_num, pkey_index);
}

void DeviceImpl::finish_packet(wire::Headers& h, const std::uint8_t* payload,
                               std::uint32_t payload_bytes, std::uint8_t port_num, TxPacket& out) {
  wire::fill_lengths(h, payload_bytes);
  out.header_bytes = static_cast<std::uint16_t>(wire::encode_headers(h, out.headers));
  out.dlid = h.lrh.dlid;
  out.sl = h.lrh.sl;
  finish_encoded(payload, payload_bytes, h.bth.pad_cnt, port_num, out);
}

void DeviceImpl::compute_crcs(TxPacket& out) const {
  const std::span<const std::uint8_t> hdr(out.headers.data(), out.header_bytes);
  const std::span<const std::uint8_t> pl(out.payload, out.payload_bytes);
  const wire::PacketCrcs c = wire::packet_crcs(hdr, pl, out.pad_bytes);  // one pass
  out.icrc = c.icrc;
  out.vcrc = c.vcrc;
  out.crcs_valid = true;
}

// ---- receive ----------------------------------------------------------------------------------

namespace {
// Header bytes of the packets the lean receive path takes (LRH + BTH, and the RETH of a WRITE
// FIRST or ONLY or the AETH of an ACK), or 0 for any other opcode; by table, as it is the first
// test of every packet.
constexpr std::array<std::uint8_t, 256> kLeanHeaderBytes = [] {
  std::array<std::uint8_t, 256> t{};
  constexpr auto kBase = static_cast<std::uint8_t>(wire::kLrhBytes + wire::kBthBytes);
  t[static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly)] = kBase;
  t[static_cast<std::uint8_t>(wire::Opcode::kRcWriteMiddle)] = kBase;
  t[static_cast<std::uint8_t>(wire::Opcode::kRcWriteLast)] = kBase;
  t[static_cast<std::uint8_t>(wire::Opcode::kRcWriteFirst)] = kBase + wire::kRethBytes;
  t[static_cast<std::uint8_t>(wire::Opcode::kRcWriteOnly)] = kBase + wire::kRethBytes;
  t[static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge)] = kBase + wire::kAethBytes;
  return t;
}();
constexpr std::size_t lean_header_bytes(std::uint8_t opcode) {
  return kLeanHeaderBytes[opcode];
}
// The bytes of a packet's first 8 LRH and first 8 BTH bytes that route it (fast_receive_burst):
// all of the LRH but PktLen (bytes 4-5); the BTH's P_Key and DestQP (bytes 2-7), not its opcode
// and SE/M/PadCnt/TVer byte.
constexpr std::uint64_t kLrhRouteMask = std::bit_cast<std::uint64_t>(
    std::array<std::uint8_t, 8>{0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF});
constexpr std::uint64_t kBthRouteMask = std::bit_cast<std::uint64_t>(
    std::array<std::uint8_t, 8>{0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
}  // namespace

inline bool DeviceImpl::fast_receive(const std::uint8_t* b, std::uint8_t pad_bytes,
                                     std::span<const std::uint8_t> payload, TimeNs now) {
  const std::uint8_t* bth = b + wire::kLrhBytes;
  // The checks of wire::parse_headers_to: LVer 0 (7.7.3), LNH local, TVer 0 (9.2.4), PadCnt as
  // given, LRH PktLen (7.7.8), a FIRST or MIDDLE carries a whole unpadded payload (9.7.2).
  const auto op = static_cast<wire::Opcode>(bth[0]);
  const std::size_t header_bytes = lean_header_bytes(bth[0]);
  if (header_bytes == 0) return false;
  if ((b[0] & 0xF) != 0 || (b[1] & 3) != static_cast<unsigned>(wire::Lnh::kIbaLocal) ||
      (bth[1] & 0xF) != 0 || ((bth[1] >> 4) & 3) != pad_bytes)
    return false;
  const unsigned pkt_len_words = ((unsigned{b[4]} << 8) | b[5]) & 0x7FF;
  if (pkt_len_words * 4 != header_bytes + payload.size() + pad_bytes + wire::kIcrcBytes)
    return false;
  if ((op == wire::Opcode::kRcWriteMiddle || op == wire::Opcode::kRcWriteFirst) &&
      (payload.empty() || pad_bytes != 0))
    return false;
  // The checks of dispatch: DLID, QP and its state, P_Key (10.9.3).
  if (!dlid_ok(static_cast<std::uint16_t>((b[2] << 8) | b[3]))) return false;
  std::uint32_t qpn;  // BTH DestQP: the low 24 bits of the big-endian word at byte 4
  std::memcpy(&qpn, bth + 4, 4);
  qpn = __builtin_bswap32(qpn) & 0xFFFFFF;
  QpImpl* qp = qpn < qps_.size() ? qps_[qpn].get() : nullptr;
  if (!qp || qp->init_.type != QpType::kRc || qp->state_ == QpState::kReset ||
      qp->state_ == QpState::kInit || qp->state_ == QpState::kErr)
    return false;
  if (!pkey_ok(*qp, static_cast<std::uint16_t>((bth[2] << 8) | bth[3]))) return false;
  if (op == wire::Opcode::kRcAcknowledge) {
    // An ACK carries neither payload nor pad (IBA 9.7.5); a response needs RTS or later.
    if (!payload.empty() || pad_bytes != 0 || qp->state_ == QpState::kRtr) return false;
    return comp_fast_ack(*qp, bth, now);
  }
  return resp_fast_request(*qp, bth, payload);
}

void DeviceImpl::on_packet(std::span<const std::uint8_t> wire_bytes, TimeNs now) {
  rx_now_ = now;
  constexpr std::size_t kCrcBytes = wire::kIcrcBytes + wire::kVcrcBytes;
  const bool check = config_.crc == CrcMode::kCompute;
  bool crcs_checked = false;
  const std::size_t n = wire_bytes.size();
  if (n >= wire::kLrhBytes + wire::kBthBytes + kCrcBytes) {
    // The lean path's packets (LRH + BTH [+ RETH], no GRH): CRCs as parse_packet checks them
    // (VCRC first, IBA 7.8.2), then fast_receive. A failed CRC is left to the general path,
    // which counts it.
    const std::uint8_t* b = wire_bytes.data();
    const std::size_t hb = lean_header_bytes(b[wire::kLrhBytes]);
    const std::size_t through_icrc = std::size_t{((unsigned{b[4]} << 8) | b[5]) & 0x7FF} * 4;
    const auto pad = static_cast<std::uint8_t>((b[wire::kLrhBytes + 1] >> 4) & 3);
    if (hb != 0 && n >= hb + kCrcBytes && through_icrc + wire::kVcrcBytes == n && (b[1] & 3) == 2 &&
        n - hb - kCrcBytes >= pad) {
      const auto after_headers = wire_bytes.subspan(hb, n - hb - kCrcBytes);
      crcs_checked =
          !check || !wire::check_packet_crcs(wire_bytes.first(hb), after_headers, 0,
                                             load_le32(b + through_icrc - wire::kIcrcBytes),
                                             load_le16(b + through_icrc));
      if (crcs_checked &&
          fast_receive(b, pad, after_headers.first(after_headers.size() - pad), now)) {
        ++counters_.rx_packets;
        counters_.rx_bytes += n;
        return;
      }
    }
  }
  ++counters_.rx_packets;
  counters_.rx_bytes += n;
  const bool verify = check && !crcs_checked;
  auto p = wire::parse_packet(wire_bytes, wire::ParseOptions{verify, verify});
  if (!p) {
    switch (p.error()) {
      case wire::WireError::kBadIcrc:
        ++counters_.rx_bad_icrc;
        break;
      case wire::WireError::kBadVcrc:
        ++counters_.rx_bad_vcrc;
        break;
      default:
        ++counters_.rx_malformed;
        break;
    }
    return;
  }
  std::span<const std::uint8_t> grh;
  if (p->h.has_grh) grh = wire_bytes.subspan(wire::kLrhBytes, wire::kGrhBytes);
  dispatch(p->h, p->payload, grh, now);
}

inline bool DeviceImpl::fast_receive(const TxPacket& pkt, TimeNs now) {
  if (pkt.header_bytes != lean_header_bytes(pkt.headers[wire::kLrhBytes]) || pkt.corrupt ||
      (pkt.payload_bytes && !pkt.payload))
    return false;
  if (config_.crc == CrcMode::kCompute && pkt.crcs_valid) return false;  // CRCs to check
  if (!fast_receive(pkt.headers.data(), pkt.pad_bytes, {pkt.payload, pkt.payload_bytes}, now))
    return false;
  ++counters_.rx_packets;
  counters_.rx_bytes += pkt.wire_bytes();
  return true;
}

void DeviceImpl::on_packet(const TxPacket& pkt, TimeNs now) {
  rx_now_ = now;
  if (fast_receive(pkt, now)) return;
  receive_general(pkt, now);
}

inline QpImpl* DeviceImpl::burst_route(const TxPacket& pkt, BurstRoute& route) {
  const std::uint8_t* b = pkt.headers.data();
  const std::uint8_t* bth = b + wire::kLrhBytes;
  // The routing checks (DLID, QP and type, P_Key) once per route: the LRH but PktLen, and the
  // BTH's P_Key and DestQP, as in the packet that passed them.
  std::uint64_t lrh, bth_word;
  std::memcpy(&lrh, b, 8);
  std::memcpy(&bth_word, bth, 8);
  lrh &= kLrhRouteMask;
  bth_word &= kBthRouteMask;
  if (route.qp != nullptr && lrh == route.lrh && bth_word == route.bth) return route.qp;
  if ((b[0] & 0xF) != 0 || (b[1] & 3) != static_cast<unsigned>(wire::Lnh::kIbaLocal))
    return nullptr;
  if (!dlid_ok(static_cast<std::uint16_t>((b[2] << 8) | b[3]))) return nullptr;
  std::uint32_t qpn;  // BTH DestQP: the low 24 bits of the big-endian word at byte 4
  std::memcpy(&qpn, bth + 4, 4);
  qpn = __builtin_bswap32(qpn) & 0xFFFFFF;
  QpImpl* qp = qpn < qps_.size() ? qps_[qpn].get() : nullptr;
  if (!qp || qp->init_.type != QpType::kRc ||
      !pkey_ok(*qp, static_cast<std::uint16_t>((bth[2] << 8) | bth[3])))
    return nullptr;
  route = BurstRoute{qp, lrh, bth_word};
  return qp;
}

inline bool DeviceImpl::fast_receive_burst(const TxPacket& pkt, BurstRoute& route,
                                           DeferredAck& ack) {
  const std::uint8_t* b = pkt.headers.data();
  const std::uint8_t* bth = b + wire::kLrhBytes;
  const auto op = static_cast<wire::Opcode>(bth[0]);
  const std::size_t header_bytes = lean_header_bytes(bth[0]);
  if (header_bytes == 0 || pkt.header_bytes != header_bytes || op == wire::Opcode::kRcAcknowledge ||
      pkt.corrupt || (pkt.payload_bytes && !pkt.payload))
    return false;
  if (config_.crc == CrcMode::kCompute && pkt.crcs_valid) return false;  // CRCs to check
  const std::uint8_t pad_bytes = pkt.pad_bytes;
  const std::span<const std::uint8_t> payload(pkt.payload, pkt.payload_bytes);
  // fast_receive's checks of parse_headers_to: TVer and PadCnt per packet; LVer and LNH (LRH
  // bytes 0-1) with the routing checks below, as they are among the routing bytes.
  if ((bth[1] & 0xF) != 0 || ((bth[1] >> 4) & 3) != pad_bytes) return false;
  const unsigned pkt_len_words = ((unsigned{b[4]} << 8) | b[5]) & 0x7FF;
  if (pkt_len_words * 4 != header_bytes + payload.size() + pad_bytes + wire::kIcrcBytes)
    return false;
  if ((op == wire::Opcode::kRcWriteMiddle || op == wire::Opcode::kRcWriteFirst) &&
      (payload.empty() || pad_bytes != 0))
    return false;
  QpImpl* qp = burst_route(pkt, route);
  if (qp == nullptr) return false;
  // The state per packet: a CQ overrun may have moved the QP to ERR inside the burst.
  if (qp->state_ == QpState::kReset || qp->state_ == QpState::kInit || qp->state_ == QpState::kErr)
    return false;
  if (ack.qp != qp) ack.flush();
  if (!resp_fast_request(*qp, bth, payload, &ack)) return false;
  ++counters_.rx_packets;
  counters_.rx_bytes += pkt.wire_bytes();
  return true;
}

namespace {
// Below this a payload is copied by memcpy (its call and dispatch are then the larger part).
constexpr std::size_t kVectorCopyBytesMin = 256;
constexpr std::size_t kVectorCopyStepBytes = 256;  // four 64-byte registers in flight

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void copy_avx512(std::uint8_t* d, const std::uint8_t* s,
                                                    std::size_t n) {
  // All four loads of a step before its stores, as memcpy's own loops do; the tail by memcpy.
  for (; n >= kVectorCopyStepBytes;
       n -= kVectorCopyStepBytes, s += kVectorCopyStepBytes, d += kVectorCopyStepBytes) {
    const __m512i a = _mm512_loadu_si512(s), b = _mm512_loadu_si512(s + 64),
                  c = _mm512_loadu_si512(s + 128), e = _mm512_loadu_si512(s + 192);
    _mm512_storeu_si512(d, a);
    _mm512_storeu_si512(d + 64, b);
    _mm512_storeu_si512(d + 128, c);
    _mm512_storeu_si512(d + 192, e);
  }
  if (n != 0) std::memcpy(d, s, n);
}
__attribute__((target("avx2"))) void copy_avx2(std::uint8_t* d, const std::uint8_t* s,
                                               std::size_t n) {
  constexpr std::size_t kStep = 128;
  for (; n >= kStep; n -= kStep, s += kStep, d += kStep) {
    const auto* v = reinterpret_cast<const __m256i*>(s);
    auto* w = reinterpret_cast<__m256i*>(d);
    const __m256i a = _mm256_loadu_si256(v), b = _mm256_loadu_si256(v + 1),
                  c = _mm256_loadu_si256(v + 2), e = _mm256_loadu_si256(v + 3);
    _mm256_storeu_si256(w, a);
    _mm256_storeu_si256(w + 1, b);
    _mm256_storeu_si256(w + 2, c);
    _mm256_storeu_si256(w + 3, e);
  }
  if (n != 0) std::memcpy(d, s, n);
}
enum class CopyPath : std::uint8_t { kMemcpy, kAvx2, kAvx512 };
CopyPath detect_copy_path() {
  __builtin_cpu_init();  // may run before the library's own constructors
  if (__builtin_cpu_supports("avx512f")) return CopyPath::kAvx512;
  if (__builtin_cpu_supports("avx2")) return CopyPath::kAvx2;
  return CopyPath::kMemcpy;
}
// Decided once at load time (a function-local static would test its guard on every packet).
const CopyPath kCopyPath = detect_copy_path();
#endif
}  // namespace

void copy_payload(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
  // 8 to 16 bytes (a latency test's 8-byte WRITE): two 8-byte moves that overlap, both loads
  // before the stores, so overlapping ranges are placed as memmove places them; a memmove call
  // and its size dispatch cost several times that.
  constexpr std::size_t kWordBytes = 8;
  if (bytes - kWordBytes <= kWordBytes) {  // unsigned: bytes in [8, 16]
    std::uint64_t head, tail;
    std::memcpy(&head, src, kWordBytes);
    std::memcpy(&tail, src + bytes - kWordBytes, kWordBytes);
    std::memcpy(dst, &head, kWordBytes);
    std::memcpy(dst + bytes - kWordBytes, &tail, kWordBytes);
    return;
  }
#if defined(__x86_64__)
  // Overlapping ranges (a WRITE into its own source on a loopback) by memmove, as glibc's
  // memcpy (an alias of its memmove) placed them before.
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  if (bytes >= kVectorCopyBytesMin && (d + bytes <= s || s + bytes <= d)) {
    if (kCopyPath == CopyPath::kAvx512) return copy_avx512(dst, src, bytes);
    if (kCopyPath == CopyPath::kAvx2) return copy_avx2(dst, src, bytes);
  }
#endif
  if (bytes != 0) std::memmove(dst, src, bytes);
}

namespace {
// copy_to_sges out of line, for a SEND run's uncommon receives (several SGEs, or a payload in
// another process): inlined into the run's loop, its own loop and virtual call took registers
// the run's state needed, which was spilled instead (receive_run 3252 -> 3186 instructions per
// burst of 32 SENDs, callgrind of transport_profile send64).
[[gnu::noinline]] void copy_to_sges_outlined(const Sge* sges, std::uint32_t n,
                                             const std::uint8_t* src, std::uint64_t len,
                                             RemotePayload* rp) {
  copy_to_sges(sges, n, 0, src, len, rp);
}

// memcpy for the short payloads of SEND runs: up to 64 bytes in (at most four) 16-byte moves
// that overlap, inline; longer ones by memcpy. A 64-byte memcpy call costs as many
// instructions as the rest of the receive's copying and checks (callgrind, transport_profile
// send64). Every load comes before its store, so it is as memcpy for non-overlapping buffers.
inline void copy_small(std::uint8_t* dst, const std::uint8_t* src, std::uint32_t len) {
  struct B16 {
    std::uint8_t b[16];
  };
  if (len < 16 || len > 64) {
    if (len != 0) std::memcpy(dst, src, len);
    return;
  }
  B16 a, b;
  std::memcpy(&a, src, 16);
  std::memcpy(&b, src + len - 16, 16);
  if (len > 32) {
    B16 c, d;
    std::memcpy(&c, src + 16, 16);
    std::memcpy(&d, src + len - 32, 16);
    std::memcpy(dst + 16, &c, 16);
    std::memcpy(dst + len - 32, &d, 16);
  }
  std::memcpy(dst, &a, 16);
  std::memcpy(dst + len - 16, &b, 16);
}

// Places `bytes` bytes (whole packets of `mtu`) at dst: one copy, or packet by packet when the
// ranges overlap (then the packets' copies in order are what the per-packet path does).
inline void place_run(std::uint8_t* dst, const std::uint8_t* src, std::uint64_t bytes,
                      std::uint32_t mtu) {
  if (bytes == 0) return;
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  if (d + bytes <= s || s + bytes <= d) {
    std::memcpy(dst, src, bytes);
    return;
  }
  for (std::uint64_t k = 0; k < bytes; k += mtu)
    std::memcpy(dst + k, src + k, std::min<std::uint64_t>(mtu, bytes - k));
}
}  // namespace

std::size_t DeviceImpl::receive_run(std::span<const TxPacket> pkts, const BurstRoute& route,
                                    DeferredAck& ack) {
  QpImpl& qp = *route.qp;
  constexpr std::size_t kHdr = wire::kLrhBytes + wire::kBthBytes;  // no extension header
  // A WRITE FIRST's held copy: merged into the run's copy of the WRITE it starts, or placed now.
  HeldCopy held = std::exchange(held_copy_, HeldCopy{});
  const auto place_held = [&] {
    place_run(held.dst, held.src, held.bytes, qp.mtu());
    held = HeldCopy{};
  };
  // What no packet of the run changes: the QP's state (a SEND ONLY is only taken with a free CQ
  // slot, so no overrun errors the QP inside the run), the responder's error and selective-repeat
  // buffering (resp_fast_request's first checks), the message state (a MIDDLE neither starts nor
  // ends a WRITE, a SEND ONLY leaves the responder idle).
  if (qp.state_ == QpState::kReset || qp.state_ == QpState::kInit || qp.state_ == QpState::kErr ||
      qp.resp_fatal_pending_ || qp.resp_state_ == RespState::kError ||
      (qp.attr_.recovery != RecoveryMode::kGoBackN && !qp.ooo_.empty())) {
    place_held();
    return 0;
  }
  // The WRITE the FIRST started goes on below with its copy (every case on_packet_burst makes);
  // anything else places it first.
  if (qp.resp_state_ != RespState::kInWrite || held.dst != qp.write_dst_ ||
      held.bytes != qp.msg_bytes_)
    place_held();
  const bool compute = config_.crc == CrcMode::kCompute;
  const std::uint32_t mtu = qp.mtu();
  const std::uint32_t coalesce = config_.ack_coalesce_max;
  RemotePayload* rp = remote_payload_;
  std::uint32_t epsn = qp.epsn_, since = qp.since_ack_, msn = qp.msn_;
  std::uint64_t rx_bytes = 0;
  std::size_t n = 0;
  // The LRH and the BTH's first 8 bytes of a packet of the run are known in whole: the route's
  // bytes, the PktLen of its length (reserved bits zero), the opcode, TVer 0 and the PadCnt (SE
  // and M not looked at, as on the lean path); each packet is compared with them in two words.
  constexpr std::uint64_t kBthMidMask = std::bit_cast<std::uint64_t>(
      std::array<std::uint8_t, 8>{0xFF, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  const auto psn_of = [](const std::uint8_t* bth) {
    std::uint32_t psn;
    std::memcpy(&psn, bth + 8, 4);
    return __builtin_bswap32(psn) & kPsnMask;
  };
  if (qp.resp_state_ == RespState::kInWrite) {
    // WRITE MIDDLE: one whole PMTU, unpadded, leaving bytes to come (9.7.2.1, 9.7.5.1.3), and
    // the WRITE LAST that ends the RETH length exactly (it ends the run); the other checks of
    // fast_receive_burst: no extension header, not corrupt, CRCs not to check.
    const auto lrh_with_len = [&](std::uint64_t len, unsigned pad) {
      const std::uint64_t words = (kHdr + len + pad + wire::kIcrcBytes) / 4;
      return route.lrh | (words >> 8) << 32 | (words & 0xFF) << 40;
    };
    const std::uint64_t lrh_mid = lrh_with_len(mtu, 0);
    const std::uint64_t bth_mid =
        route.bth | static_cast<std::uint8_t>(wire::Opcode::kRcWriteMiddle);
    std::uint64_t bytes = qp.msg_bytes_;
    const std::uint64_t write_len = qp.write_len_;
    std::uint8_t* const dst = qp.write_dst_;
    const std::uint8_t* copy_src = held.src;  // the payload bytes not yet placed, ending at
    std::uint64_t copy_bytes = held.bytes;    // dst + bytes (the FIRST's, if held)
    // With a RemotePayload (payloads in the sender's memory: the shared-memory medium) the
    // coalesced run goes to its place() (which gathers the copies itself) instead of a call per
    // packet: one 4 KiB packet's place() was ~8 % of the receiver's work besides the copy
    // (bench/io/README.md, session 22). Nothing is held then (hold_first_copy_).
    const auto place_copy = [&](std::uint8_t* to, const std::uint8_t* from, std::uint64_t n) {
      if (rp != nullptr) {
        if (n != 0) rp->place(to, from, n);
      } else {
        place_run(to, from, n, mtu);
      }
    };
    bool last = false;
    for (; n < pkts.size() && !last; ++n) {
      const TxPacket& p = pkts[n];
      const std::uint8_t* bth = p.headers.data() + wire::kLrhBytes;
      std::uint64_t lrh_word, bth_word;
      std::memcpy(&lrh_word, p.headers.data(), 8);
      std::memcpy(&bth_word, bth, 8);
      std::uint32_t len = mtu;
      bool is_last = false;
      if (lrh_word == lrh_mid && (bth_word & kBthMidMask) == bth_mid) {
        if (p.payload_bytes != mtu || p.pad_bytes != 0 || bytes + mtu >= write_len) break;
      } else {
        len = p.payload_bytes;
        const unsigned pad = p.pad_bytes;
        if (len > mtu || pad > 3 || ((len + pad) & 3) != 0 || bytes + len != write_len ||
            lrh_word != lrh_with_len(len, pad) ||
            (bth_word & kBthMidMask) !=
                (route.bth | static_cast<std::uint8_t>(wire::Opcode::kRcWriteLast) |
                 std::uint64_t{pad} << 12))
          break;
        is_last = true;
      }
      if (p.header_bytes != kHdr || p.payload == nullptr || p.corrupt || (compute && p.crcs_valid))
        break;
      const std::uint32_t psn = psn_of(bth);
      if (psn != epsn) break;
      last = is_last;  // taken
      if (p.payload != copy_src + copy_bytes) {
        // Payloads that follow each other in the sender's memory (a message's packets, by
        // reference) are placed with one copy (or one RemotePayload::place) when the run ends:
        // the same bytes.
        place_copy(dst + bytes - copy_bytes, copy_src, copy_bytes);
        copy_src = p.payload;
        copy_bytes = len;
      } else {
        copy_bytes += len;
      }
      bytes += len;
      epsn = psn_add(psn, 1);
      if (last) msn = psn_add(msn, 1);
      // IBA 9.7.6.1.2 as resp_fast_request: the ACK is held for the end of the run.
      if ((bth[8] & 0x80) || ++since >= coalesce) {
        since = 0;
        ack = DeferredAck{&qp, psn, msn};
      }
      rx_bytes += p.wire_bytes();
    }
    place_copy(dst + bytes - copy_bytes, copy_src, copy_bytes);
    qp.msg_bytes_ = bytes;
    if (last) {
      qp.msn_ = msn;
      qp.resp_state_ = RespState::kIdle;
    }
  } else if (qp.resp_state_ == RespState::kIdle) {
    // SEND ONLY into the receive at the head of the queue, completed in place. The receives and
    // the CQ slots the run takes are counted in locals and committed once after it: nothing else
    // pops this receive queue or completes into this CQ inside the run (a SEND is taken only
    // with a free CQ slot, so no overrun either).
    RecvQueue& rq = qp.recv_queue();
    auto* cq = static_cast<CqImpl*>(qp.init_.recv_cq);
    const RecvQueue::Front rx = rq.front_view();
    const CqImpl::Slots wcs = cq->slots();
    // The run ends where the receive ring or the CQ ring wraps, so that its WQEs, SGEs and
    // completions are consecutive in memory (pointers that step, not masked positions); the
    // next run (on_packet_burst starts one at the next packet) goes on from the ring's start.
    const std::uint64_t rq_at = rx.tail & rx.mask, cq_at = wcs.head & wcs.mask;
    const std::uint64_t took_max =
        std::min({static_cast<std::uint64_t>(rq.outstanding()), cq->overrun_ ? 0 : cq->room(),
                  rx.mask + 1 - rq_at, wcs.mask + 1 - cq_at});
    const RecvWqe* const wqes = rx.wqes + rq_at;
    const Sge* sge = rx.sges + rq_at * rx.stride;
    WorkCompletion* const wc_first = wcs.ring + cq_at;
    const WorkCompletion tmpl = qp.wc_tmpl_;
    const std::uint64_t route_lrh = route.lrh;
    const std::uint64_t bth_want = route.bth | static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
    // corrupt, and crcs_valid when CRCs are checked (then the packet goes the general way):
    // adjacent bytes, tested in one load.
    static_assert(offsetof(TxPacket, corrupt) == offsetof(TxPacket, crcs_valid) + 1);
    std::uint16_t reject_mask;
    {
      const std::array<std::uint8_t, 2> m{compute ? std::uint8_t{0xFF} : std::uint8_t{0},
                                          std::uint8_t{0xFF}};
      std::memcpy(&reject_mask, m.data(), 2);
    }
    const std::uint32_t epsn_first = epsn, msn_first = msn;
    std::uint32_t last_len = 0;
    // Each packet takes one PSN and one MSN, so the held ACK is known by the index of the last
    // packet that asked for one (AckReq) or reached the coalescing count; the PSN and MSN follow
    // after the loop. The bytes as 4-byte words through the ICRC (a run's packets are whole
    // words; + the VCRC's 2 bytes each).
    constexpr std::uint64_t kNoAck = ~std::uint64_t{0};
    std::uint64_t ack_at = kNoAck;
    std::uint64_t words_sum = 0;
    // The receives and CQ slots free bound the run as the burst does (one compare per packet).
    const std::size_t run_end = std::min<std::uint64_t>(pkts.size(), took_max);
    // The previous packet's length and PadCnt (a run of equal SENDs checks them once; never a
    // real key at the start: PadCnt < 256) and what follows from them.
    std::uint64_t sized_key = ~std::uint64_t{0}, lrh_sized = 0, bth_sized = 0;
    std::uint16_t words = 0;
    for (; n < run_end; ++n) {
      const TxPacket& p = pkts[n];
      const std::uint8_t* bth = p.headers.data() + wire::kLrhBytes;
      const std::uint32_t len = p.payload_bytes;
      const unsigned pad = p.pad_bytes;
      std::uint16_t flags;  // crcs_valid, corrupt
      std::memcpy(&flags,
                  reinterpret_cast<const std::uint8_t*>(&p) + offsetof(TxPacket, crcs_valid), 2);
      // The checks and header words that follow from the length and the PadCnt alone, made
      // when they differ from the previous packet's (as req_poll_burst builds them).
      const std::uint64_t size_key = len | std::uint64_t{pad} << 32;
      if (size_key != sized_key) {
        if (len > mtu || pad > 3 || ((len + pad) & 3) != 0) break;
        sized_key = size_key;
        words = static_cast<std::uint16_t>((kHdr + len + pad + wire::kIcrcBytes) / 4);
        lrh_sized = route_lrh | std::uint64_t{__builtin_bswap16(words)} << 32;
        bth_sized = bth_want | std::uint64_t{pad} << 12;
      }
      if (p.header_bytes != kHdr || (len != 0 && p.payload == nullptr) ||
          (flags & reject_mask) != 0)
        break;
      // As for MIDDLE packets: the LRH and the first BTH bytes in two words, here with the
      // PktLen (big-endian, bytes 4-5) and PadCnt of this packet's length.
      std::uint64_t lrh_word, bth_word;
      std::memcpy(&lrh_word, p.headers.data(), 8);
      std::memcpy(&bth_word, bth, 8);
      if (lrh_word != lrh_sized || (bth_word & kBthMidMask) != bth_sized) break;
      const std::uint32_t psn = psn_of(bth);
      const RecvWqe& r = wqes[n];
      if (psn != epsn || r.total_bytes < len) break;
      const std::uint64_t wr_id = r.wr_id;
      if (r.num_sge == 1 && !rp)
        copy_small(reinterpret_cast<std::uint8_t*>(sge[0].addr), p.payload, len);
      else
        copy_to_sges_outlined(sge, r.num_sge, p.payload, len, rp);
      sge += rx.stride;
      // complete_recv_ok's completion.
      WorkCompletion* wc = wc_first + n;
      *wc = tmpl;
      wc->wr_id = wr_id;
      wc->byte_len = len;
      last_len = len;
      epsn = psn_add(psn, 1);
      if ((bth[8] & 0x80) || ++since >= coalesce) {
        since = 0;
        ack_at = n;
      }
      words_sum += words;
    }
    if (ack_at != kNoAck) {
      const auto k = static_cast<std::uint32_t>(ack_at);
      ack = DeferredAck{&qp, psn_add(epsn_first, k), psn_add(msn_first, k + 1)};
    }
    rx_bytes = words_sum * 4 + n * wire::kVcrcBytes;
    if (n != 0) {
      msn = psn_add(msn_first, static_cast<std::uint32_t>(n));
      rq.pop_n(n);
      cq->commit(n);  // commit_cqe's counts, for n successful completions
      counters_.completions += n;
      qp.seq_nak_sent_ = false;
      qp.msg_bytes_ = last_len;
      qp.have_recv_ = false;
      qp.msn_ = msn;
    }
  }
  if (n != 0) {
    qp.seq_nak_sent_ = false;
    qp.epsn_ = epsn;
    qp.since_ack_ = since;
    // Delayed ACKs: requests after the run's last ACK are owed one by the deadline. The lean
    // packet before the run has armed it in every case known; arming here keeps the rule local.
    if (since != 0 && config_.ack_delay_ns != 0 && qp.ack_deadline_ == kNoDeadline)
      resp_owe_ack(qp);
    counters_.rx_packets += n;
    counters_.rx_bytes += rx_bytes;
  }
  return n;
}

void DeviceImpl::on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) {
  rx_now_ = now;
  BurstRoute route;
  DeferredAck ack;
  for (std::size_t i = 0; i < pkts.size();) {
    const TxPacket& pkt = pkts[i];
    // A packet receive_run may take (SEND ONLY, WRITE MIDDLE or LAST) starts a run itself once
    // routed: the burst's first SEND then costs what the run's others do, not the per-packet
    // lean path's (~200 instructions more, once per burst). A run that takes nothing leaves it
    // to fast_receive_burst, with the route it found cached.
    const auto op = static_cast<wire::Opcode>(pkt.headers[wire::kLrhBytes]);
    if (op == wire::Opcode::kRcSendOnly || op == wire::Opcode::kRcWriteMiddle ||
        op == wire::Opcode::kRcWriteLast) {
      if (QpImpl* qp = burst_route(pkt, route)) {
        if (ack.qp != qp) ack.flush();  // receive_run's ACK replaces the one held
        if (const std::size_t k = receive_run(pkts.subspan(i), route, ack)) {
          i += k;
          continue;
        }
      }
    }
    ++i;
    // A WRITE FIRST with packets after it holds its copy for the run (held_copy_).
    hold_first_copy_ = i < pkts.size() && remote_payload_ == nullptr;
    const bool taken = fast_receive_burst(pkt, route, ack);
    hold_first_copy_ = false;
    if (taken) {
      if (i < pkts.size()) i += receive_run(pkts.subspan(i), route, ack);
      continue;
    }
    ack.flush();  // the ACKs of the requests before it first, as the per-packet path queued them
    on_packet(pkt, now);
  }
  ack.flush();
}

void DeviceImpl::receive_general(const TxPacket& pkt, TimeNs now) {
  ++counters_.rx_packets;
  counters_.rx_bytes += pkt.wire_bytes();
  if (pkt.corrupt) {  // the medium's stand-in for a CRC failure (CrcMode::kModel)
    ++counters_.rx_bad_icrc;
    return;
  }
  if (pkt.header_bytes > TxPacket::kHeaderBytesMax || (pkt.payload_bytes && !pkt.payload)) {
    ++counters_.rx_malformed;
    return;
  }
  const std::span<const std::uint8_t> hdr(pkt.headers.data(), pkt.header_bytes);
  wire::Headers h{};
  if (wire::parse_headers_to(hdr, pkt.payload_bytes, pkt.pad_bytes, h)) {
    ++counters_.rx_malformed;
    return;
  }
  const std::span<const std::uint8_t> pl(pkt.payload, pkt.payload_bytes);
  if (config_.crc == CrcMode::kCompute && pkt.crcs_valid) {
    // VCRC (over the ICRC as received) first, then ICRC: one pass for both.
    if (const auto e = wire::check_packet_crcs(hdr, pl, pkt.pad_bytes, pkt.icrc, pkt.vcrc)) {
      ++(*e == wire::WireError::kBadVcrc ? counters_.rx_bad_vcrc : counters_.rx_bad_icrc);
      return;
    }
  }
  std::span<const std::uint8_t> grh;
  if (h.has_grh) grh = hdr.subspan(wire::kLrhBytes, wire::kGrhBytes);
  dispatch(h, pl, grh, now);
}

bool DeviceImpl::dlid_ok_slow(std::uint16_t dlid) const {
  if (dlid == 0xFFFF) return true;
  for (const PortConfig& port : config_.ports) {
    const auto lmc_mask = static_cast<std::uint16_t>(~((1u << port.lmc) - 1));
    if (port.state == PortState::kActive && (dlid & lmc_mask) == (port.lid & lmc_mask)) return true;
  }
  return false;
}

void DeviceImpl::dispatch(const wire::Headers& h, std::span<const std::uint8_t> payload,
                          std::span<const std::uint8_t> grh_bytes, TimeNs now) {
  if (!dlid_ok(h.lrh.dlid)) {
    ++counters_.rx_bad_dlid;
    return;
  }
  const std::uint32_t qpn = h.bth.dest_qp;
  QpImpl* qp = qpn < qps_.size() ? qps_[qpn].get() : nullptr;
  if (!qp || qp->state_ == QpState::kReset || qp->state_ == QpState::kInit ||
      qp->state_ == QpState::kErr) {
    ++counters_.rx_no_qp;
    return;
  }
  if (!pkey_ok(*qp, h.bth.pkey)) {
    ++counters_.rx_bad_pkey;
    return;
  }
  const auto op = static_cast<std::uint8_t>(h.bth.opcode);
  const bool ud_op = (op >> 5) == 3;
  const bool rc_op = (op >> 5) == 0;
  if (qp->init_.type == QpType::kUd) {
    if (!ud_op) {
      ++counters_.rx_no_qp;
      return;
    }
    resp_on_ud(*qp, h, payload, grh_bytes);
    return;
  }
  if (!rc_op) {
    ++counters_.rx_no_qp;
    return;
  }
  const std::uint16_t mask = wire::opcode_info(h.bth.opcode).mask;
  if (mask & wire::kIsResponse) {
    if (qp->state_ == QpState::kRtr) {
      ++counters_.rx_no_qp;
      return;
    }
    comp_on_response(*qp, h, payload, now);
  } else {
    resp_on_request(*qp, h, payload, now);
  }
}

// ---- timers -----------------------------------------------------------------------------------

namespace {
// A function object, not a function: the heap algorithms then inline the comparison (through a
// function pointer each one was a call; ~30 instructions per round trip of a ping-pong).
struct Later {
  bool operator()(const DeviceImpl::TimerEntry& a, const DeviceImpl::TimerEntry& b) const {
    return a.at != b.at ? a.at > b.at : a.qpn > b.qpn;
  }
};
constexpr Later later{};
}  // namespace

void DeviceImpl::timer_place(std::size_t i, TimerEntry e) const {
  timers_[i] = e;
  if (QpImpl* qp = qps_[e.qpn].get()) qp->timer_pos_ = i;
}

void DeviceImpl::timer_sift_up(std::size_t i, TimerEntry e) const {
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (!later(timers_[parent], e)) break;
    timer_place(i, timers_[parent]);
    i = parent;
  }
  timer_place(i, e);
}

// The earlier child moves up until e is not later than it (both sub-heaps of i are heaps). The
// layout may differ from std::pop_heap / push_heap's, which nothing observes: the top is the
// earliest entry either way, and on_deadline fires the due QPs in QPN order, not heap order.
void DeviceImpl::timer_sift_down(std::size_t i, TimerEntry e) const {
  const std::size_t n = timers_.size();
  for (std::size_t c = 2 * i + 1; c < n; c = 2 * i + 1) {
    if (c + 1 < n && later(timers_[c], timers_[c + 1])) ++c;  // the earlier child
    if (!later(e, timers_[c])) break;
    timer_place(i, timers_[c]);
    i = c;
  }
  timer_place(i, e);
}

void DeviceImpl::timer_earlier(QpImpl& qp, TimeNs at) const {
  if (qp.timer_pos_ == QpImpl::kNoTimerPos) {
    timers_.push_back(TimerEntry{at, qp.qpn_});
    timer_sift_up(timers_.size() - 1, TimerEntry{at, qp.qpn_});
    return;
  }
  WEFT_ASSERT(qp.timer_pos_ < timers_.size() && timers_[qp.timer_pos_].qpn == qp.qpn_);
  timer_sift_up(qp.timer_pos_, TimerEntry{at, qp.qpn_});
}

void DeviceImpl::timer_pop_top() const {
  if (QpImpl* qp = qps_[timers_.front().qpn].get()) {
    qp->timer_pos_ = QpImpl::kNoTimerPos;
    qp->timer_entry_at_ = kNoDeadline;
  }
  const TimerEntry last = timers_.back();
  timers_.pop_back();
  if (!timers_.empty()) timer_sift_down(0, last);
}

void DeviceImpl::clean_timer_top() const {
  while (!timers_.empty()) {
    const TimerEntry top = timers_.front();
    QpImpl* qp = qps_[top.qpn].get();
    const TimeNs d = qp ? qp->next_deadline() : kNoDeadline;
    if (qp && top.at == d) return;  // live
    if (qp && d != kNoDeadline) {
      // The QP's deadline moved later (the re-arm of every ping-pong round trip): its entry
      // moves down to it.
      qp->timer_entry_at_ = d;
      timer_sift_down(0, TimerEntry{d, top.qpn});
      continue;
    }
    timer_pop_top();  // no deadline left, or the QP is gone
  }
}

TimeNs DeviceImpl::next_deadline() const {
  clean_timer_top();
  return timers_.empty() ? kNoDeadline : timers_.front().at;
}

void DeviceImpl::on_deadline(TimeNs now) {
  // Every QP due by `now`, then fired in QPN order (the order of a scan over all QPs, so runs
  // replay the same packet traces whatever the heap's tie-breaking).
  due_.clear();
  for (clean_timer_top(); !timers_.empty() && timers_.front().at <= now; clean_timer_top()) {
    const std::uint32_t qpn = timers_.front().qpn;
    timer_pop_top();
    due_.push_back(qpn);
  }
  std::sort(due_.begin(), due_.end());
  due_.erase(std::unique(due_.begin(), due_.end()), due_.end());
  for (const std::uint32_t qpn : due_) {
    QpImpl* qp = qps_[qpn].get();
    if (!qp) continue;
    if (qp->next_deadline() <= now) {
      resp_on_deadline(*qp, now);
      comp_on_deadline(*qp, now);
    }
    note_deadline(*qp);
  }
}

Errc SrqImpl::post_recv(const RecvWr& wr) {
  if (wr.sg_list.size() > rq_.max_sge()) return Errc::kTooManySge;
  if (rq_.full()) return Errc::kQueueFull;
  if (Errc e = dev_->check_sges(pd_, wr.sg_list, kAccessLocalWrite); e != Errc::kOk) return e;
  rq_.push(wr);
  return Errc::kOk;
}

}  // namespace weft::transport

namespace weft {

std::unique_ptr<Device> Device::create(const DeviceConfig& config, Rng& rng) {
  return std::make_unique<transport::DeviceImpl>(config, rng);
}

std::size_t TxPacket::write_to(std::span<std::uint8_t> out) const {
  using transport::store_le16;
  using transport::store_le32;
  const std::size_t n = wire_bytes();
  WEFT_ASSERT(out.size() >= n);
  WEFT_ASSERT(pad_bytes <= 3);
  std::uint8_t* o = out.data();
  // Short headers as one 32-byte block when the image is at least that long (the payload, pad
  // and CRCs written next overwrite the excess; nothing past the image is touched): a fixed-size
  // copy is two vector moves, where memcpy of a variable length is a call (every packet of the
  // byte path comes through here).
  constexpr std::size_t kHeaderBlockBytes = 32;
  static_assert(kHeaderBytesMax >= kHeaderBlockBytes);
  if (header_bytes <= kHeaderBlockBytes && n >= kHeaderBlockBytes)
    std::memcpy(o, headers.data(), kHeaderBlockBytes);
  else
    std::memcpy(o, headers.data(), header_bytes);
  std::size_t k = header_bytes;
  transport::copy_payload(o + k, payload, payload_bytes);
  k += payload_bytes;
  // The pad as one zero word (the ICRC written next covers the bytes past it; n - k >= 6).
  if (pad_bytes) store_le32(o + k, 0);
  k += pad_bytes;
  std::uint32_t ic = icrc;
  std::uint16_t vc = vcrc;
  if (!crcs_valid) {
    const wire::PacketCrcs c = wire::packet_crcs(
        out.first(header_bytes), out.subspan(header_bytes, payload_bytes), pad_bytes);
    ic = c.icrc;
    vc = c.vcrc;
  }
  if (corrupt) ic ^= 1;   // a medium's "this packet is corrupt" becomes a real ICRC failure
  store_le32(o + k, ic);  // as wire::put_icrc / put_vcrc: low byte first
  k += wire::kIcrcBytes;
  if (corrupt) vc = wire::vcrc(out.first(k));  // a good VCRC over the bad ICRC
  store_le16(o + k, vc);
  return k + wire::kVcrcBytes;
}

}  // namespace weft
