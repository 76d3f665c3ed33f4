// emu/routing/dor.cpp — dimension-order routing on a mesh or torus, with dateline VLs.
//
// Coordinates are recovered from the graph using emu/topo's port convention (generators.hpp
// torus()): ports 1..H to HCAs, then port H+2d+1 toward +1 and H+2d+2 toward -1 in dimension d.
// H is the highest port cabled to an HCA. Walking the + ports from one switch finds each ring's
// size and whether it wraps; a breadth-first walk then gives every switch its coordinates, and
// any inconsistency (a link that is not +-1 in one dimension, a repeated coordinate) is
// reported as kNotTorus.
//
// Deadlock freedom (see routes.hpp): path SL bit d = "this path's segment in dimension d crosses
// the wrap link"; a packet rides VL 0 until it has crossed, then VL 1. Dimension order makes
// dependencies between dimensions one-way (X before Y before Z).
#include <algorithm>

#include "emu/routing/net.hpp"

namespace weft::routing::detail {

namespace {

constexpr int kDimsMax = 4;  // one SL bit per dimension, 4 SL bits

RoutingError not_torus(std::string why) {
  return {RoutingErrc::kNotTorus, "not a mesh or torus: " + std::move(why)};
}

}  // namespace

Result<Routes, RoutingError> route_dor(const Net& net) {
  const auto& nodes = net.fabric->nodes;
  const std::uint32_t S = net.S;
  auto name = [&](std::uint32_t s) { return nodes[net.sw_node[s]].name; };
  const int radix = net.num_ports(0);
  int hosts = 0;
  for (std::uint32_t s = 0; s < S; ++s) {
    if (net.num_ports(s) != radix)
      return not_torus("switches " + name(0) + " and " + name(s) + " differ in port count");
    const FabricNode& fn = nodes[net.sw_node[s]];
    for (int p = 1; p <= fn.num_ports(); ++p)
      if (fn.ports[p].peer != kNoNode && !nodes[fn.ports[p].peer].is_switch)
        hosts = std::max(hosts, p);
  }
  if ((radix - hosts) % 2 != 0 || radix == hosts)
    return not_torus("the ports after the HCA ports do not pair into dimensions");
  const int nd = (radix - hosts) / 2;
  if (nd > kDimsMax)
    return not_torus(std::to_string(nd) + " dimensions (at most 4: one SL bit each)");
  // Neighbour of s through port p, kNoSwitch if none or not a switch.
  auto step = [&](std::uint32_t s, int p) -> std::uint32_t {
    NodeIdx peer = nodes[net.sw_node[s]].ports[p].peer;
    return peer == kNoNode ? kNoSwitch : net.sw_of_node[peer];
  };
  auto plus = [&](int d) { return hosts + 2 * d + 1; };
  auto minus = [&](int d) { return hosts + 2 * d + 2; };
  // Ring sizes and wrap, and a corner to start from (mesh dimensions: walk to the - end).
  std::vector<int> size(nd);
  std::vector<bool> wrap(nd);
  std::uint32_t origin = 0;
  for (int d = 0; d < nd; ++d) {
    int n = 1;
    std::uint32_t cur = step(origin, plus(d));
    while (cur != kNoSwitch && cur != origin && n <= static_cast<int>(S)) {
      ++n;
      cur = step(cur, plus(d));
    }
    if (cur == origin) {
      size[d] = n;
      wrap[d] = n > 2;
      continue;
    }
    std::uint32_t back = origin;
    for (std::uint32_t prev = step(back, minus(d)); prev != kNoSwitch && n <= static_cast<int>(S);
         prev = step(back, minus(d))) {
      back = prev;
      ++n;
    }
    size[d] = n;
    wrap[d] = false;
    origin = back;
  }
  std::uint64_t total = 1;
  for (int d = 0; d < nd; ++d) total *= static_cast<std::uint64_t>(size[d]);
  if (total != S)
    return not_torus("ring sizes give " + std::to_string(total) + " switches, the fabric has " +
                     std::to_string(S));
  // Coordinates by breadth-first walk from the origin.
  std::vector<std::array<int, kDimsMax>> coord(S);
  std::vector<bool> seen(S, false);
  std::vector<std::uint32_t> queue{origin}, at(S, kNoSwitch);
  seen[origin] = true;
  coord[origin].fill(0);
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    std::uint32_t s = queue[qi];
    for (int d = 0; d < nd; ++d)
      for (int dir : {+1, -1}) {
        std::uint32_t v = step(s, dir > 0 ? plus(d) : minus(d));
        if (v == kNoSwitch) continue;
        auto c = coord[s];
        c[d] += dir;
        if (wrap[d]) c[d] = (c[d] + size[d]) % size[d];
        if (c[d] < 0 || c[d] >= size[d])
          return not_torus("switch " + name(v) + " lies outside the mesh");
        if (!seen[v]) {
          seen[v] = true;
          coord[v] = c;
          queue.push_back(v);
        } else if (coord[v] != c) {
          return not_torus("switch " + name(v) + " is reached at two different coordinates");
        }
      }
  }
  for (std::uint32_t s = 0; s < S; ++s) {
    if (!seen[s]) return not_torus("switch " + name(s) + " is not connected to the grid");
    std::uint64_t idx = 0;
    for (int d = 0; d < nd; ++d) idx = idx * size[d] + coord[s][d];
    if (at[idx] != kNoSwitch)
      return not_torus("switches " + name(at[idx]) + " and " + name(s) + " share coordinates");
    at[idx] = s;
  }
  Routes r = empty_routes(net, Engine::kDor);
  bool any_wrap = std::find(wrap.begin(), wrap.end(), true) != wrap.end();
  r.vls = any_wrap ? 2 : 1;
  r.sl_by_switch.assign(static_cast<std::size_t>(S) * S, 0);
  std::vector<std::uint8_t> port_to(S);
  for (std::uint32_t s = 0; s < S; ++s) {
    for (std::uint32_t t = 0; t < S; ++t) {
      std::uint8_t sl = 0;
      port_to[t] = 0;
      for (int d = 0; d < nd; ++d) {
        const int cs = coord[s][d], ct = coord[t][d], n = size[d];
        if (cs == ct) continue;
        bool go_plus;
        bool crosses = false;
        if (wrap[d]) {
          const int fwd = ((ct - cs) % n + n) % n;
          go_plus = fwd <= n - fwd;
          crosses = go_plus ? ct < cs : ct > cs;
        } else {
          go_plus = ct > cs;
        }
        if (crosses) sl |= static_cast<std::uint8_t>(1u << d);
        if (port_to[t] == 0) port_to[t] = static_cast<std::uint8_t>(go_plus ? plus(d) : minus(d));
      }
      r.sl_by_switch[static_cast<std::size_t>(s) * S + t] = sl;
    }
    std::uint8_t* row = r.lft.data() + static_cast<std::size_t>(s) * r.lid_top;
    for (const Dest& d : net.dests) row[d.lid] = d.sw == s ? d.port : port_to[d.sw];
  }
  if (any_wrap) {
    r.sl2vl.resize(S);
    const int np = radix + 1;
    for (std::uint32_t s = 0; s < S; ++s) {
      r.sl2vl[s].assign(static_cast<std::size_t>(np) * np, Sl2Vl{});
      for (int in = 0; in < np; ++in)
        for (int out = 1; out < np; ++out) {
          if (out <= hosts) continue;
          const int d = (out - hosts - 1) / 2;
          if (!wrap[d]) continue;
          // Has a crossing path already crossed when it leaves here? Segments are minimal, so
          // before the dateline a + path is in the upper half of the ring and after it in the
          // lower half (the reverse for -): the switch's own coordinate decides.
          const bool plus_port = (out - hosts - 1) % 2 == 0;
          const int y = coord[s][d], half = size[d] / 2;
          const bool crossed = plus_port ? y < half : y >= half;
          Sl2Vl& m = r.sl2vl[s][static_cast<std::size_t>(in) * np + out];
          for (int sl = 0; sl < kSlCount; ++sl)
            m[sl] = static_cast<std::uint8_t>(crossed && ((sl >> d) & 1));
        }
    }
  }
  return r;
}

}  // namespace weft::routing::detail
