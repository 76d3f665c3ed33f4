// tools/weft/cmd_collsim.hpp — the collective workloads of `weft sim` (emu/collsim):
//   weft sim --workload allreduce|reducescatter|allgather|broadcast|reduce|alltoall
//            --algo ring|ring2|ring2-pipe|tree|rhd|auto [--channels C] -b 8 -e 8G -f 2
//            --dtype bf16 --op sum --topology rail:nodes=4,gpus=8 [--json] [--timing-only]
//            [--fabric coarse|coarse-comm|packet]
//            [--event at=50us,action=link-down,link=rail00/p9 ...]
// prints nccl-tests' table (plus the alpha-beta model's busbw and measured/model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "emu/routing/routes.hpp"

namespace weft::cli {

struct CollSimArgs {
  std::string algo = "auto";
  int channels = 1;
  std::string minbytes = "8", maxbytes = "8", stepfactor = "2";
  std::string dtype = "float", op = "sum";
  std::string chunk = "1M";
  int slots = 4;          // inbox slots (credits) per connection
  double nvl_gbps = 450;  // GB/s per GPU each way
  double nvl_latency_us = 0.5;
  std::string nic_latency_us = "auto";  // us, or auto: the packet-level fabric's
  std::string nic_gbps = "auto";        // GB/s, or auto: the fabric's payload goodput
  std::string fabric = "coarse";        // coarse, coarse-comm (whole-message NIC model) or packet
  std::string timeout = "0";            // a collective failing after this virtual time (0: none)
  double reduce_gbps = 2000;            // GB/s per GPU; 0 = free
  std::string verify_limit = "2G";      // full payload while ranks x buffers stay under this
};

// The fault flags of `weft sim` (packet-level fabric only), its seed, and the subnet manager's
// routing (--engine, --lmc, --root; both models).
struct CollSimFaults {
  std::string faults_file;
  std::vector<std::string> fault_flags, event_flags;
  std::uint64_t seed = 1;
  routing::RoutingOptions routing{};
  int lmc = 0;
};

// Registers --algo, --channels, -b, -e, -f, --dtype, --op, --chunk, --nvl-bw, --nvl-latency,
// --nic-latency, --reduce-rate, --verify-limit, --nic-bw, --fabric, --timeout on `weft sim`.
void add_collsim_options(CLI::App* cmd, CollSimArgs& a);
bool is_coll_workload(const std::string& workload);
// "8", "64K", "8M", "8G" (binary multiples, as nccl-tests); nullopt when malformed.
std::optional<std::size_t> parse_size(const std::string& s);
// Runs the sweep and prints it; bad input prints one sentence and throws CLI::RuntimeError(2).
void run_collsim(const CollSimArgs& a, const std::string& topology, const std::string& workload,
                 bool json, bool timing_only, const CollSimFaults& faults = {});

}  // namespace weft::cli
