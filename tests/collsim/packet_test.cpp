// tests/collsim/packet_test.cpp — collectives whose inter-node traffic runs on the packet-level
// fabric (emu/fabric HCAs and switches brought up by the SM): exact results for every
// all-reduce algorithm and the other collectives, the coarse NIC model within 5 % of it, a
// link failing in the middle of an all-reduce (re-routed, retransmitted, still exact), a rank
// cut off (a named failure, no hang), and the CLI's --fabric packet with an --event.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "emu/collsim/collsim.hpp"
#include "emu/collsim/fabric_net.hpp"
#include "emu/collsim/switch_paths.hpp"
#include "emu/topo/spec.hpp"
#include "src/coll/plan.hpp"
#include "tests/common/cli_run.hpp"

namespace weft::collsim {
namespace {

using coll::Algo;
using coll::CollKind;
using coll::DataType;
using coll::RedOp;

constexpr const char* kRail22 = "rail:nodes=2,gpus=2,spines=1";

// A rail cluster whose coarse NIC is calibrated against the packet level (calibrate_nic).
ClusterConfig calibrated_rail(int nodes, int gpus, const std::string& spec) {
  ClusterConfig c{.nodes = nodes, .gpus = gpus, .topology = spec};
  const auto cal = calibrate_nic(spec);
  EXPECT_TRUE(cal) << spec;
  if (cal) {
    c.nic_Bps = cal->nic_Bps;
    c.nic_latency_s = cal->nic_latency_s;
  }
  return c;
}

ClusterConfig rail22() {
  return calibrated_rail(2, 2, kRail22);
}
ClusterConfig rail24() {
  return calibrated_rail(2, 4, "rail:nodes=2,gpus=4,spines=1");
}

// The same run on the coarse model and on the packet level.
struct CoarseAndPacket {
  RunOutcome coarse, packet;
};
CoarseAndPacket run_both(const ClusterConfig& c, RunConfig run, std::size_t bytes) {
  CoarseAndPacket r{run_collective(c, run, bytes), {}};
  run.packet = true;
  r.packet = run_collective(c, run, bytes);
  return r;
}
// Both ran, and the coarse time is within `tolerance` (a fraction) of the packet level's.
void expect_coarse_near_packet(const CoarseAndPacket& r, double tolerance) {
  ASSERT_TRUE(r.coarse.result) << r.coarse.error;
  ASSERT_TRUE(r.packet.result) << r.packet.error;
  EXPECT_NEAR(r.coarse.result->time_s / r.packet.result->time_s, 1.0, tolerance)
      << "coarse " << r.coarse.result->time_s << " s, packet " << r.packet.result->time_s << " s";
}

// The links of switch `name` that go to other switches (its uplinks), in port order.
std::vector<topo::LinkId> uplinks(const topo::Topology& t, const std::string& name) {
  std::vector<topo::LinkId> out;
  for (topo::NodeId i = 0; i < t.node_count(); ++i) {
    if (t.node(i).description != name) continue;
    for (int p = 1; p <= t.node(i).num_ports(); ++p) {
      const topo::LinkId l = t.node(i).ports[static_cast<std::size_t>(p)].link;
      if (l != topo::kNoLink && t.node(t.link(l).other(i).node).is_switch()) out.push_back(l);
    }
  }
  return out;
}

topo::LinkId hca_link(const topo::Topology& t, const std::string& name) {
  for (topo::NodeId i = 0; i < t.node_count(); ++i)
    if (t.node(i).description == name) return t.node(i).ports[1].link;
  return topo::kNoLink;
}

TEST(PacketFabric, EveryAllReduceAlgorithmIsExact) {
  const ClusterConfig c = rail22();
  for (Algo a : {Algo::kRing, Algo::kRing2, Algo::kRing2Pipe, Algo::kTree, Algo::kRhd}) {
    SCOPED_TRACE(std::string(coll::to_string(a)));
    RunConfig run{.kind = CollKind::kAllReduce,
                  .algo = a,
                  .dtype = DataType::kBf16,
                  .op = RedOp::kSum,
                  .channels = 2,
                  .chunk_bytes = 16384,
                  .packet = true};
    const auto o = run_collective(c, run, 200004);  // not a multiple of the rank count
    ASSERT_TRUE(o.result) << o.error;
    EXPECT_EQ(o.result->wrong.value_or(1), 0u);
    ASSERT_TRUE(o.result->fabric);
    EXPECT_GT(o.result->fabric->packets, 0u);
    EXPECT_GT(o.result->fabric->qps, 0u);
    EXPECT_EQ(o.result->fabric->discards, 0u);
  }
}

TEST(PacketFabric, OtherCollectivesAreExact) {
  const ClusterConfig c = rail22();
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
                     CollKind::kReduce, CollKind::kAllToAll}) {
    SCOPED_TRACE(std::string(coll::to_string(k)));
    RunConfig run{
        .kind = k, .dtype = DataType::kI32, .op = RedOp::kMax, .chunk_bytes = 8192, .packet = true};
    const auto o = run_collective(c, run, 65536 + 36);
    ASSERT_TRUE(o.result) << o.error;
    EXPECT_EQ(o.result->wrong.value_or(1), 0u);
  }
}

