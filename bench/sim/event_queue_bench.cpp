// bench/sim/event_queue_bench.cpp — events/s of weft::sim::EventQueue against a plain
// std::priority_queue binary heap (same payload, same (time, seq) order), in the classic hold
// model: N events pending (initial times drawn like the increments); each step pops the
// earliest and schedules one at its time + an exponentially distributed increment (mean 1 us),
// so N stays constant. EventQueue is measured with post() (no handle, the packet path) and
// push() (a cancellable handle, the timer path).
// Also: the full Simulator loop (virtual dispatch + trace hash) and a timer re-arm workload.
// The Fabric_* runs are the same hold model with the fabric's own increments (the mix of
// delays `weft sim` schedules on bench/sim/sim_speed.sh's two-HCA stream) and its pending
// count (~30; 1,024 for a larger fabric's).
// After the Google Benchmark table it prints the ratio queue/baseline at each N.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "emu/sim/event_queue.hpp"
#include "emu/sim/simulator.hpp"

namespace {

using weft::TimeNs;
using namespace weft::sim;

// Increments drawn once, shared by every queue, so both do the same work.
const std::vector<TimeNs>& increments() {
  static const std::vector<TimeNs> v = [] {
    std::vector<TimeNs> out(1 << 16);
    weft::SeededRng rng(12345);
    for (TimeNs& t : out) t = static_cast<TimeNs>(-std::log(1.0 - rng.unit()) * 1000.0);
    return out;
  }();
  return v;
}

// The delays (event time - now) `weft sim` schedules on sim_speed.sh's two-HCA WRITE stream,
// counted at the queue: 0-1 ns 0.3 %, 2-4 ns 9.0 %, 5-16 ns 2.2 %, 17-32 ns 35.8 %, 33-128 ns
// 10.1 %, 129-256 ns 24.7 %, 257-1,024 ns 17.9 % (a few timers further out are left out).
const std::vector<TimeNs>& fabric_increments() {
  static const std::vector<TimeNs> v = [] {
    struct Range {
      double share;
      TimeNs lo, hi;
    };
    const Range mix[] = {{0.003, 0, 1},    {0.090, 2, 4},     {0.022, 5, 16},    {0.358, 17, 32},
                         {0.101, 33, 128}, {0.247, 129, 256}, {0.179, 257, 1024}};
    std::vector<TimeNs> out(1 << 16);
    weft::SeededRng rng(54321);
    for (TimeNs& t : out) {
      double u = rng.unit();
      const Range* r = &mix[0];
      for (const Range& m : mix) {
        r = &m;
        if (u < m.share) break;
        u -= m.share;
      }
      t = r->lo + rng.below(r->hi - r->lo + 1);
    }
    return out;
  }();
  return v;
}

struct BaseEvent {
  TimeNs time_ns;
  std::uint64_t seq;
  std::uint64_t data;
  ComponentId component;
  EventKind kind;
};
struct BaseLater {
  bool operator()(const BaseEvent& a, const BaseEvent& b) const {
    return a.time_ns > b.time_ns || (a.time_ns == b.time_ns && a.seq > b.seq);
  }
};
using BaseQueue = std::priority_queue<BaseEvent, std::vector<BaseEvent>, BaseLater>;

void hold_binary_heap(benchmark::State& state, const std::vector<TimeNs>& inc) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  std::vector<BaseEvent> storage;
  storage.reserve(n + 1);
  BaseQueue q(BaseLater{}, std::move(storage));
  std::uint64_t seq = 0;
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) q.push({inc[k++ & 0xffff], seq++, i, 0, 0});
  for (auto _ : state) {
    BaseEvent e = q.top();
    q.pop();
    q.push({e.time_ns + inc[k++ & 0xffff], seq++, e.data, e.component, e.kind});
  }
  benchmark::DoNotOptimize(q.top());
  state.SetItemsProcessed(state.iterations());
}

void hold_event_queue(benchmark::State& state, const std::vector<TimeNs>& inc) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  EventQueue q(EventQueueConfig{.reserve_events = n + 1});
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) q.post(inc[k++ & 0xffff], 0, 0, i);
  Event e;
  for (auto _ : state) {
    q.pop(e);
    q.post(e.time_ns + inc[k++ & 0xffff], e.component, e.kind, e.data);
  }
  benchmark::DoNotOptimize(q.peek_time());
  state.SetItemsProcessed(state.iterations());
}

