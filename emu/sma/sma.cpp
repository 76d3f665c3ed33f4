// emu/sma/sma.cpp — SMP processing at one node: the directed-route rules (IBA 14.2.2, through
// wire::dr_receive / dr_send), the minimal M_Key check (14.2.4.1), and one handler per SMP
// attribute (14.2.5) over NodeState. Each handler validates the whole request before it changes
// anything, so a Set answered with "invalid field" leaves the node as it was.
// Thread-safety: none; the caller owns the NodeState.
#include "emu/sma/sma.hpp"

#include <algorithm>
#include <cstring>

#include "src/base/assert.hpp"

namespace weft::sma {
namespace {

using wire::MadMethod;
using wire::MadStatus;
using wire::SmpAttr;
using wire::SmpAttrExt;
using wire::SmpData;

constexpr std::uint16_t st(MadStatus s) {
  return static_cast<std::uint16_t>(s);
}
constexpr std::uint8_t method(MadMethod m) {
  return static_cast<std::uint8_t>(m);
}
constexpr std::uint8_t kSmpClassVersion = 1;

// One request at the SMA, after routing and M_Key checks.
struct Req {
  NodeState& n;
  std::uint8_t in_port;
  bool set;
  std::uint32_t mod;
  SmpData data;     // in: the Set data; out: the attribute as it now is
  bool hide_m_key;  // M_Key protect bits 1 and the key did not match: report M_Key 0
  std::vector<std::uint8_t>& changed;
};
using Handler = std::uint16_t (*)(Req&);

// CA: the port a port-scoped attribute addresses when the modifier does not name one.
std::uint8_t ca_port(const Req& q, std::uint32_t named) {
  return named == 0 ? q.in_port : static_cast<std::uint8_t>(named);
}

// ---- NodeDescription, NodeInfo (14.2.5.2, 14.2.5.3) -----------------------------------------
std::uint16_t node_description(Req& q) {
  wire::NodeDescription d;
  d.set(q.n.description);
  wire::encode(d, q.data);
  return 0;
}

std::uint16_t node_info(Req& q) {
  const NodeState& n = q.n;
  wire::NodeInfo v;
  v.node_type = n.type;
  v.num_ports = n.num_ports;
  v.system_image_guid = n.system_image_guid;
  v.node_guid = n.node_guid;
  v.port_guid = n.ports[n.is_switch() ? 0 : q.in_port].port_guid;
  v.partition_cap = n.partition_cap;
  v.device_id = n.device_id;
  v.revision = n.revision;
  v.local_port_num = q.in_port;  // the port that received this SMP
  v.vendor_id = n.vendor_id;
  wire::encode(v, q.data);
  return 0;
}

// ---- SwitchInfo (14.2.5.4) ------------------------------------------------------------------
void put_switch_info(const NodeState& n, SmpData out) {
  const SwitchState& s = n.sw;
  wire::SwitchInfo v;
  v.linear_fdb_cap = s.linear_fdb_cap;
  v.random_fdb_cap = s.random_fdb_cap;
  v.multicast_fdb_cap = s.multicast_fdb_cap;
  v.linear_fdb_top = s.linear_fdb_top;
  v.default_port = s.default_port;
  v.default_mcast_primary_port = s.default_mcast_primary_port;
  v.default_mcast_not_primary_port = s.default_mcast_not_primary_port;
  v.life_time_value = s.life_time_value;
  v.port_state_change = s.port_state_change;
  v.optimized_sl2vl = s.optimized_sl2vl;
  v.lids_per_port = s.lids_per_port;
  v.partition_enforcement_cap = s.partition_enforcement_cap;
  v.enforcement_flags = s.enforcement_flags;
  v.enhanced_port0 = s.enhanced_port0;
  v.multicast_fdb_top = s.multicast_fdb_top;
  wire::encode(v, out);
}

std::uint16_t switch_info(Req& q) {
  SwitchState& s = q.n.sw;
  if (q.set) {
    const wire::SwitchInfo v = wire::decode_switch_info(q.data);
    if (v.linear_fdb_top >= s.linear_fdb_cap) {
      put_switch_info(q.n, q.data);
      return st(MadStatus::kInvalidField);
    }
    s.linear_fdb_top = v.linear_fdb_top;
    s.default_port = v.default_port;
    s.default_mcast_primary_port = v.default_mcast_primary_port;
    s.default_mcast_not_primary_port = v.default_mcast_not_primary_port;
    s.life_time_value = v.life_time_value & 0x1F;
    if (v.port_state_change) s.port_state_change = false;  // written as 1: clear (14.2.5.4)
    s.multicast_fdb_top = v.multicast_fdb_top;
  }
  put_switch_info(q.n, q.data);
  return 0;
}

// ---- GUIDInfo (14.2.5.5) --------------------------------------------------------------------
std::uint16_t guid_info(Req& q) {
  PortState& p = q.n.lid_port(q.in_port);
  const std::size_t block = q.mod & 0xFF;
  if (q.mod > 0xFF || (block + 1) * kGuidBlockEntries > p.guids.size())
    return st(MadStatus::kInvalidField);
  const std::size_t base = block * kGuidBlockEntries;
  if (q.set) {
    const wire::GuidInfo v = wire::decode_guid_info(q.data);
    // Index 0 is the port GUID, read-only.
    for (std::size_t k = 0; k < kGuidBlockEntries; ++k)
      if (base + k != 0) p.guids[base + k] = v.guid[k];
  }
  wire::GuidInfo v;
  for (std::size_t k = 0; k < kGuidBlockEntries; ++k) v.guid[k] = p.guids[base + k];
  wire::encode(v, q.data);
  return 0;
}

// ---- PortInfo (14.2.5.6) --------------------------------------------------------------------
void put_port_info(const Req& q, const PortState& p, SmpData out) {
  wire::PortInfo v;
  v.m_key = q.hide_m_key ? 0 : p.m_key;
  v.gid_prefix = p.gid_prefix;
  v.lid = p.lid;
  v.master_sm_lid = p.master_sm_lid;
  v.capability_mask = p.capability_mask;
  v.diag_code = p.diag_code;
  v.m_key_lease_period = p.m_key_lease_period;
  v.local_port_num = q.in_port;  // the port that received this SMP
  v.link_width_enabled = p.link_width_enabled;
  v.link_width_supported = p.link_width_supported;
  v.link_width_active = p.link_width_active;
  v.link_speed_supported = p.link_speed_supported;
  v.port_state = p.state;
  v.port_phys_state = static_cast<std::uint8_t>(p.phys_state);
  v.link_down_default_state = p.link_down_default_state;
  v.m_key_protect_bits = p.m_key_protect_bits;
  v.lmc = p.lmc;
  v.link_speed_active = p.link_speed_active;
  v.link_speed_enabled = p.link_speed_enabled;
  v.neighbor_mtu = p.neighbor_mtu;
  v.master_sm_sl = p.master_sm_sl;
  v.vl_cap = p.vl_cap;
  v.init_type = p.init_type;
  v.vl_high_limit = p.vl_high_limit;
  v.vl_arb_high_cap = p.vl_arb_high_cap;
  v.vl_arb_low_cap = p.vl_arb_low_cap;
  v.init_type_reply = p.init_type_reply;
  v.mtu_cap = p.mtu_cap;
  v.vl_stall_count = p.vl_stall_count;
  v.hoq_life = p.hoq_life;
  v.operational_vls = p.operational_vls;
  v.partition_enforcement_inbound = p.partition_enforcement_inbound;
  v.partition_enforcement_outbound = p.partition_enforcement_outbound;
  v.filter_raw_inbound = p.filter_raw_inbound;
  v.filter_raw_outbound = p.filter_raw_outbound;
  v.m_key_violations = p.m_key_violations;
  v.p_key_violations = p.p_key_violations;
  v.q_key_violations = p.q_key_violations;
  v.guid_cap = static_cast<std::uint8_t>(std::min<std::size_t>(p.guids.size(), 255));
  v.client_reregister = p.client_reregister;
  v.subnet_timeout = p.subnet_timeout;
  v.resp_time_value = p.resp_time_value;
  v.local_phy_errors = p.local_phy_errors;
  v.overrun_errors = p.overrun_errors;
  v.max_credit_hint = p.max_credit_hint;
  v.link_round_trip_latency = p.link_round_trip_latency;
  v.capability_mask2 = p.capability_mask2;
  wire::encode(v, out);
}

// IBA 7.2 / 14.2.5.6: the SM may move a port Down at any time, Init -> Armed and Armed ->
// Active; writing the state a port already has is no change. Everything else is invalid.
bool state_transition_valid(LinkState cur, std::uint8_t want) {
  switch (want) {
    case 0:
      return true;  // NoStateChange
    case static_cast<std::uint8_t>(LinkState::kDown):
      return true;
    case static_cast<std::uint8_t>(LinkState::kInit):
      return cur == LinkState::kInit;
    case static_cast<std::uint8_t>(LinkState::kArmed):
      return cur == LinkState::kInit || cur == LinkState::kArmed;
    case static_cast<std::uint8_t>(LinkState::kActive):
      return cur == LinkState::kArmed || cur == LinkState::kActive;
    default:
      return false;
  }
}

bool port_info_valid(const PortState& p, const wire::PortInfo& v, bool addressed) {
  if (!state_transition_valid(p.state, static_cast<std::uint8_t>(v.port_state))) return false;
  // LinkWidthEnabled: 0 no change, 0xFF = all supported, else a non-empty subset (14.2.5.6).
  if (v.link_width_enabled != 0 && v.link_width_enabled != 0xFF &&
      (v.link_width_enabled & ~p.link_width_supported) != 0)
    return false;
  // LinkSpeedEnabled: 0 no change, 15 = all supported, else a subset.
  if (v.link_speed_enabled != 0 && v.link_speed_enabled != 0xF &&
      (v.link_speed_enabled & ~p.link_speed_supported) != 0)
    return false;
  // PortPhysicalState: 0 no change, 2 Polling, 3 Disabled are the only writable values.
  if (v.port_phys_state != 0 && v.port_phys_state != 2 && v.port_phys_state != 3) return false;
  if (v.link_down_default_state > 2) return false;
  if (v.neighbor_mtu == 0 || v.neighbor_mtu > p.mtu_cap) return false;
  if (v.operational_vls > p.vl_cap) return false;
  if (addressed && v.lmc > 7) return false;
  return true;
}

void apply_port_info(NodeState& n, PortState& p, const wire::PortInfo& v, bool addressed,
                     std::vector<std::uint8_t>& changed) {
  if (addressed) {  // fields that only CA ports and switch port 0 carry
    p.m_key = v.m_key;
    p.gid_prefix = v.gid_prefix;
    p.lid = v.lid;
    p.master_sm_lid = v.master_sm_lid;
    p.m_key_lease_period = v.m_key_lease_period;
    p.m_key_protect_bits = v.m_key_protect_bits;
    p.lmc = v.lmc;
    p.master_sm_sl = v.master_sm_sl;
    p.subnet_timeout = v.subnet_timeout;
    p.client_reregister = v.client_reregister;
  }
  if (v.link_width_enabled == 0xFF)
    p.link_width_enabled = p.link_width_supported;
  else if (v.link_width_enabled != 0)
    p.link_width_enabled = v.link_width_enabled;
  if (v.link_speed_enabled == 0xF)
    p.link_speed_enabled = p.link_speed_supported;
  else if (v.link_speed_enabled != 0)
    p.link_speed_enabled = v.link_speed_enabled;
  if (v.link_down_default_state != 0) p.link_down_default_state = v.link_down_default_state;
  p.neighbor_mtu = v.neighbor_mtu;
  if (v.operational_vls != 0) p.operational_vls = v.operational_vls;
  p.vl_high_limit = v.vl_high_limit;
  p.vl_stall_count = v.vl_stall_count;
  p.hoq_life = v.hoq_life;
  p.partition_enforcement_inbound = v.partition_enforcement_inbound;
  p.partition_enforcement_outbound = v.partition_enforcement_outbound;
  p.filter_raw_inbound = v.filter_raw_inbound;
  p.filter_raw_outbound = v.filter_raw_outbound;
  p.m_key_violations = v.m_key_violations;
  p.p_key_violations = v.p_key_violations;
  p.q_key_violations = v.q_key_violations;
  p.local_phy_errors = v.local_phy_errors;
  p.overrun_errors = v.overrun_errors;

  const LinkState before = p.state;
  const PhysState phys_before = p.phys_state;
  const bool is_port0 = n.is_switch() && p.port_num == 0;
  if (v.port_phys_state != 0 && !is_port0) {
    p.phys_state = static_cast<PhysState>(v.port_phys_state);
    p.state = LinkState::kDown;  // Polling/Disabled take the link down (5.6)
  }
  if (v.port_state != LinkState::kNoChange) p.state = v.port_state;
  // PortState Down on a trained link: the link leaves LinkUp and trains again (7.2); the
  // fabric takes it down and up (MadReply::state_changed_ports).
  if (!is_port0 && p.state == LinkState::kDown && before != LinkState::kDown &&
      p.phys_state == PhysState::kLinkUp)
    p.phys_state = PhysState::kPolling;
  if (phys_before == PhysState::kLinkUp && p.phys_state != PhysState::kLinkUp)
    p.counters.count_link_downed();  // the link leaves LinkUp, as when it fails
  // SwitchInfo.PortStateChange is not set here: it reports what the link state machine did on
  // its own (link_up / link_down: a link that trained or failed, including the retraining and
  // the peer's fall that this Set causes), not a state the SM wrote itself (14.2.5.4).
  if (p.state != before || p.phys_state != phys_before) changed.push_back(p.port_num);
}

std::uint16_t port_info(Req& q) {
  NodeState& n = q.n;
  std::uint8_t port;
  if (n.is_switch()) {
    if (q.mod > n.num_ports) return st(MadStatus::kInvalidField);
    port = static_cast<std::uint8_t>(q.mod);
  } else {
    if (q.mod > n.num_ports) return st(MadStatus::kInvalidField);
    port = ca_port(q, q.mod);
    // A CA port answers a Set for itself only (as ibsim; a CA's ports have separate SMAs).
    if (q.set && port != q.in_port) return st(MadStatus::kInvalidField);
  }
  PortState& p = n.ports[port];
  const bool addressed = !n.is_switch() || port == 0;
  if (q.set) {
    const wire::PortInfo v = wire::decode_port_info(q.data);
    if (!port_info_valid(p, v, addressed)) {
      put_port_info(q, p, q.data);
      return st(MadStatus::kInvalidField);
    }
    apply_port_info(n, p, v, addressed, q.changed);
  }
  put_port_info(q, p, q.data);
  return 0;
}

// ---- P_KeyTable (14.2.5.7) ------------------------------------------------------------------
std::uint16_t pkey_table(Req& q) {
  NodeState& n = q.n;
  const std::uint32_t named = q.mod >> 16;
  if (named > n.num_ports) return st(MadStatus::kInvalidField);
  const std::uint8_t port = n.is_switch() ? static_cast<std::uint8_t>(named) : ca_port(q, named);
  PortState& p = n.ports[port];
  const std::size_t block = q.mod & 0xFFFF;
  if (block * kPKeyBlockEntries >= p.pkeys.size()) return st(MadStatus::kInvalidField);
  const std::size_t base = block * kPKeyBlockEntries;
  const std::size_t count = std::min(kPKeyBlockEntries, p.pkeys.size() - base);
  if (q.set) {
    const wire::PKeyTable v = wire::decode_pkey_table(q.data);
    std::copy_n(v.pkey.begin(), count, p.pkeys.begin() + static_cast<std::ptrdiff_t>(base));
  }
  wire::PKeyTable v;
  std::copy_n(p.pkeys.begin() + static_cast<std::ptrdiff_t>(base), count, v.pkey.begin());
  wire::encode(v, q.data);
  return 0;
}

// ---- SLtoVLMappingTable (14.2.5.8) ----------------------------------------------------------
std::uint16_t sl2vl_table(Req& q) {
  NodeState& n = q.n;
  std::uint8_t in = 0, out;
  if (n.is_switch()) {
    in = static_cast<std::uint8_t>(q.mod >> 8);
    out = static_cast<std::uint8_t>(q.mod);
    if ((q.mod >> 16) != 0 || in > n.num_ports || out > n.num_ports)
      return st(MadStatus::kInvalidField);
  } else {
    if ((q.mod & 0xFF) > n.num_ports) return st(MadStatus::kInvalidField);
    out = ca_port(q, q.mod & 0xFF);
  }
  auto& table = n.ports[out].sl2vl[n.is_switch() ? in : 0];
  if (q.set) table = wire::decode_sl2vl(q.data).vl;
  wire::SlToVlTable v;
  v.vl = table;
  wire::encode(v, q.data);
  return 0;
}

// ---- VLArbitrationTable (14.2.5.9) ----------------------------------------------------------
std::uint16_t vl_arb_table(Req& q) {
  NodeState& n = q.n;
  const std::uint32_t part = q.mod >> 16, named = q.mod & 0xFFFF;
  if (named > n.num_ports || part < 1 || part > 4) return st(MadStatus::kInvalidField);
  const std::uint8_t port = n.is_switch() ? static_cast<std::uint8_t>(named) : ca_port(q, named);
  PortState& p = n.ports[port];
  // Parts 1, 2: low-priority entries 0-31, 32-63; parts 3, 4: high-priority 0-31, 32-63.
  const bool high = part >= 3;
  auto& table = high ? p.vl_arb_high : p.vl_arb_low;
  const std::size_t cap = high ? p.vl_arb_high_cap : p.vl_arb_low_cap;
  const std::size_t base = (part % 2 == 1) ? 0 : kVlArbBlockEntries;
  if (base >= cap && !(base == 0 && cap == 0)) return st(MadStatus::kInvalidField);
  const std::size_t count = std::min(kVlArbBlockEntries, cap > base ? cap - base : 0);
  if (q.set) {
    const wire::VlArbBlock v = wire::decode_vl_arb(q.data);
    for (std::size_t k = 0; k < count; ++k)
      if (v.entry[k].vl >= kVl15) return st(MadStatus::kInvalidField);  // VL15 is not arbitrated
    for (std::size_t k = 0; k < count; ++k) table[base + k] = {v.entry[k].vl, v.entry[k].weight};
  }
  wire::VlArbBlock v;
  for (std::size_t k = 0; k < count; ++k) v.entry[k] = {table[base + k].vl, table[base + k].weight};
  wire::encode(v, q.data);
  return 0;
}

// ---- LinearForwardingTable (14.2.5.10) ------------------------------------------------------
std::uint16_t lft_block(Req& q) {
  NodeState& n = q.n;
  const std::size_t base = std::size_t{q.mod} * kLftBlockEntries;
  if (q.mod >= n.lft.size() / kLftBlockEntries) return st(MadStatus::kInvalidField);
  if (q.set) {
    const wire::LinearForwardingTable v = wire::decode_lft(q.data);
    std::copy(v.port.begin(), v.port.end(), n.lft.begin() + static_cast<std::ptrdiff_t>(base));
  }
  wire::LinearForwardingTable v;
  std::copy_n(n.lft.begin() + static_cast<std::ptrdiff_t>(base), kLftBlockEntries, v.port.begin());
  wire::encode(v, q.data);
  return 0;
}

// ---- MulticastForwardingTable (14.2.5.12) ---------------------------------------------------
std::uint16_t mft_block(Req& q) {
  NodeState& n = q.n;
  const std::uint32_t position = q.mod >> 28, block = q.mod & 0x1FF;
  if ((q.mod & 0x0FFFFE00u) != 0 || position * kMftPortsPerPosition > n.num_ports ||
      (std::size_t{block} + 1) * kMftBlockEntries > n.mft.size())
    return st(MadStatus::kInvalidField);
  const std::size_t base = std::size_t{block} * kMftBlockEntries;
  if (q.set) {
    const wire::MulticastForwardingTable v = wire::decode_mft(q.data);
    for (std::size_t k = 0; k < kMftBlockEntries; ++k) n.mft[base + k][position] = v.port_mask[k];
  }
  wire::MulticastForwardingTable v;
  for (std::size_t k = 0; k < kMftBlockEntries; ++k) v.port_mask[k] = n.mft[base + k][position];
  wire::encode(v, q.data);
  return 0;
}

// The attribute table: what each attribute allows (IBA 14.2.5, Table 145).
struct AttrOps {
  std::uint16_t id;
  bool settable;
  bool switch_only;
  Handler handler;
};
constexpr std::uint16_t id(SmpAttr a) {
  return static_cast<std::uint16_t>(a);
}
constexpr std::uint16_t id(SmpAttrExt a) {
  return static_cast<std::uint16_t>(a);
}
constexpr AttrOps kAttrs[] = {
    {id(SmpAttr::kNodeDescription), false, false, node_description},
    {id(SmpAttr::kNodeInfo), false, false, node_info},
    {id(SmpAttr::kSwitchInfo), true, true, switch_info},
    {id(SmpAttrExt::kGuidInfo), true, false, guid_info},
    {id(SmpAttr::kPortInfo), true, false, port_info},
    {id(SmpAttr::kPKeyTable), true, false, pkey_table},
    {id(SmpAttrExt::kSlToVlMappingTable), true, false, sl2vl_table},
    {id(SmpAttrExt::kVlArbitrationTable), true, false, vl_arb_table},
    {id(SmpAttr::kLinearForwardingTable), true, true, lft_block},
    {id(SmpAttrExt::kMulticastForwardingTable), true, true, mft_block},
};

const AttrOps* find_attr(std::uint16_t attr) {
  for (const AttrOps& a : kAttrs)
    if (a.id == attr) return &a;
  return nullptr;
}

enum class Disposition : std::uint8_t { kAnswer, kToSm, kAbsorb, kNotRequest };

// Requests the SMA answers; responses, traps and SMInfo go to the node's SM.
Disposition classify(const wire::MadHeader& h) {
  if (h.method & wire::kMethodResponseBit) return Disposition::kNotRequest;
  if (h.method == method(MadMethod::kTrap)) return Disposition::kToSm;
  if (h.method == method(MadMethod::kTrapRepress)) return Disposition::kAbsorb;
  if (h.attr_id == id(SmpAttrExt::kSmInfo)) return Disposition::kToSm;
  return Disposition::kAnswer;
}

// Runs one request through M_Key, version, method and attribute checks. nullopt: drop (M_Key).
std::optional<std::uint16_t> answer(NodeState& n, std::uint8_t in_port, const wire::MadHeader& h,
                                    std::uint64_t m_key, SmpData data,
                                    std::vector<std::uint8_t>& changed) {
  PortState& kp = n.lid_port(in_port);
  bool hide = false;
  if (kp.m_key != 0 && m_key != kp.m_key) {
    // 14.2.4.1: protect bits 0 let any Get through, 1 lets Gets through with M_Key hidden, 2
    // and 3 fail Gets too; a Set with a wrong key always fails. Failures get no response.
    const bool get = h.method == method(MadMethod::kGet);
    if (get && kp.m_key_protect_bits == 0) {
    } else if (get && kp.m_key_protect_bits == 1) {
      hide = true;
    } else {
      PortCounters::sat_add(kp.m_key_violations, 1);
      ++n.stats.dropped_m_key;
      return std::nullopt;
    }
  }
  if (h.class_version != kSmpClassVersion) return st(MadStatus::kBadVersion);
  const bool set = h.method == method(MadMethod::kSet);
  if (!set && h.method != method(MadMethod::kGet)) return st(MadStatus::kUnsupportedMethod);
  const AttrOps* ops = find_attr(h.attr_id);
  if (ops == nullptr || (ops->switch_only && !n.is_switch()) || (set && !ops->settable))
    return st(MadStatus::kUnsupportedMethodAttr);
  Req q{n, in_port, set, h.attr_mod, data, hide, changed};
  return ops->handler(q);
}

MadReply drop(NodeState& n, DropReason why) {
  MadReply r;
  r.action = SmpAction::kDrop;
  r.reason = why;
  switch (why) {
    case DropReason::kTruncated:
    case DropReason::kBadBaseVersion:
    case DropReason::kBadClass:
    case DropReason::kBadHopCount:
      ++n.stats.dropped_bad_mad;
      break;
    case DropReason::kDrRules:
      ++n.stats.dropped_dr_rules;
      break;
    case DropReason::kNotRequest:
      ++n.stats.dropped_not_request;
      break;
    case DropReason::kMKey:  // counted where the key was checked
    case DropReason::kNone:
      break;
  }
  return r;
}

DropReason reason_of(wire::MadError e) {
  switch (e) {
    case wire::MadError::kTruncated:
      return DropReason::kTruncated;
    case wire::MadError::kBadBaseVersion:
      return DropReason::kBadBaseVersion;
    case wire::MadError::kBadClass:
      return DropReason::kBadClass;
    case wire::MadError::kBadHopCount:
      return DropReason::kBadHopCount;
  }
  return DropReason::kBadClass;
}

MadReply pass_through(std::span<const std::uint8_t> mad, SmpAction a) {
  MadReply r;
  r.action = a;
  std::copy_n(mad.begin(), wire::kMadBytes, r.mad.begin());
  return r;
}

MadReply handle_lid_routed(NodeState& n, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                           const SmpContext& ctx) {
  auto s = wire::decode_smp_lid(mad);
  if (!s) return drop(n, reason_of(s.error()));
  switch (classify(s->hdr)) {
    case Disposition::kNotRequest:
      // A GetResp reaching a node by LID is for the SM there.
      return pass_through(mad, SmpAction::kToLocalSm);
    case Disposition::kToSm:
      return pass_through(mad, SmpAction::kToLocalSm);
    case Disposition::kAbsorb:
      // TrapRepress: ends the repetition of the pending trap with this TID (13.4.9).
      if (n.trap.active && s->hdr.tid == n.trap.tid && s->hdr.attr_id == id(SmpAttrExt::kNotice)) {
        n.trap.active = false;
        ++n.stats.traps_repressed;
      }
      return MadReply{SmpAction::kAbsorbed};
    case Disposition::kAnswer:
      break;
  }
  MadReply r;
  const auto status = answer(n, in_port, s->hdr, s->m_key, s->data, r.state_changed_ports);
  if (!status) return drop(n, DropReason::kMKey);
  s->hdr.method = method(MadMethod::kGetResp);
  s->hdr.status = *status;
  wire::encode_smp(*s, r.mad);
  r.action = SmpAction::kRouteByLid;
  r.is_response = true;
  r.status = *status;
  r.out_port = in_port;
  r.dlid = ctx.lrh_slid;
  ++n.stats.smps_handled;
  return r;
}

MadReply handle_directed(NodeState& n, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                         const SmpContext& ctx) {
  auto s = wire::decode_smp_dr(mad);
  if (!s) return drop(n, reason_of(s.error()));
  const wire::DrDecision d = wire::dr_receive(*s, in_port, n.is_switch(), n.num_ports);
  MadReply r;
  switch (d.verdict) {
    case wire::DrVerdict::kDiscard:
      return drop(n, DropReason::kDrRules);
    case wire::DrVerdict::kForward:
      wire::encode_smp(*s, r.mad);
      r.action = SmpAction::kSendOut;
      r.out_port = d.out_port;
      ++n.stats.smps_forwarded;
      return r;
    case wire::DrVerdict::kForwardByLid:
      wire::encode_smp(*s, r.mad);
      r.action = SmpAction::kRouteByLid;
      r.dlid = s->direction ? s->dr_slid : s->dr_dlid;
      r.out_port = in_port;
      ++n.stats.smps_forwarded;
      return r;
    case wire::DrVerdict::kConsume:
      break;
  }
  if (s->direction) {  // a response back at the SM's end of the path
    wire::encode_smp(*s, r.mad);
    r.action = SmpAction::kToLocalSm;
    return r;
  }
  switch (classify(s->hdr)) {
    case Disposition::kNotRequest:
      return drop(n, DropReason::kNotRequest);
    case Disposition::kToSm:
      wire::encode_smp(*s, r.mad);
      r.action = SmpAction::kToLocalSm;
      return r;
    case Disposition::kAbsorb:
      r.action = SmpAction::kAbsorbed;
      return r;
    case Disposition::kAnswer:
      break;
  }
  const auto status = answer(n, in_port, s->hdr, s->m_key, s->data, r.state_changed_ports);
  if (!status) return drop(n, DropReason::kMKey);
  s->status = *status & 0x7FFF;
  wire::dr_make_response(*s);
  r.is_response = true;
  r.status = *status;
  ++n.stats.smps_handled;
  if (s->dr_dlid != wire::kPermissiveLid && s->hop_cnt > 0) {
    // Reached over a LID-routed tail: the response goes back by LID to the switch that ended
    // the directed part, which resumes the return path (14.2.2.3, HopPtr stays HopCnt + 1).
    wire::encode_smp(*s, r.mad);
    r.action = SmpAction::kRouteByLid;
    r.dlid = ctx.lrh_slid;
    r.out_port = in_port;
    return r;
  }
  const wire::DrDecision back = wire::dr_send(*s);
  wire::encode_smp(*s, r.mad);
  switch (back.verdict) {
    case wire::DrVerdict::kForward:
      r.action = SmpAction::kSendOut;
      r.out_port = back.out_port;
      return r;
    case wire::DrVerdict::kForwardByLid:
      r.action = SmpAction::kRouteByLid;
      r.dlid = s->dr_slid;
      r.out_port = in_port;
      return r;
    case wire::DrVerdict::kConsume:  // HopCnt 0: the SM is on this node
      r.action = SmpAction::kToLocalSm;
      return r;
    case wire::DrVerdict::kDiscard:
      break;
  }
  MadReply dropped = drop(n, DropReason::kDrRules);
  dropped.state_changed_ports = std::move(r.state_changed_ports);
  return dropped;
}

}  // namespace

std::string_view to_string(SmpAction a) {
  switch (a) {
    case SmpAction::kSendOut:
      return "send-out";
    case SmpAction::kRouteByLid:
      return "route-by-lid";
    case SmpAction::kToLocalSm:
      return "to-local-sm";
    case SmpAction::kAbsorbed:
      return "absorbed";
    case SmpAction::kDrop:
      return "drop";
  }
  return "?";
}

std::string_view to_string(DropReason r) {
  switch (r) {
    case DropReason::kNone:
      return "none";
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kBadBaseVersion:
      return "bad base version";
    case DropReason::kBadClass:
      return "not an SMP class";
    case DropReason::kBadHopCount:
      return "bad hop count or pointer";
    case DropReason::kDrRules:
      return "directed-route rules";
    case DropReason::kMKey:
      return "M_Key mismatch";
    case DropReason::kNotRequest:
      return "not a request";
  }
  return "?";
}

MadReply handle_smp(NodeState& node, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                    const SmpContext& ctx) {
  WEFT_ASSERT(node.ports.size() == std::size_t{node.num_ports} + 1);
  WEFT_ASSERT(in_port <= node.num_ports && (node.is_switch() || in_port >= 1));
  if (mad.size() < wire::kMadBytes) return drop(node, DropReason::kTruncated);
  auto h = wire::decode_mad_header(mad);
  if (!h) return drop(node, reason_of(h.error()));
  if (h->mgmt_class == static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted))
    return handle_lid_routed(node, in_port, mad, ctx);
  if (h->mgmt_class == static_cast<std::uint8_t>(wire::MgmtClass::kSubnDirectedRoute))
    return handle_directed(node, in_port, mad, ctx);
  return drop(node, DropReason::kBadClass);
}

