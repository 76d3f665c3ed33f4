// emu/routing/stats.hpp — balance figures of a routing: how many destination LIDs each
// directed link carries (LFT entries that point out of it), split into switch-to-switch links
// and links toward HCAs, and the memory the tables take.
//
// "Routes per link" counts destinations, not (source, destination) pairs: an LFT entry is what
// a switch stores, and in destination-based routing it is what spreads load. Hop figures come
// from check_routes (checker.hpp), which walks the tables.
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>

#include "emu/routing/routes.hpp"

namespace weft::routing {

struct LinkLoad {
  std::size_t links = 0;  // directed links counted
  std::uint32_t max = 0;  // destination HCA LIDs on the busiest one
  std::uint32_t min = 0;
  double avg = 0;
};

struct RoutingStats {
  LinkLoad switch_links;  // switch -> switch, HCA destination LIDs only
  // Up links: toward a switch one level further from the HCAs (level = switch hops from the
  // nearest switch with an HCA). up_spread_max: over switches, the largest difference between
  // the busiest and the idlest of its up links (0 or 1 = perfectly balanced).
  LinkLoad up_links;
  std::uint32_t up_spread_max = 0;
  std::size_t table_bytes = 0;  // Routes::memory_bytes()
};

// Loads over directed switch->switch links, counting HCA destination LIDs.
RoutingStats routing_stats(const Fabric& fabric, const LidMap& lids, const Routes& routes);

}  // namespace weft::routing
