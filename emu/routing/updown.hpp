// emu/routing/updown.hpp — private: the up*/down* route builder shared by updn and ftree.
//
// Given a rank per switch (0 = root), a link s->u goes "up" when (rank, GUID) of u is below that
// of s. For every destination switch t: the switches that reach t going only down (its
// ancestors) take a down port one hop closer; every other switch takes an up port toward the
// nearest switch that can. A packet that has gone down never meets a switch that sends it up,
// so every route is up* then down*.
#pragma once

#include <cstdint>
#include <vector>

#include "emu/routing/net.hpp"

namespace weft::routing::detail {

enum class UpDownPolicy : std::uint8_t {
  kLeastLoaded,  // updn: every choice balanced by per-port counters
  kFatTree,      // ftree: down choice fixed by destination index, up choice balanced;
                 // a switch that cannot reach a leaf is an error (not a fat tree)
};

// *hca_fallbacks (if given) counts (HCA's switch, HCA destination switch) pairs that had no
// up*/down* path and took the shortest-path fallback (not deadlock-free).
Result<Routes, RoutingError> route_updown(const Net& net, const std::vector<std::uint32_t>& rank,
                                          UpDownPolicy policy, Engine engine,
                                          std::size_t* hca_fallbacks = nullptr);

}  // namespace weft::routing::detail
