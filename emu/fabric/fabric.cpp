// emu/fabric/fabric.cpp — building a Fabric from a Topology, the min-hop configuration helper
// (until the subnet manager), link state changes, management packet injection, counter totals.
// Thread-safety: the Simulator's thread.
#include "emu/fabric/fabric.hpp"

#include <cassert>
#include <cstdio>
#include <deque>

#include "emu/sim/rng_stream.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/packet.hpp"

namespace weft::fabric {

namespace {

link::LinkRate rate_of(const topo::LinkProps& p) {
  link::LinkRate r;
  switch (p.width) {
    case topo::LinkWidth::k1x:
      r.width = link::LinkWidth::k1x;
      break;
    case topo::LinkWidth::k2x:
      r.width = link::LinkWidth::k1x;
      break;  // no 2x in src/link
    case topo::LinkWidth::k4x:
      r.width = link::LinkWidth::k4x;
      break;
    case topo::LinkWidth::k8x:
      r.width = link::LinkWidth::k8x;
      break;
    case topo::LinkWidth::k12x:
      r.width = link::LinkWidth::k12x;
      break;
  }
  r.speed = static_cast<link::LaneSpeed>(static_cast<std::uint8_t>(p.speed));  // same order
  return r;
}

std::string node_name(const topo::Topology& t, topo::NodeId n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s:%016llx", t.node(n).is_switch() ? "sw" : "hca",
                static_cast<unsigned long long>(t.node(n).guid));
  return buf;
}

}  // namespace

std::uint32_t PacketPool::alloc() {
  live_++;
  if (free_head_ != kNoPacket) {
    const std::uint32_t i = free_head_;
    free_head_ = packets_[i]->next_free;
    packets_[i]->next_free = kNoPacket;
    packets_[i]->rx_timed = false;
    return i;
  }
  packets_.push_back(std::make_unique<Packet>());
  return static_cast<std::uint32_t>(packets_.size() - 1);
}

void PacketPool::free(std::uint32_t i) {
  assert(live_ > 0);
  live_--;
  packets_[i]->next_free = free_head_;
  free_head_ = i;
}

std::size_t PacketPool::memory_bytes() const {
  std::size_t b = packets_.capacity() * sizeof(packets_[0]);
  for (const auto& p : packets_) b += sizeof(Packet) + p->bytes.capacity();
  return b;
}

Fabric::Fabric(sim::Simulator& sim, const topo::Topology& topo, const FabricConfig& config)
    : sim_(sim), topo_(topo), config_(config), zeros_(8192, 0) {
  assert(config_.data_vls >= 1 && config_.data_vls <= 15);
  arb_ = config_.vl_arb;
  if (arb_.high.empty() && arb_.low.empty()) {
    for (std::uint8_t vl = 0; vl < config_.data_vls; ++vl) arb_.low.push_back({vl, 64});
  }
  nodes_.reserve(topo_.node_count());
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    const topo::Node& tn = topo_.node(n);
    const std::string name = node_name(topo_, n);
    if (tn.is_switch()) {
      nodes_.push_back(std::make_unique<SwitchNode>(*this, n, tn.num_ports()));
    } else {
      DeviceConfig dc;
      dc.name = name;
      dc.node_guid = tn.guid;
      dc.ports.assign(tn.num_ports(), PortConfig{});
      dc.crc = config_.mode == DataMode::kVerified ? CrcMode::kCompute : CrcMode::kModel;
      dc.ack_coalesce_max = config_.ack_coalesce_max;
      const std::uint64_t seed =
          sim::stream_seed(sim_.seed() ^ config_.device_seed_salt, sim::fnv1a64("dev:" + name));
      nodes_.push_back(std::make_unique<HcaNode>(*this, n, tn.num_ports(), dc, seed));
    }
    nodes_.back()->comp_ = sim_.add_component(*nodes_.back(), name);
    sma::NodeParams np;
    np.node_guid = tn.guid;
    np.system_image_guid = tn.system_image_guid;
    np.description = tn.description;
    np.num_ports = static_cast<std::uint8_t>(tn.num_ports());
    np.device_id = static_cast<std::uint16_t>(tn.device_id);
    nodes_.back()->state_ = tn.is_switch() ? sma::make_switch(np) : sma::make_ca(np);
    if (!tn.is_switch()) {
      sma::NodeState& s = nodes_.back()->state_;
      for (int q = 1; q <= tn.num_ports(); ++q) {
        if (tn.ports[q].guid != 0) {
          s.ports[q].port_guid = tn.ports[q].guid;
          s.ports[q].guids[0] = tn.ports[q].guid;
        }
      }
    }
  }
  const link::PhyConfig phy{config_.link.ber, config_.link.fec, config_.link.fec_config};
  for (topo::LinkId l = 0; l < topo_.link_count(); ++l) {
    const topo::Link& tl = topo_.link(l);
    const topo::PortRef ends[2] = {tl.a, tl.b};
    for (int e = 0; e < 2; ++e) {
      const topo::PortRef self = ends[e], peer = ends[1 - e];
      PortEnd& pe = nodes_[self.node]->ports_[self.port];
      pe.connected = true;
      pe.up = true;
      pe.peer = nodes_[peer.node]->comp_;
      pe.peer_node = nodes_[peer.node].get();
      pe.peer_port = static_cast<std::uint8_t>(peer.port);
      pe.peer_is_switch = topo_.node(peer.node).is_switch();
      pe.link = l;
      pe.rate = rate_of(tl.props);
      pe.prop_ns = tl.propagation_ns();
      pe.clock.emplace(pe.rate);
      pe.phy.emplace(phy);
      pe.arb.emplace(arb_);
      // Trained (Init); without a subnet manager Active at once.
      sma::NodeState& ns = nodes_[self.node]->state_;
      sma::link_up(ns, static_cast<std::uint8_t>(self.port));
      if (!config_.sm_managed) ns.ports[self.port].state = sma::LinkState::kActive;
      link::SerialClock ck(pe.rate);
      pe.smp_serial_ns = ck.next_ns(pe.phy->line_bytes(kSmpWireBytes));
    }
  }
  for (auto& node : nodes_) {
    for (int p = 1; p <= node->num_ports(); ++p) {
      if (node->ports_[p].connected) node->init_credits(p, sim_.now());
    }
  }
}

