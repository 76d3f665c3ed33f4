// wire/gmp.cpp — the GMP common checks and the RMPP header (IBA 13.4.2, 13.6.2).
// Thread-safety: pure functions.
#include "src/wire/gmp.hpp"

#include "src/wire/bytes.hpp"

namespace weft::wire {

std::string_view to_string(GmpError e) {
  switch (e) {
    case GmpError::kTruncated:
      return "truncated";
    case GmpError::kBadBaseVersion:
      return "bad MAD base version";
    case GmpError::kBadClass:
      return "wrong management class";
    case GmpError::kBadClassVersion:
      return "unsupported class version";
    case GmpError::kBadRmpp:
      return "bad RMPP header";
    case GmpError::kBadAttribute:
      return "unknown attribute";
    case GmpError::kBadField:
      return "field out of range";
  }
  return "unknown GmpError";
}

std::string_view to_string(RmppType t) {
  switch (t) {
    case RmppType::kNone:
      return "none";
    case RmppType::kData:
      return "DATA";
    case RmppType::kAck:
      return "ACK";
    case RmppType::kStop:
      return "STOP";
    case RmppType::kAbort:
      return "ABORT";
  }
  return "?";
}

void encode_rmpp(const RmppHeader& r, std::span<std::uint8_t, kMadBytes> mad) {
  const std::span<std::uint8_t> m(mad);
  detail::put8(m, 24, r.version);
  detail::put8(m, 25, static_cast<std::uint8_t>(r.type));
  detail::put8(m, 26, static_cast<unsigned>((r.resp_time & 0x1F) << 3 | (r.flags & 0x7)));
  detail::put8(m, 27, r.status);
  detail::put32(m, 28, r.data1);
  detail::put32(m, 32, r.data2);
}

Result<RmppHeader, GmpError> decode_rmpp(std::span<const std::uint8_t> mad) {
  if (mad.size() < kMadBytes) return GmpError::kTruncated;
  RmppHeader r;
  r.version = detail::get8(mad, 24);
  const std::uint8_t type = detail::get8(mad, 25);
  const std::uint8_t b26 = detail::get8(mad, 26);
  r.resp_time = b26 >> 3;
  r.flags = b26 & 0x7;
  r.status = detail::get8(mad, 27);
  r.data1 = detail::get32(mad, 28);
  r.data2 = detail::get32(mad, 32);
  if (r.active()) {
    if (r.version != kRmppVersion || type < 1 || type > 4) return GmpError::kBadRmpp;
  } else if (type > 4) {
    return GmpError::kBadRmpp;
  }
  r.type = static_cast<RmppType>(type);
  return r;
}

Result<MadHeader, GmpError> decode_gmp_header(std::span<const std::uint8_t> mad,
                                              std::uint8_t mgmt_class) {
  if (mad.size() < kMadBytes) return GmpError::kTruncated;
  auto h = decode_mad_header(mad);
  if (!h) {
    return h.error() == MadError::kBadBaseVersion ? GmpError::kBadBaseVersion
                                                  : GmpError::kTruncated;
  }
  if (mgmt_class != 0 && h.value().mgmt_class != mgmt_class) return GmpError::kBadClass;
  return h.value();
}

}  // namespace weft::wire
