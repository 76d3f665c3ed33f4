// emu/routing/routes.cpp — engine dispatch and the Routes accessors.
#include "emu/routing/routes.hpp"

#include "emu/routing/net.hpp"
#include "src/base/assert.hpp"

namespace weft::routing {

const char* to_string(Engine e) {
  switch (e) {
    case Engine::kMinHop:
      return "minhop";
    case Engine::kUpDn:
      return "updn";
    case Engine::kFtree:
      return "ftree";
    case Engine::kDor:
      return "dor";
  }
  return "?";
}

bool parse_engine(std::string_view s, Engine* out) {
  for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree, Engine::kDor})
    if (s == to_string(e)) {
      *out = e;
      return true;
    }
  return false;
}

const char* to_string(RoutingErrc e) {
  switch (e) {
    case RoutingErrc::kNoSwitches:
      return "no switches";
    case RoutingErrc::kNotFatTree:
      return "not a fat tree";
    case RoutingErrc::kNotTorus:
      return "not a mesh or torus";
    case RoutingErrc::kBadRoot:
      return "bad root";
    case RoutingErrc::kLidMismatch:
      return "LID map mismatch";
  }
  return "?";
}

std::array<std::uint8_t, kLftBlockEntries> Routes::lft_block(std::uint32_t sw, int block) const {
  std::array<std::uint8_t, kLftBlockEntries> b;
  b.fill(kDropPort);
  for (int i = 0; i < kLftBlockEntries; ++i) {
    std::size_t lid = static_cast<std::size_t>(block) * kLftBlockEntries + i;
    if (lid < lid_top) b[i] = lft[static_cast<std::size_t>(sw) * lid_top + lid];
  }
  return b;
}

std::uint8_t Routes::vl(std::uint32_t sw, int num_ports, int in_port, int out_port, int sl) const {
  WEFT_ASSERT(sl >= 0 && sl < kSlCount);
  if (sl2vl.empty()) return 0;
  const int np = num_ports + 1;
  return sl2vl[sw][static_cast<std::size_t>(in_port) * np + out_port][sl];
}

std::uint8_t Routes::path_sl(Lid slid, Lid dlid) const {
  if (sl_by_switch.empty() || slid >= lid_top || dlid >= lid_top) return 0;
  std::uint32_t a = lid_switch[slid], b = lid_switch[dlid];
  if (a == UINT32_MAX || b == UINT32_MAX) return 0;
  return sl_by_switch[static_cast<std::size_t>(a) * switches.size() + b];
}

std::size_t Routes::memory_bytes() const {
  std::size_t b = sizeof(*this) + lft.capacity() + switches.capacity() * sizeof(NodeIdx) +
                  switch_index.capacity() * 4 + sl_by_switch.capacity() + lid_switch.capacity() * 4;
  for (const auto& v : sl2vl) b += v.capacity() * sizeof(Sl2Vl);
  return b;
}

Result<Routes, RoutingError> route(const Fabric& fabric, const LidMap& lids,
                                   const RoutingOptions& opt) {
  auto net = detail::build_net(fabric, lids);
  if (!net) return net.error();
  switch (opt.engine) {
    case Engine::kMinHop:
      return detail::route_minhop(*net);
    case Engine::kUpDn:
      return detail::route_updn(*net, opt.root_guids);
    case Engine::kFtree:
      return detail::route_ftree(*net);
    case Engine::kDor:
      return detail::route_dor(*net);
  }
  WEFT_ASSERT(false);
  return RoutingError{RoutingErrc::kNoSwitches, ""};
}

}  // namespace weft::routing
