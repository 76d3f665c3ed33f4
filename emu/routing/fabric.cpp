// emu/routing/fabric.cpp — building a Fabric by hand or from a Topology.
#include "emu/routing/fabric.hpp"

#include "src/base/assert.hpp"

namespace weft::routing {

NodeIdx Fabric::add_switch(std::uint64_t guid, int num_ports, std::string name) {
  WEFT_ASSERT(num_ports >= 1 && num_ports <= kPortsMax);
  FabricNode n;
  n.is_switch = true;
  n.guid = guid;
  n.name = std::move(name);
  n.ports.resize(num_ports + 1);
  n.ports[0].guid = guid;
  nodes.push_back(std::move(n));
  return static_cast<NodeIdx>(nodes.size() - 1);
}

NodeIdx Fabric::add_hca(std::uint64_t guid, int num_ports, std::string name) {
  WEFT_ASSERT(num_ports >= 1 && num_ports <= kPortsMax);
  FabricNode n;
  n.guid = guid;
  n.name = std::move(name);
  n.ports.resize(num_ports + 1);
  for (int p = 1; p <= num_ports; ++p) n.ports[p].guid = guid + p;
  nodes.push_back(std::move(n));
  return static_cast<NodeIdx>(nodes.size() - 1);
}

void Fabric::connect(NodeIdx a, int pa, NodeIdx b, int pb) {
  WEFT_ASSERT(a < nodes.size() && b < nodes.size() && a != b);
  WEFT_ASSERT(pa >= 1 && pa <= nodes[a].num_ports() && pb >= 1 && pb <= nodes[b].num_ports());
  WEFT_ASSERT(nodes[a].ports[pa].peer == kNoNode && nodes[b].ports[pb].peer == kNoNode);
  nodes[a].ports[pa].peer = b;
  nodes[a].ports[pa].peer_port = static_cast<std::uint8_t>(pb);
  nodes[b].ports[pb].peer = a;
  nodes[b].ports[pb].peer_port = static_cast<std::uint8_t>(pa);
}

Fabric Fabric::from_topology(const topo::Topology& topo) {
  Fabric f;
  f.nodes.reserve(topo.node_count());
  for (const topo::Node& n : topo.nodes()) {
    FabricNode fn;
    fn.is_switch = n.is_switch();
    fn.guid = n.guid;
    fn.name = n.description;
    fn.ports.resize(n.ports.size());
    for (std::size_t p = 0; p < n.ports.size(); ++p) fn.ports[p].guid = n.ports[p].guid;
    if (fn.is_switch) fn.ports[0].guid = n.ports[0].guid ? n.ports[0].guid : n.guid;
    f.nodes.push_back(std::move(fn));
  }
  for (const topo::Link& l : topo.links()) {
    f.nodes[l.a.node].ports[l.a.port].peer = l.b.node;
    f.nodes[l.a.node].ports[l.a.port].peer_port = static_cast<std::uint8_t>(l.b.port);
    f.nodes[l.b.node].ports[l.b.port].peer = l.a.node;
    f.nodes[l.b.node].ports[l.b.port].peer_port = static_cast<std::uint8_t>(l.a.port);
  }
  return f;
}

}  // namespace weft::routing
