// emu/simrun/interim_sm.cpp — see interim_sm.hpp.
#include "emu/simrun/interim_sm.hpp"

#include <chrono>

namespace weft::simrun {

namespace {
constexpr sim::EventKind kEvResweep = 1, kEvInstall = 2;
constexpr TimeNs kBringUpLimitNs = 10'000'000'000;  // 10 s virtual
constexpr TimeNs kResweepLimitNs = 1'000'000'000;

std::uint64_t wall_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

sm::DirectConfig direct_config(std::uint64_t seed) {
  sm::DirectConfig c;
  c.seed = seed;
  return c;
}
}  // namespace

InterimSm::InterimSm(fabric::Fabric& fabric, faults::FaultLog& log, sm::SmConfig config)
    : fabric_(fabric),
      log_(log),
      config_((config.wall_clock_ns = wall_ns, config)),
      direct_(fabric.topology(), direct_config(fabric.sim().seed())),
      sm_(config_),
      comp_(fabric.sim().add_component(*this, "sm")) {}

SmReport InterimSm::bring_up() {
  const std::vector<topo::NodeId> hcas = fabric_.hcas();
  if (hcas.empty()) {
    report_.error = "the topology has no HCA to run the SM on";
    return report_;
  }
  const std::uint64_t w0 = wall_ns();
  direct_.attach(sm_, hcas.front(), config_.port);
  const bool up = direct_.run_until_up(kBringUpLimitNs);
  report_.wall_s = static_cast<double>(wall_ns() - w0) / 1e9;
  report_.virtual_s = static_cast<double>(direct_.now()) / 1e9;
  report_.mads = sm_.totals().mads_sent;
  const sm::VerifyReport v = direct_.verify();
  report_.routes_valid = up && sm_.routes_valid() && v.ok();
  if (!up) {
    report_.error = "the subnet did not come up: " +
                    (sm_.last_error().empty() ? std::string("time-out") : sm_.last_error());
    return report_;
  }
  if (!v.ok()) report_.error = "SM verification: " + v.problems.front();
  for (topo::NodeId n = 0; n < fabric_.topology().node_count(); ++n) {
    fabric_.node(n).state() = direct_.nodes()[n];
  }
  fabric_.adopt_lids();
  return report_;
}

void InterimSm::sm_down(TimeNs) {
  alive_ = false;
}

void InterimSm::sm_up(TimeNs now) {
  alive_ = true;
  if (!resweep_posted_) {
    resweep_posted_ = true;
    fabric_.sim().post_at(now, comp_, kEvResweep);
  }
}

void InterimSm::link_changed(topo::LinkId link, bool up, TimeNs now) {
  direct_.set_link(link, up);  // the physical change, and trap 128 toward the SM
  if (alive_ && !resweep_posted_) {
    // After every change of this instant (a switch failing takes all its links at once).
    resweep_posted_ = true;
    fabric_.sim().post_at(now, comp_, kEvResweep);
  }
}

void InterimSm::resweep() {
  resweep_posted_ = false;
  if (!alive_) return;
  const TimeNs t0 = direct_.now();
  const std::uint32_t before = sm_.heavy_sweeps();
  // Traps travel hop by hop before the SM reacts: wait for a heavy sweep that has settled.
  direct_.run(t0 + kResweepLimitNs, [&] { return sm_.settled() && sm_.heavy_sweeps() > before; });
  if (sm_.heavy_sweeps() == before) return;  // nothing changed for the SM
  std::vector<std::vector<std::uint8_t>> lfts(fabric_.topology().node_count());
  for (topo::NodeId n = 0; n < lfts.size(); ++n) {
    if (fabric_.is_switch(n)) lfts[n] = direct_.nodes()[n].lft;
  }
  pending_.push_back(std::move(lfts));
  fabric_.sim().post_in(direct_.now() - t0, comp_, kEvInstall, pending_.size() - 1);
}

void InterimSm::on_event(sim::Simulator& /*sim*/, const sim::Event& ev) {
  if (ev.kind == kEvResweep) {
    resweep();
    return;
  }
  if (ev.kind != kEvInstall || ev.data >= pending_.size()) return;
  auto& lfts = pending_[ev.data];
  for (topo::NodeId n = 0; n < lfts.size(); ++n) {
    if (fabric_.is_switch(n)) fabric_.switch_node(n).set_lft(std::move(lfts[n]));
  }
  report_.reroutes++;
  log_.add(fabric_.sim().now(), "SM re-routed (heavy sweep " + std::to_string(sm_.heavy_sweeps()) +
                                    ", routes " + (sm_.routes_valid() ? "valid" : "NOT valid") +
                                    ")");
  if (!alive_) return;
}

}  // namespace weft::simrun
