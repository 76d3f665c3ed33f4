// cm/comm_manager.cpp — the CM state machines (IBA 12.9). See comm_manager.hpp.
// Thread-safety: none; one owner.
#include "src/cm/comm_manager.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::cm {
namespace {

constexpr std::uint64_t kTidTag = 0x434D'0000'0000'0000ull;  // "CM" in the TID's top bytes

wire::WeftRecovery to_wire(RecoveryMode m) {
  return m == RecoveryMode::kSelectiveRepeat ? wire::WeftRecovery::kSelectiveRepeat
                                             : wire::WeftRecovery::kGoBackN;
}
RecoveryMode from_wire(wire::WeftRecovery m) {
  return m == wire::WeftRecovery::kSelectiveRepeat ? RecoveryMode::kSelectiveRepeat
                                                   : RecoveryMode::kGoBackN;
}

// Weft's header, then the user's bytes.
template <std::size_t N>
void fill_private(std::array<std::uint8_t, N>& pd, RecoveryMode m, wire::WeftReject rej,
                  std::span<const std::uint8_t> user) {
  wire::encode(wire::WeftCmHeader{to_wire(m), rej}, pd);
  WEFT_ASSERT(user.size() <= N - wire::kWeftCmHeaderBytes);
  std::copy(user.begin(), user.end(), pd.begin() + wire::kWeftCmHeaderBytes);
}

// The peer's header (absent: a foreign CM, go-back-N) and the user's part after it.
template <std::size_t N>
std::pair<wire::WeftCmHeader, std::span<const std::uint8_t>> split_private(
    const std::array<std::uint8_t, N>& pd) {
  const std::span<const std::uint8_t> all(pd);
  if (auto h = wire::decode_weft_cm_header(all)) return {*h, all.subspan(wire::kWeftCmHeaderBytes)};
  return {wire::WeftCmHeader{}, all};
}

std::uint8_t clamp_timeout(unsigned code) {
  return static_cast<std::uint8_t>(std::min(code, 31u));
}

}  // namespace

std::string_view to_string(CmState s) {
  switch (s) {
    case CmState::kReqSent:
      return "REQ_SENT";
    case CmState::kReqRcvd:
      return "REQ_RCVD";
    case CmState::kRepSent:
      return "REP_SENT";
    case CmState::kEstablished:
      return "ESTABLISHED";
    case CmState::kDreqSent:
      return "DREQ_SENT";
    case CmState::kTimeWait:
      return "TIMEWAIT";
    case CmState::kClosed:
      return "CLOSED";
  }
  return "?";
}

std::string_view to_string(CmEventType t) {
  switch (t) {
    case CmEventType::kReqReceived:
      return "REQ_RECEIVED";
    case CmEventType::kEstablished:
      return "ESTABLISHED";
    case CmEventType::kRejected:
      return "REJECTED";
    case CmEventType::kTimeout:
      return "TIMEOUT";
    case CmEventType::kDisconnected:
      return "DISCONNECTED";
    case CmEventType::kSidrReply:
      return "SIDR_REPLY";
  }
  return "?";
}

CommManager::CommManager(CmConfig cfg)
    : cfg_(cfg),
      next_comm_id_(cfg.comm_id_base == 0 ? 1 : cfg.comm_id_base),
      psn_state_(cfg.psn_seed) {}

std::uint32_t CommManager::next_psn() {
  psn_state_ = psn_state_ * 1103515245u + 12345u;
  return (psn_state_ >> 8) & 0xFFFFFF;
}

TimeNs CommManager::wait_ns(const Conn& c) const {
  return timeout_code_ns(c.peer_response_timeout) + 2 * timeout_code_ns(c.packet_life_time);
}

CommManager::Conn* CommManager::find(std::uint32_t local_id) {
  auto it = conns_.find(local_id);
  return it == conns_.end() ? nullptr : &it->second;
}

CmState CommManager::state(ConnId conn) const {
  auto it = conns_.find(conn);
  return it == conns_.end() ? CmState::kClosed : it->second.state;
}