TEST(PacketFabric, CoarseModelIsWithinFivePercent) {
  // Timing only (so the coarse side runs on plan_sim.hpp's engine), 2 nodes x 4 GPUs, sizes
  // where bandwidth dominates.
  const ClusterConfig c = rail24();
  // Ring x2 and x4 too (x4 was 10 % fast before the ACKs' head-of-line blocking was modelled,
  // RingChannelsWaitBehindOtherFlowsControlPackets); not the tree (14-31 % fast here): its
  // runs carry a caveat (coarse_caveat; emu/collsim/README.md "Coarse against packet-level").
  for (auto [a, ch] :
       {std::pair{Algo::kRing, 1}, std::pair{Algo::kRing, 2}, std::pair{Algo::kRing, 4},
        std::pair{Algo::kRing2, 1}, std::pair{Algo::kRing2Pipe, 1}}) {
    SCOPED_TRACE(std::string(coll::to_string(a)) + " x" + std::to_string(ch));
    RunConfig run{.kind = CollKind::kAllReduce,
                  .algo = a,
                  .dtype = DataType::kBf16,
                  .channels = ch,
                  .chunk_bytes = 1 << 20,
                  .verify = false};
    const auto r = run_both(c, run, 8u << 20);
    expect_coarse_near_packet(r, 0.05);
    if (!r.coarse.result || !r.packet.result) continue;
    if (ch == 1) {
      EXPECT_EQ(r.coarse.result->coarse_caveat, "");
    }
    EXPECT_EQ(r.packet.result->coarse_caveat, "");
  }
}

// Ring x4 on 2 x 4 rails: every NIC sends one flow and receives another, so the ACKs and grants
// of the flow it receives go back through the switch inputs its own data takes, toward outputs
// busy with a third flow's data, and hold that data up (input-buffered switches); with x2 the
// ACKs leave by outputs without data. The coarse model slows exactly those flows and lands
// within 1 % of the packet level at 64 MiB (it was 10 % fast). Virtual times: deterministic.
TEST(PacketFabric, RingChannelsWaitBehindOtherFlowsControlPackets) {
  const ClusterConfig c = rail24();
  for (int ch : {2, 4}) {
    SCOPED_TRACE("ring x" + std::to_string(ch));
    RunConfig run{.kind = CollKind::kAllReduce,
                  .algo = Algo::kRing,
                  .dtype = DataType::kBf16,
                  .channels = ch,
                  .chunk_bytes = 1 << 20,
                  .verify = false};
    const auto r = run_both(c, run, 64u << 20);
    expect_coarse_near_packet(r, 0.02);
    // x4: each of the 8 inter-node flows (4 lanes, both node boundaries); x2: none.
    if (r.coarse.result) {
      EXPECT_EQ(r.coarse.result->flows_behind_control, ch == 4 ? 8 : 0);
    }
  }
}

