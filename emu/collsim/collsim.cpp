// emu/collsim/collsim.cpp — see collsim.hpp.
#include "emu/collsim/collsim.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <memory>
#include <queue>

#include "emu/collsim/fabric_net.hpp"
#include "emu/collsim/plan_sim.hpp"
#include "emu/topo/spec.hpp"

#include "src/coll/communicator.hpp"
#include "src/coll/model.hpp"
#include "src/coll/pattern.hpp"
#include "src/coll/reduce.hpp"
#include "src/coll/transport.hpp"

namespace weft::collsim {

using coll::Algo;
using coll::CollKind;
using coll::DataType;
using coll::RedOp;
using coll::TransportErrc;
using coll::TransportEvent;

namespace {

struct Port {
  double free = 0;  // virtual time (s) the port finishes what it was given
};

struct Pending {
  double t;
  std::uint64_t seq;
  int rank;  // -1: a deferred fabric write (deferred_[ev.wr_id])
  TransportEvent ev;
};
constexpr double kNever = std::numeric_limits<double>::infinity();
struct Later {
  bool operator()(const Pending& a, const Pending& b) const {
    return a.t > b.t || (a.t == b.t && a.seq > b.seq);
  }
};

class Cluster;

class ClusterTransport final : public coll::Transport {
 public:
  ClusterTransport(Cluster& c, int rank) : c_(c), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override;
  int lanes() const override;
  std::uint32_t slots() const override;
  std::uint32_t slot_bytes() const override;
  TransportErrc register_memory(const void* addr, std::size_t bytes) override;
  void unregister_memory(const void* addr) override;
  TransportErrc post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                           std::uint32_t slot, std::uint64_t wr_id) override;
  TransportErrc post_grant(int peer, int lane, std::uint32_t credits) override;
  std::size_t poll(std::span<TransportEvent> out) override {
    std::size_t k = 0;
    while (k < out.size() && !queue.empty()) {
      out[k++] = queue.front();
      queue.pop_front();
    }
    return k;
  }
  const std::uint8_t* inbox(int peer, int lane, std::uint32_t slot) const override;

  std::deque<TransportEvent> queue;

 private:
  Cluster& c_;
  int rank_;
};

class Cluster {
 public:
  Cluster(const ClusterConfig& cfg, int lanes, std::uint32_t slots, std::uint32_t slot_bytes,
          bool payload)
      : cfg_(cfg),
        n_(cfg.nodes * cfg.gpus),
        lanes_(lanes),
        slots_(slots),
        slot_bytes_(slot_bytes),
        payload_(payload),
        nvl_out_(static_cast<std::size_t>(n_)),
        nvl_in_(static_cast<std::size_t>(n_)),
        nic_out_(static_cast<std::size_t>(n_)),
        nic_in_(static_cast<std::size_t>(n_)),
        compute_free_(static_cast<std::size_t>(n_), 0.0),
        inboxes_(payload ? static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_) *
                               static_cast<std::size_t>(lanes) * slots
                         : 0),
        scratch_(slot_bytes, 0) {
    for (int r = 0; r < n_; ++r)
      transports_.push_back(std::make_unique<ClusterTransport>(*this, r));
  }

  int size() const { return n_; }
  int lanes() const { return lanes_; }
  std::uint32_t slots() const { return slots_; }
  std::uint32_t slot_bytes() const { return slot_bytes_; }
  ClusterTransport& transport(int r) { return *transports_[static_cast<std::size_t>(r)]; }
  // Inter-node traffic goes through the packet-level fabric from now on (not owned).
  void use_fabric(FabricNet* net) {
    net_ = net;
    now_ = static_cast<double>(net_->sim().now()) * 1e-9;
    net_->set_sink([this](int r, const TransportEvent& ev) {
      transport(r).queue.push_back(ev);
      woken_.push_back(r);
    });
  }
  FabricNet* net() { return net_; }
  bool remote(int a, int b) const { return net_ != nullptr && a / cfg_.gpus != b / cfg_.gpus; }
  double now() const { return now_; }
  std::uint64_t messages() const { return messages_; }

