// emu/sm/fabric_sm.cpp — FabricSm (the SubnetManager on an emulated fabric's HCA port) and
// sm::bring_up. Thread-safety: the Simulator's thread.
#include "emu/sm/fabric_sm.hpp"

#include <chrono>
#include <vector>

#include "src/base/assert.hpp"

namespace weft::sm {

namespace {

constexpr sim::EventKind kEvSmTimer = 1;

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

// The SM's timer target. Adopted by the Fabric (the Simulator cannot drop a component), so it
// outlives the FabricSm and ignores events once owner is null.
class FabricSm::Timer final : public sim::Component {
 public:
  explicit Timer(FabricSm* owner) : owner(owner) {}
  void on_event(sim::Simulator& /*sim*/, const sim::Event& ev) override {
    if (owner != nullptr && ev.kind == kEvSmTimer) owner->on_timer();
  }
  FabricSm* owner;
};

VerifyReport verify_nodes(const fabric::Fabric& fabric, std::uint16_t sm_lid) {
  std::vector<const sma::NodeState*> ptrs;
  ptrs.reserve(fabric.topology().node_count());
  auto& f = const_cast<fabric::Fabric&>(fabric);  // node() has no const overload
  for (topo::NodeId n = 0; n < fabric.topology().node_count(); ++n)
    ptrs.push_back(&f.node(n).state());
  return verify_nodes(fabric.topology(), ptrs, sm_lid);
}

FabricSm::FabricSm(fabric::Fabric& fabric, topo::NodeId node, SmConfig config)
    : fabric_(fabric), node_(node), port_(config.port), sm_(std::move(config)) {
  WEFT_ASSERT(node < fabric.topology().node_count() && !fabric.is_switch(node));
  auto t = std::make_unique<Timer>(this);
  timer_ = t.get();
  timer_id_ = fabric_.adopt_component(std::move(t), "sm:" + std::to_string(node));
  fabric_.node(node_).set_local_sm(
      [this](std::uint8_t /*port*/, std::span<const std::uint8_t> mad) { on_mad(mad); });
}

FabricSm::~FabricSm() {
  fabric_.node(node_).set_local_sm({});
  fabric_.sim().cancel(deadline_);
  timer_->owner = nullptr;
}

void FabricSm::start() {
  sm_.start(fabric_.sim().now());
  pump();
}

void FabricSm::on_mad(std::span<const std::uint8_t> mad) {
  ++received_;
  sm_.on_mad(mad, fabric_.sim().now());
  pump();
}

void FabricSm::set_multicast_group(std::uint16_t mlid, std::vector<std::uint64_t> port_guids) {
  sm_.set_multicast_group(mlid, std::move(port_guids), fabric_.sim().now());
  pump();
}

void FabricSm::remove_multicast_group(std::uint16_t mlid) {
  sm_.remove_multicast_group(mlid, fabric_.sim().now());
  pump();
}

void FabricSm::on_timer() {
  armed_ns_ = kNoDeadline;
  sm_.on_deadline(fabric_.sim().now());
  pump();
}

// Sends what the SM wants sent now, then re-arms the timer at its next deadline.
void FabricSm::pump() {
  const TimeNs now = fabric_.sim().now();
  if (stop_when_settled_ && (sm_.settled() || sm_.phase() == Phase::kFailed)) {
    fabric_.sim().request_stop();
  }
  OutMad o;
  while (sm_.poll_mad(now, o)) {
    ++sent_;
    if (o.route == OutMad::Route::kDirected && o.local) {
      fabric_.send_smp_local(node_, o.port, o.mad);
      continue;
    }
    const bool ok = o.route == OutMad::Route::kDirected
                        ? fabric_.send_smp_from(node_, o.port, o.mad)
                        : fabric_.send_smp_from(node_, o.port, o.mad, o.dlid, o.slid);
    if (!ok) ++send_failures_;  // the SM times it out and retries
  }
  const TimeNs nd = sm_.next_deadline();
  if (nd == armed_ns_ && (nd == kNoDeadline || fabric_.sim().pending(deadline_))) return;
  armed_ns_ = nd;
  if (nd == kNoDeadline) {
    fabric_.sim().cancel(deadline_);
    return;
  }
  const TimeNs at = std::max(nd, now);
  if (!fabric_.sim().reschedule(deadline_, at)) {
    deadline_ = fabric_.sim().schedule_at(at, timer_id_, kEvSmTimer);
  }
}

bool FabricSm::run_until_settled(TimeNs limit_ns) {
  sim::Simulator& sim = fabric_.sim();
  if (!sm_.settled() && sm_.phase() != Phase::kFailed) {
    // pump() asks the Simulator to stop once the SM is settled (or failed).
    stop_when_settled_ = true;
    sim.run_until(sim.now() + limit_ns);
    stop_when_settled_ = false;
  }
  return sm_.settled();
}

BringUpReport bring_up(fabric::Fabric& fabric, const SmOptions& options) {
  std::unique_ptr<FabricSm> sm;
  return bring_up(fabric, options, sm);
}

BringUpReport bring_up(fabric::Fabric& fabric, const SmOptions& options,
                       std::unique_ptr<FabricSm>& out) {
  BringUpReport rep;
  if (!fabric.config().sm_managed) {
    rep.error = "the fabric was not built with FabricConfig::sm_managed";
    return rep;
  }
  topo::NodeId node = options.sm_node;
  if (node == topo::kNoNode) {
    for (topo::NodeId n = 0; n < fabric.topology().node_count(); ++n) {
      if (!fabric.is_switch(n)) {
        node = n;
        break;
      }
    }
  }
  if (node == topo::kNoNode || node >= fabric.topology().node_count() || fabric.is_switch(node)) {
    rep.error = "no HCA to run the SM on";
    return rep;
  }
  sim::Simulator& sim = fabric.sim();
  const std::uint64_t dropped0 = fabric.totals().vl15_dropped;
  const std::uint64_t events0 = sim.events_dispatched();
  const TimeNs t0 = sim.now();
  const std::uint64_t w0 = steady_ns();
  auto sm = std::make_unique<FabricSm>(fabric, node, options.sm);
  sm->start();
  const bool settled = sm->run_until_settled(options.limit_ns);
  rep.wall_s = static_cast<double>(steady_ns() - w0) / 1e9;
  rep.virtual_ns = sim.now() - t0;
  rep.events = sim.events_dispatched() - events0;
  rep.mads = sm->sm().totals().mads_sent;
  rep.vl15_dropped = fabric.totals().vl15_dropped - dropped0;
  const SubnetManager& s = sm->sm();
  rep.routes_valid = s.routes_valid();
  rep.sweep = s.last_heavy();
  rep.sm_memory_bytes = s.memory_bytes();
  if (!settled) {
    rep.error = s.phase() == Phase::kFailed
                    ? "SM failed: " + s.last_error()
                    : "not up after " + std::to_string(options.limit_ns) + " ns (phase " +
                          std::string(to_string(s.phase())) + ")";
  } else if (!rep.routes_valid) {
    rep.error =
        "routes not valid" +
        (rep.sweep.check.problems.empty() ? std::string() : ": " + rep.sweep.check.problems[0]);
  }
  if (options.verify) {
    rep.verify = verify_nodes(fabric, s.sm_lid());
    if (rep.error.empty() && !rep.verify.ok()) rep.error = "verify: " + rep.verify.problems[0];
  }
  rep.ok = rep.error.empty();
  out = std::move(sm);
  return rep;
}

}  // namespace weft::sm