// Double binary tree on 2 x 4 rails: a parent's NIC takes two children's chunks at once (incast)
// and most NICs send several flows (parent, children, the other tree). The coarse model
// interleaves a NIC's flows in pieces and holds the sending NIC's port while a piece waits at
// the receiver (credit back-pressure through the switches' input buffers, plan_sim.cpp); it
// stays within 5 % of the packet level here (8 MiB: within 2.5 %). Virtual times: deterministic.
TEST(PacketFabric, TreeIncastHoldsTheSendersPortWithinFivePercent) {
  const ClusterConfig c = rail24();
  RunConfig run{.kind = CollKind::kAllReduce,
                .algo = Algo::kTree,
                .dtype = DataType::kBf16,
                .chunk_bytes = 1 << 20,
                .verify = false};
  expect_coarse_near_packet(run_both(c, run, 8u << 20), 0.05);
}

// Ring x8 on the 64-GPU cluster (8 x 8 rails) at 16 MiB: 4 slots of 32 KiB per connection, so
// the packet level is bound by its credit loop, and its grants (zero-length SENDs) wait behind
// the data their HCA has pulled and behind the data streaming into the far HCA, which bunches
// the credits. The coarse model times its grants through the same pipelines (plan_sim.cpp
// grant_time; it was 11 % fast without) and runs the 8 lanes in lockstep (bundle_lanes).
// Virtual times: deterministic.
TEST(PacketFabric, RingX8CreditLoopOn64GpusWithinFivePercent) {
  const ClusterConfig c = calibrated_rail(8, 8, "rail:nodes=8,gpus=8,spines=2");
  RunConfig run{.kind = CollKind::kAllReduce,
                .algo = Algo::kRing,
                .dtype = DataType::kBf16,
                .channels = 8,
                .chunk_bytes = 1 << 20,
                .verify = false};
  expect_coarse_near_packet(run_both(c, run, 16u << 20), 0.05);
}

// All-to-all on 8 x 4 rails with one and two spines, under minhop and updn: every NIC sends 28
// flows at once, most of them across a spine. The coarse model books each piece's switch links
// and far ingress when the piece leaves its NIC, its NIC's flows taking turns on the port
// (plan_sim.cpp take_port_turn); before, the pieces queued on the egress port booked the links
// far ahead in post order and minhop read 3.6x the packet level (updn 1.3x) at 1 MiB. The packet
// level loses ~30 % of the NICs' rate to head-of-line blocking in its input-buffered switches,
// which the coarse model estimates since (plan_sim.cpp derate_head_of_line: 0.79-0.86 here
// before, 1.01-1.09 with it; README "Head-of-line blocking"). Virtual times: deterministic.
TEST(PacketFabric, AllToAllCoarseNearPacketOnRailsUnderMinhopAndUpdn) {
  for (const char* spec : {"rail:nodes=8,gpus=4,spines=2", "rail:nodes=8,gpus=4,spines=1"}) {
    ClusterConfig c = calibrated_rail(8, 4, spec);
    std::map<routing::Engine, double> coarse;
    for (const routing::Engine engine : {routing::Engine::kMinHop, routing::Engine::kUpDn}) {
      SCOPED_TRACE(std::string(spec) + " " + routing::to_string(engine));
      c.routing.engine = engine;
      RunConfig run{.kind = CollKind::kAllToAll, .dtype = DataType::kF32, .verify = false};
      const auto r = run_both(c, run, 1u << 20);
      expect_coarse_near_packet(r, 0.12);
      if (!r.coarse.result) continue;
      coarse[engine] = r.coarse.result->time_s;
      EXPECT_NE(r.coarse.result->coarse_caveat.find("direct alltoall within 12 % of"),
                std::string::npos)
          << r.coarse.result->coarse_caveat;
    }
    // The engines' difference is small on the packet level (5 % at 1 MiB): so it is on the
    // coarse model, not the 2.5x it read.
    EXPECT_NEAR(coarse[routing::Engine::kMinHop] / coarse[routing::Engine::kUpDn], 1.0, 0.1)
        << spec;
  }
}

