// emu/collsim/plan_sim.cpp — see plan_sim.hpp.
#include "emu/collsim/plan_sim.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "emu/collsim/fabric_net.hpp"
#include "src/base/assert.hpp"

namespace weft::collsim {

using coll::Buf;
using coll::Plan;
using coll::PlanOp;

Hop hop_of(const ClusterConfig& c, int from, int to, int lane) {
  const int g = c.gpus;
  if (from / g == to / g) return Hop{true, from, to, c.nvl_Bps, c.nvl_latency_s};
  const int gf = (from % g + lane) % g, gt = (to % g + lane) % g;
  return Hop{false, from / g * g + gf, to / g * g + gt, c.nic_Bps,
             c.nic_latency_s + (gf != gt ? c.spine_latency_s : 0.0)};
}

namespace {

// One MTU's DMA over the packet level's PCIe plus the host latency (fabric::HcaModel).
double hca_dma_s() {
  const fabric::HcaModel m = fabric::FabricConfig{}.hca;
  const double mtu = static_cast<double>(mtu_bytes(FabricNetConfig{}.mtu));
  return mtu / (static_cast<double>(m.pcie_mbytes_per_s) * 1e6) +
         1e-9 * static_cast<double>(m.host_latency_ns);
}

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// A NIC sending several flows interleaves them on its port in pieces of this many bytes (the
// packet level's HCA interleaves its QPs packet by packet). 128 KiB: 32 packets of 4 KiB, a few
// of the switches' 64 KiB input buffers (8 x 8 tree at 64 MiB: 256 KiB pieces took it from 4 %
// fast to 6 % slow against the packet level).
constexpr std::uint32_t kPieceBytes = 128 * 1024;
// The share of a piece's delay at the receiving NIC that holds the sending NIC's port
// (back_pressure).
constexpr double kHeldShare = 0.5;

struct Op {
  PlanOp::Kind kind = PlanOp::Kind::kSend;
  bool reduce = false;
  // A bundle's lead op whose lanes' ops all have its size (bundle_lanes): their chunks' sizes
  // are its own, no lookup.
  bool lanes_same_bytes = false;
  std::uint32_t rank = 0;
  std::uint32_t conn = kNone;  // send/recv: this rank's connection
  std::size_t bytes = 0;
  std::uint32_t frags = 0, frags_posted = 0, frags_done = 0;
  std::uint32_t deps_left = 0;
  std::uint32_t dep_begin = 0, dep_end = 0;  // dependents_[dep_begin, dep_end)
  // The last completion among its dependencies other than bundled receives (lane_ready).
  double after_s = 0;
};

// One (rank, peer, lane) end of a connection. Sends go out through `egress`/`ingress`.
// Laid out by use, a cache line each: what every chunk's send, arrival and grant touch; then
// what a bundled lane (which its lead end drives, bundle_lanes), pieces and grants over switch
// paths add; then the rest. Ring x8 on 8 x 8 walks 1,024 of these, eight per chunk, and was
// bound by their cache misses (three lines per lane plus its op and its mate's record).
struct alignas(64) Conn {
  // Op indices in program order (PlanSim::Engine::conn_ops_): sends [send_head, send_end) not
  // yet all posted, receives [recv_head, recv_end) not yet all applied.
  std::uint32_t send_head = 0, send_end = 0;
  std::uint32_t recv_head = 0, recv_end = 0;
  std::uint32_t credits = 0;
  std::uint32_t arrived = 0;   // chunks in the inbox not yet applied
  std::uint32_t mate = kNone;  // the peer's end (peer, rank, lane)
  std::uint32_t rank = 0;
  double* egress = nullptr;
  double* ingress = nullptr;
  double rate_Bps = 0, latency_s = 0;
  // Its NIC puts a message on the wire in this many times its serialisation at rate_Bps
  // (derate_head_of_line: the credits of a blocked switch input stall the HCA's port; the
  // packets still cross each link at line rate).
  double egress_stretch = 1.0;
  // Switch-to-switch ports of the route (switch_paths.hpp): sw_path_[sw_begin, sw_end).
  std::uint32_t sw_begin = 0, sw_end = 0;
  std::uint32_t send_begin = 0, recv_begin = 0;  // the first of conn_ops_[...head, ...end)
  std::uint32_t lane_slot = 0;                   // rank x lanes + lane (lane_data_s_)
  // Lanes bundled with this one (bundle_lanes): members_[mem_begin, mem_end) are the other
  // lanes' ends of this (rank, peer), which this end drives; `follower` marks those.
  std::uint32_t mem_begin = 0, mem_end = 0;
  // Pieces (see pump_send): bytes per piece (0: whole chunks), how much of the chunk being sent
  // has left, and whether a piece of it is still on the egress port.
  std::uint32_t piece_bytes = 0;
  std::uint32_t piece_off = 0;
  bool piece_busy = false;
  // On a NIC that sends several flows (split_shared_egress): pieces go on the port only in
  // their turn (take_port_turn); `waiting` for one, or given one (`port_turn`).
  bool gated = false;
  bool waiting = false;
  bool port_turn = false;
  bool nvlink = false;
  bool follower = false;
  std::uint8_t dirty = 0;  // kPumpRecv | kPumpSend: marked for drain()
  // A grant's delay: between NICs with switch paths (by_route, grant_time) the route's fixed
  // delay for a packet without payload, and the most it waits behind the data packets its NIC
  // has pulled; otherwise one latency (grant_at).
  double grant_s = 0;
  double pulled_max_s = 0;
  // Bundled receiving ends (bundle_lanes, lane_ready): when the bundle's last chunk event came.
  double data_event_s = -1;
  // Bundled sending ends: when the last grant came in (its lanes' credits are back then).
  double grant_in_s = 0;
  bool grant_by_route = false;
  // Set-up only.
  std::uint64_t key = 0;  // (rank x n + peer) x lanes + lane; connections are numbered by it
  int nic_from = -1, nic_to = -1;  // between NICs: the egress and ingress NIC
};
constexpr std::uint8_t kPumpRecv = 1, kPumpSend = 2;

struct Rank {
  std::size_t ops_left = 0;
  // Reduction arithmetic: free at `free_s` plus `acc_bytes` reduced at instant `acc_s` (those
  // delay only writes posted at a later instant, as the Communicator path charges them after
  // the rank's progress call).
  double free_s = 0, acc_s = 0, acc_bytes = 0;
  double acked_s = 0;  // the last ack of a send completed without an event (write_done)
};

enum class EvKind : std::uint8_t { kData, kGrant, kWriteDone, kPieceSent };
// 16 bytes: the time, the connection with the kind in its low two bits, and the argument
// (grant: credits; write done: op).
struct Ev {
  double t;
  std::uint32_t conn_kind;
  std::uint32_t arg;
  static Ev make(double t, std::uint32_t conn, EvKind k, std::uint32_t arg) {
    return Ev{t, conn << 2 | static_cast<std::uint32_t>(k), arg};
  }
  std::uint32_t conn() const { return conn_kind >> 2; }
  EvKind kind() const { return static_cast<EvKind>(conn_kind & 3); }
};

// The event queue: a radix heap. Virtual time only moves forward and no event is posted before
// the present, so the queue is monotone, and a non-negative double's bits order as its value:
// an event goes to the bucket of the highest bit in which its time differs from the last time
// taken out (O(1)), and taking out the earliest empties bucket 0 or re-sorts the lowest
// non-empty bucket (a bit mask finds it) into lower ones (each event moves at most 64 times,
// in practice a few; each bucket keeps its earliest time). A binary heap of every chunk's arrival,
// grant and ack was most of the plan engine's time. Events of one instant come out in no particular
// order; the engine takes all of an instant's in before it acts on them.
class EventQueue {
 public:
  bool empty() const { return size_ == 0; }
  void push(const Ev& e) {
    const std::uint64_t k = key(e.t);
    WEFT_ASSERT_MSG(k >= last_, "an event posted before the present");
    const std::size_t b = bucket(k);
    buckets_[b].push_back(e);
    note(b, k);
    ++size_;
  }
  // The earliest event (one of them).
  const Ev& top() {
    WEFT_ASSERT(size_ > 0);
    if (buckets_[0].empty()) {
      const auto b = static_cast<std::size_t>(std::countr_zero(used_)) + 1;
      std::vector<Ev>& from = buckets_[b];
      last_ = min_[b];
      used_ &= ~(std::uint64_t{1} << (b - 1));
      min_[b] = kEmpty;
      for (const Ev& e : from) {
        const std::uint64_t k = key(e.t);
        const std::size_t to = bucket(k);
        buckets_[to].push_back(e);
        note(to, k);
      }
      from.clear();
    }
    return buckets_[0].back();
  }
  void pop() {
    buckets_[0].pop_back();
    --size_;
  }
  // Whether an event of the instant top() last returned is left (without moving on).
  bool more_now() const { return !buckets_[0].empty(); }

