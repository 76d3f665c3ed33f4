// link/fc_packet.cpp — see fc_packet.hpp.
#include "src/link/fc_packet.hpp"

#include "src/base/assert.hpp"
#include "src/wire/packet.hpp"

namespace weft::link {

std::string_view to_string(FcError e) {
  switch (e) {
    case FcError::kTruncated:
      return "truncated";
    case FcError::kBadLpcrc:
      return "bad LPCRC";
    case FcError::kBadOp:
      return "bad Op";
    case FcError::kBadVl:
      return "bad VL";
  }
  return "?";
}

void encode_fc_packet(const FcPacket& p, std::span<std::uint8_t, kFcPacketBytes> out) {
  WEFT_ASSERT(p.fctbs <= kFcFieldMask && p.fccl <= kFcFieldMask && p.vl < 16);
  out[0] = static_cast<std::uint8_t>((static_cast<unsigned>(p.op) << 4) | (p.fctbs >> 8));
  out[1] = static_cast<std::uint8_t>(p.fctbs & 0xFF);
  out[2] = static_cast<std::uint8_t>((p.vl << 4) | (p.fccl >> 8));
  out[3] = static_cast<std::uint8_t>(p.fccl & 0xFF);
  wire::put_vcrc(out.subspan<4, 2>(), wire::vcrc(std::span<const std::uint8_t>(out.data(), 4)));
}

Result<FcPacket, FcError> decode_fc_packet(std::span<const std::uint8_t> in) {
  if (in.size() < kFcPacketBytes) return FcError::kTruncated;
  if (wire::get_vcrc(in.subspan<4, 2>()) != wire::vcrc(in.first(4))) return FcError::kBadLpcrc;
  unsigned op = in[0] >> 4;
  if (op > 1) return FcError::kBadOp;
  FcPacket p;
  p.op = static_cast<FcOp>(op);
  p.fctbs = static_cast<std::uint16_t>(((in[0] & 0x0F) << 8) | in[1]);
  p.vl = static_cast<std::uint8_t>(in[2] >> 4);
  p.fccl = static_cast<std::uint16_t>(((in[2] & 0x0F) << 8) | in[3]);
  if (p.vl == 15) return FcError::kBadVl;
  return p;
}

}  // namespace weft::link