// All-to-all on the 2-level fat tree (32 HCAs, one GPU each): the packet level's input-buffered
// switches lose ~40 % of the links' time to head-of-line blocking (every switch input serves
// several outputs), which the coarse model now estimates (plan_sim.cpp derate_head_of_line) for
// every flow its NIC sends from the start; it read 0.64 / 0.69 of the packet level's time at
// 1 / 4 MiB before. A ring sends one flow per NIC: no input serves two outputs, nothing slowed.
TEST(PacketFabric, AllToAllCoarseNearPacketOnAFatTreeWithHeadOfLineBlocking) {
  const std::string spec = "fat-tree:levels=2,radix=8";
  const ClusterConfig c = calibrated_rail(32, 1, spec);
  for (const std::size_t bytes : {std::size_t{1} << 20, std::size_t{4} << 20}) {
    SCOPED_TRACE(bytes);
    RunConfig run{.kind = CollKind::kAllToAll, .dtype = DataType::kF32, .verify = false};
    const auto r = run_both(c, run, bytes);
    expect_coarse_near_packet(r, 0.05);
    if (!r.coarse.result) continue;
    EXPECT_EQ(r.coarse.result->flows_head_of_line, 32 * 31);
    EXPECT_NE(r.coarse.result->coarse_caveat.find("direct alltoall within 7 % of"),
              std::string::npos)
        << r.coarse.result->coarse_caveat;
  }
  RunConfig ring{
      .kind = CollKind::kAllReduce, .algo = Algo::kRing, .dtype = DataType::kBf16, .verify = false};
  const auto o = run_collective(c, ring, 1u << 20);
  ASSERT_TRUE(o.result) << o.error;
  EXPECT_EQ(o.result->flows_head_of_line, 0);
}

// All-to-all of messages of one or a few packets on fat trees: every message brings an ACK and a
// credit grant back and the grant's ACK forward, each a head of its own in the switches' input
// FIFOs; a spine input whose head is blocked holds the leaf's uplink for credits (IBA 7.9); with
// 512 B per peer (radix 16 at 64 KiB) the HCA's transmit pipeline (16 packets behind a 400 ns
// DMA read) bounds what it injects. Without those terms the coarse model read 0.74 / 0.69 of the
// packet level's time on radix 8 at 64 / 256 KiB and 0.48 / 0.69 on radix 16 at 64 KiB / 4 MiB;
// now 0.98 / 0.93 and 0.80 / 0.85 (radix 16 is not understood yet: README "Control packets,
// credit back-pressure and the HCA's pipeline at the heads"). Rails keep their term bit for bit.
TEST(PacketFabric, AllToAllCoarseNearPacketOnFatTreesWithSmallMessages) {
  for (const auto& [spec, hcas, bytes, tolerance] :
       {std::tuple{"fat-tree:levels=2,radix=8", 32, std::size_t{64} << 10, 0.1},
        std::tuple{"fat-tree:levels=2,radix=8", 32, std::size_t{256} << 10, 0.1},
        std::tuple{"fat-tree:levels=2,radix=16", 128, std::size_t{64} << 10, 0.25},
        std::tuple{"fat-tree:levels=2,radix=16", 128, std::size_t{4} << 20, 0.2}}) {
    SCOPED_TRACE(std::string(spec) + " " + std::to_string(bytes));
    const ClusterConfig c = calibrated_rail(hcas, 1, spec);
    RunConfig run{.kind = CollKind::kAllToAll, .dtype = DataType::kF32, .verify = false};
    const auto r = run_both(c, run, bytes);
    expect_coarse_near_packet(r, tolerance);
    if (!r.coarse.result) continue;
    EXPECT_EQ(r.coarse.result->flows_head_of_line, hcas * (hcas - 1));
  }
}

