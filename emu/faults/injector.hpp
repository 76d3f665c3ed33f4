// emu/faults/injector.hpp — applies a Scenario to a running Fabric: per-port faults at once,
// scheduled events (link down/up, flapping, switch failure and recovery, SM failure and
// recovery) in virtual time, and a log of what happened when.
//
// The injector is a sim::Component named "faults": its events are part of the run's trace
// hash, so a scenario replays exactly with its seed. The SM is reached through SmControl, so
// the injector works with whichever SM drives the fabric (emu/simrun's FabricSmControl: the SM over
// the fabric). Thread-safety: the Simulator's thread. Lifetime: must outlive the Simulator's runs.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "emu/fabric/fabric.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/sim/simulator.hpp"

namespace weft::faults {

// What the injector needs from a subnet manager.
class SmControl {
 public:
  virtual ~SmControl() = default;
  virtual void sm_down(TimeNs now_ns) = 0;  // stops answering traps and sweeping
  virtual void sm_up(TimeNs now_ns) = 0;    // comes back and sweeps
  // A link changed state (both ends): a live SM re-routes around it.
  virtual void link_changed(topo::LinkId link, bool up, TimeNs now_ns) = 0;
};

struct LogEntry {
  TimeNs at_ns = 0;
  std::string what;
};

// Time-ordered record of faults, shared by the injector and the SM side (re-routes).
class FaultLog {
 public:
  void add(TimeNs at_ns, std::string what) { entries_.push_back({at_ns, std::move(what)}); }
  const std::vector<LogEntry>& entries() const { return entries_; }
  void print(std::FILE* out) const;

 private:
  std::vector<LogEntry> entries_;
};

// "p00leaf00/p1 - p00agg00/p3"
std::string link_name(const topo::Topology& t, topo::LinkId link);
std::string port_name(const topo::Topology& t, topo::PortRef p);
// "drop=0.01 ber=1e-06" (the faults set), or "none".
std::string describe(const fabric::PortFaults& f);

class FaultInjector final : public sim::Component {
 public:
  FaultInjector(fabric::Fabric& fabric, FaultLog& log, SmControl* sm = nullptr);
  // Sets the port faults now and schedules the events (times relative to now).
  void apply(const Scenario& scenario);
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;
  std::size_t events_scheduled() const { return steps_.size(); }

 private:
  struct Step {
    Action action;  // kFlap expands into kLinkDown / kLinkUp steps
    topo::LinkId link;
    topo::NodeId node;
  };
  void set_link(topo::LinkId link, bool up);

  fabric::Fabric& fabric_;
  FaultLog& log_;
  SmControl* sm_;
  sim::ComponentId comp_;
  std::vector<Step> steps_;
};

}  // namespace weft::faults
