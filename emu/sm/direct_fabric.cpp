// emu/sm/direct_fabric.cpp — the SMP event loop over NodeStates, and the independent checker.
// Thread-safety: none; one owner.
#include "emu/sm/direct_fabric.hpp"

#include <algorithm>
#include <unordered_map>

#include "emu/sma/sma.hpp"
#include "src/base/assert.hpp"

namespace weft::sm {
namespace {

constexpr std::size_t kProblemsMax = 8;

struct NodesRef {
  std::span<const sma::NodeState* const> s;
  const sma::NodeState& operator[](std::size_t i) const { return *s[i]; }
  std::size_t size() const { return s.size(); }
};

void note(VerifyReport& r, std::string s) {
  if (r.problems.size() < kProblemsMax) r.problems.push_back(std::move(s));
}

}  // namespace

DirectFabric::DirectFabric(const topo::Topology& topo, DirectConfig cfg)
    : topo_(topo), cfg_(cfg), rng_(cfg.seed) {
  nodes_.reserve(topo_.node_count());
  for (const topo::Node& n : topo_.nodes()) {
    sma::NodeParams p;
    p.node_guid = n.guid;
    p.system_image_guid = n.system_image_guid;
    p.description = n.description;
    p.num_ports = static_cast<std::uint8_t>(n.num_ports());
    p.device_id = static_cast<std::uint16_t>(n.device_id);
    if (n.is_switch()) {
      nodes_.push_back(sma::make_switch(p));
    } else {
      nodes_.push_back(sma::make_ca(p));
      sma::NodeState& s = nodes_.back();
      for (int q = 1; q <= n.num_ports(); ++q)
        if (n.ports[q].guid != 0) {
          s.ports[q].port_guid = n.ports[q].guid;
          s.ports[q].guids[0] = n.ports[q].guid;
        }
    }
  }
  for (const topo::Link& l : topo_.links()) {
    sma::link_up(nodes_[l.a.node], static_cast<std::uint8_t>(l.a.port));
    sma::link_up(nodes_[l.b.node], static_cast<std::uint8_t>(l.b.port));
  }
}

void DirectFabric::attach(SubnetManager& sm, topo::NodeId node, std::uint8_t port) {
  WEFT_ASSERT(node < nodes_.size() && !nodes_[node].is_switch());
  WEFT_ASSERT(port >= 1 && port <= nodes_[node].num_ports);
  sm_ = &sm;
  sm_node_ = node;
  sm_port_ = port;
  sm.start(now_);
}

std::uint32_t DirectFabric::buf_alloc(const Mad& m) {
  if (!free_bufs_.empty()) {
    const std::uint32_t b = free_bufs_.back();
    free_bufs_.pop_back();
    bufs_[b] = m;
    return b;
  }
  bufs_.push_back(m);
  return static_cast<std::uint32_t>(bufs_.size() - 1);
}

void DirectFabric::buf_free(std::uint32_t b) {
  free_bufs_.push_back(b);
}

void DirectFabric::schedule(TimeNs t, std::uint32_t node, std::uint8_t port, EvKind k,
                            std::uint16_t slid, std::uint16_t dlid, std::uint32_t buf,
                            std::uint64_t aux) {
  if (k != EvKind::kTrapRepeat) ++in_flight_;
  events_.push(Event{t, seq_++, node, port, k, slid, dlid, buf, aux});
}

std::uint16_t DirectFabric::lid_of(std::uint32_t node, std::uint8_t port) const {
  const sma::NodeState& n = nodes_[node];
  return n.is_switch() ? n.ports[0].lid : n.ports[port].lid;
}

void DirectFabric::pump_sm() {
  if (sm_ == nullptr) return;
  OutMad o;
  while (sm_->poll_mad(now_, o)) {
    const std::uint32_t b = buf_alloc(o.mad);
    if (o.route == OutMad::Route::kDirected) {
      if (o.local)
        schedule(now_, sm_node_, o.port, EvKind::kLocalSma, o.slid, 0, b);
      else
        transmit(sm_node_, o.port, b, o.slid, 0);
    } else {
      route_lid(sm_node_, o.port, o.dlid, b, o.slid);
    }
  }
}

void DirectFabric::transmit(std::uint32_t node, std::uint8_t port, std::uint32_t buf,
                            std::uint16_t slid, std::uint16_t dlid) {
  const topo::Node& tn = topo_.node(node);
  if (port < 1 || port > tn.num_ports() || tn.ports[port].link == topo::kNoLink) {
    ++stats_.dropped_down;
    buf_free(buf);
    return;
  }
  const topo::PortRef peer = topo_.link(tn.ports[port].link).other(node);
  if (!nodes_[node].ports[port].is_up() || !nodes_[peer.node].ports[peer.port].is_up()) {
    ++stats_.dropped_down;
    buf_free(buf);
    return;
  }
  ++stats_.traversals;
  if (rng_.chance(cfg_.loss)) {
    ++stats_.dropped_loss;
    buf_free(buf);
    return;
  }
  schedule(now_ + cfg_.hop_ns, peer.node, static_cast<std::uint8_t>(peer.port), EvKind::kArrive,
           slid, dlid, buf);
}

// A LID-routed SMP leaves `node` (a switch: by its LFT; a CA: out of from_port).
void DirectFabric::route_lid(std::uint32_t node, std::uint8_t from_port, std::uint16_t dlid,
                             std::uint32_t buf, std::uint16_t slid) {
  const sma::NodeState& n = nodes_[node];
  if (!n.is_switch()) {
    transmit(node, from_port, buf, slid, dlid);
    return;
  }
  const std::uint8_t out = n.route(dlid);
  if (out == 0) {
    schedule(now_ + cfg_.sma_ns, node, 0, EvKind::kLocalSma, slid, dlid, buf);
    return;
  }
  if (out == sma::kLftUnreachable) {
    ++stats_.dropped_no_route;
    buf_free(buf);
    return;
  }
  transmit(node, out, buf, slid, dlid);
}

void DirectFabric::answer(std::uint32_t node, std::uint8_t port, std::uint32_t buf,
                          std::uint16_t slid) {
  sma::NodeState& n = nodes_[node];
  ++stats_.sma_calls;
  sma::SmpContext ctx;
  ctx.lrh_slid = slid;
  // A PortInfo Set may move a link (after_port_sets): keep the target port's physical state.
  const Mad& in = bufs_[buf];
  const bool port_info_set = in[3] == static_cast<std::uint8_t>(wire::MadMethod::kSet) &&
                             (in[16] << 8 | in[17]) == static_cast<int>(wire::SmpAttr::kPortInfo);
  sma::PhysState phys_before = sma::PhysState::kNoStateChange;
  if (port_info_set) {
    const std::uint32_t mod = static_cast<std::uint32_t>(in[20]) << 24 |
                              static_cast<std::uint32_t>(in[21]) << 16 |
                              static_cast<std::uint32_t>(in[22]) << 8 | in[23];
    const std::uint32_t target = n.is_switch() || mod != 0 ? mod : port;
    if (target < n.ports.size()) phys_before = n.ports[target].phys_state;
  }
  const sma::MadReply r = sma::handle_smp(n, port, in, ctx);
  switch (r.action) {
    case sma::SmpAction::kSendOut:
      bufs_[buf] = r.mad;
      if (r.is_response) {
        // The answering SMA takes sma_ns; relaying switches only hop_ns.
        if (port_info_set && !r.state_changed_ports.empty())
          after_port_sets(node, r.state_changed_ports, phys_before, now_ + cfg_.sma_ns);
        schedule(now_ + cfg_.sma_ns, node, r.out_port, EvKind::kDepart, slid, 0, buf);
        return;
      }
      transmit(node, r.out_port, buf, slid, 0);
      return;
    case sma::SmpAction::kRouteByLid:
      bufs_[buf] = r.mad;
      if (port_info_set && !r.state_changed_ports.empty())
        after_port_sets(node, r.state_changed_ports, phys_before, now_);
      route_lid(node, r.out_port, r.dlid, buf, lid_of(node, port));
      return;
    case sma::SmpAction::kToLocalSm:
      if (sm_ != nullptr && node == sm_node_) {
        ++stats_.to_sm;
        sm_->on_mad(r.mad, now_);
      }
      buf_free(buf);
      return;
    case sma::SmpAction::kAbsorbed:
    case sma::SmpAction::kDrop:
      buf_free(buf);
      return;
  }
}

// PortInfo Sets that moved a port's link (IBA 7.2, 14.2.5.6), as emu/fabric's Node does it:
// PortState Down or PortPhysicalState Polling on a trained link takes it down at both ends once
// the answer has left (one hop after `answered`), and it trains again to Init retrain_ns later;
// Disabled keeps it down until a Set of Polling, which trains it (unless the peer is Disabled).
void DirectFabric::after_port_sets(std::uint32_t node, std::span<const std::uint8_t> ports,
                                   sma::PhysState phys_before, TimeNs answered) {
  const topo::Node& tn = topo_.node(node);
  for (const std::uint8_t q : ports) {
    if (q == 0 || q > tn.num_ports() || tn.ports[q].link == topo::kNoLink) continue;
    const topo::LinkId link = tn.ports[q].link;
    const topo::PortRef peer = topo_.link(link).other(node);
    const sma::PhysState now_phys = nodes_[node].ports[q].phys_state;
    const TimeNs down_at = answered + cfg_.hop_ns + 1;
    bool train = false;
    if (phys_before == sma::PhysState::kLinkUp && now_phys != sma::PhysState::kLinkUp) {
      schedule(down_at, link, 0, EvKind::kLink, 0, 0, 0);
      train = now_phys == sma::PhysState::kPolling;
    } else if (phys_before == sma::PhysState::kDisabled && now_phys == sma::PhysState::kPolling) {
      train = true;
    }
    if (train && nodes_[peer.node].ports[peer.port].phys_state != sma::PhysState::kDisabled)
      schedule(down_at + cfg_.retrain_ns, link, 1, EvKind::kLink, 0, 0, 0);
  }
}

void DirectFabric::link_event(topo::LinkId link, bool up) {
  if (up) {
    // An end disabled meanwhile keeps the link down.
    const topo::Link& l = topo_.link(link);
    for (const topo::PortRef& e : {l.a, l.b})
      if (nodes_[e.node].ports[e.port].phys_state == sma::PhysState::kDisabled) return;
  }
  ++stats_.links_moved;
  set_link(link, up);
}

void DirectFabric::send_trap(std::uint32_t node, const sma::TrapMad& trap, std::uint64_t tid) {
  ++stats_.traps_sent;
  Mad m;
  std::copy(trap.mad.begin(), trap.mad.end(), m.begin());
  route_lid(node, 0, trap.dlid, buf_alloc(m), trap.slid);
  schedule(now_ + sma::trap_repeat_ns(nodes_[node]), node, 0, EvKind::kTrapRepeat, 0, 0, 0, tid);
}

void DirectFabric::process(const Event& ev) {
  if (ev.kind == EvKind::kTrapRepeat) {  // until the SM's TrapRepress clears it
    sma::NodeState& n = nodes_[ev.node];
    if (n.trap.active && n.trap.tid == ev.aux)
      if (auto trap = sma::repeat_trap(n)) send_trap(ev.node, *trap, ev.aux);
    return;
  }
  if (ev.kind == EvKind::kLink) {
    link_event(ev.node, ev.port != 0);
    return;
  }
  const Mad& m = bufs_[ev.buf];
  if (ev.kind == EvKind::kArrive && !blackout_.empty() &&
      blackout_[std::size_t{ev.node} * 256 + ev.port]) {
    ++stats_.dropped_blackout;
    buf_free(ev.buf);
    return;
  }
  if (ev.kind == EvKind::kLocalSma) {
    answer(ev.node, ev.port, ev.buf, ev.slid);
    return;
  }
  if (ev.kind == EvKind::kDepart) {
    // A directed-route response leaving the SMA that built it (delayed by sma_ns).
    transmit(ev.node, ev.port, ev.buf, ev.slid, 0);
    return;
  }
  const sma::NodeState& n = nodes_[ev.node];
  if (m[1] == static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted)) {
    if (n.is_switch()) {
      if (ev.dlid == n.ports[0].lid) {
        schedule(now_ + cfg_.sma_ns, ev.node, ev.port, EvKind::kLocalSma, ev.slid, ev.dlid, ev.buf);
        return;
      }
      route_lid(ev.node, ev.port, ev.dlid, ev.buf, ev.slid);
      return;
    }
    const sma::PortState& p = n.ports[ev.port];
    if (p.lid == 0 || ev.dlid < p.lid || ev.dlid >= p.lid + (1u << p.lmc)) {
      ++stats_.dropped_no_route;
      buf_free(ev.buf);
      return;
    }
    // The SM's own node hands responses and traps to the SM at once; other CAs answer.
    const bool to_sm = sm_ != nullptr && ev.node == sm_node_ && (m[3] & 0x80 || m[3] == 0x05);
    schedule(to_sm ? now_ : now_ + cfg_.sma_ns, ev.node, ev.port, EvKind::kLocalSma, ev.slid,
             ev.dlid, ev.buf);
    return;
  }
  // Directed route: every node runs the SMA's rules; the answering SMA is charged sma_ns when
  // it sends its response (see answer()).
  answer(ev.node, ev.port, ev.buf, ev.slid);
}

