// tests/collsim/collsim_test.cpp — emu/collsim (every collective and algorithm gives the
// reference result on a small cluster, the link model's bandwidths) and `weft sim --workload
// allreduce ...` end to end (the table's JSON, nccl-tests' busbw, ring2 beating a flat ring on
// rails, argument errors exiting 2).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "emu/collsim/collsim.hpp"
#include "src/coll/plan.hpp"
#include "tests/common/cli_run.hpp"

namespace weft::collsim {
namespace {

using coll::Algo;
using coll::CollKind;
using coll::DataType;
using coll::RedOp;

using weft::test_util::CliRun;

CliRun weft(const std::string& args) {
  return weft::test_util::run_command(std::string(WEFT_PATH) + " " + args);
}

nlohmann::json sim_json(const std::string& args) {
  const CliRun r = weft("sim " + args + " --json");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  if (r.status != 0) return {};
  return nlohmann::json::parse(r.out);
}

TEST(CollSim, EveryCollectiveAndAlgorithmMatchesTheReference) {
  // 3 nodes x 3 GPUs (odd, not a power of two), sizes not divisible by the rank count.
  const ClusterConfig c{.nodes = 3, .gpus = 3};
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                     CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllToAll}) {
    for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kRing2, Algo::kRing2Pipe, Algo::kTree,
                   Algo::kRhd, Algo::kDirect}) {
      if (!coll::supports(k, a)) continue;
      for (std::size_t bytes : {std::size_t{0}, std::size_t{36}, std::size_t{20004}}) {
        RunConfig run{.kind = k,
                      .algo = a,
                      .dtype = DataType::kBf16,
                      .op = RedOp::kSum,
                      .channels = 2,
                      .chunk_bytes = 4096};
        SCOPED_TRACE(std::string(coll::to_string(k)) + " " + std::string(coll::to_string(a)) + " " +
                     std::to_string(bytes));
        const auto o = run_collective(c, run, bytes);
        ASSERT_TRUE(o.result) << o.error;
        ASSERT_TRUE(o.result->wrong);
        EXPECT_EQ(*o.result->wrong, 0u);
        EXPECT_GE(o.result->time_s, 0.0);
      }
    }
  }
}

TEST(CollSim, EveryTypeAndOpMatchesTheReference) {
  const ClusterConfig c{.nodes = 2, .gpus = 3};
  for (DataType t : coll::kAllTypes) {
    for (RedOp op : coll::kAllOps) {
      RunConfig run{.kind = CollKind::kAllReduce,
                    .algo = Algo::kRing2Pipe,
                    .dtype = t,
                    .op = op,
                    .chunk_bytes = 4096};
      SCOPED_TRACE(std::string(coll::to_string(t)) + " " + std::string(coll::to_string(op)));
      const auto o = run_collective(c, run, 40000);
      ASSERT_TRUE(o.result) << o.error;
      EXPECT_EQ(o.result->wrong.value_or(1), 0u);
    }
  }
}

