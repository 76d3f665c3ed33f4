// emu/collsim/collsim.hpp — collectives (src/coll) on an emulated GPU cluster in virtual time.
// Every GPU is one rank running a coll::Communicator over a ClusterTransport. Peers on the same
// node talk over the NVLink domain (a per-GPU egress and ingress port of nvl_Bps each way behind
// a non-blocking NVSwitch, latency nvl_latency); peers on other nodes over the NICs (one per GPU,
// nic_Bps each way; lane l of GPU g leaves through the NIC of GPU (g + l) mod G of its node and
// enters through (g' + l) mod G, as NCCL's channels spread over rails; rail switches and spines
// are non-blocking, a rail change adds spine_latency). The SM does not manage the NVLink domain.
// Reduction arithmetic costs reduce_Bps per GPU: a rank's sends posted after it reduced d bytes
// leave no earlier than d / reduce_Bps later.
// Messages are modelled whole (serialisation at the egress and ingress ports, cut-through): the
// NIC-level ("coarse") model of the alpha-beta analysis. With RunConfig::packet the inter-node
// traffic runs on the packet-level fabric instead (fabric_net.hpp: emu/fabric, the SM, faults).
// Thread-safety: single-threaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "emu/faults/injector.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/routing/routes.hpp"
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
  // Packet-level fabric (RunConfig::packet): the emu/topo spec whose NVLink domains are the
  // nodes (rail:nodes=N,gpus=G,spines=S); each GPU's NIC is one of its HCAs.
  std::string topology;
  // How the subnet manager routes `topology` (both models: the packet-level fabric's SM and
  // the coarse model's switch links, switch_paths.hpp): engine, updn roots, LMC.
  routing::RoutingOptions routing{};
  int lmc = 0;
};

// The coarse model's NIC parameters for a packet-level fabric built from `topology` with the
// default FabricConfig and a 4 KiB path MTU: payload goodput of one HCA link (rate x payload /
// FEC line bytes of a full packet) and one NIC-to-NIC latency through a switch.
struct NicCalibration {
  double nic_Bps = 0;
  double nic_latency_s = 0;
};
std::optional<NicCalibration> calibrate_nic(const std::string& topology);

struct RunConfig {
  coll::CollKind kind = coll::CollKind::kAllReduce;
  coll::Algo algo = coll::Algo::kAuto;
  coll::DataType dtype = coll::DataType::kF32;
  coll::RedOp op = coll::RedOp::kSum;
  int channels = 1;
  std::size_t chunk_bytes = 1 << 20;
  std::uint32_t slots = 4;
  bool verify = true;  // full payload: every rank its own buffers, results checked
  // Inter-node traffic on emu/fabric (real QPs, packets through switches under credit flow
  // control, the SM) instead of the whole-message NIC model. Needs ClusterConfig::topology.
  bool packet = false;
  faults::Scenario faults;  // packet only: applied when the collective starts
  std::uint64_t seed = 1;   // packet only: the Simulator's seed
  TimeNs timeout_ns = 0;    // CollArgs::timeout_ns (0 = none)
  double stall_s = 1.0;     // packet only: no rank progressing this long = an error
  // Timing only (verify false) on the coarse model: run the plans on plan_sim.hpp's engine
  // (the same model, 4-7x less CPU at 64 GPUs) instead of a Communicator per rank over
  // ClusterTransport.
  bool plan_engine = true;
  // Plan engine with ClusterConfig::topology: messages between NICs also pass the switch links
  // of the subnet manager's routes (switch_paths.hpp), shared by the flows routed over them.
  // false = switches non-blocking (the model before; the Communicator path still is).
  bool switch_links = true;
};