bool DirectFabric::run(TimeNs until, const std::function<bool()>& stop) {
  for (;;) {
    pump_sm();
    if (stop && stop()) return true;
    const TimeNs te = events_.empty() ? kNoDeadline : events_.top().t;
    const TimeNs td = sm_ != nullptr ? sm_->next_deadline() : kNoDeadline;
    const TimeNs t = std::min(te, td);
    if (t == kNoDeadline) return stop && stop();
    if (t > until) {
      now_ = std::max(now_, until);
      return stop && stop();
    }
    now_ = std::max(now_, t);
    if (te <= td) {
      const Event ev = events_.top();
      events_.pop();
      if (ev.kind != EvKind::kTrapRepeat) --in_flight_;
      process(ev);
    } else {
      sm_->on_deadline(now_);
    }
  }
}

bool DirectFabric::run_until_up(TimeNs limit_ns) {
  WEFT_ASSERT(sm_ != nullptr);
  const TimeNs until = now_ + limit_ns;
  // Trap-repeat timers do not hold it: SMPs in flight and pending link moves do.
  run(until, [&] { return (sm_->settled() || sm_->phase() == Phase::kFailed) && in_flight_ == 0; });
  return sm_->settled() && in_flight_ == 0;
}

void DirectFabric::set_port_blackout(topo::NodeId node, std::uint8_t port, bool on) {
  WEFT_ASSERT(node < nodes_.size());
  if (blackout_.empty()) blackout_.assign(nodes_.size() * 256, 0);
  blackout_[std::size_t{node} * 256 + port] = on ? 1 : 0;
}

