// tests/collsim/train_test.cpp — the training-step workload (emu/collsim/train.hpp): the model
// file's errors, the step's arithmetic (compute, bubble, buckets overlapping the backward
// pass), and `weft sim --workload train:FILE --json` on the shipped 7B example.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "emu/collsim/train.hpp"

namespace weft::collsim {
namespace {

TrainModel parse_ok(const std::string& text) {
  std::string err;
  const auto m = parse_train_model(text, "m.toml", err);
  EXPECT_TRUE(m) << err;
  return m.value_or(TrainModel{});
}

std::string parse_err(const std::string& text) {
  std::string err;
  EXPECT_FALSE(parse_train_model(text, "m.toml", err));
  return err;
}

TEST(Train, ModelFileErrorsNameTheLine) {
  EXPECT_EQ(parse_err("dp = 2\ncolour = 3\n[[layers]]\nparams = 1\nflops = 1\n"),
            "m.toml:2: unknown key \"colour\"");
  EXPECT_EQ(parse_err("dp = 0\n"), "m.toml:1: \"dp\" must be a whole number of at least 1");
  EXPECT_EQ(parse_err("bucket = \"25X\"\n"), "m.toml:1: \"bucket\" must be a size such as \"25M\"");
  EXPECT_EQ(parse_err("dp = 2\n"), "m.toml: the model has no [[layers]]");
  EXPECT_EQ(parse_err("[[layers]]\nparams = 5\n"),
            "m.toml:1: a [[layers]] entry needs params and flops");
  EXPECT_EQ(parse_err("tp = 2\n[[layers]]\nparams = 5\nflops = 1\n"),
            "m.toml: tensor or pipeline parallelism needs tokens and hidden (activation sizes)");
  EXPECT_NE(parse_err("dp = [\n").find("m.toml:"), std::string::npos);
}

TEST(Train, DataParallelOnlyStepIsComputePlusExposedBuckets) {
  // 2 nodes x 1 GPU, 4 layers of 8 MiB of f32 gradients, 4 MiB buckets: one bucket per layer,
  // the first three hidden behind the backward pass of the layers below them.
  const TrainModel m = parse_ok(
      "name = \"toy\"\ngpu_flops = 1e12\ndtype = \"f32\"\ndp = 2\nbucket = \"4M\"\n"
      "[[layers]]\ncount = 4\nparams = 2097152\nflops = 1e10\n");
  const ClusterConfig c{.nodes = 2, .gpus = 1, .nic_Bps = 50e9, .reduce_Bps = 0};
  const auto o = run_train(c, RunConfig{}, m);
  ASSERT_TRUE(o.report) << o.error;
  const TrainReport& r = *o.report;
  EXPECT_DOUBLE_EQ(r.forward_s, 4 * 1e10 / 1e12);
  EXPECT_DOUBLE_EQ(r.compute_s, 3 * r.forward_s);
  EXPECT_EQ(r.bubble_s, 0);
  ASSERT_EQ(r.buckets.size(), 4u);
  for (const Bucket& b : r.buckets) EXPECT_EQ(b.bytes, 8u << 20);
  EXPECT_DOUBLE_EQ(r.buckets[0].ready_s, r.forward_s + 2 * 1e10 / 1e12);
  EXPECT_DOUBLE_EQ(r.buckets[3].ready_s, r.compute_s);
  EXPECT_GT(r.dp_comm_s, 0);
  EXPECT_NEAR(r.step_s, r.compute_s + r.dp_exposed_s, 1e-12);
  EXPECT_NEAR(r.dp_exposed_s, r.buckets[3].end_s - r.buckets[3].start_s, 1e-9);  // the last one
  EXPECT_EQ(r.tp_comm_s, 0);
  EXPECT_NEAR(r.exposed_comm_s, r.dp_exposed_s, 1e-12);
}

TEST(Train, TensorAndPipelineParallelism) {
  const TrainModel m = parse_ok(
      "gpu_flops = 1e12\ndp = 2\ntp = 2\npp = 2\nmicrobatches = 4\ntokens = 4096\nhidden = 256\n"
      "[[layers]]\ncount = 4\nparams = 1e6\nflops = 1e10\n");
  const ClusterConfig c{.nodes = 4, .gpus = 2, .reduce_Bps = 0};
  const auto o = run_train(c, RunConfig{}, m);
  ASSERT_TRUE(o.report) << o.error;
  const TrainReport& r = *o.report;
  EXPECT_EQ(r.tp_collectives, 4 * 2 * 4);  // 4 per layer, 2 layers per stage, 4 microbatches
  EXPECT_EQ(r.tp_bytes, 1024u * 256 * 2);
  EXPECT_GT(r.tp_comm_s, 0);
  EXPECT_GT(r.pp_comm_s, 0);
  // The bubble is (pp - 1) microbatch slots of a stage.
  EXPECT_NEAR(r.bubble_s, (r.compute_s + r.tp_comm_s + r.pp_comm_s) / 4, 1e-12);
  EXPECT_EQ(r.dp_nodes, 2);
  EXPECT_EQ(r.dp_gpus, 1);
  EXPECT_GE(r.step_s, r.compute_s + r.bubble_s + r.tp_comm_s);

  const ClusterConfig wrong{.nodes = 2, .gpus = 2};
  EXPECT_EQ(run_train(wrong, RunConfig{}, m).error, "dp x tp x pp = 8 GPUs, but the cluster has 4");
  const ClusterConfig narrow{.nodes = 8, .gpus = 1};
  EXPECT_NE(run_train(narrow, RunConfig{}, m).error.find("must divide"), std::string::npos);
}

TEST(TrainCli, SevenBillionExampleReportsTheStep) {
  const std::string cmd = std::string(WEFT_PATH) + " sim --workload train:" + EXAMPLES_DIR +
                          "/dense-7b.toml --topology rail:nodes=8,gpus=8 --json 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["model"], "dense-7b");
  EXPECT_EQ(j["dp"], 8);
  EXPECT_GT(j["step_ms"].get<double>(), j["compute_ms"].get<double>());
  EXPECT_GT(j["tp_comm_ms"].get<double>(), 0);
  EXPECT_GT(j["dp_comm_ms"].get<double>(), j["dp_exposed_ms"].get<double>());
  EXPECT_NEAR(j["exposed_comm_ms"].get<double>(),
              j["tp_comm_ms"].get<double>() + j["dp_exposed_ms"].get<double>(), 1e-6);
  EXPECT_EQ(j["buckets"].size(), 34u);
}

}  // namespace
}  // namespace weft::collsim
