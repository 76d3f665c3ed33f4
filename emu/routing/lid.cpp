// emu/routing/lid.cpp — the stable, sequential LID assigner.
#include "emu/routing/lid.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::routing {

LidAssigner::LidAssigner(int lmc) : lmc_(lmc) {
  WEFT_ASSERT(lmc >= 0 && lmc <= kLmcMax);
}

Result<LidMap, LidError> LidAssigner::assign(const Fabric& fabric) {
  struct Want {
    std::uint64_t guid;
    NodeIdx node;
    std::uint8_t port;
    int count;
  };
  std::vector<Want> want;
  for (NodeIdx n = 0; n < fabric.nodes.size(); ++n) {
    const FabricNode& fn = fabric.nodes[n];
    if (fn.is_switch) {
      want.push_back({fn.ports[0].guid ? fn.ports[0].guid : fn.guid, n, 0, 1});
    } else {
      for (int p = 1; p <= fn.num_ports(); ++p)
        if (fn.ports[p].peer != kNoNode)
          want.push_back({fn.ports[p].guid, n, static_cast<std::uint8_t>(p), 1 << lmc_});
    }
  }
  std::vector<bool> used(kUnicastLidMax + 1, false);
  used[0] = true;
  // Remembered LIDs first; a remembered LID no longer aligned for the current LMC, or that
  // collides, is forgotten and the port is treated as new.
  std::vector<std::size_t> fresh;
  std::vector<Lid> got(want.size(), kNoLid);
  for (std::size_t i = 0; i < want.size(); ++i) {
    auto it = cache_.find(want[i].guid);
    bool ok = it != cache_.end() && it->second % want[i].count == 0 &&
              it->second + want[i].count - 1 <= kUnicastLidMax;
    for (int k = 0; ok && k < want[i].count; ++k) ok = !used[it->second + k];
    if (!ok) {
      fresh.push_back(i);
      continue;
    }
    got[i] = it->second;
    for (int k = 0; k < want[i].count; ++k) used[it->second + k] = true;
  }
  // Every remembered GUID keeps its LIDs reserved, present or not, so a node that comes back
  // gets its old LIDs.
  // The memory does not say whether a GUID was a switch (1 LID) or an HCA port (2^LMC), so an
  // absent GUID at an aligned LID keeps the whole block: at worst a switch's LID wastes a few.
  const std::uint32_t block = 1u << lmc_;
  for (const auto& [guid, lid] : cache_) {
    (void)guid;
    if (lid == kNoLid || lid > kUnicastLidMax) continue;
    const std::uint32_t n = lid % block == 0 ? block : 1;
    for (std::uint32_t k = 0; k < n && lid + k <= kUnicastLidMax; ++k) used[lid + k] = true;
  }
  std::sort(fresh.begin(), fresh.end(),
            [&](std::size_t a, std::size_t b) { return want[a].guid < want[b].guid; });
  std::uint32_t cursor1 = 1, cursor_block = 1u << lmc_;  // lowest candidates per block size
  for (std::size_t i : fresh) {
    const int count = want[i].count;
    std::uint32_t& cur = count == 1 ? cursor1 : cursor_block;
    for (;;) {
      if (cur + count - 1 > kUnicastLidMax)
        return LidError{"the unicast LID space (1..0xBFFF) cannot hold " +
                        std::to_string(want.size()) + " ports with LMC " + std::to_string(lmc_)};
      bool free = true;
      for (int k = 0; free && k < count; ++k) free = !used[cur + k];
      if (free) break;
      cur += count;
    }
    got[i] = static_cast<Lid>(cur);
    for (int k = 0; k < count; ++k) used[cur + k] = true;
    cache_[want[i].guid] = got[i];
    cur += count;
  }
  LidMap m;
  m.lmc = lmc_;
  m.base.resize(fabric.nodes.size());
  std::size_t top = 1;
  for (NodeIdx n = 0; n < fabric.nodes.size(); ++n)
    m.base[n].assign(fabric.nodes[n].ports.size(), kNoLid);
  for (std::size_t i = 0; i < want.size(); ++i) {
    m.base[want[i].node][want[i].port] = got[i];
    top = std::max<std::size_t>(top, got[i] + want[i].count);
  }
  m.owner.assign(top, LidOwner{});
  for (std::size_t i = 0; i < want.size(); ++i)
    for (int k = 0; k < want[i].count; ++k) m.owner[got[i] + k] = {want[i].node, want[i].port};
  return m;
}

Result<LidMap, LidError> assign_lids(const Fabric& fabric, int lmc) {
  LidAssigner a(lmc);
  return a.assign(fabric);
}

}  // namespace weft::routing
