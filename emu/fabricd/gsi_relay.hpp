// emu/fabricd/gsi_relay.hpp — QP1 for the processes attached to the fabric daemon: each HCA
// relays General Services MADs (SA, CM; IBA 13.5) between its process and the fabric, and the
// Subnet Administrator (emu/sa's SubnetAdmin) answers on the SM's HCA.
//
// Toward the fabric: a UD packet to QP1 that the process put on its ring (cm::GsiDevice builds
// them) leaves the HCA as a GMP (Fabric::send_mad, as emu/sa's ManagedSubnet sends its agents'
// MADs); one to the HCA's own LID is turned around locally (an HCA does not hairpin).
// From the fabric: each HCA's GSI hook takes the MADs arriving at its QP1; on the SM's HCA, SA
// requests (and ReportResps) go to the SA, everything else goes to the process as a UD packet
// to QP1 (to_client). A MAD for an HCA without a process is dropped and counted, as on a port
// whose QP1 has no receive posted.
// The SA's tables are rebuilt from the node states (sa::build_tables) before a request when the
// last build is older than tables_max_age_ns of virtual time, so re-routes are seen.
// Thread-safety: the daemon's driver thread (it owns the Fabric and the Simulator). Lifetime:
// a Simulator component and every HCA's GSI hook; it must outlive every run of that Simulator.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include <weft/types.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/sa/subnet_admin.hpp"
#include "emu/sim/simulator.hpp"
#include "src/cm/gsi.hpp"

namespace weft::fabricd {

struct GsiRelayStats {
  std::uint64_t from_clients = 0, to_fabric = 0, send_failed = 0, loopback = 0;
  std::uint64_t from_fabric = 0, to_clients = 0, to_sa = 0, unattached_dropped = 0;
};

class GsiRelay final : public sim::Component {
 public:
  // to_client(hca index, MAD with lid = the sender's LID): false when nobody is attached.
  using ToClient = std::function<bool(std::size_t hca, const cm::GsiMad& in)>;
  GsiRelay(fabric::Fabric& fabric, std::vector<topo::NodeId> hcas, sa::SaConfig sa,
           ToClient to_client);
  ~GsiRelay() override;
  GsiRelay(const GsiRelay&) = delete;
  GsiRelay& operator=(const GsiRelay&) = delete;

  // Where the SA runs (the SM's HCA), or topo::kNoNode while there is no SM (its requests are
  // then delivered to that HCA's process, as to any port without an SA).
  void set_sa_node(topo::NodeId n);
  // A MAD the process on HCA `hca` sent from its QP1 (lid = the DLID).
  void from_client(std::size_t hca, const cm::GsiMad& out);
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;

  const GsiRelayStats& stats() const { return stats_; }
  const sa::SubnetAdmin& sa() const { return sa_; }
  TimeNs tables_max_age_ns = 1'000'000;

 private:
  void on_gsi(std::size_t hca, std::uint8_t port, std::uint16_t slid,
              std::span<const std::uint8_t> mad);
  void dispatch(std::size_t hca, const cm::GsiMad& in);
  void send(std::size_t hca, const cm::GsiMad& out);
  void pump_sa();
  void arm();

  fabric::Fabric& fabric_;
  std::vector<topo::NodeId> hcas_;
  ToClient to_client_;
  sa::SubnetAdmin sa_;
  topo::NodeId sa_node_ = topo::kNoNode;
  std::size_t sa_hca_ = SIZE_MAX;
  TimeNs tables_built_ns_ = kNoDeadline;
  sim::ComponentId comp_ = sim::kNoComponent;
  sim::EventId timer_{};
  TimeNs armed_ns_ = kNoDeadline;
  std::deque<std::pair<std::size_t, cm::GsiMad>> loopback_;
  GsiRelayStats stats_;
};

}  // namespace weft::fabricd