// Timing-only runs take plan_sim.hpp's engine; it is the Communicator path's model, so both
// give the same times (within 1 %; the tree below) and the same message count, for every
// collective and algorithm.
TEST(CollSim, PlanEngineMatchesTheCommunicatorPath) {
  for (const auto& [nodes, gpus] : {std::pair{2, 4}, std::pair{4, 2}}) {
    const ClusterConfig c{.nodes = nodes, .gpus = gpus};
    const struct {
      CollKind kind;
      Algo algo;
      int channels;
    } cases[] = {
        {CollKind::kAllReduce, Algo::kRing, 1},  {CollKind::kAllReduce, Algo::kRing, 2},
        {CollKind::kAllReduce, Algo::kRing2, 1}, {CollKind::kAllReduce, Algo::kRing2Pipe, 1},
        {CollKind::kAllReduce, Algo::kTree, 1},  {CollKind::kAllReduce, Algo::kRhd, 1},
        {CollKind::kAllReduce, Algo::kAuto, 1},  {CollKind::kReduceScatter, Algo::kRing, 2},
        {CollKind::kAllGather, Algo::kRing, 1},  {CollKind::kBroadcast, Algo::kTree, 1},
        {CollKind::kReduce, Algo::kRing, 1},     {CollKind::kAllToAll, Algo::kDirect, 1}};
    for (const auto& k : cases) {
      for (const std::size_t bytes : {std::size_t{96} << 10, std::size_t{3} << 20}) {
        RunConfig run{.kind = k.kind,
                      .algo = k.algo,
                      .dtype = DataType::kBf16,
                      .channels = k.channels,
                      .chunk_bytes = 256 << 10,
                      .verify = false};
        const auto plans = run_collective(c, run, bytes);
        run.plan_engine = false;
        const auto comms = run_collective(c, run, bytes);
        const std::string what = std::to_string(nodes) + "x" + std::to_string(gpus) + " " +
                                 std::string(coll::to_string(k.kind)) + " " +
                                 std::string(coll::to_string(k.algo)) + " x" +
                                 std::to_string(k.channels) + " " + std::to_string(bytes);
        ASSERT_TRUE(plans.result) << what << ": " << plans.error;
        ASSERT_TRUE(comms.result) << what << ": " << comms.error;
        // The tree differs by up to 3.1 % (faster) at 96 KiB, latency-bound: not explained yet
        // (the order in which a rank's up- and down-tree sends take its port?).
        const double tol = k.algo == Algo::kTree && bytes < (1u << 20) ? 0.04 : 0.01;
        EXPECT_NEAR(plans.result->time_s / comms.result->time_s, 1.0, tol) << what;
        EXPECT_EQ(plans.result->messages, comms.result->messages) << what;
        EXPECT_EQ(plans.result->algo, comms.result->algo) << what;
        EXPECT_EQ(plans.result->channels, comms.result->channels) << what;
      }
    }
  }
}

TEST(CollSim, FlatRingRunsAtTheNicRateAndChannelsSpreadOverRails) {
  // A large all-reduce on 2 x 4: one channel is bound by one NIC (50 GB/s), four channels by
  // four NICs; ring2 sends 1/g of the buffer over each rail.
  const ClusterConfig c{.nodes = 2, .gpus = 4, .nic_Bps = 50e9, .reduce_Bps = 0};
  RunConfig run{
      .kind = CollKind::kAllReduce, .algo = Algo::kRing, .dtype = DataType::kBf16, .verify = false};
  const std::size_t s = 64u << 20;
  const auto one = run_collective(c, run, s);
  ASSERT_TRUE(one.result) << one.error;
  EXPECT_NEAR(one.result->busbw / 50e9, 1.0, 0.05);
  EXPECT_FALSE(one.result->wrong);  // timing only: nothing checked
  run.channels = 4;
  const auto four = run_collective(c, run, s);
  ASSERT_TRUE(four.result) << four.error;
  EXPECT_NEAR(four.result->busbw / 200e9, 1.0, 0.08);
  // The model agrees with the link model at this size.
  ASSERT_TRUE(four.result->model_busbw);
  EXPECT_NEAR(four.result->busbw / *four.result->model_busbw, 1.0, 0.1);
}

