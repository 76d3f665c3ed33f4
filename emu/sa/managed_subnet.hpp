// emu/sa/managed_subnet.hpp — the glue that makes an emu/fabric Fabric a managed InfiniBand
// subnet with general services on QP1: the SM brings the subnet up, the SA answers on the SM's
// HCA, and every HCA runs a CommManager and an SaClient, their MADs carried by the fabric as
// real UD packets to QP1 (through HcaNode::set_gsi_agent) in virtual time.
//
// Bring-up: the emu/sm SubnetManager runs over the fabric itself (sm::bring_up with a kept
// FabricSm; the Fabric must be built with FabricConfig::sm_managed): real SMPs over VL15 program
// LIDs, LMC, SM LID, port states, NeighborMTU and LFTs into the fabric's node states and
// Devices, and the SM keeps running (traps, sweeps) as the Simulator runs. The SA's tables are
// built from those node states after the bring-up (sa_tables.hpp).
//
// Usage (tests, `weft sim`): construct over a Fabric, bring_up(), then use cm(n) / sa_client(n)
// of an HCA and call kick(n) after each call made from outside the simulator loop; run the
// Simulator; poll events/results from the agents.
// drop_filter is a fault hook of the medium: return true to lose a MAD the fabric would carry.
// Thread-safety: the Simulator's thread. Lifetime: registered with the Fabric's Simulator as a
// component and as each HCA's GSI hook, so it must outlive every run of that Simulator.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/sa/subnet_admin.hpp"
#include "emu/sim/simulator.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/sm/subnet_manager.hpp"
#include "src/cm/comm_manager.hpp"
#include "src/cm/sa_client.hpp"

namespace weft::sa {

struct SubnetOptions {
  sm::SmConfig sm{};
  TimeNs bring_up_limit_ns = 60'000'000'000;  // virtual
  topo::NodeId sm_node = topo::kNoNode;       // default: the first HCA
  SaConfig sa{};
  cm::CmConfig cm{};  // template; port, lid, ca_guid, comm_id_base, psn_seed set per HCA
  cm::SaClientConfig sa_client{};
  TimeNs loopback_ns = 1000;  // a MAD an HCA sends to its own LID
};

struct GsiStats {
  std::uint64_t mads_sent = 0, mads_received = 0, mads_dropped = 0, send_failed = 0;
};

class ManagedSubnet final : public sim::Component {
 public:
  explicit ManagedSubnet(fabric::Fabric& fabric, SubnetOptions opts = {});
  ~ManagedSubnet() override;
  ManagedSubnet(const ManagedSubnet&) = delete;
  ManagedSubnet& operator=(const ManagedSubnet&) = delete;

  // False (and error()) when the SM did not reach SUBNET UP with valid routes (or the Fabric
  // is not sm_managed).
  bool bring_up();
  // The bring-up's figures (virtual and wall time, SMPs, verify_nodes).
  const sm::BringUpReport& bring_up_report() const { return report_; }
  const std::string& error() const { return error_; }

  topo::NodeId sm_node() const { return sm_node_; }
  std::uint16_t sm_lid() const;
  std::uint16_t lid(topo::NodeId hca, int port = 1) const;
  const sm::SubnetManager& subnet_manager() const { return fsm_->sm(); }
  // The SM running over the fabric (null before bring_up).
  sm::FabricSm* fabric_sm() { return fsm_.get(); }
  SubnetAdmin& sa() { return sa_; }
  cm::CommManager& cm(topo::NodeId hca);
  cm::SaClient& sa_client(topo::NodeId hca);
  // Sends what the HCA's agents queued and re-arms their timers (after calls from outside).
  void kick(topo::NodeId hca);
  const GsiStats& stats() const { return stats_; }

  std::function<bool(topo::NodeId from, std::span<const std::uint8_t> mad)> drop_filter;

  void on_event(sim::Simulator& sim, const sim::Event& ev) override;

 private:
  struct Agent {
    std::unique_ptr<cm::CommManager> cm;
    std::unique_ptr<cm::SaClient> sa_client;
    sim::EventId timer{};
    TimeNs armed_ns = kNoDeadline;
    std::deque<cm::GsiMad> loopback;
  };
  std::array<std::uint8_t, 16> gid_of_lid(std::uint16_t lid) const;
  void forward(const cm::SaNotice& n, TimeNs now);
  void on_gsi(topo::NodeId n, std::uint8_t port, std::uint16_t slid,
              std::span<const std::uint8_t> mad);
  void dispatch(topo::NodeId n, const cm::GsiMad& in);
  void send(topo::NodeId n, const cm::GsiMad& out);
  void pump(topo::NodeId n);
  void arm(topo::NodeId n);

  fabric::Fabric& fabric_;
  SubnetOptions opts_;
  sim::ComponentId comp_ = sim::kNoComponent;
  topo::NodeId sm_node_ = topo::kNoNode;
  std::unique_ptr<sm::FabricSm> fsm_;
  sm::BringUpReport report_;
  SubnetAdmin sa_;
  std::vector<Agent> agents_;  // index = topology NodeId (empty for switches)
  std::string error_;
  GsiStats stats_;
};

}  // namespace weft::sa
