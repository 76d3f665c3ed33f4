// tools/weft/cmd_sm.cpp — `weft sm`: bring a subnet up with Weft's subnet manager and report
// what it did, per phase, the way OpenSM's log would let you compare.
//   weft sm SPEC|NETFILE [--engine minhop|updn|ftree|dor] [--lmc N] [--medium fabric|direct]
//                        [--loss P] [--seed N] [--json]
// The SM (emu/sm) runs on the first HCA and talks to the real SMA of every node. --medium fabric
// (default): over the emulated fabric (emu/fabric, sm::bring_up: SMPs on VL15 through the
// switches, in virtual time). --medium direct: through emu/sm's DirectFabric (SMPs hop by hop in
// virtual time, no data path; the only medium with --loss). What was programmed is then
// verified independently of the SM (LIDs, port states, every HCA pair through the LFTs).
// Times are CPU seconds of this process (the machine may be shared) and wall seconds.
// Exit 0 when the subnet came up and verified, 1 when it did not, 2 on bad input.
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/sim/simulator.hpp"
#include "emu/sm/direct_fabric.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/sm/subnet_manager.hpp"
#include "emu/topo/netfile.hpp"
#include "emu/topo/spec.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/topo_input.hpp"

namespace weft::cli {

namespace {

std::uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t wall_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

struct SmArgs {
  std::string what, engine = "minhop", medium = "fabric";
  int lmc = 0;
  double loss = 0;
  std::uint64_t seed = 1;
  bool json = false;
};

constexpr TimeNs kBringUpLimitNs = 3'600'000'000'000ull;  // an hour of virtual time

void run_sm(const SmArgs& a) {
  const std::uint64_t c_start = process_cpu_ns();
  const topo::Topology t = load_topology("sm", a.what);
  routing::Engine engine;
  if (!routing::parse_engine(a.engine, &engine))
    input_error("sm", "unknown engine '" + a.engine + "' (minhop, updn, ftree or dor)");
  if (a.lmc < 0 || a.lmc > 7) input_error("sm", "--lmc must be 0..7");
  if (a.loss < 0 || a.loss >= 1) input_error("sm", "--loss must be in [0, 1)");
  if (a.medium != "fabric" && a.medium != "direct")
    input_error("sm", "unknown medium '" + a.medium + "' (fabric or direct)");
  if (a.loss > 0 && a.medium != "direct")
    input_error("sm", "--loss needs --medium direct (the fabric's SMP path has no loss model)");
  topo::NodeId sm_node = 0;
  while (sm_node < t.node_count() && t.node(sm_node).is_switch()) ++sm_node;
  if (sm_node == t.node_count()) input_error("sm", a.what + ": no HCA to run the SM on");

  sm::SmConfig cfg;
  cfg.routing.engine = engine;
  cfg.lmc = a.lmc;
  cfg.sweep_interval_ns = 0;
  cfg.wall_clock_ns = process_cpu_ns;  // per-phase figures in CPU time
  bool up = false;
  sm::VerifyReport v;
  sm::SweepReport r;
  std::uint64_t routing_ns = 0;
  std::size_t memory = 0;
  std::string last_error;
  bool routes_valid = false;
  std::uint64_t w0 = 0, c0 = 0, w1 = 0, c1 = 0;
  if (a.medium == "direct") {
    sm::DirectConfig dc;
    dc.loss = a.loss;
    dc.seed = a.seed;
    sm::DirectFabric fab(t, dc);
    sm::SubnetManager sm(cfg);
    w0 = wall_ns(), c0 = process_cpu_ns();
    fab.attach(sm, sm_node, 1);
    up = fab.run_until_up(kBringUpLimitNs);
    w1 = wall_ns(), c1 = process_cpu_ns();
    v = fab.verify();
    r = sm.last_heavy();
    routing_ns = sm.routing_wall_ns();
    memory = sm.memory_bytes();
    last_error = sm.last_error();
    routes_valid = sm.routes_valid();
  } else {
    sim::Simulator simulator({.seed = a.seed});
    fabric::FabricConfig fc;
    fc.sm_managed = true;
    fc.mode = fabric::DataMode::kTimingOnly;  // no data traffic here
    fabric::Fabric fab(simulator, t, fc);
    sm::SmOptions so;
    so.sm = cfg;
    so.sm_node = sm_node;
    so.limit_ns = kBringUpLimitNs;
    std::unique_ptr<sm::FabricSm> keep;
    w0 = wall_ns(), c0 = process_cpu_ns();
    const sm::BringUpReport b = sm::bring_up(fab, so, keep);
    w1 = wall_ns(), c1 = process_cpu_ns();
    v = b.verify;
    r = b.sweep;
    up = keep && keep->sm().subnet_up();
    routing_ns = keep ? keep->sm().routing_wall_ns() : 0;
    memory = b.sm_memory_bytes;
    last_error = b.error;
    routes_valid = b.routes_valid;
    keep.reset();
  }
  const bool ok = up && v.ok() && routes_valid;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu_s = static_cast<double>(c1 - c0) * 1e-9;
  // Reading the topology and building the fabric (what ibsim does for OpenSM) before the SM.
  const double build_cpu_s = static_cast<double>(c0 - c_start) * 1e-9;
  const double wall_s = static_cast<double>(w1 - w0) * 1e-9;
  static constexpr std::pair<sm::Phase, const char*> kPhases[] = {
      {sm::Phase::kDiscovery, "discovery"},
      {sm::Phase::kLidAssignment, "lids_ports"},
      {sm::Phase::kRouting, "routing"},
      {sm::Phase::kLftProgramming, "lft"},
      {sm::Phase::kActivation, "activation"}};
  if (a.json) {
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [p, name] : kPhases) {
      const sm::PhaseStats& s = r.of(p);
      phases[name] = {{"mads", s.mads_sent},
                      {"retried", s.mads_retried},
                      {"cpu_s", static_cast<double>(s.wall_ns) * 1e-9},
                      {"virtual_s", static_cast<double>(s.virtual_ns) * 1e-9}};
    }
    nlohmann::json j = {{"source", a.what},
                        {"medium", a.medium},
                        {"engine", routing::to_string(engine)},
                        {"ok", ok},
                        {"subnet_up", up},
                        {"error", ok ? "" : (!v.ok() ? v.problems.front() : last_error)},
                        {"switches", r.switches},
                        {"hcas", r.hcas},
                        {"cpu_s", cpu_s},
                        {"build_cpu_s", build_cpu_s},
                        {"wall_s", wall_s},
                        {"routing_cpu_s", static_cast<double>(routing_ns) * 1e-9},
                        {"virtual_s", static_cast<double>(r.end_ns - r.start_ns) * 1e-9},
                        {"mads", r.total.mads_sent},
                        {"mads_retried", r.total.mads_retried},
                        {"lft_blocks", r.lft_blocks_sent},
                        {"routes_valid", routes_valid},
                        {"verify_pairs", v.hca_pairs},
                        {"verify_unreachable", v.unreachable_pairs},
                        {"sm_memory_bytes", memory},
                        {"peak_rss_kb", ru.ru_maxrss},
                        {"phases", phases}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %zu switches, %zu HCAs, engine %s, medium %s\n", a.what.c_str(), r.switches,
                r.hcas, routing::to_string(engine), a.medium.c_str());
    std::printf(
        "  subnet %s in %.3f s CPU (%.3f s wall), %.3f ms virtual; fabric built in %.3f s CPU\n",
        up ? "UP" : "NOT up", cpu_s, wall_s, static_cast<double>(r.end_ns - r.start_ns) * 1e-6,
        build_cpu_s);
    std::printf("  %-11s %9s %8s %9s\n", "phase", "MADs", "retries", "CPU s");
    for (const auto& [p, name] : kPhases) {
      const sm::PhaseStats& s = r.of(p);
      std::printf("  %-11s %9lu %8lu %9.3f\n", name, static_cast<unsigned long>(s.mads_sent),
                  static_cast<unsigned long>(s.mads_retried),
                  static_cast<double>(s.wall_ns) * 1e-9);
    }
    std::printf("  %-11s %9lu %8lu\n", "total", static_cast<unsigned long>(r.total.mads_sent),
                static_cast<unsigned long>(r.total.mads_retried));
    std::printf("  routing alone %.3f s CPU; %zu LFT blocks written\n",
                static_cast<double>(routing_ns) * 1e-9, r.lft_blocks_sent);
    std::printf("  verified: %zu HCA pairs, %zu unreachable, %zu ports not Active: %s\n",
                v.hca_pairs, v.unreachable_pairs, v.ports_not_active,
                v.ok() ? "ok" : v.problems.front().c_str());
    std::printf("  memory: SM %.0f bytes per HCA; peak RSS %.1f MB\n",
                static_cast<double>(memory) / static_cast<double>(r.hcas ? r.hcas : 1),
                static_cast<double>(ru.ru_maxrss) / 1e3);
    if (!ok && !last_error.empty()) std::printf("  SM: %s\n", last_error.c_str());
  }
  if (!ok) throw CLI::RuntimeError(1);
}

}  // namespace

void add_sm(CLI::App& app) {
  auto a = std::make_shared<SmArgs>();
  auto* cmd = app.add_subcommand(
      "sm", "Bring a subnet up with Weft's subnet manager and report it per phase");
  cmd->add_option("topology", a->what, "Generator spec or ibnetdiscover/ibsim net file")
      ->required();
  cmd->add_option("--engine", a->engine, "minhop, updn, ftree or dor (default minhop)");
  cmd->add_option("--lmc", a->lmc, "LID mask control for HCA ports (0..7)");
  cmd->add_option("--medium", a->medium,
                  "fabric (the emulated fabric, default) or direct (emu/sm's DirectFabric)");
  cmd->add_option("--loss", a->loss,
                  "Probability that one link traversal drops an SMP (--medium direct)");
  cmd->add_option("--seed", a->seed, "Seed of the SMP loss stream");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a] { run_sm(*a); });
}

}  // namespace weft::cli