// Where the coarse model is not known to be within 5 % of the packet level, a coarse run says
// so (the CLI prints it under the table, JSON `coarse_caveat`); the packet level never does.
TEST(PacketFabric, CoarseRunsOutsideTheCheckedCasesCarryACaveat) {
  const std::string spec = "rail:nodes=2,gpus=4,spines=1";
  const ClusterConfig c{.nodes = 2, .gpus = 4, .topology = spec};
  auto caveat = [&](Algo a, int ch, CollKind k, bool packet) {
    RunConfig run{.kind = k, .algo = a, .dtype = DataType::kBf16, .channels = ch, .verify = false};
    run.packet = packet;
    const auto o = run_collective(c, run, 1u << 20);
    EXPECT_TRUE(o.result) << o.error;
    return o.result ? o.result->coarse_caveat : std::string("no result");
  };
  EXPECT_NE(caveat(Algo::kRing, 4, CollKind::kAllReduce, false).find("ring x4 allreduce"),
            std::string::npos);
  EXPECT_NE(caveat(Algo::kTree, 1, CollKind::kAllReduce, false).find("--fabric packet"),
            std::string::npos);
  EXPECT_NE(caveat(Algo::kRing, 1, CollKind::kAllGather, false), "");
  EXPECT_EQ(caveat(Algo::kRing2, 1, CollKind::kAllReduce, false), "");
  EXPECT_EQ(caveat(Algo::kTree, 1, CollKind::kAllReduce, true), "");
  // The CLI prints it once under the table.
  const auto r = weft::test_util::run_command(
      std::string(WEFT_PATH) + " sim --workload allreduce --topology " + spec +
      " --algo tree -b 64K -e 256K -f 2 --dtype bf16 --timing-only");
  EXPECT_EQ(r.status, 0) << r.out;
  std::size_t n = 0;
  for (std::size_t at = r.out.find("#   warning: "); at != std::string::npos;
       at = r.out.find("#   warning: ", at + 1))
    ++n;
  EXPECT_EQ(n, 1u) << r.out;
}

// The coarse model's switch links are those the SM programs: for every pair of NICs on
// different nodes, SwitchPaths' route equals the walk through the LFTs of the fabric the SM
// brought up (switch-to-switch output ports, by name).
// For every routing engine the SM can run here (dor needs a torus), the coarse model's switch
// paths are the routes the SM programs over the fabric; and the engines do route differently
// (on 8 x 4 with two spines, minhop's and updn's paths differ), so the choice reaches both.
TEST(PacketFabric, SwitchPathsAreTheSubnetManagersRoutes) {
  for (const auto& [spec, nodes, gpus] : {std::tuple{"rail:nodes=4,gpus=2,spines=2", 4, 2},
                                          std::tuple{"rail:nodes=2,gpus=4,spines=1", 2, 4},
                                          std::tuple{"rail:nodes=4,gpus=4,spines=2,links=1", 4, 4},
                                          std::tuple{"rail:nodes=8,gpus=4,spines=2", 8, 4}}) {
    std::map<routing::Engine, std::vector<std::vector<std::string>>> paths;
    for (const routing::Engine engine :
         {routing::Engine::kMinHop, routing::Engine::kUpDn, routing::Engine::kFtree}) {
      SCOPED_TRACE(std::string(spec) + " " + routing::to_string(engine));
      FabricNetConfig fc;
      fc.topology = spec;
      fc.payload = false;
      fc.routing.engine = engine;
      auto net = FabricNet::create(fc, nodes, gpus);
      ASSERT_TRUE(net) << net.error();
      auto sp = SwitchPaths::create(spec, nodes, gpus, fc.routing);
      ASSERT_TRUE(sp) << sp.error();
      const topo::Topology& t = (*net)->topology();
      int crossing = 0;
      for (int a = 0; a < nodes * gpus; ++a) {
        for (int b = 0; b < nodes * gpus; ++b) {
          if (a / gpus == b / gpus) continue;
          const topo::NodeId dst = (*net)->hca_of(b);
          const std::uint16_t dlid = (*net)->fabric().node(dst).state().ports[1].lid;
          std::vector<std::string> want;
          auto at = t.peer(topo::PortRef{(*net)->hca_of(a), 1});
          ASSERT_TRUE(at);
          while (t.node(at->node).is_switch()) {
            const std::uint8_t port = (*net)->fabric().node(at->node).state().route(dlid);
            want.push_back(t.node(at->node).description + "/p" + std::to_string(port));
            at = t.peer(topo::PortRef{at->node, port});
            ASSERT_TRUE(at);
          }
          ASSERT_EQ(at->node, dst);
          want.pop_back();  // toward the destination HCA: its NIC's ingress port
          std::vector<std::uint32_t> ids;
          sp->path(a, b, ids);
          std::vector<std::string> got;
          for (std::uint32_t id : ids) got.push_back(sp->port_name(id));
          EXPECT_EQ(got, want) << a << " -> " << b;
          crossing += got.empty() ? 0 : 1;
          paths[engine].push_back(std::move(got));
        }
      }
      EXPECT_GT(crossing, 0);  // some routes cross a spine
    }
    if (std::string(spec) == "rail:nodes=8,gpus=4,spines=2") {
      EXPECT_NE(paths[routing::Engine::kMinHop], paths[routing::Engine::kUpDn]);
    }
  }
}