// What the packet-level fabric did during a run.
struct FabricInfo {
  std::uint64_t events = 0;   // Simulator events (the SM's bring-up excluded)
  std::uint64_t packets = 0;  // data packets delivered to HCAs
  std::uint64_t qps = 0;
  std::uint64_t discards = 0;  // PortXmitDiscards + injected drops over every port
  double sm_bringup_virtual_s = 0;
  std::uint64_t sm_mads = 0;
  std::uint32_t reroutes = 0;  // heavy sweeps the SM finished during the run
  std::uint64_t traps = 0;
  std::vector<faults::LogEntry> log;  // the fault log (injected events, SM re-routes), times
                                      // from the collective's start
};

struct RunResult {
  std::size_t bytes = 0;                // nccl-tests' size column
  std::size_t count = 0;                // nccl-tests' count column (elements of `bytes`)
  coll::Algo algo = coll::Algo::kAuto;  // the algorithm that ran (auto resolved)
  int channels = 1;                     // the channels it used (auto resolved)
  double time_s = 0;
  double algbw = 0, busbw = 0;         // bytes per second
  std::optional<std::uint64_t> wrong;  // elements differing from the reference (verify only)
  std::optional<double> model_busbw;   // the alpha-beta model, where it covers the collective
  std::uint64_t messages = 0;
  double wall_s = 0;  // host time of the simulation (setup excluded)
  // Its CPU time (std::clock; the simulation is single-threaded): what a loaded machine's
  // scheduler does not inflate, so speed ratios are taken on it.
  double cpu_s = 0;
  std::optional<FabricInfo> fabric;  // packet-level runs
  // Plan engine with switch links: the most connections routed over one switch-to-switch port
  // (0 = none crosses a switch link, 1 = no two share one).
  int max_flows_per_switch_port = 0;
  // Plan engine with switch links: the flows slowed by other flows' ACKs and grants blocking a
  // switch input ahead of their data (plan_sim.cpp derate_behind_control_packets).
  int flows_behind_control = 0;
  // Plan engine with switch links: the flows slowed by data head-of-line blocking in switch
  // inputs that serve several outputs (plan_sim.cpp derate_head_of_line).
  int flows_head_of_line = 0;
  // Coarse runs outside the cases where the coarse model was measured within 5 % of the
  // packet-level fabric (coarse_caveat): why its time may be off. Empty otherwise.
  std::string coarse_caveat;
};

// Runs one collective of `bytes` (nccl-tests' size: the whole buffer for all-reduce, broadcast
// and reduce; size x per-rank count for reduce-scatter and all-gather; the per-rank send buffer
// for all-to-all). Returns an error sentence on bad arguments.
// A collective that fails (a rank cut off, a timeout) gives `error` naming the rank and peer,
// and, on the packet-level fabric, `fabric` with the fault log.
struct RunOutcome {
  std::optional<RunResult> result;
  std::string error;
  int failed_rank = -1, failed_peer = -1;
  std::optional<FabricInfo> fabric;
};
RunOutcome run_collective(const ClusterConfig& cluster, const RunConfig& run, std::size_t bytes);

// Empty when the coarse model (RunConfig::packet false) is known to be within 5 % of the
// packet-level fabric for this collective, algorithm and channel count (what ran, auto
// resolved) on this cluster — measured by bench/coll/coarse_vs_packet.sh on 8 x 8 rail and
// tests/collsim PacketFabric.CoarseModelIsWithinFivePercent on 2 x 4 (README "Coarse against
// packet-level"); otherwise one sentence saying it is not, for the CLI to print next to the
// table (a timing-only run of 64+ GPUs cannot fall back to the packet level in useful time).
std::string coarse_caveat(const ClusterConfig& cluster, const RunConfig& run, coll::Algo algo,
                          int channels);

// nccl-tests' bus bandwidth factor for `kind` on n ranks.
double busbw_factor(coll::CollKind kind, int n);

std::optional<coll::CollKind> parse_kind(std::string_view s);
std::optional<coll::Algo> parse_algo(std::string_view s);
std::optional<coll::DataType> parse_dtype(std::string_view s);
std::optional<coll::RedOp> parse_op(std::string_view s);

}  // namespace weft::collsim
