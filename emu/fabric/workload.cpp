// emu/fabric/workload.cpp — RC endpoints and WRITE streams over a Fabric (see workload.hpp).
#include "emu/fabric/workload.hpp"

#include <array>
#include <cassert>

namespace weft::fabric {

RcEndpoint make_endpoint(Fabric& f, topo::NodeId node, std::size_t mem_bytes,
                         const RcConnectParams& p) {
  RcEndpoint e;
  e.node = node;
  e.dev = &f.device(node);
  e.pd = *e.dev->alloc_pd();
  e.cq = *e.dev->create_cq(p.cq_depth);
  QpInitAttr ia;
  ia.type = QpType::kRc;
  ia.pd = e.pd;
  ia.send_cq = e.cq;
  ia.recv_cq = e.cq;
  ia.caps.max_send_wr = p.wr_max;
  ia.caps.max_recv_wr = p.wr_max;
  e.qp = *e.dev->create_qp(ia);
  e.mem.assign(mem_bytes, 0);
  e.mr = *e.dev->reg_mr(
      e.pd, e.mem.data(), e.mem.size(),
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  return e;
}

namespace {

Errc bring_up(QueuePair& qp, std::uint16_t dlid, std::uint32_t dest_qpn, const RcConnectParams& p) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  Errc rc = qp.modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  if (rc != Errc::kOk) return rc;
  a.qp_state = QpState::kRtr;
  a.av = AddressVector{};
  a.av.dlid = dlid;
  a.av.sl = p.sl;
  a.path_mtu = p.mtu;
  a.dest_qpn = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.recovery = p.recovery;
  const std::uint32_t rtr =
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  bool recovery_set = true;
  rc = qp.modify(a, rtr | kQpRecoveryMode);
  if (rc == Errc::kExtraAttribute) {
    recovery_set = false;
    rc = qp.modify(a, rtr);
  }
  if (rc != Errc::kOk) return rc;
  a.qp_state = QpState::kRts;
  a.sq_psn = 0;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  const std::uint32_t rts =
      kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic;
  return qp.modify(a, recovery_set ? rts : rts | kQpRecoveryMode);
}

}  // namespace

Errc connect_rc(Fabric& f, RcEndpoint& a, RcEndpoint& b, const RcConnectParams& p) {
  Errc rc = bring_up(*a.qp, f.lid(b.node), b.qp->qp_num(), p);
  if (rc != Errc::kOk) return rc;
  return bring_up(*b.qp, f.lid(a.node), a.qp->qp_num(), p);
}

std::uint64_t service_streams(Fabric& f, std::vector<WriteStream>& streams) {
  std::uint64_t seen = 0;
  std::array<WorkCompletion, 64> wc;
  for (WriteStream& s : streams) {
    for (;;) {
      const std::size_t n = s.src->cq->poll(wc);
      for (std::size_t i = 0; i < n; ++i) {
        // wr_id names the stream that posted it (several streams may share a source's CQ).
        auto* owner = reinterpret_cast<WriteStream*>(static_cast<std::uintptr_t>(wc[i].wr_id));
        owner->completed++;
        if (wc[i].status == WcStatus::kSuccess) {
          owner->bytes_completed += owner->msg_bytes;
        } else {
          owner->errors++;
        }
      }
      seen += n;
      if (n < wc.size()) break;
    }
  }
  for (WriteStream& s : streams) {
    bool posted = false;
    while (s.posted - s.completed < s.outstanding_max && s.posted < s.messages_max) {
      assert(s.msg_bytes <= s.src->mem.size() && s.msg_bytes <= s.dst->mem.size());
      Sge sge{reinterpret_cast<std::uint64_t>(s.src->mem.data()), s.msg_bytes, s.src->mr->lkey()};
      SendWr wr;
      wr.wr_id = reinterpret_cast<std::uintptr_t>(&s);
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.send_flags = kSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = reinterpret_cast<std::uint64_t>(s.dst->mem.data());
      wr.rkey = s.dst->mr->rkey();
      if (s.src->qp->post_send(wr) != Errc::kOk) break;
      s.posted++;
      posted = true;
    }
    if (posted) f.kick(s.src->node);
  }
  return seen;
}

void run_streams(Fabric& f, std::vector<WriteStream>& streams, TimeNs until_ns, TimeNs slice_ns) {
  while (f.sim().now() < until_ns) {
    service_streams(f, streams);
    const TimeNs next = std::min(until_ns, f.sim().now() + slice_ns);
    f.sim().run_until(next);
  }
  service_streams(f, streams);
}

}  // namespace weft::fabric
