// emu/sma/node_state.cpp — default construction of switch and CA node state, and the link
// up/down transitions the fabric drives (IBA 7.2: a port enters Init when its link trains and
// Down when it fails). Thread-safety: none; one owner.
#include "emu/sma/node_state.hpp"

#include "src/base/assert.hpp"

namespace weft::sma {
namespace {

PortState make_port(std::uint8_t num, std::uint64_t guid, std::size_t pkeys,
                    std::size_t sl2vl_tables) {
  PortState p;
  p.port_num = num;
  p.port_guid = guid;
  p.pkeys.assign(pkeys, 0);
  if (!p.pkeys.empty()) p.pkeys[0] = kDefaultPKey;
  p.sl2vl.assign(sl2vl_tables, std::array<std::uint8_t, kSlCount>{});
  p.guids.assign(kGuidBlockEntries, 0);
  p.guids[0] = guid;
  return p;
}

}  // namespace

std::string_view to_string(LinkState s) {
  switch (s) {
    case LinkState::kNoChange:
      return "NoChange";
    case LinkState::kDown:
      return "Down";
    case LinkState::kInit:
      return "Init";
    case LinkState::kArmed:
      return "Armed";
    case LinkState::kActive:
      return "Active";
  }
  return "?";
}

std::string_view to_string(PhysState s) {
  switch (s) {
    case PhysState::kNoStateChange:
      return "NoStateChange";
    case PhysState::kSleep:
      return "Sleep";
    case PhysState::kPolling:
      return "Polling";
    case PhysState::kDisabled:
      return "Disabled";
    case PhysState::kPortConfigurationTraining:
      return "PortConfigurationTraining";
    case PhysState::kLinkUp:
      return "LinkUp";
    case PhysState::kLinkErrorRecovery:
      return "LinkErrorRecovery";
    case PhysState::kPhyTest:
      return "PhyTest";
  }
  return "?";
}

NodeState make_switch(const NodeParams& prm) {
  NodeState n;
  n.type = NodeType::kSwitch;
  n.node_guid = prm.node_guid;
  n.system_image_guid = prm.system_image_guid ? prm.system_image_guid : prm.node_guid;
  n.description = prm.description;
  n.device_id = prm.device_id;
  n.num_ports = prm.num_ports;
  const std::size_t tables = std::size_t{prm.num_ports} + 1;
  n.ports.reserve(tables);
  for (std::size_t i = 0; i < tables; ++i) {
    const auto num = static_cast<std::uint8_t>(i);
    n.ports.push_back(make_port(num, prm.node_guid,
                                i == 0 ? n.partition_cap : n.sw.partition_enforcement_cap, tables));
  }
  // Port 0 is the switch's internal management port: always physically up (14.2.5.6).
  PortState& p0 = n.ports[0];
  p0.phys_state = PhysState::kLinkUp;
  p0.state = LinkState::kInit;
  p0.capability_mask = 0x00000048;  // IsTrapSupported | IsSLMappingSupported
  n.lft.assign(n.sw.linear_fdb_cap, kLftUnreachable);
  n.mft.assign(n.sw.multicast_fdb_cap, {});
  return n;
}

NodeState make_ca(const NodeParams& prm) {
  NodeState n;
  n.type = NodeType::kChannelAdapter;
  n.node_guid = prm.node_guid;
  n.system_image_guid = prm.system_image_guid ? prm.system_image_guid : prm.node_guid;
  n.description = prm.description;
  n.device_id = prm.device_id;
  n.num_ports = prm.num_ports;
  n.ports.reserve(std::size_t{prm.num_ports} + 1);
  n.ports.emplace_back();  // index 0 unused on a CA
  for (std::uint8_t i = 1; i <= prm.num_ports; ++i) {
    PortState p = make_port(i, prm.node_guid + i, n.partition_cap, 1);
    // IsTrapSupported | IsSLMappingSupported | IsCommunicationManagementSupported |
    // IsClientReregistrationSupported.
    p.capability_mask = 0x02010048;
    n.ports.push_back(std::move(p));
  }
  return n;
}

bool link_up(NodeState& n, std::uint8_t port) {
  WEFT_ASSERT(port >= 1 && port <= n.num_ports);
  PortState& p = n.ports[port];
  p.phys_state = PhysState::kLinkUp;
  if (p.state != LinkState::kDown) return false;
  p.state = LinkState::kInit;
  if (n.is_switch()) n.sw.port_state_change = true;
  return true;
}

bool link_down(NodeState& n, std::uint8_t port) {
  WEFT_ASSERT(port >= 1 && port <= n.num_ports);
  PortState& p = n.ports[port];
  const bool was_up = p.phys_state == PhysState::kLinkUp;
  if (p.phys_state != PhysState::kDisabled) p.phys_state = PhysState::kPolling;  // SM's choice
  if (was_up) p.counters.count_link_downed();
  if (p.state == LinkState::kDown) return false;
  p.state = LinkState::kDown;
  if (n.is_switch()) n.sw.port_state_change = true;
  return true;
}

}  // namespace weft::sma