Fabric::~Fabric() = default;

HcaNode& Fabric::hca(topo::NodeId n) {
  assert(!is_switch(n));
  return static_cast<HcaNode&>(*nodes_[n]);
}

SwitchNode& Fabric::switch_node(topo::NodeId n) {
  assert(is_switch(n));
  return static_cast<SwitchNode&>(*nodes_[n]);
}

std::uint16_t Fabric::lid(topo::NodeId n, int port) const {
  const sma::NodeState& s = nodes_[n]->state_;
  if (s.is_switch()) return s.ports[0].lid;
  return port >= 1 && port <= s.num_ports ? s.ports[port].lid : 0;
}

std::vector<topo::NodeId> Fabric::hcas() const {
  std::vector<topo::NodeId> out;
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    if (!topo_.node(n).is_switch()) out.push_back(n);
  }
  return out;
}

void Fabric::configure_min_hop() {
  struct Dest {
    topo::NodeId node;
    int port;  // 0 for a switch
    std::uint16_t lid;
  };
  std::vector<Dest> dests;
  std::uint16_t next = 1;
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    const topo::Node& tn = topo_.node(n);
    if (tn.is_switch()) {
      switch_node(n).set_lid(next);
      dests.push_back({n, 0, next++});
    } else {
      for (int p = 1; p <= tn.num_ports(); ++p) {
        hca(n).device().set_port_lid(static_cast<std::uint8_t>(p), next);
        hca(n).state_.ports[p].lid = next;
        dests.push_back({n, p, next++});
      }
    }
  }
  const std::size_t lft_size = next;
  std::vector<std::vector<std::uint8_t>> lfts(topo_.node_count());
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    if (topo_.node(n).is_switch()) lfts[n].assign(lft_size, kNoPort);
  }
  std::vector<int> dist(topo_.node_count());
  std::vector<std::uint8_t> candidates;
  std::deque<topo::NodeId> q;
  for (const Dest& d : dests) {
    std::fill(dist.begin(), dist.end(), -1);
    dist[d.node] = 0;
    q.assign(1, d.node);
    while (!q.empty()) {
      const topo::NodeId u = q.front();
      q.pop_front();
      const topo::Node& un = topo_.node(u);
      for (int p = 1; p <= un.num_ports(); ++p) {
        if (u == d.node && d.port != 0 && p != d.port) continue;  // only through its own port
        const auto peer = topo_.peer({u, p});
        if (!peer || !topo_.node(peer->node).is_switch() || dist[peer->node] >= 0) continue;
        dist[peer->node] = dist[u] + 1;
        q.push_back(peer->node);
      }
    }
    for (topo::NodeId s = 0; s < topo_.node_count(); ++s) {
      if (!topo_.node(s).is_switch() || dist[s] < 0) continue;
      if (s == d.node) {
        lfts[s][d.lid] = 0;
        continue;
      }
      // Equal-cost next hops are spread by destination LID, so the up-links of a fat tree
      // share the destinations (as OpenSM's min-hop balances them) instead of one carrying all.
      candidates.clear();
      for (int p = 1; p <= topo_.node(s).num_ports(); ++p) {
        const auto peer = topo_.peer({s, p});
        if (!peer || dist[peer->node] != dist[s] - 1) continue;
        if (peer->node == d.node && d.port != 0 && peer->port != d.port) continue;
        if (peer->node != d.node && !topo_.node(peer->node).is_switch()) continue;
        candidates.push_back(static_cast<std::uint8_t>(p));
      }
      if (!candidates.empty()) lfts[s][d.lid] = candidates[d.lid % candidates.size()];
    }
  }
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    if (topo_.node(n).is_switch()) switch_node(n).set_lft(std::move(lfts[n]));
  }
}

