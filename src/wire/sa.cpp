// wire/sa.cpp — SA MAD and record layouts (IBA 15.2.1, 15.2.5.2, 15.2.5.3, 15.2.5.16).
// Offsets below are byte offsets of the IBA layout tables.
// Thread-safety: pure functions.
#include "src/wire/sa.hpp"

#include <algorithm>
#include <cmath>

#include "src/wire/bytes.hpp"

namespace weft::wire {
namespace {

using detail::get16;
using detail::get32;
using detail::get64;
using detail::get8;
using detail::put16;
using detail::put32;
using detail::put64;
using detail::put8;

// IBA 15.2.5.16 Table 205 (rate codes) in Gb/s; index = code.
constexpr double kRateGbps[] = {0,  0,   2.5, 10, 30,  5,   20,  40, 60, 80,  120, 14,
                                56, 112, 168, 25, 100, 200, 300, 28, 50, 400, 600};

}  // namespace

void encode_sa(const SaMad& m, std::span<std::uint8_t, kMadBytes> out) {
  MadHeader h = m.hdr;
  h.mgmt_class = kMgmtClassSa;
  encode_mad_header(h, out.subspan<0, kMadHeaderBytes>());
  encode_rmpp(m.rmpp, out);
  const std::span<std::uint8_t> o(out);
  put64(o, 36, m.sm_key);
  put16(o, 44, m.attr_offset);
  put16(o, 46, 0);
  put64(o, 48, m.comp_mask);
  std::copy(m.data.begin(), m.data.end(), out.begin() + kSaDataOffset);
}

Result<SaMad, GmpError> decode_sa(std::span<const std::uint8_t> mad) {
  auto h = decode_gmp_header(mad, kMgmtClassSa);
  if (!h) return h.error();
  if (h.value().class_version != kSaClassVersion) return GmpError::kBadClassVersion;
  auto r = decode_rmpp(mad);
  if (!r) return r.error();
  SaMad m;
  m.hdr = h.value();
  m.rmpp = r.value();
  m.sm_key = get64(mad, 36);
  m.attr_offset = get16(mad, 44);
  m.comp_mask = get64(mad, 48);
  std::copy_n(mad.begin() + kSaDataOffset, kSaDataBytes, m.data.begin());
  return m;
}

void encode(const PathRecord& r, std::span<std::uint8_t, kPathRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  std::fill(o.begin(), o.end(), 0);
  put64(o, 0, r.service_id);
  std::copy(r.dgid.begin(), r.dgid.end(), o.begin() + 8);
  std::copy(r.sgid.begin(), r.sgid.end(), o.begin() + 24);
  put16(o, 40, r.dlid);
  put16(o, 42, r.slid);
  put32(o, 44, (r.raw_traffic ? 1u << 31 : 0u) | (r.flow_label & 0xFFFFF) << 8 | r.hop_limit);
  put8(o, 48, r.tclass);
  put8(o, 49, (r.reversible ? 0x80u : 0u) | (r.numb_path & 0x7F));
  put16(o, 50, r.pkey);
  put16(o, 52, static_cast<unsigned>((r.qos_class & 0xFFF) << 4 | (r.sl & 0xF)));
  put8(o, 54, static_cast<unsigned>(r.mtu_selector) << 6 | (r.mtu & 0x3F));
  put8(o, 55, static_cast<unsigned>(r.rate_selector) << 6 | (r.rate & 0x3F));
  put8(o, 56,
       static_cast<unsigned>(r.packet_life_time_selector) << 6 | (r.packet_life_time & 0x3F));
  put8(o, 57, r.preference);
}

PathRecord decode_path_record(std::span<const std::uint8_t, kPathRecordBytes> in) {
  const std::span<const std::uint8_t> b(in);
  PathRecord r;
  r.service_id = get64(b, 0);
  std::copy_n(b.begin() + 8, 16, r.dgid.begin());
  std::copy_n(b.begin() + 24, 16, r.sgid.begin());
  r.dlid = get16(b, 40);
  r.slid = get16(b, 42);
  const std::uint32_t w = get32(b, 44);
  r.raw_traffic = (w >> 31) != 0;
  r.flow_label = (w >> 8) & 0xFFFFF;
  r.hop_limit = static_cast<std::uint8_t>(w);
  r.tclass = get8(b, 48);
  r.reversible = (get8(b, 49) & 0x80) != 0;
  r.numb_path = get8(b, 49) & 0x7F;
  r.pkey = get16(b, 50);
  r.qos_class = get16(b, 52) >> 4;
  r.sl = get16(b, 52) & 0xF;
  r.mtu_selector = static_cast<Selector>(get8(b, 54) >> 6);
  r.mtu = get8(b, 54) & 0x3F;
  r.rate_selector = static_cast<Selector>(get8(b, 55) >> 6);
  r.rate = get8(b, 55) & 0x3F;
  r.packet_life_time_selector = static_cast<Selector>(get8(b, 56) >> 6);
  r.packet_life_time = get8(b, 56) & 0x3F;
  r.preference = get8(b, 57);
  return r;
}

void encode(const NodeRecord& r, std::span<std::uint8_t, kNodeRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  std::fill(o.begin(), o.end(), 0);
  put16(o, 0, r.lid);
  std::array<std::uint8_t, kSmpDataBytes> tmp{};
  encode(r.node_info, tmp);
  std::copy_n(tmp.begin(), 40, o.begin() + 4);
  encode(r.description, tmp);
  std::copy_n(tmp.begin(), 64, o.begin() + 44);
}

NodeRecord decode_node_record(std::span<const std::uint8_t, kNodeRecordBytes> in) {
  NodeRecord r;
  r.lid = get16(std::span<const std::uint8_t>(in), 0);
  std::array<std::uint8_t, kSmpDataBytes> tmp{};
  std::copy_n(in.begin() + 4, 40, tmp.begin());
  r.node_info = decode_node_info(tmp);
  std::copy_n(in.begin() + 44, 64, tmp.begin());
  r.description = decode_node_description(tmp);
  return r;
}

void encode(const PortInfoRecord& r, std::span<std::uint8_t, kPortInfoRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  put16(o, 0, r.endport_lid);
  put8(o, 2, r.port_num);
  put8(o, 3, r.options);
  encode(r.port_info, out.subspan<4, kSmpDataBytes>());
}

PortInfoRecord decode_port_info_record(std::span<const std::uint8_t, kPortInfoRecordBytes> in) {
  PortInfoRecord r;
  const std::span<const std::uint8_t> b(in);
  r.endport_lid = get16(b, 0);
  r.port_num = get8(b, 2);
  r.options = get8(b, 3);
  r.port_info = decode_port_info(in.subspan<4, kSmpDataBytes>());
  return r;
}

void encode(const ServiceRecord& r, std::span<std::uint8_t, kServiceRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  std::fill(o.begin(), o.end(), 0);
  put64(o, 0, r.service_id);
  std::copy(r.gid.begin(), r.gid.end(), o.begin() + 8);
  put16(o, 24, r.pkey);
  put32(o, 28, r.lease);
  std::copy(r.key.begin(), r.key.end(), o.begin() + 32);
  for (std::size_t i = 0; i < r.name.size(); ++i) o[48 + i] = static_cast<std::uint8_t>(r.name[i]);
  std::copy(r.data8.begin(), r.data8.end(), o.begin() + 112);
  for (std::size_t i = 0; i < 8; ++i) put16(o, 128 + 2 * i, r.data16[i]);
  for (std::size_t i = 0; i < 4; ++i) put32(o, 144 + 4 * i, r.data32[i]);
  for (std::size_t i = 0; i < 2; ++i) put64(o, 160 + 8 * i, r.data64[i]);
}

ServiceRecord decode_service_record(std::span<const std::uint8_t, kServiceRecordBytes> in) {
  ServiceRecord r;
  const std::span<const std::uint8_t> b(in);
  r.service_id = get64(b, 0);
  std::copy_n(b.begin() + 8, 16, r.gid.begin());
  r.pkey = get16(b, 24);
  r.lease = get32(b, 28);
  std::copy_n(b.begin() + 32, 16, r.key.begin());
  for (std::size_t i = 0; i < r.name.size(); ++i) r.name[i] = static_cast<char>(b[48 + i]);
  std::copy_n(b.begin() + 112, 16, r.data8.begin());
  for (std::size_t i = 0; i < 8; ++i) r.data16[i] = get16(b, 128 + 2 * i);
  for (std::size_t i = 0; i < 4; ++i) r.data32[i] = get32(b, 144 + 4 * i);
  for (std::size_t i = 0; i < 2; ++i) r.data64[i] = get64(b, 160 + 8 * i);
  return r;
}

void encode(const McMemberRecord& r, std::span<std::uint8_t, kMcMemberRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  std::fill(o.begin(), o.end(), 0);
  std::copy(r.mgid.begin(), r.mgid.end(), o.begin());
  std::copy(r.port_gid.begin(), r.port_gid.end(), o.begin() + 16);
  put32(o, 32, r.qkey);
  put16(o, 36, r.mlid);
  put8(o, 38, static_cast<unsigned>(r.mtu_selector) << 6 | (r.mtu & 0x3F));
  put8(o, 39, r.tclass);
  put16(o, 40, r.pkey);
  put8(o, 42, static_cast<unsigned>(r.rate_selector) << 6 | (r.rate & 0x3F));
  put8(o, 43,
       static_cast<unsigned>(r.packet_life_time_selector) << 6 | (r.packet_life_time & 0x3F));
  put32(o, 44, std::uint32_t{r.sl & 0xFu} << 28 | (r.flow_label & 0xFFFFF) << 8 | r.hop_limit);
  put8(o, 48, (r.scope & 0xFu) << 4 | (r.join_state & 0xFu));
  put8(o, 49, r.proxy_join ? 0x80 : 0);
}

McMemberRecord decode_mcmember_record(std::span<const std::uint8_t, kMcMemberRecordBytes> in) {
  McMemberRecord r;
  const std::span<const std::uint8_t> b(in);
  std::copy_n(b.begin(), 16, r.mgid.begin());
  std::copy_n(b.begin() + 16, 16, r.port_gid.begin());
  r.qkey = get32(b, 32);
  r.mlid = get16(b, 36);
  r.mtu_selector = static_cast<Selector>(b[38] >> 6);
  r.mtu = b[38] & 0x3F;
  r.tclass = b[39];
  r.pkey = get16(b, 40);
  r.rate_selector = static_cast<Selector>(b[42] >> 6);
  r.rate = b[42] & 0x3F;
  r.packet_life_time_selector = static_cast<Selector>(b[43] >> 6);
  r.packet_life_time = b[43] & 0x3F;
  const std::uint32_t w = get32(b, 44);
  r.sl = static_cast<std::uint8_t>(w >> 28);
  r.flow_label = (w >> 8) & 0xFFFFF;
  r.hop_limit = static_cast<std::uint8_t>(w);
  r.scope = b[48] >> 4;
  r.join_state = b[48] & 0xF;
  r.proxy_join = (b[49] & 0x80) != 0;
  return r;
}

void encode(const PKeyTableRecord& r, std::span<std::uint8_t, kPKeyTableRecordBytes> out) {
  const std::span<std::uint8_t> o(out);
  std::fill(o.begin(), o.end(), 0);
  put16(o, 0, r.lid);
  put16(o, 2, r.block_num);
  put8(o, 4, r.port_num);
  for (std::size_t i = 0; i < r.pkeys.size(); ++i) put16(o, 8 + 2 * i, r.pkeys[i]);
}

PKeyTableRecord decode_pkey_table_record(std::span<const std::uint8_t, kPKeyTableRecordBytes> in) {
  PKeyTableRecord r;
  const std::span<const std::uint8_t> b(in);
  r.lid = get16(b, 0);
  r.block_num = get16(b, 2);
  r.port_num = get8(b, 4);
  for (std::size_t i = 0; i < r.pkeys.size(); ++i) r.pkeys[i] = get16(b, 8 + 2 * i);
  return r;
}

std::uint8_t rate_code_of_gbps(double gbps) {
  std::uint8_t best = 0;
  for (std::size_t c = 2; c < std::size(kRateGbps); ++c) {
    if (kRateGbps[c] <= gbps + 1e-9 && (best == 0 || kRateGbps[c] > kRateGbps[best])) {
      best = static_cast<std::uint8_t>(c);
    }
  }
  return best;
}

double gbps_of_rate_code(std::uint8_t code) {
  return code < std::size(kRateGbps) ? kRateGbps[code] : 0.0;
}

}  // namespace weft::wire
