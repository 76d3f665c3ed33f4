// emu/harness/setup.hpp — bringing QPs up through the IBA 10.3.1 state machine (RESET -> INIT ->
// RTR -> RTS) with the attribute masks IBA 11.2.5.3 requires, shared by the campaign and demo.
// Thread-safety: as the QP's Device.
#pragma once

#include <cstdint>

#include <weft/device.hpp>

namespace weft::harness {

inline constexpr std::uint32_t kCampaignQkey = 0x11111111;

struct RcParams {
  Mtu mtu = Mtu::k1024;
  RecoveryMode recovery = RecoveryMode::kGoBackN;
  std::uint8_t timeout = 10;  // 4.096 us * 2^timeout
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;      // 7 = forever
  std::uint8_t min_rnr_timer = 1;  // IBA Table 45 code
  std::uint8_t max_rd_atomic = 4;
  std::uint8_t max_dest_rd_atomic = 4;
  std::uint32_t sq_psn = 0, rq_psn = 0, dest_qpn = 0;
  std::uint16_t dlid = 0;
};

// RC: RESET -> RTS. Returns the first failing modify's error.
Errc bring_up_rc(QueuePair& qp, const RcParams& p);
// UD: RESET -> RTS with a Q_Key.
Errc bring_up_ud(QueuePair& qp, std::uint32_t qkey, std::uint32_t sq_psn);

}  // namespace weft::harness
