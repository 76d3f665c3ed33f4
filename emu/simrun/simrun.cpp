// emu/simrun/simrun.cpp — building, driving and reporting one `weft sim` run (see simrun.hpp).
#include "emu/simrun/simrun.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <memory>

#include <nlohmann/json.hpp>

#include "emu/sim/rng_stream.hpp"
#include "emu/topo/spec.hpp"
#include "src/wire/pcap.hpp"

namespace weft::simrun {

namespace {

constexpr std::size_t kFlowsPrinted = 16;
constexpr std::size_t kHottest = 5;
constexpr std::uint64_t kRecvTag = 1ULL << 63;

struct Endpoint {
  topo::NodeId node = topo::kNoNode;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  std::vector<std::uint8_t> mem;
  MemoryRegion* mr = nullptr;
};

struct Flow {
  std::uint32_t src = 0, dst = 0;  // indices into endpoints
  QueuePair* sqp = nullptr;
  QueuePair* dqp = nullptr;
  std::uint64_t posted = 0, completed = 0, errors = 0, bytes = 0;
  std::string first_error;
  bool dead = false;
  std::deque<TimeNs> post_times;
  std::vector<TimeNs> lat;
};

// Drives every flow from the HCAs' completion hooks, at exact virtual times.
class Driver {
 public:
  Driver(fabric::Fabric& f, const WorkloadSpec& w, TimeNs end_ns) : f_(f), w_(w), end_ns_(end_ns) {}

  Result<bool, std::string> build(
      const std::vector<std::pair<std::uint32_t, std::uint32_t>>& pairs) {
    const std::vector<topo::NodeId> hcas = f_.hcas();
    std::vector<std::uint32_t> qps_per(hcas.size(), 0);
    std::vector<bool> completes(hcas.size(), false);  // gets completions: a hook to poll them
    for (const auto& [a, b] : pairs) {
      if (a >= hcas.size() || b >= hcas.size()) {
        return "flow " + std::to_string(a) + ":" + std::to_string(b) + " names an HCA beyond the " +
               std::to_string(hcas.size()) + " of this topology";
      }
      qps_per[a]++;
      qps_per[b]++;
      completes[a] = true;
      if (w_.op == WorkloadSpec::Op::kSend) completes[b] = true;  // receive completions
    }
    eps_.resize(hcas.size());
    const std::uint32_t depth = w_.depth;
    for (std::uint32_t i = 0; i < hcas.size(); ++i) {
      if (qps_per[i] == 0) continue;
      Endpoint& e = eps_[i];
      e.node = hcas[i];
      Device& dev = f_.device(e.node);
      e.pd = *dev.alloc_pd();
      auto cq = dev.create_cq(std::max<std::uint32_t>(256, 2 * (depth + 1) * qps_per[i]));
      if (!cq) return std::string("cannot create a CQ: ") + std::string(to_string(cq.error()));
      e.cq = *cq;
      e.mem.assign(w_.size_bytes, 0);
      e.mr = *dev.reg_mr(e.pd, e.mem.data(), e.mem.size(),
                         kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
      if (completes[i]) f_.hca(e.node).set_completion_hook([this, i] { on_completions(i); });
    }
    for (const auto& [a, b] : pairs) {
      Flow fl;
      fl.src = a;
      fl.dst = b;
      fl.sqp = make_qp(eps_[a], depth);
      fl.dqp = make_qp(eps_[b], depth);
      if (!fl.sqp || !fl.dqp) return std::string("cannot create a QP");
      if (!connect(*fl.sqp, f_.lid(eps_[b].node), fl.dqp->qp_num()) ||
          !connect(*fl.dqp, f_.lid(eps_[a].node), fl.sqp->qp_num())) {
        return std::string("cannot bring a QP to RTS");
      }
      flows_.push_back(std::move(fl));
    }
    for (std::uint32_t i = 0; i < flows_.size(); ++i) {
      qp_flow_.emplace_back(flows_[i].sqp, i);
      qp_flow_.emplace_back(flows_[i].dqp, i);
    }
    return true;
  }

  void start() {
    for (std::uint32_t i = 0; i < flows_.size(); ++i) {
      if (w_.op == WorkloadSpec::Op::kSend) {
        for (std::uint32_t k = 0; k < w_.depth; ++k) post_recv(i);
      }
      refill(i);
    }
  }

  bool all_done() const {
    for (const Flow& fl : flows_) {
      if (!fl.dead && fl.completed < fl.posted) return false;
    }
    return true;
  }
  std::vector<Flow>& flows() { return flows_; }
  const std::vector<Endpoint>& endpoints() const { return eps_; }

 private:
  QueuePair* make_qp(Endpoint& e, std::uint32_t depth) {
    QpInitAttr ia;
    ia.type = QpType::kRc;
    ia.pd = e.pd;
    ia.send_cq = e.cq;
    ia.recv_cq = e.cq;
    ia.caps.max_send_wr = depth + 1;
    ia.caps.max_recv_wr = depth + 1;
    auto qp = f_.device(e.node).create_qp(ia);
    return qp ? *qp : nullptr;
  }

  bool connect(QueuePair& qp, std::uint16_t dlid, std::uint32_t dest_qpn) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.pkey_index = 0;
    a.port_num = 1;
    a.access_flags = kAccessRemoteWrite | kAccessRemoteRead;
    if (qp.modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags) != Errc::kOk) return false;
    a.qp_state = QpState::kRtr;
    a.av = AddressVector{};
    a.av.dlid = dlid;
    a.path_mtu = w_.mtu;
    a.dest_qpn = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    if (qp.modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                         kQpMinRnrTimer) != Errc::kOk) {
      return false;
    }
    a.qp_state = QpState::kRts;
    a.sq_psn = 0;
    a.timeout = 8;  // 4.096 us * 2^8 ~ 1 ms
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    return qp.modify(a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                            kQpMaxRdAtomic) == Errc::kOk;
  }

