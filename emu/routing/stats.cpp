// emu/routing/stats.cpp — per-link destination counts.
#include "emu/routing/stats.hpp"

#include <algorithm>

namespace weft::routing {

namespace {

void add(LinkLoad* l, std::uint32_t v) {
  if (l->links == 0) l->min = l->max = v;
  l->min = std::min(l->min, v);
  l->max = std::max(l->max, v);
  l->avg += v;
  ++l->links;
}

}  // namespace

RoutingStats routing_stats(const Fabric& f, const LidMap& lids, const Routes& r) {
  RoutingStats st;
  st.table_bytes = r.memory_bytes();
  const std::size_t S = r.switches.size();
  // Levels: BFS from the switches that have an HCA.
  std::vector<std::uint32_t> level(S, UINT32_MAX), queue;
  for (std::uint32_t s = 0; s < S; ++s) {
    const FabricNode& n = f.nodes[r.switches[s]];
    for (int p = 1; p <= n.num_ports(); ++p)
      if (n.ports[p].peer != kNoNode && !f.nodes[n.ports[p].peer].is_switch && level[s] != 0) {
        level[s] = 0;
        queue.push_back(s);
      }
  }
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    const FabricNode& n = f.nodes[r.switches[queue[qi]]];
    for (int p = 1; p <= n.num_ports(); ++p) {
      NodeIdx peer = n.ports[p].peer;
      if (peer == kNoNode || !f.nodes[peer].is_switch) continue;
      std::uint32_t v = r.switch_index[peer];
      if (level[v] == UINT32_MAX) {
        level[v] = level[queue[qi]] + 1;
        queue.push_back(v);
      }
    }
  }
  std::vector<std::uint32_t> count(256);
  for (std::uint32_t s = 0; s < S; ++s) {
    std::fill(count.begin(), count.end(), 0u);
    auto row = r.lft_of(s);
    for (std::size_t lid = 1; lid < r.lid_top; ++lid) {
      LidOwner o = lids.owner[lid];
      if (o.node == kNoNode || f.nodes[o.node].is_switch || row[lid] == kDropPort) continue;
      ++count[row[lid]];
    }
    const FabricNode& n = f.nodes[r.switches[s]];
    std::uint32_t up_min = UINT32_MAX, up_max = 0;
    for (int p = 1; p <= n.num_ports(); ++p) {
      NodeIdx peer = n.ports[p].peer;
      if (peer == kNoNode || !f.nodes[peer].is_switch) continue;
      add(&st.switch_links, count[p]);
      std::uint32_t v = r.switch_index[peer];
      if (level[s] != UINT32_MAX && level[v] == level[s] + 1) {
        add(&st.up_links, count[p]);
        up_min = std::min(up_min, count[p]);
        up_max = std::max(up_max, count[p]);
      }
    }
    if (up_min != UINT32_MAX) st.up_spread_max = std::max(st.up_spread_max, up_max - up_min);
  }
  for (LinkLoad* l : {&st.switch_links, &st.up_links})
    if (l->links) l->avg /= static_cast<double>(l->links);
  return st;
}

}  // namespace weft::routing
