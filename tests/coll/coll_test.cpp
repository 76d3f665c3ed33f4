// tests/coll/coll_test.cpp — the collectives on 1..9 ranks in the harness Sim (full mesh of
// 100 Gb/s links): every (collective, algorithm) pair with a seeded (type, op, size) sample,
// back to back on one cluster per rank count; zero size, in place, odd sizes; deterministic
// replay; a lossy mesh (drops, reordering) with exact results; virtual-time busbw of the ring
// against the alpha-beta model. WEFT_COLL_LONG=1 runs the whole type x op matrix (suite long).
#include <cstdlib>

#include <gtest/gtest.h>

#include "src/coll/model.hpp"
#include "tests/coll/check.hpp"

namespace weft::coll::test {
namespace {

bool long_run() {
  const char* v = std::getenv("WEFT_COLL_LONG");
  return v != nullptr && v[0] == '1';
}

int ranks_per_node_for(int n) {
  for (int g : {4, 3, 2}) {
    if (n % g == 0 && n / g > 1) return g;
  }
  return 1;
}

void matrix(int n, std::uint64_t seed, int lanes = 2, std::uint32_t slots = 4) {
  ClusterConfig cc;
  cc.ranks = n;
  cc.lanes = lanes;
  cc.slots = slots;
  cc.ranks_per_node = ranks_per_node_for(n);
  cc.seed = seed;
  Cluster cl(cc);
  ASSERT_TRUE(cl.ok());
  SeededRng pick(seed * 31 + static_cast<std::uint64_t>(n));
  const std::size_t kChunks[] = {1024, 4096, 65536};
  for (const auto& [kind, algo] : all_pairs()) {
    std::vector<std::pair<DataType, RedOp>> combos;
    if (long_run()) {
      for (DataType t : kAllTypes) {
        for (RedOp op : kAllOps) combos.emplace_back(t, op);
      }
    } else {
      for (int k = 0; k < 3; ++k) {
        combos.emplace_back(kAllTypes[pick.below(std::size(kAllTypes))],
                            kAllOps[pick.below(std::size(kAllOps))]);
      }
    }
    for (const auto& [t, op] : combos) {
      Case c;
      c.kind = kind;
      c.algo = algo;
      c.dtype = t;
      c.op = op;
      c.count = 1 + pick.below(long_run() ? 20000 : 3000);  // mostly not divisible by n
      c.root = static_cast<int>(pick.below(static_cast<std::uint64_t>(n)));
      c.channels = 1 + static_cast<int>(pick.below(2));
      c.chunk_bytes = kChunks[pick.below(3)];
      c.in_place = kind != CollKind::kAllToAll && kind != CollKind::kSendRecv && pick.chance(0.3);
      c.seed = pick.next_u64() % 100000;
      ASSERT_TRUE(run_case(cl, n, c)) << "ranks=" << n << " cluster seed=" << seed;
    }
  }
}

class CollMatrix : public ::testing::TestWithParam<int> {};

TEST_P(CollMatrix, EveryCollectiveAndAlgorithm) {
  matrix(GetParam(), 1);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollMatrix, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9));

// One lane and one slot per connection: every chunk waits for the previous one's grant, and
// channels and pipeline stages share one ordered connection — still correct, never stuck.
TEST(Coll, OneLaneOneSlot) {
  for (int n : {3, 6, 8}) matrix(n, 7, 1, 1);
}

TEST(Coll, ZeroSizeCompletesWithoutTraffic) {
  ClusterConfig cc;
  cc.ranks = 5;
  Cluster cl(cc);
  for (const auto& [kind, algo] : all_pairs()) {
    Case c;
    c.kind = kind;
    c.algo = algo;
    c.count = 0;
    ASSERT_TRUE(run_case(cl, 5, c));
  }
  EXPECT_EQ(cl.comm(0).stats().chunks_sent, 0u);
}

TEST(Coll, InPlaceAndOddSizesEveryAlgorithm) {
  ClusterConfig cc;
  cc.ranks = 6;
  cc.ranks_per_node = 3;
  Cluster cl(cc);
  for (const auto& [kind, algo] : all_pairs()) {
    for (std::size_t count : {1, 5, 7, 1021}) {
      Case c;
      c.kind = kind;
      c.algo = algo;
      c.dtype = DataType::kI32;
      c.count = count;
      c.root = 5;
      c.in_place = kind != CollKind::kAllToAll && kind != CollKind::kSendRecv;
      ASSERT_TRUE(run_case(cl, 6, c));
    }
  }
}

TEST(Coll, EveryTypeAndOpOnTheRing) {
  ClusterConfig cc;
  cc.ranks = 3;
  Cluster cl(cc);
  for (DataType t : kAllTypes) {
    for (RedOp op : kAllOps) {
      Case c;
      c.algo = Algo::kRing;
      c.dtype = t;
      c.op = op;
      c.count = 777;
      ASSERT_TRUE(run_case(cl, 3, c));
    }
  }
}

TEST(Coll, UnsupportedAndInvalidCallsStartNothing) {
  ClusterConfig cc;
  cc.ranks = 2;
  Cluster cl(cc);
  std::vector<float> a(4), b(8);
  CollArgs args;
  args.kind = CollKind::kAllGather;
  args.algo = Algo::kTree;
  args.send = a.data();
  args.recv = b.data();
  args.count = 4;
  EXPECT_EQ(cl.comm(0).start(args), CollErrc::kUnsupported);
  args.kind = CollKind::kBroadcast;
  args.root = 2;
  args.algo = Algo::kAuto;
  EXPECT_EQ(cl.comm(0).start(args), CollErrc::kInvalidArgument);
  args.kind = CollKind::kAllToAll;
  args.root = 0;
  args.recv = a.data();
  args.send = a.data();
  args.count = 2;
  EXPECT_EQ(cl.comm(0).start(args), CollErrc::kInvalidArgument);  // all-to-all is never in place
  args.kind = CollKind::kSendRecv;
  args.send_peer = args.recv_peer = 1;
  EXPECT_EQ(cl.comm(0).start(args), CollErrc::kInvalidArgument);  // nor is a send/recv pair
  EXPECT_EQ(cl.comm(0).state(), CollState::kIdle);
}

// A rank cut off entirely (every packet to and from it lost): nothing hangs; its ring neighbours
// fail naming it — the sender by retry exhaustion (kTransport), the receiver by the
// collective's timeout (kTimeout) — and every rank reports kFailed.
TEST(Coll, CutOffRankFailsNamingIt) {
  ClusterConfig cc;
  cc.ranks = 4;
  cc.timeout = 4;  // 65 us x 8 tries: the QP gives up after ~0.5 ms
  Cluster cl(cc);
  for (int peer : {0, 1, 3}) {
    for (auto [a, b] : {std::pair{peer, 2}, std::pair{2, peer}}) {
      cl.sim().link(a, b)->mutable_config().blackouts.push_back({0, 10'000'000'000ULL});
    }
  }
  std::vector<std::vector<std::int32_t>> bufs(4, std::vector<std::int32_t>(100000, 1));
  std::vector<CollArgs> args(4);
  for (int r = 0; r < 4; ++r) {
    args[r].kind = CollKind::kAllReduce;
    args[r].algo = Algo::kRing;
    args[r].dtype = DataType::kI32;
    args[r].send = args[r].recv = bufs[r].data();
    args[r].count = bufs[r].size();
    args[r].timeout_ns = 5'000'000;
  }
  const RunResult res = cl.run(args);
  ASSERT_TRUE(res.finished);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res.states[r], CollState::kFailed) << r;
  EXPECT_EQ(cl.comm(1).failure(), CollErrc::kTransport);
  EXPECT_EQ(cl.comm(1).failed_peer(), 2);
  EXPECT_EQ(cl.comm(3).failure(), CollErrc::kTimeout);
  EXPECT_EQ(cl.comm(3).failed_peer(), 2);
  EXPECT_LE(res.elapsed_ns, 5'000'000u + 1000);
}

// Runs a fixed workload and returns (trace hash, virtual end time). The hash covers every packet
// event's kind, time, endpoints and size, not its bytes: RETH addresses are the run's heap
// pointers, which differ between two runs in one process.
std::pair<std::uint64_t, TimeNs> traced_run(std::uint64_t seed, double drop) {
  ClusterConfig cc;
  cc.ranks = 5;
  cc.seed = seed;
  cc.link.drop = drop;
  cc.link.reorder = drop > 0 ? 0.02 : 0.0;
  Cluster cl(cc);
  harness::TraceHash hash;
  cl.sim().set_trace(
      [&](const harness::TraceRecord& t) {
        hash.add_u64(static_cast<std::uint64_t>(t.kind));
        hash.add_u64(t.time_ns);
        hash.add_u64(static_cast<std::uint64_t>(t.src_device * 1000 + t.dst_device));
        hash.add_u64(t.wire.size());
      },
      false);
  Case c;
  c.algo = Algo::kRing;
  c.dtype = DataType::kI64;
  c.count = 5000;
  c.seed = seed;
  EXPECT_TRUE(run_case(cl, 5, c));
  c.algo = Algo::kTree;
  EXPECT_TRUE(run_case(cl, 5, c));
  return {hash.value(), cl.sim().now()};
}

TEST(Coll, DeterministicReplay) {
  for (std::uint64_t seed : {1, 2, 3}) {
    const auto a = traced_run(seed, 0.01), b = traced_run(seed, 0.01);
    EXPECT_EQ(a.first, b.first) << "seed=" << seed;
    EXPECT_EQ(a.second, b.second) << "seed=" << seed;
  }
  EXPECT_NE(traced_run(1, 0.01).first, traced_run(2, 0.01).first);
}

TEST(Coll, LossyMeshStillExact) {
  for (RecoveryMode mode : {RecoveryMode::kGoBackN, RecoveryMode::kSelectiveRepeat}) {
    for (std::uint64_t seed = 1; seed <= 2; ++seed) {
      ClusterConfig cc;
      cc.ranks = 6;
      cc.ranks_per_node = 3;
      cc.seed = seed;
      cc.recovery = mode;
      cc.timeout = 6;  // 262 us: losses cost a few RTOs, not the test's time
      cc.link.drop = 0.02;
      cc.link.reorder = 0.05;
      cc.link.duplicate = 0.01;
      Cluster cl(cc);
      for (Algo algo : {Algo::kRing, Algo::kRing2Pipe, Algo::kTree, Algo::kRhd}) {
        Case c;
        c.algo = algo;
        c.dtype = DataType::kI32;
        c.count = 20000;
        c.channels = 2;
        c.seed = seed;
        ASSERT_TRUE(run_case(cl, 6, c)) << "seed=" << seed;
      }
      std::uint64_t dropped = 0;
      for (int a = 0; a < 6; ++a) {
        for (int b = 0; b < 6; ++b) {
          if (a != b) dropped += cl.sim().link(a, b)->stats().dropped;
        }
      }
      EXPECT_GT(dropped, 10u) << "seed=" << seed;  // the faults really happened
    }
  }
}

// Virtual-time bus bandwidth of the flat ring against the alpha-beta model on the same links:
// 8 ranks, 100 Gb/s, 1 us latency, 4 KiB MTU. The model has no header overhead and no ACK
// turnaround, so measured busbw sits a few percent below it.
TEST(Coll, RingBusbwMatchesModel) {
  ClusterConfig cc;
  cc.ranks = 8;
  cc.slots = 8;
  cc.slot_bytes = 64 * 1024;
  cc.link.latency_ns = 1000;
  cc.link.rate_mbps = 100'000;
  Cluster cl(cc);
  ModelParams mp;
  mp.nodes = 8;
  mp.gpus_per_node = 1;
  mp.nic_Bps = mp.nvl_Bps = 100e9 / 8;
  mp.alpha_s = 1.5e-6;  // link latency + the last packet's serialization per step
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{2} << 20}) {
    Case c;
    c.algo = Algo::kRing;
    c.dtype = DataType::kF32;
    c.count = bytes / 4;
    c.chunk_bytes = 256 * 1024;
    TimeNs t = 0;
    ASSERT_TRUE(run_case(cl, 8, c, &t));
    const double s = static_cast<double>(t) * 1e-9;
    const double busbw = allreduce_busbw(static_cast<double>(bytes), s, 8);
    const double model =
        allreduce_busbw(static_cast<double>(bytes),
                        model_allreduce_s(Algo::kRing, static_cast<double>(bytes), mp), 8);
    std::printf(
        "ring allreduce 8 ranks %zu B: %.1f us, busbw %.2f GB/s, model %.2f GB/s, ratio %.3f\n",
        bytes, s * 1e6, busbw / 1e9, model / 1e9, busbw / model);
    EXPECT_GT(busbw / model, 0.90) << bytes;
    EXPECT_LT(busbw / model, 1.05) << bytes;
  }
}