Errc CommManager::listen(std::uint64_t service_id, RecoveryMode recovery) {
  return listeners_.emplace(service_id, recovery).second ? Errc::kOk : Errc::kInvalidArgument;
}

Errc CommManager::stop_listening(std::uint64_t service_id) {
  return listeners_.erase(service_id) || ud_listeners_.erase(service_id) ? Errc::kOk
                                                                         : Errc::kNotFound;
}

void CommManager::send(Conn& c, const wire::CmMessage& m) {
  wire::encode_cm(c.tid, m, c.last_sent);
  out_.push_back(GsiMad{c.remote_lid, cfg_.port, c.last_sent});
  stats_.mads_sent++;
}

void CommManager::resend(Conn& c) {
  out_.push_back(GsiMad{c.remote_lid, cfg_.port, c.last_sent});
  stats_.mads_sent++;
  stats_.resends++;
}

void CommManager::send_rej(std::uint16_t dlid, std::uint64_t tid, std::uint32_t local_id,
                           std::uint32_t remote_id, wire::CmMsgKind kind, wire::RejReason reason,
                           wire::WeftReject weft, RecoveryMode recovery) {
  wire::CmRej r;
  r.local_comm_id = local_id;
  r.remote_comm_id = remote_id;
  r.msg_rejected = kind;
  r.reason = static_cast<std::uint16_t>(reason);
  fill_private(r.private_data, recovery, weft, {});
  GsiMad g{dlid, cfg_.port, {}};
  wire::encode_cm(tid, r, g.mad);
  out_.push_back(g);
  stats_.mads_sent++;
  stats_.rej_sent++;
}

void CommManager::event(const Conn& c, CmEventType t, std::uint16_t rej_reason, wire::WeftReject wr,
                        std::span<const std::uint8_t> private_data) {
  CmEvent e;
  e.type = t;
  e.conn = c.local_id;
  e.service_id = c.service_id;
  e.rej_reason = rej_reason;
  e.weft_reject = wr;
  e.recovery = c.recovery;
  e.remote_qpn = c.remote_qpn;
  e.remote_lid = c.remote_lid;
  e.private_data.assign(private_data.begin(), private_data.end());
  events_.push_back(std::move(e));
}

void CommManager::close(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (!it->second.active) by_remote_.erase({it->second.remote_ca_guid, it->second.remote_id});
  conns_.erase(it);
}

void CommManager::enter_timewait(Conn& c, TimeNs now) {
  c.state = CmState::kTimeWait;
  c.retries = 0;
  c.deadline = now + cfg_.timewait_ns;
}

Errc CommManager::to_rtr(Conn& c) {
  QpAttr a;
  a.qp_state = QpState::kRtr;
  a.av.dlid = c.remote_lid;
  a.av.sl = c.sl;
  a.av.port_num = cfg_.port;
  a.path_mtu = static_cast<Mtu>(std::clamp<std::uint8_t>(c.mtu, 1, 5));
  a.dest_qpn = c.remote_qpn;
  a.rq_psn = c.remote_psn;
  a.max_dest_rd_atomic = c.responder_resources;
  a.min_rnr_timer = c.min_rnr_timer;
  a.recovery = c.recovery;
  return c.qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                             kQpMaxDestRdAtomic | kQpMinRnrTimer | kQpRecoveryMode);
}

Errc CommManager::to_rts(Conn& c) {
  QpAttr a;
  a.qp_state = QpState::kRts;
  a.sq_psn = c.local_psn;
  a.timeout = c.ack_timeout;
  a.retry_cnt = c.retry_count;
  a.rnr_retry = c.peer_rnr_retry;
  a.max_rd_atomic = c.initiator_depth;
  return c.qp->modify(
      a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic);
}

namespace {
Errc to_init(QueuePair* qp, std::uint8_t port, std::uint32_t access, RecoveryMode recovery) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = port;
  a.access_flags = access;
  a.recovery = recovery;
  return qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpRecoveryMode);
}
}  // namespace

