// tests/coll/model_test.cpp — the alpha-beta model's formulas on the issue's cluster (8 nodes x
// 8 GPUs, 400 Gb/s rails, 450 GB/s NVLink) and the `auto` selection table.
#include <gtest/gtest.h>

#include "src/coll/model.hpp"
#include "src/coll/plan.hpp"

namespace weft::coll {
namespace {

ModelParams issue_cluster() {
  ModelParams p;
  p.nodes = 8;
  p.gpus_per_node = 8;
  p.nvl_Bps = 450e9;
  p.nic_Bps = 50e9;
  p.alpha_s = 0;
  return p;
}

TEST(CollModel, Formulas) {
  const double S = 1 << 30;
  ModelParams p = issue_cluster();
  // Flat ring, one channel: the NIC alone.
  EXPECT_DOUBLE_EQ(model_allreduce_s(Algo::kRing, S, p), 2.0 * 63 / 64 * S / 50e9);
  // Eight channels: 8 x 50 GB/s = 400 GB/s, still below NVLink.
  p.channels = 8;
  EXPECT_DOUBLE_EQ(model_allreduce_s(Algo::kRing, S, p), 2.0 * 63 / 64 * S / 400e9);
  // Two-stage, stage by stage and pipelined.
  const double intra = 2.0 * 7 / 8 * S / 450e9, inter = 2.0 * 7 / 8 * (S / 8) / 50e9;
  EXPECT_DOUBLE_EQ(model_allreduce_s(Algo::kRing2, S, p), intra + inter);
  p.pipeline_pieces = 4;
  EXPECT_DOUBLE_EQ(model_allreduce_s(Algo::kRing2Pipe, S, p), inter + intra / 4);
  // The article's point: the two-stage ring beats the single flat ring by more than 4x.
  p.channels = 1;
  EXPECT_GT(model_allreduce_s(Algo::kRing, S, p) / model_allreduce_s(Algo::kRing2, S, p), 4.0);
  // Latency terms and busbw.
  p.alpha_s = 1e-6;
  EXPECT_DOUBLE_EQ(model_allreduce_s(Algo::kRing, 0, p), 2.0 * 63 * 1e-6);
  EXPECT_DOUBLE_EQ(allreduce_busbw(S, 1.0, 64), S * 2.0 * 63 / 64);
  EXPECT_EQ(allreduce_busbw(S, 1.0, 1), 0.0);
}

// The step model's terms (model.hpp): bandwidth, hop-latency chain and credit loop per step.
TEST(CollModel, StepModelTerms) {
  ModelParams p = issue_cluster();
  p.nic_Bps = 38.5e9;
  p.alpha_s = 1.17e-6;
  p.nvl_latency_s = 0.5e-6;
  p.spine_latency_s = 0.6e-6;
  p.chunk_bytes = 1 << 20;
  p.slots = 4;
  p.reduce_Bps = 2e12;
  // Large: the NIC bound alone (the reduction overlaps), 8 channels on 8 NICs.
  const double S = 4.0 * (1 << 30);
  p.channels = 8;
  EXPECT_NEAR(model_allreduce_steps_s(Algo::kRing, S, p) / (2.0 * 63 / 64 * S / (8 * 38.5e9)), 1.0,
              0.01);
  // Tiny: no bandwidth; the NIC hop's credit loop (data 1.77 us between rails + grant 1.17 us,
  // over 4 slots) is slower than the mean hop (8 NIC hops of 1.77, 56 NVLink hops of 0.5 us).
  p.channels = 1;
  const double credit = (1.77e-6 + 1.17e-6) / 4, chain = (8 * 1.77e-6 + 56 * 0.5e-6) / 64;
  ASSERT_GT(credit, chain);
  EXPECT_NEAR(model_allreduce_steps_s(Algo::kRing, 64, p), 126 * credit + 1.77e-6, 1e-8);
  // With 64 slots the chain binds.
  p.slots = 64;
  EXPECT_NEAR(model_allreduce_steps_s(Algo::kRing, 64, p), 126 * chain + 1.77e-6, 1e-8);
  // ring2 stage by stage: the phases add up; pipelined pieces cost less.
  p.slots = 4;
  p.pipeline_pieces = 16;
  EXPECT_LT(model_allreduce_steps_s(Algo::kRing2Pipe, S, p),
            model_allreduce_steps_s(Algo::kRing2, S, p));
  // Tree: bandwidth-bound at the NIC's 4 chunks per chunk step (an interior GPU's 3 and its
  // neighbour's lane-1 leaf chunk): S/2 x 4 / B_nic.
  EXPECT_NEAR(model_allreduce_steps_s(Algo::kTree, S, p) / (S / 2 * 4 / 38.5e9), 1.0, 0.01);
}

TEST(CollPlan, AutoSelection) {
  const Topology flat{1}, nodes{8};
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 1 << 10, 64, nodes), Algo::kRhd);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 256 << 10, 64, nodes), Algo::kRhd);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 512 << 10, 64, nodes), Algo::kRing2);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 8 << 20, 64, nodes), Algo::kRing2);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 64 << 20, 64, nodes), Algo::kRing2Pipe);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 512 << 10, 64, flat), Algo::kTree);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 64 << 20, 64, flat), Algo::kRing);
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 64 << 20, 8, nodes), Algo::kRing);  // one node
  EXPECT_EQ(select_algo(CollKind::kAllReduce, 1 << 10, 2, flat), Algo::kRing);
  EXPECT_EQ(select_algo(CollKind::kBroadcast, 1 << 10, 8, flat), Algo::kTree);
  EXPECT_EQ(select_algo(CollKind::kReduce, 1 << 20, 8, flat), Algo::kRing);
  EXPECT_EQ(select_algo(CollKind::kAllToAll, 1 << 20, 8, flat), Algo::kDirect);
}

