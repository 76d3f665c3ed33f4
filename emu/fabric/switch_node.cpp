// emu/fabric/switch_node.cpp — an input-buffered InfiniBand switch: per-input per-VL FIFOs, a
// linear forwarding table, round robin over inputs at each output, weighted VL arbitration,
// SL-to-VL mapping, the SMA at port 0. Thread-safety: the Simulator's thread.
#include <algorithm>
#include <cassert>

#include "emu/fabric/fabric.hpp"

namespace weft::fabric {

SwitchNode::SwitchNode(Fabric& fabric, topo::NodeId id, int num_ports)
    : Node(fabric, id), in_(num_ports + 1), requests_(num_ports + 1), pending_out_(num_ports + 1) {
  ports_.resize(num_ports + 1);
}

std::uint32_t SwitchNode::head_packet(int port, std::uint8_t vl) {
  const auto& q = requests_[port][vl];
  if (q.empty()) return kNoPacket;
  return in_[q.front().in_port][q.front().in_vl].fifo.front();
}

void SwitchNode::take_head(int port, std::uint8_t vl) {
  requests_[port][vl].pop_front();  // the input stays in service until the tail has left
  pending_out_[port]--;
}

bool SwitchNode::has_pending(int port) {
  return pending_out_[port] > 0;
}

void SwitchNode::accept(int port, std::uint32_t pk) {
  const std::uint8_t vl = fabric_.pool()[pk].in_vl;
  InVl& iv = in_[port][vl];
  iv.fifo.push_back(pk);
  if (!iv.in_service) route_head(port, vl);
}

void SwitchNode::discard_head(int in_port, std::uint8_t vl) {
  InVl& iv = in_[in_port][vl];
  const std::uint32_t pk = iv.fifo.front();
  iv.fifo.pop_front();
  const Packet& p = fabric_.pool()[pk];
  drain(in_port, vl, p.wire_bytes, p.in_gen);
  fabric_.pool().free(pk);
}

// Looks the head packet of (in_port, vl) up and queues it at its output; packets that go
// nowhere are dropped and counted on the way.
void SwitchNode::route_head(int in_port, std::uint8_t vl) {
  InVl& iv = in_[in_port][vl];
  while (!iv.fifo.empty()) {
    const std::uint32_t pk = iv.fifo.front();
    Packet& p = fabric_.pool()[pk];
    const std::uint16_t own = lid();
    if (!p.directed && own != 0 && p.dlid == own) {  // to this switch: its SMA, port 0 (14.2.1)
      iv.fifo.pop_front();
      const TimeNs t = std::max(now(), sma_free_ns_) + fabric_.config().sw.sma_mad_ns;
      sma_free_ns_ = t;
      fabric_.sim().post_at(t, comp_, kEvSmaDone, pk);
      continue;
    }
    if (!p.directed && p.dlid >= sma::kMulticastLidBase && p.dlid != 0xFFFF) {
      replicate_head(in_port, vl);
      continue;
    }
    const std::uint8_t out = p.directed ? p.out_port : state_.route(p.dlid);
    if (out == kNoPort || out == 0 || out > num_ports() || !ports_[out].connected) {
      ports_[in_port].counters.port_rcv_switch_relay_errors++;  // IBA 16.1.3.5
      pma(in_port).count_switch_relay_error();
      discard_head(in_port, vl);
      continue;
    }
    const bool managed = fabric_.config().sm_managed;
    if (!ports_[out].up || (managed && p.vl != link::kVl15 && !port_active(out))) {
      ports_[out].counters.port_xmit_discards++;
      pma(out).count_xmit_discard();
      discard_head(in_port, vl);
      continue;
    }
    const std::uint8_t out_vl = data_vl(out, in_port, p.sl);
    p.out_port = out;
    p.vl = out_vl;  // until it leaves (then the VL of the link it is on)
    requests_[out][out_vl].push_back(Request{static_cast<std::uint8_t>(in_port), vl});
    pending_out_[out]++;
    iv.in_service = true;
    try_send(out);
    return;
  }
}

void SwitchNode::on_tx_done(int /*port*/, std::uint64_t info) {
  const int in_port = static_cast<int>((info >> 8) & 0xFF);
  const auto in_vl = static_cast<std::uint8_t>((info >> 16) & 0xFF);
  const auto in_gen = static_cast<std::uint16_t>((info >> 24) & 0xFFFF);
  const auto wire = static_cast<std::uint32_t>(info >> 40);
  InVl& iv = in_[in_port][in_vl];
  assert(iv.in_service && !iv.fifo.empty());
  iv.fifo.pop_front();
  iv.in_service = false;
  drain(in_port, in_vl, wire, in_gen);
  route_head(in_port, in_vl);
}

void SwitchNode::on_node_event(const sim::Event& ev) {
  if (ev.kind != kEvSmaDone) return;
  const auto pk = static_cast<std::uint32_t>(ev.data);
  const Packet& p = fabric_.pool()[pk];
  // The SMA has taken the MAD: its VL15 buffer space is free again.
  drain(p.in_port, p.in_vl, p.wire_bytes, p.in_gen);
  handle_mad(p.in_port, p, /*pma_class=*/p.in_vl != link::kVl15);
  fabric_.pool().free(pk);
}

void SwitchNode::on_link_down(int port) {
  PortEnd& pe = ports_[port];
  // As an output: every input head waiting for this port is discarded.
  std::vector<Request> released;
  for (auto& q : requests_[port]) {
    for (std::uint32_t k = 0; k < q.size(); ++k) {
      const Request r = q[k];
      pe.counters.port_xmit_discards++;
      pma(port).count_xmit_discard();
      InVl& iv = in_[r.in_port][r.in_vl];
      iv.in_service = false;
      discard_head(r.in_port, r.in_vl);
      released.push_back(r);
    }
    pending_out_[port] -= static_cast<std::uint32_t>(q.size());
    q.clear();
  }
  // As an input: what sits in its buffers goes with the link, except a head being transmitted
  // (its tail still leaves; the drain is refused by generation).
  for (std::uint8_t vl = 0; vl < 16; ++vl) {
    InVl& iv = in_[port][vl];
    if (iv.fifo.empty()) continue;
    std::size_t keep = 0;
    if (iv.in_service) {
      const Packet& head = fabric_.pool()[iv.fifo.front()];
      auto& q = requests_[head.out_port][head.vl];
      std::uint32_t it = 0;
      while (it < q.size() && !(q[it].in_port == port && q[it].in_vl == vl)) ++it;
      if (it < q.size()) {  // requested, not started: goes too
        q.erase_at(it);
        pending_out_[head.out_port]--;
        iv.in_service = false;
      } else {
        keep = 1;
      }
    }
    while (iv.fifo.size() > keep) {
      pe.counters.port_xmit_discards++;
      fabric_.pool().free(iv.fifo.back());
      iv.fifo.pop_back();
    }
  }
  for (const Request& r : released) {
    if (r.in_port != port) route_head(r.in_port, r.in_vl);
  }
}

// A multicast packet at the head of (in_port, vl): one copy per port of its MFT entry (not the
// port it came in on, only Active ports), each queued behind the management port's FIFO like a
// packet of this switch's own; the original leaves the input buffer at once.
void SwitchNode::replicate_head(int in_port, std::uint8_t vl) {
  InVl& iv = in_[in_port][vl];
  const std::uint32_t pk = iv.fifo.front();
  iv.fifo.pop_front();
  PacketPool& pool = fabric_.pool();
  const bool managed = fabric_.config().sm_managed;
  const std::uint16_t mlid = pool[pk].dlid;
  bool any = false;
  for (int q = 1; q <= num_ports(); ++q) {
    if (q == in_port || !state_.mcast_has_port(mlid, static_cast<std::uint8_t>(q))) continue;
    if (!ports_[q].connected || !ports_[q].up || (managed && !port_active(q))) {
      if (ports_[q].connected) ports_[q].counters.port_xmit_discards++;
      continue;
    }
    any = true;
    const std::uint32_t c = pool.alloc();
    Packet& cp = pool[c];
    const Packet& p = pool[pk];  // pool may have grown: re-read
    cp.bytes = p.bytes;
    cp.headers = p.headers;
    cp.header_bytes = p.header_bytes;
    cp.payload_bytes = p.payload_bytes;
    cp.pad_bytes = p.pad_bytes;
    cp.wire_bytes = p.wire_bytes;
    cp.dlid = p.dlid;
    cp.sl = p.sl;
    cp.corrupt = p.corrupt;
    cp.data = p.data;
    cp.smp = false;
    cp.slid = p.slid;
    cp.directed = true;
    cp.out_port = static_cast<std::uint8_t>(q);
    cp.tail_ns = p.tail_ns;
    cp.in_port = 0;
    cp.in_vl = vl;
    cp.vl = vl;
    cp.in_gen = ports_[0].gen;
    in_[0][vl].fifo.push_back(c);
  }
  if (!any) {
    ports_[in_port].counters.port_rcv_switch_relay_errors++;
    pma(in_port).count_switch_relay_error();
  }
  const Packet& p = pool[pk];
  drain(in_port, vl, p.wire_bytes, p.in_gen);
  pool.free(pk);
  if (in_port != 0 && !in_[0][vl].in_service) route_head(0, vl);
}

std::size_t SwitchNode::memory_bytes() const {
  std::size_t b = sizeof(*this) + in_.capacity() * sizeof(in_[0]) +
                  requests_.capacity() * sizeof(requests_[0]) +
                  pending_out_.capacity() * sizeof(std::uint32_t) + held_.memory_bytes();
  for (const auto& a : in_) {
    for (const InVl& v : a) b += v.fifo.memory_bytes();
  }
  for (const auto& a : requests_) {
    for (const auto& q : a) b += q.memory_bytes();
  }
  return b;
}

void SwitchNode::set_lft(std::vector<std::uint8_t> lft) {
  state_.lft = std::move(lft);
  state_.sw.linear_fdb_top =
      static_cast<std::uint16_t>(state_.lft.empty() ? 0 : state_.lft.size() - 1);
}

// Replies leave through the management port 0's own input FIFO, so they are routed and
// arbitrated like any packet (VL15 first at the output).
void SwitchNode::send_mad(std::span<const std::uint8_t> mad, std::uint16_t dlid,
                          std::uint8_t out_port, bool directed, bool vl15) {
  const std::uint32_t pk = build_mad_packet(mad, lid(), dlid, vl15);
  Packet& p = fabric_.pool()[pk];
  p.directed = directed;
  p.out_port = out_port;
  p.in_port = 0;
  p.in_vl = p.vl;
  p.in_gen = ports_[0].gen;
  InVl& iv = in_[0][p.vl];
  iv.fifo.push_back(pk);
  if (!iv.in_service) route_head(0, p.vl);
}

}  // namespace weft::fabric
