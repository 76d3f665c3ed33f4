// emu/simrun/sm_control.hpp — the subnet manager of `weft sim`: emu/sm's FabricSm running over
// the emulated fabric itself (sm::bring_up with a kept SM), seen by the fault injector through
// faults::SmControl.
//
// bring_up() programs the fabric with real SMPs in virtual time (the Fabric must be built with
// FabricConfig::sm_managed). The FabricSm then keeps running with the workload: a link change
// makes the switches' SMAs send trap 128 to the SM, which sweeps and re-programs the LFTs over
// the fabric. link_changed() only watches for that sweep to log it ("SM re-routed ...").
// SM failure (sm_down) destroys the FabricSm: traps reach no SM and nothing sweeps. Recovery
// (sm_up) starts a new FabricSm on the same port, whose heavy sweep finds the subnet as it is.
// Thread-safety: the Simulator's thread. Lifetime: must be destroyed before the Fabric.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "emu/fabric/fabric.hpp"
#include "emu/faults/injector.hpp"
#include "emu/sm/fabric_sm.hpp"

namespace weft::simrun {

struct SmReport {
  std::string engine;  // routing engine (minhop, updn, ftree, dor)
  int lmc = 0;
  std::string node;                  // the HCA the SM runs on (its description)
  double wall_s = 0, virtual_s = 0;  // of the bring-up
  std::uint64_t mads = 0;            // SMPs of the bring-up, retries included
  bool routes_valid = false;
  std::string error;
  std::uint32_t reroutes = 0;   // heavy sweeps that settled during the run
  std::uint64_t traps = 0;      // traps the SM received during the run (after the bring-up)
  std::size_t ports_stuck = 0;  // linked ports the SM could not bring to Active, at the end
  std::uint64_t light_sweeps = 0, heavy_sweeps = 0;  // of the SM running at the end
};

class FabricSmControl final : public faults::SmControl, public sim::Component {
 public:
  FabricSmControl(fabric::Fabric& fabric, faults::FaultLog& log, sm::SmOptions options = {});
  ~FabricSmControl() override;
  // Brings the subnet up (SM on the first HCA unless options.sm_node) and keeps the SM.
  SmReport bring_up();
  const SmReport& report() const { return report_; }
  // Brings report().traps up to date (call after the run).
  void finish();
  // The running SM, or null while it is failed (or before bring_up).
  sm::FabricSm* fabric_sm() { return sm_.get(); }

  void sm_down(TimeNs now_ns) override;
  void sm_up(TimeNs now_ns) override;
  void link_changed(topo::LinkId link, bool up, TimeNs now_ns) override;
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;

 private:
  void watch(TimeNs now_ns);

  fabric::Fabric& fabric_;
  faults::FaultLog& log_;
  sm::SmOptions options_;
  std::unique_ptr<sm::FabricSm> sm_;
  sim::ComponentId comp_;
  topo::NodeId sm_node_ = topo::kNoNode;
  std::uint64_t traps_base_ = 0;  // traps of earlier SM instances, minus the bring-up's
  std::uint32_t heavy_seen_ = 0;  // heavy sweeps of sm_ already logged
  bool watching_ = false;
  TimeNs watch_until_ = 0;
  TimeNs watch_step_ = 0;
  SmReport report_;
};

}  // namespace weft::simrun