 private:
  static std::uint64_t key(double t) { return std::bit_cast<std::uint64_t>(t); }
  void note(std::size_t b, std::uint64_t k) {
    if (b == 0) return;
    used_ |= std::uint64_t{1} << (b - 1);
    min_[b] = std::min(min_[b], k);
  }
  static constexpr std::uint64_t kEmpty = std::numeric_limits<std::uint64_t>::max();
  std::size_t bucket(std::uint64_t k) const {
    return k == last_ ? 0 : static_cast<std::size_t>(64 - std::countl_zero(k ^ last_));
  }
  std::array<std::vector<Ev>, 65> buckets_;
  std::uint64_t used_ = 0;                              // bit b - 1: bucket b (>= 1) is not empty
  std::array<std::uint64_t, 65> min_ = filled(kEmpty);  // each bucket's earliest time's bits
  static std::array<std::uint64_t, 65> filled(std::uint64_t v) {
    std::array<std::uint64_t, 65> a;
    a.fill(v);
    return a;
  }
  std::uint64_t last_ = 0;
  std::size_t size_ = 0;
};

}  // namespace

class PlanSim::Engine {
 public:
  Engine(const ClusterConfig& c, std::span<const Plan> plans, int lanes, std::uint32_t slots,
         std::uint32_t slot_bytes, const SwitchPaths* paths)
      : cfg_(c),
        paths_(paths),
        n_(static_cast<int>(plans.size())),
        lanes_(lanes),
        slot_bytes_(slot_bytes),
        ranks_(plans.size()),
        nvl_out_(plans.size(), 0.0),
        nvl_in_(plans.size(), 0.0),
        nic_out_(plans.size(), 0.0),
        nic_in_(plans.size(), 0.0) {
    if (paths_ != nullptr) {
      sw_free_.assign(paths_->ports(), 0.0);
      sw_flows_.assign(paths_->ports(), 0);
    }
    build_ops(plans, slots);
  }

  PlanSimResult run() {
    for (std::uint32_t k = 0; k < conns_.size(); ++k)
      if (!conns_[k].follower) mark(k, kPumpRecv | kPumpSend);
    drain_in_order();
    while (!pq_.empty()) {
      // Every event of the instant first, then the marked connections in (rank, peer, lane)
      // order: as the Communicator path, whose ranks each take in all of their events before
      // posting, rank by rank. (Who posts first onto a shared port decides ties.)
      now_ = pq_.top().t;
      while (pq_.more_now()) {
        const Ev e = pq_.top();
        pq_.pop();
        ++events_;
        const std::uint32_t k = e.conn();
        Conn& c = conns_[k];
        // Each event wakes only the side of its connection it changes: pump_recv and
        // pump_send of an unchanged end would find what they stopped at (an op's missing
        // dependency marks its connection when it completes).
        switch (e.kind()) {
          case EvKind::kData:
            ++c.arrived;
            c.data_event_s = now_;
            mark(k, kPumpRecv);
            break;
          case EvKind::kGrant:
            c.credits += e.arg;
            c.grant_in_s = now_;
            mark(k, kPumpSend);
            break;
          case EvKind::kWriteDone:
            complete(e.arg);
            break;
          case EvKind::kPieceSent:
            if (e.arg != 0) {
              next_port_turn(static_cast<std::uint32_t>(c.nic_from));
              break;
            }
            c.piece_busy = false;
            mark(k, kPumpSend);
            break;
        }
      }
      drain_in_order();
    }
    for (const Rank& r : ranks_) WEFT_ASSERT_MSG(r.ops_left == 0, "plans do not match (stalled)");
    PlanSimResult res{finish_, messages_, events_, 0, {}, blocked_flows_, hol_flows_};
    for (std::uint32_t p = 0; p < sw_flows_.size(); ++p) {
      if (sw_flows_[p] > res.max_flows_per_switch_port) {
        res.max_flows_per_switch_port = sw_flows_[p];
        res.busiest_switch_port = paths_->port_name(p);
      }
    }
    return res;
  }

 private:
  static bool is_local(const Op& o) {
    return o.kind == PlanOp::Kind::kCopy || o.kind == PlanOp::Kind::kAvg;
  }

  std::uint32_t conn_of(std::uint32_t rank, int peer, int lane) {
    const std::uint64_t key =
        (std::uint64_t{rank} * static_cast<std::uint64_t>(n_) + static_cast<std::uint64_t>(peer)) *
            static_cast<std::uint64_t>(lanes_) +
        static_cast<std::uint64_t>(lane);
    auto [it, fresh] = conn_index_.try_emplace(key, static_cast<std::uint32_t>(conns_.size()));
    if (fresh) {
      Conn c;
      c.rank = rank;
      c.key = key;
      const Hop h = hop_of(cfg_, static_cast<int>(rank), peer, lane);
      const auto e = static_cast<std::size_t>(h.egress), i = static_cast<std::size_t>(h.ingress);
      c.egress = h.nvlink ? &nvl_out_[e] : &nic_out_[e];
      c.ingress = h.nvlink ? &nvl_in_[i] : &nic_in_[i];
      c.rate_Bps = h.rate_Bps;
      c.latency_s = h.latency_s;
      c.nvlink = h.nvlink;
      // A grant is a zero-length message: one latency (no spine term, as ClusterTransport).
      c.grant_s = h.nvlink ? cfg_.nvl_latency_s : cfg_.nic_latency_s;
      if (!h.nvlink) {
        c.nic_from = h.egress;
        c.nic_to = h.ingress;
      }
      if (!h.nvlink && paths_ != nullptr) {
        // The packet level's grant is a zero-length SEND WITH IMM on the connection's QP
        // (grant_time).
        const fabric::FabricConfig fc;
        c.grant_by_route = true;
        const auto route_ns =
            static_cast<double>(paths_->route_ns(h.egress, h.ingress, fc.sw.latency_ns));
        c.grant_s = 1e-9 * route_ns;
        // The NIC latency (calibrate_nic) crosses one switch; on rails a route to another rail
        // adds spine_latency_s (hop_of). A cluster of one GPU per node has no rails to change
        // (a fat tree): there the route's further switches and cables are added as they are
        // (2-level fat tree: 320 ns through a spine).
        if (cfg_.gpus == 1)
          c.latency_s += 1e-9 * std::max(0.0, route_ns - fabric_one_switch_route_ns(fc));
        c.pulled_max_s = static_cast<double>(fc.hca.tx_pipeline_packets_max) *
                         static_cast<double>(mtu_bytes(FabricNetConfig{}.mtu)) / h.rate_Bps;
        c.sw_begin = static_cast<std::uint32_t>(sw_path_.size());
        paths_->path(h.egress, h.ingress, sw_path_);
        c.sw_end = static_cast<std::uint32_t>(sw_path_.size());
      }
      conns_.push_back(std::move(c));
      build_sends_.emplace_back();
      build_recvs_.emplace_back();
    }
    return it->second;
  }

  void build_ops(std::span<const Plan> plans, std::uint32_t slots) {
    std::size_t total = 0;
    for (const Plan& p : plans) total += p.ops.size();
    ops_.reserve(total);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;  // (before, after)
    for (std::uint32_t r = 0; r < plans.size(); ++r) {
      const auto base = static_cast<std::uint32_t>(ops_.size());
      const Plan& p = plans[r];
      for (const PlanOp& po : p.ops) {
        Op o;
        o.kind = po.kind;
        o.reduce = po.reduce;
        o.rank = r;
        o.bytes = po.bytes;
        if (po.kind == PlanOp::Kind::kSend || po.kind == PlanOp::Kind::kRecv) {
          WEFT_ASSERT(po.bytes > 0 && po.peer >= 0 && po.peer < n_ && po.lane < lanes_);
          o.conn = conn_of(r, po.peer, po.lane);
          o.frags = static_cast<std::uint32_t>((po.bytes + slot_bytes_ - 1) / slot_bytes_);
          auto& q = po.kind == PlanOp::Kind::kSend ? build_sends_[o.conn] : build_recvs_[o.conn];
          q.push_back(static_cast<std::uint32_t>(ops_.size()));
        }
        ops_.push_back(o);
      }
      ranks_[r].ops_left = p.ops.size();
      add_deps(p, base, edges);
    }
    number_conns_by_key();
    // Pair the ends of every connection; each end starts with all of its peer's slots.
    for (auto& [key, k] : conn_index_) {
      const auto lane = static_cast<int>(key % static_cast<std::uint64_t>(lanes_));
      const auto peer = static_cast<int>(key / static_cast<std::uint64_t>(lanes_) %
                                         static_cast<std::uint64_t>(n_));
      const auto mate_key =
          (static_cast<std::uint64_t>(peer) * static_cast<std::uint64_t>(n_) + conns_[k].rank) *
              static_cast<std::uint64_t>(lanes_) +
          static_cast<std::uint64_t>(lane);
      const auto m = conn_index_.find(mate_key);
      WEFT_ASSERT_MSG(m != conn_index_.end(), "a plan talks to a peer whose plan does not");
      conns_[k].mate = m->second;
      conns_[k].credits = slots;
      if (!has_sends(conns_[k])) continue;  // a flow only where data goes this way
      for (std::uint32_t j = conns_[k].sw_begin; j < conns_[k].sw_end; ++j)
        ++sw_flows_[sw_path_[j]];
    }
    if (paths_ != nullptr) {
      // Both terms slow a flow for head-of-line blocking in the switches' input buffers; the
      // slower one is taken, not their product (derate_head_of_line).
      std::vector<double> factor(conns_.size(), 1.0), hol(conns_.size(), 1.0);
      derate_behind_control_packets(factor);
      derate_head_of_line(edges, hol);
      for (std::uint32_t k = 0; k < conns_.size(); ++k) {
        if (hol[k] < factor[k]) {
          conns_[k].egress_stretch = 1.0 / hol[k];
          ++hol_flows_;
        } else {
          conns_[k].rate_Bps *= factor[k];
        }
      }
      split_shared_egress();
    }
    bundle_lanes(edges);
    const std::vector<std::uint32_t> perm = order_ops_by_step(edges);
    // Dependents as one array grouped by op (counting sort of the edges).
    for (const auto& [j, i] : edges) {
      ++ops_[i].deps_left;
      ++ops_[j].dep_end;
    }
    std::uint32_t at = 0;
    for (Op& o : ops_) {
      o.dep_begin = at;
      at += o.dep_end;
      o.dep_end = o.dep_begin;
    }
    dependents_.resize(edges.size());
    for (const auto& [j, i] : edges) dependents_[ops_[j].dep_end++] = i;
    // The ops ready at the start, in program order (rank by rank, as before order_ops_by_step).
    for (const std::uint32_t i : perm)
      if (ops_[i].deps_left == 0 && is_local(ops_[i])) local_.push_back(i);
    dirty_bits_.assign((conns_.size() + 63) / 64, 0);
    for (const Conn& c : conns_) {
      if (c.mem_end == c.mem_begin) continue;
      for (std::uint32_t at = c.send_begin; at < c.recv_end; ++at) {
        bool same = true;
        for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b)
          same = same && conn_op_bytes_[conns_[members_[b]].send_begin + (at - c.send_begin)] ==
                             conn_op_bytes_[at];
        ops_[conn_ops_[at]].lanes_same_bytes = same;
      }
    }
    dirty_.reserve(conns_.size());
  }

