// tools/weft/sm_flags.hpp — the subnet manager's flags, the same on every subcommand that runs
// one (`weft sim`, `weft fabric up`): the routing engine and its options, the LMC, and the
// sweep periods. A researcher comparing routing engines runs the same workload with --engine
// minhop, updn, ftree and dor; an operator reproducing a slow-converging subnet sets the sweep
// periods OpenSM would (sweep_interval, force_heavy_sweep).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "emu/sm/fabric_sm.hpp"
#include "emu/topo/topology.hpp"

namespace weft::cli {

struct SmFlags {
  std::string engine = "minhop";
  int lmc = 0;
  std::vector<std::string> roots;  // updn root switch GUIDs
  std::string sweep;               // light sweep period; "" = the SM's default (10 s)
  std::string heavy_every;         // forced heavy sweep period; "" = off
  std::string sm_node;             // the SM's HCA (description or index); "" = the first HCA
};

void add_sm_flags(CLI::App* cmd, SmFlags& flags);
// Parses one --root GUID (0x-prefixed hex or decimal); false if it is not one.
bool parse_guid(const std::string& s, std::uint64_t* out);
// Fills `out` from the flags; returns "" or one sentence naming the flag and the problem.
std::string apply_sm_flags(const SmFlags& flags, const topo::Topology& t, sm::SmOptions* out);
// Routes `t` as the SM would with `options` (no SMPs); "" or "routing: why not" (e.g. dor on a
// fabric that is not a mesh or torus). For models that take only the routes.
std::string check_routes(const topo::Topology& t, const sm::SmOptions& options);

}  // namespace weft::cli
