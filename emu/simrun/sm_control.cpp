// emu/simrun/sm_control.cpp — see sm_control.hpp.
#include "emu/simrun/sm_control.hpp"

#include <algorithm>
#include <string>

#include "emu/sma/node_state.hpp"

namespace weft::simrun {

namespace {
constexpr sim::EventKind kEvWatch = 1;
constexpr TimeNs kBringUpLimitNs = 10'000'000'000;  // 10 s virtual
constexpr TimeNs kWatchFirstNs = 1'000;             // first look after a change
constexpr TimeNs kWatchMaxStepNs = 1'000'000;       // back-off cap between looks
constexpr TimeNs kWatchLimitNs = 1'000'000'000;     // give up watching for a sweep after this
}  // namespace

FabricSmControl::FabricSmControl(fabric::Fabric& fabric, faults::FaultLog& log,
                                 sm::SmOptions options)
    : fabric_(fabric),
      log_(log),
      options_(std::move(options)),
      comp_(fabric.sim().add_component(*this, "sm")) {
  if (options_.limit_ns == sm::SmOptions{}.limit_ns) options_.limit_ns = kBringUpLimitNs;
  // A port the SM gives up retrying at every sweep goes in the fault log, once (emu/sm README).
  if (!options_.sm.on_port_stuck)
    options_.sm.on_port_stuck = [this](const sm::StuckPort& p, TimeNs now) {
      log_.add(now, "SM: port " + p.node_desc + "/" + std::to_string(p.port) + " stuck in " +
                        std::string(sma::to_string(p.state)) + " after " +
                        std::to_string(p.attempts) + " activation attempts");
    };
}

FabricSmControl::~FabricSmControl() = default;

SmReport FabricSmControl::bring_up() {
  const sm::BringUpReport b = sm::bring_up(fabric_, options_, sm_);
  report_.engine = routing::to_string(options_.sm.routing.engine);
  report_.lmc = options_.sm.lmc;
  report_.wall_s = b.wall_s;
  report_.virtual_s = static_cast<double>(b.virtual_ns) / 1e9;
  report_.mads = b.mads;
  report_.routes_valid = b.routes_valid && (!options_.verify || b.verify.ok());
  report_.error = b.error;
  if (sm_) {
    sm_node_ = sm_->node();
    report_.node = fabric_.topology().node(sm_node_).description;
    heavy_seen_ = sm_->sm().heavy_sweeps();
    traps_base_ = 0 - sm_->sm().traps_received();
  }
  if (!b.ok && report_.error.empty()) report_.error = "the subnet did not come up";
  return report_;
}

void FabricSmControl::finish() {
  report_.traps = traps_base_ + (sm_ ? sm_->sm().traps_received() : 0);
  report_.ports_stuck = sm_ ? sm_->sm().ports_stuck() : 0;
  report_.light_sweeps = sm_ ? sm_->sm().light_sweeps() : 0;
  report_.heavy_sweeps = sm_ ? sm_->sm().heavy_sweeps() : 0;
}

void FabricSmControl::sm_down(TimeNs) {
  if (sm_) traps_base_ += sm_->sm().traps_received();
  sm_.reset();  // clears the HCA's local-SM hook: traps and answers reach no SM
}

void FabricSmControl::sm_up(TimeNs now) {
  if (sm_ || sm_node_ == topo::kNoNode) return;
  sm::SmConfig c = options_.sm;
  sm_ = std::make_unique<sm::FabricSm>(fabric_, sm_node_, std::move(c));
  heavy_seen_ = 0;
  sm_->start();  // a heavy sweep of the subnet as it is now
  watch(now);
}

void FabricSmControl::link_changed(topo::LinkId, bool, TimeNs now) {
  // The switches' SMAs send trap 128 by themselves; a live SM sweeps. Watch for that sweep.
  if (sm_) watch(now);
}

void FabricSmControl::watch(TimeNs now) {
  watch_until_ = now + kWatchLimitNs;
  watch_step_ = kWatchFirstNs;
  if (watching_) return;
  watching_ = true;
  fabric_.sim().post_at(now + watch_step_, comp_, kEvWatch);
}

void FabricSmControl::on_event(sim::Simulator& sim, const sim::Event& ev) {
  if (ev.kind != kEvWatch) return;
  watching_ = false;
  if (!sm_) return;  // failed: sm_up() watches again
  const sm::SubnetManager& s = sm_->sm();
  if (s.heavy_sweeps() > heavy_seen_ && s.settled()) {
    heavy_seen_ = s.heavy_sweeps();
    report_.reroutes++;
    log_.add(sim.now(), "SM re-routed (heavy sweep " + std::to_string(s.heavy_sweeps()) +
                            ", routes " + (s.routes_valid() ? "valid" : "NOT valid") + ")");
    return;
  }
  if (sim.now() >= watch_until_) return;
  watch_step_ = std::min(kWatchMaxStepNs, watch_step_ * 2);
  watching_ = true;
  sim.post_at(sim.now() + watch_step_, comp_, kEvWatch);
}

}  // namespace weft::simrun
