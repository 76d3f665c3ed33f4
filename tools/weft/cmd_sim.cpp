// tools/weft/cmd_sim.cpp — `weft sim`: bring a subnet up with the SM, run a workload over the
// transport engines, with faults, and report (emu/simrun). Bad input exits 2 with one sentence.
//   weft sim --topology fat-tree:k=8 --workload <spec> [--faults FILE] [--fault ...]
//            [--event ...] [--seed N] [--duration T] [--json] [--pcap DIR]
//            [--engine minhop|updn|ftree|dor] [--lmc N] [--root GUID]... [--sm-sweep T]
//            [--sm-heavy-every T] [--sm-node NODE]
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "emu/simrun/simrun.hpp"
#include "emu/topo/spec.hpp"
#include "tools/weft/cmd_collsim.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/sm_flags.hpp"
#include "tools/weft/topo_input.hpp"

namespace weft::cli {

namespace {
struct SimArgs {
  std::string topology = "fat-tree:k=4";
  std::string workload = "pairs:flows=0:1";
  std::string faults_file;
  std::vector<std::string> fault_flags, event_flags;
  std::string seed;  // parsed here, so a bad value exits 2 like every other bad input
  std::string duration = "100us";
  bool json = false;
  bool timing_only = false;
  std::string pcap;
  CollSimArgs coll;  // --workload allreduce|... (tools/weft/cmd_collsim.hpp)
  SmFlags sm;
};

[[noreturn]] void bad_input(const std::string& what) {
  std::fprintf(stderr, "weft sim: %s\n", what.c_str());
  throw CLI::RuntimeError(2);
}

void run(const SimArgs& a, bool seed_given, bool sm_given, const std::vector<std::string>& extras) {
  if (!extras.empty()) bad_input("unexpected argument \"" + extras.front() + "\" (see --help)");
  if (is_coll_workload(a.workload)) {
    // Both collective models route as the SM would with --engine, --lmc and --root; the SM's
    // sweeps and its HCA play no part there: refuse them rather than ignore them.
    if (!a.sm.sweep.empty() || !a.sm.heavy_every.empty() || !a.sm.sm_node.empty())
      bad_input(
          "--sm-sweep, --sm-heavy-every and --sm-node apply to the point-to-point "
          "workloads (pairs, all-to-all, incast, permutation)");
    CollSimFaults f{a.faults_file, a.fault_flags, a.event_flags, 1};
    if (seed_given) f.seed = std::strtoull(a.seed.c_str(), nullptr, 0);
    if (sm_given) {
      auto t = topo::from_spec(a.topology);
      if (!t) bad_input("--topology: " + t.error().message);
      sm::SmOptions so;
      if (const std::string e = apply_sm_flags(a.sm, *t, &so); !e.empty()) bad_input(e);
      if (const std::string e = check_routes(*t, so); !e.empty())
        bad_input("--engine " + a.sm.engine + ": " + e);
      f.routing = so.sm.routing;
      f.lmc = so.sm.lmc;
    }
    run_collsim(a.coll, a.topology, a.workload, a.json, a.timing_only, f);
    return;
  }
  std::uint64_t seed_value = 0;
  if (seed_given) {
    char* end = nullptr;
    seed_value = std::strtoull(a.seed.c_str(), &end, 0);
    if (a.seed.empty() || a.seed[0] == '-' || *end != '\0') {
      bad_input("--seed must be a non-negative integer, not \"" + a.seed + "\"");
    }
  }
  simrun::SimOptions o;
  o.topology = a.topology;
  o.workload = a.workload;
  const auto dur = faults::parse_time(a.duration);
  if (!dur || *dur == 0)
    bad_input("--duration must be a time such as 300us, not \"" + a.duration + "\"");
  o.duration_ns = *dur;
  // A generator spec or an ibnetdiscover/ibsim net file (tools/weft/topo_input.hpp).
  o.loaded = load_topology("sim", a.topology);
  const topo::Topology* topo = &*o.loaded;
  if (const std::string e = apply_sm_flags(a.sm, *topo, &o.sm); !e.empty()) bad_input(e);
  if (!a.faults_file.empty()) {
    auto sc = faults::load_scenario(*topo, a.faults_file);
    if (!sc) bad_input(sc.error().message);
    o.scenario = *sc;
  }
  for (std::size_t i = 0; i < a.fault_flags.size(); ++i) {
    auto f = faults::parse_fault_flag(*topo, a.fault_flags[i], static_cast<int>(i + 1));
    if (!f) bad_input(f.error().message);
    o.scenario.ports.push_back(*f);
  }
  for (std::size_t i = 0; i < a.event_flags.size(); ++i) {
    auto e = faults::parse_event_flag(*topo, a.event_flags[i], static_cast<int>(i + 1));
    if (!e) bad_input(e.error().message);
    o.scenario.events.push_back(*e);
  }
  o.seed = seed_given ? seed_value : o.scenario.seed.value_or(1);
  if (a.timing_only) o.fabric.mode = fabric::DataMode::kTimingOnly;
  o.pcap_dir = a.pcap;
  // Every run prints its seed first (stderr with --json, so stdout stays one JSON object).
  std::fprintf(a.json ? stderr : stdout, "seed %llu\n", static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  if (tty) {
    o.progress = [start](TimeNs done, TimeNs total, std::uint64_t events) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int width = 30;
      const int fill = total ? static_cast<int>(width * done / total) : width;
      std::fprintf(stderr, "\r[%-*s] %8.1f / %.1f us virtual, %.2f M events/s ", width,
                   std::string(static_cast<std::size_t>(fill), '#').c_str(),
                   static_cast<double>(done) / 1e3, static_cast<double>(total) / 1e3,
                   s > 0 ? static_cast<double>(events) / s / 1e6 : 0.0);
    };
  }
  auto r = simrun::run_sim(o);
  if (tty) std::fprintf(stderr, "\r%80s\r", "");
  if (!r) bad_input(r.error());
  if (a.json) {
    std::printf("%s\n", simrun::report_json(*r).c_str());
  } else {
    simrun::print_report(*r, stdout);
  }
}
}  // namespace

void add_sim(CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  auto* cmd = app.add_subcommand(
      "sim", "Bring a subnet up with the SM and run a workload over it, with faults");
  cmd->add_option("--topology", a->topology, "Topology spec, e.g. fat-tree:k=8")
      ->capture_default_str();
  cmd->add_option("--workload", a->workload,
                  "pairs:flows=0:5[+1:6],op=write|read|send,size=16K,mtu=1024,depth=8 | "
                  "all-to-all | incast:N | permutation | allreduce | reducescatter | allgather | "
                  "broadcast | reduce | alltoall")
      ->capture_default_str();
  cmd->add_option("--faults", a->faults_file, "TOML fault scenario (emu/faults/README.md)");
  cmd->add_option("--fault", a->fault_flags,
                  "link=NODE/pN|port=NODE/pN,drop=,ber=,duplicate=,reorder=,reorder_max=,"
                  "delay=,jitter=");
  cmd->add_option("--event", a->event_flags,
                  "at=T,action=link-down|link-up|flap|switch-down|switch-up|sm-down|sm-up,...");
  auto* seed = cmd->add_option("--seed", a->seed, "Run seed (default: the scenario's, else 1)");
  cmd->add_option("--duration", a->duration, "Virtual time of traffic")->capture_default_str();
  cmd->add_flag("--json", a->json, "Print the report as one JSON object");
  cmd->add_flag("--timing-only", a->timing_only, "Carry headers only (no bytes, modelled CRCs)");
  cmd->add_option("--pcap", a->pcap, "Write captures of the flows' and faulted ports into DIR");
  add_collsim_options(cmd, a->coll);
  add_sm_flags(cmd, a->sm);
  cmd->allow_extras();  // reported by run() with exit status 2
  cmd->callback([a, seed, cmd] {
    const bool sm_given = cmd->count("--engine") + cmd->count("--lmc") + cmd->count("--root") +
                              cmd->count("--sm-sweep") + cmd->count("--sm-heavy-every") +
                              cmd->count("--sm-node") >
                          0;
    run(*a, static_cast<bool>(*seed), sm_given, cmd->remaining());
  });
}

}  // namespace weft::cli
