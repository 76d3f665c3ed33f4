// emu/routing/report.hpp — one routing engine judged on one fabric: what a researcher comparing
// engines looks at first. Routes the fabric, checks every HCA pair through the tables (reach,
// loops, hop counts, credit loops in the channel dependency graph: checker.hpp) and measures
// balance (destinations per switch link: stats.hpp). Used by `weft route`.
//
// An engine that refuses the fabric (ftree on a torus, dor on a tree) is a report with
// routed = false and the engine's one-sentence reason, not an error: comparing engines means
// some of them do not apply. Times are CPU times of this thread (the machine is shared).
// Thread-safety: pure function of its arguments.
#pragma once

#include <string>

#include "emu/routing/checker.hpp"
#include "emu/routing/routes.hpp"
#include "emu/routing/stats.hpp"

namespace weft::routing {

struct EngineReport {
  Engine engine = Engine::kMinHop;
  bool routed = false;     // the engine produced tables
  std::string refusal;     // why not, when !routed
  double route_cpu_s = 0;  // route() alone
  double check_cpu_s = 0;  // check_routes()
  CheckReport check;       // valid when routed
  RoutingStats stats;      // valid when routed
  int vls = 1;             // virtual lanes the engine uses
  // Every HCA pair reached without loops, and no credit loop where the engine promises
  // deadlock freedom (all but minhop, which OpenSM's minhop does not promise either: its
  // credit loop is reported in check.credit_loop and shown as a warning).
  bool valid() const;
};

EngineReport evaluate_engine(const Fabric& fabric, const LidMap& lids, const RoutingOptions& opt);

}  // namespace weft::routing
