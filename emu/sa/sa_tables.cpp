// emu/sa/sa_tables.cpp — SA tables from the SM-programmed node states. See sa_tables.hpp.
// Thread-safety: pure functions.
#include "emu/sa/sa_tables.hpp"

namespace weft::sa {

std::optional<SaPortEnd> SaTables::find_lid(std::uint16_t lid) const {
  auto it = by_lid.find(lid);
  if (it == by_lid.end()) return std::nullopt;
  return it->second;
}

std::uint16_t SaTables::lid_of(SaPortEnd e) const {
  if (e.node >= nodes.size()) return 0;
  const SaNode& n = nodes[e.node];
  const int p = n.is_switch() ? 0 : e.port;
  if (p < 0 || static_cast<std::size_t>(p) >= n.ports.size()) return 0;
  return n.ports[static_cast<std::size_t>(p)].lid;
}

wire::PortInfo port_info_of(const sma::NodeState& n, int port) {
  const sma::PortState& s = n.ports[static_cast<std::size_t>(port)];
  // A switch's external ports report the switch's LID fields from port 0 as 0 (14.2.5.6).
  wire::PortInfo p;
  p.m_key = s.m_key;
  p.gid_prefix = s.gid_prefix;
  p.lid = s.lid;
  p.master_sm_lid = s.master_sm_lid;
  p.capability_mask = s.capability_mask;
  p.diag_code = s.diag_code;
  p.m_key_lease_period = s.m_key_lease_period;
  p.local_port_num = static_cast<std::uint8_t>(port);
  p.link_width_enabled = s.link_width_enabled;
  p.link_width_supported = s.link_width_supported;
  p.link_width_active = s.link_width_active;
  p.link_speed_supported = s.link_speed_supported;
  p.port_state = s.state;
  p.port_phys_state = static_cast<std::uint8_t>(s.phys_state);
  p.link_down_default_state = s.link_down_default_state;
  p.m_key_protect_bits = s.m_key_protect_bits;
  p.lmc = s.lmc;
  p.link_speed_active = s.link_speed_active;
  p.link_speed_enabled = s.link_speed_enabled;
  p.neighbor_mtu = s.neighbor_mtu;
  p.master_sm_sl = s.master_sm_sl;
  p.vl_cap = s.vl_cap;
  p.init_type = s.init_type;
  p.vl_high_limit = s.vl_high_limit;
  p.vl_arb_high_cap = s.vl_arb_high_cap;
  p.vl_arb_low_cap = s.vl_arb_low_cap;
  p.init_type_reply = s.init_type_reply;
  p.mtu_cap = s.mtu_cap;
  p.vl_stall_count = s.vl_stall_count;
  p.hoq_life = s.hoq_life;
  p.operational_vls = s.operational_vls;
  p.partition_enforcement_inbound = s.partition_enforcement_inbound;
  p.partition_enforcement_outbound = s.partition_enforcement_outbound;
  p.filter_raw_inbound = s.filter_raw_inbound;
  p.filter_raw_outbound = s.filter_raw_outbound;
  p.m_key_violations = s.m_key_violations;
  p.p_key_violations = s.p_key_violations;
  p.q_key_violations = s.q_key_violations;
  p.guid_cap = static_cast<std::uint8_t>(s.guids.size());
  p.client_reregister = s.client_reregister;
  p.subnet_timeout = s.subnet_timeout;
  p.resp_time_value = s.resp_time_value;
  p.local_phy_errors = s.local_phy_errors;
  p.overrun_errors = s.overrun_errors;
  p.max_credit_hint = s.max_credit_hint;
  p.link_round_trip_latency = s.link_round_trip_latency;
  p.capability_mask2 = s.capability_mask2;
  return p;
}

SaTables build_tables(const topo::Topology& topo,
                      const std::function<const sma::NodeState&(topo::NodeId)>& state) {
  SaTables t;
  t.nodes.resize(topo.node_count());
  for (topo::NodeId id = 0; id < topo.node_count(); ++id) {
    const sma::NodeState& ns = state(id);
    SaNode& n = t.nodes[id];
    n.info.node_type = ns.type;
    n.info.num_ports = ns.num_ports;
    n.info.system_image_guid = ns.system_image_guid;
    n.info.node_guid = ns.node_guid;
    n.info.partition_cap = ns.partition_cap;
    n.info.device_id = ns.device_id;
    n.info.revision = ns.revision;
    n.info.vendor_id = ns.vendor_id;
    n.description.set(ns.description);
    const std::size_t nports = ns.ports.size();
    n.ports.resize(nports);
    n.port_guids.resize(nports);
    n.peers.resize(nports);
    n.pkeys.resize(nports);
    for (std::size_t p = 0; p < nports; ++p) {
      n.ports[p] = port_info_of(ns, static_cast<int>(p));
      n.port_guids[p] = ns.ports[p].port_guid;
      n.pkeys[p] = ns.ports[p].pkeys;
      if (p >= 1) {
        if (auto peer = topo.peer({id, static_cast<int>(p)})) {
          n.peers[p] = SaPortEnd{peer->node, peer->port};
        }
      }
    }
    const int first = ns.is_switch() ? 0 : 1;
    if (static_cast<std::size_t>(first) < nports) {
      n.info.port_guid = ns.ports[static_cast<std::size_t>(first)].port_guid;
      n.info.local_port_num = static_cast<std::uint8_t>(first == 0 ? 0 : 1);
    }
    if (ns.is_switch()) {
      const std::size_t top = std::min<std::size_t>(ns.lft.size(), ns.sw.linear_fdb_top + 1u);
      n.lft.assign(ns.lft.begin(), ns.lft.begin() + static_cast<std::ptrdiff_t>(top));
    }
    for (int p = first; p < (ns.is_switch() ? 1 : static_cast<int>(nports)); ++p) {
      const sma::PortState& ps = ns.ports[static_cast<std::size_t>(p)];
      t.by_port_guid[ps.port_guid] = SaPortEnd{id, p};
      if (ps.lid == 0) continue;
      const unsigned count = ns.is_switch() ? 1u : 1u << ps.lmc;
      for (unsigned k = 0; k < count; ++k) {
        t.by_lid[static_cast<std::uint16_t>(ps.lid + k)] = SaPortEnd{id, p};
      }
    }
  }
  return t;
}

}  // namespace weft::sa