  // The rank reduced `bytes` more at now(): its compute is busy that much longer.
  void charge_reduce(int r, std::uint64_t bytes) {
    if (bytes == 0 || cfg_.reduce_Bps <= 0) return;
    double& f = compute_free_[static_cast<std::size_t>(r)];
    f = std::max(f, now_) + static_cast<double>(bytes) / cfg_.reduce_Bps;
  }
  double compute_free(int r) const {
    return std::max(now_, compute_free_[static_cast<std::size_t>(r)]);
  }

  TransportErrc write(int from, int to, int lane, const void* src, std::uint32_t bytes,
                      std::uint32_t slot, std::uint64_t wr_id) {
    ++messages_;
    if (remote(from, to)) {
      // The NIC cannot send what the GPU has not finished reducing: post when compute is free.
      const double t0 = compute_free(from);
      if (t0 <= now_) return net_->write(from, to, lane, src, bytes, slot, wr_id);
      TransportEvent e{.kind = TransportEvent::Kind::kWriteDone, .peer = to, .lane = lane};
      e.wr_id = deferred_.size();
      deferred_.push_back({from, to, lane, src, bytes, slot, wr_id});
      push(t0, -1, e);
      return TransportErrc::kOk;
    }
    if (payload_ && bytes > 0) std::memcpy(box(to, from, lane, slot, bytes), src, bytes);
    const double t0 = compute_free(from);
    const Hop h = hop_of(cfg_, from, to, lane);
    const auto ue = static_cast<std::size_t>(h.egress), ui = static_cast<std::size_t>(h.ingress);
    Port* eg = h.nvlink ? &nvl_out_[ue] : &nic_out_[ue];
    Port* ig = h.nvlink ? &nvl_in_[ui] : &nic_in_[ui];
    const double rate = h.rate_Bps, lat = h.latency_s;
    const double ser = static_cast<double>(bytes) / rate;
    const double start = std::max(t0, eg->free);
    eg->free = start + ser;
    const double done = std::max(start + lat + ser, ig->free + ser);
    ig->free = done;
    TransportEvent d{.kind = TransportEvent::Kind::kData, .peer = from, .lane = lane};
    d.slot = slot;
    d.bytes = bytes;
    push(done, to, d);
    TransportEvent w{.kind = TransportEvent::Kind::kWriteDone, .peer = to, .lane = lane};
    w.wr_id = wr_id;
    push(done + lat, from, w);
    return TransportErrc::kOk;
  }

  TransportErrc grant(int from, int to, int lane, std::uint32_t credits) {
    ++messages_;
    if (remote(from, to)) return net_->grant(from, to, lane, credits);
    const int g = cfg_.gpus;
    const double lat = from / g == to / g ? cfg_.nvl_latency_s : cfg_.nic_latency_s;
    TransportEvent e{.kind = TransportEvent::Kind::kGrant, .peer = from, .lane = lane};
    e.credits = credits;
    push(now_ + lat, to, e);
    return TransportErrc::kOk;
  }

  const std::uint8_t* inbox(int rank, int peer, int lane, std::uint32_t slot) {
    if (remote(rank, peer)) return net_->inbox(rank, peer, lane, slot);
    if (!payload_) return scratch_.data();
    const std::uint8_t* p = box(rank, peer, lane, slot, 0);
    return p != nullptr ? p : scratch_.data();  // a zero-length chunk was never written
  }

