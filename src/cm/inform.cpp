// cm/inform.cpp — InformInfo and the SA's Notice, encoded as IBA 13.4.8.2-3 lay them out.
// Thread-safety: pure functions.
#include "src/cm/inform.hpp"

#include <algorithm>

namespace weft::cm {
namespace {

void put16(std::span<std::uint8_t> b, std::size_t at, std::uint32_t v) {
  b[at] = static_cast<std::uint8_t>(v >> 8);
  b[at + 1] = static_cast<std::uint8_t>(v);
}
void put24(std::span<std::uint8_t> b, std::size_t at, std::uint32_t v) {
  b[at] = static_cast<std::uint8_t>(v >> 16);
  put16(b, at + 1, v);
}
std::uint16_t get16(std::span<const std::uint8_t> b, std::size_t at) {
  return static_cast<std::uint16_t>(b[at] << 8 | b[at + 1]);
}
std::uint32_t get24(std::span<const std::uint8_t> b, std::size_t at) {
  return static_cast<std::uint32_t>(b[at]) << 16 | get16(b, at + 1);
}

}  // namespace

void encode(const InformInfo& v, std::span<std::uint8_t, kInformInfoBytes> out) {
  std::fill(out.begin(), out.end(), 0);
  std::copy(v.gid.begin(), v.gid.end(), out.begin());
  put16(out, 16, v.lid_range_begin);
  put16(out, 18, v.lid_range_end);
  out[22] = v.is_generic ? 1 : 0;
  out[23] = v.subscribe ? 1 : 0;
  put16(out, 24, v.type);
  put16(out, 26, v.trap_number);
  put24(out, 28, v.qpn & 0xFFFFFF);
  out[31] = v.resp_time_value & 0x1F;  // 3 reserved bits above it
  put24(out, 33, v.producer_type & 0xFFFFFF);
}

InformInfo decode_inform_info(std::span<const std::uint8_t, kInformInfoBytes> in) {
  InformInfo v;
  std::copy_n(in.begin(), 16, v.gid.begin());
  v.lid_range_begin = get16(in, 16);
  v.lid_range_end = get16(in, 18);
  v.is_generic = in[22] != 0;
  v.subscribe = in[23] != 0;
  v.type = get16(in, 24);
  v.trap_number = get16(in, 26);
  v.qpn = get24(in, 28);
  v.resp_time_value = in[31] & 0x1F;
  v.producer_type = get24(in, 33);
  return v;
}

void encode(const SaNotice& v, std::span<std::uint8_t, kSaNoticeBytes> out) {
  wire::encode(v.notice, out.first<wire::kSmpDataBytes>());
  std::copy(v.issuer_gid.begin(), v.issuer_gid.end(), out.begin() + wire::kSmpDataBytes);
}

SaNotice decode_sa_notice(std::span<const std::uint8_t, kSaNoticeBytes> in) {
  SaNotice v;
  v.notice = wire::decode_notice(in.first<wire::kSmpDataBytes>());
  std::copy_n(in.begin() + wire::kSmpDataBytes, 16, v.issuer_gid.begin());
  return v;
}

bool inform_matches(const InformInfo& s, const SaNotice& n) {
  const wire::Notice& t = n.notice;
  const bool any_gid = std::all_of(s.gid.begin(), s.gid.end(), [](auto b) { return b == 0; });
  if (!any_gid) {
    if (s.gid != n.issuer_gid) return false;
  } else if (s.lid_range_begin != 0xFFFF) {
    if (t.issuer_lid < s.lid_range_begin || t.issuer_lid > s.lid_range_end) return false;
  }
  if (s.is_generic != t.is_generic) return false;
  if (s.type != 0xFFFF && s.type != t.type) return false;
  if (s.trap_number != 0xFFFF && s.trap_number != t.trap_number) return false;
  if (s.producer_type != 0xFFFFFF && s.producer_type != t.producer_type) return false;
  return true;
}

std::array<std::uint8_t, 16> port_gid(std::uint64_t port_guid) {
  std::array<std::uint8_t, 16> g{0xFE, 0x80};
  for (int i = 0; i < 8; ++i) g[8 + i] = static_cast<std::uint8_t>(port_guid >> (56 - 8 * i));
  return g;
}

}  // namespace weft::cm
