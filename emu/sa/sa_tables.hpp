// emu/sa/sa_tables.hpp — what the Subnet Administrator answers from: a snapshot of the subnet as
// the SM configured it (IBA 15.1: the SA is the SM's database). One entry per node with its
// NodeInfo, NodeDescription, the PortInfo of every port (LID, LMC, state, MTU, width/speed as
// the SM set them through the SMAs) and, for switches, the LFT the SM programmed; plus the
// cabling (from the topology) so PathRecords follow the real forwarding tables hop by hop.
//
// It is built from the emu/sma NodeStates — the tables the SM wrote with its SMP Sets — so it
// works the same whether the SM ran over emu/sm's DirectFabric or over emu/fabric. Rebuild it
// after a sweep changed the subnet (SubnetAdmin::set_tables).
// Thread-safety: a plain value; concurrent const use is safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "emu/sma/node_state.hpp"
#include "emu/topo/topology.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/sa.hpp"

namespace weft::sa {

struct SaPortEnd {
  topo::NodeId node = topo::kNoNode;
  int port = 0;
};

struct SaNode {
  wire::NodeInfo info{};  // port_guid / local_port_num of port 1 (CA) or 0 (switch)
  wire::NodeDescription description{};
  std::vector<wire::PortInfo> ports;      // index = port number (0 = switch management port)
  std::vector<std::uint64_t> port_guids;  // index = port number
  std::vector<SaPortEnd> peers;           // index = port number; node kNoNode = not cabled
  std::vector<std::uint8_t> lft;          // switches: DLID -> output port
  std::vector<std::vector<std::uint16_t>> pkeys;  // index = port number: its P_KeyTable
  bool is_switch() const { return info.node_type == wire::NodeType::kSwitch; }
};

struct SaTables {
  std::vector<SaNode> nodes;  // index = topology NodeId
  // Every LID in use -> its end port (switch: port 0). LMC ranges map each LID of the range.
  std::unordered_map<std::uint16_t, SaPortEnd> by_lid;
  std::unordered_map<std::uint64_t, SaPortEnd> by_port_guid;

  std::optional<SaPortEnd> find_lid(std::uint16_t lid) const;
  // The LID of an end port (switch: its port-0 LID), 0 if none.
  std::uint16_t lid_of(SaPortEnd e) const;
};

// Builds the tables from the topology and each node's state (`state(n)`, n < node_count()).
SaTables build_tables(const topo::Topology& topo,
                      const std::function<const sma::NodeState&(topo::NodeId)>& state);

// PortInfo as the node's SMA reports it (IBA 14.2.5.6), from its NodeState.
wire::PortInfo port_info_of(const sma::NodeState& n, int port);

}  // namespace weft::sa
