// emu/routing/routes.hpp — routing engines: a Fabric and its LIDs in, forwarding tables out.
//
// What it is: pure computation for the subnet manager. route() returns, per switch, a linear
// forwarding table (IBA 18.2.4.3.2: DLID -> output port; port 0 = the switch's own LID;
// kDropPort = unreachable) that the SM writes with LinearForwardingTable SMP Sets in 64-entry
// blocks (lft_block()), and for engines that use virtual lanes the SLtoVLMappingTable of every
// (switch, input port, output port) (IBA 14.2.5.8) plus the SL each (source, destination) pair
// must use (path SL, what the SM answers in a PathRecord).
//
// Engines:
//   kMinHop  OpenSM minhop: shortest switch hops; equal-cost ports balanced by per-port counts
//            of LIDs already routed through them. No deadlock-freedom promise.
//   kUpDn    up*/down*: switches ranked by BFS distance from the roots (given by GUID, or the
//            switches farthest from any HCA; the lowest-GUID switch when every switch has
//            HCAs, or when several top switches leave some HCA pair without an up*/down*
//            path, as in a degraded tree); a link points "up" toward lower (rank, GUID). Switch
//            LIDs that have no up*/down* path (management traffic only) fall back to a shortest
//            path. Routes never go down then up, so channel dependencies are acyclic.
//   kFtree   fat tree: levels from the HCAs up; refuses fabrics that are not fat trees. Down
//            routes are fixed per destination (parallel links chosen by destination index),
//            up routes spread every destination over the up ports (each up port of a switch
//            carries the same number of destinations, +-1). Up*/down*: deadlock-free.
//   kDor     dimension order on a mesh or torus built with emu/topo's port convention
//            (host ports first, then +d / -d per dimension). X then Y then Z. On a torus each
//            ring of more than 2 switches has a dateline on its wrap link; crossing it moves
//            the packet from VL 0 to VL 1, as in Dally & Seitz and OpenSM torus-2QoS. SL2VL
//            has only the SL and the ports to go by, so the path SL carries bit d = "this
//            path's segment in dimension d crosses the dateline", and each switch knows from
//            its own coordinate whether such a packet has crossed yet (ring segments are
//            minimal, at most n/2 hops: before the dateline a + segment is in the upper half of
//            the ring, after it in the lower half). VL 0 never depends across the dateline and
//            VL 1 never spans the ring, so each VL's dependency chain is broken.
//
// LMC > 0: every LID of a port is routed as its own destination, so the balancing engines give
// the 2^LMC LIDs different up ports. kDor routes all LIDs of a port the same way.
//
// Errors (values): kNotFatTree (ftree), kNotTorus (dor), kBadRoot, kNoSwitches, kLidMismatch.
// A disconnected fabric is not an error here: unreachable LIDs get kDropPort, and
// check_routes() (checker.hpp) names who cannot reach whom.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "emu/routing/fabric.hpp"
#include "emu/routing/lid.hpp"

namespace weft::routing {

inline constexpr std::uint8_t kDropPort = 255;
inline constexpr int kLftBlockEntries = 64;  // IBA 14.2.5.10: one LFT SMP carries 64 entries
inline constexpr int kSlCount = 16;

enum class Engine : std::uint8_t { kMinHop, kUpDn, kFtree, kDor };
const char* to_string(Engine e);
bool parse_engine(std::string_view s, Engine* out);

struct RoutingOptions {
  Engine engine = Engine::kMinHop;
  std::vector<std::uint64_t> root_guids;  // updn: roots; empty = automatic
};

enum class RoutingErrc : std::uint8_t {
  kNoSwitches,
  kNotFatTree,
  kNotTorus,
  kBadRoot,
  kLidMismatch
};
const char* to_string(RoutingErrc e);

struct RoutingError {
  RoutingErrc code;
  std::string message;  // one sentence naming the culprit
};

using Sl2Vl = std::array<std::uint8_t, kSlCount>;

struct Routes {
  Engine engine = Engine::kMinHop;
  std::size_t lid_top = 0;                  // LFT length (highest LID + 1)
  std::vector<NodeIdx> switches;            // switch index -> fabric node
  std::vector<std::uint32_t> switch_index;  // fabric node -> switch index (UINT32_MAX = HCA)
  std::vector<std::uint8_t> lft;            // switches.size() x lid_top, row per switch

  // Virtual lanes (kDor on a torus): vls > 1 and sl2vl filled; otherwise every SL maps to VL 0.
  int vls = 1;
  // sl2vl[switch index][in_port * (num_ports + 1) + out_port]
  std::vector<std::vector<Sl2Vl>> sl2vl;
  // Path SL by (source switch, destination switch) index, S x S; empty = SL 0 everywhere.
  std::vector<std::uint8_t> sl_by_switch;
  std::vector<std::uint32_t> lid_switch;  // LID -> switch index it sits on or behind

  std::span<const std::uint8_t> lft_of(std::uint32_t sw) const {
    return {lft.data() + static_cast<std::size_t>(sw) * lid_top, lid_top};
  }
  std::uint8_t out_port(std::uint32_t sw, Lid dlid) const {
    return dlid < lid_top ? lft[static_cast<std::size_t>(sw) * lid_top + dlid] : kDropPort;
  }
  // Block b of a switch's LFT as the SM sends it: 64 entries, kDropPort past lid_top.
  std::array<std::uint8_t, kLftBlockEntries> lft_block(std::uint32_t sw, int block) const;
  int lft_blocks() const {
    return static_cast<int>((lid_top + kLftBlockEntries - 1) / kLftBlockEntries);
  }
  std::uint8_t vl(std::uint32_t sw, int num_ports, int in_port, int out_port, int sl) const;
  std::uint8_t path_sl(Lid slid, Lid dlid) const;
  std::size_t memory_bytes() const;
};

Result<Routes, RoutingError> route(const Fabric& fabric, const LidMap& lids,
                                   const RoutingOptions& opt);

}  // namespace weft::routing
