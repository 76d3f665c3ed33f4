// bench/routing/routing_bench.cpp — routing and validation time per engine on 36-port fat
// trees of 648, 2,268, 5,832 and 11,664 HCAs (emu/topo generators, the same port numbering as
// gen_fattree.py), and table memory per HCA.
//
// Baseline: OpenSM 3.3.23's time to SUBNET UP on ibsim for the same fabrics and engines
// (../shared/reference/anchors.md; measured on this kind of machine, not in this run — its
// routing phase is a part of that figure). The goal is routing in at most 1/5 of it;
// `vs_opensm` is our routing CPU time over OpenSM's whole bring-up (goal: under 0.2).
// Every routing is validated once (outside the timed loop) and the benchmark fails on a
// problem, so a figure is never printed for wrong tables.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>

#include "emu/routing/checker.hpp"
#include "emu/routing/routes.hpp"
#include "emu/routing/stats.hpp"
#include "emu/topo/generators.hpp"
#include "emu/topo/spec.hpp"

namespace {

using namespace weft::routing;
namespace topo = weft::topo;

struct Setup {
  Fabric fabric;
  LidMap lids;
  std::size_t hcas = 0;
};

// 0: 648 (2-level), 1: 2,268, 2: 5,832, 3: 11,664 (3-level), as in anchors.md.
const Setup& setup(int size) {
  static std::map<int, std::unique_ptr<Setup>> cache;
  auto& slot = cache[size];
  if (slot) return *slot;
  weft::topo::GenResult t = [&]() -> weft::topo::GenResult {
    if (size == 0) return topo::fat_tree_2({});
    topo::FatTree3Params p;
    p.pods = size == 1 ? 7 : size == 2 ? 18 : 36;
    p.cores_per_group = size == 1 ? 6 : size == 2 ? 9 : 18;
    return topo::fat_tree_3(p);
  }();
  if (!t.ok()) std::abort();
  slot = std::make_unique<Setup>();
  slot->fabric = Fabric::from_topology(*t);
  for (const auto& n : slot->fabric.nodes) slot->hcas += !n.is_switch;
  auto lids = assign_lids(slot->fabric);
  if (!lids.ok()) std::abort();
  slot->lids = std::move(lids).value();
  return *slot;
}

// OpenSM time to SUBNET UP, seconds (anchors.md), by size and engine.
double opensm_s(int size, Engine e) {
  static const double kTable[4][3] = {
      {1.9, 1.7, 2.1}, {11.3, 13.9, 10.8}, {31.6, 33.9, 28.0}, {92.6, 101.2, 71.8}};
  return kTable[size][e == Engine::kMinHop ? 0 : e == Engine::kUpDn ? 1 : 2];
}

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double max_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void BM_Route(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  const Engine e = static_cast<Engine>(state.range(1));
  const Setup& s = setup(size);
  std::optional<Routes> last;
  const double cpu0 = cpu_s();
  for (auto _ : state) {
    auto r = route(s.fabric, s.lids, {e, {}});
    if (!r.ok()) {
      state.SkipWithError(r.error().message.c_str());
      return;
    }
    last = std::move(r).value();
    benchmark::DoNotOptimize(last->lft.data());
  }
  const double route_cpu_s = (cpu_s() - cpu0) / static_cast<double>(state.iterations());
  CheckReport rep = check_routes(s.fabric, s.lids, *last);
  if (!rep.ok() || (e != Engine::kMinHop && rep.credit_loop)) {
    state.SkipWithError(rep.problems.empty() ? "check failed" : rep.problems[0].c_str());
    return;
  }
  RoutingStats st = routing_stats(s.fabric, s.lids, *last);
  state.counters["hcas"] = static_cast<double>(s.hcas);
  state.counters["hops_max"] = rep.hops_max;
  state.counters["hops_avg"] = rep.hops_avg;
  state.counters["sw_link_load_max"] = st.switch_links.max;
  state.counters["sw_link_load_avg"] = st.switch_links.avg;
  state.counters["up_spread_max"] = st.up_spread_max;
  state.counters["table_B_per_hca"] =
      static_cast<double>(last->memory_bytes()) / static_cast<double>(s.hcas);
  state.counters["max_rss_MB"] = max_rss_mb();
  state.counters["opensm_up_s"] = opensm_s(size, e);
  // CPU time, not wall: the machine is shared, and OpenSM's figure is its own process's.
  state.counters["vs_opensm"] = route_cpu_s / opensm_s(size, e);
  state.SetLabel(std::string(to_string(e)) + " " + std::to_string(s.hcas) + " HCAs");
}

void BM_Check(benchmark::State& state) {
  const int size = static_cast<int>(state.range(0));
  const Setup& s = setup(size);
  auto r = route(s.fabric, s.lids, {Engine::kFtree, {}});
  if (!r.ok()) std::abort();
  for (auto _ : state) {
    CheckReport rep = check_routes(s.fabric, s.lids, *r);
    if (!rep.ok()) state.SkipWithError(rep.problems[0].c_str());
    benchmark::DoNotOptimize(rep.hops_max);
    state.counters["cdg_channels"] = static_cast<double>(rep.cdg_channels);
    state.counters["cdg_edges"] = static_cast<double>(rep.cdg_edges);
  }
  state.counters["hcas"] = static_cast<double>(s.hcas);
  state.SetLabel("check (reachability, loops, CDG) of ftree, " + std::to_string(s.hcas) + " HCAs");
}

// DOR with dateline VLs on an 8x8x8 torus (512 switches, 2 HCAs each), checked with SL2VL.
void BM_DorTorus(benchmark::State& state) {
  static auto t = topo::from_spec("torus:dims=8x8x8,hosts=2");
  if (!t.ok()) std::abort();
  static const Fabric f = Fabric::from_topology(*t);
  static const LidMap lids = std::move(assign_lids(f)).value();
  std::optional<Routes> last;
  for (auto _ : state) {
    auto r = route(f, lids, {Engine::kDor, {}});
    if (!r.ok()) {
      state.SkipWithError(r.error().message.c_str());
      return;
    }
    last = std::move(r).value();
  }
  CheckReport rep = check_routes(f, lids, *last);
  if (!rep.ok() || rep.credit_loop)
    state.SkipWithError(rep.problems.empty() ? "check failed" : rep.problems[0].c_str());
  state.counters["hcas"] = 1024;
  state.counters["hops_max"] = rep.hops_max;
  state.counters["hops_avg"] = rep.hops_avg;
  state.counters["cdg_channels"] = static_cast<double>(rep.cdg_channels);
  state.counters["table_B_per_hca"] = static_cast<double>(last->memory_bytes()) / 1024.0;
  state.SetLabel("dor 8x8x8 torus, 1024 HCAs, 2 VLs");
}
void sizes_and_engines(benchmark::internal::Benchmark* b) {
  for (int size = 0; size < 4; ++size)
    for (Engine e : {Engine::kMinHop, Engine::kUpDn, Engine::kFtree})
      b->Args({size, static_cast<int>(e)});
}

BENCHMARK(BM_Route)->Apply(sizes_and_engines)->Unit(benchmark::kMillisecond)->MinTime(0.3);
BENCHMARK(BM_Check)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->MinTime(0.3);
// Last: its SL-aware check holds an edge list, which would inflate the others' max_rss_MB.
BENCHMARK(BM_DorTorus)->Unit(benchmark::kMillisecond)->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