  void post_recv(std::uint32_t i) {
    Flow& fl = flows_[i];
    Endpoint& d = eps_[fl.dst];
    Sge sge{reinterpret_cast<std::uint64_t>(d.mem.data()), w_.size_bytes, d.mr->lkey()};
    RecvWr wr;
    wr.wr_id = kRecvTag | i;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    (void)fl.dqp->post_recv(wr);
  }

  void refill(std::uint32_t i) {
    Flow& fl = flows_[i];
    Endpoint& s = eps_[fl.src];
    Endpoint& d = eps_[fl.dst];
    const TimeNs now = f_.sim().now();
    bool posted = false;
    while (!fl.dead && now < end_ns_ && fl.posted - fl.completed < w_.depth) {
      Sge sge{reinterpret_cast<std::uint64_t>(s.mem.data()), w_.size_bytes, s.mr->lkey()};
      SendWr wr;
      wr.wr_id = i;
      wr.opcode = w_.op == WorkloadSpec::Op::kWrite  ? WrOpcode::kRdmaWrite
                  : w_.op == WorkloadSpec::Op::kRead ? WrOpcode::kRdmaRead
                                                     : WrOpcode::kSend;
      wr.send_flags = kSignaled;
      wr.sg_list = std::span<const Sge>(&sge, 1);
      wr.remote_addr = reinterpret_cast<std::uint64_t>(d.mem.data());
      wr.rkey = d.mr->rkey();
      if (fl.sqp->post_send(wr) != Errc::kOk) break;
      fl.posted++;
      fl.post_times.push_back(now);
      posted = true;
    }
    if (posted) f_.kick(s.node);
  }

