// emu/fabric/node.cpp — what every fabric node does at its link ends: transmit with VL
// arbitration under credits, receive through the PHY into per-VL buffers, return credits in FC
// packets behind the data, link down/up. Thread-safety: the Simulator's thread.
#include <algorithm>
#include <cassert>

#include "emu/fabric/fabric.hpp"
#include "emu/sma/pma.hpp"
#include "emu/sma/sma.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/mad_attrs.hpp"
#include "src/wire/packet.hpp"

namespace weft::fabric {

namespace {

// TxDone data: what the transmitting node needs after the packet itself may be gone.
constexpr std::uint64_t pack_tx(int port, const Packet& p) {
  return static_cast<std::uint64_t>(port) | static_cast<std::uint64_t>(p.in_port) << 8 |
         static_cast<std::uint64_t>(p.in_vl) << 16 | static_cast<std::uint64_t>(p.in_gen) << 24 |
         static_cast<std::uint64_t>(p.wire_bytes) << 40;
}

constexpr std::uint64_t pack_fc(int port, std::uint16_t gen, const link::FcPacket& fc) {
  return static_cast<std::uint64_t>(fc.fctbs) | static_cast<std::uint64_t>(fc.fccl) << 12 |
         static_cast<std::uint64_t>(fc.vl) << 24 | static_cast<std::uint64_t>(fc.op) << 28 |
         static_cast<std::uint64_t>(port) << 32 | static_cast<std::uint64_t>(gen) << 40;
}

}  // namespace

Node::Node(Fabric& fabric, topo::NodeId id) : fabric_(fabric), sim_(fabric.sim()), id_(id) {
  const LinkModel& lm = fabric.config().link;
  fc_batch_bytes_ = lm.data_vl_buffer_bytes / std::max<std::uint32_t>(1, lm.fc_batch_divisor);
  fc_flush_when_empty_ =
      static_cast<std::uint64_t>(fc_batch_bytes_) + kPacketWireBytesMax > lm.data_vl_buffer_bytes;
}

void Node::on_event(sim::Simulator& /*sim*/, const sim::Event& ev) {
  switch (ev.kind) {
    case kEvArrive:
      arrive(static_cast<std::uint32_t>(ev.data));
      return;
    case kEvTxDone: {
      const int port = static_cast<int>(ev.data & 0xFF);
      ports_[port].busy = false;
      on_tx_done(port, ev.data);  // releases the input buffer, pulls more
      try_send(port);
      return;
    }
    case kEvFc: {
      const int port = static_cast<int>((ev.data >> 32) & 0xFF);
      const auto gen = static_cast<std::uint16_t>(ev.data >> 40);
      PortEnd& pe = ports_[port];
      if (!pe.up || gen != pe.gen) return;
      link::FcPacket fc;
      fc.fctbs = static_cast<std::uint16_t>(ev.data & 0xFFF);
      fc.fccl = static_cast<std::uint16_t>((ev.data >> 12) & 0xFFF);
      fc.vl = static_cast<std::uint8_t>((ev.data >> 24) & 0xF);
      fc.op = static_cast<link::FcOp>((ev.data >> 28) & 0x1);
      pe.credit->on_fc_packet(fc);
      try_send(port);
      return;
    }
    case kEvLinkState:
      set_link(static_cast<int>(ev.data & 0xFF), (ev.data >> 8) != 0);
      return;
    case kEvSmp:
      smp_arrive(static_cast<std::uint32_t>(ev.data), /*local=*/false);
      return;
    case kEvSmpLocal:
      smp_arrive(static_cast<std::uint32_t>(ev.data), /*local=*/true);
      return;
    case kEvTrapRepeat:  // until the SM's TrapRepress clears it (or a newer trap replaces it)
      if (state_.trap.active && state_.trap.tid == ev.data) {
        if (auto trap = sma::repeat_trap(state_)) send_trap(*trap, ev.data);
      }
      return;
    default:
      on_node_event(ev);
  }
}

void Node::try_send(int port) {
  PortEnd& pe = ports_[port];
  if (pe.busy || !pe.up) return;
  const std::uint8_t data_vls = fabric_.config().data_vls;
  std::array<std::uint32_t, 16> head{};
  std::array<std::uint32_t, 16> heads;  // the head packet of each VL looked at
  bool any = false;
  auto look = [&](std::uint8_t vl) {
    const std::uint32_t pk = head_packet(port, vl);
    heads[vl] = pk;
    if (pk == kNoPacket) return;
    any = true;
    const std::uint32_t wire = fabric_.pool()[pk].wire_bytes;
    if (vl == link::kVl15 || pe.credit->sender().can_send(vl, wire)) head[vl] = wire;
  };
  for (std::uint8_t vl = 0; vl < data_vls; ++vl) look(vl);
  look(link::kVl15);
  const TimeNs t = now();
  const int vl = any ? pe.arb->next(std::span<const std::uint32_t, 16>(head)) : link::kNoVl;
  if (vl == link::kNoVl) {
    idle(port);
    if (any && !pe.waiting) {
      pe.waiting = true;
      pe.wait_start_ns = t;
    } else if (!any && pe.waiting) {
      pe.waiting = false;
      pe.counters.xmit_wait_ns += t - pe.wait_start_ns;
      end_wait(port, t);
    }
    return;
  }
  if (pe.waiting) {
    pe.waiting = false;
    pe.counters.xmit_wait_ns += t - pe.wait_start_ns;
    end_wait(port, t);
  }
  const auto v = static_cast<std::uint8_t>(vl);
  const std::uint32_t pk = heads[v];  // (the arbiter only picks a VL that was looked at)
  take_head(port, v);
  Packet& p = fabric_.pool()[pk];
  if (v != link::kVl15) pe.credit->sender().on_sent(v, p.wire_bytes);
  const std::uint64_t line = pe.phy->line_bytes(p.wire_bytes);
  const TimeNs end = std::max(t + pe.clock->next_ns(line), p.tail_ns);
  pe.busy = true;
  pe.counters.busy_ns += end - t;
  pe.counters.xmit_pkts++;
  pe.counters.xmit_data += p.wire_bytes / 4;
  pe.counters.xmit_bytes_vl[v] += p.wire_bytes;
  pma(port).count_xmit(p.wire_bytes);
  fabric_.sim().post_at(end, comp_, kEvTxDone, pack_tx(port, p));

  const SwitchModel& sw = fabric_.config().sw;
  TimeNs arrival = end + pe.prop_ns;
  if (pe.peer_is_switch) {
    arrival = (sw.forward == ForwardMode::kCutThrough ? t : end) + pe.prop_ns + sw.latency_ns;
  }
  p.vl = v;
  p.in_port = pe.peer_port;
  p.link_gen = pe.gen;
  p.tail_ns = end + pe.prop_ns;
  // An FC packet goes behind the data on this wire (flush_fc): behind the arrival event, which a
  // receiving HCA may post for its delivery time (HcaNode::arrival_event_ns) rather than at the
  // wire arrival. Otherwise the FC packet's FCTBS, taken as ABR (IBA 7.9.4.3), counts a packet
  // that is counted again when it arrives: an FCCL too high, and the buffer overflows once the
  // HCA holds packets (its receive gate).
  const TimeNs at = pe.peer_node->arrival_event_ns(pe.peer_port, p, arrival);
  pe.last_delivery_ns = std::max(pe.last_delivery_ns, at);
  fabric_.sim().post_at(at, pe.peer, kEvArrive, pk);
}

// IBA 7.8.2: the VCRC is the link's, not the packet's: the sending port computes it over LRH..ICRC
// as the packet leaves (a switch recomputes it on every hop; the ICRC is the end-to-end check)
// and the receiving port checks it. Only a port that can flip bits (bit errors) needs it, so it
// is written here, on arrival at such a port and before the bits are drawn, instead of on every
// transmit: no cost on links without errors. Packets from attached processes (emu/fabricd,
// CrcMode::kModel) carry none from their HCA, so without this every one of them failed the check
// of a port with bit errors; a Device with CrcMode::kCompute wrote the same value already.
void Node::seal_vcrc(std::vector<std::uint8_t>& b) {
  if (b.size() < wire::kVcrcBytes) return;
  const std::size_t at = b.size() - wire::kVcrcBytes;
  wire::put_vcrc(std::span<std::uint8_t, wire::kVcrcBytes>(b.data() + at, wire::kVcrcBytes),
                 wire::vcrc(std::span<const std::uint8_t>(b.data(), at)));
}

void Node::arrive(std::uint32_t pk) {
  Packet& p = fabric_.pool()[pk];
  const int port = p.in_port;
  PortEnd& pe = ports_[port];
  const bool refault = p.fault_done;  // a delayed packet arriving for the second time
  const bool late_dup = p.fault_dup;  // a duplicate made by PortFaults, arriving
  p.fault_done = false;
  p.fault_dup = false;
  if (!pe.up || p.link_gen != pe.gen) {  // lost with the link
    fabric_.pool().free(pk);
    return;
  }
  if (late_dup) {
    accept_duplicate(port, pk);
    return;
  }
  if (!refault) {
    if (PacketTap* tap = fabric_.tap()) tap->on_receive(id_, port, p, now());
    if (pe.faults && apply_faults(port, pk)) return;
  }
  const LinkModel& lm = fabric_.config().link;
  const double ber = pe.faults && pe.faults->ber >= 0.0 ? pe.faults->ber : lm.ber;
  bool bad = false;
  if (ber > 0.0) {
    Rng& rng = fabric_.sim().rng(comp_);
    link::PhyOutcome o;
    if (fabric_.config().mode == DataMode::kVerified) {
      seal_vcrc(p.bytes);
      o = pe.phy->carry(p.bytes, rng, rx_scratch_);
      p.bytes.swap(rx_scratch_);
    } else {
      o = pe.phy->carry_modelled(p.wire_bytes, rng);
    }
    bad = o.dropped;
    const link::PortErrorCounters& ec = pe.phy->counters();
    sma::PortCounters& pc = pma(port);
    sma::PortCounters::sat_add(pc.symbol_error_counter,
                               ec.symbol_error_counter - pe.counters.symbol_error_counter);
    sma::PortCounters::sat_add(pc.port_rcv_errors,
                               ec.port_rcv_errors - pe.counters.port_rcv_errors);
    pe.counters.symbol_error_counter = ec.symbol_error_counter;
    pe.counters.port_rcv_errors = ec.port_rcv_errors;
    pe.counters.fec_corrected_blocks = ec.fec_corrected_blocks;
    pe.counters.fec_uncorrectable = ec.fec_uncorrectable_codewords;
  }
  const std::uint8_t vl = p.vl;
  if (bad) {  // IBA 7.8.2: failed VCRC, discarded; its blocks still count in ABR
    if (vl != link::kVl15) {
      pe.credit->on_packet_discarded(vl, p.wire_bytes);
      flush_fc(port);
    }
    fabric_.pool().free(pk);
    return;
  }
  const link::Arrival a = pe.credit->receiver().on_packet_arrived(vl, p.wire_bytes);
  if (a != link::Arrival::kAccepted) {
    if (a == link::Arrival::kVl15Dropped) {
      pe.counters.vl15_dropped++;
      pma(port).count_vl15_dropped();
    } else {
      pe.counters.buffer_overflows++;
    }
    fabric_.pool().free(pk);
    return;
  }
  pe.counters.rcv_pkts++;
  pe.counters.rcv_data += p.wire_bytes / 4;
  pma(port).count_rcv(p.wire_bytes);
  p.in_gen = pe.gen;
  p.in_vl = vl;
  p.directed = false;  // out_port was the previous node's choice (MFT copies, DR replies)
  accept(port, pk);
}

bool Node::apply_faults(int port, std::uint32_t pk) {
  PortEnd& pe = ports_[port];
  const PortFaults& f = *pe.faults;
  Packet& p = fabric_.pool()[pk];
  Rng& rng = fabric_.sim().rng(comp_);
  if (rng.chance(f.drop)) {  // discarded like a CRC failure
    pe.counters.fault_dropped++;
    if (p.vl != link::kVl15) {
      pe.credit->on_packet_discarded(p.vl, p.wire_bytes);
      flush_fc(port);
    }
    fabric_.pool().free(pk);
    return true;
  }
  // Extra time on the wire: delay, jitter, and reordering (held back so later packets pass).
  auto hold_ns = [&](bool count) {
    TimeNs x = f.delay_ns;
    if (f.jitter_ns > 0) x += rng.below(f.jitter_ns + 1);
    if (f.reorder_max_ns > 0 && rng.chance(f.reorder)) {
      x += 1 + rng.below(f.reorder_max_ns);
      if (count) pe.counters.fault_reordered++;
    }
    return x;
  };
  const TimeNs extra = hold_ns(true);
  if (rng.chance(f.duplicate)) {
    // The copy travels on its own (its own delay and reordering, so it may come late) and
    // enters the buffer without a credit (accept_duplicate).
    const std::uint32_t c = fabric_.pool().alloc();
    Packet& d = fabric_.pool()[c];
    d = fabric_.pool()[pk];
    d.next_free = kNoPacket;
    d.fault_done = false;
    d.fault_dup = true;
    pe.counters.fault_duplicated++;
    fabric_.sim().post_at(now() + hold_ns(false), comp_, kEvArrive, c);
  }
  if (extra == 0) return false;
  if (f.delay_ns > 0 || f.jitter_ns > 0) pe.counters.fault_delayed++;
  p.fault_done = true;  // arrives again later, past the faults
  fabric_.sim().post_at(now() + extra, comp_, kEvArrive, pk);
  return true;
}

void Node::accept_duplicate(int port, std::uint32_t pk) {
  PortEnd& pe = ports_[port];
  Packet& p = fabric_.pool()[pk];
  p.in_gen = static_cast<std::uint16_t>(pe.gen - 1);  // drain() returns no credit for it
  p.in_vl = p.vl;
  accept(port, pk);
}

void Node::drain(int port, std::uint8_t vl, std::uint32_t wire_bytes, std::uint16_t gen) {
  PortEnd& pe = ports_[port];
  if (!pe.connected) return;            // port 0: the node's own management packets
  if (!pe.up || gen != pe.gen) return;  // the buffer went with the link
  pe.credit->on_packet_drained(vl, wire_bytes);
  if (vl == link::kVl15) return;
  // Credits go back in batches (LinkModel::fc_batch_divisor of the buffer). A sender is never
  // left waiting on a drained buffer: once the buffer and the wire are empty the sender counts
  // as used only what was freed and not yet advertised, less than a batch, so it still has
  // buffer - batch, room for the largest packet. Only when that room is smaller than a packet
  // (a batch close to the whole buffer) does an emptied buffer send its credits at once.
  pe.fc_freed_bytes[vl] += wire_bytes;
  if (pe.fc_freed_bytes[vl] >= fc_batch_bytes_ ||
      (fc_flush_when_empty_ && pe.credit->receiver().used_blocks(vl) == 0)) {
    pe.fc_freed_bytes[vl] = 0;
    flush_fc(port);
  }
}

void Node::flush_fc(int port) {
  PortEnd& pe = ports_[port];
  const TimeNs t = now();
  link::FcPacket fc;
  while (pe.credit->poll_fc_packet(t, fc)) {
    // Behind every data packet already sent on this wire (IBA: one wire, in order).
    const TimeNs at = std::max(t + pe.prop_ns, pe.last_delivery_ns);
    fabric_.sim().post_at(at, pe.peer, kEvFc, pack_fc(pe.peer_port, pe.gen, fc));
  }
}

void Node::init_credits(int port, TimeNs t) {
  PortEnd& pe = ports_[port];
  const FabricConfig& c = fabric_.config();
  link::CreditPortConfig cc;
  cc.rate = pe.rate;
  cc.data_vls = c.data_vls;
  for (std::uint8_t vl = 0; vl < c.data_vls; ++vl)
    cc.buffer_bytes[vl] = c.link.data_vl_buffer_bytes;
  cc.buffer_bytes[link::kVl15] = c.link.vl15_buffer_bytes;
  pe.credit.emplace(cc, t);
  // Flow-control initialization (IBA 7.9.4.1 Op = init): advertise every data VL's buffer.
  for (std::uint8_t vl = 0; vl < c.data_vls; ++vl) {
    link::FcPacket fc = pe.credit->receiver().make_fc_packet(vl, pe.credit->sender().fctbs(vl));
    fc.op = link::FcOp::kInit;
    fabric_.sim().post_at(t + pe.prop_ns, pe.peer, kEvFc, pack_fc(pe.peer_port, pe.gen, fc));
  }
}

void Node::set_link(int port, bool up) {
  PortEnd& pe = ports_[port];
  if (!pe.connected || pe.up == up) return;
  const TimeNs t = now();
  if (!up) {
    if (pe.waiting) {
      pe.waiting = false;
      pe.counters.xmit_wait_ns += t - pe.wait_start_ns;
    }
    pe.up = false;  // first, so nothing is routed to it while it is cleared
    on_link_down(port);
    pe.gen++;
    pe.counters.link_downed_counter++;
    // Counts LinkDownedCounter; a switch tells its SM (trap 128, once).
    if (sma::link_down(state_, static_cast<std::uint8_t>(port))) send_trap_128();
    return;
  }
  pe.up = true;
  pe.gen++;
  // Trains to Init (IBA 7.2); without a subnet manager the fabric takes it on to Active itself.
  const bool changed = sma::link_up(state_, static_cast<std::uint8_t>(port));
  if (!fabric_.config().sm_managed) state_.ports[port].state = sma::LinkState::kActive;
  pe.clock.emplace(pe.rate);
  rebuild_arbiter(port);
  if (changed) send_trap_128();
  pe.last_delivery_ns = t;
  pe.fc_freed_bytes = {};
  init_credits(port, t);
  try_send(port);
}

void Node::end_wait(int port, TimeNs t) {
  PortEnd& pe = ports_[port];
  // XmitWait ticks: symbol times of this link (the IBA leaves the tick to the implementation).
  const std::uint64_t ticks = (t - pe.wait_start_ns) * 1000 / pe.rate.symbol_time_ps();
  pe.counters.xmit_wait += ticks;
  pma(port).count_xmit_wait(ticks);
}

std::uint32_t Node::build_mad_packet(std::span<const std::uint8_t> mad, std::uint16_t slid,
                                     std::uint16_t dlid, bool vl15) {
  wire::Headers hd;
  hd.lrh.vl = vl15 ? link::kVl15 : 0;
  hd.lrh.dlid = dlid;
  hd.lrh.slid = slid;
  hd.bth.opcode = wire::Opcode::kUdSendOnly;
  hd.bth.dest_qp = vl15 ? 0 : 1;
  hd.deth.qkey = vl15 ? 0 : 0x80010000;  // IBA 10.2.4.3: QP1's well-known Q_Key
  hd.deth.src_qp = vl15 ? 0 : 1;
  const auto mad_bytes = static_cast<std::uint32_t>(mad.size());
  wire::fill_lengths(hd, mad_bytes);
  PacketPool& pool = fabric_.pool();
  const std::uint32_t pk = pool.alloc();
  Packet& p = pool[pk];
  p.header_bytes = static_cast<std::uint16_t>(wire::encode_headers(hd, p.headers));
  p.payload_bytes = mad_bytes;
  p.pad_bytes = hd.bth.pad_cnt;
  p.wire_bytes = p.header_bytes + mad_bytes + p.pad_bytes + 6;
  p.dlid = dlid;
  p.sl = vl15 ? 15 : 0;
  p.vl = vl15 ? link::kVl15 : fabric_.vl_of(0);
  p.smp = false;
  p.data = false;
  p.corrupt = false;
  p.directed = false;
  p.tail_ns = 0;
  p.bytes.assign(p.wire_bytes, 0);
  std::copy_n(p.headers.begin(), p.header_bytes, p.bytes.begin());
  std::copy(mad.begin(), mad.end(), p.bytes.begin() + p.header_bytes);
  const std::size_t body = p.header_bytes + mad_bytes + p.pad_bytes;
  const wire::PacketCrcs c = wire::packet_crcs(
      std::span<const std::uint8_t>(p.bytes.data(), p.header_bytes),
      std::span<const std::uint8_t>(p.bytes.data() + p.header_bytes, mad_bytes + p.pad_bytes), 0);
  wire::put_icrc(std::span<std::uint8_t, 4>(p.bytes.data() + body, 4), c.icrc);
  wire::put_vcrc(std::span<std::uint8_t, 2>(p.bytes.data() + body + 4, 2), c.vcrc);
  return pk;
}

void Node::handle_mad(int port, const Packet& p, bool pma_class) {
  mads_received_++;
  if (fabric_.config().mode != DataMode::kVerified || p.payload_bytes < wire::kMadBytes ||
      p.bytes.size() < p.header_bytes + wire::kMadBytes) {
    return;  // timing-only: the MAD's bytes were not carried
  }
  const std::span<const std::uint8_t> mad(p.bytes.data() + p.header_bytes, wire::kMadBytes);
  last_mad_.assign(mad.begin(), mad.end());
  sma::SmpContext ctx;
  ctx.lrh_slid = static_cast<std::uint16_t>(p.bytes[6] << 8 | p.bytes[7]);  // LRH SLID
  const auto in = static_cast<std::uint8_t>(port);
  const sma::MadReply r =
      pma_class ? sma::handle_pma(state_, in, mad, ctx) : sma::handle_smp(state_, in, mad, ctx);
  switch (r.action) {
    case sma::SmpAction::kSendOut:
      send_mad(r.mad, 0xFFFF, r.out_port, /*directed=*/true, !pma_class);
      break;
    case sma::SmpAction::kRouteByLid:
      send_mad(r.mad, r.dlid, r.out_port, /*directed=*/false, !pma_class);
      break;
    case sma::SmpAction::kToLocalSm:
      if (local_sm_) local_sm_(in, r.mad);
      break;
    default:
      break;  // absorbed or dropped (NodeState::stats counts it)
  }
}

// ---- management path --------------------------------------------------------------------

void Node::smp_transmit(int port, std::uint32_t pk, TimeNs ready) {
  PacketPool& pool = fabric_.pool();
  if (port < 1 || port > num_ports() || !ports_[port].connected || !ports_[port].up) {
    if (port >= 1 && port <= num_ports() && ports_[port].connected) {
      ports_[port].counters.port_xmit_discards++;
      pma(port).count_xmit_discard();
    }
    pool.free(pk);
    return;
  }
  PortEnd& pe = ports_[port];
  Packet& p = pool[pk];
  const TimeNs start = std::max(ready, pe.smp_tx_free_ns);
  const TimeNs end = start + pe.smp_serial_ns;
  pe.smp_tx_free_ns = end;
  pe.counters.xmit_pkts++;
  pe.counters.xmit_data += p.wire_bytes / 4;
  pe.counters.xmit_bytes_vl[link::kVl15] += p.wire_bytes;
  pma(port).count_xmit(p.wire_bytes);
  const SwitchModel& sw = fabric_.config().sw;
  TimeNs arrival = end + pe.prop_ns;
  if (pe.peer_is_switch) {
    arrival = (sw.forward == ForwardMode::kCutThrough ? start : end) + pe.prop_ns + sw.latency_ns;
  }
  p.vl = link::kVl15;
  p.in_port = pe.peer_port;
  p.link_gen = pe.gen;
  fabric_.sim().post_at(arrival, pe.peer, kEvSmp, pk);
}

// A LID-routed SMP leaves this switch by its LFT (0: for its own SMA).
void Node::smp_route_lid(std::uint32_t pk, TimeNs ready) {
  Packet& p = fabric_.pool()[pk];
  const std::uint8_t out = state_.route(p.dlid);
  if (out == 0) {
    p.in_port = 0;
    fabric_.sim().post_at(ready, comp_, kEvSmpLocal, pk);
    return;
  }
  if (out > num_ports() || !ports_[out].connected) {
    const int in = p.in_port;
    if (in >= 1 && in <= num_ports()) {
      ports_[in].counters.port_rcv_switch_relay_errors++;
      pma(in).count_switch_relay_error();
    }
    fabric_.pool().free(pk);
    return;
  }
  smp_transmit(out, pk, ready);
}

// VL15 crosses the same wire as the data VLs: PortFaults::drop and bit errors (after FEC)
// discard an SMP the way they discard a data packet (IBA 7.8.2: a failed VCRC is dropped); the SM
// retries, a trap is repeated. Delay, jitter, reordering and duplicates apply to data VLs only.
bool Node::smp_lost_on_wire(int port, const Packet& p) {
  PortEnd& pe = ports_[port];
  Rng& rng = fabric_.sim().rng(comp_);
  if (pe.faults && pe.faults->drop > 0.0 && rng.chance(pe.faults->drop)) {
    pe.counters.fault_dropped++;
    return true;
  }
  const double ber =
      pe.faults && pe.faults->ber >= 0.0 ? pe.faults->ber : fabric_.config().link.ber;
  if (ber <= 0.0 || !pe.phy) return false;
  const link::PhyOutcome o = pe.phy->carry_modelled(p.wire_bytes, rng);
  const link::PortErrorCounters& ec = pe.phy->counters();
  sma::PortCounters& pc = pma(port);
  sma::PortCounters::sat_add(pc.symbol_error_counter,
                             ec.symbol_error_counter - pe.counters.symbol_error_counter);
  sma::PortCounters::sat_add(pc.port_rcv_errors, ec.port_rcv_errors - pe.counters.port_rcv_errors);
  pe.counters.symbol_error_counter = ec.symbol_error_counter;
  pe.counters.port_rcv_errors = ec.port_rcv_errors;
  pe.counters.fec_corrected_blocks = ec.fec_corrected_blocks;
  pe.counters.fec_uncorrectable = ec.fec_uncorrectable_codewords;
  return o.dropped;
}

void Node::smp_release_held(TimeNs t) {
  while (!held_.empty() && held_.front() <= t) held_.pop_front();
}

void Node::smp_arrive(std::uint32_t pk, bool local) {
  PacketPool& pool = fabric_.pool();
  Packet& p = pool[pk];
  const int port = p.in_port;
  const TimeNs t = now();
  if (!local) {
    PortEnd& pe = ports_[port];
    if (!pe.up || p.link_gen != pe.gen) {  // lost with the link
      pool.free(pk);
      return;
    }
    if ((pe.faults || fabric_.config().link.ber > 0.0) && smp_lost_on_wire(port, p)) {
      pool.free(pk);
      return;
    }
    // VL15 has no credits (IBA 7.9.4): an SMP finding the SMA's queue full is dropped; the SM
    // retries. (SMPs passing through by LFT are forwarded at once and never wait here.)
    smp_release_held(t);
    const bool for_sma =
        p.directed || p.dlid == 0xFFFF || !state_.is_switch() || p.dlid == state_.ports[0].lid;
    if (for_sma && held_.size() >= fabric_.config().sw.sma_queue_max) {
      pe.counters.vl15_dropped++;
      pma(port).count_vl15_dropped();
      pool.free(pk);
      return;
    }
    pe.counters.rcv_pkts++;
    pe.counters.rcv_data += p.wire_bytes / 4;
    pma(port).count_rcv(p.wire_bytes);
    if (!p.directed && p.dlid != 0xFFFF) {
      if (state_.is_switch()) {
        if (p.dlid != state_.ports[0].lid) {  // passing through: by LFT, no SMA
          smp_route_lid(pk, t);
          return;
        }
      } else {
        const sma::PortState& ps = state_.ports[port];
        if (ps.lid == 0 || p.dlid < ps.lid || p.dlid >= ps.lid + (1u << ps.lmc)) {
          pool.free(pk);  // not for this port
          return;
        }
      }
    }
  }
  mads_received_++;
  sma::SmpContext ctx;
  ctx.lrh_slid = p.slid;
  const auto in = static_cast<std::uint8_t>(port);
  // A PortInfo Set may move a link (see after_port_sets): keep the port's physical state.
  const bool port_info_set =
      p.bytes.size() >= 24 && p.bytes[3] == static_cast<std::uint8_t>(wire::MadMethod::kSet) &&
      (p.bytes[16] << 8 | p.bytes[17]) == static_cast<int>(wire::SmpAttr::kPortInfo);
  sma::PhysState phys_before = sma::PhysState::kNoStateChange;
  if (port_info_set) {
    const std::uint32_t mod = static_cast<std::uint32_t>(p.bytes[20]) << 24 |
                              static_cast<std::uint32_t>(p.bytes[21]) << 16 |
                              static_cast<std::uint32_t>(p.bytes[22]) << 8 | p.bytes[23];
    const std::uint32_t target = state_.is_switch() || mod != 0 ? mod : in;
    if (target < state_.ports.size()) phys_before = state_.ports[target].phys_state;
  }
  const sma::MadReply r = sma::handle_smp(state_, in, p.bytes, ctx);
  if (r.is_response && r.status == 0 &&
      p.bytes[3] == static_cast<std::uint8_t>(wire::MadMethod::kSet)) {
    after_set(p.bytes);
  }
  switch (r.action) {
    case sma::SmpAction::kToLocalSm:
      if (local_sm_) local_sm_(in, r.mad);
      pool.free(pk);
      return;
    case sma::SmpAction::kAbsorbed:
    case sma::SmpAction::kDrop:
      pool.free(pk);
      return;
    default:
      break;
  }
  // The SMA takes one SMP per sma_mad_ns; it holds a queue slot until then.
  const TimeNs sma_ns =
      state_.is_switch() ? fabric_.config().sw.sma_mad_ns : fabric_.config().hca.sma_mad_ns;
  const TimeNs done = std::max(t, sma_free_ns_) + sma_ns;
  sma_free_ns_ = done;
  if (!local) held_.push_back(done);
  smps_handled_++;
  if (port_info_set && !r.state_changed_ports.empty())
    after_port_sets(r.state_changed_ports, phys_before, done);
  std::copy(r.mad.begin(), r.mad.end(), p.bytes.begin());
  if (r.action == sma::SmpAction::kSendOut) {
    p.directed = true;
    p.dlid = 0xFFFF;
    smp_transmit(r.out_port, pk, done);
    return;
  }
  // kRouteByLid: a LID-routed reply (or the LID-routed part of a DR SMP).
  p.directed = false;
  p.dlid = r.dlid;
  p.slid = state_.lid_port(in).lid;
  if (state_.is_switch()) {
    smp_route_lid(pk, done);
  } else {
    smp_transmit(r.out_port, pk, done);
  }
}

// A Set the SMA accepted: what the data path keeps outside the NodeState follows it.
void Node::after_set(std::span<const std::uint8_t> mad) {
  const auto attr = static_cast<std::uint16_t>(mad[16] << 8 | mad[17]);
  if (attr == static_cast<std::uint16_t>(wire::SmpAttr::kPortInfo) && !state_.is_switch()) {
    Device& dev = static_cast<HcaNode&>(*this).device();
    for (int q = 1; q <= num_ports(); ++q) {
      (void)dev.set_port_lid(static_cast<std::uint8_t>(q), state_.ports[q].lid);
    }
  } else if (attr == static_cast<std::uint16_t>(wire::SmpAttrExt::kVlArbitrationTable)) {
    for (int q = 1; q <= num_ports(); ++q) {
      if (ports_[q].connected) rebuild_arbiter(q);
    }
  }
}

// PortInfo Sets that moved a port's link (IBA 7.2, 14.2.5.6): PortState Down or
// PortPhysicalState Polling on a trained link takes it down at both ends once the SMA's answer
// is on its way (so the answer is not lost with the link), then it trains again to Init after
// LinkModel::retrain_ns; PortPhysicalState Disabled keeps it down until a Set of Polling; a
// Polling Set on a Disabled port trains it (unless the other end is Disabled too).
void Node::after_port_sets(std::span<const std::uint8_t> ports, sma::PhysState phys_before,
                           TimeNs answered) {
  const FabricConfig& c = fabric_.config();
  for (const std::uint8_t q : ports) {
    if (q == 0 || q > num_ports() || !ports_[q].connected) continue;
    const PortEnd& pe = ports_[q];
    const topo::PortRef me{id_, q};
    const topo::LinkId link = fabric_.topology().node(id_).ports[q].link;
    const auto peer = fabric_.topology().peer(me);
    const sma::PhysState now_phys = state_.ports[q].phys_state;
    // After the answer's serialization, wire and the next switch: it has left the port.
    const TimeNs down_at = answered + pe.smp_serial_ns + pe.prop_ns + c.sw.latency_ns + 1;
    bool train = false;
    if (pe.up && now_phys != sma::PhysState::kLinkUp) {
      fabric_.set_link_state(link, false, down_at);
      train = now_phys == sma::PhysState::kPolling;
    } else if (!pe.up && now_phys == sma::PhysState::kPolling &&
               phys_before == sma::PhysState::kDisabled) {
      train = true;
    }
    if (train && peer &&
        fabric_.node(peer->node).state().ports[peer->port].phys_state != sma::PhysState::kDisabled)
      fabric_.set_link_state(link, true, down_at + c.link.retrain_ns);
  }
}

void Node::send_trap_128() {
  if (!state_.is_switch()) return;
  const std::uint64_t tid = trap_tid_++;
  auto trap = sma::make_trap_128(state_, tid);
  if (!trap) return;  // no SM yet
  send_trap(*trap, tid);
}

void Node::send_trap(const sma::TrapMad& trap_mad, std::uint64_t tid) {
  const sma::TrapMad* trap = &trap_mad;
  fabric_.sim().post_at(now() + sma::trap_repeat_ns(state_), comp_, kEvTrapRepeat, tid);
  PacketPool& pool = fabric_.pool();
  const std::uint32_t pk = pool.alloc();
  Packet& p = pool[pk];
  p.bytes.assign(trap->mad.begin(), trap->mad.end());
  p.smp = true;
  p.directed = false;
  p.dlid = trap->dlid;
  p.slid = trap->slid;
  p.sl = 15;
  p.vl = link::kVl15;
  p.in_port = 0;
  p.wire_bytes = kSmpWireBytes;
  p.payload_bytes = wire::kMadBytes;
  p.data = false;
  p.corrupt = false;
  smp_route_lid(pk, now());
}

std::uint8_t Node::data_vl(int out, int in, std::uint8_t sl) const {
  if (sl == 15) return link::kVl15;
  if (!fabric_.config().sm_managed) return fabric_.vl_of(sl);
  const std::uint8_t vl =
      state_.ports[out].vl_for(static_cast<std::uint8_t>(state_.is_switch() ? in : 0), sl);
  // A VL the fabric does not run (FabricConfig::data_vls) falls back to VL0.
  return vl < fabric_.config().data_vls ? vl : 0;
}

void Node::rebuild_arbiter(int port) {
  PortEnd& pe = ports_[port];
  if (!fabric_.config().sm_managed) {
    pe.arb.emplace(fabric_.arb_config());
    return;
  }
  const sma::PortState& ps = state_.ports[port];
  const std::uint8_t data_vls = fabric_.config().data_vls;
  link::VlArbConfig c;
  for (std::size_t i = 0; i < ps.vl_arb_high_cap && i < sma::kVlArbEntriesMax; ++i) {
    const sma::VlArbEntry& e = ps.vl_arb_high[i];
    if (e.weight != 0 && e.vl < data_vls) c.high.push_back({e.vl, e.weight});
  }
  for (std::size_t i = 0; i < ps.vl_arb_low_cap && i < sma::kVlArbEntriesMax; ++i) {
    const sma::VlArbEntry& e = ps.vl_arb_low[i];
    if (e.weight != 0 && e.vl < data_vls) c.low.push_back({e.vl, e.weight});
  }
  c.limit_of_high_priority = ps.vl_high_limit;
  // Every data VL must be served by some entry, or its packets would wait for ever.
  bool covered = true;
  for (std::uint8_t vl = 0; vl < data_vls && covered; ++vl) {
    covered = std::any_of(c.high.begin(), c.high.end(), [&](auto& e) { return e.vl == vl; }) ||
              std::any_of(c.low.begin(), c.low.end(), [&](auto& e) { return e.vl == vl; });
  }
  if (covered) {
    pe.arb.emplace(c);
  } else {
    pe.arb.emplace(fabric_.arb_config());
  }
}

}  // namespace weft::fabric