void Fabric::set_link_state(topo::LinkId l, bool up, TimeNs at_ns) {
  const topo::Link& tl = topo_.link(l);
  for (const topo::PortRef& e : {tl.a, tl.b}) {
    sim_.post_at(at_ns, nodes_[e.node]->comp_, kEvLinkState,
                 static_cast<std::uint64_t>(e.port) | static_cast<std::uint64_t>(up) << 8);
  }
}

bool Fabric::send_smp_from(topo::NodeId node, std::uint8_t port, std::span<const std::uint8_t> mad,
                           std::uint16_t dlid, std::uint16_t slid) {
  Node& n = *nodes_[node];
  if (port < 1 || port > n.num_ports() || !n.ports_[port].up || mad.size() < wire::kMadBytes) {
    return false;
  }
  const std::uint32_t pk = pool_.alloc();
  Packet& p = pool_[pk];
  p.bytes.assign(mad.begin(), mad.begin() + wire::kMadBytes);
  p.smp = true;
  p.directed = mad[1] == static_cast<std::uint8_t>(wire::MgmtClass::kSubnDirectedRoute);
  p.dlid = p.directed ? 0xFFFF : dlid;
  p.slid = slid != 0 ? slid : n.state_.ports[port].lid;
  p.sl = 15;
  p.vl = link::kVl15;
  p.wire_bytes = kSmpWireBytes;
  p.data = false;
  p.corrupt = false;
  p.payload_bytes = wire::kMadBytes;
  n.smp_transmit(port, pk, sim_.now());
  return true;
}

void Fabric::send_smp_local(topo::NodeId node, std::uint8_t port,
                            std::span<const std::uint8_t> mad) {
  const std::uint32_t pk = pool_.alloc();
  Packet& p = pool_[pk];
  p.bytes.assign(mad.begin(), mad.begin() + wire::kMadBytes);
  p.smp = true;
  p.directed = mad[1] == static_cast<std::uint8_t>(wire::MgmtClass::kSubnDirectedRoute);
  p.dlid = 0xFFFF;
  p.slid = nodes_[node]->state_.ports[port].lid;
  p.in_port = port;
  p.vl = link::kVl15;
  p.wire_bytes = kSmpWireBytes;
  sim_.post_at(sim_.now(), nodes_[node]->comp_, kEvSmpLocal, pk);
}

void Fabric::reset_management() {
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    Node& node = *nodes_[n];
    sma::NodeState& s = node.state_;
    std::vector<sma::PortCounters> counters;
    for (const sma::PortState& ps : s.ports) counters.push_back(ps.counters);
    const std::vector<std::uint64_t> port_guids = [&] {
      std::vector<std::uint64_t> g;
      for (const sma::PortState& ps : s.ports) g.push_back(ps.port_guid);
      return g;
    }();
    const topo::Node& tn = topo_.node(n);
    sma::NodeParams np;
    np.node_guid = tn.guid;
    np.system_image_guid = tn.system_image_guid;
    np.description = tn.description;
    np.num_ports = static_cast<std::uint8_t>(tn.num_ports());
    np.device_id = static_cast<std::uint16_t>(tn.device_id);
    s = tn.is_switch() ? sma::make_switch(np) : sma::make_ca(np);
    for (std::size_t p = 0; p < s.ports.size(); ++p) {
      s.ports[p].counters = counters[p];
      s.ports[p].port_guid = port_guids[p];
      if (!s.ports[p].guids.empty()) s.ports[p].guids[0] = port_guids[p];
    }
    for (int p = 1; p <= node.num_ports(); ++p) {
      if (!node.ports_[p].connected || !node.ports_[p].up) continue;
      sma::link_up(s, static_cast<std::uint8_t>(p));
      node.rebuild_arbiter(p);
      if (!config_.sm_managed) s.ports[p].state = sma::LinkState::kActive;
    }
    s.sw.port_state_change = false;
    if (!tn.is_switch()) {
      for (int p = 1; p <= node.num_ports(); ++p) {
        (void)hca(n).device().set_port_lid(static_cast<std::uint8_t>(p), 0);
      }
    }
  }
}

