// emu/routing/fabric.hpp — the graph a routing engine reads: switches and HCAs, their ports,
// and which port each port is cabled to.
//
// What it is: the adapter between whoever knows the fabric (a weft::topo::Topology from a
// generator or a net file, or the subnet manager's discovery through SMPs) and the routing
// engines. The SM fills one Fabric from its NodeInfo/PortInfo walk; tests and benchmarks build
// one with from_topology(). Numbering follows the IBA: switch ports 1..n plus management port 0
// (which carries the switch's port GUID and LID, IBA 14.2.1); HCA ports 1..n each with a GUID.
//
// Thread-safety: a plain value; concurrent const use is safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emu/topo/topology.hpp"

namespace weft::routing {

using NodeIdx = std::uint32_t;
inline constexpr NodeIdx kNoNode = UINT32_MAX;
inline constexpr int kPortsMax = 254;  // IBA: switch ports 0..254; 255 is the LFT drop value

struct FabricPort {
  NodeIdx peer = kNoNode;  // kNoNode = not cabled (or the switch management port 0)
  std::uint8_t peer_port = 0;
  std::uint64_t guid = 0;  // HCA ports: port GUID; switch: on port 0 only
};

struct FabricNode {
  bool is_switch = false;
  std::uint64_t guid = 0;
  std::string name;
  std::vector<FabricPort> ports;  // index = port number; size num_ports + 1
  int num_ports() const { return static_cast<int>(ports.size()) - 1; }
};

struct Fabric {
  std::vector<FabricNode> nodes;

  NodeIdx add_switch(std::uint64_t guid, int num_ports, std::string name = {});
  // HCA port p gets GUID guid + p.
  NodeIdx add_hca(std::uint64_t guid, int num_ports, std::string name = {});
  void connect(NodeIdx a, int pa, NodeIdx b, int pb);  // asserts both ports exist and are free
  // Node index i = topology NodeId i, so reports name the same nodes.
  static Fabric from_topology(const topo::Topology& topo);
};

}  // namespace weft::routing