  std::span<const std::uint32_t> sends(const Conn& c) const {
    return {conn_ops_.data() + c.send_begin, c.send_end - c.send_begin};
  }
  std::span<const std::uint32_t> recvs(const Conn& c) const {
    return {conn_ops_.data() + c.recv_begin, c.recv_end - c.recv_begin};
  }
  static bool has_sends(const Conn& c) { return c.send_end > c.send_begin; }

  // Connections numbered in (rank, peer, lane) order, the order drain_in_order pumps them in
  // (a plain sort of indices then), each one's sends and receives in one array (conn_ops_).
  void number_conns_by_key() {
    std::vector<std::uint32_t> order(conns_.size()), index(conns_.size());
    for (std::uint32_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](std::uint32_t a, std::uint32_t b) { return conns_[a].key < conns_[b].key; });
    std::vector<Conn> sorted;
    sorted.reserve(conns_.size());
    std::size_t total = 0;
    for (const auto& q : build_sends_) total += q.size();
    for (const auto& q : build_recvs_) total += q.size();
    conn_ops_.reserve(total);
    conn_op_bytes_.reserve(total);
    lag_s_.assign(conns_.size(), 0.0);
    for (std::uint32_t k = 0; k < order.size(); ++k) {
      index[order[k]] = k;
      Conn c = conns_[order[k]];
      c.send_begin = c.send_head = static_cast<std::uint32_t>(conn_ops_.size());
      conn_ops_.insert(conn_ops_.end(), build_sends_[order[k]].begin(),
                       build_sends_[order[k]].end());
      for (const std::uint32_t i : build_sends_[order[k]]) conn_op_bytes_.push_back(ops_[i].bytes);
      c.send_end = c.recv_begin = c.recv_head = static_cast<std::uint32_t>(conn_ops_.size());
      conn_ops_.insert(conn_ops_.end(), build_recvs_[order[k]].begin(),
                       build_recvs_[order[k]].end());
      for (const std::uint32_t i : build_recvs_[order[k]]) conn_op_bytes_.push_back(ops_[i].bytes);
      c.recv_end = static_cast<std::uint32_t>(conn_ops_.size());
      c.lane_slot = c.rank * static_cast<std::uint32_t>(lanes_) +
                    static_cast<std::uint32_t>(c.key % static_cast<std::uint64_t>(lanes_));
      sorted.push_back(c);
    }
    conns_ = std::move(sorted);
    build_sends_ = {};
    build_recvs_ = {};
    for (Op& o : ops_)
      if (o.conn != kNone) o.conn = index[o.conn];
    for (auto& kv : conn_index_) kv.second = index[kv.second];
  }

  // Operations numbered by step rather than by rank: (the position in its rank's program of
  // its bundle's lead op, rank, lane). The ranks of a ring, a tree or a two-stage ring all
  // work on about the same step at a time, so the ops (and their dependents) that the run
  // touches at once lie together instead of one rank's program length apart (8 x 8 ring at
  // 16 MiB: 16,128 ops of 56 bytes walked 64 ranks at a time). Returns the new index of each
  // op in the old (rank by rank) order; renumbers ops_, conn_ops_ and `edges`.
  std::vector<std::uint32_t> order_ops_by_step(
      std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges) {
    const auto count = static_cast<std::uint32_t>(ops_.size());
    std::vector<std::uint32_t> base(ranks_.size() + 1, 0);  // first op of each rank
    for (const Op& o : ops_) ++base[o.rank + 1];
    for (std::size_t r = 0; r < ranks_.size(); ++r) base[r + 1] += base[r];
    std::vector<std::uint64_t> keys(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::uint32_t g = group_.empty() ? i : group_[i];
      keys[i] = (std::uint64_t{g - base[ops_[g].rank]} << 32) | i;
    }
    // (step, i) orders a rank's ops by step already; ranks by i within a step, as i grows with
    // the rank.
    std::vector<std::uint32_t> order(count);
    for (std::uint32_t i = 0; i < count; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::uint32_t a, std::uint32_t b) { return keys[a] < keys[b]; });
    std::vector<std::uint32_t> perm(count);
    std::vector<Op> sorted(count);
    for (std::uint32_t k = 0; k < count; ++k) {
      perm[order[k]] = k;
      sorted[k] = ops_[order[k]];
    }
    ops_ = std::move(sorted);
    for (std::uint32_t& i : conn_ops_) i = perm[i];
    for (auto& [j, i] : edges) {
      j = perm[j];
      i = perm[i];
    }
    group_ = {};
    return perm;
  }

  // Lanes in lockstep. A flat ring with c channels (NCCL's one ring per NIC) runs c identical
  // rings over c parts of the buffer: between two ranks, lane l's chunks are lane 0's, of the
  // same size (to an element), at the same place in the program, depending on the same
  // earlier operations of their own lane. Simulating each lane's chunk as its own event is
  // what made ring x8 cost 8 times ring x1 per byte (129,024 messages of 32 KiB at 16 MiB on
  // 8 x 8, every one a heap entry for its arrival, its grant and its ack), while the lanes
  // cross their own NIC ports and routes and meet only on the NVLink ports, where they are
  // serialised one after another anyway. So the ends of one (rank, peer) on several lanes
  // become one bundle, driven by its lowest lane: one event per chunk, grant and ack for all
  // lanes, each lane's chunk still serialised on its own ports, in lane order; the bundle's
  // chunk arrives (and its credits return) when every lane's has; each lane sends on from its
  // own arrival (lane_ready). What lockstep costs (8 x 8 ring x8, chunk 1 MiB, busbw bundled /
  // lanes one by one, switch links): 1 MiB 1.000, 4 MiB 0.947, 16 MiB 0.957, 64 MiB 1.000 —
  // latency-bound sizes lose a little where a lane would have run ahead of the others; CPU
  // time 8-13x less at every size.
  // Only where it is exact in structure: every lane's end of the (rank, peer) has the same
  // sends and receives (chunk counts, reduce flags), no lane sends in pieces, and each op of a
  // bundled lane depends on the bundled images of its lane-0 twin's dependencies; otherwise
  // (any mismatch anywhere) nothing is bundled.
  void bundle_lanes(std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges) {
    if (lanes_ < 2) return;
    std::vector<std::uint32_t> order(conns_.size());
    for (std::uint32_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](std::uint32_t a, std::uint32_t b) { return conns_[a].key < conns_[b].key; });
    const auto pair_of = [&](std::uint32_t k) { return conns_[k].key / std::uint64_t(lanes_); };
    std::vector<std::uint32_t> group(ops_.size());
    for (std::uint32_t i = 0; i < group.size(); ++i) group[i] = i;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> follow;  // (follower, leader) ends
    auto same = [&](std::span<const std::uint32_t> a, std::span<const std::uint32_t> b) {
      if (a.size() != b.size()) return false;
      for (std::size_t q = 0; q < a.size(); ++q) {
        const Op &x = ops_[a[q]], &y = ops_[b[q]];
        if (x.frags != y.frags || x.reduce != y.reduce) return false;
      }
      return true;
    };
    for (std::size_t a = 0; a < order.size();) {
      std::size_t b = a + 1;
      while (b < order.size() && pair_of(order[b]) == pair_of(order[a])) ++b;
      const Conn& lead = conns_[order[a]];
      for (std::size_t m = a + 1; m < b; ++m) {
        const Conn& c = conns_[order[m]];
        if (!same(sends(c), sends(lead)) || !same(recvs(c), recvs(lead)) || c.gated || lead.gated)
          return;
        for (std::size_t q = 0; q < sends(c).size(); ++q) group[sends(c)[q]] = sends(lead)[q];
        for (std::size_t q = 0; q < recvs(c).size(); ++q) group[recvs(c)[q]] = recvs(lead)[q];
        follow.emplace_back(order[m], order[a]);
      }
      a = b;
    }
    if (follow.empty()) return;
    // Each op's dependencies as bundles; a follower's must be its leader's, and no bundle may
    // depend on itself.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> in;  // (after, before as a bundle)
    in.reserve(edges.size());
    for (const auto& [j, i] : edges) {
      if (group[j] == group[i]) return;
      in.emplace_back(i, group[j]);
    }
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    std::vector<std::uint32_t> first(ops_.size() + 1, 0);
    for (const auto& e : in) ++first[e.first + 1];
    for (std::size_t i = 0; i < ops_.size(); ++i) first[i + 1] += first[i];
    for (std::uint32_t i = 0; i < ops_.size(); ++i) {
      const std::uint32_t g = group[i];
      if (g == i) continue;
      if (first[i + 1] - first[i] != first[g + 1] - first[g] ||
          !std::equal(in.begin() + first[i], in.begin() + first[i + 1], in.begin() + first[g],
                      [](const auto& x, const auto& y) { return x.second == y.second; }))
        return;
    }
    // Bundle: edges into leaders (and lone ops) only, from bundles; followers leave their
    // rank's count of operations.
    edges.clear();
    for (const auto& [i, g] : in)
      if (group[i] == i) edges.emplace_back(g, i);
    for (std::uint32_t i = 0; i < ops_.size(); ++i)
      if (group[i] != i) --ranks_[ops_[i].rank].ops_left;
    std::sort(follow.begin(), follow.end(), [&](const auto& x, const auto& y) {
      return conns_[x.second].key < conns_[y.second].key ||
             (conns_[x.second].key == conns_[y.second].key &&
              conns_[x.first].key < conns_[y.first].key);
    });
    for (std::size_t f = 0; f < follow.size();) {
      const std::uint32_t l = follow[f].second;
      conns_[l].mem_begin = static_cast<std::uint32_t>(members_.size());
      for (; f < follow.size() && follow[f].second == l; ++f) {
        conns_[follow[f].first].follower = true;
        members_.push_back(follow[f].first);
      }
      conns_[l].mem_end = static_cast<std::uint32_t>(members_.size());
    }
    bundled_ = follow.size();
    group_ = std::move(group);
    lane_data_s_.assign(static_cast<std::size_t>(n_) * static_cast<std::size_t>(lanes_), 0.0);
  }

  // Head-of-line blocking behind control packets. The fabric's switches are input-buffered
  // (one FIFO per input port and VL, emu/fabric README), and every flow's receiver sends control
  // packets back along the reverse route: an RC ACK per ack_coalesce_max data packets (IBA
  // 9.7.5.1.1 coalescing) and a credit grant (a zero-length SEND WITH IMM) per chunk. Where
  // those share a switch input with another flow's data but leave by an output that carries
  // data of its own, each waits there for the rest of the packet on that output — and the data
  // behind it in the same FIFO waits with it. Input and output both run at line rate, so the
  // lost time is never caught up: the input buffer fills and the credits hold the upstream
  // sender (the packet level shows it as PortXmitWait on the HCA or the uplink; 2 x 4 ring x4:
  // every link busy 90 % of the run, where x2, whose ACKs leave by idle outputs, is not slowed).
  // Per data packet of the blocked flow: q control packets, each waiting half a packet time on
  // an output busy a fraction u of the time, u itself the blocked rate: w = u q / 2 with
  // u = 1 / (1 + w), so w (1 + w) = q / 2; the flow runs at 1 / (1 + w) of its rate (x4 on
  // 2 x 4: 0.899). Modelled as that rate on the whole path (its NIC egress included: the
  // packet level stalls the HCA's port).
  void derate_behind_control_packets(std::vector<double>& rate_factor) {
    const fabric::FabricConfig fc;
    const double mtu = static_cast<double>(mtu_bytes(FabricNetConfig{}.mtu));
    const double q =
        1.0 / static_cast<double>(fc.ack_coalesce_max) + mtu / static_cast<double>(slot_bytes_);
    const double w = (std::sqrt(1.0 + 2.0 * q) - 1.0) / 2.0;
    const double factor = 1.0 / (1.0 + w);
    std::vector<std::uint8_t> data_out(paths_->ports(), 0);
    std::vector<SwitchPaths::SwitchHop> ctl, hops;  // control packets: (input, output) per switch
    std::vector<std::uint32_t> data;
    for (std::uint32_t k = 0; k < conns_.size(); ++k) {
      const Conn& c = conns_[k];
      if (c.nic_from < 0 || !has_sends(c)) continue;
      data.push_back(k);
      hops.clear();
      paths_->hops(c.nic_from, c.nic_to, hops);
      for (const auto& h : hops) data_out[h.out] = 1;
      paths_->hops(c.nic_to, c.nic_from, ctl);
    }
    auto by_port = [](const SwitchPaths::SwitchHop& a, const SwitchPaths::SwitchHop& b) {
      return a.in < b.in || (a.in == b.in && a.out < b.out);
    };
    std::sort(ctl.begin(), ctl.end(), by_port);
    for (std::uint32_t k : data) {
      Conn& c = conns_[k];
      hops.clear();
      paths_->hops(c.nic_from, c.nic_to, hops);
      // Only routes through more than one switch: within one rail switch (ring2's rail rings)
      // the packet level shows no blocking — every flow there enters and leaves at the same
      // packet clock, and an ACK meets its output between two packets (8 x 8 ring2 stays
      // within 1.5 % without the derate, 5 % slow with it).
      bool blocked = false;
      if (hops.size() < 2) continue;
      for (const auto& h : hops) {
        for (auto it =
                 std::lower_bound(ctl.begin(), ctl.end(), SwitchPaths::SwitchHop{h.in, 0}, by_port);
             it != ctl.end() && it->in == h.in && !blocked; ++it)
          blocked = it->out != h.out && data_out[it->out] != 0;
      }
      if (blocked) {
        rate_factor[k] = factor;
        ++blocked_flows_;
      }
    }
  }

  // Head-of-line blocking of data in the switches' input buffers. An input FIFO whose packets
  // go to several outputs serves them in arrival order: while its head waits for an output
  // busy with another input's packet, the packets behind it wait too, even those for idle
  // outputs; input and output both run at line rate, so the time is lost, the input's buffer
  // fills and its credits stall the sending HCA (IBA 7.9). All-to-all on the 2-level fat tree
  // (32 HCAs, 4 MiB; the packet level's per-port counters and each input's head wait, dumped
  // after the run): every HCA and switch link busy only 56-62 % of the run, the head of every
  // switch input that serves several outputs waiting 33-39 % of it with packets queued behind
  // it, 44-61 us of PortXmitWait on every HCA; the leaves' downlink inputs (one output each
  // under minhop's d-mod-k routes) wait 3 %. The saturation throughput of an input-queued
  // switch (Karol, Hluchyj and Morgan 1987: 0.618 for 8 x 8 under uniform traffic), which the
  // coarse links (whole pieces, no input queues) did not have: they read 0.53-0.69 of the
  // packet level's time.
  // Estimate, at setup, for the flows a NIC sends side by side from the start: loads L in NIC
  // line rates (each such NIC sending all the time, its flows sharing it by their bytes); per
  // switch input i and output j on their routes a head's wait W_ij (below); an input that
  // serves several outputs is busy L_i + sum_j L_ij W_ij of the time (its packets and their
  // heads' waits), at most all of it, so the NICs that load it run at most 1 / that of their
  // rate; a fixed point (slower NICs, lighter outputs, shorter waits). The predicted waits match
  // the dump (fat tree: leaf inputs 0.31 of the time, measured 0.33; spine inputs 0.37 / 0.37;
  // 8 x 4 rails: 0.30 / 0.25), the rates come out 0.69 of the line rate on the fat tree
  // (measured 0.62: the spines' blocked inputs also stall the leaves' uplinks for credits, not
  // modelled) and 0.70 on 8 x 4 rails (measured 0.71). Inputs with one output only (every
  // ring's) are left alone: that is output contention, which the coarse links already share.
  // The NIC's egress is stretched by 1 / rate, the links still carry the packets at line rate.
  // The control packets' term (derate_behind_control_packets) estimates part of the same
  // waits, so a flow takes the smaller of the two factors.
  // On a cluster of one GPU per node (the fat trees), three more things the packet level does
  // (README "Control packets, credit back-pressure and the HCA's pipeline at the heads"):
  // - every packet is a head, not only full data packets: per chunk, its data packets (of their
  //   mean size: a 2 KiB message is half an MTU), the ACKs (IBA 9.7.6.1.2) and the credit grant
  //   (a zero-length SEND) on the reverse route, and the grant's ACK on the forward route; each
  //   waits its turn at the head (H_ij heads per MTU time), while only data occupies an output.
  //   At 256 KiB on the radix-8 fat tree (8 KiB per peer: 2 packets) that is 2.5 heads per data
  //   packet, where the term above counted 1;
  // - credit back-pressure (IBA 7.9): an output into another switch's input whose head is
  //   blocked cannot send once that input's buffer is full, so the heads waiting for it see it
  //   busy as long as that input is busy (its packets plus its heads' waits), not only its load
  //   (the leaves' uplinks toward the spines' blocked inputs: the PortXmitWait of the dump);
  // - the HCA's transmit pipeline (fabric::HcaModel, below), which bounds the NIC's rate for
  //   messages of a few hundred bytes.
  // Elsewhere (rails) they are left out: on 8 x 4 rails (minhop) they took the coarse model
  // from 1.04-1.12 to 1.21-1.31 of the packet level's time (1.07-1.16 with the back-pressure
  // and the pipeline alone); the rail inputs there wait less than the term above already
  // predicts (coll10's dump: 0.25 of the run against 0.30). Why is not found.
  void derate_head_of_line(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges,
                           std::vector<double>& rate_factor) {
    std::vector<std::uint8_t> waits(ops_.size(), 0);  // the op depends on an earlier one
    for (const auto& e : edges) waits[e.second] = 1;
    struct Use {
      std::uint32_t flow, pair;  // pairs[pair] = the (input, output) of one switch on its route
      bool data;                 // its data's route (else the reverse: its control packets)
    };
    const fabric::FabricConfig fc;
    const double mtu = static_cast<double>(mtu_bytes(FabricNetConfig{}.mtu));
    // Packet heads (control packets, packets under an MTU), the uplinks' credit back-pressure
    // and the HCA's transmit pipeline only on a cluster of one GPU per node (the fat trees
    // they were measured on, see below); elsewhere (rails) the term as it was: full packets,
    // data heads only.
    const bool packets = cfg_.gpus == 1;
    std::vector<std::uint32_t> flows;
    std::vector<double> weight;  // the flow's share of its NIC's bytes
    // Per unit of the flow's load (its bytes at line rate), packet heads per MTU time on its
    // data's route (data packets, the grants' ACKs) and on the reverse route (ACKs, grants),
    // and its data packets' mean size in MTUs.
    std::vector<double> fwd_heads, rev_heads, pkt_size;
    std::vector<double> nic_bytes(nic_out_.size(), 0.0), nic_data_pkts(nic_out_.size(), 0.0),
        nic_ctl_pkts(nic_out_.size(), 0.0);
    std::vector<Use> uses;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
    std::vector<SwitchPaths::SwitchHop> hops;
    // The next switch's input behind each switch-to-switch output (kNone: an HCA behind it).
    std::vector<std::uint32_t> next_in(paths_->ports(), kNone);
    std::vector<double> nic_Bps(nic_out_.size(), 0.0);
    for (std::uint32_t k = 0; k < conns_.size(); ++k) {
      const Conn& c = conns_[k];
      if (c.nic_from < 0 || !has_sends(c)) continue;
      // Only flows whose data is all there at the start: those the NIC sends side by side
      // from the start (all-to-all). A flow that waits for receives (a tree's, the steps of
      // halving-doubling) shares its NIC with other flows only part of the time, which these
      // static loads cannot tell.
      bool backlog = true;
      for (std::uint32_t at = c.send_begin; at < c.send_end; ++at)
        backlog = backlog && waits[conn_ops_[at]] == 0;
      if (!backlog) continue;
      // Its packets, chunk by chunk: an RC WRITE WITH IMM of ceil(chunk / MTU) packets, an ACK
      // per ack_coalesce_max of them and for the last (it asks for one, IBA 9.7.6.1.2), and a
      // credit grant back (a zero-length SEND WITH IMM), which is acked in turn.
      double bytes = 0, data_pkts = 0, chunks = 0, acks = 0;
      for (std::uint32_t at = c.send_begin; at < c.send_end; ++at) {
        const std::size_t op = conn_op_bytes_[at];
        for (std::size_t off = 0; off < op; off += slot_bytes_) {
          const double p =
              std::ceil(static_cast<double>(std::min<std::size_t>(slot_bytes_, op - off)) / mtu);
          data_pkts += p;
          acks += std::ceil(p / static_cast<double>(fc.ack_coalesce_max));
          chunks += 1;
        }
        bytes += static_cast<double>(op);
      }
      if (packets && bytes <= 0) continue;
      const auto from = static_cast<std::size_t>(c.nic_from),
                 to = static_cast<std::size_t>(c.nic_to);
      nic_bytes[from] += bytes;
      nic_data_pkts[from] += data_pkts;
      nic_ctl_pkts[from] += chunks;       // the grants' ACKs
      nic_ctl_pkts[to] += acks + chunks;  // ACKs and grants
      nic_Bps[from] = c.rate_Bps;
      const auto f = static_cast<std::uint32_t>(flows.size());
      for (const bool data : {true, false}) {
        if (!data && !packets) break;
        hops.clear();
        if (data) {
          paths_->hops(c.nic_from, c.nic_to, hops);
        } else {
          paths_->hops(c.nic_to, c.nic_from, hops);
        }
        for (std::size_t h = 0; h < hops.size(); ++h) {
          uses.push_back(Use{f, static_cast<std::uint32_t>(pairs.size()), data});
          pairs.emplace_back(hops[h].in, hops[h].out);
          if (packets && h + 1 < hops.size()) next_in[hops[h].out] = hops[h + 1].in;
        }
      }
      flows.push_back(k);
      weight.push_back(bytes);
      fwd_heads.push_back(packets ? (data_pkts + chunks) * mtu / bytes : 1.0);
      rev_heads.push_back((acks + chunks) * mtu / bytes);
      pkt_size.push_back(packets ? bytes / (data_pkts * mtu) : 1.0);
    }
    if (flows.empty()) return;
    for (std::size_t f = 0; f < flows.size(); ++f)
      weight[f] /= nic_bytes[static_cast<std::size_t>(conns_[flows[f]].nic_from)];
    // The HCA's transmit pipeline (fabric::HcaModel): at most tx_pipeline_packets_max packets
    // between its DMA engine and the wire, a data packet held there for its DMA read (PCIe,
    // host latency), the NIC pipeline and its wire time, a control packet for the NIC pipeline.
    // With messages of a few hundred bytes (all-to-all of 64 KiB on 128 HCAs: 512 B per peer)
    // that, not the link, bounds what the HCA injects: 16 packets of 512 B per ~0.8 us.
    const fabric::HcaModel& hm = fc.hca;
    std::vector<double> nic_cap(nic_out_.size(), 1.0);
    for (std::size_t n = 0; n < nic_cap.size(); ++n) {
      if (!packets || nic_data_pkts[n] <= 0) continue;
      const double payload = nic_bytes[n] / nic_data_pkts[n];
      const double data_s = 1e-9 * static_cast<double>(hm.host_latency_ns + hm.tx_proc_ns) +
                            payload / (static_cast<double>(hm.pcie_mbytes_per_s) * 1e6) +
                            payload / nic_Bps[n];
      const double held_s =
          nic_data_pkts[n] * data_s + nic_ctl_pkts[n] * 1e-9 * static_cast<double>(hm.tx_proc_ns);
      const double pipeline_Bps =
          static_cast<double>(hm.tx_pipeline_packets_max) * nic_bytes[n] / held_s;
      nic_cap[n] = std::min(1.0, pipeline_Bps / nic_Bps[n]);
    }
    // Number the distinct (input, output) pairs.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> distinct = pairs;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (Use& u : uses)
      u.pair = static_cast<std::uint32_t>(
          std::lower_bound(distinct.begin(), distinct.end(), pairs[u.pair]) - distinct.begin());
    // Inputs that send packets to more than one output.
    std::vector<std::uint8_t> fans(paths_->ports(), 0);
    for (std::size_t p = 1; p < distinct.size(); ++p)
      if (distinct[p].first == distinct[p - 1].first) fans[distinct[p].first] = 1;
    std::vector<std::uint32_t> out_inputs(paths_->ports(), 0);  // inputs with packets for it
    for (const auto& d : distinct) ++out_inputs[d.second];
    std::vector<double> head_wait(distinct.size(), 0.0), out_wait(paths_->ports());
    std::vector<double> nic_rate = nic_cap, pair_load(distinct.size()), pair_heads(distinct.size()),
                        in_load(paths_->ports()), out_load(paths_->ports()),
                        out_size(paths_->ports()), in_wait(paths_->ports()),
                        in_busy(paths_->ports(), 0.0), slow(nic_out_.size());
    constexpr int kIterations = 50;  // damped: converges to 1e-4 on the fat tree in ~30
    for (int it = 0; it < kIterations; ++it) {
      std::fill(pair_load.begin(), pair_load.end(), 0.0);
      std::fill(pair_heads.begin(), pair_heads.end(), 0.0);
      std::fill(in_load.begin(), in_load.end(), 0.0);
      std::fill(out_load.begin(), out_load.end(), 0.0);
      std::fill(out_size.begin(), out_size.end(), 0.0);
      std::fill(in_wait.begin(), in_wait.end(), 0.0);
      for (const Use& u : uses) {
        const Conn& c = conns_[flows[u.flow]];
        const double load = nic_rate[static_cast<std::size_t>(c.nic_from)] * weight[u.flow];
        if (u.data) {
          pair_load[u.pair] += load;
          out_size[distinct[u.pair].second] += load * pkt_size[u.flow];
        }
        pair_heads[u.pair] += load * (u.data ? fwd_heads[u.flow] : rev_heads[u.flow]);
      }
      for (std::size_t p = 0; p < distinct.size(); ++p) {
        in_load[distinct[p].first] += pair_load[p];
        out_load[distinct[p].second] += pair_load[p];
      }
      // The outputs' mean data packet, in MTUs, weighted by the time each takes on the wire.
      for (std::size_t j = 0; j < out_size.size(); ++j)
        out_size[j] = packets && out_load[j] > 0 ? out_size[j] / out_load[j] : 1.0;
      // Each head's wait W_ij (in MTU times of the output), then sum_j H_ij W_ij per input, H_ij
      // its heads per MTU time (data and control packets: each waits its turn at the head).
      // The output serves its inputs round robin: a head waits for the rest of the packet on
      // the output (half a packet if it is busy, a fraction o_ij of the time: its utilisation by
      // the other inputs) and one packet for each other input's head already waiting there
      // (input k's head waits there a fraction L_kj W_kj of the time weighted by its packets'
      // size: a control packet's is nothing), at most one packet per other input. Where the
      // others are many and alike this is the M/D/1 wait o / (2 (1 - o)) of Karol's analysis
      // (0.630 for 8 x 8); where one steady stream fills the output (a rail switch's downlink
      // into an HCA port) the heads of other inputs wait about half a packet, not the M/D/1
      // wait of its utilisation (that took 8 x 4 rails to 0.66 of the line rate, where the
      // packet level moves 0.71).
      std::fill(out_wait.begin(), out_wait.end(), 0.0);
      for (std::size_t p = 0; p < distinct.size(); ++p)
        out_wait[distinct[p].second] += pair_load[p] * head_wait[p];
      for (std::size_t p = 0; p < distinct.size(); ++p) {
        const auto [in, out] = distinct[p];
        const double scale = paths_->rate_scale(out);
        double o = std::min((out_load[out] - pair_load[p]) / scale, 1.0);
        if (next_in[out] != kNone)
          o = std::max(o, std::min(in_busy[next_in[out]], 1.0) - pair_load[p] / scale);
        const double ahead = (out_wait[out] - pair_load[p] * head_wait[p]) / scale;
        head_wait[p] = std::min(0.5 * o * out_size[out] + ahead,
                                static_cast<double>(out_inputs[out] - 1) * out_size[out]);
        if (fans[in] != 0) in_wait[in] += pair_heads[p] * head_wait[p] / scale;
      }
      // The input forwards L_i in L_i / r_i + sum_j H_ij W_ij of each unit of time (its packets'
      // own time and their heads' waits), at most all of it: its NICs may run 1 / that faster.
      std::fill(slow.begin(), slow.end(), kNoLimit);
      for (const Use& u : uses) {
        const std::uint32_t in = distinct[u.pair].first;
        if (fans[in] == 0 || !u.data) continue;
        const double busy = in_load[in] / paths_->rate_scale(in) + in_wait[in];
        const auto n = static_cast<std::size_t>(conns_[flows[u.flow]].nic_from);
        slow[n] = std::min(slow[n], 1.0 / busy);
      }
      for (std::size_t i = 0; i < in_busy.size(); ++i)
        in_busy[i] = fans[i] != 0 ? in_load[i] / paths_->rate_scale(i) + in_wait[i] : 0.0;
      // Half a step toward it (damped), no faster than the NIC's line rate and its pipeline.
      for (std::size_t n = 0; n < nic_rate.size(); ++n)
        nic_rate[n] = 0.5 * (nic_rate[n] + std::min(nic_cap[n], nic_rate[n] * slow[n]));
    }
    for (std::size_t f = 0; f < flows.size(); ++f)
      rate_factor[flows[f]] = nic_rate[static_cast<std::size_t>(conns_[flows[f]].nic_from)];
  }

  // The NICs that send several flows send in pieces of kPieceBytes, one piece at a time in
  // their flows' turns (pump_send, take_port_turn).
  void split_shared_egress() {
    std::vector<std::uint32_t> flows(nic_out_.size() + 1, 0);
    for (const Conn& c : conns_)
      if (c.nic_from >= 0 && has_sends(c)) ++flows[static_cast<std::size_t>(c.nic_from) + 1];
    for (Conn& c : conns_) {
      if (c.nic_from < 0 || !has_sends(c) || flows[static_cast<std::size_t>(c.nic_from) + 1] < 2)
        continue;
      c.gated = true;
      if (slot_bytes_ > kPieceBytes) c.piece_bytes = kPieceBytes;
    }
    // Each NIC's flows in the order of their first send in their rank's program (ops_ are still
    // numbered rank by rank here): the order the Communicator posts them in, and so the order
    // the packet level's HCA first serves its QPs in.
    for (std::size_t e = 1; e < flows.size(); ++e) flows[e] += flows[e - 1];
    nic_rr_begin_ = flows;
    nic_rr_.resize(flows.back());
    for (std::uint32_t k = 0; k < conns_.size(); ++k)
      if (conns_[k].gated) nic_rr_[flows[static_cast<std::size_t>(conns_[k].nic_from)]++] = k;
    std::vector<std::uint32_t> first_op_of_rank(ranks_.size(), kNone);
    for (std::uint32_t i = 0; i < ops_.size(); ++i)
      first_op_of_rank[ops_[i].rank] = std::min(first_op_of_rank[ops_[i].rank], i);
    const auto position = [&](std::uint32_t k) {
      const Conn& c = conns_[k];
      return std::pair{conn_ops_[c.send_begin] - first_op_of_rank[c.rank], c.rank};
    };
    for (std::size_t e = 0; e + 1 < nic_rr_begin_.size(); ++e)
      std::sort(nic_rr_.begin() + nic_rr_begin_[e], nic_rr_.begin() + nic_rr_begin_[e + 1],
                [&](std::uint32_t a, std::uint32_t b) { return position(a) < position(b); });
    nic_cursor_.assign(nic_out_.size(), 0);
    nic_waiting_.assign(nic_out_.size(), 0);
    nic_wake_pending_.assign(nic_out_.size(), 0);
  }

  // Port turns on a NIC that sends several flows. The packet level's HCA serves its QPs with
  // work round robin, packet by packet, and puts a packet on the wire only when its port is
  // free. The coarse ports are reservations (when each is free next), and a piece posted now
  // books the switch links and the far NIC's ingress from when it will leave the NIC onward;
  // so pieces that queued on a busy egress port booked the links of their routes far ahead,
  // in post order, and other NICs' pieces that could have used a link earlier waited behind
  // those bookings. All-to-all (every NIC sending 28 flows on 8 x 4 rails) read 3-5x the
  // packet level's time, worst on the routes that pile flows onto one spine link (minhop).
  // So such a NIC's flows wait for its port to be free and then take turns, round robin in
  // their program order (nic_rr_), one piece each: every booking is made when the piece
  // leaves, in time order. A flow ready while the port is idle also waits for its turn (an
  // event at the same instant), so that the turn, not the connections' numbering, picks
  // which of several flows ready at once goes first.
  bool take_port_turn(std::uint32_t k) {
    Conn& c = conns_[k];
    if (c.port_turn) {
      c.port_turn = false;
      return true;
    }
    if (!c.waiting) {
      c.waiting = true;
      ++nic_waiting_[static_cast<std::size_t>(c.nic_from)];
    }
    wake_port(static_cast<std::uint32_t>(c.nic_from), k);
    return false;
  }
  // Schedules the next turn on NIC e's port for when it is free (once; `k`: any of its flows).
  void wake_port(std::uint32_t e, std::uint32_t k) {
    if (nic_wake_pending_[e] != 0 || nic_waiting_[e] == 0) return;
    nic_wake_pending_[e] = 1;
    push(std::max(now_, nic_out_[e]), k, EvKind::kPieceSent, 1);
  }
  void next_port_turn(std::uint32_t e) {
    nic_wake_pending_[e] = 0;
    const std::uint32_t lo = nic_rr_begin_[e], n = nic_rr_begin_[e + 1] - lo;
    if (nic_waiting_[e] == 0) return;
    if (nic_out_[e] > now_) {  // held meanwhile (back_pressure)
      wake_port(e, nic_rr_[lo]);
      return;
    }
    for (std::uint32_t step = 0; step < n; ++step) {
      const std::uint32_t k = nic_rr_[lo + (nic_cursor_[e] + step) % n];
      Conn& c = conns_[k];
      if (!c.waiting) continue;
      c.waiting = false;
      c.port_turn = true;
      --nic_waiting_[e];
      nic_cursor_[e] = (nic_cursor_[e] + step + 1) % n;
      mark(k, kPumpSend);
      return;
    }
  }

  // Rank's dependencies from byte ranges, as the Communicator derives them (communicator.cpp
  // compute_deps): an op waits for the last earlier writer of any byte it touches and, if it
  // writes, for the readers since. Here the byte ranges are cut at every op boundary once
  // (sorted boundaries per buffer), so each access walks whole elementary segments.
  void add_deps(const Plan& p, std::uint32_t base,
                std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges) {
    struct Access {
      Buf buf;
      std::size_t lo, hi;
      bool write;
    };
    auto accesses = [](const PlanOp& o, auto&& f) {
      if (o.bytes == 0) return;
      switch (o.kind) {
        case PlanOp::Kind::kSend:
          f(Access{o.a.buf, o.a.off, o.a.off + o.bytes, false});
          break;
        case PlanOp::Kind::kRecv:
        case PlanOp::Kind::kAvg:
          f(Access{o.a.buf, o.a.off, o.a.off + o.bytes, true});
          break;
        case PlanOp::Kind::kCopy:
          f(Access{o.a.buf, o.a.off, o.a.off + o.bytes, false});
          f(Access{o.b.buf, o.b.off, o.b.off + o.bytes, true});
          break;
      }
    };
    std::vector<std::size_t> bounds[3];
    for (const PlanOp& o : p.ops) {
      accesses(o, [&](const Access& a) {
        auto& b = bounds[static_cast<std::size_t>(a.buf)];
        b.push_back(a.lo);
        b.push_back(a.hi);
      });
    }
    struct Segment {
      std::uint32_t writer = kNone;
      std::vector<std::uint32_t> readers;
    };
    std::vector<Segment> segs[3];
    for (std::size_t b = 0; b < 3; ++b) {
      std::sort(bounds[b].begin(), bounds[b].end());
      bounds[b].erase(std::unique(bounds[b].begin(), bounds[b].end()), bounds[b].end());
      segs[b].resize(bounds[b].size());
    }
    std::vector<std::uint32_t> stamp(p.ops.size(), kNone);
    for (std::uint32_t i = 0; i < p.ops.size(); ++i) {
      auto depend = [&](std::uint32_t j) {
        if (j == kNone || j == i || stamp[j] == i) return;
        stamp[j] = i;
        edges.emplace_back(base + j, base + i);
      };
      accesses(p.ops[i], [&](const Access& a) {
        const auto b = static_cast<std::size_t>(a.buf);
        const auto& bd = bounds[b];
        for (auto s = static_cast<std::size_t>(std::lower_bound(bd.begin(), bd.end(), a.lo) -
                                               bd.begin());
             bd[s] < a.hi; ++s) {
          Segment& seg = segs[b][s];
          depend(seg.writer);
          if (a.write) {
            for (std::uint32_t r : seg.readers) depend(r);
            seg.readers.clear();
            seg.writer = i;
          } else {
            seg.readers.push_back(i);
          }
        }
      });
    }
  }

  void push(double t, std::uint32_t conn, EvKind k, std::uint32_t arg) {
    pq_.push(Ev::make(t, conn, k, arg));
  }
  // Marks connection k's receiving and/or sending side (kPumpRecv, kPumpSend) for drain().
  void mark(std::uint32_t k, std::uint8_t sides) {
    Conn& c = conns_[k];
    WEFT_ASSERT(!c.follower);
    if (c.dirty == 0) {
      if (intake_)
        dirty_bits_[k / 64] |= std::uint64_t{1} << (k % 64);
      else
        dirty_.push_back(k);
    }
    c.dirty |= sides;
  }

  // Folds reductions of instants before now into free_s; returns when the rank's compute is
  // free for a write posted now.
  double compute_free(Rank& r) {
    if (r.acc_bytes > 0 && r.acc_s < now_) {
      r.free_s = std::max(r.free_s, r.acc_s) + r.acc_bytes / cfg_.reduce_Bps;
      r.acc_bytes = 0;
    }
    return std::max(now_, r.free_s);
  }
  void charge(Rank& r, double bytes) {
    if (cfg_.reduce_Bps <= 0 || bytes <= 0) return;
    compute_free(r);
    r.acc_s = now_;
    r.acc_bytes += bytes;
  }

  void finish_rank(Rank& r) {
    compute_free(r);
    const double end =
        r.acc_bytes > 0 ? std::max(r.free_s, r.acc_s) + r.acc_bytes / cfg_.reduce_Bps : 0.0;
    finish_ = std::max({finish_, now_, r.free_s, end, r.acked_s});
  }

  // Send op i's last chunk is acknowledged at `ack_s`. An op that nothing waits for completes
  // at once without an event: its ack only bounds its rank's finish (Rank::acked_s). (In a
  // ring's all-gather no later op touches what a send read: half of all sends.)
  void write_done(std::uint32_t i, double ack_s) {
    Op& o = ops_[i];
    if (o.dep_begin != o.dep_end) {
      push(ack_s, o.conn, EvKind::kWriteDone, i);
      return;
    }
    Rank& r = ranks_[o.rank];
    WEFT_ASSERT(r.ops_left > 0);
    r.acked_s = std::max(r.acked_s, ack_s);
    if (--r.ops_left == 0) finish_rank(r);
  }

  void complete(std::uint32_t i) {
    Op& o = ops_[i];
    Rank& r = ranks_[o.rank];
    WEFT_ASSERT(r.ops_left > 0);
    if (--r.ops_left == 0) finish_rank(r);
    // A bundled receive completes for each lane when that lane's chunk came in (lane_ready).
    const bool per_lane =
        o.kind == PlanOp::Kind::kRecv && conns_[o.conn].mem_end > conns_[o.conn].mem_begin;
    for (std::uint32_t k = o.dep_begin; k < o.dep_end; ++k) {
      Op& d = ops_[dependents_[k]];
      WEFT_ASSERT(d.deps_left > 0);
      if (!per_lane) d.after_s = now_;
      if (--d.deps_left != 0) continue;
      if (is_local(d)) {
        local_.push_back(dependents_[k]);
      } else {
        mark(d.conn, d.kind == PlanOp::Kind::kRecv ? kPumpRecv : kPumpSend);
      }
    }
  }

  // The connections marked while the instant's events came in are pumped in (rank, peer, lane)
  // order — their numbers' (number_conns_by_key), so a bit set walked upward, no sort; then
  // those marked meanwhile, first marked first (drain).
  void drain_in_order() {
    intake_ = false;
    for (std::size_t w = 0; w < dirty_bits_.size(); ++w) {
      while (dirty_bits_[w] != 0) {
        run_local();
        const auto k = static_cast<std::uint32_t>(
            w * 64 + static_cast<std::size_t>(std::countr_zero(dirty_bits_[w])));
        dirty_bits_[w] &= dirty_bits_[w] - 1;
        pump(k);
      }
    }
    drain();
    intake_ = true;
  }

  void run_local() {
    while (!local_.empty()) {
      const std::uint32_t i = local_.back();
      local_.pop_back();
      complete(i);  // copies and the avg division cost no time in this model
    }
  }

  void pump(std::uint32_t k) {
    const std::uint8_t sides = conns_[k].dirty;
    conns_[k].dirty = 0;
    if ((sides & kPumpRecv) != 0) pump_recv(k);
    // A receive that completed may have readied this connection's next send: it goes now,
    // before the other marked connections, as when every marked end pumped both sides.
    if (((sides | conns_[k].dirty) & kPumpSend) != 0) pump_send(k);
  }

  // Runs ready local ops and pumps marked connections until nothing more can happen now.
  void drain() {
    for (;;) {
      if (!local_.empty()) {
        const std::uint32_t i = local_.back();
        local_.pop_back();
        complete(i);  // copies and the avg division cost no time in this model
        continue;
      }
      if (dirty_head_ == dirty_.size()) {
        dirty_.clear();
        dirty_head_ = 0;
        break;
      }
      // First marked, first pumped: a rank's sends that become ready together go out in
      // program order (the Communicator path visits connections in (peer, lane) order).
      pump(dirty_[dirty_head_++]);
    }
  }

  // Bytes of chunks [lo, hi) of op `o`.
  std::size_t frag_bytes(std::size_t bytes, std::uint32_t lo, std::uint32_t hi) const {
    return std::min(bytes, std::size_t{hi} * slot_bytes_) - std::size_t{lo} * slot_bytes_;
  }

  void pump_recv(std::uint32_t k) {
    Conn& c = conns_[k];
    std::uint32_t applied = 0;
    while (c.arrived > 0 && c.recv_head < c.recv_end) {
      const std::uint32_t i = conn_ops_[c.recv_head];
      Op& o = ops_[i];
      if (o.deps_left > 0) break;
      const std::uint32_t take = std::min(c.arrived, o.frags - o.frags_done);
      if (o.reduce) {
        std::size_t bytes = frag_bytes(o.bytes, o.frags_done, o.frags_done + take);
        for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b)
          bytes += frag_bytes(
              o.lanes_same_bytes
                  ? o.bytes
                  : conn_op_bytes_[conns_[members_[b]].recv_begin + c.recv_head - c.recv_begin],
              o.frags_done, o.frags_done + take);
        charge(ranks_[c.rank], static_cast<double>(bytes));
      }
      if (c.mem_end > c.mem_begin) {
        // Bundled: each lane's own arrival (lane_ready) — applied as it came in, or now, when
        // the op waited for something else.
        const bool at_arrival = c.data_event_s == now_;
        lane_data_s_[c.lane_slot] = at_arrival ? now_ - lag_s_[k] : now_;
        for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b) {
          const std::uint32_t m = members_[b];
          lane_data_s_[conns_[m].lane_slot] = at_arrival ? now_ - lag_s_[m] : now_;
        }
      }
      o.frags_done += take;
      c.arrived -= take;
      applied += take;
      if (o.frags_done < o.frags) break;
      ++c.recv_head;
      complete(i);
    }
    if (applied == 0) return;
    // One grant per connection per pass, as the Communicator batches them; a bundle's credits
    // are back when every lane's grant is.
    ++messages_;
    double at = grant_at(c);
    for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b) {
      at = std::max(at, grant_at(conns_[members_[b]]));
      ++messages_;
    }
    push(at, c.mate, EvKind::kGrant, applied);
  }
  // When a bundled lane could have sent what its bundle sends now. The bundle moves when its
  // slowest lane's chunk is in; the other lanes' own chunks came in earlier — on a port the
  // lanes share (NVLink), one after another, each a chunk's serialisation ahead of the next —
  // and unbundled they would have gone on then. So each lane starts from its own last arrival
  // here (lane_data_s_), but no earlier than the bundle's last grant (credits are the
  // bundle's) or the op's other dependencies: that keeps the pipelining of lanes across shared
  // ports which lockstep alone loses (2 x 4 ring x4 at 1 MiB: 0.84 of the step model in
  // lockstep, within 10 % with this, CollSim.EveryAlgorithmIsWithinTenPercentOfItsModel).
  double lane_ready(const Conn& lead, const Conn& c, const Op& o) const {
    return std::max({lane_data_s_[c.lane_slot], lead.grant_in_s, o.after_s});
  }
  double grant_at(const Conn& c) const {
    return c.grant_by_route ? grant_time(c) : now_ + c.grant_s;
  }

  // Puts `bytes` of connection `c` on its ports now (or when they are free): whole-message
  // serialisation at the egress port, cut-through to the ingress port (serialised there behind
  // earlier arrivals), as ClusterTransport's write. Returns when the last byte has arrived.
  // `ready`: when the lane could have sent at the earliest (now, but for a bundled lane).
  double transmit(Conn& c, std::size_t bytes, double ready) {
    const double len = static_cast<double>(bytes);
    const double ser = len / c.rate_Bps;
    Rank& r = ranks_[c.rank];
    compute_free(r);
    const double start = std::max({ready, r.free_s, *c.egress});
    *c.egress = start + ser * c.egress_stretch;
    // Then each switch link of the route in turn, likewise (cut-through: the message starts on
    // a link when its head does, or when the link has sent what it took earlier); the latency
    // is charged once, as on a route without contention.
    double head = start, tail = *c.egress;
    for (std::uint32_t j = c.sw_begin; j < c.sw_end; ++j) {
      double& f = sw_free_[sw_path_[j]];
      head = std::max(head, f);
      f = head + len / (c.rate_Bps * paths_->rate_scale(sw_path_[j]));
      tail = std::max(tail, f);
    }
    const double done = std::max({head + c.latency_s + ser, tail + c.latency_s, *c.ingress + ser});
    *c.ingress = done;
    if (paths_ != nullptr && !c.nvlink) back_pressure(c, done - c.latency_s);
    return done;
  }

  void pump_send(std::uint32_t k) {
    Conn& c = conns_[k];
    while (c.send_head < c.send_end) {
      const std::uint32_t i = conn_ops_[c.send_head];
      Op& o = ops_[i];
      if (o.deps_left > 0) return;
      while (o.frags_posted < o.frags) {
        if (c.piece_busy) return;
        if (c.piece_off == 0 && c.credits == 0) return;
        if (c.gated && !take_port_turn(k)) return;
        const std::size_t off = std::size_t{o.frags_posted} * slot_bytes_;
        const std::size_t frag = std::min<std::size_t>(slot_bytes_, o.bytes - off);
        // A NIC that sends several flows sends each chunk in pieces, one piece per connection
        // on the egress port at a time, so the flows' pieces interleave there as the packet
        // level's HCA interleaves its QPs' packets (round robin over the QPs with work) instead
        // of one flow's whole chunk holding the others.
        const std::size_t piece =
            c.piece_bytes == 0 ? frag : std::min<std::size_t>(c.piece_bytes, frag - c.piece_off);
        const bool bundle = c.mem_end > c.mem_begin;
        double done = transmit(c, piece, bundle ? lane_ready(c, c, o) : now_);
        if (c.piece_off == 0) --c.credits;
        c.piece_off += static_cast<std::uint32_t>(piece);
        if (c.gated) wake_port(static_cast<std::uint32_t>(c.nic_from), k);
        if (c.piece_off < frag) {
          if (c.gated) continue;  // its next piece in its next turn
          c.piece_busy = true;
          push(*c.egress, k, EvKind::kPieceSent, 0);
          return;
        }
        c.piece_off = 0;
        // Per connection the ports are fixed, so the last chunk's ack is the op's last.
        double ack = done + c.latency_s;
        // The bundled lanes send their chunk of the same op now, each on its own ports, and
        // the bundle's chunk has arrived when every lane's has (bundle_lanes).
        const double lead_done = done;
        lane_done_.clear();
        for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b) {
          Conn& m = conns_[members_[b]];
          const std::size_t m_bytes =
              o.lanes_same_bytes ? o.bytes
                                 : conn_op_bytes_[m.send_begin + c.send_head - c.send_begin];
          const double d =
              transmit(m, std::min<std::size_t>(slot_bytes_, m_bytes - off), lane_ready(c, m, o));
          lane_done_.push_back(d);
          done = std::max(done, d);
          ack = std::max(ack, d + m.latency_s);
          ++messages_;
        }
        if (bundle) {
          lag_s_[c.mate] = done - lead_done;
          for (std::uint32_t b = c.mem_begin; b < c.mem_end; ++b)
            lag_s_[conns_[members_[b]].mate] = done - lane_done_[b - c.mem_begin];
        }
        ++o.frags_posted;
        ++messages_;
        push(done, c.mate, EvKind::kData, 0);
        if (o.frags_posted == o.frags) write_done(i, ack);
      }
      ++c.send_head;
    }
  }

  // When a grant sent now on connection `c` (between NICs, with switch paths) reaches its peer.
  // The packet level sends it as a zero-length SEND WITH IMM on the connection's QP, and the
  // HCA model (emu/fabric hca_node.cpp) keeps both of its pipelines in order:
  // - Transmit: the HCA pulls up to tx_pipeline_packets_max packets ahead of its wire, each
  //   ready once its payload's DMA read is done (PCIe, host latency, tx_proc), and the port
  //   sends them in that order. So the grant, ready tx_proc after its post, leaves after the
  //   data packets pulled before it. The coarse egress port serialises a message from its post
  //   on (its DMA read is in latency_s), so the packet level's wire runs the same timeline
  //   tx_dma_s later: the grant leaves at egress + tx_dma_s, at most pulled_max_s from now.
  // - The route: propagation and switch latency only (no payload to serialise; the switch
  //   queues it meets are not modelled: the packet level showed none on 8 x 8 ring x8).
  // - Receive: PCIe keeps posted writes in order, so while data streams into the far NIC the
  //   grant is delivered after the data packet that arrived just before it, whose DMA write
  //   ends rx_dma_s after its arrival — or when the last data ends, if that is sooner.
  // This is what bunches a ring's credits on the packet level (8 x 8 ring x8, 16 MiB, 4 slots
  // of 32 KiB): a NIC receives one flow and sends another at once, so the grants of a window's
  // first three chunks wait behind the NIC's own outgoing chunks (1.4 us) and the incoming ones
  // at the far end (0.5 us), arrive together when the window's last chunk lands, and the
  // sender posts three chunks at once: a window every 5.15 us instead of 4.6 us.
  double grant_time(const Conn& c) const {
    const double ready = now_ + tx_proc_s_;
    const double wire = std::max(ready, std::min(*c.egress + tx_dma_s_, now_ + c.pulled_max_s));
    const double arrive = wire + c.grant_s;
    return std::max(arrive + rx_proc_s_, std::min(*c.ingress, arrive + rx_dma_s_));
  }

  // Credit back-pressure (IBA 7.9) at piece granularity. The packet level's switches hold only
  // data_vl_buffer_bytes per input and VL, so a piece whose tail leaves its last switch (toward
  // the receiving NIC) at `tail_in_s` — late, because that NIC's ingress was busy with another
  // flow (the tree's incast: two children into one parent) — holds the sending NIC's input
  // buffer in the first switch, and the NIC's port with it, until the piece is within the
  // buffers of its route. The packet level shows it as PortXmitWait on the HCAs (8 x 8 tree,
  // 16 MiB: 400-650 us of a 1.6 ms run, where no switch output is busy more than 70 % of the
  // time); the coarse model let a NIC's next message leave while the last still sat in the
  // fabric. Only half of the delay holds the port: the congested output serves its inputs
  // round robin, so the held input moves every other packet time and the NIC's other flows
  // pass in between (the whole delay took the 8 x 8 tree to half the packet level's busbw).
  void back_pressure(const Conn& c, double tail_in_s) {
    const double buffer_s = static_cast<double>(buffer_bytes_) / c.rate_Bps;
    // Switches on the route: one per switch-to-switch port plus the last one; the input buffer
    // of each lies between the egress and the ingress port.
    const auto switches = static_cast<double>(c.sw_end - c.sw_begin) + 1.0;
    const double held_until = tail_in_s - switches * buffer_s;
    if (held_until > *c.egress) *c.egress += kHeldShare * (held_until - *c.egress);
  }

  ClusterConfig cfg_;
  const SwitchPaths* paths_;
  std::uint32_t buffer_bytes_ = fabric::FabricConfig{}.link.data_vl_buffer_bytes;
  // The packet level's HCA pipeline (fabric::HcaModel, grant_time): the fixed stages, and the
  // first data packet's delay from its post to the wire (DMA read of one MTU over PCIe, host
  // latency, pipeline) and from the wire to the host (pipeline, DMA write, host latency).
  double tx_proc_s_ = 1e-9 * static_cast<double>(fabric::FabricConfig{}.hca.tx_proc_ns);
  double rx_proc_s_ = 1e-9 * static_cast<double>(fabric::FabricConfig{}.hca.rx_proc_ns);
  double tx_dma_s_ = tx_proc_s_ + hca_dma_s(), rx_dma_s_ = rx_proc_s_ + hca_dma_s();
  std::vector<double> sw_free_;            // when each switch port is free (s)
  std::vector<int> sw_flows_;              // connections routed through each switch port
  int blocked_flows_ = 0;                  // flows derate_behind_control_packets slowed
  int hol_flows_ = 0;                      // flows derate_head_of_line slowed (more than the above)
  static constexpr double kNoLimit = 1e9;  // derate_head_of_line: an input without waits
  // Port turns (take_port_turn), by NIC: its flows in turn order nic_rr_[nic_rr_begin_[e],
  // nic_rr_begin_[e + 1]), the next to look at, how many wait, and whether a turn is scheduled.
  std::vector<std::uint32_t> nic_rr_, nic_rr_begin_, nic_cursor_, nic_waiting_;
  std::vector<std::uint8_t> nic_wake_pending_;
  std::vector<std::uint32_t> sw_path_;
  int n_, lanes_;
  std::uint32_t slot_bytes_;
  std::vector<Rank> ranks_;
  std::vector<double> nvl_out_, nvl_in_, nic_out_, nic_in_;  // when each port is free (s)
  std::vector<Op> ops_;
  std::vector<std::uint32_t> dependents_;
  std::vector<Conn> conns_;
  std::vector<std::uint32_t> members_;  // bundled lanes' ends, per leader (Conn::mem_begin)
  std::vector<double> lane_data_s_;     // by rank x lanes + lane: see lane_ready

  std::vector<double> lane_done_;  // pump_send's scratch
  std::size_t bundled_ = 0;
  std::unordered_map<std::uint64_t, std::uint32_t> conn_index_;
  std::vector<std::uint32_t> conn_ops_;     // each connection's sends, then its receives (Conn)
  std::vector<std::size_t> conn_op_bytes_;  // the bytes of each (bundled lanes: no op read)
  // Bundled receiving ends (lane_ready), by connection: how much earlier than the bundle's
  // event this lane's own last chunk arrived.
  std::vector<double> lag_s_;
  // Set-up only: each connection's sends and receives as they are found (number_conns_by_key),
  // and each op's bundle lead (bundle_lanes; empty: none bundled).
  std::vector<std::vector<std::uint32_t>> build_sends_, build_recvs_;
  std::vector<std::uint32_t> group_;
  EventQueue pq_;
  std::vector<std::uint32_t> local_, dirty_;
  std::size_t dirty_head_ = 0;
  // Connections marked while an instant's events come in (intake_), one bit each.
  std::vector<std::uint64_t> dirty_bits_;
  bool intake_ = true;
  std::uint64_t messages_ = 0, events_ = 0;
  double now_ = 0, finish_ = 0;
};

PlanSim::PlanSim(const ClusterConfig& c, std::span<const coll::Plan> plans, int lanes,
                 std::uint32_t slots, std::uint32_t slot_bytes, const SwitchPaths* paths) {
  WEFT_ASSERT(lanes >= 1 && slots >= 1 && slot_bytes >= 1);
  engine_ = std::make_unique<Engine>(c, plans, lanes, slots, slot_bytes, paths);
}
PlanSim::~PlanSim() = default;
PlanSimResult PlanSim::run() {
  return engine_->run();
}

}  // namespace weft::collsim