  // Delivers every event of the earliest pending time (NVLink model or fabric completions) into
  // the transports' queues, no later than `limit`; returns the ranks that got events (sorted,
  // unique). Empty when nothing is pending before `limit` (now() is then `limit` if finite).
  const std::vector<int>& advance(double limit = kNever) {
    // woken_ may already hold ranks a fabric completion reached outside a run (none expected).
    while (woken_.empty()) {
      const double tpq = pq_.empty() ? kNever : pq_.top().t;
      if (net_ != nullptr) {
        sim::Simulator& s = net_->sim();
        const double tend = std::min(tpq, limit);
        if (tend == kNever && s.next_time() == kNoDeadline) break;
        TimeNs until = tend == kNever ? kNoDeadline : static_cast<TimeNs>(std::floor(tend * 1e9));
        until = std::max(until, s.now());
        s.run_until(until);
        now_ = std::max(now_, static_cast<double>(s.now()) * 1e-9);
        if (!woken_.empty()) break;  // fabric completions at now_
        if (tend == kNever) break;
      }
      if (tpq > limit || tpq == kNever) {
        if (limit != kNever) now_ = std::max(now_, limit);
        break;
      }
      now_ = std::max(now_, tpq);
      while (!pq_.empty() && pq_.top().t <= now_) {
        const Pending p = pq_.top();
        pq_.pop();
        if (p.rank < 0) {
          const Deferred& d = deferred_[p.ev.wr_id];
          if (net_->write(d.from, d.to, d.lane, d.src, d.bytes, d.slot, d.wr_id) !=
              TransportErrc::kOk) {
            TransportEvent e{.kind = TransportEvent::Kind::kError, .peer = d.to, .lane = d.lane};
            transport(d.from).queue.push_back(e);
            woken_.push_back(d.from);
          }
          continue;
        }
        transport(p.rank).queue.push_back(p.ev);
        woken_.push_back(p.rank);
      }
      if (!woken_.empty()) break;
    }
    ret_.assign(woken_.begin(), woken_.end());
    woken_.clear();
    std::sort(ret_.begin(), ret_.end());
    ret_.erase(std::unique(ret_.begin(), ret_.end()), ret_.end());
    return ret_;
  }

 private:
  // One inbox slot, allocated on first use and grown to the largest chunk written into it (so
  // memory follows the chunks that travel, not slots x slot_bytes per connection). Growing is
  // safe: a slot is written only once the receiver applied (and stopped reading) its last chunk.
  std::uint8_t* box(int rank, int peer, int lane, std::uint32_t slot, std::uint32_t bytes) {
    auto& v = inboxes_[((static_cast<std::size_t>(rank) * static_cast<std::size_t>(n_) +
                         static_cast<std::size_t>(peer)) *
                            static_cast<std::size_t>(lanes_) +
                        static_cast<std::size_t>(lane)) *
                           slots_ +
                       slot];
    if (v.size() < bytes) v.assign(std::bit_ceil(std::size_t{bytes}), 0);
    return v.data();
  }
  void push(double t, int rank, const TransportEvent& e) { pq_.push({t, seq_++, rank, e}); }
  struct Deferred {
    int from, to, lane;
    const void* src;
    std::uint32_t bytes, slot;
    std::uint64_t wr_id;
  };

  ClusterConfig cfg_;
  int n_, lanes_;
  std::uint32_t slots_, slot_bytes_;
  bool payload_;
  std::vector<Port> nvl_out_, nvl_in_, nic_out_, nic_in_;
  std::vector<double> compute_free_;
  std::vector<std::vector<std::uint8_t>> inboxes_;
  std::vector<std::uint8_t> scratch_;
  std::vector<std::unique_ptr<ClusterTransport>> transports_;
  std::priority_queue<Pending, std::vector<Pending>, Later> pq_;
  std::uint64_t seq_ = 0, messages_ = 0;
  double now_ = 0;
  FabricNet* net_ = nullptr;
  std::vector<int> woken_, ret_;
  std::vector<Deferred> deferred_;
};

int ClusterTransport::size() const {
  return c_.size();
}
int ClusterTransport::lanes() const {
  return c_.lanes();
}
std::uint32_t ClusterTransport::slots() const {
  return c_.slots();
}
std::uint32_t ClusterTransport::slot_bytes() const {
  return c_.slot_bytes();
}
TransportErrc ClusterTransport::register_memory(const void* addr, std::size_t bytes) {
  return c_.net() != nullptr ? c_.net()->register_memory(rank_, addr, bytes) : TransportErrc::kOk;
}
void ClusterTransport::unregister_memory(const void* addr) {
  if (c_.net() != nullptr) c_.net()->unregister_memory(rank_, addr);
}
TransportErrc ClusterTransport::post_write(int peer, int lane, const void* src, std::uint32_t bytes,
                                           std::uint32_t slot, std::uint64_t wr_id) {
  return c_.write(rank_, peer, lane, src, bytes, slot, wr_id);
}
TransportErrc ClusterTransport::post_grant(int peer, int lane, std::uint32_t credits) {
  return c_.grant(rank_, peer, lane, credits);
}
const std::uint8_t* ClusterTransport::inbox(int peer, int lane, std::uint32_t slot) const {
  return c_.inbox(rank_, peer, lane, slot);
}