TEST(CollPlan, AutoChoosesOneRingPerNicWhereTheFlatRingLeads) {
  const Topology nodes{8}, flat{1};
  auto pick = [](std::size_t bytes, const Topology& t, int lanes, int channels = 1) {
    const AutoChoice c = select_auto(CollKind::kAllReduce, bytes, 64, t, lanes, channels);
    return std::pair(c.algo, c.channels);
  };
  // 16 MiB .. 512 MiB on 8 x 8: the flat ring with one channel per NIC (lanes permitting).
  EXPECT_EQ(pick(16 << 20, nodes, 16), std::pair(Algo::kRing, 8));
  EXPECT_EQ(pick(std::size_t{512} << 20, nodes, 8), std::pair(Algo::kRing, 8));
  EXPECT_EQ(pick(64 << 20, nodes, 4), std::pair(Algo::kRing, 4));
  EXPECT_EQ(pick(64 << 20, nodes, 1), std::pair(Algo::kRing2Pipe, 1));  // one lane: no rails
  // Elsewhere the caller's channels stay.
  EXPECT_EQ(pick(8 << 20, nodes, 16, 3), std::pair(Algo::kRing2, 3));
  EXPECT_EQ(pick(std::size_t{1} << 30, nodes, 16, 2), std::pair(Algo::kRing2Pipe, 2));
  EXPECT_EQ(pick(64 << 20, flat, 16, 2), std::pair(Algo::kRing, 2));
  // The plan records what ran.
  std::vector<std::uint8_t> buf(64 << 20);
  CollArgs a{.send = buf.data(),
             .recv = buf.data(),
             .count = buf.size() / 2,
             .dtype = DataType::kBf16,
             .algo = Algo::kAuto,
             .chunk_bytes = 1 << 20};
  const auto plan = build_plan(a, 0, 64, 16, nodes);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->algo, Algo::kRing);
  EXPECT_EQ(plan->channels, 8);
  for (const auto& op : plan->ops) EXPECT_LT(op.lane, 8);
}

TEST(CollPlan, RingPlanShape) {
  // 4 ranks, 8 elements, one channel, no chunking: 3 reduce-scatter and 3 all-gather steps,
  // one send and one receive each, to rank+1 and from rank-1, plus the copy in -> out.
  CollArgs a;
  a.count = 8;
  a.algo = Algo::kRing;
  a.chunk_bytes = 0;
  int x = 0;
  a.send = &x;
  a.recv = &x + 1;
  auto plan = build_plan(a, 1, 4, 1, Topology{});
  ASSERT_TRUE(plan.ok());
  int sends = 0, recvs = 0, copies = 0;
  for (const PlanOp& op : plan->ops) {
    if (op.kind == PlanOp::Kind::kSend) {
      ++sends;
      EXPECT_EQ(op.peer, 2);
      EXPECT_EQ(op.bytes, 8u);
    } else if (op.kind == PlanOp::Kind::kRecv) {
      ++recvs;
      EXPECT_EQ(op.peer, 0);
    } else {
      ++copies;
    }
  }
  EXPECT_EQ(sends, 6);
  EXPECT_EQ(recvs, 6);
  EXPECT_EQ(copies, 1);
  // The first three receives reduce, the last three copy.
  int k = 0;
  for (const PlanOp& op : plan->ops) {
    if (op.kind == PlanOp::Kind::kRecv) {
      EXPECT_EQ(op.reduce, k++ < 3);
    }
  }
}

}  // namespace
}  // namespace weft::coll
