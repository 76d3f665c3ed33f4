// emu/sim/simulator.cpp — the dispatch loop (see simulator.hpp).
#include "emu/sim/simulator.hpp"

#include "src/base/assert.hpp"

namespace weft::sim {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::kEmpty:
      return "empty";
    case StopReason::kTimeReached:
      return "time_reached";
    case StopReason::kCallEventLimit:
      return "call_event_limit";
    case StopReason::kEventsMax:
      return "events_max";
    case StopReason::kTimeMax:
      return "time_max";
    case StopReason::kStopped:
      return "stopped";
  }
  return "?";
}

Simulator::Simulator(const SimConfig& config) : config_(config), queue_(config.queue) {}

ComponentId Simulator::add_component(Component& component, std::string_view name) {
  const bool fresh = component_names_.emplace(name).second;
  WEFT_ASSERT_MSG(fresh, "duplicate component name");
  WEFT_ASSERT(components_.size() < kNoComponent);
  components_.push_back(Entry{&component, std::string(name), make_stream(config_.seed, name)});
  component_count_ = static_cast<ComponentId>(components_.size());
  return static_cast<ComponentId>(components_.size() - 1);
}

const std::string& Simulator::component_name(ComponentId id) const {
  WEFT_ASSERT(id < components_.size());
  return components_[id].name;
}

SeededRng& Simulator::rng(ComponentId id) {
  WEFT_ASSERT(id < components_.size());
  return components_[id].rng;
}

EventId Simulator::schedule_at(TimeNs time_ns, ComponentId target, EventKind kind,
                               std::uint64_t data) {
  WEFT_ASSERT_MSG(time_ns >= now_, "event scheduled in the past");
  WEFT_ASSERT(target < components_.size());
  return queue_.push(time_ns, target, kind, data);
}

bool Simulator::reschedule(EventId id, TimeNs time_ns) {
  WEFT_ASSERT_MSG(time_ns >= now_, "event rescheduled into the past");
  return queue_.reschedule(id, time_ns);
}

StopReason Simulator::run_bounded(TimeNs until_ns, std::uint64_t max_events) {
  WEFT_ASSERT_MSG(until_ns >= now_, "run_until into the past");
  stop_requested_ = false;
  // Every bound folded into two numbers up front; why the loop stopped is worked out after it.
  const TimeNs limit = until_ns < config_.time_ns_max ? until_ns : config_.time_ns_max;
  const std::uint64_t left =
      config_.events_max > dispatched_ ? config_.events_max - dispatched_ : 0;
  const std::uint64_t budget = max_events < left ? max_events : left;
  std::uint64_t done = 0;
  Event ev;
  while (done < budget && queue_.pop_until(limit, ev)) {
    now_ = ev.time_ns;
    ++dispatched_;
    ++done;
    if (config_.trace_hash) {
      hash_.add(ev.time_ns);
      hash_.add(ev.component);
      hash_.add(ev.kind);
    }
    if (sink_ != nullptr) sink_->on_dispatch(ev);
    components_[ev.component].component->on_event(*this, ev);
    if (stop_requested_) {
      stop_requested_ = false;
      return StopReason::kStopped;
    }
  }
  if (done >= max_events) return StopReason::kCallEventLimit;
  if (dispatched_ >= config_.events_max) return StopReason::kEventsMax;
  const TimeNs t = queue_.peek_time();
  if (t == kNoDeadline) {
    if (until_ns != kNoDeadline) {
      now_ = until_ns < config_.time_ns_max ? until_ns : config_.time_ns_max;
      return until_ns <= config_.time_ns_max ? StopReason::kTimeReached : StopReason::kTimeMax;
    }
    return StopReason::kEmpty;
  }
  if (t > until_ns) {
    if (until_ns > config_.time_ns_max) {
      now_ = config_.time_ns_max;
      return StopReason::kTimeMax;
    }
    now_ = until_ns;
    return StopReason::kTimeReached;
  }
  // t <= until_ns, so t > time_ns_max stopped the loop.
  now_ = config_.time_ns_max;
  return StopReason::kTimeMax;
}

}  // namespace weft::sim