// Issue 6's goal "every algorithm within 10 % of its model on uncongested runs", on a small
// rail cluster (2 x 4 and 4 x 2, calibrated NICs, default latencies and reduction rate) from
// 1 MiB (the range; at 64 KiB the model of ring2 and ring2-pipe is up to 25 % slow) to
// bandwidth-bound sizes, with small and large chunks: the step model
// (coll::model_allreduce_steps_s) against the link model.
TEST(CollSim, EveryAlgorithmIsWithinTenPercentOfItsModel) {
  for (const auto& [nodes, gpus] : {std::pair{2, 4}, std::pair{4, 2}}) {
    const std::string topo =
        "rail:nodes=" + std::to_string(nodes) + ",gpus=" + std::to_string(gpus) + ",spines=2";
    ClusterConfig c{.nodes = nodes, .gpus = gpus, .topology = topo};
    const auto cal = calibrate_nic(c.topology);
    ASSERT_TRUE(cal);
    c.nic_Bps = cal->nic_Bps;
    c.nic_latency_s = cal->nic_latency_s;
    const std::pair<Algo, int> algos[] = {{Algo::kRing, 1},
                                          {Algo::kRing, 4},
                                          {Algo::kRing2, 1},
                                          {Algo::kRing2Pipe, 1},
                                          {Algo::kTree, 1}};
    for (const auto& [algo, channels] : algos) {
      for (const std::size_t chunk : {std::size_t{64} << 10, std::size_t{1} << 20}) {
        for (const std::size_t bytes :
             {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
          RunConfig run{.kind = CollKind::kAllReduce,
                        .algo = algo,
                        .dtype = DataType::kBf16,
                        .channels = channels,
                        .chunk_bytes = chunk,
                        .verify = false,
                        // The model's switches are non-blocking (uncongested runs): so are
                        // these (the routes' shared spine links would slow ring x4 and tree).
                        .switch_links = false};
          const auto out = run_collective(c, run, bytes);
          ASSERT_TRUE(out.result) << out.error;
          ASSERT_TRUE(out.result->model_busbw);
          EXPECT_NEAR(out.result->busbw / *out.result->model_busbw, 1.0, 0.10)
              << topo << " " << coll::to_string(algo) << " x" << channels << " chunk " << chunk
              << " size " << bytes;
        }
      }
    }
  }
}

// Issue 6's goal: on 8 nodes x 8 GPUs with 8 rails, `auto` (algorithm and channel count) is
// within 5 % of the best of the algorithms at every size, from latency-bound to 64 MiB.
TEST(CollSim, AutoIsWithinFivePercentOfTheBestAlgorithmOnTheRailCluster) {
  ClusterConfig c{.nodes = 8, .gpus = 8};
  c.topology = "rail:nodes=8,gpus=8,spines=2";
  const auto cal = calibrate_nic(c.topology);
  ASSERT_TRUE(cal.has_value());
  c.nic_Bps = cal->nic_Bps;
  c.nic_latency_s = cal->nic_latency_s;
  const struct {
    Algo algo;
    int channels;
    std::size_t chunk;
  } cands[] = {{Algo::kRing, 1, 1 << 20},  {Algo::kRing, 8, 1 << 20},
               {Algo::kRing2, 1, 1 << 20}, {Algo::kRing2Pipe, 1, 4 << 20},
               {Algo::kTree, 1, 1 << 20},  {Algo::kRhd, 1, 1 << 20}};
  auto busbw = [&](Algo algo, int channels, std::size_t chunk, std::size_t bytes) {
    RunConfig run{.kind = CollKind::kAllReduce, .algo = algo, .dtype = DataType::kBf16};
    run.channels = channels;
    run.chunk_bytes = chunk;
    run.verify = false;
    const auto o = run_collective(c, run, bytes);
    EXPECT_TRUE(o.result.has_value()) << o.error;
    return o.result ? o.result->busbw : 0.0;
  };
  // Up to 64 MiB: larger timing-only buffers cost seconds under meson's MALLOC_PERTURB_ (which
  // fills them); the 512 MiB / 1 GiB crossover is in emu/collsim/README.md's figures.
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{8} << 20,
                            std::size_t{16} << 20, std::size_t{64} << 20}) {
    double best = 0;
    std::string table;
    for (const auto& k : cands) {
      const double b = busbw(k.algo, k.channels, k.chunk, bytes);
      best = std::max(best, b);
      table += std::string(coll::to_string(k.algo)) + " x" + std::to_string(k.channels) + " " +
               std::to_string(b / 1e9) + "; ";
    }
    const double got = busbw(Algo::kAuto, 1, 1 << 20, bytes);
    EXPECT_GE(got, 0.95 * best) << bytes << " B: auto " << got / 1e9 << " GB/s; " << table;
  }
}

TEST(CollSim, BusbwFactors) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kReduceScatter, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollKind::kBroadcast, 8), 1.0);
}

