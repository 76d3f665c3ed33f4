// emu/harness/setup.cpp — QP bring-up (see setup.hpp).
#include "emu/harness/setup.hpp"

namespace weft::harness {

Errc bring_up_rc(QueuePair& qp, const RcParams& p) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  Errc rc = qp.modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
  if (rc != Errc::kOk) return rc;

  a.qp_state = QpState::kRtr;
  a.av = AddressVector{};
  a.av.dlid = p.dlid;
  a.path_mtu = p.mtu;
  a.dest_qpn = p.dest_qpn;
  a.rq_psn = p.rq_psn;
  a.max_dest_rd_atomic = p.max_dest_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.recovery = p.recovery;
  const std::uint32_t rtr =
      kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  // The recovery mode is a Weft extension; accept it on INIT->RTR, or else on RTR->RTS.
  bool recovery_set = true;
  rc = qp.modify(a, rtr | kQpRecoveryMode);
  if (rc == Errc::kExtraAttribute) {
    recovery_set = false;
    rc = qp.modify(a, rtr);
  }
  if (rc != Errc::kOk) return rc;

  a.qp_state = QpState::kRts;
  a.sq_psn = p.sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  const std::uint32_t rts =
      kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic;
  return qp.modify(a, recovery_set ? rts : rts | kQpRecoveryMode);
}

Errc bring_up_ud(QueuePair& qp, std::uint32_t qkey, std::uint32_t sq_psn) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = qkey;
  Errc rc = qp.modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey);
  if (rc != Errc::kOk) return rc;
  a.qp_state = QpState::kRtr;
  rc = qp.modify(a, kQpState);
  if (rc != Errc::kOk) return rc;
  a.qp_state = QpState::kRts;
  a.sq_psn = sq_psn;
  return qp.modify(a, kQpState | kQpSqPsn);
}

}  // namespace weft::harness
