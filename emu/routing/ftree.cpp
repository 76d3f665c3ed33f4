// emu/routing/ftree.cpp — fat-tree routing: recognise the tree, then up*/down* with the ftree
// port policy (updown.hpp).
//
// Recognition, in the spirit of OpenSM's ftree: leaves are the switches with HCAs (level 0);
// a switch's level is its distance from the nearest leaf; every switch-to-switch link must join
// adjacent levels, every switch below the top must have an up link, and every switch must reach
// every leaf through up then down links (checked while routing). Anything else is refused with
// the first offending switch named, so the SM can fall back to another engine.
#include <algorithm>

#include "emu/routing/updown.hpp"

namespace weft::routing::detail {

Result<Routes, RoutingError> route_ftree(const Net& net) {
  const auto& nodes = net.fabric->nodes;
  auto name = [&](std::uint32_t s) { return nodes[net.sw_node[s]].name; };
  std::vector<std::uint32_t> leaves;
  for (std::uint32_t s = 0; s < net.S; ++s)
    if (net.hca_ports_on[s] > 0) leaves.push_back(s);
  if (leaves.empty())
    return RoutingError{RoutingErrc::kNotFatTree, "not a fat tree: no switch has an HCA"};
  std::vector<std::uint32_t> level = bfs_from(net, leaves);
  std::uint32_t top = 0;
  for (std::uint32_t s = 0; s < net.S; ++s) {
    if (level[s] == UINT32_MAX)
      return RoutingError{RoutingErrc::kNotFatTree,
                          "not a fat tree: switch " + name(s) + " is not connected to any leaf"};
    top = std::max(top, level[s]);
  }
  for (std::uint32_t s = 0; s < net.S; ++s) {
    bool has_up = false;
    for (std::uint32_t e = net.adj_off[s]; e < net.adj_off[s + 1]; ++e) {
      std::uint32_t v = net.adj_nbr[e];
      if (level[v] == level[s] + 1)
        has_up = true;
      else if (level[v] + 1 != level[s])
        return RoutingError{RoutingErrc::kNotFatTree,
                            "not a fat tree: switches " + name(s) + " (level " +
                                std::to_string(level[s]) + ") and " + name(v) + " (level " +
                                std::to_string(level[v]) +
                                ") are linked but not in adjacent levels"};
    }
    if (!has_up && level[s] < top)
      return RoutingError{RoutingErrc::kNotFatTree, "not a fat tree: switch " + name(s) +
                                                        " at level " + std::to_string(level[s]) +
                                                        " has no up link"};
  }
  std::vector<std::uint32_t> rank(net.S);
  for (std::uint32_t s = 0; s < net.S; ++s) rank[s] = top - level[s];
  return route_updown(net, rank, UpDownPolicy::kFatTree, Engine::kFtree);
}

}  // namespace weft::routing::detail
