// emu/routing/net.cpp — building the compact switch graph; BFS helpers.
#include "emu/routing/net.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::routing::detail {

Result<Net, RoutingError> build_net(const Fabric& f, const LidMap& lids) {
  Net net;
  net.fabric = &f;
  net.lids = &lids;
  if (lids.base.size() != f.nodes.size())
    return RoutingError{RoutingErrc::kLidMismatch, "the LID map was made for another fabric"};
  net.sw_of_node.assign(f.nodes.size(), kNoSwitch);
  for (NodeIdx n = 0; n < f.nodes.size(); ++n)
    if (f.nodes[n].is_switch) {
      net.sw_of_node[n] = static_cast<std::uint32_t>(net.sw_node.size());
      net.sw_node.push_back(n);
    }
  net.S = static_cast<std::uint32_t>(net.sw_node.size());
  if (net.S == 0)
    return RoutingError{RoutingErrc::kNoSwitches, "the fabric has no switch to route"};
  net.adj_off.assign(net.S + 1, 0);
  net.hca_ports_on.assign(net.S, 0);
  for (std::uint32_t s = 0; s < net.S; ++s) {
    const FabricNode& fn = f.nodes[net.sw_node[s]];
    for (int p = 1; p <= fn.num_ports(); ++p) {
      NodeIdx peer = fn.ports[p].peer;
      if (peer == kNoNode) continue;
      if (f.nodes[peer].is_switch) {
        net.adj_nbr.push_back(net.sw_of_node[peer]);
        net.adj_port.push_back(static_cast<std::uint8_t>(p));
      } else {
        ++net.hca_ports_on[s];
      }
    }
    net.adj_off[s + 1] = static_cast<std::uint32_t>(net.adj_nbr.size());
  }
  for (std::uint32_t s = 0; s < net.S; ++s) {
    Lid l = lids.base[net.sw_node[s]][0];
    if (l == kNoLid)
      return RoutingError{RoutingErrc::kLidMismatch,
                          "switch " + f.nodes[net.sw_node[s]].name + " has no LID"};
  }
  // HCA LIDs in LID order, then switch LIDs.
  std::vector<Dest> hca, swd;
  for (std::size_t lid = 1; lid < lids.owner.size(); ++lid) {
    LidOwner o = lids.owner[lid];
    if (o.node == kNoNode) continue;
    if (f.nodes[o.node].is_switch) {
      swd.push_back({static_cast<Lid>(lid), net.sw_of_node[o.node], 0, true, 0});
      continue;
    }
    const FabricPort& fp = f.nodes[o.node].ports[o.port];
    if (fp.peer == kNoNode || !f.nodes[fp.peer].is_switch) continue;  // unroutable: checker reports
    hca.push_back({static_cast<Lid>(lid), net.sw_of_node[fp.peer], fp.peer_port, false, 0});
  }
  std::vector<std::uint32_t> order(hca.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (hca[a].sw != hca[b].sw) return hca[a].sw < hca[b].sw;
    if (hca[a].port != hca[b].port) return hca[a].port < hca[b].port;
    return hca[a].lid < hca[b].lid;
  });
  for (std::uint32_t i = 0; i < order.size(); ++i) hca[order[i]].index = i;
  net.dests = std::move(hca);
  net.dests.insert(net.dests.end(), swd.begin(), swd.end());
  return net;
}

Routes empty_routes(const Net& net, Engine e) {
  Routes r;
  r.engine = e;
  r.lid_top = net.lids->lid_top();
  r.switches = net.sw_node;
  r.switch_index = net.sw_of_node;
  r.lft.assign(static_cast<std::size_t>(net.S) * r.lid_top, kDropPort);
  r.lid_switch.assign(r.lid_top, kNoSwitch);
  for (const Dest& d : net.dests) {
    r.lid_switch[d.lid] = d.sw;
    if (d.is_switch) r.lft[static_cast<std::size_t>(d.sw) * r.lid_top + d.lid] = 0;
  }
  return r;
}

std::vector<std::uint32_t> bfs_from(const Net& net, const std::vector<std::uint32_t>& sources) {
  std::vector<std::uint32_t> dist(net.S, UINT32_MAX), queue;
  queue.reserve(net.S);
  for (std::uint32_t s : sources)
    if (dist[s] == UINT32_MAX) {
      dist[s] = 0;
      queue.push_back(s);
    }
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    std::uint32_t u = queue[qi];
    for (std::uint32_t e = net.adj_off[u]; e < net.adj_off[u + 1]; ++e) {
      std::uint32_t v = net.adj_nbr[e];
      if (dist[v] == UINT32_MAX) {
        dist[v] = dist[u] + 1;
        queue.push_back(v);
      }
    }
  }
  return dist;
}

std::vector<std::uint8_t> all_pairs_hops(const Net& net) {
  const std::uint32_t S = net.S;
  std::vector<std::uint8_t> hops(static_cast<std::size_t>(S) * S, kHopsInf);
  std::vector<std::uint32_t> queue(S);
  for (std::uint32_t t = 0; t < S; ++t) {
    std::uint8_t* h = hops.data() + static_cast<std::size_t>(t) * S;
    std::size_t head = 0, tail = 0;
    h[t] = 0;
    queue[tail++] = t;
    while (head < tail) {
      std::uint32_t u = queue[head++];
      std::uint8_t next = static_cast<std::uint8_t>(h[u] + 1);
      if (next == kHopsInf) continue;  // longer than 254 hops: treated as unreachable
      for (std::uint32_t e = net.adj_off[u]; e < net.adj_off[u + 1]; ++e) {
        std::uint32_t v = net.adj_nbr[e];
        if (h[v] == kHopsInf) {
          h[v] = next;
          queue[tail++] = v;
        }
      }
    }
  }
  return hops;
}

}  // namespace weft::routing::detail
