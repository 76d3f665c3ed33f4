// emu/routing/checker.cpp — hop-by-hop route validation and the channel dependency graph.
#include "emu/routing/checker.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::routing {

namespace {

constexpr std::size_t kEdgesCompactAt = std::size_t{1} << 20;  // SL-aware CDG edge buffer
constexpr std::uint32_t kUnknown = UINT32_MAX, kBusy = UINT32_MAX - 1, kDead = UINT32_MAX - 2;

struct View {
  const Fabric& f;
  const LidMap& lids;
  const Routes& r;
  std::vector<std::uint32_t> sw_of;  // node -> switch index, recomputed from the fabric
  std::vector<NodeIdx> sw_node;
  std::vector<std::uint32_t> port_base;  // switch -> first channel id (ports 0..n)
  std::uint8_t lft(std::uint32_t s, std::size_t lid) const {
    return r.lft[static_cast<std::size_t>(s) * r.lid_top + lid];
  }
};

// A directed graph in CSR form over channels; returns true and one cycle if it has one.
bool find_cycle(std::uint32_t n, const std::vector<std::uint32_t>& off,
                const std::vector<std::uint32_t>& succ, std::vector<std::uint32_t>* cycle) {
  std::vector<std::uint32_t> indeg(n, 0), queue;
  for (std::uint32_t v : succ) ++indeg[v];
  for (std::uint32_t v = 0; v < n; ++v)
    if (indeg[v] == 0) queue.push_back(v);
  for (std::size_t qi = 0; qi < queue.size(); ++qi)
    for (std::uint32_t e = off[queue[qi]]; e < off[queue[qi] + 1]; ++e)
      if (--indeg[succ[e]] == 0) queue.push_back(succ[e]);
  if (queue.size() == n) return false;
  // Iterative DFS over the nodes Kahn could not remove; a grey successor closes a cycle.
  std::vector<std::uint8_t> color(n, 0);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> stack;  // node, next edge
  for (std::uint32_t root = 0; root < n; ++root) {
    if (indeg[root] == 0 || color[root]) continue;
    stack.push_back({root, off[root]});
    color[root] = 1;
    while (!stack.empty()) {
      auto& [v, e] = stack.back();
      if (e == off[v + 1]) {
        color[v] = 2;
        stack.pop_back();
        continue;
      }
      std::uint32_t w = succ[e++];
      if (color[w] == 1) {
        auto it =
            std::find_if(stack.begin(), stack.end(), [&](const auto& p) { return p.first == w; });
        for (; it != stack.end(); ++it) cycle->push_back(it->first);
        return true;
      }
      if (color[w] == 0 && indeg[w] != 0) {
        color[w] = 1;
        stack.push_back({w, off[w]});
      }
    }
  }
  WEFT_ASSERT_MSG(false, "Kahn left nodes but DFS found no cycle");
  return true;
}

}  // namespace

