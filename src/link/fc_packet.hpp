// link/fc_packet.hpp — the link-level flow-control packet (IBA 7.9.4.1).
//
// Six bytes on the wire, sent between link partners (never forwarded):
//
//   byte 0: Op[7:4] FCTBS[11:8]    Op 0 = normal, 1 = flow-control init (IBA 7.9.4.1)
//   byte 1: FCTBS[7:0]             sender's Flow Control Total Blocks Sent on this VL, mod 4096
//   byte 2: VL[7:4] FCCL[11:8]     the data VL the packet speaks for
//   byte 3: FCCL[7:0]              receiver's Flow Control Credit Limit on this VL, mod 4096
//   bytes 4-5: LPCRC               CRC-16 over bytes 0-3, computed as the VCRC (IBA 7.8.2), and
//                                  on the wire in the VCRC's byte order
//
// One packet carries both directions' state of one VL: the FCTBS of the port's transmitter and
// the FCCL of the port's receiver. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <weft/types.hpp>

namespace weft::link {

inline constexpr std::size_t kFcPacketBytes = 6;
inline constexpr std::uint16_t kFcFieldMask = 0x0FFF;  // FCTBS and FCCL are 12 bits

enum class FcOp : std::uint8_t { kNormal = 0, kInit = 1 };

struct FcPacket {
  FcOp op = FcOp::kNormal;
  std::uint16_t fctbs = 0;  // 12 bits
  std::uint8_t vl = 0;      // 4 bits
  std::uint16_t fccl = 0;   // 12 bits
  friend bool operator==(const FcPacket&, const FcPacket&) = default;
};

enum class FcError : std::uint8_t { kTruncated, kBadLpcrc, kBadOp, kBadVl };
std::string_view to_string(FcError e);

// Writes the six bytes (LPCRC included). Fields wider than their bit budget are a bug (asserted).
void encode_fc_packet(const FcPacket& p, std::span<std::uint8_t, kFcPacketBytes> out);
// Errors: kTruncated (fewer than 6 bytes), kBadLpcrc, kBadOp (reserved Op), kBadVl (VL15, which
// has no flow control, IBA 7.9.4).
Result<FcPacket, FcError> decode_fc_packet(std::span<const std::uint8_t> in);

}  // namespace weft::link
