// bench/sm/sm_bench.cpp — subnet manager bring-up on 36-port fat trees of 648, 2,268, 5,832 and
// 11,664 HCAs (emu/topo generators, as bench/routing), ftree and minhop, through the
// DirectFabric driver (every SMP through the real SMA of every node on its path).
//
// Prints per run: whole bring-up wall time (SM and driver together, from start() to subnet up),
// routing computation alone (route()), the checker, MADs per phase, virtual time, the SM's memory
// per HCA and the process's peak RSS, and the ratios to OpenSM 3.3.23 on ibsim for the same
// fabric and engine (../shared/reference/anchors.md, measured on this kind of machine, not in
// this run). Goals at 11,664 HCAs: bring-up <= 1/20 of OpenSM's, routing <= 1/5.
// Every bring-up is verified by DirectFabric::verify() (outside the timed part); a failed check
// makes the program exit 1, so no figure is printed for wrong tables.
//
// --fabric runs the same bring-ups over the emulated fabric (emu/fabric, sm::bring_up): every SMP
// a simulator event per hop through switch SMAs and LFTs.
//
// Usage: weft_sm_bench [size ...] [--engine=ftree|minhop|both] [--fabric]   sizes 0..3 (default
// all)
#include <sys/resource.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/fabric/fabric.hpp"
#include "emu/sm/direct_fabric.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/sm/subnet_manager.hpp"
#include "emu/topo/generators.hpp"

