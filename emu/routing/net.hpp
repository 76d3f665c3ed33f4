// emu/routing/net.hpp — private: the compact switch graph every engine works on.
//
// Built once per route() call from a Fabric and its LIDs: switches densely indexed, the
// switch-to-switch links as a CSR adjacency, and the destinations (every routed LID with the
// switch it sits on or behind and the port that switch uses for its last hop).
// Not part of the library's API. Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <vector>

#include "emu/routing/routes.hpp"

namespace weft::routing::detail {

inline constexpr std::uint32_t kNoSwitch = UINT32_MAX;
inline constexpr std::uint8_t kHopsInf = 255;

struct Dest {
  Lid lid;
  std::uint32_t sw;   // switch the LID sits on (switch LID) or behind (HCA LID)
  std::uint8_t port;  // port of `sw` for the last hop; 0 for the switch's own LID
  bool is_switch;
  std::uint32_t index;  // HCA LIDs: position in (switch, port, LID) order; used by ftree
};

struct Net {
  const Fabric* fabric = nullptr;
  const LidMap* lids = nullptr;
  std::uint32_t S = 0;
  std::vector<NodeIdx> sw_node;
  std::vector<std::uint32_t> sw_of_node;
  std::vector<std::uint32_t> adj_off;  // S + 1
  std::vector<std::uint32_t> adj_nbr;
  std::vector<std::uint8_t> adj_port;
  std::vector<Dest> dests;                  // HCA LIDs in LID order, then switch LIDs
  std::vector<std::uint32_t> hca_ports_on;  // per switch: cabled HCA ports

  std::uint64_t guid(std::uint32_t s) const { return fabric->nodes[sw_node[s]].guid; }
  int num_ports(std::uint32_t s) const { return fabric->nodes[sw_node[s]].num_ports(); }
};

Result<Net, RoutingError> build_net(const Fabric& f, const LidMap& lids);
// Routes with empty tables (all kDropPort, port 0 for own LIDs) shaped for `net`.
Routes empty_routes(const Net& net, Engine e);
// hops[t * S + s]: switch hops from s to t (kHopsInf = unreachable). BFS from every switch.
std::vector<std::uint8_t> all_pairs_hops(const Net& net);
// BFS distance from a set of switches (UINT32_MAX = unreachable).
std::vector<std::uint32_t> bfs_from(const Net& net, const std::vector<std::uint32_t>& sources);

Result<Routes, RoutingError> route_minhop(const Net& net);
Result<Routes, RoutingError> route_updn(const Net& net, const std::vector<std::uint64_t>& roots);
Result<Routes, RoutingError> route_ftree(const Net& net);
Result<Routes, RoutingError> route_dor(const Net& net);

}  // namespace weft::routing::detail
