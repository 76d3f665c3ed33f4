// wire/mad_attrs.cpp — layouts of GUIDInfo, SLtoVLMappingTable, VLArbitrationTable,
// MulticastForwardingTable, Notice (IBA 14.2.5, 13.4.8.2) and ClassPortInfo (13.4.8.1).
// Offsets are byte offsets of the IBA layout tables. Thread-safety: pure functions.
#include "src/wire/mad_attrs.hpp"

#include <algorithm>
#include <cstring>

#include "src/wire/bytes.hpp"

namespace weft::wire {

using detail::get16;
using detail::get24;
using detail::get32;
using detail::get64;
using detail::get8;
using detail::put16;
using detail::put24;
using detail::put32;
using detail::put64;
using detail::put8;

void encode(const GuidInfo& v, SmpData o) {
  for (std::size_t k = 0; k < v.guid.size(); ++k) put64(o, 8 * k, v.guid[k]);
}
GuidInfo decode_guid_info(ConstSmpData i) {
  GuidInfo v;
  for (std::size_t k = 0; k < v.guid.size(); ++k) v.guid[k] = get64(i, 8 * k);
  return v;
}

void encode(const SlToVlTable& v, SmpData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  for (std::size_t k = 0; k < 8; ++k)
    put8(o, k, ((v.vl[2 * k] & 0xFu) << 4) | (v.vl[2 * k + 1] & 0xFu));
}
SlToVlTable decode_sl2vl(ConstSmpData i) {
  SlToVlTable v;
  for (std::size_t k = 0; k < 8; ++k) {
    v.vl[2 * k] = get8(i, k) >> 4;
    v.vl[2 * k + 1] = get8(i, k) & 0xF;
  }
  return v;
}

void encode(const VlArbBlock& v, SmpData o) {
  for (std::size_t k = 0; k < v.entry.size(); ++k) {
    put8(o, 2 * k, v.entry[k].vl & 0xFu);
    put8(o, 2 * k + 1, v.entry[k].weight);
  }
}
VlArbBlock decode_vl_arb(ConstSmpData i) {
  VlArbBlock v;
  for (std::size_t k = 0; k < v.entry.size(); ++k) {
    v.entry[k].vl = get8(i, 2 * k) & 0xF;
    v.entry[k].weight = get8(i, 2 * k + 1);
  }
  return v;
}

void encode(const MulticastForwardingTable& v, SmpData o) {
  for (std::size_t k = 0; k < v.port_mask.size(); ++k) put16(o, 2 * k, v.port_mask[k]);
}
MulticastForwardingTable decode_mft(ConstSmpData i) {
  MulticastForwardingTable v;
  for (std::size_t k = 0; k < v.port_mask.size(); ++k) v.port_mask[k] = get16(i, 2 * k);
  return v;
}

void encode(const Notice& v, SmpData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put8(o, 0, (v.is_generic ? 0x80u : 0u) | (v.type & 0x7Fu));
  put24(o, 1, v.producer_type & 0xFFFFFF);
  put16(o, 4, v.trap_number);
  put16(o, 6, v.issuer_lid);
  put16(o, 8, (v.notice_toggle ? 0x8000u : 0u) | (v.notice_count & 0x7FFFu));
  std::memcpy(o.data() + 10, v.data_details.data(), kNoticeDetailsBytes);
}
Notice decode_notice(ConstSmpData i) {
  Notice v;
  v.is_generic = get8(i, 0) & 0x80;
  v.type = get8(i, 0) & 0x7F;
  v.producer_type = get24(i, 1);
  v.trap_number = get16(i, 4);
  v.issuer_lid = get16(i, 6);
  v.notice_toggle = get16(i, 8) & 0x8000;
  v.notice_count = get16(i, 8) & 0x7FFF;
  std::memcpy(v.data_details.data(), i.data() + 10, kNoticeDetailsBytes);
  return v;
}

void encode(const ClassPortInfo& v, PmaData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put8(o, 0, v.base_version);
  put8(o, 1, v.class_version);
  put16(o, 2, v.capability_mask);
  put32(o, 4, ((v.capability_mask2 & 0x7FFFFFFu) << 5) | (v.resp_time_value & 0x1Fu));
  std::memcpy(o.data() + 8, v.redirect_gid.data(), 16);
  put32(o, 24,
        (std::uint32_t{v.redirect_tc} << 24) | ((v.redirect_sl & 0xFu) << 20) |
            (v.redirect_flow_label & 0xFFFFFu));
  put16(o, 28, v.redirect_lid);
  put16(o, 30, v.redirect_pkey);
  put24(o, 33, v.redirect_qp & 0xFFFFFF);
  put32(o, 36, v.redirect_qkey);
  std::memcpy(o.data() + 40, v.trap_gid.data(), 16);
  put32(o, 56,
        (std::uint32_t{v.trap_tc} << 24) | ((v.trap_sl & 0xFu) << 20) |
            (v.trap_flow_label & 0xFFFFFu));
  put16(o, 60, v.trap_lid);
  put16(o, 62, v.trap_pkey);
  put8(o, 64, v.trap_hop_limit);
  put24(o, 65, v.trap_qp & 0xFFFFFF);
  put32(o, 68, v.trap_qkey);
}
ClassPortInfo decode_class_port_info(ConstPmaData i) {
  ClassPortInfo v;
  v.base_version = get8(i, 0);
  v.class_version = get8(i, 1);
  v.capability_mask = get16(i, 2);
  v.capability_mask2 = get32(i, 4) >> 5;
  v.resp_time_value = get32(i, 4) & 0x1F;
  std::memcpy(v.redirect_gid.data(), i.data() + 8, 16);
  const std::uint32_t r = get32(i, 24);
  v.redirect_tc = static_cast<std::uint8_t>(r >> 24);
  v.redirect_sl = (r >> 20) & 0xF;
  v.redirect_flow_label = r & 0xFFFFF;
  v.redirect_lid = get16(i, 28);
  v.redirect_pkey = get16(i, 30);
  v.redirect_qp = get24(i, 33);
  v.redirect_qkey = get32(i, 36);
  std::memcpy(v.trap_gid.data(), i.data() + 40, 16);
  const std::uint32_t t = get32(i, 56);
  v.trap_tc = static_cast<std::uint8_t>(t >> 24);
  v.trap_sl = (t >> 20) & 0xF;
  v.trap_flow_label = t & 0xFFFFF;
  v.trap_lid = get16(i, 60);
  v.trap_pkey = get16(i, 62);
  v.trap_hop_limit = get8(i, 64);
  v.trap_qp = get24(i, 65);
  v.trap_qkey = get32(i, 68);
  return v;
}

}  // namespace weft::wire