Result<ConnId, Errc> CommManager::connect(const ConnectParams& p, TimeNs now) {
  if (p.qp == nullptr || p.qp->type() != QpType::kRc || p.path.dlid == 0 ||
      p.private_data.size() > kReqUserPrivateBytes) {
    return Errc::kInvalidArgument;
  }
  if (p.qp->state() != QpState::kReset || cfg_.lid == 0) return Errc::kInvalidState;
  if (conns_.size() >= cfg_.connections_max) return Errc::kNoResources;
  if (Errc e = to_init(p.qp, cfg_.port, p.access_flags, p.recovery); e != Errc::kOk) return e;

  Conn c;
  c.local_id = next_comm_id_++;
  if (next_comm_id_ == 0) next_comm_id_ = 1;
  c.active = true;
  c.state = CmState::kReqSent;
  c.service_id = p.service_id;
  c.tid = kTidTag | c.local_id;
  c.qp = p.qp;
  c.remote_lid = p.path.dlid;
  c.sl = p.path.sl;
  c.mtu = p.path.mtu == 0 ? 3 : p.path.mtu;
  c.packet_life_time = p.path.packet_life_time;
  c.ack_timeout = clamp_timeout(p.path.packet_life_time + 1u);
  c.local_psn = next_psn();
  c.recovery = p.recovery;
  c.access_flags = p.access_flags;
  c.responder_resources = p.responder_resources;
  c.initiator_depth = p.initiator_depth;
  c.retry_count = p.retry_count;
  c.rnr_retry_count = p.rnr_retry_count;
  c.min_rnr_timer = p.min_rnr_timer;
  c.peer_response_timeout = cfg_.cm_response_timeout;

  wire::CmReq r;
  r.local_comm_id = c.local_id;
  r.service_id = p.service_id;
  r.local_ca_guid = cfg_.ca_guid;
  r.local_qpn = p.qp->qp_num();
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.remote_cm_response_timeout = cfg_.cm_response_timeout;
  r.transport = wire::CmTransport::kRc;
  r.starting_psn = c.local_psn;
  r.local_cm_response_timeout = cfg_.cm_response_timeout;
  r.retry_count = p.retry_count;
  r.pkey = p.path.pkey == 0 ? 0xFFFF : p.path.pkey;
  r.path_mtu = c.mtu;
  r.rnr_retry_count = p.rnr_retry_count;
  r.max_cm_retries = cfg_.max_cm_retries;
  r.primary.local_lid = cfg_.lid;
  r.primary.remote_lid = p.path.dlid;
  r.primary.local_gid = p.path.sgid;
  r.primary.remote_gid = p.path.dgid;
  r.primary.flow_label = p.path.flow_label;
  r.primary.packet_rate = p.path.rate;
  r.primary.traffic_class = p.path.tclass;
  r.primary.hop_limit = p.path.hop_limit;
  r.primary.sl = p.path.sl;
  r.primary.subnet_local = true;
  r.primary.local_ack_timeout = c.ack_timeout;
  fill_private(r.private_data, p.recovery, wire::WeftReject::kNone, p.private_data);
  send(c, r);
  c.deadline = now + wait_ns(c);
  const ConnId id = c.local_id;
  conns_.emplace(id, std::move(c));
  return id;
}

Errc CommManager::accept(ConnId id, const AcceptParams& p, TimeNs now) {
  Conn* c = find(id);
  if (c == nullptr) return Errc::kNotFound;
  if (c->state != CmState::kReqRcvd) return Errc::kInvalidState;
  if (p.qp == nullptr || p.qp->type() != QpType::kRc ||
      p.private_data.size() > kRepUserPrivateBytes) {
    return Errc::kInvalidArgument;
  }
  if (p.qp->state() != QpState::kReset) return Errc::kInvalidState;
  c->qp = p.qp;
  c->access_flags = p.access_flags;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  c->min_rnr_timer = p.min_rnr_timer;
  c->rnr_retry_count = p.rnr_retry_count;
  c->local_psn = next_psn();
  Errc e = to_init(p.qp, cfg_.port, p.access_flags, c->recovery);
  if (e == Errc::kOk) e = to_rtr(*c);
  if (e != Errc::kOk) {
    send_rej(c->remote_lid, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kReq,
             wire::RejReason::kNoResources, wire::WeftReject::kNone, c->recovery);
    close(id);
    return e;
  }
  wire::CmRep r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.local_qpn = p.qp->qp_num();
  r.starting_psn = c->local_psn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.rnr_retry_count = p.rnr_retry_count;
  r.local_ca_guid = cfg_.ca_guid;
  fill_private(r.private_data, c->recovery, wire::WeftReject::kNone, p.private_data);
  send(*c, r);
  c->state = CmState::kRepSent;
  c->retries = 0;
  c->deadline = now + wait_ns(*c);
  return Errc::kOk;
}

