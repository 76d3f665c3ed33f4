// emu/routing/updown.cpp — up*/down* routing over a switch ranking (see updown.hpp).
#include "emu/routing/updown.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace weft::routing::detail {

namespace {
constexpr std::uint32_t kInf = UINT32_MAX;
}  // namespace

Result<Routes, RoutingError> route_updown(const Net& net, const std::vector<std::uint32_t>& rank,
                                          UpDownPolicy policy, Engine engine,
                                          std::size_t* hca_fallbacks) {
  if (hca_fallbacks) *hca_fallbacks = 0;
  Routes r = empty_routes(net, engine);
  const std::uint32_t S = net.S;
  // pos: position in (rank, GUID) order; u is above s when pos[u] < pos[s].
  std::vector<std::uint32_t> by_pos(S), pos(S);
  std::iota(by_pos.begin(), by_pos.end(), 0u);
  std::sort(by_pos.begin(), by_pos.end(), [&](std::uint32_t a, std::uint32_t b) {
    return rank[a] != rank[b] ? rank[a] < rank[b] : net.guid(a) < net.guid(b);
  });
  for (std::uint32_t i = 0; i < S; ++i) pos[by_pos[i]] = i;

  // Destinations grouped by switch: HCA LIDs (LID order, or index order for ftree), then its own.
  std::vector<std::uint32_t> doff(S + 1, 0), dlist(net.dests.size());
  for (const Dest& d : net.dests) ++doff[d.sw + 1];
  for (std::uint32_t s = 0; s < S; ++s) doff[s + 1] += doff[s];
  {
    std::vector<std::uint32_t> fill(doff.begin(), doff.end() - 1);
    for (std::uint32_t i = 0; i < net.dests.size(); ++i) dlist[fill[net.dests[i].sw]++] = i;
  }
  if (policy == UpDownPolicy::kFatTree)
    for (std::uint32_t s = 0; s < S; ++s)
      std::sort(dlist.begin() + doff[s], dlist.begin() + doff[s + 1],
                [&](std::uint32_t a, std::uint32_t b) {
                  const Dest &x = net.dests[a], &y = net.dests[b];
                  if (x.is_switch != y.is_switch) return y.is_switch;
                  return x.index < y.index;
                });

  std::vector<std::uint32_t> hca_count(static_cast<std::size_t>(S) * 256, 0),
      sw_count(hca_count.size(), 0);
  std::vector<std::uint32_t> down(S), h(S), queue(S), any;
  std::vector<std::uint8_t> cand;
  for (std::uint32_t t = 0; t < S; ++t) {
    if (doff[t] == doff[t + 1]) continue;
    // Down-only distance to t: BFS from t through links whose far end is above.
    std::fill(down.begin(), down.end(), kInf);
    std::size_t head = 0, tail = 0;
    down[t] = 0;
    queue[tail++] = t;
    while (head < tail) {
      std::uint32_t u = queue[head++];
      for (std::uint32_t e = net.adj_off[u]; e < net.adj_off[u + 1]; ++e) {
        std::uint32_t v = net.adj_nbr[e];
        if (pos[v] < pos[u] && down[v] == kInf) {
          down[v] = down[u] + 1;
          queue[tail++] = v;
        }
      }
    }
    // h: hops of the route each switch will take; up neighbours come first in pos order.
    for (std::uint32_t i = 0; i < S; ++i) {
      std::uint32_t s = by_pos[i];
      if (down[s] != kInf) {
        h[s] = down[s];
        continue;
      }
      std::uint32_t best = kInf;
      for (std::uint32_t e = net.adj_off[s]; e < net.adj_off[s + 1]; ++e) {
        std::uint32_t v = net.adj_nbr[e];
        if (pos[v] < pos[s] && h[v] != kInf) best = std::min(best, h[v] + 1);
      }
      h[s] = best;
    }
    // A switch with no up*/down* path to t falls back to a shortest path: two aggregation
    // switches of one pod (switch LIDs carry management traffic: SMPs on VL15, which has no
    // credits), or a core of a degraded tree that lost its way down to t. No HCA's packet to t
    // ever enters such a switch unless the HCA hangs off it, since up*/down* steps only lead
    // to switches with finite h; for ftree that case is a refusal, for updn the checker's
    // dependency graph judges it. Fallback steps lower the plain distance and up*/down* steps
    // keep h finite, so mixing them cannot loop.
    bool any_ready = false;
    const bool t_has_hcas = doff[t + 1] - doff[t] > 1;
    for (std::uint32_t s = 0; s < S; ++s) {
      if (s == t) {
        std::uint8_t* row = r.lft.data() + static_cast<std::size_t>(s) * r.lid_top;
        for (std::uint32_t k = doff[t]; k < doff[t + 1]; ++k)
          row[net.dests[dlist[k]].lid] = net.dests[dlist[k]].port;
        continue;
      }
      const bool updown = h[s] != kInf;
      if (!updown && policy == UpDownPolicy::kFatTree && t_has_hcas && net.hca_ports_on[s] > 0)
        return RoutingError{RoutingErrc::kNotFatTree,
                            "not a fat tree: switch " + net.fabric->nodes[net.sw_node[s]].name +
                                " cannot reach leaf " + net.fabric->nodes[net.sw_node[t]].name +
                                " through the tree (no up path to an ancestor of it)"};
      if (!updown && t_has_hcas && net.hca_ports_on[s] > 0 && hca_fallbacks) ++*hca_fallbacks;
      cand.clear();
      const bool going_down = updown && down[s] != kInf;
      if (updown) {
        for (std::uint32_t e = net.adj_off[s]; e < net.adj_off[s + 1]; ++e) {
          std::uint32_t v = net.adj_nbr[e];
          bool ok = going_down ? (pos[v] > pos[s] && down[v] + 1 == down[s])
                               : (pos[v] < pos[s] && h[v] != kInf && h[v] + 1 == h[s]);
          if (ok) cand.push_back(net.adj_port[e]);
        }
      } else {
        if (!any_ready) {
          any = bfs_from(net, {t});
          any_ready = true;
        }
        if (any[s] != UINT32_MAX)
          for (std::uint32_t e = net.adj_off[s]; e < net.adj_off[s + 1]; ++e)
            if (any[net.adj_nbr[e]] + 1 == any[s]) cand.push_back(net.adj_port[e]);
      }
      if (cand.empty()) continue;  // unreachable: stays kDropPort, the checker reports it
      std::uint8_t* row = r.lft.data() + static_cast<std::size_t>(s) * r.lid_top;
      std::uint32_t* hc = hca_count.data() + static_cast<std::size_t>(s) * 256;
      std::uint32_t* sc = sw_count.data() + static_cast<std::size_t>(s) * 256;
      for (std::uint32_t k = doff[t]; k < doff[t + 1]; ++k) {
        const Dest& d = net.dests[dlist[k]];
        std::uint32_t* count = d.is_switch ? sc : hc;
        std::uint8_t port;
        if (policy == UpDownPolicy::kFatTree && going_down) {
          port = cand[d.index % cand.size()];
        } else {
          port = cand[0];
          for (std::size_t i = 1; i < cand.size(); ++i)
            if (count[cand[i]] < count[port]) port = cand[i];
        }
        ++count[port];
        row[d.lid] = port;
      }
    }
  }
  return r;
}

