// emu/simrun/simrun.hpp — one `weft sim` run as a library: build the fabric from a topology
// spec, bring the subnet up with the SM, apply a fault scenario, drive a workload over the
// transport engines on every HCA, and report (text or JSON).
//
// Workload specs ("kind:key=value,..."), every kind with size= (bytes, K/M suffix), mtu=
// (256..4096), depth= (messages outstanding per flow), op= (write, read, send) and duration=:
//   pairs:flows=0:5+1:6          the listed (source HCA, destination HCA) flows, by HCA index
//   all-to-all                   every ordered HCA pair; fanout=F: each HCA to the next F
//                                HCAs only (i+1..i+F mod n), which bounds QPs on big fabrics
//   incast:N                     HCAs 1..N to HCA 0
//   permutation                  each HCA to one other, a seeded derangement
// Latency is post to completion of each message, in virtual time, observed exactly (the
// HCA completion hook polls the CQ when the Device took a packet).
//
// Determinism: everything random derives from SimOptions::seed; equal options give an equal
// trace hash. Thread-safety: one call runs on the caller's thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <weft/types.hpp>
#include <weft/verbs.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/faults/injector.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/simrun/sm_control.hpp"

namespace weft::simrun {

struct WorkloadSpec {
  enum class Kind : std::uint8_t { kPairs, kAllToAll, kIncast, kPermutation };
  enum class Op : std::uint8_t { kWrite, kRead, kSend };
  Kind kind = Kind::kPairs;
  Op op = Op::kWrite;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> flows;  // pairs: HCA indices
  std::uint32_t incast_senders = 0;
  std::uint32_t fanout = 0;  // all-to-all: 0 = every other HCA
  std::uint32_t size_bytes = 65536;
  Mtu mtu = Mtu::k4096;
  std::uint32_t depth = 0;  // 0 = the kind's default (8; 1 for all-to-all)
  TimeNs duration_ns = 0;   // 0 = SimOptions::duration_ns
};
Result<WorkloadSpec, std::string> parse_workload(std::string_view spec);
const char* to_string(WorkloadSpec::Op op);

struct SimOptions {
  std::string topology = "fat-tree:k=4";  // a generator spec, or the name of `loaded`
  // When set, the topology itself (e.g. read from an ibnetdiscover net file); `topology` only
  // names it in the report.
  std::optional<topo::Topology> loaded;
  // The subnet manager: routing engine, LMC, sweep periods, its HCA (emu/sm/fabric_sm.hpp).
  sm::SmOptions sm{};
  std::string workload = "pairs:flows=0:1";
  faults::Scenario scenario;
  std::uint64_t seed = 1;
  TimeNs duration_ns = 100'000;      // traffic is posted during this
  TimeNs drain_ns_max = 20'000'000;  // then in-flight messages get this long to finish
  std::uint64_t events_max = 2'000'000'000;
  fabric::FabricConfig fabric{};
  std::string pcap_dir;  // "" = no captures
  // Called about every 1 % of the duration: virtual ns done, total, events so far.
  std::function<void(TimeNs done_ns, TimeNs total_ns, std::uint64_t events)> progress;
};

struct FlowReport {
  std::uint32_t src = 0, dst = 0;  // HCA indices
  std::string src_name, dst_name;
  std::uint64_t posted = 0, completed = 0, errors = 0, bytes = 0;
  std::string first_error;  // status of the first failed completion
  double gbps = 0;
  TimeNs lat_p50_ns = 0, lat_p99_ns = 0, lat_max_ns = 0;
};

struct LinkLoad {
  std::string port;  // "node/pN", transmit side
  double utilization = 0;
  std::uint64_t xmit_wait_ns = 0;
};

struct SimReport {
  std::uint64_t seed = 0;
  std::string topology, workload;
  std::size_t switches = 0, hcas = 0, links = 0;
  SmReport sm;
  TimeNs duration_ns = 0, end_ns = 0;
  std::uint64_t events = 0, trace_hash = 0;
  double wall_s = 0;
  double cpu_s = 0;  // CPU time of this process over the run (the simulation's own cost)
  std::uint64_t posted = 0, completed = 0, lost = 0, in_flight = 0;
  std::uint64_t data_packets = 0;
  std::vector<FlowReport> flows;  // all of them (printing keeps the first few)
  TimeNs lat_p50_ns = 0, lat_p99_ns = 0, lat_max_ns = 0;
  double gbps_total = 0;
  std::vector<LinkLoad> hottest;
  fabric::PortCounters counters{};
  std::vector<faults::LogEntry> fault_log;
  std::vector<std::string> pcaps;
};

// Errors (bad topology, workload or scenario; a subnet that does not come up) are strings,
// one sentence each.
Result<SimReport, std::string> run_sim(const SimOptions& options);

void print_report(const SimReport& r, std::FILE* out);
std::string report_json(const SimReport& r);

}  // namespace weft::simrun