Errc CommManager::reject(ConnId id, std::span<const std::uint8_t> private_data, TimeNs now) {
  (void)now;
  Conn* c = find(id);
  if (c == nullptr) return Errc::kNotFound;
  if (c->state != CmState::kReqRcvd) return Errc::kInvalidState;
  if (private_data.size() > kRejUserPrivateBytes) return Errc::kInvalidArgument;
  wire::CmRej r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.msg_rejected = wire::CmMsgKind::kReq;
  r.reason = static_cast<std::uint16_t>(wire::RejReason::kConsumerReject);
  fill_private(r.private_data, c->recovery, wire::WeftReject::kNone, private_data);
  send(*c, r);
  stats_.rej_sent++;
  close(id);
  return Errc::kOk;
}

Errc CommManager::disconnect(ConnId id, TimeNs now) {
  Conn* c = find(id);
  if (c == nullptr) return Errc::kNotFound;
  if (c->state != CmState::kEstablished) return Errc::kInvalidState;
  QpAttr a;
  a.qp_state = QpState::kErr;
  c->qp->modify(a, kQpState);  // flushes what is outstanding (IBA 10.3.1)
  wire::CmDreq r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.remote_qpn = c->remote_qpn;
  send(*c, r);
  c->state = CmState::kDreqSent;
  c->retries = 0;
  c->deadline = now + wait_ns(*c);
  return Errc::kOk;
}

Errc CommManager::listen_ud(std::uint64_t service_id, std::uint32_t qpn, std::uint32_t qkey) {
  if (listeners_.count(service_id) || ud_listeners_.count(service_id) || qpn > 0xFFFFFF)
    return Errc::kInvalidArgument;
  ud_listeners_[service_id] = UdService{qpn, qkey};
  return Errc::kOk;
}

Result<std::uint32_t, Errc> CommManager::sidr_request(std::uint64_t service_id, std::uint16_t dlid,
                                                      std::uint16_t pkey,
                                                      std::span<const std::uint8_t> private_data,
                                                      TimeNs now) {
  if (dlid == 0 || private_data.size() > wire::kSidrReqPrivateBytes) return Errc::kInvalidArgument;
  if (cfg_.lid == 0) return Errc::kInvalidState;
  if (sidr_.size() >= cfg_.connections_max) return Errc::kNoResources;
  const std::uint32_t id = next_sidr_id_++;
  wire::CmSidrReq m;
  m.request_id = id;
  m.pkey = pkey;
  m.service_id = service_id;
  std::copy(private_data.begin(), private_data.end(), m.private_data.begin());
  Sidr s;
  s.service_id = service_id;
  s.dlid = dlid;
  // TID: "SIDR" in the upper half tells SIDR transactions apart from connections.
  wire::encode_sidr(std::uint64_t{0x53494452} << 32 | id, m, s.mad);
  s.deadline = now + timeout_code_ns(cfg_.cm_response_timeout);
  out_.push_back(GsiMad{dlid, cfg_.port, s.mad});
  stats_.mads_sent++;
  sidr_.emplace(id, s);
  return id;
}