using coll::count_wrong;

std::optional<double> model_busbw(const ClusterConfig& c, const RunConfig& run, Algo algo,
                                  double bytes, int n) {
  if (bytes <= 0 || n < 2) return std::nullopt;
  coll::ModelParams p{.nodes = c.nodes,
                      .gpus_per_node = c.gpus,
                      .nvl_Bps = c.nvl_Bps,
                      .nic_Bps = c.nic_Bps,
                      .alpha_s = c.nic_latency_s,
                      .channels = run.channels,
                      .pipeline_pieces = 1,
                      .reduce_Bps = c.reduce_Bps,
                      .nvl_latency_s = c.nvl_latency_s,
                      .spine_latency_s = c.spine_latency_s,
                      .chunk_bytes = static_cast<double>(run.chunk_bytes),
                      .slots = static_cast<int>(run.slots)};
  if (run.kind == CollKind::kAllReduce) {
    if (algo != Algo::kRing && algo != Algo::kRing2 && algo != Algo::kRing2Pipe &&
        algo != Algo::kTree)
      return std::nullopt;
    // ring2-pipe's pieces as plan.cpp cuts them (at least 2).
    const double piece =
        static_cast<double>(c.gpus) * static_cast<double>(run.chunk_bytes) * run.channels;
    p.pipeline_pieces = std::max(2, static_cast<int>(std::ceil(bytes / piece)));
    return coll::allreduce_busbw(bytes, coll::model_allreduce_steps_s(algo, bytes, p), n);
  }
  if ((run.kind == CollKind::kReduceScatter || run.kind == CollKind::kAllGather) &&
      algo == Algo::kRing) {
    const double b = c.nodes > 1 ? std::min(run.channels * c.nic_Bps, c.nvl_Bps) : c.nvl_Bps;
    const double f = (n - 1.0) / n;
    double t = f * bytes / b + (n - 1) * p.alpha_s;
    if (run.kind == CollKind::kReduceScatter && c.reduce_Bps > 0) t += f * bytes / c.reduce_Bps;
    return bytes / t * f;
  }
  return std::nullopt;
}

}  // namespace

std::optional<NicCalibration> calibrate_nic(const std::string& topology) {
  auto t = topo::from_spec(topology);
  if (!t) return std::nullopt;
  for (topo::NodeId i = 0; i < t->node_count(); ++i) {
    if (t->node(i).is_switch()) continue;
    const fabric::FabricConfig fc;
    return NicCalibration{.nic_Bps = fabric_goodput_Bps(*t, i, fc, Mtu::k4096),
                          .nic_latency_s = fabric_latency_s(fc)};
  }
  return std::nullopt;
}

