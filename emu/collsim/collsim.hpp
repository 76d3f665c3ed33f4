// emu/collsim/collsim.hpp — collectives (src/coll) on an emulated GPU cluster in virtual time.
// Every GPU is one rank running a coll::Communicator over a ClusterTransport. Peers on the same
// node talk over the NVLink domain (a per-GPU egress and ingress port of nvl_Bps each way behind
// a non-blocking NVSwitch, latency nvl_latency); peers on other nodes over the NICs (one per GPU,
// nic_Bps each way; lane l of GPU g leaves through the NIC of GPU (g + l) mod G of its node and
// enters through (g' + l) mod G, as NCCL's channels spread over rails; rail switches and spines
// are non-blocking, a rail change adds spine_latency). The SM does not manage the NVLink domain.
// Reduction arithmetic costs reduce_Bps per GPU: a rank's sends posted after it reduced d bytes
// leave no earlier than d / reduce_Bps later.
// Messages are modelled whole (serialisation at the egress and ingress ports, cut-through), not
// as packets: this is the NIC-level model of the alpha-beta analysis, not the packet-level fabric.
// Thread-safety: single-threaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/coll/plan.hpp"
#include "src/coll/types.hpp"

namespace weft::collsim {

struct ClusterConfig {
  int nodes = 1;
  int gpus = 8;            // GPUs (ranks) per node
  double nvl_Bps = 450e9;  // per GPU, each way
  double nvl_latency_s = 0.5e-6;
  double nic_Bps = 50e9;        // per NIC, each way
  double nic_latency_s = 2e-6;  // HCA to HCA through the rail switch
  double spine_latency_s = 0.6e-6;
  double reduce_Bps = 2e12;  // reduction arithmetic per GPU; 0 = free
};

struct RunConfig {
  coll::CollKind kind = coll::CollKind::kAllReduce;
  coll::Algo algo = coll::Algo::kAuto;
  coll::DataType dtype = coll::DataType::kF32;
  coll::RedOp op = coll::RedOp::kSum;
  int channels = 1;
  std::size_t chunk_bytes = 1 << 20;
  std::uint32_t slots = 4;
  bool verify = true;  // full payload: every rank its own buffers, results checked
};

struct RunResult {
  std::size_t bytes = 0;                // nccl-tests' size column
  std::size_t count = 0;                // nccl-tests' count column (elements of `bytes`)
  coll::Algo algo = coll::Algo::kAuto;  // the algorithm that ran (auto resolved)
  double time_s = 0;
  double algbw = 0, busbw = 0;         // bytes per second
  std::optional<std::uint64_t> wrong;  // elements differing from the reference (verify only)
  std::optional<double> model_busbw;   // the alpha-beta model, where it covers the collective
  std::uint64_t messages = 0;
};

// Runs one collective of `bytes` (nccl-tests' size: the whole buffer for all-reduce, broadcast
// and reduce; size x per-rank count for reduce-scatter and all-gather; the per-rank send buffer
// for all-to-all). Returns an error sentence on bad arguments.
struct RunOutcome {
  std::optional<RunResult> result;
  std::string error;
};
RunOutcome run_collective(const ClusterConfig& cluster, const RunConfig& run, std::size_t bytes);

// nccl-tests' bus bandwidth factor for `kind` on n ranks.
double busbw_factor(coll::CollKind kind, int n);

std::optional<coll::CollKind> parse_kind(std::string_view s);
std::optional<coll::Algo> parse_algo(std::string_view s);
std::optional<coll::DataType> parse_dtype(std::string_view s);
std::optional<coll::RedOp> parse_op(std::string_view s);

}  // namespace weft::collsim
