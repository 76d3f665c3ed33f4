// emu/collsim/train.hpp — one training step of a dense model on the emulated GPU cluster
// (`weft sim --workload train:FILE`): the modeled forward and backward passes, tensor-parallel
// collectives inside nodes on the critical path, and the data-parallel gradient all-reduce in
// buckets overlapped with the backward pass. Every collective's time comes from run_collective
// (timing only) on the group's own cluster shape; each distinct one is simulated once.
//
// The model file (TOML; emu/collsim/README.md "Training step" has every key):
//   name = "dense-7b"        gpu_flops = 400e12     dtype = "bf16"
//   dp = 8   tp = 8   pp = 1   microbatches = 8     bucket = "25M"
//   tokens = 65536           # per data-parallel replica per step
//   hidden = 4096            # activation width (tensor-parallel and pipeline traffic)
//   tp_comm = "allreduce"    # or "sequence": all-gather + reduce-scatter (sequence parallel)
//   [[layers]]  count = 32  params = 202_375_168  flops = 2.65e13   # forward FLOPs per layer
//                                                                   # for the replica's tokens
// Rank layout: tensor-parallel index fastest (inside a node), then data-parallel, then pipeline
// stage. Errors are one sentence (with the file's line where it applies).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "emu/collsim/collsim.hpp"

namespace weft::collsim {

struct LayerSpec {
  int count = 1;
  double params = 0;  // parameters of one layer (before the tensor-parallel split)
  double flops = 0;   // forward FLOPs of one layer for one replica's tokens of a step
};

struct TrainModel {
  std::string name;
  double gpu_flops = 400e12;  // achieved FLOP/s per GPU
  coll::DataType dtype = coll::DataType::kBf16;
  int dp = 1, tp = 1, pp = 1, microbatches = 1;
  std::size_t bucket_bytes = 25u << 20;
  double tokens = 0, hidden = 0;
  bool sequence_parallel = false;
  std::vector<LayerSpec> layers;
};

std::optional<TrainModel> parse_train_model(const std::string& toml_text, const std::string& file,
                                            std::string& error);

struct Bucket {
  std::size_t bytes = 0;
  double ready_s = 0, start_s = 0, end_s = 0;
};

struct TrainReport {
  double step_s = 0;
  double compute_s = 0;  // forward + backward of the busiest stage incl. the pipeline bubble
  double forward_s = 0, backward_s = 0, bubble_s = 0;
  double tp_comm_s = 0;       // tensor-parallel collectives (on the critical path: all exposed)
  double pp_comm_s = 0;       // pipeline sends of activations and gradients (exposed)
  double dp_comm_s = 0;       // gradient all-reduces, busy time of the communication stream
  double dp_exposed_s = 0;    // the part of it after the backward pass ended
  double comm_s = 0;          // tp + pp + dp
  double exposed_comm_s = 0;  // tp + pp + dp_exposed
  int tp_collectives = 0;
  std::size_t tp_bytes = 0;  // of one tensor-parallel collective
  coll::Algo dp_algo = coll::Algo::kAuto;
  int dp_nodes = 0, dp_gpus = 0;
  std::vector<Bucket> buckets;
  int simulations = 0;  // distinct collectives simulated
};

// Runs the step on `cluster` (nodes x gpus must equal dp x tp x pp, tp must divide gpus).
// `run` gives the data-parallel all-reduce's algorithm, channels and chunk (its kind, dtype and
// verify are set here); tensor-parallel collectives use auto.
struct TrainOutcome {
  std::optional<TrainReport> report;
  std::string error;
};
TrainOutcome run_train(const ClusterConfig& cluster, const RunConfig& run, const TrainModel& m);

}  // namespace weft::collsim