Result<Routes, RoutingError> route_updn(const Net& net,
                                        const std::vector<std::uint64_t>& root_guids) {
  std::vector<std::uint32_t> roots;
  if (root_guids.empty()) {
    // The switches farthest from any HCA's switch: the top level of a tree.
    std::vector<std::uint32_t> leaves;
    for (std::uint32_t s = 0; s < net.S; ++s)
      if (net.hca_ports_on[s] > 0) leaves.push_back(s);
    if (leaves.empty()) leaves.push_back(0);
    std::vector<std::uint32_t> lvl = bfs_from(net, leaves);
    std::uint32_t top = 0;
    for (std::uint32_t v : lvl)
      if (v != UINT32_MAX) top = std::max(top, v);
    // Several roots only work when each reaches every switch going down (true of the top of a
    // fat tree). Without levels (every switch has HCAs: torus, mesh, dragonfly) roots would be
    // every switch, ordered by GUID alone, and a switch whose neighbours all sort after it would
    // have neither an up link nor a down path: take the single lowest-GUID switch instead.
    if (top == 0) {
      std::uint32_t best = 0;
      for (std::uint32_t s = 1; s < net.S; ++s)
        if (net.guid(s) < net.guid(best)) best = s;
      roots.push_back(best);
    } else {
      for (std::uint32_t s = 0; s < net.S; ++s)
        if (lvl[s] == top) roots.push_back(s);
    }
  } else {
    for (std::uint64_t g : root_guids) {
      std::uint32_t found = kNoSwitch;
      for (std::uint32_t s = 0; s < net.S; ++s)
        if (net.guid(s) == g) found = s;
      if (found == kNoSwitch) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(g));
        return RoutingError{RoutingErrc::kBadRoot,
                            std::string("root GUID ") + buf + " is not a switch of the fabric"};
      }
      roots.push_back(found);
    }
  }
  std::size_t fallbacks = 0;
  auto r = route_updown(net, bfs_from(net, roots), UpDownPolicy::kLeastLoaded, Engine::kUpDn,
                        &fallbacks);
  if (r.ok() && fallbacks > 0 && root_guids.empty() && roots.size() > 1) {
    // Several automatic roots left some HCA pair without an up*/down* path (a degraded tree:
    // a leaf that lost its links to all but some of the top switches). One root always has
    // one in a connected fabric: take the lowest-GUID top switch alone.
    std::uint32_t best = roots[0];
    for (std::uint32_t s : roots)
      if (net.guid(s) < net.guid(best)) best = s;
    return route_updown(net, bfs_from(net, {best}), UpDownPolicy::kLeastLoaded, Engine::kUpDn);
  }
  return r;
}

}  // namespace weft::routing::detail