TEST(PacketFabric, LinkDownMidAllReduceIsReroutedAndExact) {
  // The flat ring crosses rails between nodes (GPU 1 of node 0 to GPU 0 of node 1), through
  // the spine over one of rail01's two uplinks. Each uplink fails in its own run at 20 us;
  // both runs finish with exact results, and the run that lost the used uplink shows the
  // SM's re-route in the fault log and takes at least one retransmission timeout longer.
  const ClusterConfig c = rail22();
  auto t = topo::from_spec(kRail22);
  ASSERT_TRUE(t);
  const auto ups = uplinks(*t, "rail01");
  ASSERT_EQ(ups.size(), 2u);
  RunConfig run{.kind = CollKind::kAllReduce,
                .algo = Algo::kRing,
                .dtype = DataType::kF32,
                .op = RedOp::kSum,
                .chunk_bytes = 65536,
                .packet = true,
                .seed = 7};
  const auto clean = run_collective(c, run, 4u << 20);
  ASSERT_TRUE(clean.result) << clean.error;
  double slowest = 0;
  bool rerouted = false;
  for (topo::LinkId l : ups) {
    run.faults = {};
    run.faults.events.push_back(
        faults::EventSpec{.at_ns = 20'000, .action = faults::Action::kLinkDown, .link = l});
    const auto o = run_collective(c, run, 4u << 20);
    ASSERT_TRUE(o.result) << o.error;
    EXPECT_EQ(o.result->wrong.value_or(1), 0u);
    ASSERT_TRUE(o.result->fabric);
    slowest = std::max(slowest, o.result->time_s);
    for (const auto& e : o.result->fabric->log)
      rerouted |= e.what.find("SM re-routed") != std::string::npos;
  }
  EXPECT_TRUE(rerouted);
  EXPECT_GT(slowest, clean.result->time_s + 0.5e-3) << "no retransmission timeout seen";
}

TEST(PacketFabric, RankCutOffFailsNamingIt) {
  // node001-hca0 (rank 2) loses its only link at 20 us: the collective fails on the
  // connection between ranks 1 and 2 (the flat ring's crossing), naming the HCA; no hang.
  const ClusterConfig c = rail22();
  auto t = topo::from_spec(kRail22);
  ASSERT_TRUE(t);
  RunConfig run{.kind = CollKind::kAllReduce,
                .algo = Algo::kRing,
                .dtype = DataType::kF32,
                .chunk_bytes = 65536,
                .packet = true};
  run.faults.events.push_back(faults::EventSpec{
      .at_ns = 20'000, .action = faults::Action::kLinkDown, .link = hca_link(*t, "node001-hca0")});
  const auto o = run_collective(c, run, 4u << 20);
  ASSERT_FALSE(o.result);
  EXPECT_EQ(std::min(o.failed_rank, o.failed_peer), 1) << o.error;
  EXPECT_EQ(std::max(o.failed_rank, o.failed_peer), 2) << o.error;
  EXPECT_NE(o.error.find("failed"), std::string::npos) << o.error;
  ASSERT_TRUE(o.fabric);
  EXPECT_FALSE(o.fabric->log.empty());
}

TEST(PacketFabric, CollectiveTimeoutNamesTheMissingPeer) {
  // The same cut-off with a 500 us collective deadline (shorter than the RC retries): a
  // timeout naming the rank still waited for.
  const ClusterConfig c = rail22();
  auto t = topo::from_spec(kRail22);
  ASSERT_TRUE(t);
  RunConfig run{.kind = CollKind::kAllReduce,
                .algo = Algo::kRing,
                .dtype = DataType::kF32,
                .chunk_bytes = 65536,
                .packet = true,
                .timeout_ns = 500'000};
  run.faults.events.push_back(faults::EventSpec{
      .at_ns = 20'000, .action = faults::Action::kLinkDown, .link = hca_link(*t, "node001-hca0")});
  const auto o = run_collective(c, run, 4u << 20);
  ASSERT_FALSE(o.result);
  EXPECT_NE(o.error.find("timed out waiting for rank"), std::string::npos) << o.error;
}

using Cli = weft::test_util::CliRun;

Cli weft_cli(const std::string& args) {
  return weft::test_util::run_command(std::string(WEFT_PATH) + " " + args);
}

TEST(PacketFabricCli, LinkDownIsLoggedAndACutOffRankExitsOne) {
  const std::string base = std::string("sim --workload allreduce --topology ") + kRail22 +
                           " --algo ring -b 1M -e 1M --chunk 64K --fabric packet ";
  const Cli ok = weft_cli(base + "--event at=20us,action=link-down,link=rail01/p3");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("packet-level fabric"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("fault log     20.000 us  link down: rail01/p3"), std::string::npos)
      << ok.out;
  const Cli cut = weft_cli(base + "--event at=20us,action=link-down,link=node001-hca0/p1");
  EXPECT_EQ(cut.status, 1) << cut.out;
  EXPECT_NE(cut.out.find("weft sim: rank "), std::string::npos) << cut.out;
  EXPECT_NE(cut.out.find("failed"), std::string::npos) << cut.out;
  const Cli coarse = weft_cli(std::string("sim --workload allreduce --topology ") + kRail22 +
                              " --event at=20us,action=link-down,link=rail01/p3");
  EXPECT_EQ(coarse.status, 2) << coarse.out;
  EXPECT_NE(coarse.out.find("need --fabric packet"), std::string::npos) << coarse.out;
}

// `weft sim --engine` on a collective workload: the coarse model's switch links follow the
// engine's routes (the double binary tree on 8 x 4 with two spines: minhop and updn put its
// flows on different spine links), the report names the engine, and what cannot apply is
// refused.
TEST(PacketFabric, CliRoutingEngine) {
  const std::string base =
      "sim --workload allreduce --algo tree --topology rail:nodes=8,gpus=4,spines=2 -b 4M -e 4M "
      "--timing-only --json ";
  const Cli minhop = weft_cli(base);
  const Cli updn = weft_cli(base + "--engine updn");
  ASSERT_EQ(minhop.status, 0) << minhop.out;
  ASSERT_EQ(updn.status, 0) << updn.out;
  const auto jm = nlohmann::json::parse(minhop.out), ju = nlohmann::json::parse(updn.out);
  EXPECT_EQ(jm["routing"], "minhop");
  EXPECT_EQ(ju["routing"], "updn");
  EXPECT_NE(jm["rows"][0]["time_us"].get<double>(), ju["rows"][0]["time_us"].get<double>());
  const Cli dor = weft_cli(base + "--engine dor");
  EXPECT_EQ(dor.status, 2) << dor.out;
  EXPECT_NE(dor.out.find("weft sim: --engine dor: routing: not a mesh or torus"), std::string::npos)
      << dor.out;
  const Cli sweep = weft_cli(base + "--sm-sweep 1s");
  EXPECT_EQ(sweep.status, 2) << sweep.out;
  EXPECT_NE(sweep.out.find("apply to the point-to-point workloads"), std::string::npos)
      << sweep.out;
}

}  // namespace
}  // namespace weft::collsim