std::string coarse_caveat(const ClusterConfig& cluster, const RunConfig& run, coll::Algo algo,
                          int channels) {
  if (run.packet) return {};
  const std::string what = std::string(coll::to_string(algo)) +
                           (channels > 1 ? " x" + std::to_string(channels) : std::string()) + " " +
                           std::string(coll::to_string(run.kind));
  const std::string advice =
      ": its time may be off by more than 5 %; --fabric packet is the "
      "reference";
  // All-to-all (bench/coll/alltoall_coarse_vs_packet.sh, 64 KiB-4 MiB, minhop and updn): 8 x 4
  // rails with one or two spines 0.93-1.12 of the packet level's time, the 2-level fat tree of
  // radix 8 0.93-1.04, radix 16 0.61-0.85, radix 4 1.17-1.18 (README "All-to-all", "Head-of-line
  // blocking" and "Control packets, credit back-pressure and the HCA's pipeline at the heads").
  if (run.kind == CollKind::kAllToAll &&
      (cluster.topology.starts_with("rail:") || cluster.topology.starts_with("fat-tree:"))) {
    const bool rail = cluster.topology.starts_with("rail:");
    return "the coarse model reads " + what + (rail ? " within 12 % of" : " within 7 % of") +
           " the packet-level fabric on " +
           (rail ? "rail clusters (8 x 4)"
                 : "fat trees (2 levels, radix 8, 64 KiB-4 MiB; radix 16 up to 39 % faster, "
                   "radix 4 up to 18 % slower)") +
           " (emu/collsim/README.md \"All-to-all\")" + advice;
  }
  // Measured: all-reduce on rail topologies (8 x 8 spines=2, 2 x 4 spines=1), the NICs
  // calibrated to the fabric (--nic-bw/--nic-latency auto).
  if (run.kind != CollKind::kAllReduce || !cluster.topology.starts_with("rail:"))
    return "the coarse model was not checked against the packet-level fabric for " + what +
           " on this topology" + advice;
  // Within 5 % (8 x 8: 0.2-2.5 %): one ring (c = 1), ring2 and ring2-pipe, with or without
  // switch links (their flows never share one). Not everywhere: several rings (8 x 8 ring x8
  // within 2.7 % at 16 and 64 MiB since the grants' HCA pipelines are modelled, 2 x 4 ring x4
  // within 1.3 %, but 4 x 8 ring x8 at 16 MiB 8 % slow) and the tree (8 x 8 within 1-5 % since
  // the incast back-pressure is modelled, but 2 x 4 at 64 MiB 7 % slow: one held share for
  // every incast; README).
  if ((algo == coll::Algo::kRing && channels == 1) || algo == coll::Algo::kRing2 ||
      algo == coll::Algo::kRing2Pipe)
    return {};
  if (algo == coll::Algo::kRing || algo == coll::Algo::kTree)
    return "the coarse model may be up to " + std::string(algo == coll::Algo::kRing ? "8" : "7") +
           " % off the packet-level fabric for " + what +
           " on rail clusters (8 x 8, 2 x 4; emu/collsim/README.md)" + advice;
  return "the coarse model was not checked against the packet-level fabric for " + what + advice;
}

double busbw_factor(CollKind kind, int n) {
  return coll::busbw_factor(kind, n);
}