  void on_completions(std::uint32_t ep) {
    std::array<WorkCompletion, 64>& wc = wc_;  // a member: called once per delivered packet
    const TimeNs now = f_.sim().now();
    for (;;) {
      const std::size_t n = eps_[ep].cq->poll(wc);
      for (std::size_t k = 0; k < n; ++k) {
        const WorkCompletion& c = wc[k];
        const std::uint32_t i = static_cast<std::uint32_t>(c.wr_id & ~kRecvTag);
        if (i >= flows_.size()) continue;
        Flow& fl = flows_[i];
        if (c.wr_id & kRecvTag) {
          if (c.status == WcStatus::kSuccess) post_recv(i);
          continue;
        }
        fl.completed++;
        if (!fl.post_times.empty()) {
          fl.lat.push_back(now - fl.post_times.front());
          fl.post_times.pop_front();
        }
        if (c.status == WcStatus::kSuccess) {
          fl.bytes += w_.size_bytes;
        } else {
          fl.errors++;
          if (fl.first_error.empty()) fl.first_error = std::string(to_string(c.status));
          fl.dead = true;  // the QP is in ERR: the rest flush
        }
        refill(i);
      }
      if (n < wc.size()) break;
    }
  }

  fabric::Fabric& f_;
  WorkloadSpec w_;
  TimeNs end_ns_;
  std::vector<Endpoint> eps_;
  std::vector<Flow> flows_;
  std::vector<std::pair<QueuePair*, std::uint32_t>> qp_flow_;
  std::array<WorkCompletion, 64> wc_{};
};

// Captures what chosen ports receive (ERF-wrapped IB records, which tshark 4.0 decodes).
class PcapTap final : public fabric::PacketTap {
 public:
  bool add(const topo::Topology& t, topo::PortRef p, const std::string& dir) {
    for (const Cap& c : caps_) {
      if (c.port == p) return true;
    }
    auto w = std::make_unique<wire::PcapWriter>();
    const std::string path =
        dir + "/" + faults::port_name(t, p).replace(faults::port_name(t, p).find('/'), 1, "_") +
        ".pcap";
    if (!w->open(path, wire::kLinktypeErf)) return false;
    caps_.push_back({p, std::move(w), path});
    return true;
  }
  void on_receive(topo::NodeId node, int port, const fabric::Packet& p, TimeNs now) override {
    for (Cap& c : caps_) {
      if (c.port.node == node && c.port.port == port && !p.bytes.empty()) {
        c.writer->write(now, p.bytes);
      }
    }
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    for (const Cap& c : caps_) out.push_back(c.path);
    return out;
  }

 private:
  struct Cap {
    topo::PortRef port;
    std::unique_ptr<wire::PcapWriter> writer;
    std::string path;
  };
  std::vector<Cap> caps_;
};