// Virtual time of every all-reduce algorithm on 8 ranks (2 "nodes" of 4; the harness mesh has
// one uniform 100 Gb/s link per pair, so there is no NVLink/NIC contrast here) — figures for the
// notes, run in suite long only.
TEST(Coll, AlgorithmTable) {
  if (!long_run()) GTEST_SKIP() << "WEFT_COLL_LONG=1 runs it";
  ClusterConfig cc;
  cc.ranks = 8;
  cc.ranks_per_node = 4;
  cc.slots = 8;
  cc.slot_bytes = 64 * 1024;
  Cluster cl(cc);
  for (std::size_t bytes :
       {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{4} << 20}) {
    for (auto [algo, ch] :
         {std::pair{Algo::kRing, 1}, std::pair{Algo::kRing, 2}, std::pair{Algo::kRing2, 1},
          std::pair{Algo::kRing2Pipe, 1}, std::pair{Algo::kTree, 1}, std::pair{Algo::kRhd, 1},
          std::pair{Algo::kAuto, 1}}) {
      Case c;
      c.algo = algo;
      c.channels = ch;
      c.dtype = DataType::kF32;
      c.count = bytes / 4;
      c.chunk_bytes = 128 * 1024;
      TimeNs t = 0;
      ASSERT_TRUE(run_case(cl, 8, c, &t));
      std::printf(
          "allreduce %8zu B %-10s c=%d %9.1f us busbw %6.2f GB/s\n", bytes,
          std::string(to_string(algo)).c_str(), ch, static_cast<double>(t) / 1e3,
          allreduce_busbw(static_cast<double>(bytes), static_cast<double>(t) * 1e-9, 8) / 1e9);
    }
  }
}

}  // namespace
}  // namespace weft::coll::test