RunOutcome run_collective(const ClusterConfig& cluster, const RunConfig& run, std::size_t bytes) {
  RunOutcome out;
  const int n = cluster.nodes * cluster.gpus;
  if (n < 1) return {std::nullopt, "the cluster has no GPUs"};
  const std::size_t es = coll::elem_bytes(run.dtype);
  const auto un = static_cast<std::size_t>(n);
  // Per-rank element counts of CollArgs and the sizes of the buffers.
  std::size_t count = bytes / es, arg_count = count, send_elems = count, recv_elems = count;
  switch (run.kind) {
    case CollKind::kReduceScatter:
      arg_count = count / un;
      send_elems = arg_count * un;
      recv_elems = arg_count;
      count = send_elems;
      break;
    case CollKind::kAllGather:
      arg_count = count / un;
      send_elems = arg_count;
      recv_elems = arg_count * un;
      count = recv_elems;
      break;
    case CollKind::kAllToAll:
      arg_count = count / un;
      send_elems = recv_elems = count = arg_count * un;
      break;
    case CollKind::kSendRecv:
      return {std::nullopt, "send/recv is not a cluster-wide collective"};
    default:
      break;
  }
  RunResult res;
  res.bytes = count * es;
  res.count = count;

  // ring2-pipe takes two lanes per channel; auto may run one ring per NIC of a node.
  const int lanes =
      std::max(2 * std::max(1, run.channels), run.algo == coll::Algo::kAuto ? cluster.gpus : 1);
  const auto slot_bytes = static_cast<std::uint32_t>(
      std::clamp<std::size_t>(run.chunk_bytes, 4096, std::size_t{16} << 20) / 8 * 8);
  Cluster c(cluster, lanes, run.slots, slot_bytes, run.verify);
  std::unique_ptr<FabricNet> net;
  if (run.packet) {
    FabricNetConfig fc;
    fc.topology = cluster.topology;
    fc.payload = run.verify;
    fc.lanes = lanes;
    fc.slots = run.slots;
    fc.slot_bytes = slot_bytes;
    fc.seed = run.seed;
    fc.scenario = run.faults;
    fc.routing = cluster.routing;
    fc.lmc = cluster.lmc;
    auto made = FabricNet::create(fc, cluster.nodes, cluster.gpus);
    if (!made) return {std::nullopt, "packet-level fabric: " + made.error()};
    net = std::move(*made);
    c.use_fabric(net.get());
  }
  TimeNs t0_ns = 0;  // the fabric's clock when the collective starts (after the SM's bring-up)
  auto fabric_info = [&]() -> std::optional<FabricInfo> {
    if (!net) return std::nullopt;
    FabricInfo f;
    const FabricNetStats st = net->stats();
    f.events = st.events;
    f.packets = st.packets_delivered;
    f.qps = st.qps;
    f.discards = st.retransmit_hint;
    const simrun::SmReport& sm = net->sm_report();
    f.sm_bringup_virtual_s = sm.virtual_s;
    f.sm_mads = sm.mads;
    f.reroutes = sm.reroutes;
    f.log = net->fault_log().entries();
    for (auto& e : f.log) e.at_ns = e.at_ns > t0_ns ? e.at_ns - t0_ns : 0;  // from the start
    return f;
  };

  // Buffers: full payload gives every rank its own; timing-only shares one pair (contents are
  // not looked at, and the simulation is single-threaded).
  const std::size_t nbuf = run.verify ? un : 1;
  // Timing only: uninitialised (nothing reads them; untouched pages cost no time or memory).
  struct Buffer {
    std::unique_ptr<std::uint8_t[]> p;
    std::uint8_t* data() const { return p.get(); }
  };
  auto buffer = [&](std::size_t bytes) {
    const std::size_t b = std::max<std::size_t>(bytes, 1);
    return Buffer{run.verify ? std::make_unique<std::uint8_t[]>(b)
                             : std::unique_ptr<std::uint8_t[]>(new std::uint8_t[b])};
  };
  std::vector<Buffer> send(nbuf), recv(nbuf);
  for (std::size_t b = 0; b < nbuf; ++b) {
    send[b] = buffer(send_elems * es);
    recv[b] = buffer(recv_elems * es);
    if (run.verify)
      for (std::size_t i = 0; i < send_elems; ++i)
        coll::put_value(run.dtype, send[b].data(), i,
                        coll::pattern_value(run.op, static_cast<int>(b), i));
  }

  const coll::Topology topo{.ranks_per_node = cluster.gpus};
  auto args_of = [&](int r) {
    const std::size_t b = run.verify ? static_cast<std::size_t>(r) : 0;
    return coll::CollArgs{.kind = run.kind,
                          .send = send[b].data(),
                          .recv = recv[b].data(),
                          .count = arg_count,
                          .dtype = run.dtype,
                          .op = run.op,
                          .algo = run.algo,
                          .channels = run.channels,
                          .chunk_bytes = run.chunk_bytes,
                          .timeout_ns = run.timeout_ns,
                          .skip_arithmetic = !run.verify};
  };
  auto cannot_run = [&](coll::CollErrc e) {
    return RunOutcome{std::nullopt, std::string("algorithm ") +
                                        std::string(coll::to_string(run.algo)) + " cannot run " +
                                        std::string(coll::to_string(run.kind)) +
                                        " here: " + std::string(coll::to_string(e))};
  };
  auto fill_rates = [&](double finish, std::size_t used_chunk) {
    res.time_s = finish;
    res.algbw = finish > 0 ? static_cast<double>(res.bytes) / finish : 0;
    res.busbw = res.algbw * coll::busbw_factor(run.kind, n);
    RunConfig used = run;  // what auto chose
    used.channels = res.channels;
    if (used_chunk != 0) used.chunk_bytes = used_chunk;
    res.model_busbw = model_busbw(cluster, used, res.algo, static_cast<double>(res.bytes), n);
  };

  if (!run.verify && !run.packet && run.plan_engine) {
    // Timing only on the coarse model: the plans alone decide the times (plan_sim.hpp).
    std::vector<coll::Plan> plans;
    plans.reserve(un);
    for (int r = 0; r < n; ++r) {
      auto p = coll::build_plan(args_of(r), r, n, lanes, topo);
      if (!p) return cannot_run(p.error());
      plans.push_back(std::move(p.value()));
    }
    res.algo = plans.front().algo;
    res.channels = plans.front().channels;
    // With a topology, messages also share the switch links of the SM's routes. A cluster that
    // is not the whole topology (a training step's data-parallel group) has no routes of its
    // own: its switches stay non-blocking.
    std::optional<SwitchPaths> paths;
    if (run.switch_links && !cluster.topology.empty()) {
      auto sp = SwitchPaths::create(cluster.topology, cluster.nodes, cluster.gpus, cluster.routing,
                                    cluster.lmc);
      if (sp) {
        paths.emplace(std::move(*sp));
      } else if (sp.error().starts_with("routing: ")) {  // the engine cannot route this fabric
        return RunOutcome{std::nullopt, sp.error()};
      }
    }
    PlanSim sim(cluster, plans, lanes, run.slots, slot_bytes, paths ? &*paths : nullptr);
    const auto wall0 = std::chrono::steady_clock::now();
    const std::clock_t cpu0 = std::clock();
    const PlanSimResult ps = sim.run();
    res.cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    res.messages = ps.messages;
    res.max_flows_per_switch_port = ps.max_flows_per_switch_port;
    res.flows_behind_control = ps.flows_behind_control;
    res.flows_head_of_line = ps.flows_head_of_line;
    res.coarse_caveat = coarse_caveat(cluster, run, res.algo, res.channels);
    fill_rates(ps.time_s, plans.front().chunk_bytes);
    out.result = res;
    return out;
  }

  std::vector<std::unique_ptr<coll::Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    comms.push_back(std::make_unique<coll::Communicator>(c.transport(r), topo));
    const auto e = comms.back()->start(args_of(r));
    if (e != coll::CollErrc::kOk) return cannot_run(e);
  }
  res.algo = comms.front()->algo();
  res.channels = comms.front()->channels();
  res.coarse_caveat = coarse_caveat(cluster, run, res.algo, res.channels);
  const std::size_t used_chunk = comms.front()->chunk_bytes();
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  if (net) net->start_faults();
  // The collectives' time starts with the fabric's clock after the SM's bring-up.
  const double t_base = net ? static_cast<double>(net->sim().now()) * 1e-9 : 0.0;
  t0_ns = net ? net->sim().now() : 0;
  double last_work = t_base;

  std::vector<std::uint64_t> reduced(un, 0);
  std::vector<bool> done(un, false);
  int left = n;
  double finish = 0;
  std::vector<int> active(un);
  for (int r = 0; r < n; ++r) active[static_cast<std::size_t>(r)] = r;
  for (;;) {
    for (int r : active) {
      const auto ur = static_cast<std::size_t>(r);
      if (done[ur]) continue;
      auto& comm = *comms[ur];
      for (;;) {
        const auto st = comm.progress(static_cast<TimeNs>(std::llround(c.now() * 1e9)));
        if (comm.did_work()) last_work = c.now();
        const std::uint64_t rb = comm.stats().reduce_bytes;
        c.charge_reduce(r, rb - reduced[ur]);
        reduced[ur] = rb;
        if (st == coll::CollState::kDone) {
          done[ur] = true;
          --left;
          finish = std::max(finish, c.compute_free(r));
          break;
        }
        if (st == coll::CollState::kFailed) {
          RunOutcome f;
          f.failed_rank = r;
          f.failed_peer = comm.failed_peer();
          f.error = "rank " + std::to_string(r) + " failed: " +
                    (comm.failure() == coll::CollErrc::kTimeout
                         ? std::string("timed out waiting for rank ")
                         : std::string("its connection to rank ")) +
                    std::to_string(f.failed_peer);
          if (net && f.failed_peer >= 0)
            f.error += " (" + net->topology().node(net->hca_of(f.failed_peer)).description +
                       (comm.failure() == coll::CollErrc::kTimeout ? ")" : ") failed");
          else if (comm.failure() != coll::CollErrc::kTimeout)
            f.error += " failed";
          f.fabric = fabric_info();
          return f;
        }
        if (!comm.did_work()) break;
      }
    }
    if (left == 0) break;
    // Wake every rank at the earliest collective deadline; on the fabric also after stall_s
    // of virtual time without progress (the SM keeps the event queue busy forever).
    double limit = kNever;
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (done[ur]) continue;
      const TimeNs d = comms[ur]->next_deadline();
      if (d != kNoDeadline) limit = std::min(limit, static_cast<double>(d) * 1e-9);
    }
    if (net) limit = std::min(limit, last_work + run.stall_s);
    active = c.advance(limit);
    if (active.empty()) {
      if (limit == kNever || (net && c.now() >= last_work + run.stall_s)) {
        RunOutcome f;
        f.error = "the collective stalled (no progress" +
                  std::string(net ? " for " + std::to_string(run.stall_s) + " s virtual)"
                                  : ", no events pending)");
        f.fabric = fabric_info();
        return f;
      }
      active.clear();
      for (int r = 0; r < n; ++r)
        if (!done[static_cast<std::size_t>(r)]) active.push_back(r);
    }
  }
  res.cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  finish -= t_base;
  res.fabric = fabric_info();
  res.messages = c.messages();
  fill_rates(finish, used_chunk);

  if (run.verify) {
    // The reference: the ranks' send buffers folded in rank order with the same kernels.
    std::uint64_t wrong = 0;
    const bool reducing = run.kind == CollKind::kAllReduce ||
                          run.kind == CollKind::kReduceScatter || run.kind == CollKind::kReduce;
    std::vector<std::uint8_t> ref;
    if (reducing) {
      ref.assign(send[0].data(), send[0].data() + send_elems * es);
      for (std::size_t r = 1; r < un; ++r)
        coll::reduce(run.dtype, run.op, ref.data(), send[r].data(), send_elems);
      if (run.op == RedOp::kAvg) coll::finish_avg(run.dtype, ref.data(), send_elems, n);
    }
    const std::size_t blk = arg_count * es;
    for (std::size_t r = 0; r < un; ++r) {
      const std::uint8_t* got = recv[r].data();
      switch (run.kind) {
        case CollKind::kAllReduce:
          wrong += count_wrong(got, ref.data(), arg_count, es);
          break;
        case CollKind::kReduce:
          if (r == 0) wrong += count_wrong(got, ref.data(), arg_count, es);
          break;
        case CollKind::kReduceScatter:
          wrong += count_wrong(got, ref.data() + r * blk, arg_count, es);
          break;
        case CollKind::kAllGather:
          for (std::size_t j = 0; j < un; ++j)
            wrong += count_wrong(got + j * blk, send[j].data(), arg_count, es);
          break;
        case CollKind::kBroadcast:
          wrong += count_wrong(got, send[0].data(), arg_count, es);
          break;
        case CollKind::kAllToAll:
          for (std::size_t j = 0; j < un; ++j)
            wrong += count_wrong(got + j * blk, send[j].data() + r * blk, arg_count, es);
          break;
        default:
          break;
      }
    }
    res.wrong = wrong;
  }
  out.result = res;
  return out;
}