TimeNs percentile(std::vector<TimeNs>& v, double q) {
  if (v.empty()) return 0;
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> make_pairs(const WorkloadSpec& w,
                                                                std::size_t n, std::uint64_t seed) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  switch (w.kind) {
    case WorkloadSpec::Kind::kPairs:
      return w.flows;
    case WorkloadSpec::Kind::kAllToAll:
      for (std::uint32_t a = 0; a < n; ++a) {
        const std::size_t peers = w.fanout == 0 ? n - 1 : std::min<std::size_t>(w.fanout, n - 1);
        for (std::size_t k = 1; k <= peers; ++k) {
          out.emplace_back(a, static_cast<std::uint32_t>((a + k) % n));
        }
      }
      return out;
    case WorkloadSpec::Kind::kIncast:
      for (std::uint32_t a = 1; a <= w.incast_senders; ++a) out.emplace_back(a, 0);
      return out;
    case WorkloadSpec::Kind::kPermutation: {
      // A seeded derangement: shuffle, then send each to the next in the shuffled ring.
      std::vector<std::uint32_t> perm(n);
      for (std::uint32_t i = 0; i < n; ++i) perm[i] = i;
      SeededRng rng(sim::stream_seed(seed, sim::fnv1a64("workload:permutation")));
      for (std::size_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
      for (std::size_t i = 0; i < n && n > 1; ++i) out.emplace_back(perm[i], perm[(i + 1) % n]);
      return out;
    }
  }
  return out;
}

double wall_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of this process: on a shared machine the wall clock also counts time spent waiting
// for a core; CPU time is what the same run takes on a core of its own.
double cpu_now_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

Result<SimReport, std::string> run_sim(const SimOptions& o) {
  auto topo =
      o.loaded ? Result<topo::Topology, topo::SpecError>(*o.loaded) : topo::from_spec(o.topology);
  if (!topo) return "topology: " + topo.error().message;
  auto wl = parse_workload(o.workload);
  if (!wl) return "workload: " + wl.error();
  WorkloadSpec w = *wl;
  if (w.depth == 0) w.depth = w.kind == WorkloadSpec::Kind::kAllToAll ? 1 : 8;
  SimReport r;
  r.seed = o.seed;
  r.topology = o.topology;
  r.workload = o.workload;
  r.duration_ns = w.duration_ns ? w.duration_ns : o.duration_ns;
  for (const auto& n : topo->nodes()) (n.is_switch() ? r.switches : r.hcas)++;
  r.links = topo->link_count();
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs = make_pairs(w, r.hcas, o.seed);
  if (w.kind == WorkloadSpec::Kind::kIncast && w.incast_senders >= r.hcas) {
    return "workload: incast:" + std::to_string(w.incast_senders) + " needs more than " +
           std::to_string(w.incast_senders) + " HCAs; the topology has " + std::to_string(r.hcas);
  }
  if (pairs.empty()) return std::string("workload: no flows (the topology has too few HCAs)");

  sim::SimConfig sc;
  sc.seed = o.seed;
  sc.events_max = o.events_max;
  sim::Simulator sim(sc);
  fabric::FabricConfig fc = o.fabric;
  fc.sm_managed = true;  // the SM programs the fabric over the fabric itself
  fabric::Fabric fab(sim, *topo, fc);
  faults::FaultLog log;
  FabricSmControl sm(fab, log, o.sm);
  r.sm = sm.bring_up();
  if (!r.sm.error.empty() && !r.sm.routes_valid) return r.sm.error;
  faults::FaultInjector inj(fab, log, &sm);
  inj.apply(o.scenario);

  PcapTap tap;
  if (!o.pcap_dir.empty()) {
    const std::vector<topo::NodeId> hcas = fab.hcas();
    std::vector<topo::PortRef> ports;
    for (std::size_t i = 0; i < pairs.size() && i < 8; ++i) {
      ports.push_back({hcas[pairs[i].first], 1});
      ports.push_back({hcas[pairs[i].second], 1});
    }
    for (const faults::PortFaultSpec& p : o.scenario.ports) {
      ports.push_back(p.port);
      if (p.both_ends) {
        ports.push_back(
            topo->link(topo->node(p.port.node).ports[p.port.port].link).other(p.port.node));
      }
    }
    for (const topo::PortRef& p : ports) {
      if (!tap.add(*topo, p, o.pcap_dir)) return "--pcap: cannot write into " + o.pcap_dir;
    }
    fab.set_tap(&tap);
  }

  const TimeNs t0 = sim.now();
  const TimeNs end = t0 + r.duration_ns;
  Driver drv(fab, w, end);
  auto built = drv.build(pairs);
  if (!built) return "workload: " + built.error();
  const double w0 = wall_now_s();
  const double c0 = cpu_now_s();
  drv.start();
  const TimeNs step = std::max<TimeNs>(1, r.duration_ns / 100);
  const TimeNs drain_end = end + o.drain_ns_max;
  for (TimeNs t = t0; t < drain_end;) {
    t = std::min(drain_end, t + step);
    const sim::StopReason why = sim.run_until(t);
    if (o.progress) o.progress(std::min(t, end) - t0, r.duration_ns, sim.events_dispatched());
    if (why == sim::StopReason::kEventsMax) break;
    if (t >= end && drv.all_done()) break;
  }
  r.wall_s = wall_now_s() - w0;
  r.cpu_s = cpu_now_s() - c0;
  r.end_ns = sim.now();
  r.events = sim.events_dispatched();
  r.trace_hash = sim.trace_hash();
  r.data_packets = fab.data_packets_delivered();
  r.counters = fab.totals();
  r.fault_log = log.entries();
  sm.finish();
  r.sm.reroutes = sm.report().reroutes;
  r.sm.traps = sm.report().traps;
  r.sm.light_sweeps = sm.report().light_sweeps;
  r.sm.heavy_sweeps = sm.report().heavy_sweeps;
  r.sm.ports_stuck = sm.report().ports_stuck;
  r.pcaps = tap.paths();

  const std::vector<topo::NodeId> hcas = fab.hcas();
  std::vector<TimeNs> all_lat;
  for (Flow& fl : drv.flows()) {
    FlowReport fr;
    fr.src = fl.src;
    fr.dst = fl.dst;
    fr.src_name = topo->node(hcas[fl.src]).description;
    fr.dst_name = topo->node(hcas[fl.dst]).description;
    fr.posted = fl.posted;
    fr.completed = fl.completed;
    fr.errors = fl.errors;
    fr.bytes = fl.bytes;
    fr.first_error = fl.first_error;
    fr.gbps = static_cast<double>(fl.bytes) * 8.0 / static_cast<double>(r.duration_ns);
    all_lat.insert(all_lat.end(), fl.lat.begin(), fl.lat.end());
    fr.lat_p50_ns = percentile(fl.lat, 0.50);
    fr.lat_p99_ns = percentile(fl.lat, 0.99);
    fr.lat_max_ns = fl.lat.empty() ? 0 : *std::max_element(fl.lat.begin(), fl.lat.end());
    r.posted += fl.posted;
    r.completed += fl.completed;
    r.lost += fl.errors;
    r.in_flight += fl.posted - fl.completed;
    r.gbps_total += fr.gbps;
    r.flows.push_back(std::move(fr));
  }
  r.lat_p50_ns = percentile(all_lat, 0.50);
  r.lat_p99_ns = percentile(all_lat, 0.99);
  r.lat_max_ns = all_lat.empty() ? 0 : *std::max_element(all_lat.begin(), all_lat.end());

  const double elapsed = static_cast<double>(std::max<TimeNs>(1, r.end_ns - t0));
  for (topo::NodeId n = 0; n < topo->node_count(); ++n) {
    for (int p = 1; p <= fab.node(n).num_ports(); ++p) {
      if (!fab.node(n).port(p).connected) continue;
      const fabric::PortCounters& c = fab.counters(n, p);
      r.hottest.push_back({faults::port_name(*topo, {n, p}),
                           static_cast<double>(c.busy_ns) / elapsed, c.xmit_wait_ns});
    }
  }
  const std::size_t keep = std::min(kHottest, r.hottest.size());
  std::partial_sort(r.hottest.begin(), r.hottest.begin() + static_cast<std::ptrdiff_t>(keep),
                    r.hottest.end(), [](const LinkLoad& a, const LinkLoad& b) {
                      return a.utilization != b.utilization ? a.utilization > b.utilization
                                                            : a.port < b.port;
                    });
  r.hottest.resize(keep);
  return r;
}

void print_report(const SimReport& r, std::FILE* out) {
  std::fprintf(out, "weft sim: seed %llu, %s (%zu switches, %zu HCAs, %zu links), %s\n",
               static_cast<unsigned long long>(r.seed), r.topology.c_str(), r.switches, r.hcas,
               r.links, r.workload.c_str());
  std::fprintf(out,
               "SM on %s (%s, LMC %d) bring-up: %.3f s wall, %.6f s virtual, %llu MADs, routes "
               "%s%s%s\n",
               r.sm.node.c_str(), r.sm.engine.c_str(), r.sm.lmc, r.sm.wall_s, r.sm.virtual_s,
               static_cast<unsigned long long>(r.sm.mads),
               r.sm.routes_valid ? "valid" : "NOT valid", r.sm.error.empty() ? "" : ": ",
               r.sm.error.c_str());
  std::fprintf(out,
               "run: %.3f us virtual (%.3f us of traffic), %llu events in %.3f s wall, %.3f s CPU "
               "(%.2f M events/s), %llu data packets delivered, trace hash %016llx\n",
               static_cast<double>(r.end_ns) / 1e3, static_cast<double>(r.duration_ns) / 1e3,
               static_cast<unsigned long long>(r.events), r.wall_s, r.cpu_s,
               r.wall_s > 0 ? static_cast<double>(r.events) / r.wall_s / 1e6 : 0.0,
               static_cast<unsigned long long>(r.data_packets),
               static_cast<unsigned long long>(r.trace_hash));
  std::fprintf(
      out,
      "messages: %llu posted, %llu completed, %llu lost (error completions), %llu in "
      "flight at the end; %.2f Gb/s in total; latency p50 %.3f us, p99 %.3f us, max "
      "%.3f us\n",
      static_cast<unsigned long long>(r.posted), static_cast<unsigned long long>(r.completed),
      static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(r.in_flight),
      r.gbps_total, static_cast<double>(r.lat_p50_ns) / 1e3,
      static_cast<double>(r.lat_p99_ns) / 1e3, static_cast<double>(r.lat_max_ns) / 1e3);
  std::fprintf(out, "flows (%zu):\n", r.flows.size());
  for (std::size_t i = 0; i < r.flows.size() && i < kFlowsPrinted; ++i) {
    const FlowReport& f = r.flows[i];
    std::fprintf(out,
                 "  %4u %-10s -> %4u %-10s %7.2f Gb/s  %6llu/%-6llu done  p50 %8.3f us  p99 "
                 "%8.3f us%s%s\n",
                 f.src, f.src_name.c_str(), f.dst, f.dst_name.c_str(), f.gbps,
                 static_cast<unsigned long long>(f.completed),
                 static_cast<unsigned long long>(f.posted), static_cast<double>(f.lat_p50_ns) / 1e3,
                 static_cast<double>(f.lat_p99_ns) / 1e3, f.first_error.empty() ? "" : "  ERROR ",
                 f.first_error.c_str());
  }
  if (r.flows.size() > kFlowsPrinted) std::fprintf(out, "  ... (--json lists every flow)\n");
  std::fprintf(out, "hottest links (transmit side):\n");
  for (const LinkLoad& l : r.hottest) {
    std::fprintf(out, "  %-16s %5.1f %% busy, xmit wait %.3f us\n", l.port.c_str(),
                 100.0 * l.utilization, static_cast<double>(l.xmit_wait_ns) / 1e3);
  }
  const fabric::PortCounters& c = r.counters;
  std::fprintf(out,
               "counters: buffer drops %llu, symbol errors %llu, rcv errors %llu, xmit discards "
               "%llu, link downed %llu, vl15 dropped %llu, fec corrected %llu\n"
               "          faults: dropped %llu, duplicated %llu, delayed %llu, reordered %llu\n",
               static_cast<unsigned long long>(c.buffer_overflows),
               static_cast<unsigned long long>(c.symbol_error_counter),
               static_cast<unsigned long long>(c.port_rcv_errors),
               static_cast<unsigned long long>(c.port_xmit_discards),
               static_cast<unsigned long long>(c.link_downed_counter),
               static_cast<unsigned long long>(c.vl15_dropped),
               static_cast<unsigned long long>(c.fec_corrected_blocks),
               static_cast<unsigned long long>(c.fault_dropped),
               static_cast<unsigned long long>(c.fault_duplicated),
               static_cast<unsigned long long>(c.fault_delayed),
               static_cast<unsigned long long>(c.fault_reordered));
  std::fprintf(out, "fault log (%zu):\n", r.fault_log.size());
  faults::FaultLog log;
  for (const auto& e : r.fault_log) log.add(e.at_ns, e.what);
  log.print(out);
  for (const std::string& p : r.pcaps) std::fprintf(out, "capture: %s\n", p.c_str());
}

std::string report_json(const SimReport& r) {
  using nlohmann::json;
  json j;
  j["seed"] = r.seed;
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(r.trace_hash));
  j["trace_hash"] = hash;
  j["topology"] = {
      {"spec", r.topology}, {"switches", r.switches}, {"hcas", r.hcas}, {"links", r.links}};
  j["workload"] = r.workload;
  j["sm"] = {{"node", r.sm.node},
             {"engine", r.sm.engine},
             {"lmc", r.sm.lmc},
             {"wall_s", r.sm.wall_s},
             {"virtual_s", r.sm.virtual_s},
             {"mads", r.sm.mads},
             {"routes_valid", r.sm.routes_valid},
             {"reroutes", r.sm.reroutes},
             {"traps", r.sm.traps},
             {"ports_stuck", r.sm.ports_stuck},
             {"light_sweeps", r.sm.light_sweeps},
             {"heavy_sweeps", r.sm.heavy_sweeps},
             {"error", r.sm.error}};
  j["run"] = {
      {"duration_ns", r.duration_ns}, {"end_ns", r.end_ns}, {"events", r.events},
      {"wall_s", r.wall_s},           {"cpu_s", r.cpu_s},   {"data_packets", r.data_packets}};
  j["messages"] = {{"posted", r.posted},
                   {"completed", r.completed},
                   {"lost", r.lost},
                   {"in_flight", r.in_flight}};
  j["latency_ns"] = {{"p50", r.lat_p50_ns}, {"p99", r.lat_p99_ns}, {"max", r.lat_max_ns}};
  j["gbps_total"] = r.gbps_total;
  json flows = json::array();
  for (const FlowReport& f : r.flows) {
    flows.push_back({{"src", f.src},
                     {"dst", f.dst},
                     {"src_name", f.src_name},
                     {"dst_name", f.dst_name},
                     {"posted", f.posted},
                     {"completed", f.completed},
                     {"errors", f.errors},
                     {"first_error", f.first_error},
                     {"gbps", f.gbps},
                     {"lat_p50_ns", f.lat_p50_ns},
                     {"lat_p99_ns", f.lat_p99_ns},
                     {"lat_max_ns", f.lat_max_ns}});
  }
  j["flows"] = flows;
  json hot = json::array();
  for (const LinkLoad& l : r.hottest) {
    hot.push_back(
        {{"port", l.port}, {"utilization", l.utilization}, {"xmit_wait_ns", l.xmit_wait_ns}});
  }
  j["hottest_links"] = hot;
  const fabric::PortCounters& c = r.counters;
  j["counters"] = {{"buffer_drops", c.buffer_overflows},
                   {"symbol_errors", c.symbol_error_counter},
                   {"port_rcv_errors", c.port_rcv_errors},
                   {"port_xmit_discards", c.port_xmit_discards},
                   {"link_downed", c.link_downed_counter},
                   {"vl15_dropped", c.vl15_dropped},
                   {"fec_corrected_blocks", c.fec_corrected_blocks},
                   {"fec_uncorrectable", c.fec_uncorrectable},
                   {"fault_dropped", c.fault_dropped},
                   {"fault_duplicated", c.fault_duplicated},
                   {"fault_delayed", c.fault_delayed},
                   {"fault_reordered", c.fault_reordered}};
  json fl = json::array();
  for (const auto& e : r.fault_log) fl.push_back({{"at_ns", e.at_ns}, {"what", e.what}});
  j["fault_log"] = fl;
  j["pcaps"] = r.pcaps;
  return j.dump(2);
}

}  // namespace weft::simrun
