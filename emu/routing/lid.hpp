// emu/routing/lid.hpp — LID assignment: a base LID per HCA port and per switch (port 0).
//
// IBA 7.11.1 / 14.2.5.6: a unicast LID is 0x0001..0xBFFF; an end port with LMC m answers to
// the 2^m LIDs base..base+2^m-1, base aligned to 2^m. Switches answer on port 0 with one LID
// (OpenSM's default: switches get LMC 0 unless told otherwise; so do we).
//
// LidAssigner is the SM's guid2lid memory: a port GUID seen once keeps its LID for the life of
// the assigner (and across runs, through cache()/load()), so adding or removing a node
// elsewhere never moves anybody else's LID. New GUIDs are taken in ascending GUID order and
// given the lowest free (aligned) LIDs, so a fresh assigner given the same GUIDs always
// produces the same LIDs.
//
// Errors: kLidSpaceExhausted when the unicast space cannot hold the ports.
// Thread-safety: LidAssigner is single-threaded; LidMap is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "emu/routing/fabric.hpp"
#include <weft/types.hpp>

namespace weft::routing {

using Lid = std::uint16_t;
inline constexpr Lid kNoLid = 0;
inline constexpr Lid kUnicastLidMax = 0xBFFF;
inline constexpr int kLmcMax = 7;

struct LidOwner {
  NodeIdx node = kNoNode;
  std::uint8_t port = 0;  // 0 for a switch
};

struct LidMap {
  int lmc = 0;  // applies to HCA ports
  // base[node][port]: HCA ports 1..n; a switch has its LID at [0]. kNoLid = none.
  std::vector<std::vector<Lid>> base;
  std::vector<LidOwner> owner;  // indexed by LID, size lid_top()
  // One past the highest LID in use: the length an LFT needs.
  std::size_t lid_top() const { return owner.size(); }
  Lid lid_of(NodeIdx node, int port) const { return base[node][port]; }
  int lids_per_port(const Fabric& f, NodeIdx node) const {
    return f.nodes[node].is_switch ? 1 : 1 << lmc;
  }
};

struct LidError {
  std::string message;
};

class LidAssigner {
 public:
  explicit LidAssigner(int lmc = 0);
  Result<LidMap, LidError> assign(const Fabric& fabric);
  // The GUID -> base LID memory, to persist (OpenSM's guid2lid file) and load() later.
  const std::map<std::uint64_t, Lid>& cache() const { return cache_; }
  void load(std::map<std::uint64_t, Lid> cache) { cache_ = std::move(cache); }

 private:
  int lmc_;
  std::map<std::uint64_t, Lid> cache_;
};

// One-shot: a fresh assigner.
Result<LidMap, LidError> assign_lids(const Fabric& fabric, int lmc = 0);

}  // namespace weft::routing
