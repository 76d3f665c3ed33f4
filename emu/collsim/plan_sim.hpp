// emu/collsim/plan_sim.hpp — the coarse (NIC-level) model run straight on the ranks' plans, for
// timing-only runs: no Communicator, Transport, inbox or byte moves, one event queue.
//
// It is the same model as the Communicators over ClusterTransport (collsim.cpp) — the same
// ports (hop_of), whole-message serialisation and cut-through, per-(peer, lane) credits of
// `slots` inbox slots returned once a chunk is applied, chunks of at most slot_bytes, the same
// byte-range dependencies between a rank's operations, the reduction arithmetic delaying a
// rank's later writes — but its state is flat arrays indexed by connection and operation, and
// an event wakes only the connection it concerns instead of every rank polling all of its
// connections. That is what made the Communicator path slow at 64 GPUs (per message: a poll,
// a pass over every active connection, deque nodes, a heap entry per event of each kind).
// Ties between ranks posting at the same instant may be served in another order than there,
// so times can differ from the Communicator path in the last digits.
// Thread-safety: values only (one call runs one simulation).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "emu/collsim/collsim.hpp"
#include "emu/collsim/switch_paths.hpp"
#include "src/coll/plan.hpp"

namespace weft::collsim {

// One transfer's path from `from` to `to` on lane `lane`: the egress and ingress port (NVLink
// ports are per GPU; NIC ports per NIC: lane l of GPU g uses the NIC of GPU (g + l) mod G),
// the rate and the latency (a rail change adds the spine's).
struct Hop {
  bool nvlink = false;
  int egress = 0, ingress = 0;  // GPU index (NVLink) or NIC index (node x G + GPU)
  double rate_Bps = 0;
  double latency_s = 0;
};
Hop hop_of(const ClusterConfig& c, int from, int to, int lane);

struct PlanSimResult {
  double time_s = 0;           // the last rank's finish (its reduction arithmetic included)
  std::uint64_t messages = 0;  // chunk writes and credit grants, as the Communicator path counts
  std::uint64_t events = 0;    // events the queue delivered
  // With switch paths: the most connections whose route crosses one switch port (1 = no two
  // flows share a switch link), and that port ("spine000/p3").
  int max_flows_per_switch_port = 0;
  std::string busiest_switch_port;
  // With switch paths: the flows (connections with data between NICs) slowed by the head-of-line
  // blocking of other flows' ACKs and grants in a switch input (plan_sim.cpp).
  int flows_behind_control = 0;
  // With switch paths: the flows slowed by data head-of-line blocking in the switch inputs
  // they cross (plan_sim.cpp derate_head_of_line), more than by the above.
  int flows_head_of_line = 0;
};

// Runs plans[r] as rank r's program on `c` (n = plans.size() ranks). The ranks' buffers are
// taken as distinct (run_collective never runs in place). lanes, slots and slot_bytes are the
// transport's (ClusterTransport's). The constructor is the setup (connections, dependencies);
// run() the simulation, once. Asserts that every plan is matched by its peers' plans.
// With `paths` (not null), a message between NICs also passes the switch-to-switch output ports
// of its route (switch_paths.hpp), each serialising it whole as the NIC ports do, so flows the
// routes put on one link share its bandwidth; without, switches are non-blocking.
class PlanSim {
 public:
  PlanSim(const ClusterConfig& c, std::span<const coll::Plan> plans, int lanes, std::uint32_t slots,
          std::uint32_t slot_bytes, const SwitchPaths* paths = nullptr);
  ~PlanSim();
  PlanSim(const PlanSim&) = delete;
  PlanSim& operator=(const PlanSim&) = delete;
  PlanSimResult run();

 private:
  class Engine;
  std::unique_ptr<Engine> engine_;
};

}  // namespace weft::collsim
