// tools/weft/sm_flags.cpp — see sm_flags.hpp.
#include "tools/weft/sm_flags.hpp"

#include <cerrno>
#include <cstdlib>

#include "emu/faults/scenario.hpp"
#include "emu/routing/fabric.hpp"
#include "emu/routing/routes.hpp"

namespace weft::cli {

namespace {
// IBA 7.11.1: LMC is a 3-bit field, so an HCA port answers at most 2^7 LIDs.
constexpr int kLmcMax = 7;

// A period flag: a time with a unit (faults::parse_time: ns, us, ms, s); "0" turns it off.
std::string parse_period(const std::string& flag, const std::string& text, TimeNs* out) {
  const auto t = faults::parse_time(text);
  if (!t) return flag + " must be a time such as 10s or 500ms (0 = off), not \"" + text + "\"";
  *out = *t;
  return "";
}
}  // namespace

void add_sm_flags(CLI::App* cmd, SmFlags& f) {
  cmd->add_option("--engine", f.engine,
                  "subnet manager's routing engine: minhop, updn, ftree or dor")
      ->capture_default_str();
  cmd->add_option("--lmc", f.lmc, "LID mask control for HCA ports (0..7)")->capture_default_str();
  cmd->add_option("--root", f.roots, "updn root switch GUID (repeatable; default: automatic)");
  cmd->add_option("--sm-sweep", f.sweep,
                  "period of the SM's light sweeps, e.g. 10s, 500ms; 0 = none (default 10s)");
  cmd->add_option("--sm-heavy-every", f.heavy_every,
                  "force a heavy sweep this long after the last one (OpenSM's "
                  "force_heavy_sweep); default off");
  cmd->add_option("--sm-node", f.sm_node,
                  "the HCA the subnet manager runs on (node description or index; default: "
                  "the first HCA)");
}

bool parse_guid(const std::string& s, std::uint64_t* out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

std::string apply_sm_flags(const SmFlags& f, const topo::Topology& t, sm::SmOptions* out) {
  sm::SmConfig& c = out->sm;
  if (!routing::parse_engine(f.engine, &c.routing.engine))
    return "--engine: unknown routing engine \"" + f.engine + "\" (minhop, updn, ftree or dor)";
  if (f.lmc < 0 || f.lmc > kLmcMax) return "--lmc must be 0..7, not " + std::to_string(f.lmc);
  c.lmc = f.lmc;
  if (!f.roots.empty() && c.routing.engine != routing::Engine::kUpDn)
    return "--root applies to --engine updn only";
  for (const std::string& r : f.roots) {
    std::uint64_t guid = 0;
    if (!parse_guid(r, &guid)) return "--root " + r + ": not a GUID";
    const auto n = t.find_guid(guid);
    if (!n || !t.node(*n).is_switch()) return "--root " + r + ": no switch has this node GUID";
    c.routing.root_guids.push_back(guid);
  }
  if (!f.sweep.empty()) {
    if (auto e = parse_period("--sm-sweep", f.sweep, &c.sweep_interval_ns); !e.empty()) return e;
  }
  if (!f.heavy_every.empty()) {
    if (auto e = parse_period("--sm-heavy-every", f.heavy_every, &c.forced_heavy_interval_ns);
        !e.empty())
      return e;
  }
  if (!f.sm_node.empty()) {
    std::optional<topo::NodeId> found;
    for (topo::NodeId i = 0; i < t.node_count(); ++i)
      if (t.node(i).description == f.sm_node) found = i;
    std::uint64_t index = 0;
    if (!found && parse_guid(f.sm_node, &index) && index < t.node_count())
      found = static_cast<topo::NodeId>(index);
    if (!found) return "--sm-node: no node named \"" + f.sm_node + "\"";
    if (t.node(*found).is_switch())
      return "--sm-node " + f.sm_node + " is a switch; the SM runs on an HCA";
    out->sm_node = *found;
  }
  return "";
}

std::string check_routes(const topo::Topology& t, const sm::SmOptions& options) {
  const routing::Fabric rf = routing::Fabric::from_topology(t);
  auto lids = routing::assign_lids(rf, options.sm.lmc);
  if (!lids) return "LIDs: " + lids.error().message;
  auto routes = routing::route(rf, *lids, options.sm.routing);
  if (!routes) return "routing: " + routes.error().message;
  return "";
}

}  // namespace weft::cli
