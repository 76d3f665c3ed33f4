// emu/routing/minhop.cpp — OpenSM's minhop: shortest hops, equal-cost ports balanced.
//
// For each switch s, the ports that lie on some shortest path to switch t are those whose
// neighbour is one hop closer to t. Destinations are taken in LID order and each goes to the
// candidate port that has carried the fewest LIDs so far (lowest port number on a tie), as
// OpenSM's osm_ucast_mgr does with its per-port route counters. HCA LIDs and switch LIDs keep
// separate counters so the HCA traffic balance does not depend on the switch count.
#include <algorithm>

#include "emu/routing/net.hpp"

namespace weft::routing::detail {

namespace {

// Least-used port among `cand`, then counts it.
std::uint8_t pick_least(const std::uint8_t* cand, std::uint32_t n, std::uint32_t* count) {
  std::uint8_t best = cand[0];
  for (std::uint32_t i = 1; i < n; ++i)
    if (count[cand[i]] < count[best]) best = cand[i];
  ++count[best];
  return best;
}

}  // namespace

Result<Routes, RoutingError> route_minhop(const Net& net) {
  Routes r = empty_routes(net, Engine::kMinHop);
  const std::uint32_t S = net.S;
  // Undirected graph: hops from s to t equals hops from t to s, so row v holds v's distances.
  const std::vector<std::uint8_t> hops = all_pairs_hops(net);
  std::vector<std::uint32_t> cand_off(S + 1);
  std::vector<std::uint8_t> cand;
  cand.reserve(static_cast<std::size_t>(S) * 4);
  std::uint32_t hca_count[256], sw_count[256];
  for (std::uint32_t s = 0; s < S; ++s) {
    cand.clear();
    const std::uint8_t* hs = hops.data() + static_cast<std::size_t>(s) * S;
    for (std::uint32_t t = 0; t < S; ++t) {
      cand_off[t] = static_cast<std::uint32_t>(cand.size());
      if (t == s || hs[t] == kHopsInf) continue;
      const std::uint8_t want = static_cast<std::uint8_t>(hs[t] - 1);
      for (std::uint32_t e = net.adj_off[s]; e < net.adj_off[s + 1]; ++e)
        if (hops[static_cast<std::size_t>(net.adj_nbr[e]) * S + t] == want)
          cand.push_back(net.adj_port[e]);
    }
    cand_off[S] = static_cast<std::uint32_t>(cand.size());
    std::fill(std::begin(hca_count), std::end(hca_count), 0u);
    std::fill(std::begin(sw_count), std::end(sw_count), 0u);
    std::uint8_t* row = r.lft.data() + static_cast<std::size_t>(s) * r.lid_top;
    for (const Dest& d : net.dests) {
      if (d.sw == s) {
        row[d.lid] = d.port;
        continue;
      }
      std::uint32_t n = cand_off[d.sw + 1] - cand_off[d.sw];
      if (n == 0) continue;  // unreachable: stays kDropPort
      row[d.lid] = pick_least(cand.data() + cand_off[d.sw], n, d.is_switch ? sw_count : hca_count);
    }
  }
  return r;
}

}  // namespace weft::routing::detail