namespace {
std::optional<TrapMad> build_trap_128(NodeState& node, std::uint64_t tid) {
  if (!node.is_switch()) return std::nullopt;
  const PortState& p0 = node.ports[0];
  if (p0.master_sm_lid == 0) return std::nullopt;
  wire::Notice notice;
  notice.is_generic = true;
  notice.type = wire::kNoticeTypeUrgent;
  notice.producer_type = wire::kProducerSwitch;
  notice.trap_number = wire::kTrapLinkStateChange;
  notice.issuer_lid = p0.lid;
  // Trap 128 DataDetails: LIDADDR, the LID of the switch whose port changed (14.2.5.1).
  notice.data_details[0] = static_cast<std::uint8_t>(p0.lid >> 8);
  notice.data_details[1] = static_cast<std::uint8_t>(p0.lid);
  wire::SmpLid s;
  s.hdr.mgmt_class = static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted);
  s.hdr.method = method(MadMethod::kTrap);
  s.hdr.tid = tid;
  s.hdr.attr_id = id(SmpAttrExt::kNotice);
  s.m_key = p0.m_key;
  wire::encode(notice, s.data);
  TrapMad t;
  wire::encode_smp(s, t.mad);
  t.dlid = p0.master_sm_lid;
  t.slid = p0.lid;
  t.sl = p0.master_sm_sl;
  return t;
}
}  // namespace

std::optional<TrapMad> make_trap_128(NodeState& node, std::uint64_t tid) {
  auto t = build_trap_128(node, tid);
  if (t) node.trap = PendingTrap{true, tid, 1};
  return t;
}

std::optional<TrapMad> repeat_trap(NodeState& node) {
  if (!node.trap.active) return std::nullopt;
  auto t = build_trap_128(node, node.trap.tid);
  if (t) {
    ++node.trap.sends;
    ++node.stats.traps_repeated;
  }
  return t;
}

TimeNs trap_repeat_ns(const NodeState& node) {
  const std::uint8_t st = node.lid_port(node.is_switch() ? 0 : 1).subnet_timeout & 0x1F;
  return TimeNs{4096} << st;
}

}  // namespace weft::sma