void BM_Hold_EventQueuePush(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto& inc = increments();
  EventQueue q(EventQueueConfig{.reserve_events = n + 1});
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) q.push(inc[k++ & 0xffff], 0, 0, i);
  Event e;
  for (auto _ : state) {
    q.pop(e);
    benchmark::DoNotOptimize(q.push(e.time_ns + inc[k++ & 0xffff], e.component, e.kind, e.data));
  }
  benchmark::DoNotOptimize(q.peek_time());
  state.SetItemsProcessed(state.iterations());
}

// The whole kernel: pop, trace hash, virtual dispatch, the handler schedules the next event.
struct Hold final : Component {
  const std::vector<TimeNs>* inc = nullptr;
  std::size_t k = 0;
  void on_event(Simulator& sim, const Event& ev) override {
    sim.post_in((*inc)[k++ & 0xffff], ev.component, ev.kind, ev.data);
  }
};

void hold_simulator(benchmark::State& state, const std::vector<TimeNs>& inc) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  SimConfig cfg;
  cfg.queue.reserve_events = n + 1;
  Simulator sim(cfg);
  Hold h;
  h.inc = &inc;
  ComponentId id = sim.add_component(h, "hold");
  for (std::size_t i = 0; i < n; ++i) sim.post_at((*h.inc)[h.k++ & 0xffff], id, 0, i);
  for (auto _ : state) sim.step();
  state.SetItemsProcessed(state.iterations());
}

void BM_Hold_BinaryHeap(benchmark::State& state) {
  hold_binary_heap(state, increments());
}
void BM_Hold_EventQueue(benchmark::State& state) {
  hold_event_queue(state, increments());
}
void BM_Hold_Simulator(benchmark::State& state) {
  hold_simulator(state, increments());
}
void BM_Fabric_BinaryHeap(benchmark::State& state) {
  hold_binary_heap(state, fabric_increments());
}
void BM_Fabric_EventQueue(benchmark::State& state) {
  hold_event_queue(state, fabric_increments());
}
void BM_Fabric_Simulator(benchmark::State& state) {
  hold_simulator(state, fabric_increments());
}

