// emu/simrun/interim_sm.hpp — the subnet manager of `weft sim` until the SM runs over
// emu/fabric itself (sm::bring_up(fabric::Fabric&), being built in emu/sm).
//
// Interim design, isolated here so it can be swapped: the real SubnetManager runs over emu/sm's
// DirectFabric (the same SMAs, SMPs in virtual time without data-path timing) on a mirror of
// the topology; bring_up() copies the nodes' management state (LIDs, LFTs, port states) into
// the fabric's nodes and adopts the LIDs. During the run, link changes are mirrored into the
// DirectFabric (its trap 128 path); a live SM re-sweeps there, and the new LFTs are installed
// in the fabric after the sweep's virtual duration. SM failure stops that until recovery.
// Thread-safety: the Simulator's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emu/fabric/fabric.hpp"
#include "emu/faults/injector.hpp"
#include "emu/sm/direct_fabric.hpp"
#include "emu/sm/subnet_manager.hpp"

namespace weft::simrun {

struct SmReport {
  double wall_s = 0, virtual_s = 0;
  std::uint64_t mads = 0;
  bool routes_valid = false;
  std::string error;
  std::uint32_t reroutes = 0;  // heavy sweeps installed during the run
};

class InterimSm final : public faults::SmControl, public sim::Component {
 public:
  InterimSm(fabric::Fabric& fabric, faults::FaultLog& log, sm::SmConfig config = {});
  // Brings the subnet up (SM on the first HCA's port 1) and configures the fabric from it.
  SmReport bring_up();
  const SmReport& report() const { return report_; }

  void sm_down(TimeNs now_ns) override;
  void sm_up(TimeNs now_ns) override;
  void link_changed(topo::LinkId link, bool up, TimeNs now_ns) override;
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;

 private:
  void resweep();

  fabric::Fabric& fabric_;
  faults::FaultLog& log_;
  sm::SmConfig config_;
  sm::DirectFabric direct_;
  sm::SubnetManager sm_;
  sim::ComponentId comp_;
  bool alive_ = true;
  bool resweep_posted_ = false;
  std::vector<std::vector<std::vector<std::uint8_t>>> pending_;  // LFTs per install
  SmReport report_;
};

}  // namespace weft::simrun
