// bench/fabric/fabric_bench.cpp — simulation speed of the emulated fabric: data packets
// delivered per wall-clock second on one core.
//
//   BM_TwoHcaWrite/mode/ber_exp   two HCAs back to back (one 4x NDR link, as ns-3's p2p
//                                 baseline has one link), an RC RDMA WRITE stream of 64 KiB
//                                 messages, 1 KiB MTU, ACKs as the Device makes them, FEC 8+2 on.
//                                 mode 0 = verified (packets materialized, ICRC/VCRC computed
//                                 and checked), 1 = timing-only. ber_exp 0 = BER 0 (the default:
//                                 no draws, FEC never has to decode), else BER 10^-ber_exp (each
//                                 packet is FEC-encoded, bits drawn, decoded).
//   BM_FatTreeK8AllToAll          the k=8 fat tree (128 hosts, 80 switches), every host writing
//                                 4 KiB to every other host, timing-only.
// The ns-3 baseline (0.165 M packets/s in the brief; /work/shared/tools/anchors/ns3_bench) is
// printed as a ratio: counter `vs_ns3`.
#include <benchmark/benchmark.h>

#include <cmath>

#include "emu/fabric/fabric.hpp"
#include "emu/fabric/workload.hpp"
#include "emu/topo/generators.hpp"

namespace weft::fabric {
namespace {

constexpr double kNs3PacketsPerS = 0.165e6;

void BM_TwoHcaWrite(benchmark::State& state) {
  topo::Topology t;
  const auto a = t.add_hca(0x100, 1, "a"), b = t.add_hca(0x200, 1, "b");
  t.connect({a, 1}, {b, 1});
  sim::Simulator sim({.seed = 1});
  FabricConfig cfg;
  cfg.mode = state.range(0) == 0 ? DataMode::kVerified : DataMode::kTimingOnly;
  cfg.link.ber = state.range(1) == 0 ? 0.0 : std::pow(10.0, -static_cast<double>(state.range(1)));
  Fabric f(sim, t, cfg);
  f.configure_min_hop();
  RcEndpoint ea = make_endpoint(f, a, 65536), eb = make_endpoint(f, b, 65536);
  if (connect_rc(f, ea, eb) != Errc::kOk) {
    state.SkipWithError("connect");
    return;
  }
  std::vector<WriteStream> st{{&ea, &eb, 65536, 8}};
  run_streams(f, st, 10'000, 5000);  // warm up
  const std::uint64_t p0 = f.data_packets_delivered();
  const TimeNs v0 = sim.now();
  for (auto _ : state) {
    run_streams(f, st, sim.now() + 1'000'000, 5000);  // 1 ms of virtual time
  }
  const auto packets = static_cast<double>(f.data_packets_delivered() - p0);
  state.SetItemsProcessed(static_cast<std::int64_t>(packets));
  state.counters["pkts_per_s"] = benchmark::Counter(packets, benchmark::Counter::kIsRate);
  state.counters["vs_ns3"] =
      benchmark::Counter(packets / kNs3PacketsPerS, benchmark::Counter::kIsRate);
  state.counters["virtual_gbps"] =
      static_cast<double>(st[0].bytes_completed) * 8 / static_cast<double>(sim.now() - v0 + 10'000);
  state.counters["events_per_pkt"] = static_cast<double>(sim.events_dispatched()) / packets;
}
BENCHMARK(BM_TwoHcaWrite)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 12})
    ->Args({1, 12})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

void BM_FatTreeK8AllToAll(benchmark::State& state) {
  topo::FatTree3Params p;
  p.radix = 8;
  p.pods = 8;
  p.leaves_per_pod = 4;
  p.hosts_per_leaf = 4;
  p.aggs_per_pod = 4;
  p.cores_per_group = 4;
  auto g = topo::fat_tree_3(p);
  if (!g) {
    state.SkipWithError("fat_tree_3");
    return;
  }
  const topo::Topology& t = *g;
  sim::Simulator sim({.seed = 1});
  FabricConfig cfg;
  cfg.mode = DataMode::kTimingOnly;
  Fabric f(sim, t, cfg);
  f.configure_min_hop();
  const auto hosts = f.hcas();
  const std::size_t n = hosts.size();
  RcConnectParams cp;
  cp.wr_max = 8;
  cp.cq_depth = 64;
  std::vector<RcEndpoint> eps;
  eps.reserve(n * (n - 1) * 2);
  std::vector<WriteStream> st;
  st.reserve(n * (n - 1));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      eps.push_back(make_endpoint(f, hosts[i], 4096, cp));
      eps.push_back(make_endpoint(f, hosts[j], 4096, cp));
      if (connect_rc(f, eps[eps.size() - 2], eps.back(), cp) != Errc::kOk) {
        state.SkipWithError("connect");
        return;
      }
      st.push_back({&eps[eps.size() - 2], &eps.back(), 4096, 1});
    }
  }
  const std::uint64_t p0 = f.data_packets_delivered();
  for (auto _ : state) {
    run_streams(f, st, sim.now() + 100'000, 5000);  // 100 us of virtual time
  }
  const auto packets = static_cast<double>(f.data_packets_delivered() - p0);
  state.SetItemsProcessed(static_cast<std::int64_t>(packets));
  state.counters["pkts_per_s"] = benchmark::Counter(packets, benchmark::Counter::kIsRate);
  state.counters["hosts"] = static_cast<double>(n);
  state.counters["overflows"] = static_cast<double>(f.totals().buffer_overflows);
}
BENCHMARK(BM_FatTreeK8AllToAll)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace weft::fabric

BENCHMARK_MAIN();