sim::ComponentId Fabric::adopt_component(std::unique_ptr<sim::Component> c,
                                         const std::string& name) {
  std::string unique = name;
  for (int i = 2; !adopted_names_.insert(unique).second; ++i) {
    unique = name + "#" + std::to_string(i);
  }
  const sim::ComponentId id = sim_.add_component(*c, unique);
  adopted_.push_back(std::move(c));
  return id;
}

std::size_t Fabric::memory_bytes() const {
  std::size_t b = sizeof(*this) + nodes_.capacity() * sizeof(nodes_[0]) + zeros_.capacity();
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    const Node& node = *nodes_[n];
    const sma::NodeState& s = node.state_;
    b += node.ports_.capacity() * sizeof(PortEnd) + s.lft.capacity() +
         s.mft.capacity() * sizeof(s.mft[0]) + s.description.capacity();
    for (const sma::PortState& p : s.ports) {
      b += sizeof(p) + p.pkeys.capacity() * 2 + p.sl2vl.capacity() * sma::kSlCount +
           p.guids.capacity() * 8;
    }
    b += topo_.node(n).is_switch() ? static_cast<const SwitchNode&>(node).memory_bytes()
                                   : static_cast<const HcaNode&>(node).memory_bytes();
  }
  b += pool_.memory_bytes();
  return b;
}

bool Fabric::send_smp(topo::NodeId hca_node, std::uint16_t dlid, std::uint32_t mad_bytes) {
  const std::vector<std::uint8_t> zeros(mad_bytes, 0);
  return send_mad(hca_node, dlid, zeros, /*smp=*/true);
}

bool Fabric::send_mad(topo::NodeId hca_node, std::uint16_t dlid, std::span<const std::uint8_t> mad,
                      bool smp) {
  HcaNode& h = hca(hca_node);
  if (!h.ports_[1].up) return false;
  h.send_mad(mad, dlid, 1, /*directed=*/false, /*vl15=*/smp);
  return true;
}

bool Fabric::set_port_faults(topo::NodeId n, int port, const PortFaults& faults) {
  if (n >= nodes_.size() || port < 1 || port > nodes_[n]->num_ports()) return false;
  PortEnd& pe = nodes_[n]->ports_[port];
  if (!pe.connected) return false;
  pe.faults = faults;
  // The port's PHY keeps its error counters (PMA SymbolErrorCounter, PortRcvErrors, which
  // Node::arrive adds to the PMA by difference): only its rate changes, also on a live link.
  const double ber = faults.ber >= 0.0 ? faults.ber : config_.link.ber;
  if (pe.phy)
    pe.phy->set_ber(ber);
  else
    pe.phy.emplace(link::PhyConfig{ber, config_.link.fec, config_.link.fec_config});
  return true;
}

void Fabric::adopt_lids() {
  for (topo::NodeId n = 0; n < topo_.node_count(); ++n) {
    Node& node = *nodes_[n];
    if (is_switch(n)) continue;  // Fabric::lid() reads switch LIDs from the node state
    for (int p = 1; p <= node.num_ports(); ++p) {
      (void)hca(n).device().set_port_lid(static_cast<std::uint8_t>(p), node.state_.ports[p].lid);
    }
  }
}

PortCounters Fabric::totals() const {
  PortCounters t;
  for (const auto& n : nodes_) {
    for (int p = 1; p <= n->num_ports(); ++p) {
      const PortCounters& c = n->port(p).counters;
      t.xmit_data += c.xmit_data;
      t.rcv_data += c.rcv_data;
      t.xmit_pkts += c.xmit_pkts;
      t.rcv_pkts += c.rcv_pkts;
      t.xmit_wait_ns += c.xmit_wait_ns;
      t.symbol_error_counter += c.symbol_error_counter;
      t.link_downed_counter += c.link_downed_counter;
      t.port_rcv_errors += c.port_rcv_errors;
      t.port_rcv_switch_relay_errors += c.port_rcv_switch_relay_errors;
      t.port_xmit_discards += c.port_xmit_discards;
      t.vl15_dropped += c.vl15_dropped;
      t.buffer_overflows += c.buffer_overflows;
      t.fec_corrected_blocks += c.fec_corrected_blocks;
      t.fec_uncorrectable += c.fec_uncorrectable;
      t.busy_ns += c.busy_ns;
      t.fault_dropped += c.fault_dropped;
      t.fault_duplicated += c.fault_duplicated;
      t.fault_delayed += c.fault_delayed;
      t.fault_reordered += c.fault_reordered;
    }
  }
  return t;
}

std::uint64_t Fabric::data_packets_delivered() const {
  std::uint64_t n = 0;
  for (topo::NodeId i = 0; i < topo_.node_count(); ++i) {
    if (!topo_.node(i).is_switch()) {
      n += static_cast<const HcaNode&>(*nodes_[i]).data_packets_delivered();
    }
  }
  return n;
}

}  // namespace weft::fabric
