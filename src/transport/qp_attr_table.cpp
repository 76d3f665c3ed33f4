// transport/qp_attr_table.cpp — IBA 11.2.5.3: required/optional attributes per QP transition.
// Mirrors the Linux kernel's ib_modify_qp_is_ok() table for RC and UD (without alternate paths
// and path migration, which Weft does not implement), plus Weft's kQpRecoveryMode, which is
// allowed where the QP's transport parameters are set (RESET->INIT, INIT->INIT, INIT->RTR).
#include "src/transport/qp_attr_table.hpp"

namespace weft::transport {
namespace {

constexpr int kStates = 7;
struct Entry {
  bool valid;
  std::uint32_t rc_req, rc_opt, ud_req, ud_opt;
};

constexpr std::uint32_t S = kQpState;

// [from][to]
constexpr Entry kTable[kStates][kStates] = {
    // from RESET
    {
        /*RESET*/ {true, 0, 0, 0, 0},
        /*INIT*/
        {true, S | kQpPkeyIndex | kQpPort | kQpAccessFlags, kQpRecoveryMode,
         S | kQpPkeyIndex | kQpPort | kQpQkey, 0},
        /*RTR*/ {false, 0, 0, 0, 0},
        /*RTS*/ {false, 0, 0, 0, 0},
        /*SQD*/ {false, 0, 0, 0, 0},
        /*SQE*/ {false, 0, 0, 0, 0},
        /*ERR*/ {true, S, 0, S, 0},
    },
    // from INIT
    {
        {true, S, 0, S, 0},
        {true, 0, kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpRecoveryMode, 0,
         kQpPkeyIndex | kQpPort | kQpQkey},
        {true, S | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
         kQpPkeyIndex | kQpAccessFlags | kQpRecoveryMode, S, kQpPkeyIndex | kQpQkey},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S, 0, S, 0},
    },
    // from RTR
    {
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic,
         kQpCurState | kQpAccessFlags | kQpMinRnrTimer, S | kQpSqPsn, kQpCurState | kQpQkey},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S, 0, S, 0},
    },
    // from RTS
    {
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, 0, kQpCurState | kQpAccessFlags | kQpMinRnrTimer, 0, kQpCurState | kQpQkey},
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {true, S, 0, S, 0},
    },
    // from SQD
    {
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S, kQpCurState | kQpAccessFlags | kQpMinRnrTimer, S, kQpCurState | kQpQkey},
        {true, 0,
         kQpPkeyIndex | kQpAccessFlags | kQpAv | kQpMaxDestRdAtomic | kQpMinRnrTimer | kQpTimeout |
             kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic,
         0, kQpPkeyIndex | kQpQkey},
        {false, 0, 0, 0, 0},
        {true, S, 0, S, 0},
    },
    // from SQE (UD only: an RC send-queue error goes straight to ERR, IBA 10.3.1)
    {
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S, kQpCurState, S, kQpCurState | kQpQkey},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, S, 0, S, 0},
    },
    // from ERR
    {
        {true, S, 0, S, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {false, 0, 0, 0, 0},
        {true, 0, 0, 0, 0},
    },
};

}  // namespace

TransitionRule transition_rule(QpType type, QpState from, QpState to) {
  const auto f = static_cast<int>(from), t = static_cast<int>(to);
  if (f >= kStates || t >= kStates) return {};
  const Entry& e = kTable[f][t];
  if (!e.valid) return {};
  // SQE exists for UD only.
  if (type == QpType::kRc && (from == QpState::kSqe || to == QpState::kSqe)) return {};
  if (type == QpType::kRc) return {true, e.rc_req, e.rc_opt};
  return {true, e.ud_req, e.ud_opt};
}

}  // namespace weft::transport
