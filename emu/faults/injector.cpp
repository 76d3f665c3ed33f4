// emu/faults/injector.cpp — see injector.hpp.
#include "emu/faults/injector.hpp"

#include <cinttypes>

namespace weft::faults {

namespace {
constexpr sim::EventKind kEvFaultStep = 1;
}  // namespace

std::string describe(const fabric::PortFaults& f) {
  std::string s;
  char buf[64];
  auto add = [&](const char* fmt, auto v) {
    std::snprintf(buf, sizeof buf, fmt, v);
    if (!s.empty()) s += ' ';
    s += buf;
  };
  if (f.drop > 0) add("drop=%g", f.drop);
  if (f.ber >= 0) add("ber=%g", f.ber);
  if (f.duplicate > 0) add("duplicate=%g", f.duplicate);
  if (f.reorder > 0) add("reorder=%g", f.reorder);
  if (f.reorder_max_ns > 0) add("reorder_max=%" PRIu64 "ns", f.reorder_max_ns);
  if (f.delay_ns > 0) add("delay=%" PRIu64 "ns", f.delay_ns);
  if (f.jitter_ns > 0) add("jitter=%" PRIu64 "ns", f.jitter_ns);
  return s.empty() ? "none" : s;
}

void FaultLog::print(std::FILE* out) const {
  for (const LogEntry& e : entries_) {
    std::fprintf(out, "  %12.3f us  %s\n", static_cast<double>(e.at_ns) / 1e3, e.what.c_str());
  }
}

std::string port_name(const topo::Topology& t, topo::PortRef p) {
  return t.node(p.node).description + "/p" + std::to_string(p.port);
}

std::string link_name(const topo::Topology& t, topo::LinkId link) {
  const topo::Link& l = t.link(link);
  return port_name(t, l.a) + " - " + port_name(t, l.b);
}

FaultInjector::FaultInjector(fabric::Fabric& fabric, FaultLog& log, SmControl* sm)
    : fabric_(fabric), log_(log), sm_(sm), comp_(fabric.sim().add_component(*this, "faults")) {}

void FaultInjector::apply(const Scenario& sc) {
  const topo::Topology& t = fabric_.topology();
  const TimeNs now = fabric_.sim().now();
  for (const PortFaultSpec& p : sc.ports) {
    std::vector<topo::PortRef> ends = {p.port};
    if (p.both_ends)
      ends.push_back(t.link(t.node(p.port.node).ports[p.port.port].link).other(p.port.node));
    for (const topo::PortRef& e : ends) {
      fabric_.set_port_faults(e.node, e.port, p.faults);
      log_.add(now, "faults on " + port_name(t, e) + " (receive): " + describe(p.faults) + " [" +
                        p.where + "]");
    }
  }
  auto schedule = [&](TimeNs at, Step s) {
    steps_.push_back(s);
    fabric_.sim().post_at(now + at, comp_, kEvFaultStep, steps_.size() - 1);
  };
  for (const EventSpec& e : sc.events) {
    if (e.action == Action::kFlap) {
      for (std::uint32_t i = 0; i < e.count; ++i) {
        const TimeNs t0 = e.at_ns + static_cast<TimeNs>(i) * e.period_ns;
        schedule(t0, {Action::kLinkDown, e.link, topo::kNoNode});
        schedule(t0 + e.period_ns / 2, {Action::kLinkUp, e.link, topo::kNoNode});
      }
    } else {
      schedule(e.at_ns, {e.action, e.link, e.node});
    }
  }
}

void FaultInjector::set_link(topo::LinkId link, bool up) {
  const TimeNs now = fabric_.sim().now();
  fabric_.set_link_state(link, up, now);
  if (sm_) sm_->link_changed(link, up, now);
}

void FaultInjector::on_event(sim::Simulator& sim, const sim::Event& ev) {
  if (ev.kind != kEvFaultStep || ev.data >= steps_.size()) return;
  const Step s = steps_[ev.data];
  const topo::Topology& t = fabric_.topology();
  const TimeNs now = sim.now();
  switch (s.action) {
    case Action::kLinkDown:
    case Action::kLinkUp: {
      const bool up = s.action == Action::kLinkUp;
      log_.add(now, std::string("link ") + (up ? "up: " : "down: ") + link_name(t, s.link));
      set_link(s.link, up);
      break;
    }
    case Action::kSwitchDown:
    case Action::kSwitchUp: {
      const bool up = s.action == Action::kSwitchUp;
      int links = 0;
      for (int p = 1; p <= t.node(s.node).num_ports(); ++p) {
        const topo::LinkId l = t.node(s.node).ports[p].link;
        if (l == topo::kNoLink) continue;
        set_link(l, up);
        links++;
      }
      log_.add(now, "switch " + t.node(s.node).description + (up ? " recovers" : " fails") + " (" +
                        std::to_string(links) + " links " + (up ? "up" : "down") + ")");
      break;
    }
    case Action::kSmDown:
      log_.add(now, "SM fails");
      if (sm_) sm_->sm_down(now);
      break;
    case Action::kSmUp:
      log_.add(now, "SM recovers");
      if (sm_) sm_->sm_up(now);
      break;
    case Action::kFlap:
      break;  // expanded in apply()
  }
}

}  // namespace weft::faults
