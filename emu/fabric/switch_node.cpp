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
    const std::uint8_t out = p.directed ? p.out_port : state_.route(p.dlid);
    if (out == kNoPort || out == 0 || out > num_ports() || !ports_[out].connected) {
      ports_[in_port].counters.port_rcv_switch_relay_errors++;  // IBA 16.1.3.5
      pma(in_port).count_switch_relay_error();
      discard_head(in_port, vl);
      continue;
    }
    if (!ports_[out].up) {
      ports_[out].counters.port_xmit_discards++;
      pma(out).count_xmit_discard();
      discard_head(in_port, vl);
      continue;
    }
    const std::uint8_t out_vl = fabric_.vl_of(p.sl);
    p.out_port = out;
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
    for (const Request& r : q) {
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
      auto& q = requests_[head.out_port][fabric_.vl_of(head.sl)];
      auto it = std::find_if(q.begin(), q.end(),
                             [&](const Request& r) { return r.in_port == port && r.in_vl == vl; });
      if (it != q.end()) {  // requested, not started: goes too
        q.erase(it);
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