void CommManager::on_sidr(const GsiMad& in, TimeNs now) {
  (void)now;
  if (auto q = wire::decode_sidr_req(in.mad)) {
    stats_.mads_received++;
    const wire::CmSidrReq& r = q.value();
    wire::CmSidrRep rep;
    rep.request_id = r.request_id;
    rep.service_id = r.service_id;
    const auto it = ud_listeners_.find(r.service_id);
    if (it == ud_listeners_.end()) {
      rep.status = wire::SidrStatus::kServiceIdNotSupported;
    } else {
      rep.qpn = it->second.qpn;
      rep.qkey = it->second.qkey;
    }
    const std::uint64_t tid = wire::decode_gmp_header(in.mad, wire::kMgmtClassCm).value().tid;
    GsiMad g{in.lid, cfg_.port, {}};
    wire::encode_sidr(tid, rep, g.mad);  // stateless: a repeated SIDR_REQ is answered again
    out_.push_back(g);
    stats_.mads_sent++;
    return;
  }
  auto p = wire::decode_sidr_rep(in.mad);
  if (!p) {
    stats_.ignored_mads++;
    return;
  }
  const auto it = sidr_.find(p.value().request_id);
  if (it == sidr_.end()) {  // a late duplicate of an answer already taken
    stats_.ignored_mads++;
    return;
  }
  stats_.mads_received++;
  const wire::CmSidrRep& r = p.value();
  CmEvent e;
  e.type = CmEventType::kSidrReply;
  e.conn = r.request_id;
  e.service_id = r.service_id;
  e.sidr_status = r.status;
  e.remote_qpn = r.qpn;
  e.qkey = r.qkey;
  e.remote_lid = in.lid;
  e.private_data.assign(r.private_data.begin(), r.private_data.end());
  events_.push_back(std::move(e));
  sidr_.erase(it);
}

void CommManager::sidr_deadlines(TimeNs now) {
  for (auto it = sidr_.begin(); it != sidr_.end();) {
    Sidr& s = it->second;
    if (s.deadline > now) {
      ++it;
      continue;
    }
    if (s.retries < cfg_.max_cm_retries) {
      s.retries++;
      stats_.resends++;
      s.deadline = now + timeout_code_ns(cfg_.cm_response_timeout);
      out_.push_back(GsiMad{s.dlid, cfg_.port, s.mad});
      ++it;
      continue;
    }
    stats_.timeouts++;
    CmEvent e;
    e.type = CmEventType::kTimeout;
    e.conn = it->first;
    e.service_id = s.service_id;
    e.remote_lid = s.dlid;
    events_.push_back(std::move(e));
    it = sidr_.erase(it);
  }
}

void CommManager::on_mad(const GsiMad& in, TimeNs now) {
  if (in.mad.size() >= 18) {
    const auto attr = static_cast<wire::CmAttr>(in.mad[16] << 8 | in.mad[17]);
    if (attr == wire::CmAttr::kSidrReq || attr == wire::CmAttr::kSidrRep) {
      on_sidr(in, now);
      return;
    }
  }
  auto m = wire::decode_cm(in.mad);
  if (!m) {
    stats_.ignored_mads++;
    return;
  }
  stats_.mads_received++;
  const std::uint64_t tid = m.value().hdr.tid;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, wire::CmReq>)
          on_req(in, tid, msg, now);
        else if constexpr (std::is_same_v<T, wire::CmRep>)
          on_rep(in, msg, now);
        else if constexpr (std::is_same_v<T, wire::CmRtu>)
          on_rtu(msg, now);
        else if constexpr (std::is_same_v<T, wire::CmRej>)
          on_rej(msg);
        else if constexpr (std::is_same_v<T, wire::CmMra>)
          on_mra(msg, now);
        else if constexpr (std::is_same_v<T, wire::CmDreq>)
          on_dreq(in, tid, msg, now);
        else if constexpr (std::is_same_v<T, wire::CmDrep>)
          on_drep(msg, now);
      },
      m.value().msg);
}