namespace {

using namespace weft;

std::uint64_t cpu_ns();

std::uint64_t wall_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

topo::Topology fabric_of(int size) {
  topo::GenResult t = [&]() -> topo::GenResult {
    if (size == 0) return topo::fat_tree_2({});
    topo::FatTree3Params p;
    p.pods = size == 1 ? 7 : size == 2 ? 18 : 36;
    p.cores_per_group = size == 1 ? 6 : size == 2 ? 9 : 18;
    return topo::fat_tree_3(p);
  }();
  if (!t.ok()) {
    std::fprintf(stderr, "generator: %s\n", t.error().message.c_str());
    std::exit(2);
  }
  return std::move(t).value();
}

// OpenSM time to SUBNET UP, seconds (anchors.md).
double opensm_s(int size, routing::Engine e) {
  static const double kMinhop[4] = {1.9, 11.3, 31.6, 92.6};
  static const double kFtree[4] = {2.1, 10.8, 28.0, 71.8};
  return e == routing::Engine::kFtree ? kFtree[size] : kMinhop[size];
}

// CPU time of this process: the machine is shared, so wall time includes waiting for a core.
std::uint64_t cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

long rss_peak_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

bool run(int size, routing::Engine engine) {
  const topo::Topology t = fabric_of(size);
  topo::NodeId sm_node = 0;
  while (t.node(sm_node).is_switch()) ++sm_node;
  sm::DirectFabric fab(t);
  sm::SmConfig cfg;
  cfg.routing.engine = engine;
  cfg.sweep_interval_ns = 0;
  // The SM's clock hook gets CPU time: on a shared machine the per-phase and routing figures
  // would otherwise include time spent waiting for a core. The whole bring-up is given both ways.
  cfg.wall_clock_ns = cpu_ns;
  sm::SubnetManager sm(cfg);
  const std::uint64_t w0 = wall_ns(), c0 = cpu_ns();
  fab.attach(sm, sm_node, 1);
  const bool up = fab.run_until_up(3'600'000'000'000ull);
  const std::uint64_t w1 = wall_ns(), c1 = cpu_ns();
  const sm::VerifyReport v = fab.verify();
  const sm::SweepReport& r = sm.last_heavy();
  if (!up || !v.ok() || !sm.routes_valid()) {
    std::printf("size %d %s: FAILED (up %d, verify %s, routes_valid %d: %s)\n", size,
                routing::to_string(engine), up, v.problems.empty() ? "ok" : v.problems[0].c_str(),
                sm.routes_valid(), sm.last_error().c_str());
    return false;
  }
  const double whole_s = static_cast<double>(w1 - w0) * 1e-9;
  const double route_s = static_cast<double>(sm.routing_wall_ns()) * 1e-9;
  const double osm = opensm_s(size, engine);
  const double cpu_s = static_cast<double>(c1 - c0) * 1e-9;
  std::printf(
      "%6zu HCAs %5zu switches %-6s  bring-up CPU %6.3f s (OpenSM %5.1f s: 1/%.0f), wall %6.3f s "
      "(1/%.0f);"
      "  routing CPU %6.3f s (1/%.0f)  check CPU %6.3f s  virtual %7.3f ms\n",
      r.hcas, r.switches, routing::to_string(engine), cpu_s, osm, osm / cpu_s, whole_s,
      osm / whole_s, route_s, osm / route_s, static_cast<double>(sm.check_wall_ns()) * 1e-9,
      static_cast<double>(r.end_ns - r.start_ns) * 1e-6);
  std::printf(
      "       MADs: discovery %lu, LIDs/ports %lu, LFT %lu (%zu blocks), activation %lu, total %lu"
      " (retries %lu); SMA calls %lu\n",
      (unsigned long)r.of(sm::Phase::kDiscovery).mads_sent,
      (unsigned long)r.of(sm::Phase::kLidAssignment).mads_sent,
      (unsigned long)r.of(sm::Phase::kLftProgramming).mads_sent, r.lft_blocks_sent,
      (unsigned long)r.of(sm::Phase::kActivation).mads_sent, (unsigned long)r.total.mads_sent,
      (unsigned long)r.total.mads_retried, (unsigned long)fab.stats().sma_calls);
  std::printf(
      "       CPU per phase: discovery %.3f s, LIDs/ports %.3f s, routing+check %.3f s, LFT %.3f s,"
      " activation %.3f s\n",
      r.of(sm::Phase::kDiscovery).wall_ns * 1e-9, r.of(sm::Phase::kLidAssignment).wall_ns * 1e-9,
      r.of(sm::Phase::kRouting).wall_ns * 1e-9, r.of(sm::Phase::kLftProgramming).wall_ns * 1e-9,
      r.of(sm::Phase::kActivation).wall_ns * 1e-9);
  std::printf(
      "       memory: SM %.0f bytes/HCA (%.1f MB); emulated nodes %.1f MB; peak RSS %.1f MB\n",
      static_cast<double>(sm.memory_bytes()) / static_cast<double>(r.hcas), sm.memory_bytes() / 1e6,
      fab.memory_bytes() / 1e6, rss_peak_kb() / 1e3);
  std::fflush(stdout);
  return true;
}

// --fabric: the same bring-up over the emulated fabric (emu/fabric, timing-only data mode):
// SMPs through every switch's SMA and LFT as simulator events (sm::bring_up).
bool run_fabric(int size, routing::Engine engine) {
  const topo::Topology t = fabric_of(size);
  const std::uint64_t b0 = cpu_ns();
  sim::Simulator sim({.seed = 1});
  fabric::FabricConfig fc;
  fc.sm_managed = true;
  fc.mode = fabric::DataMode::kTimingOnly;
  fabric::Fabric f(sim, t, fc);
  const double build_s = static_cast<double>(cpu_ns() - b0) * 1e-9;
  sm::SmOptions o;
  o.sm.routing.engine = engine;
  o.sm.sweep_interval_ns = 0;
  o.sm.wall_clock_ns = cpu_ns;
  o.limit_ns = 3'600'000'000'000ull;
  const std::uint64_t c0 = cpu_ns();
  const sm::BringUpReport r = sm::bring_up(f, o);
  const double cpu_s = static_cast<double>(cpu_ns() - c0) * 1e-9;  // verify included
  const double up_cpu_s = static_cast<double>(r.sweep.total.wall_ns) * 1e-9;
  if (!r.ok) {
    std::printf("size %d %s over the fabric: FAILED: %s\n", size, routing::to_string(engine),
                r.error.c_str());
    return false;
  }
  const double osm = opensm_s(size, engine);
  const std::size_t hcas = r.sweep.hcas;
  std::printf(
      "%6zu HCAs %-6s over emu/fabric: bring-up wall %.3f s (OpenSM %.1f s: 1/%.0f), CPU incl. "
      "verify %.3f s, heavy-sweep CPU %.3f s (1/%.0f); virtual %.3f ms; MADs %lu, events %lu "
      "(%.1f per MAD), VL15 drops %lu; fabric build %.3f s\n",
      hcas, routing::to_string(engine), r.wall_s, osm, osm / r.wall_s, cpu_s, up_cpu_s,
      osm / up_cpu_s, r.virtual_ns * 1e-6, (unsigned long)r.mads, (unsigned long)r.events,
      static_cast<double>(r.events) / static_cast<double>(r.mads), (unsigned long)r.vl15_dropped,
      build_s);
  std::size_t tables = 0;
  for (topo::NodeId n = 0; n < t.node_count(); ++n) {
    const sma::NodeState& ns = f.node(n).state();
    tables += ns.lft.capacity() + ns.mft.capacity() * sizeof(ns.mft[0]);
  }
  std::printf("       fabric memory: switch LFT+MFT tables %.1f MB\n", tables / 1e6);
  std::printf(
      "       memory: fabric %.1f MB (%.0f bytes/HCA), SM %.1f MB (%.0f bytes/HCA), peak RSS "
      "%.1f MB (%.0f bytes/HCA)\n",
      f.memory_bytes() / 1e6, static_cast<double>(f.memory_bytes()) / hcas, r.sm_memory_bytes / 1e6,
      static_cast<double>(r.sm_memory_bytes) / hcas, rss_peak_kb() / 1e3,
      rss_peak_kb() * 1e3 / hcas);
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  bool over_fabric = false;
  std::vector<routing::Engine> engines{routing::Engine::kFtree, routing::Engine::kMinHop};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--engine=ftree") == 0)
      engines = {routing::Engine::kFtree};
    else if (std::strcmp(argv[i], "--engine=minhop") == 0)
      engines = {routing::Engine::kMinHop};
    else if (std::strcmp(argv[i], "--engine=both") == 0) {
    } else if (std::strcmp(argv[i], "--fabric") == 0) {
      over_fabric = true;
    } else
      sizes.push_back(std::atoi(argv[i]));
  }
  if (sizes.empty()) sizes = {0, 1, 2, 3};
  bool ok = true;
  for (int s : sizes) {
    if (s < 0 || s > 3) return 2;
    for (routing::Engine e : engines) ok = (over_fabric ? run_fabric(s, e) : run(s, e)) && ok;
  }
  return ok ? 0 : 1;
}