std::optional<CollKind> parse_kind(std::string_view s) {
  if (s == "allreduce") return CollKind::kAllReduce;
  if (s == "reducescatter") return CollKind::kReduceScatter;
  if (s == "allgather") return CollKind::kAllGather;
  if (s == "broadcast") return CollKind::kBroadcast;
  if (s == "reduce") return CollKind::kReduce;
  if (s == "alltoall") return CollKind::kAllToAll;
  return std::nullopt;
}

std::optional<Algo> parse_algo(std::string_view s) {
  for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kRing2, Algo::kRing2Pipe, Algo::kTree, Algo::kRhd,
                 Algo::kDirect})
    if (coll::to_string(a) == s) return a;
  return std::nullopt;
}

std::optional<DataType> parse_dtype(std::string_view s) {
  static constexpr std::string_view kShort[] = {"f32", "f16", "bf16", "f64", "i32", "i64", "u8"};
  for (std::size_t i = 0; i < std::size(coll::kAllTypes); ++i)
    if (coll::to_string(coll::kAllTypes[i]) == s || kShort[i] == s) return coll::kAllTypes[i];
  return std::nullopt;
}

std::optional<RedOp> parse_op(std::string_view s) {
  for (RedOp o : coll::kAllOps)
    if (coll::to_string(o) == s) return o;
  return std::nullopt;
}

}  // namespace weft::collsim