void CommManager::on_req(const GsiMad& in, std::uint64_t tid, const wire::CmReq& m, TimeNs now) {
  (void)now;
  if (auto it = by_remote_.find({m.local_ca_guid, m.local_comm_id}); it != by_remote_.end()) {
    stats_.dup_req++;
    Conn& c = conns_.at(it->second);
    if (c.state == CmState::kRepSent) {
      resend(c);  // our REP was lost (12.9.6: a duplicate REQ in REP Sent)
    } else if (c.state == CmState::kReqRcvd) {
      // The consumer has not answered yet: tell the peer to wait (12.6.6) instead of retrying.
      wire::CmMra mra;
      mra.local_comm_id = c.local_id;
      mra.remote_comm_id = c.remote_id;
      mra.msg_mraed = wire::CmMsgKind::kReq;
      mra.service_timeout = cfg_.mra_service_timeout;
      GsiMad g{c.remote_lid, cfg_.port, {}};
      wire::encode_cm(c.tid, mra, g.mad);
      out_.push_back(g);
      stats_.mads_sent++;
      stats_.mra_sent++;
    } else if (c.state == CmState::kTimeWait) {
      send_rej(in.lid, tid, c.local_id, m.local_comm_id, wire::CmMsgKind::kReq,
               wire::RejReason::kStaleConnection, wire::WeftReject::kNone, c.recovery);
    }
    return;  // Established: the active side has it already
  }
  const auto [hdr, user] = split_private(m.private_data);
  const RecoveryMode theirs = from_wire(hdr.recovery);
  auto l = listeners_.find(m.service_id);
  if (l == listeners_.end()) {
    send_rej(in.lid, tid, 0, m.local_comm_id, wire::CmMsgKind::kReq,
             wire::RejReason::kInvalidServiceId, wire::WeftReject::kNone, theirs);
    return;
  }
  if (m.transport != wire::CmTransport::kRc) {
    send_rej(in.lid, tid, 0, m.local_comm_id, wire::CmMsgKind::kReq,
             wire::RejReason::kInvalidTransportType, wire::WeftReject::kNone, l->second);
    return;
  }
  if (theirs != l->second) {
    send_rej(in.lid, tid, 0, m.local_comm_id, wire::CmMsgKind::kReq,
             wire::RejReason::kConsumerReject, wire::WeftReject::kRecoveryModeMismatch, l->second);
    return;
  }
  if (conns_.size() >= cfg_.connections_max) {
    send_rej(in.lid, tid, 0, m.local_comm_id, wire::CmMsgKind::kReq, wire::RejReason::kNoResources,
             wire::WeftReject::kNone, l->second);
    return;
  }
  Conn c;
  c.local_id = next_comm_id_++;
  if (next_comm_id_ == 0) next_comm_id_ = 1;
  c.remote_id = m.local_comm_id;
  c.active = false;
  c.state = CmState::kReqRcvd;
  c.service_id = m.service_id;
  c.tid = tid;
  c.remote_ca_guid = m.local_ca_guid;
  // The REQ's primary path, seen from here: its local LID is our remote (and the LID the REQ
  // came from, unless the active side's CM is elsewhere, which Weft does not do).
  c.remote_lid = m.primary.local_lid != 0 ? m.primary.local_lid : in.lid;
  c.sl = m.primary.sl;
  c.mtu = m.path_mtu;
  c.ack_timeout = m.primary.local_ack_timeout;
  c.packet_life_time = m.primary.local_ack_timeout > 0 ? m.primary.local_ack_timeout - 1 : 0;
  c.remote_qpn = m.local_qpn;
  c.remote_psn = m.starting_psn;
  c.recovery = theirs;
  c.retry_count = m.retry_count;
  c.peer_rnr_retry = m.rnr_retry_count;
  c.peer_response_timeout = m.local_cm_response_timeout;
  const ConnId id = c.local_id;
  by_remote_[{m.local_ca_guid, m.local_comm_id}] = id;
  auto& stored = conns_.emplace(id, std::move(c)).first->second;
  event(stored, CmEventType::kReqReceived, 0, wire::WeftReject::kNone, user);
}

