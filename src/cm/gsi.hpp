// cm/gsi.hpp — what the sans-IO agents of src/cm (CommManager, SaClient) and emu/sa's
// SubnetAdmin exchange with whoever carries QP1 traffic: one 256-byte MAD and the LID it goes
// to (outgoing) or came from (incoming). The carrier sends it as a UD SEND to QP1 with the GSI
// Q_Key 0x80010000 (IBA 13.5.1); P_Key, SL and GRH are the carrier's (gaps: see README.md).
// Thread-safety: a plain value.
#pragma once

#include <array>
#include <cstdint>

#include <weft/types.hpp>

#include "src/wire/mad.hpp"

namespace weft::cm {

struct GsiMad {
  std::uint16_t lid = 0;  // outgoing: DLID; incoming: the sender's SLID
  std::uint8_t port = 1;  // the local HCA port
  std::array<std::uint8_t, wire::kMadBytes> mad{};
};

// IBA 13.4.6.2 / 12.7: timeouts are coded as 4.096 us * 2^code.
constexpr TimeNs timeout_code_ns(std::uint8_t code) {
  return code >= 31 ? TimeNs{4096} << 31 : TimeNs{4096} << code;
}

}  // namespace weft::cm
