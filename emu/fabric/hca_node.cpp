// emu/fabric/hca_node.cpp — an HCA on the fabric: a weft::Device driven sans-IO from the
// Simulator behind a timing model (message-rate cap, PCIe bandwidth and latency, NIC pipeline).
//
// Transmit: packets are pulled from the Device (poll_transmit) while fewer than
// tx_pipeline_packets_max are between the Device and the wire; each waits for the rate cap, for
// its payload's DMA read over PCIe (bandwidth, then host latency) and the NIC pipeline, then
// queues on its VL. Receive: rate cap, NIC pipeline, the payload's DMA write over PCIe, host
// latency, then Device::on_packet; the port's receive buffer is freed then. Packets without
// payload (ACKs) skip PCIe. Ready and delivery times are kept monotonic, so nothing is reordered.
// Thread-safety: the Simulator's thread.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "emu/fabric/fabric.hpp"

namespace weft::fabric {

namespace {

TimeNs rate_gap_ns(double mpps) {
  return mpps <= 0 ? 0 : static_cast<TimeNs>(std::llround(1000.0 / mpps));
}

// PCIe time of `bytes` in picoseconds.
std::uint64_t pcie_ps(std::uint64_t bytes, std::uint64_t mbytes_per_s) {
  return (bytes * 1'000'000 + mbytes_per_s - 1) / mbytes_per_s;
}

TimeNs ps_to_ns_up(std::uint64_t ps) {
  return (ps + 999) / 1000;
}

// DestQP of a packet's BTH (IBA 9.2), from its headers.
std::uint32_t dest_qp(const std::uint8_t* h) {
  const std::size_t off = (h[1] & 0x3) == 3 ? 8 + 40 : 8;
  return static_cast<std::uint32_t>(h[off + 5]) << 16 |
         static_cast<std::uint32_t>(h[off + 6]) << 8 | h[off + 7];
}

}  // namespace

HcaNode::HcaNode(Fabric& fabric, topo::NodeId id, int num_ports, const DeviceConfig& dc,
                 std::uint64_t rng_seed)
    : Node(fabric, id),
      rng_(rng_seed),
      device_(Device::create(dc, rng_)),
      out_(num_ports + 1),
      wake_ns_(num_ports + 1, kNoDeadline),
      rate_gap_ns_(rate_gap_ns(fabric.config().hca.message_rate_mpps_max)) {
  ports_.resize(num_ports + 1);
}

void HcaNode::kick() {
  if (pull_posted_) return;
  pull_posted_ = true;
  fabric_.sim().post_at(now(), comp_, kEvHcaPull);
}

std::uint32_t HcaNode::materialize(const TxPacket& tx) {
  PacketPool& pool = fabric_.pool();
  const std::uint32_t pk = pool.alloc();
  Packet& p = pool[pk];
  p.header_bytes = tx.header_bytes;
  p.payload_bytes = tx.payload_bytes;
  p.pad_bytes = tx.pad_bytes;
  p.wire_bytes = static_cast<std::uint32_t>(tx.wire_bytes());
  p.dlid = tx.dlid;
  p.sl = tx.sl;
  p.out_port = tx.port_num;
  p.corrupt = false;
  p.data = tx.payload_bytes > 0;
  p.tail_ns = 0;
  p.ready_ns = 0;
  if (fabric_.config().mode == DataMode::kVerified) {
    if (!wire_swap_ || !wire_swap_(p.bytes)) {
      p.bytes.resize(p.wire_bytes);
      tx.write_to(p.bytes);
    }
  } else {
    std::copy_n(tx.headers.begin(), tx.header_bytes, p.headers.begin());
  }
  return pk;
}

void HcaNode::pump() {
  const TimeNs t = now();
  const HcaModel& m = fabric_.config().hca;
  const TimeNs gap = rate_gap_ns_;
  TxPacket& tx = tx_;
  while (inflight_ < m.tx_pipeline_packets_max && device_->poll_transmit(t, tx)) {
    const std::uint32_t pk = materialize(tx);
    const TimeNs t0 = std::max(t, tx_rate_free_ns_);
    tx_rate_free_ns_ = t0 + gap;
    TimeNs ready = t0 + m.tx_proc_ns;
    if (tx.payload_bytes > 0) {
      const std::uint64_t start_ps = std::max(t0 * 1000, pcie_tx_free_ps_);
      pcie_tx_free_ps_ = start_ps + pcie_ps(tx.payload_bytes, m.pcie_mbytes_per_s);
      ready = ps_to_ns_up(pcie_tx_free_ps_) + m.host_latency_ns + m.tx_proc_ns;
    }
    ready = std::max(ready, last_ready_ns_);
    last_ready_ns_ = ready;
    // Queued at once, stamped with its ready time: the port takes it when it is free and the
    // packet is ready (HcaNode::idle wakes an idle port then), so no event per packet.
    Packet& p = fabric_.pool()[pk];
    p.ready_ns = ready;
    const int port = p.out_port;
    if (port < 1 || port > num_ports() || !ports_[port].up ||
        (fabric_.config().sm_managed && !port_active(port))) {
      if (port >= 1 && port <= num_ports()) ports_[port].counters.port_xmit_discards++;
      fabric_.pool().free(pk);
      continue;
    }
    inflight_++;
    out_[port][data_vl(port, 0, p.sl)].push_back(pk);
    try_send(port);
  }
  arm_deadline();
}

void HcaNode::idle(int port) {
  const TimeNs t = now();
  TimeNs first = kNoDeadline;
  for (const auto& q : out_[port]) {
    if (q.empty()) continue;
    const TimeNs r = fabric_.pool()[q.front()].ready_ns;
    if (r > t) first = std::min(first, r);  // (a ready head waits for credits: an FC wakes it)
  }
  if (first >= wake_ns_[port]) return;  // nothing to wait for, or already woken in time
  wake_ns_[port] = first;
  fabric_.sim().post_at(first, comp_, kEvHcaTxWake, static_cast<std::uint64_t>(port));
}

void HcaNode::arm_deadline() {
  const TimeNs nd = device_->next_deadline();
  if (nd == deadline_ns_ && (nd == kNoDeadline || fabric_.sim().pending(deadline_))) return;
  deadline_ns_ = nd;
  if (nd == kNoDeadline) {
    fabric_.sim().cancel(deadline_);
    return;
  }
  const TimeNs at = std::max(nd, now());
  if (!fabric_.sim().reschedule(deadline_, at)) {
    deadline_ = fabric_.sim().schedule_at(at, comp_, kEvHcaDeadline);
  }
}

std::uint32_t HcaNode::head_packet(int port, std::uint8_t vl) {
  const auto& q = out_[port][vl];
  if (q.empty()) return kNoPacket;
  const std::uint32_t pk = q.front();
  return fabric_.pool()[pk].ready_ns <= now() ? pk : kNoPacket;
}

void HcaNode::take_head(int port, std::uint8_t vl) {
  out_[port][vl].pop_front();
  if (vl != link::kVl15) inflight_--;  // VL15 packets come from send_smp, not the Device
}

bool HcaNode::has_pending(int port) {
  for (const auto& q : out_[port]) {
    if (!q.empty()) return true;
  }
  return false;
}

void HcaNode::on_tx_done(int /*port*/, std::uint64_t /*info*/) {
  pump();
}

TimeNs HcaNode::rx_delivery_ns(const Packet& p, TimeNs arrival) {
  const HcaModel& m = fabric_.config().hca;
  const TimeNs t0 = std::max(arrival, rx_rate_free_ns_);
  rx_rate_free_ns_ = t0 + rate_gap_ns_;
  TimeNs at = t0 + m.rx_proc_ns;
  if (p.payload_bytes > 0) {
    const std::uint64_t start_ps = std::max(at * 1000, pcie_rx_free_ps_);
    pcie_rx_free_ps_ = start_ps + pcie_ps(p.payload_bytes, m.pcie_mbytes_per_s);
    at = ps_to_ns_up(pcie_rx_free_ps_) + m.host_latency_ns;
  }
  // In arrival order, as on transmit: a packet without payload (an ACK, a zero-length SEND)
  // skips PCIe but not the packets before it (PCIe keeps posted writes in order). Without this a
  // zero-length SEND overtook the WRITE ahead of it on its QP by the DMA write and host latency,
  // and the responder saw a PSN gap with nothing lost (IBA 9.7.5.1.2: NAK, drop, resend).
  at = std::max(at, last_rx_ns_);
  last_rx_ns_ = at;
  return at;
}

// One event per received packet instead of two (arrival, then delivery): when nothing can
// happen to the packet between its arrival and its delivery but the arrival bookkeeping (no
// PortFaults, no bit errors, no tap) and the receive timing sees the arrivals in order (one
// port: its link delivers in order), the sender posts the arrival for the delivery time, with
// the timing model run for the arrival time now. The buffer, the counters and the Device see
// the packet then; the credits the sender is owed do not change (FCCL = ABR + free space).
TimeNs HcaNode::arrival_event_ns(int port, Packet& p, TimeNs arrival) {
  const PortEnd& pe = ports_[port];
  const LinkModel& lm = fabric_.config().link;
  if (num_ports() != 1 || pe.faults || lm.ber > 0.0 || fabric_.tap() != nullptr) {
    p.rx_timed = false;
    return arrival;
  }
  p.rx_timed = true;
  return rx_delivery_ns(p, arrival);
}

void HcaNode::accept(int /*port*/, std::uint32_t pk) {
  Packet& p = fabric_.pool()[pk];
  if (p.rx_timed) {
    p.rx_timed = false;
    deliver(pk);
    return;
  }
  fabric_.sim().post_at(rx_delivery_ns(p, now()), comp_, kEvHcaRxDeliver, pk);
}

void HcaNode::deliver(std::uint32_t pk) {
  if (rx_gate_ && (!rx_held_.empty() || !rx_gate_())) {
    // Held behind the closed gate (or behind packets it holds): the buffer stays taken.
    if (rx_held_.empty()) rx_gate_counters_.holds++;
    rx_held_.push_back(pk);
    ++fabric_.rx_held_packets_;
    rx_gate_counters_.held_packets++;
    rx_gate_counters_.held_peak =
        std::max<std::uint64_t>(rx_gate_counters_.held_peak, rx_held_.size());
    return;
  }
  deliver_now(pk);
}

std::size_t HcaNode::release_rx() {
  std::size_t n = 0;
  while (!rx_held_.empty() && (!rx_gate_ || rx_gate_())) {
    const std::uint32_t pk = rx_held_.front();
    rx_held_.pop_front();
    --fabric_.rx_held_packets_;
    deliver_now(pk);
    ++n;
  }
  return n;
}

std::size_t HcaNode::discard_rx() {
  const std::size_t n = rx_held_.size();
  while (!rx_held_.empty()) {
    const std::uint32_t pk = rx_held_.front();
    rx_held_.pop_front();
    --fabric_.rx_held_packets_;
    const Packet& p = fabric_.pool()[pk];
    drain(p.in_port, p.in_vl, p.wire_bytes, p.in_gen);
    fabric_.pool().free(pk);
  }
  rx_gate_counters_.discarded += n;
  return n;
}

void HcaNode::deliver_now(std::uint32_t pk) {
  Packet& p = fabric_.pool()[pk];
  drain(p.in_port, p.in_vl, p.wire_bytes, p.in_gen);
  const bool verified = fabric_.config().mode == DataMode::kVerified;
  const std::uint8_t* h = verified ? p.bytes.data() : p.headers.data();
  const std::uint32_t qp = dest_qp(h);
  if (gsi_agent_ && p.in_vl != link::kVl15 && qp == 1 &&
      p.bytes.size() >= p.header_bytes + wire::kMadBytes &&
      p.bytes[p.header_bytes + 1] != static_cast<std::uint8_t>(wire::MgmtClass::kPerfMgt)) {
    mads_received_++;  // a GSI MAD (SA, CM): to the agent (MAD packets always carry bytes)
    const auto slid = static_cast<std::uint16_t>(p.bytes[6] << 8 | p.bytes[7]);
    gsi_agent_(p.in_port, slid,
               std::span<const std::uint8_t>(p.bytes).subspan(p.header_bytes, wire::kMadBytes));
    fabric_.pool().free(pk);
    return;
  }
  if (p.in_vl == link::kVl15 || qp <= 1) {  // QP0 / QP1: the SMA / PMA, not the Device
    handle_mad(p.in_port, p, /*pma_class=*/p.in_vl != link::kVl15 && qp == 1);
    fabric_.pool().free(pk);
    return;
  }
  if (p.data) data_delivered_++;
  const TimeNs t = now();
  if (verified) {
    device_->on_packet(std::span<const std::uint8_t>(p.bytes), t);
  } else {
    TxPacket rx;
    std::copy_n(p.headers.begin(), p.header_bytes, rx.headers.begin());
    rx.header_bytes = p.header_bytes;
    rx.payload = fabric_.zero_payload();
    rx.payload_bytes = p.payload_bytes;
    rx.pad_bytes = p.pad_bytes;
    rx.crcs_valid = false;
    rx.corrupt = p.corrupt;
    rx.port_num = p.in_port;
    rx.dlid = p.dlid;
    rx.sl = p.sl;
    device_->on_packet(rx, t);
  }
  fabric_.pool().free(pk);
  if (completion_hook_) completion_hook_();
  pump();
}

void HcaNode::on_node_event(const sim::Event& ev) {
  switch (ev.kind) {
    case kEvHcaTxWake: {
      const auto port = static_cast<int>(ev.data);
      if (wake_ns_[port] == ev.time_ns) wake_ns_[port] = kNoDeadline;
      try_send(port);
      return;
    }
    case kEvHcaRxDeliver:
      deliver(static_cast<std::uint32_t>(ev.data));
      return;
    case kEvHcaDeadline:
      deadline_ns_ = kNoDeadline;
      device_->on_deadline(now());
      if (completion_hook_) completion_hook_();
      pump();
      return;
    case kEvHcaPull:
      pull_posted_ = false;
      pump();
      return;
    default:
      return;
  }
}

void HcaNode::on_link_down(int port) {
  for (std::uint8_t vl = 0; vl < 16; ++vl) {
    auto& q = out_[port][vl];
    for (std::uint32_t k = 0; k < q.size(); ++k) {
      const std::uint32_t pk = q[k];
      ports_[port].counters.port_xmit_discards++;
      fabric_.pool().free(pk);
      if (vl != link::kVl15) inflight_--;
    }
    q.clear();
  }
}

std::size_t HcaNode::memory_bytes() const {
  std::size_t b = sizeof(*this) + out_.capacity() * sizeof(out_[0]) + held_.memory_bytes() +
                  rx_held_.memory_bytes();
  for (const auto& a : out_) {
    for (const auto& q : a) b += q.memory_bytes();
  }
  return b;
}

void HcaNode::send_mad(std::span<const std::uint8_t> mad, std::uint16_t dlid, std::uint8_t out_port,
                       bool /*directed*/, bool vl15) {
  const int port = out_port >= 1 && out_port <= num_ports() ? out_port : 1;
  if (!ports_[port].up) return;
  const std::uint32_t pk = build_mad_packet(mad, state_.ports[port].lid, dlid, vl15);
  Packet& p = fabric_.pool()[pk];
  p.out_port = static_cast<std::uint8_t>(port);
  p.ready_ns = 0;
  if (!vl15) inflight_++;  // take_head counts data-VL packets out of the pipeline
  out_[port][p.vl].push_back(pk);
  try_send(port);
}

}  // namespace weft::fabric