void CommManager::on_rep(const GsiMad& in, const wire::CmRep& m, TimeNs now) {
  (void)in;
  Conn* c = find(m.remote_comm_id);
  if (c == nullptr || !c->active) {
    stats_.ignored_mads++;
    return;
  }
  if (c->state == CmState::kEstablished && c->remote_id == m.local_comm_id) {
    stats_.dup_rep++;
    resend(*c);  // our RTU was lost
    return;
  }
  if (c->state != CmState::kReqSent) {
    stats_.ignored_mads++;
    return;
  }
  const auto [hdr, user] = split_private(m.private_data);
  c->remote_id = m.local_comm_id;
  c->remote_qpn = m.local_qpn;
  c->remote_psn = m.starting_psn;
  c->remote_ca_guid = m.local_ca_guid;
  c->peer_rnr_retry = m.rnr_retry_count;
  c->initiator_depth = std::min(c->initiator_depth, m.responder_resources);
  if (from_wire(hdr.recovery) != c->recovery) {
    send_rej(c->remote_lid, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kRep,
             wire::RejReason::kConsumerReject, wire::WeftReject::kRecoveryModeMismatch,
             c->recovery);
    event(*c, CmEventType::kRejected, static_cast<std::uint16_t>(wire::RejReason::kConsumerReject),
          wire::WeftReject::kRecoveryModeMismatch);
    close(c->local_id);
    return;
  }
  Errc e = to_rtr(*c);
  if (e == Errc::kOk) e = to_rts(*c);
  if (e != Errc::kOk) {
    send_rej(c->remote_lid, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kRep,
             wire::RejReason::kNoResources, wire::WeftReject::kNone, c->recovery);
    event(*c, CmEventType::kRejected, static_cast<std::uint16_t>(wire::RejReason::kNoResources));
    close(c->local_id);
    return;
  }
  wire::CmRtu r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  send(*c, r);
  c->state = CmState::kEstablished;
  c->deadline = kNoDeadline;
  (void)now;
  event(*c, CmEventType::kEstablished, 0, wire::WeftReject::kNone, user);
}

void CommManager::on_rtu(const wire::CmRtu& m, TimeNs now) {
  (void)now;
  Conn* c = find(m.remote_comm_id);
  if (c == nullptr || c->active || c->remote_id != m.local_comm_id ||
      c->state != CmState::kRepSent) {
    stats_.ignored_mads++;
    return;
  }
  if (to_rts(*c) != Errc::kOk) {
    send_rej(c->remote_lid, c->tid, c->local_id, c->remote_id, wire::CmMsgKind::kOther,
             wire::RejReason::kNoResources, wire::WeftReject::kNone, c->recovery);
    event(*c, CmEventType::kRejected, static_cast<std::uint16_t>(wire::RejReason::kNoResources));
    close(c->local_id);
    return;
  }
  c->state = CmState::kEstablished;
  c->deadline = kNoDeadline;
  event(*c, CmEventType::kEstablished);
}

void CommManager::on_rej(const wire::CmRej& m) {
  Conn* c = find(m.remote_comm_id);
  if (c == nullptr || (c->state != CmState::kReqSent && c->state != CmState::kRepSent &&
                       c->state != CmState::kReqRcvd)) {
    stats_.ignored_mads++;
    return;
  }
  stats_.rej_received++;
  const auto [hdr, user] = split_private(m.private_data);
  if (c->state == CmState::kRepSent && c->qp != nullptr) {
    QpAttr a;
    a.qp_state = QpState::kErr;
    c->qp->modify(a, kQpState);
  }
  event(*c, CmEventType::kRejected, m.reason, hdr.reject, user);
  close(c->local_id);
}

void CommManager::on_mra(const wire::CmMra& m, TimeNs now) {
  Conn* c = find(m.remote_comm_id);
  const bool fits =
      c != nullptr && ((c->state == CmState::kReqSent && m.msg_mraed == wire::CmMsgKind::kReq) ||
                       (c->state == CmState::kRepSent && m.msg_mraed == wire::CmMsgKind::kRep));
  if (!fits) {
    stats_.ignored_mads++;
    return;
  }
  stats_.mra_received++;
  // 12.7.28: the peer needs service_timeout more; wait that long before resending.
  c->deadline = now + timeout_code_ns(m.service_timeout) + 2 * timeout_code_ns(c->packet_life_time);
}