bool DirectFabric::send_from_sm(std::span<const std::uint8_t> mad, std::uint16_t dlid) {
  if (sm_ == nullptr || mad.size() < wire::kMadBytes) return false;
  Mad m;
  std::copy_n(mad.begin(), wire::kMadBytes, m.begin());
  route_lid(sm_node_, sm_port_, dlid, buf_alloc(m), lid_of(sm_node_, sm_port_));
  return true;
}

void DirectFabric::set_link(topo::LinkId link, bool up) {
  const topo::Link& l = topo_.link(link);
  for (const topo::PortRef& e : {l.a, l.b}) {
    sma::NodeState& n = nodes_[e.node];
    const bool changed = up ? sma::link_up(n, static_cast<std::uint8_t>(e.port))
                            : sma::link_down(n, static_cast<std::uint8_t>(e.port));
    if (!changed || !n.is_switch()) continue;
    const std::uint64_t tid = trap_tid_++;
    if (auto trap = sma::make_trap_128(n, tid)) send_trap(e.node, *trap, tid);
  }
}

VerifyReport verify_nodes(const topo::Topology& topo_, std::span<const sma::NodeState* const> nodes,
                          std::uint16_t sm_lid) {
  VerifyReport r;
  const NodesRef nodes_{nodes};
  // Port states and SMLIDs.
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    const sma::NodeState& n = nodes_[i];
    if (n.is_switch()) {
      if (n.ports[0].state != sma::LinkState::kActive) {
        ++r.ports_not_active;
        note(r, n.description + " port 0 is not Active");
      }
      if (n.ports[0].master_sm_lid != sm_lid) ++r.smlid_wrong;
    }
    for (std::uint8_t p = 1; p <= n.num_ports; ++p) {
      const topo::Port& tp = topo_.node(i).ports[p];
      if (tp.link == topo::kNoLink) continue;
      const topo::PortRef peer = topo_.link(tp.link).other(i);
      if (!n.ports[p].is_up() || !nodes_[peer.node].ports[peer.port].is_up()) continue;
      ++r.ports_linked;
      if (n.ports[p].state != sma::LinkState::kActive) {
        ++r.ports_not_active;
        note(r, n.description + " port " + std::to_string(p) + " is not Active");
      }
      if (!n.is_switch() && n.ports[p].master_sm_lid != sm_lid) ++r.smlid_wrong;
    }
  }
  if (r.smlid_wrong) note(r, std::to_string(r.smlid_wrong) + " ports have the wrong MasterSMLID");
  // HCA LIDs as the nodes hold them.
  struct Owner {
    std::uint32_t node;
    std::uint8_t port;
    std::uint32_t peer = 0;  // sources: the node at the other end of the link
    bool active = false;     // sources: the port is Active
  };
  std::unordered_map<std::uint16_t, Owner> owner;
  std::vector<Owner> sources;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    const sma::NodeState& n = nodes_[i];
    if (n.is_switch()) continue;
    for (std::uint8_t p = 1; p <= n.num_ports; ++p) {
      const topo::Port& tp = topo_.node(i).ports[p];
      if (tp.link == topo::kNoLink || !n.ports[p].is_up()) continue;
      sources.push_back(
          {i, p, topo_.link(tp.link).other(i).node, n.ports[p].state == sma::LinkState::kActive});
      const sma::PortState& ps = n.ports[p];
      if (ps.lid == 0) {
        note(r, n.description + " port " + std::to_string(p) + " has no LID");
        continue;
      }
      for (std::uint32_t k = 0; k < (1u << ps.lmc); ++k) {
        ++r.hca_lids;
        if (!owner.emplace(static_cast<std::uint16_t>(ps.lid + k), Owner{i, p, 0, false}).second)
          ++r.duplicate_lids;
      }
    }
  }
  if (r.duplicate_lids) note(r, std::to_string(r.duplicate_lids) + " duplicate HCA LIDs");
  // Active sources attached to a switch reach a LID exactly when that switch delivers it, so
  // they are checked once per switch (18 HCAs on a 36-port leaf: one walk, 18 pairs); the
  // others (inactive, or cabled to an HCA) one by one.
  struct Group {
    std::uint32_t sw;
    std::vector<std::uint32_t> members;  // indexes into sources
  };
  std::vector<Group> groups;
  std::vector<std::uint32_t> singles;
  {
    std::unordered_map<std::uint32_t, std::size_t> group_of;
    for (std::uint32_t k = 0; k < sources.size(); ++k) {
      const Owner& src = sources[k];
      if (!src.active || !nodes_[src.peer].is_switch()) {
        singles.push_back(k);
        continue;
      }
      auto [it, fresh] = group_of.emplace(src.peer, groups.size());
      if (fresh) groups.push_back({src.peer, {}});
      groups[it->second].members.push_back(k);
    }
  }
  // Per destination LID: does each switch deliver it? 0 unknown, 1 on the walk, 2 yes, 3 no.
  std::vector<std::uint8_t> st(nodes_.size());
  std::vector<std::uint32_t> walk;
  for (const auto& [dlid, dst] : owner) {
    std::fill(st.begin(), st.end(), 0);
    auto resolve = [&](std::uint32_t s0) -> bool {
      walk.clear();
      std::uint32_t s = s0;
      std::uint8_t result = 3;
      for (;;) {
        if (st[s] >= 2) {
          result = st[s];
          break;
        }
        if (st[s] == 1) {
          ++r.loops;
          result = 3;
          break;
        }
        st[s] = 1;
        walk.push_back(s);
        const sma::NodeState& n = nodes_[s];
        const std::uint8_t out = n.route(dlid);
        if (out == 0 || out > n.num_ports) break;
        const topo::Port& tp = topo_.node(s).ports[out];
        if (tp.link == topo::kNoLink) break;
        const topo::PortRef peer = topo_.link(tp.link).other(s);
        const sma::PortState& a = n.ports[out];
        const sma::PortState& b = nodes_[peer.node].ports[peer.port];
        if (!a.is_up() || !b.is_up() || a.state != sma::LinkState::kActive ||
            b.state != sma::LinkState::kActive)
          break;
        if (!nodes_[peer.node].is_switch()) {
          result = (peer.node == dst.node && peer.port == dst.port) ? 2 : 3;
          break;
        }
        s = peer.node;
      }
      for (std::uint32_t w : walk) st[w] = result;
      return result == 2;
    };
    auto fail = [&](const Owner& src, std::size_t count) {
      if (count == 0) return;
      if (r.unreachable_pairs == 0)
        note(r, nodes_[src.node].description + " cannot reach LID " + std::to_string(dlid) + " (" +
                    nodes_[dst.node].description + ")");
      r.unreachable_pairs += count;
    };
    for (const Group& g : groups) {
      std::size_t count = g.members.size();
      const Owner* first = &sources[g.members[0]];
      for (std::uint32_t k : g.members)
        if (sources[k].node == dst.node && sources[k].port == dst.port) {
          --count;  // self excluded
          if (first == &sources[k] && g.members.size() > 1) first = &sources[g.members[1]];
        }
      r.hca_pairs += count;
      const bool ok = st[g.sw] >= 2 ? st[g.sw] == 2 : resolve(g.sw);
      if (!ok) fail(*first, count);
    }
    for (std::uint32_t k : singles) {
      const Owner& src = sources[k];
      if (src.node == dst.node && src.port == dst.port) continue;
      ++r.hca_pairs;
      bool ok = src.active;
      if (ok) {
        const topo::PortRef peer =
            topo_.link(topo_.node(src.node).ports[src.port].link).other(src.node);
        ok = peer.node == dst.node && peer.port == dst.port;
      }
      if (!ok) fail(src, 1);
    }
  }
  if (r.loops) note(r, std::to_string(r.loops) + " forwarding loops");
  if (r.unreachable_pairs) note(r, std::to_string(r.unreachable_pairs) + " unreachable HCA pairs");
  return r;
}

VerifyReport DirectFabric::verify() const {
  std::vector<const sma::NodeState*> ptrs;
  ptrs.reserve(nodes_.size());
  for (const sma::NodeState& n : nodes_) ptrs.push_back(&n);
  return verify_nodes(topo_, ptrs, sm_ != nullptr ? sm_->sm_lid() : 0);
}

std::size_t DirectFabric::memory_bytes() const {
  std::size_t b = sizeof(*this) + bufs_.capacity() * sizeof(Mad);
  for (const sma::NodeState& n : nodes_) {
    b += sizeof(n) + n.lft.capacity() + n.mft.capacity() * sizeof(n.mft[0]);
    for (const sma::PortState& p : n.ports)
      b += sizeof(p) + p.pkeys.capacity() * 2 + p.sl2vl.capacity() * sma::kSlCount +
           p.guids.capacity() * 8;
  }
  return b;
}

}  // namespace weft::sm