CheckReport check_routes(const Fabric& f, const LidMap& lids, const Routes& r,
                         const CheckOptions& opt) {
  CheckReport rep;
  View v{f, lids, r, {}, {}, {}};
  v.sw_of.assign(f.nodes.size(), kUnknown);
  for (NodeIdx n = 0; n < f.nodes.size(); ++n)
    if (f.nodes[n].is_switch) {
      v.sw_of[n] = static_cast<std::uint32_t>(v.sw_node.size());
      v.sw_node.push_back(n);
    }
  const std::uint32_t S = static_cast<std::uint32_t>(v.sw_node.size());
  if (r.switches != v.sw_node || r.lid_top != lids.lid_top()) {
    rep.problems.push_back("the routes were computed for another fabric or LID map");
    return rep;
  }
  v.port_base.resize(S + 1, 0);
  for (std::uint32_t s = 0; s < S; ++s)
    v.port_base[s + 1] = v.port_base[s] + f.nodes[v.sw_node[s]].num_ports() + 1;
  const int hops_limit = opt.hops_max > 0 ? opt.hops_max : static_cast<int>(S) + 1;

  // Sources: HCA ports per switch (node, port, switch port).
  struct Src {
    NodeIdx node;
    std::uint8_t port;
    std::uint8_t sw_port;
  };
  std::vector<std::vector<Src>> hca_src(S);
  std::size_t hca_ports = 0;
  for (NodeIdx n = 0; n < f.nodes.size(); ++n) {
    if (f.nodes[n].is_switch) continue;
    for (int p = 1; p <= f.nodes[n].num_ports(); ++p) {
      const FabricPort& fp = f.nodes[n].ports[p];
      if (fp.peer == kNoNode) continue;
      ++hca_ports;
      if (f.nodes[fp.peer].is_switch)
        hca_src[v.sw_of[fp.peer]].push_back({n, static_cast<std::uint8_t>(p), fp.peer_port});
    }
  }

  const bool vl_mode = !r.sl2vl.empty() || !r.sl_by_switch.empty();
  std::vector<std::uint64_t> succ_bits;  // dest-based CDG: 4 words per channel (ports 0..255)
  if (opt.credit_loops && !vl_mode)
    succ_bits.assign(static_cast<std::size_t>(v.port_base[S]) * 4, 0);

  std::vector<std::uint32_t> dist(S), stack;
  std::vector<bool> used(S, false);
  std::vector<bool> hca_bad(f.nodes.size(), false);
  double hop_sum = 0;
  std::size_t hop_n = 0;
  for (std::size_t lid = 1; lid < r.lid_top; ++lid) {
    const LidOwner own = lids.owner[lid];
    if (own.node == kNoNode) continue;
    const bool dst_switch = f.nodes[own.node].is_switch;
    std::fill(dist.begin(), dist.end(), kUnknown);
    for (std::uint32_t s0 = 0; s0 < S; ++s0) {
      if (dist[s0] != kUnknown) continue;
      stack.clear();
      std::uint32_t x = s0, result = kDead;
      for (;;) {
        if (dist[x] == kBusy) {
          ++rep.loops;
          result = kDead;
          break;
        }
        if (dist[x] != kUnknown) {
          result = dist[x] == kDead ? kDead : dist[x] + 1;
          break;
        }
        dist[x] = kBusy;
        stack.push_back(x);
        const std::uint8_t p = v.lft(x, lid);
        const FabricNode& xn = f.nodes[v.sw_node[x]];
        if (p == kDropPort || p > xn.num_ports()) {
          result = kDead;
          break;
        }
        if (p == 0) {
          result = dst_switch && own.node == v.sw_node[x] ? 0 : kDead;
          break;
        }
        const FabricPort& fp = xn.ports[p];
        if (fp.peer == kNoNode) {
          result = kDead;
          break;
        }
        if (!f.nodes[fp.peer].is_switch) {
          result = (!dst_switch && fp.peer == own.node && fp.peer_port == own.port) ? 1 : kDead;
          break;
        }
        x = v.sw_of[fp.peer];
      }
      // Unwind: the last pushed switch gets `result`, each earlier one one more.
      for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
        if (it != stack.rbegin() && result != kDead) ++result;
        dist[*it] = result;
      }
    }
    for (std::uint32_t s = 0; s < S; ++s) {
      if (dist[s] == kDead) ++rep.switch_unreachable;
      for (const Src& src : hca_src[s]) {
        if (dst_switch) continue;
        if (src.node == own.node && src.port == own.port) continue;
        ++rep.hca_pairs;
        if (dist[s] == kDead) {
          ++rep.unreachable_pairs;
          hca_bad[own.node] = true;
          if (rep.unreachable_examples.size() < opt.examples_max)
            rep.unreachable_examples.push_back(
                {src.node, src.port, own.node, own.port, static_cast<Lid>(lid)});
          continue;
        }
        const int hops = static_cast<int>(dist[s]) + 1;
        if (hops > hops_limit) ++rep.too_long;
        rep.hops_max = std::max(rep.hops_max, hops);
        hop_sum += hops;
        ++hop_n;
      }
    }
    // Destination-based dependency edges: x --p--> y --q--> z, both links between switches.
    // Only HCA-to-HCA routes: mark the switches some HCA's packet to this LID passes.
    if (!succ_bits.empty() && !dst_switch) {
      std::fill(used.begin(), used.end(), false);
      for (std::uint32_t s = 0; s < S; ++s) {
        if (hca_src[s].empty()) continue;
        for (std::uint32_t x = s; !used[x] && dist[x] != kDead && dist[x] > 1;) {
          used[x] = true;
          x = v.sw_of[f.nodes[v.sw_node[x]].ports[v.lft(x, lid)].peer];
        }
      }
      for (std::uint32_t x = 0; x < S; ++x) {
        if (!used[x]) continue;
        const std::uint8_t p = v.lft(x, lid);
        const FabricPort& fp = f.nodes[v.sw_node[x]].ports[p];
        if (!f.nodes[fp.peer].is_switch) continue;
        const std::uint32_t y = v.sw_of[fp.peer];
        const std::uint8_t q = v.lft(y, lid);
        if (q == 0) continue;
        const FabricPort& fq = f.nodes[v.sw_node[y]].ports[q];
        if (!f.nodes[fq.peer].is_switch) continue;
        succ_bits[(static_cast<std::size_t>(v.port_base[x]) + p) * 4 + q / 64] |= 1ull << (q % 64);
      }
    }
  }
  for (NodeIdx n = 0; n < f.nodes.size(); ++n)
    if (hca_bad[n]) rep.unreachable_hcas.push_back(n);
  rep.hops_avg = hop_n ? hop_sum / static_cast<double>(hop_n) : 0.0;
  (void)hca_ports;
  if (rep.unreachable_pairs)
    rep.problems.push_back(
        std::to_string(rep.unreachable_pairs) + " of " + std::to_string(rep.hca_pairs) +
        " HCA pairs are not delivered; " + std::to_string(rep.unreachable_hcas.size()) +
        " HCAs cannot be reached by everyone (first: " + f.nodes[rep.unreachable_hcas[0]].name +
        ")");
  if (rep.switch_unreachable)
    rep.problems.push_back(std::to_string(rep.switch_unreachable) +
                           " (switch, LID) routes are not delivered");
  if (rep.loops) rep.problems.push_back(std::to_string(rep.loops) + " forwarding loops");
  if (rep.too_long)
    rep.problems.push_back(std::to_string(rep.too_long) + " paths longer than " +
                           std::to_string(hops_limit) + " hops");
  if (!opt.credit_loops) return rep;

  // Channel dependency graph in CSR form.
  std::uint32_t channels = 0;
  std::vector<std::uint32_t> off, succ;
  auto channel_name = [&](std::uint32_t c, int vls) {
    const std::uint32_t vl = c % vls, id = c / vls;
    const std::uint32_t s =
        static_cast<std::uint32_t>(std::upper_bound(v.port_base.begin(), v.port_base.end(), id) -
                                   v.port_base.begin()) -
        1;
    const int p = static_cast<int>(id - v.port_base[s]);
    const FabricPort& fp = f.nodes[v.sw_node[s]].ports[p];
    return f.nodes[v.sw_node[s]].name + ":" + std::to_string(p) + " -> " + f.nodes[fp.peer].name +
           ":" + std::to_string(fp.peer_port) + " VL " + std::to_string(vl);
  };
  int vls = 1;
  if (!vl_mode) {
    channels = v.port_base[S];
    off.assign(channels + 1, 0);
    for (std::uint32_t x = 0; x < S; ++x) {
      const FabricNode& xn = f.nodes[v.sw_node[x]];
      for (int p = 0; p <= xn.num_ports(); ++p) {
        const std::uint32_t c = v.port_base[x] + p;
        off[c] = static_cast<std::uint32_t>(succ.size());
        const std::uint64_t* bits = &succ_bits[static_cast<std::size_t>(c) * 4];
        if (p == 0 || !(bits[0] | bits[1] | bits[2] | bits[3])) continue;
        const std::uint32_t y = v.sw_of[xn.ports[p].peer];
        for (int q = 0; q < 256; ++q)
          if (bits[q / 64] >> (q % 64) & 1) succ.push_back(v.port_base[y] + q);
      }
    }
    off[channels] = static_cast<std::uint32_t>(succ.size());
  } else {
    vls = std::max(1, r.vls);
    channels = v.port_base[S] * vls;
    std::vector<std::uint64_t> edges;  // from << 32 | to
    // Every HCA port (path SL from its LID) to every HCA LID.
    for (std::uint32_t s0 = 0; s0 < S; ++s0) {
      std::vector<std::pair<Lid, std::uint8_t>> sources;
      for (const Src& src : hca_src[s0])
        sources.push_back({lids.base[src.node][src.port], src.sw_port});
      for (auto [slid, in0] : sources) {
        if (slid == kNoLid) continue;
        for (std::size_t lid = 1; lid < r.lid_top; ++lid) {
          if (lids.owner[lid].node == kNoNode || f.nodes[lids.owner[lid].node].is_switch) continue;
          const int sl = r.path_sl(slid, static_cast<Lid>(lid));
          std::uint32_t x = s0, prev = UINT32_MAX;
          int in = in0;
          for (int hop = 0; hop <= hops_limit; ++hop) {
            const std::uint8_t p = v.lft(x, lid);
            const FabricNode& xn = f.nodes[v.sw_node[x]];
            if (p == 0 || p == kDropPort || p > xn.num_ports() || xn.ports[p].peer == kNoNode)
              break;
            const FabricPort& fp = xn.ports[p];
            if (!f.nodes[fp.peer].is_switch) break;
            const std::uint32_t c = (v.port_base[x] + p) * vls + r.vl(x, xn.num_ports(), in, p, sl);
            if (prev != UINT32_MAX) edges.push_back(static_cast<std::uint64_t>(prev) << 32 | c);
            if (edges.size() >= kEdgesCompactAt && edges.size() == edges.capacity()) {
              // Most (source, destination) walks repeat known edges: compact before growing.
              std::sort(edges.begin(), edges.end());
              edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
            }
            prev = c;
            in = fp.peer_port;
            x = v.sw_of[fp.peer];
          }
        }
      }
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    off.assign(channels + 1, 0);
    for (std::uint64_t e : edges) ++off[(e >> 32) + 1];
    for (std::uint32_t c = 0; c < channels; ++c) off[c + 1] += off[c];
    succ.resize(edges.size());
    for (std::size_t i = 0; i < edges.size(); ++i)
      succ[i] = static_cast<std::uint32_t>(edges[i]);  // sorted by from
  }
  rep.cdg_checked = true;
  rep.cdg_channels = channels;
  rep.cdg_edges = succ.size();
  std::vector<std::uint32_t> cycle;
  if (find_cycle(channels, off, succ, &cycle)) {
    rep.credit_loop = true;
    for (std::uint32_t c : cycle) rep.credit_cycle.push_back(channel_name(c, vls));
    rep.problems.push_back("credit loop: the channel dependency graph has a cycle of " +
                           std::to_string(cycle.size()) + " channels through " +
                           rep.credit_cycle[0]);
  }
  return rep;
}

}  // namespace weft::routing