void CommManager::on_dreq(const GsiMad& in, std::uint64_t tid, const wire::CmDreq& m, TimeNs now) {
  Conn* c = find(m.remote_comm_id);
  if (c == nullptr || c->remote_id != m.local_comm_id) {
    // Unknown connection: answer anyway so the peer can leave DREQ Sent (12.9.8.6).
    wire::CmDrep r;
    r.local_comm_id = m.remote_comm_id;
    r.remote_comm_id = m.local_comm_id;
    GsiMad g{in.lid, cfg_.port, {}};
    wire::encode_cm(tid, r, g.mad);
    out_.push_back(g);
    stats_.mads_sent++;
    return;
  }
  if (c->state == CmState::kTimeWait) {
    stats_.dup_dreq++;  // our DREP was lost: answer again
    wire::CmDrep r;
    r.local_comm_id = c->local_id;
    r.remote_comm_id = c->remote_id;
    send(*c, r);
    return;
  }
  if (c->state != CmState::kEstablished && c->state != CmState::kDreqSent &&
      c->state != CmState::kRepSent) {
    stats_.ignored_mads++;
    return;
  }
  QpAttr a;
  a.qp_state = QpState::kErr;
  c->qp->modify(a, kQpState);
  wire::CmDrep r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  send(*c, r);
  enter_timewait(*c, now);
  event(*c, CmEventType::kDisconnected);  // also when both sides disconnected at once
}

void CommManager::on_drep(const wire::CmDrep& m, TimeNs now) {
  Conn* c = find(m.remote_comm_id);
  if (c == nullptr || c->state != CmState::kDreqSent || c->remote_id != m.local_comm_id) {
    stats_.ignored_mads++;
    return;
  }
  enter_timewait(*c, now);
  event(*c, CmEventType::kDisconnected);
}

bool CommManager::poll_mad(TimeNs /*now*/, GsiMad& out) {
  if (out_.empty()) return false;
  out = out_.front();
  out_.pop_front();
  return true;
}

TimeNs CommManager::next_deadline() const {
  TimeNs t = kNoDeadline;
  for (const auto& [id, c] : conns_) t = std::min(t, c.deadline);
  for (const auto& [id, s] : sidr_) t = std::min(t, s.deadline);
  return t;
}

void CommManager::on_deadline(TimeNs now) {
  sidr_deadlines(now);
  std::vector<ConnId> expired;
  for (auto& [id, c] : conns_) {
    if (c.deadline > now) continue;
    switch (c.state) {
      case CmState::kReqSent:
      case CmState::kRepSent:
      case CmState::kDreqSent:
        if (c.retries < cfg_.max_cm_retries) {
          c.retries++;
          c.deadline = now + wait_ns(c);
          resend(c);
        } else {
          expired.push_back(id);
        }
        break;
      case CmState::kTimeWait:
        expired.push_back(id);
        break;
      default:
        c.deadline = kNoDeadline;
        break;
    }
  }
  for (ConnId id : expired) {
    Conn& c = conns_.at(id);
    if (c.state == CmState::kTimeWait) {
      close(id);
      continue;
    }
    if (c.state == CmState::kDreqSent) {  // the peer is gone: disconnected all the same
      enter_timewait(c, now);
      stats_.timeouts++;
      event(c, CmEventType::kDisconnected);
      continue;
    }
    stats_.timeouts++;
    const auto kind = c.state == CmState::kReqSent ? wire::CmMsgKind::kReq : wire::CmMsgKind::kRep;
    send_rej(c.remote_lid, c.tid, c.local_id, c.remote_id, kind, wire::RejReason::kTimeout,
             wire::WeftReject::kNone, c.recovery);
    if (c.state == CmState::kRepSent && c.qp != nullptr) {
      QpAttr a;
      a.qp_state = QpState::kErr;
      c.qp->modify(a, kQpState);
    }
    event(c, CmEventType::kTimeout, static_cast<std::uint16_t>(wire::RejReason::kTimeout));
    close(id);
  }
}

bool CommManager::poll_event(CmEvent& out) {
  if (events_.empty()) return false;
  out = std::move(events_.front());
  events_.pop_front();
  return true;
}

}  // namespace weft::cm