TEST(CollSimCli, EveryAlgorithmIsCorrectAndBusbwFollowsNcclTests) {
  for (const char* algo : {"ring", "ring2", "ring2-pipe", "tree", "rhd", "auto"}) {
    SCOPED_TRACE(algo);
    const auto j = sim_json(std::string("--workload allreduce --algo ") + algo +
                            " --topology rail:nodes=2,gpus=4 -b 8 -e 256K -f 8 --dtype bf16 "
                            "--op sum --channels 2 --chunk 16K");
    ASSERT_TRUE(j.contains("rows"));
    ASSERT_EQ(j["rows"].size(), 6u);  // 8 64 512 4K 32K 256K
    EXPECT_EQ(j["ranks"], 8);
    std::size_t size = 8;
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["size"], size);
      EXPECT_EQ(row["count"], size / 2);
      EXPECT_EQ(row["type"], "bfloat16");
      EXPECT_EQ(row["redop"], "sum");
      EXPECT_EQ(row["wrong"], 0);
      if (std::string(algo) != "auto") {
        EXPECT_EQ(row["algo"], algo);
      }
      const double t = row["time_us"], algbw = row["algbw"], busbw = row["busbw"];
      EXPECT_GT(t, 0.0);
      EXPECT_NEAR(algbw, static_cast<double>(size) / (t * 1e-6) / 1e9, 1e-9 + algbw * 1e-9);
      EXPECT_NEAR(busbw, algbw * 2 * 7 / 8, 1e-12 + busbw * 1e-9);
      const bool modelled = std::string(algo).starts_with("ring") || std::string(algo) == "tree";
      EXPECT_EQ(row["model_busbw"].is_number(), modelled) << row.dump();
      size *= 8;
    }
  }
}

TEST(CollSimCli, OtherCollectivesUseTheirBusbwFactor) {
  const std::pair<const char*, double> cases[] = {{"reducescatter", 7.0 / 8},
                                                  {"allgather", 7.0 / 8},
                                                  {"alltoall", 7.0 / 8},
                                                  {"broadcast", 1.0},
                                                  {"reduce", 1.0}};
  for (const auto& [w, f] : cases) {
    SCOPED_TRACE(w);
    const auto j = sim_json(std::string("--workload ") + w +
                            " --topology rail:nodes=2,gpus=4 -b 1K -e 64K -f 64 --dtype f32");
    ASSERT_EQ(j["rows"].size(), 2u);
    for (const auto& row : j["rows"]) {
      EXPECT_EQ(row["wrong"], 0);
      const double algbw = row["algbw"], busbw = row["busbw"];
      EXPECT_NEAR(busbw, algbw * f, 1e-12 + busbw * 1e-9);
    }
  }
}

TEST(CollSimCli, TwoStageRingBeatsTheFlatRingOnRails) {
  const std::string common =
      " --topology rail:nodes=2,gpus=4 -b 16M -e 16M --dtype bf16 --timing-only";
  const auto flat = sim_json("--workload allreduce --algo ring --channels 1" + common);
  const auto two = sim_json("--workload allreduce --algo ring2" + common);
  ASSERT_EQ(flat["rows"].size(), 1u);
  ASSERT_EQ(two["rows"].size(), 1u);
  EXPECT_TRUE(flat["rows"][0]["wrong"].is_null());  // timing only
  const double r = two["rows"][0]["busbw"].get<double>() / flat["rows"][0]["busbw"].get<double>();
  EXPECT_GT(r, 2.0) << flat.dump() << "\n" << two.dump();
}

TEST(CollSimCli, TheTableHasNcclTestsColumns) {
  const CliRun r = weft("sim --workload allreduce --topology rail:nodes=2,gpus=2 -b 1K -e 1K");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("size"), std::string::npos);
  EXPECT_NE(r.out.find("busbw"), std::string::npos);
  EXPECT_NE(r.out.find("#wrong"), std::string::npos);
  EXPECT_NE(r.out.find("        1024          256     float    sum"), std::string::npos) << r.out;
}

TEST(CollSimCli, BadInputExits2WithOneSentence) {
  const std::string t = " --topology rail:nodes=2,gpus=2";
  for (const std::string& args :
       {"--workload allreduce --algo fastest" + t, "--workload allreduce --dtype f8" + t,
        "--workload allreduce --op xor" + t, "--workload allreduce -b 8Q" + t,
        "--workload allreduce -b 1M -e 1K" + t, "--workload allreduce -f 1" + t,
        "--workload allreduce --channels 0" + t, "--workload reducescatter --algo ring2" + t,
        "--workload allreduce --chunk 1K" + t,
        std::string("--workload allreduce --topology rail:nodes=two")}) {
    SCOPED_TRACE(args);
    const CliRun r = weft("sim " + args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(r.out.rfind("weft sim: ", 0), 0u) << r.out;
  }
}

}  // namespace
}  // namespace weft::collsim