// Timer churn: N pending timers; each step re-arms a random one later (an ACK pushing back an
// RTO) and pops one event. EventQueue re-arms in O(1); the baseline can only cancel by
// tombstone (a std::vector<bool> of dead sequence numbers) and push again.
void BM_Rearm_BinaryHeap(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto& inc = increments();
  // Room for the tombstones too, so that no growth lands inside the timed loop.
  std::vector<BaseEvent> storage;
  storage.reserve(2 * n + 4096);
  BaseQueue q(BaseLater{}, std::move(storage));
  std::vector<std::uint64_t> live_seq(n);  // timer i's current sequence number
  std::uint64_t seq = 0;
  std::size_t k = 0;
  TimeNs now = 0;
  for (std::size_t i = 0; i < n; ++i) {
    live_seq[i] = seq;
    q.push({inc[k++ & 0xffff] * 8, seq++, i, 0, 0});
  }
  weft::SeededRng rng(1);
  for (auto _ : state) {
    std::size_t i = rng.below(n);
    live_seq[i] = seq;
    q.push({now + 8000 + inc[k++ & 0xffff], seq++, i, 0, 0});
    for (;;) {  // pop one live event, dropping tombstones
      BaseEvent e = q.top();
      q.pop();
      if (live_seq[e.data] != e.seq) continue;
      now = e.time_ns;
      live_seq[e.data] = seq;
      q.push({now + inc[k++ & 0xffff] * 8, seq++, e.data, 0, 0});
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Rearm_EventQueue(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto& inc = increments();
  // Room for stale keys too (at most 2n + slack before compaction).
  EventQueue q(EventQueueConfig{.reserve_events = 2 * n + 4096});
  std::vector<EventId> ids(n);
  std::size_t k = 0;
  TimeNs now = 0;
  for (std::size_t i = 0; i < n; ++i) ids[i] = q.push(inc[k++ & 0xffff] * 8, 0, 0, i);
  weft::SeededRng rng(1);
  Event e;
  for (auto _ : state) {
    std::size_t i = rng.below(n);
    q.reschedule(ids[i], now + 8000 + inc[k++ & 0xffff]);
    q.pop(e);
    now = e.time_ns;
    ids[e.data] = q.push(now + inc[k++ & 0xffff] * 8, 0, 0, e.data);
  }
  state.SetItemsProcessed(state.iterations());
}

void pending_args(benchmark::internal::Benchmark* b) {
  for (long n : {1'000L, 100'000L, 1'000'000L, 4'000'000L}) b->Arg(n);
  b->MinTime(0.5);
}

void fabric_args(benchmark::internal::Benchmark* b) {
  for (long n : {32L, 1'024L}) b->Arg(n);
  b->MinTime(0.5);
}

BENCHMARK(BM_Fabric_BinaryHeap)->Apply(fabric_args);
BENCHMARK(BM_Fabric_EventQueue)->Apply(fabric_args);
BENCHMARK(BM_Fabric_Simulator)->Apply(fabric_args);
BENCHMARK(BM_Hold_BinaryHeap)->Apply(pending_args);
BENCHMARK(BM_Hold_EventQueue)->Apply(pending_args);
BENCHMARK(BM_Hold_EventQueuePush)->Apply(pending_args);
BENCHMARK(BM_Hold_Simulator)->Apply(pending_args);
BENCHMARK(BM_Rearm_BinaryHeap)->Apply(pending_args);
BENCHMARK(BM_Rearm_EventQueue)->Apply(pending_args);

// Collects items/s per run so main() can print ratios against the baseline.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> rate;  // "BM_x/N" -> items per second
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) rate[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  auto get = [&](const char* name, long n) {
    auto it = reporter.rate.find(std::string(name) + "/" + std::to_string(n) + "/min_time:0.500");
    if (it == reporter.rate.end())
      it = reporter.rate.find(std::string(name) + "/" + std::to_string(n));
    return it == reporter.rate.end() ? 0.0 : it->second / 1e6;
  };
  std::printf(
      "\nMevents/s (hold model, the fabric's delays); ratio = EventQueue / std::priority_queue\n");
  std::printf("%-9s %10s %10s %7s %10s\n", "pending", "bin.heap", "EQ post", "ratio", "Simulator");
  for (long n : {32L, 1'024L}) {
    double base = get("BM_Fabric_BinaryHeap", n), eq = get("BM_Fabric_EventQueue", n);
    if (base == 0 && eq == 0) continue;
    std::printf("%-9ld %10.2f %10.2f %7.2f %10.2f\n", n, base, eq, base > 0 ? eq / base : 0.0,
                get("BM_Fabric_Simulator", n));
  }
  std::printf("\nMevents/s (hold model); ratio = EventQueue / std::priority_queue\n");
  std::printf("%-9s %10s %10s %7s %10s %7s %10s | %10s %10s %7s\n", "pending", "bin.heap",
              "EQ post", "ratio", "EQ push", "ratio", "Simulator", "rearm heap", "rearm EQ",
              "ratio");
  for (long n : {1'000L, 100'000L, 1'000'000L, 4'000'000L}) {
    double base = get("BM_Hold_BinaryHeap", n), eq = get("BM_Hold_EventQueue", n);
    double eqp = get("BM_Hold_EventQueuePush", n);
    double sim = get("BM_Hold_Simulator", n);
    double rb = get("BM_Rearm_BinaryHeap", n), re = get("BM_Rearm_EventQueue", n);
    if (base == 0 && eq == 0 && rb == 0) continue;
    std::printf("%-9ld %10.2f %10.2f %7.2f %10.2f %7.2f %10.2f | %10.2f %10.2f %7.2f\n", n, base,
                eq, base > 0 ? eq / base : 0.0, eqp, base > 0 ? eqp / base : 0.0, sim, rb, re,
                rb > 0 ? re / rb : 0.0);
  }
  benchmark::Shutdown();
  return 0;
}
