// emu/sm/fabric_sm.hpp — the SubnetManager running over the emulated fabric (emu/fabric) in
// virtual time: real directed-route and LID-routed SMPs through every switch's SMA and LFT.
//
// FabricSm is the adapter: it sits on one HCA port of a Fabric, sends what SubnetManager::
// poll_mad() yields with Fabric::send_smp_from / send_smp_local, receives what the HCA's SMA
// hands to the local SM (Node::set_local_sm) and arms one Simulator timer at the SM's
// next_deadline(). It stays alive after bring-up: traps (128 on a link state change), light
// sweeps and the heavy sweeps they start all run as the Simulator runs.
//
// sm::bring_up() is the one-call form for `weft sim`, the SA/CM code and tests: it puts the
// Fabric under SM management (the Fabric must have been built with FabricConfig::sm_managed),
// runs the Simulator until the subnet is up and settled (or fails), and verifies the nodes'
// tables independently of the SM (verify_nodes).
// Thread-safety: the Simulator's thread. Lifetime: a FabricSm must not outlive its Fabric; the
// Fabric may outlive the FabricSm (the timer target is adopted by the Fabric and goes inert).
// One FabricSm per Fabric at a time: it owns the node's local-SM hook (Node::set_local_sm) and
// clears it when destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "emu/fabric/fabric.hpp"
#include "emu/sm/direct_fabric.hpp"
#include "emu/sm/subnet_manager.hpp"
#include "emu/sma/node_state.hpp"
#include "emu/topo/topology.hpp"

namespace weft::sm {

// verify_nodes (direct_fabric.hpp) over a Fabric's nodes.
VerifyReport verify_nodes(const fabric::Fabric& fabric, std::uint16_t sm_lid);

class FabricSm {
 public:
  // The SM on HCA `node`, port config.port. Does not start it.
  FabricSm(fabric::Fabric& fabric, topo::NodeId node, SmConfig config);
  ~FabricSm();
  FabricSm(const FabricSm&) = delete;
  FabricSm& operator=(const FabricSm&) = delete;

  // Starts the first heavy sweep at the Simulator's now.
  void start();
  // Runs the Simulator until the SM is settled with no SMP of its own in flight (or failed), or
  // virtual time passes now + limit_ns. True when settled.
  bool run_until_settled(TimeNs limit_ns);

  // SubnetManager::set_multicast_group / remove_multicast_group at the Simulator's now; the MFT
  // Sets go out as the Simulator runs.
  void set_multicast_group(std::uint16_t mlid, std::vector<std::uint64_t> port_guids);
  void remove_multicast_group(std::uint16_t mlid);

  SubnetManager& sm() { return sm_; }
  const SubnetManager& sm() const { return sm_; }
  topo::NodeId node() const { return node_; }
  std::uint8_t port() const { return port_; }
  std::uint64_t mads_sent() const { return sent_; }
  std::uint64_t mads_received() const { return received_; }
  // Sends refused because the SM's port was down.
  std::uint64_t send_failures() const { return send_failures_; }

 private:
  class Timer;
  void on_mad(std::span<const std::uint8_t> mad);
  void on_timer();
  void pump();

  fabric::Fabric& fabric_;
  topo::NodeId node_;
  std::uint8_t port_;
  SubnetManager sm_;
  Timer* timer_ = nullptr;  // owned by the Fabric (adopt_component)
  sim::ComponentId timer_id_ = sim::kNoComponent;
  sim::EventId deadline_{};
  TimeNs armed_ns_ = kNoDeadline;
  std::uint64_t sent_ = 0, received_ = 0, send_failures_ = 0;
  bool stop_when_settled_ = false;
};

struct SmOptions {
  SmConfig sm{};                         // engine, window, timeouts, sweep interval, port
  topo::NodeId sm_node = topo::kNoNode;  // the SM's HCA; default: the first HCA
  TimeNs limit_ns = 60'000'000'000;      // virtual time allowed for the bring-up
  bool verify = true;                    // run verify_nodes() after (not in wall_s)
};

struct BringUpReport {
  bool ok = false;                 // subnet up, settled, routes valid and (if run) verify passed
  std::string error;               // why not, one sentence
  TimeNs virtual_ns = 0;           // from start to settled
  double wall_s = 0;               // wall time of the bring-up (verify excluded)
  std::uint64_t mads = 0;          // SMPs the SM sent, retries included
  std::uint64_t events = 0;        // Simulator events dispatched during the bring-up
  std::uint64_t vl15_dropped = 0;  // SMPs dropped on full VL15 buffers (then retried)
  bool routes_valid = false;
  SweepReport sweep;                // the last heavy sweep (phases, MADs, check)
  VerifyReport verify;              // empty when SmOptions::verify is false
  std::size_t sm_memory_bytes = 0;  // SubnetManager::memory_bytes()
};

// Brings the fabric up with an SM on options.sm_node; the SM is destroyed on return (the
// Fabric keeps the tables it programmed).
BringUpReport bring_up(fabric::Fabric& fabric, const SmOptions& options = {});
// The same, keeping the SM running: `sm` receives it (traps, light and heavy sweeps go on as
// the Simulator runs). Destroy it before the Fabric.
BringUpReport bring_up(fabric::Fabric& fabric, const SmOptions& options,
                       std::unique_ptr<FabricSm>& sm);

}  // namespace weft::sm
