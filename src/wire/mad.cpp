// wire/mad.cpp — MAD, SMP and PMA layouts (IBA 13.4.2, 14.2.1, 14.2.5, 16.1.3.5, 16.1.4) and the
// directed-route rules of 14.2.2. Offsets below are byte offsets of the IBA layout tables.
// Thread-safety: pure functions.
#include "src/wire/mad.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/assert.hpp"
#include "src/wire/bytes.hpp"

namespace weft::wire {
namespace {

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

// SMP layout (14.2.1.1 / 14.2.1.2).
constexpr std::size_t kSmpMkey = 24, kSmpDrSlid = 32, kSmpDrDlid = 34, kSmpData = 64,
                      kSmpInitialPath = 128, kSmpReturnPath = 192;
static_assert(kSmpData + kSmpDataBytes == kSmpInitialPath);
static_assert(kSmpReturnPath + kDrPathBytes == kMadBytes);
static_assert(kPmaDataOffset + kPmaDataBytes == kMadBytes);

}  // namespace

std::string_view to_string(MadError e) {
  switch (e) {
    case MadError::kTruncated:
      return "truncated";
    case MadError::kBadBaseVersion:
      return "bad MAD base version";
    case MadError::kBadClass:
      return "wrong management class";
    case MadError::kBadHopCount:
      return "bad directed-route hop count or pointer";
  }
  return "unknown MadError";
}

void encode_mad_header(const MadHeader& h, std::span<std::uint8_t, kMadHeaderBytes> o) {
  put8(o, 0, h.base_version);
  put8(o, 1, h.mgmt_class);
  put8(o, 2, h.class_version);
  put8(o, 3, h.method);
  put16(o, 4, h.status);
  put16(o, 6, h.class_specific);
  put64(o, 8, h.tid);
  put16(o, 16, h.attr_id);
  put16(o, 18, 0);
  put32(o, 20, h.attr_mod);
}

Result<MadHeader, MadError> decode_mad_header(std::span<const std::uint8_t> m) {
  if (m.size() < kMadHeaderBytes) return MadError::kTruncated;
  MadHeader h;
  h.base_version = get8(m, 0);
  h.mgmt_class = get8(m, 1);
  h.class_version = get8(m, 2);
  h.method = get8(m, 3);
  h.status = get16(m, 4);
  h.class_specific = get16(m, 6);
  h.tid = get64(m, 8);
  h.attr_id = get16(m, 16);
  h.attr_mod = get32(m, 20);
  if (h.base_version != kMadBaseVersion) return MadError::kBadBaseVersion;
  return h;
}

namespace {
Result<MadHeader, MadError> decode_full(std::span<const std::uint8_t> m, MgmtClass cls) {
  if (m.size() < kMadBytes) return MadError::kTruncated;
  auto h = decode_mad_header(m);
  if (!h) return h;
  if (h->mgmt_class != static_cast<std::uint8_t>(cls)) return MadError::kBadClass;
  return h;
}
}  // namespace

void encode_smp(const SmpLid& s, std::span<std::uint8_t, kMadBytes> o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  MadHeader h = s.hdr;
  h.mgmt_class = static_cast<std::uint8_t>(MgmtClass::kSubnLidRouted);
  encode_mad_header(h, o.first<kMadHeaderBytes>());
  put64(o, kSmpMkey, s.m_key);
  std::memcpy(o.data() + kSmpData, s.data.data(), kSmpDataBytes);
}

void encode_smp(const SmpDr& s, std::span<std::uint8_t, kMadBytes> o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  MadHeader h = s.hdr;
  h.mgmt_class = static_cast<std::uint8_t>(MgmtClass::kSubnDirectedRoute);
  h.status = static_cast<std::uint16_t>((s.direction ? 0x8000u : 0u) | (s.status & 0x7FFFu));
  h.class_specific = static_cast<std::uint16_t>((unsigned{s.hop_ptr} << 8) | s.hop_cnt);
  encode_mad_header(h, o.first<kMadHeaderBytes>());
  put64(o, kSmpMkey, s.m_key);
  put16(o, kSmpDrSlid, s.dr_slid);
  put16(o, kSmpDrDlid, s.dr_dlid);
  std::memcpy(o.data() + kSmpData, s.data.data(), kSmpDataBytes);
  std::memcpy(o.data() + kSmpInitialPath, s.initial_path.data(), kDrPathBytes);
  std::memcpy(o.data() + kSmpReturnPath, s.return_path.data(), kDrPathBytes);
}

Result<SmpLid, MadError> decode_smp_lid(std::span<const std::uint8_t> m) {
  auto h = decode_full(m, MgmtClass::kSubnLidRouted);
  if (!h) return h.error();
  SmpLid s;
  s.hdr = *h;
  s.m_key = get64(m, kSmpMkey);
  std::memcpy(s.data.data(), m.data() + kSmpData, kSmpDataBytes);
  return s;
}

Result<SmpDr, MadError> decode_smp_dr(std::span<const std::uint8_t> m) {
  auto h = decode_full(m, MgmtClass::kSubnDirectedRoute);
  if (!h) return h.error();
  SmpDr s;
  s.hdr = *h;
  s.direction = h->status & 0x8000;
  s.status = h->status & 0x7FFF;
  s.hop_ptr = static_cast<std::uint8_t>(h->class_specific >> 8);
  s.hop_cnt = static_cast<std::uint8_t>(h->class_specific);
  // Paths hold 64 entries with index 0 unused, so at most 63 hops (14.2.1.2).
  if (s.hop_cnt > kDrHopCountMax || s.hop_ptr > s.hop_cnt + 1) return MadError::kBadHopCount;
  s.m_key = get64(m, kSmpMkey);
  s.dr_slid = get16(m, kSmpDrSlid);
  s.dr_dlid = get16(m, kSmpDrDlid);
  std::memcpy(s.data.data(), m.data() + kSmpData, kSmpDataBytes);
  std::memcpy(s.initial_path.data(), m.data() + kSmpInitialPath, kDrPathBytes);
  std::memcpy(s.return_path.data(), m.data() + kSmpReturnPath, kDrPathBytes);
  return s;
}

// ---- Directed route (14.2.2) ---------------------------------------------------------------

std::string_view to_string(DrVerdict v) {
  switch (v) {
    case DrVerdict::kForward:
      return "forward";
    case DrVerdict::kForwardByLid:
      return "forward-by-lid";
    case DrVerdict::kConsume:
      return "consume";
    case DrVerdict::kDiscard:
      return "discard";
  }
  return "?";
}

namespace {
constexpr DrDecision kDiscard{DrVerdict::kDiscard, 0};
DrDecision forward_if_valid(std::uint8_t port, std::uint8_t num_ports) {
  if (port == 0 || port > num_ports) return kDiscard;  // port 0 is the switch itself
  return {DrVerdict::kForward, port};
}
}  // namespace

DrDecision dr_send(SmpDr& s) {
  if (s.hop_cnt > kDrHopCountMax) return kDiscard;
  if (!s.direction) {
    if (s.hop_ptr != 0) return kDiscard;
    // HopCnt 0: the SMP is for the SM's own node, LID-routed part aside (14.2.2.1).
    if (s.hop_cnt == 0) {
      s.hop_ptr = 1;
      return s.dr_dlid == kPermissiveLid ? DrDecision{DrVerdict::kConsume, 0}
                                         : DrDecision{DrVerdict::kForwardByLid, 0};
    }
    s.hop_ptr = 1;
    return {DrVerdict::kForward, s.initial_path[1]};
  }
  // A response leaves through the port its request arrived on: ReturnPath[HopCnt] (14.2.2.3).
  if (s.hop_ptr != s.hop_cnt + 1) return kDiscard;
  if (s.hop_cnt == 0) {
    s.hop_ptr = 0;
    return s.dr_slid == kPermissiveLid ? DrDecision{DrVerdict::kConsume, 0}
                                       : DrDecision{DrVerdict::kForwardByLid, 0};
  }
  s.hop_ptr = s.hop_cnt;
  return {DrVerdict::kForward, s.return_path[s.hop_cnt]};
}

DrDecision dr_receive(SmpDr& s, std::uint8_t in_port, bool is_switch, std::uint8_t num_ports) {
  const unsigned hp = s.hop_ptr, hc = s.hop_cnt;
  if (hc > kDrHopCountMax) return kDiscard;
  if (!s.direction) {              // outgoing, 14.2.2.2
    if (hp == 0) return kDiscard;  // the sender must have advanced the pointer
    if (hp < hc) {
      // Only a switch can be in the middle of a path.
      if (!is_switch) return kDiscard;
      s.return_path[hp] = in_port;
      s.hop_ptr = static_cast<std::uint8_t>(hp + 1);
      return forward_if_valid(s.initial_path[hp + 1], num_ports);
    }
    if (hp == hc) {
      s.return_path[hp] = in_port;
      s.hop_ptr = static_cast<std::uint8_t>(hp + 1);
      if (s.dr_dlid == kPermissiveLid) return {DrVerdict::kConsume, 0};
      return is_switch ? DrDecision{DrVerdict::kForwardByLid, 0} : kDiscard;
    }
    // HopPtr == HopCnt + 1: arrived over the LID-routed tail.
    return hp == hc + 1 ? DrDecision{DrVerdict::kConsume, 0} : kDiscard;
  }
  // Returning, 14.2.2.4.
  if (hc != 0 && hp == hc + 1) {
    // Arrived over a LID-routed head at the switch that ends the directed part.
    if (!is_switch) return kDiscard;
    s.hop_ptr = static_cast<std::uint8_t>(hc);
    return forward_if_valid(s.return_path[hc], num_ports);
  }
  if (hp >= 2 && hp <= hc) {
    if (!is_switch) return kDiscard;
    s.hop_ptr = static_cast<std::uint8_t>(hp - 1);
    return forward_if_valid(s.return_path[hp - 1], num_ports);
  }
  if (hp == 1) {
    s.hop_ptr = 0;
    if (s.dr_slid == kPermissiveLid) return {DrVerdict::kConsume, 0};
    return is_switch ? DrDecision{DrVerdict::kForwardByLid, 0} : kDiscard;
  }
  return hp == 0 ? DrDecision{DrVerdict::kConsume, 0} : kDiscard;
}

void dr_make_response(SmpDr& s) {
  s.direction = true;
  s.hdr.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
}

// ---- SMP attributes ------------------------------------------------------------------------

void encode(const NodeInfo& v, SmpData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put8(o, 0, v.base_version);
  put8(o, 1, v.class_version);
  put8(o, 2, static_cast<unsigned>(v.node_type));
  put8(o, 3, v.num_ports);
  put64(o, 4, v.system_image_guid);
  put64(o, 12, v.node_guid);
  put64(o, 20, v.port_guid);
  put16(o, 28, v.partition_cap);
  put16(o, 30, v.device_id);
  put32(o, 32, v.revision);
  put8(o, 36, v.local_port_num);
  put24(o, 37, v.vendor_id & 0xFFFFFF);
}
NodeInfo decode_node_info(ConstSmpData i) {
  NodeInfo v;
  v.base_version = get8(i, 0);
  v.class_version = get8(i, 1);
  v.node_type = static_cast<NodeType>(get8(i, 2));
  v.num_ports = get8(i, 3);
  v.system_image_guid = get64(i, 4);
  v.node_guid = get64(i, 12);
  v.port_guid = get64(i, 20);
  v.partition_cap = get16(i, 28);
  v.device_id = get16(i, 30);
  v.revision = get32(i, 32);
  v.local_port_num = get8(i, 36);
  v.vendor_id = get24(i, 37);
  return v;
}

std::string_view NodeDescription::view() const {
  const auto end = std::find(text.begin(), text.end(), '\0');
  return {text.data(), static_cast<std::size_t>(end - text.begin())};
}
void NodeDescription::set(std::string_view s) {
  text.fill('\0');
  std::memcpy(text.data(), s.data(), std::min(s.size(), text.size()));
}
void encode(const NodeDescription& v, SmpData o) {
  std::memcpy(o.data(), v.text.data(), 64);
}
NodeDescription decode_node_description(ConstSmpData i) {
  NodeDescription v;
  std::memcpy(v.text.data(), i.data(), 64);
  return v;
}

void encode(const SwitchInfo& v, SmpData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put16(o, 0, v.linear_fdb_cap);
  put16(o, 2, v.random_fdb_cap);
  put16(o, 4, v.multicast_fdb_cap);
  put16(o, 6, v.linear_fdb_top);
  put8(o, 8, v.default_port);
  put8(o, 9, v.default_mcast_primary_port);
  put8(o, 10, v.default_mcast_not_primary_port);
  put8(o, 11,
       ((v.life_time_value & 0x1Fu) << 3) | (v.port_state_change ? 4u : 0u) |
           (v.optimized_sl2vl & 3u));
  put16(o, 12, v.lids_per_port);
  put16(o, 14, v.partition_enforcement_cap);
  put8(o, 16, (v.enforcement_flags & 0xF0u) | (v.enhanced_port0 ? 0x08u : 0u));
  put16(o, 17, v.multicast_fdb_top);
}
SwitchInfo decode_switch_info(ConstSmpData i) {
  SwitchInfo v;
  v.linear_fdb_cap = get16(i, 0);
  v.random_fdb_cap = get16(i, 2);
  v.multicast_fdb_cap = get16(i, 4);
  v.linear_fdb_top = get16(i, 6);
  v.default_port = get8(i, 8);
  v.default_mcast_primary_port = get8(i, 9);
  v.default_mcast_not_primary_port = get8(i, 10);
  const std::uint8_t b11 = get8(i, 11);
  v.life_time_value = b11 >> 3;
  v.port_state_change = b11 & 4;
  v.optimized_sl2vl = b11 & 3;
  v.lids_per_port = get16(i, 12);
  v.partition_enforcement_cap = get16(i, 14);
  v.enforcement_flags = get8(i, 16) & 0xF0;
  v.enhanced_port0 = get8(i, 16) & 0x08;
  v.multicast_fdb_top = get16(i, 17);
  return v;
}

void encode(const PortInfo& v, SmpData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  auto nib = [](unsigned hi, unsigned lo) { return ((hi & 0xFu) << 4) | (lo & 0xFu); };
  put64(o, 0, v.m_key);
  put64(o, 8, v.gid_prefix);
  put16(o, 16, v.lid);
  put16(o, 18, v.master_sm_lid);
  put32(o, 20, v.capability_mask);
  put16(o, 24, v.diag_code);
  put16(o, 26, v.m_key_lease_period);
  put8(o, 28, v.local_port_num);
  put8(o, 29, v.link_width_enabled);
  put8(o, 30, v.link_width_supported);
  put8(o, 31, v.link_width_active);
  put8(o, 32, nib(v.link_speed_supported, static_cast<unsigned>(v.port_state)));
  put8(o, 33, nib(v.port_phys_state, v.link_down_default_state));
  put8(o, 34, ((v.m_key_protect_bits & 3u) << 6) | (v.lmc & 7u));
  put8(o, 35, nib(v.link_speed_active, v.link_speed_enabled));
  put8(o, 36, nib(v.neighbor_mtu, v.master_sm_sl));
  put8(o, 37, nib(v.vl_cap, v.init_type));
  put8(o, 38, v.vl_high_limit);
  put8(o, 39, v.vl_arb_high_cap);
  put8(o, 40, v.vl_arb_low_cap);
  put8(o, 41, nib(v.init_type_reply, v.mtu_cap));
  put8(o, 42, ((v.vl_stall_count & 7u) << 5) | (v.hoq_life & 0x1Fu));
  put8(o, 43,
       ((v.operational_vls & 0xFu) << 4) | (v.partition_enforcement_inbound ? 8u : 0u) |
           (v.partition_enforcement_outbound ? 4u : 0u) | (v.filter_raw_inbound ? 2u : 0u) |
           (v.filter_raw_outbound ? 1u : 0u));
  put16(o, 44, v.m_key_violations);
  put16(o, 46, v.p_key_violations);
  put16(o, 48, v.q_key_violations);
  put8(o, 50, v.guid_cap);
  put8(o, 51, (v.client_reregister ? 0x80u : 0u) | (v.subnet_timeout & 0x1Fu));
  put8(o, 52, v.resp_time_value & 0x1Fu);
  put8(o, 53, nib(v.local_phy_errors, v.overrun_errors));
  put16(o, 54, v.max_credit_hint);
  put24(o, 57, v.link_round_trip_latency & 0xFFFFFF);
  put16(o, 60, v.capability_mask2);
}
PortInfo decode_port_info(ConstSmpData i) {
  PortInfo v;
  v.m_key = get64(i, 0);
  v.gid_prefix = get64(i, 8);
  v.lid = get16(i, 16);
  v.master_sm_lid = get16(i, 18);
  v.capability_mask = get32(i, 20);
  v.diag_code = get16(i, 24);
  v.m_key_lease_period = get16(i, 26);
  v.local_port_num = get8(i, 28);
  v.link_width_enabled = get8(i, 29);
  v.link_width_supported = get8(i, 30);
  v.link_width_active = get8(i, 31);
  v.link_speed_supported = get8(i, 32) >> 4;
  v.port_state = static_cast<PortState>(get8(i, 32) & 0xF);
  v.port_phys_state = get8(i, 33) >> 4;
  v.link_down_default_state = get8(i, 33) & 0xF;
  v.m_key_protect_bits = get8(i, 34) >> 6;
  v.lmc = get8(i, 34) & 7;
  v.link_speed_active = get8(i, 35) >> 4;
  v.link_speed_enabled = get8(i, 35) & 0xF;
  v.neighbor_mtu = get8(i, 36) >> 4;
  v.master_sm_sl = get8(i, 36) & 0xF;
  v.vl_cap = get8(i, 37) >> 4;
  v.init_type = get8(i, 37) & 0xF;
  v.vl_high_limit = get8(i, 38);
  v.vl_arb_high_cap = get8(i, 39);
  v.vl_arb_low_cap = get8(i, 40);
  v.init_type_reply = get8(i, 41) >> 4;
  v.mtu_cap = get8(i, 41) & 0xF;
  v.vl_stall_count = get8(i, 42) >> 5;
  v.hoq_life = get8(i, 42) & 0x1F;
  const std::uint8_t b43 = get8(i, 43);
  v.operational_vls = b43 >> 4;
  v.partition_enforcement_inbound = b43 & 8;
  v.partition_enforcement_outbound = b43 & 4;
  v.filter_raw_inbound = b43 & 2;
  v.filter_raw_outbound = b43 & 1;
  v.m_key_violations = get16(i, 44);
  v.p_key_violations = get16(i, 46);
  v.q_key_violations = get16(i, 48);
  v.guid_cap = get8(i, 50);
  v.client_reregister = get8(i, 51) & 0x80;
  v.subnet_timeout = get8(i, 51) & 0x1F;
  v.resp_time_value = get8(i, 52) & 0x1F;
  v.local_phy_errors = get8(i, 53) >> 4;
  v.overrun_errors = get8(i, 53) & 0xF;
  v.max_credit_hint = get16(i, 54);
  v.link_round_trip_latency = get24(i, 57);
  v.capability_mask2 = get16(i, 60);
  return v;
}

void encode(const LinearForwardingTable& v, SmpData o) {
  std::memcpy(o.data(), v.port.data(), 64);
}
LinearForwardingTable decode_lft(ConstSmpData i) {
  LinearForwardingTable v;
  std::memcpy(v.port.data(), i.data(), 64);
  return v;
}
void encode(const PKeyTable& v, SmpData o) {
  for (std::size_t k = 0; k < v.pkey.size(); ++k) put16(o, 2 * k, v.pkey[k]);
}
PKeyTable decode_pkey_table(ConstSmpData i) {
  PKeyTable v;
  for (std::size_t k = 0; k < v.pkey.size(); ++k) v.pkey[k] = get16(i, 2 * k);
  return v;
}

// ---- PMA -----------------------------------------------------------------------------------

void encode_pma(const PmaMad& m, std::span<std::uint8_t, kMadBytes> o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  MadHeader h = m.hdr;
  h.mgmt_class = static_cast<std::uint8_t>(MgmtClass::kPerfMgt);
  encode_mad_header(h, o.first<kMadHeaderBytes>());
  std::memcpy(o.data() + kPmaDataOffset, m.data.data(), kPmaDataBytes);
}
Result<PmaMad, MadError> decode_pma(std::span<const std::uint8_t> mad) {
  auto h = decode_full(mad, MgmtClass::kPerfMgt);
  if (!h) return h.error();
  PmaMad m;
  m.hdr = *h;
  std::memcpy(m.data.data(), mad.data() + kPmaDataOffset, kPmaDataBytes);
  return m;
}

void encode(const PortCounters& v, PmaData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put8(o, 1, v.port_select);
  put16(o, 2, v.counter_select);
  put16(o, 4, v.symbol_error_counter);
  put8(o, 6, v.link_error_recovery_counter);
  put8(o, 7, v.link_downed_counter);
  put16(o, 8, v.port_rcv_errors);
  put16(o, 10, v.port_rcv_remote_physical_errors);
  put16(o, 12, v.port_rcv_switch_relay_errors);
  put16(o, 14, v.port_xmit_discards);
  put8(o, 16, v.port_xmit_constraint_errors);
  put8(o, 17, v.port_rcv_constraint_errors);
  put8(o, 19,
       ((v.local_link_integrity_errors & 0xFu) << 4) | (v.excessive_buffer_overrun_errors & 0xFu));
  put16(o, 22, v.vl15_dropped);
  put32(o, 24, v.port_xmit_data);
  put32(o, 28, v.port_rcv_data);
  put32(o, 32, v.port_xmit_pkts);
  put32(o, 36, v.port_rcv_pkts);
  put32(o, 40, v.port_xmit_wait);
}
PortCounters decode_port_counters(ConstPmaData i) {
  PortCounters v;
  v.port_select = get8(i, 1);
  v.counter_select = get16(i, 2);
  v.symbol_error_counter = get16(i, 4);
  v.link_error_recovery_counter = get8(i, 6);
  v.link_downed_counter = get8(i, 7);
  v.port_rcv_errors = get16(i, 8);
  v.port_rcv_remote_physical_errors = get16(i, 10);
  v.port_rcv_switch_relay_errors = get16(i, 12);
  v.port_xmit_discards = get16(i, 14);
  v.port_xmit_constraint_errors = get8(i, 16);
  v.port_rcv_constraint_errors = get8(i, 17);
  v.local_link_integrity_errors = get8(i, 19) >> 4;
  v.excessive_buffer_overrun_errors = get8(i, 19) & 0xF;
  v.vl15_dropped = get16(i, 22);
  v.port_xmit_data = get32(i, 24);
  v.port_rcv_data = get32(i, 28);
  v.port_xmit_pkts = get32(i, 32);
  v.port_rcv_pkts = get32(i, 36);
  v.port_xmit_wait = get32(i, 40);
  return v;
}

void encode(const PortCountersExtended& v, PmaData o) {
  std::fill(o.begin(), o.end(), std::uint8_t{0});
  put8(o, 1, v.port_select);
  put16(o, 2, v.counter_select);
  put64(o, 8, v.port_xmit_data);
  put64(o, 16, v.port_rcv_data);
  put64(o, 24, v.port_xmit_pkts);
  put64(o, 32, v.port_rcv_pkts);
  put64(o, 40, v.port_unicast_xmit_pkts);
  put64(o, 48, v.port_unicast_rcv_pkts);
  put64(o, 56, v.port_multicast_xmit_pkts);
  put64(o, 64, v.port_multicast_rcv_pkts);
}
PortCountersExtended decode_port_counters_ext(ConstPmaData i) {
  PortCountersExtended v;
  v.port_select = get8(i, 1);
  v.counter_select = get16(i, 2);
  v.port_xmit_data = get64(i, 8);
  v.port_rcv_data = get64(i, 16);
  v.port_xmit_pkts = get64(i, 24);
  v.port_rcv_pkts = get64(i, 32);
  v.port_unicast_xmit_pkts = get64(i, 40);
  v.port_unicast_rcv_pkts = get64(i, 48);
  v.port_multicast_xmit_pkts = get64(i, 56);
  v.port_multicast_rcv_pkts = get64(i, 64);
  return v;
}

}  // namespace weft::wire
