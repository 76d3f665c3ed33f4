// emu/fabric/fabric.hpp — the emulated InfiniBand fabric in virtual time: switches, HCAs and the
// links between them, built from a weft::topo::Topology and run on the emu/sim Simulator.
//
// What it models (see emu/fabric/README.md for the numbers and what is left out):
//   links    rate = width x lane speed (src/link LinkRate), propagation from cable length,
//            serialization of the FEC codeword (SerialClock, no drift), per-VL credit flow control
//            (IBA 7.9: src/link CreditPort on each port end; FC packets travel behind the data on
//            the same wire, so they never overtake it). VL15 has no credits: it is dropped and
//            counted when the receiver's VL15 buffer is full. Bit errors and FEC (src/link
//            PhyChannel) at the receiving end; what FEC cannot repair fails the VCRC and is
//            dropped (SymbolErrorCounter, PortRcvErrors).
//   switches input-buffered: one FIFO per input port per VL (credits are per input buffer), so a
//            head packet waiting for a congested output blocks the packets behind it (head-of-line
//            blocking) and back-pressure spreads hop by hop. Each output port keeps, per output
//            VL, a FIFO of the input VLs whose head packet wants it: serving the front and
//            re-queuing that input's next head at the back is round robin over inputs. Weighted
//            VL arbitration per output (src/link VlArbiter), SL-to-VL mapping, linear forwarding
//            table, cut-through or store-and-forward latency, SMA at port 0 (DLID = own LID).
//   HCAs     a weft::Device driven sans-IO, behind a timing model: message-rate cap, PCIe
//            bandwidth and latency, per-packet NIC processing. QP0/QP1 packets go to the
//            management hook instead of the Device.
//
// Packets live in one PacketPool and move between nodes by index: a switch never copies bytes.
// Two data modes: kVerified materializes every packet (TxPacket::write_to), flips real bits and
// lets the Device check ICRC/VCRC; kTimingOnly carries headers only (payload bytes are not
// carried: the receiver's memory gets zeros), the Device runs with CrcMode::kModel and CRC
// failures are drawn by the PHY model.
//
// Thread-safety: none; the Simulator's thread owns the Fabric. Lifetime: the Fabric must outlive
// every run of its Simulator (its nodes are registered components).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <weft/device.hpp>
#include <weft/types.hpp>

#include "emu/fabric/fifo.hpp"
#include "emu/sim/simulator.hpp"
#include "emu/sma/node_state.hpp"
#include "emu/topo/topology.hpp"
#include "src/link/credit.hpp"
#include "src/link/link_rate.hpp"
#include "src/link/phy_channel.hpp"
#include "src/link/vl_arbiter.hpp"

namespace weft::sma {
struct TrapMad;
}

namespace weft::fabric {

enum class DataMode : std::uint8_t { kVerified, kTimingOnly };
enum class ForwardMode : std::uint8_t { kCutThrough, kStoreAndForward };

inline constexpr std::uint8_t kNoPort = 0xFF;
inline constexpr std::uint32_t kNoPacket = UINT32_MAX;
// An SMP on the wire: LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 + VCRC 2.
inline constexpr std::uint32_t kSmpWireBytes = 290;
// No packet is longer on the wire: a 4 KiB payload plus every header, ICRC and VCRC (< 128).
inline constexpr std::uint32_t kPacketWireBytesMax = 4096 + 128;

struct LinkModel {
  double ber = 0.0;  // per bit, each direction
  link::FecMode fec = link::FecMode::kOn;
  link::FecConfig fec_config{};  // 8 + 2
  // Receive buffer per VL at every port (IBA 7.9: advertised as credits). 64 KiB covers the
  // credit round trip of a 400 Gb/s link with a few hundred ns of switch latency.
  std::uint32_t data_vl_buffer_bytes = 64 * 1024;
  std::uint32_t vl15_buffer_bytes = 2 * 1024;  // a few SMPs
  // A link a PortInfo Set took down (PortState Down, PortPhysicalState Polling) trains again
  // after this (sm_managed management path; Disabled stays down).
  TimeNs retrain_ns = 50'000;
  // An FC packet goes back when this fraction of the buffer has been freed since the last one
  // (large = every packet); when the rest of the buffer could not hold the largest packet (a
  // divisor of 1), also whenever the buffer empties. 8 keeps credits flowing well ahead of a
  // 400 Gb/s sender and saves an event per packet per hop.
  std::uint32_t fc_batch_divisor = 8;
};

struct SwitchModel {
  ForwardMode forward = ForwardMode::kCutThrough;
  // Port to port: head of the packet in to head of the packet out (cut-through), or tail in to
  // head out (store-and-forward). NDR switches quote ~130-250 ns.
  TimeNs latency_ns = 150;
  TimeNs sma_mad_ns = 2000;  // the SMA answers one MAD per this (VL15 buffer held until then)
  // Management path: SMPs waiting for a node's SMA (switch or HCA) beyond this are dropped and
  // counted as vl15_dropped on their input port (VL15 has no flow control; the SM retries).
  std::uint32_t sma_queue_max = 64;
};

// Defaults of a current 400 Gb/s adapter (ConnectX-7 class): ~200 Mpps message rate, PCIe Gen5
// x16 (64 GB/s raw, ~56 GB/s after TLP overhead), ~400 ns host (DMA) latency, ~100 ns pipeline.
struct HcaModel {
  double message_rate_mpps_max = 200.0;
  std::uint64_t pcie_mbytes_per_s = 56000;
  TimeNs host_latency_ns = 400;  // one DMA read (transmit payload) or write (receive)
  TimeNs tx_proc_ns = 100;
  TimeNs rx_proc_ns = 100;
  std::uint32_t tx_pipeline_packets_max = 16;  // pulled from the Device, not yet on the wire
  TimeNs sma_mad_ns = 2000;  // the HCA's SMA answers one SMP per this (sm_managed SMP path)
};

struct FabricConfig {
  DataMode mode = DataMode::kVerified;
  LinkModel link{};
  SwitchModel sw{};
  HcaModel hca{};
  std::uint8_t data_vls = 1;           // operational data VLs 0..data_vls-1
  link::SlToVlTable sl2vl{};           // every port (one table until node state holds them)
  link::VlArbConfig vl_arb{};          // empty low table = equal weights over the data VLs
  std::uint32_t ack_coalesce_max = 4;  // Device config
  std::uint64_t device_seed_salt = 0;
  // Managed by a subnet manager (emu/sm FabricSm, sm::bring_up): links train to Init, nodes
  // have no LIDs and empty LFTs until the SM programs them, and the data path reads the LFT,
  // MFT, SL-to-VL, VL arbitration and port states from each node's sma::NodeState (a port that
  // is not Active forwards no data). SMPs take the management path (see Fabric::send_smp_from).
  // Unset: configure_min_hop() and the tables above, every linked port Active at once.
  bool sm_managed = false;
};

// PMA PortCounters / PortCountersExtended (IBA 16.1.3.5, 16.1.4.x), 64-bit here; the PMA codec
// saturates. Data counters are in 4-byte words as the IBA counts them.
struct PortCounters {
  std::uint64_t xmit_data = 0, rcv_data = 0;  // words
  std::uint64_t xmit_pkts = 0, rcv_pkts = 0;
  // PortXmitWait: ticks the port had data queued but sent nothing (no credit). The IBA leaves
  // the tick to the implementation; Weft's tick is one symbol time of the link.
  std::uint64_t xmit_wait = 0;
  std::uint64_t xmit_wait_ns = 0;
  std::uint64_t symbol_error_counter = 0;
  std::uint64_t link_error_recovery_counter = 0;
  std::uint64_t link_downed_counter = 0;
  std::uint64_t port_rcv_errors = 0;
  std::uint64_t port_rcv_switch_relay_errors = 0;
  std::uint64_t port_xmit_discards = 0;
  // Weft's own
  std::uint64_t vl15_dropped = 0;
  std::uint64_t buffer_overflows = 0;  // data VL without buffer: must stay 0 (credit rule)
  std::uint64_t fec_corrected_blocks = 0, fec_uncorrectable = 0;
  std::uint64_t busy_ns = 0;  // time the transmitter was serializing
  std::array<std::uint64_t, 16> xmit_bytes_vl{};
  // Injected faults (PortFaults, set by emu/faults) on packets this port received.
  std::uint64_t fault_dropped = 0, fault_duplicated = 0, fault_delayed = 0, fault_reordered = 0;
};

// Faults of one port's receive direction, drawn from the port's node RNG stream when a packet
// arrives (emu/faults sets them; see emu/faults/README.md). A dropped packet is discarded as a
// CRC failure (its credits return); a delayed or reordered one arrives later (credits stay
// consistent: the sender counted it, the receiver counts it on arrival); a duplicate is a copy
// with its own delay/reorder draw that enters the input buffer without a credit of its own (it
// returns none when drained).
struct PortFaults {
  double drop = 0.0;       // probability per packet
  double ber = -1.0;       // per bit on this port's receive side; < 0 = the link model's
  double duplicate = 0.0;  // probability per packet
  double reorder = 0.0;    // probability that a packet is held back by U(0, reorder_max_ns]
  TimeNs reorder_max_ns = 0;
  TimeNs delay_ns = 0;   // added to every packet
  TimeNs jitter_ns = 0;  // plus U[0, jitter_ns]
};

// One packet in flight. In kVerified mode `bytes` holds the wire image (LRH..VCRC); in
// kTimingOnly `headers` does and the payload is only a length.
struct Packet {
  std::vector<std::uint8_t> bytes;
  std::array<std::uint8_t, TxPacket::kHeaderBytesMax> headers{};
  std::uint16_t header_bytes = 0;
  std::uint32_t payload_bytes = 0;
  std::uint8_t pad_bytes = 0;
  std::uint32_t wire_bytes = 0;
  std::uint16_t dlid = 0;
  std::uint8_t sl = 0;
  std::uint8_t vl = 0;       // VL on the link it is on
  std::uint8_t in_port = 0;  // port it arrived on at the current node
  std::uint8_t in_vl = 0;
  std::uint8_t out_port = kNoPort;
  std::uint16_t link_gen = 0;  // generation of the link it was sent on
  std::uint16_t in_gen = 0;    // generation of the input port it sits in
  bool corrupt = false;        // kTimingOnly: a CRC failure drawn by the PHY
  bool data = false;           // counted as a data packet (carries payload)
  bool directed = false;       // leaves a switch by out_port, not by the LFT (DR SMP replies)
  bool fault_done = false;     // PortFaults already applied at this arrival (delayed re-arrival)
  bool fault_dup = false;      // a PortFaults duplicate: enters the buffer without a credit
  bool smp = false;            // management path: `bytes` is the 256-byte MAD, see send_smp_from
  std::uint16_t slid = 0;      // management path: the LRH SLID
  TimeNs tail_ns = 0;          // when its last byte reaches the current node
  TimeNs ready_ns = 0;         // an HCA's packet: not on the wire before (host/NIC timing model)
  bool rx_timed = false;       // to an HCA: arrives at its delivery time (Node::arrival_event_ns)
  std::uint32_t next_free = kNoPacket;
};

class PacketPool {
 public:
  std::uint32_t alloc();
  void free(std::uint32_t i);
  Packet& operator[](std::uint32_t i) { return *packets_[i]; }
  std::size_t live() const { return live_; }
  std::size_t memory_bytes() const;

 private:
  std::vector<std::unique_ptr<Packet>> packets_;
  std::uint32_t free_head_ = kNoPacket;
  std::size_t live_ = 0;
};

class Fabric;

// Event kinds (Simulator EventKind) of fabric nodes.
enum EventKindFabric : sim::EventKind {
  kEvArrive = 1,    // data = packet
  kEvTxDone,        // data = port << 32 | packet
  kEvFc,            // data = gen << 48 | port << 40 | FC fields
  kEvLinkState,     // data = up << 8 | port
  kEvHcaTxWake,     // data = port: the head packet of an idle HCA port is ready
  kEvHcaRxDeliver,  // data = packet
  kEvHcaDeadline,
  kEvHcaPull,
  kEvSmaDone,     // data = packet
  kEvSmp,         // management path: an SMP reaches the node, data = packet
  kEvSmpLocal,    // management path: an SMP from the node's own SM to its own SMA, data = packet
  kEvTrapRepeat,  // a switch's pending trap is due again (sma::repeat_trap), data = its TID
};

class Node;

// One external port of a node: both directions of its link end.
struct PortEnd {
  bool connected = false;
  bool up = false;
  sim::ComponentId peer = sim::kNoComponent;
  Node* peer_node = nullptr;
  std::uint8_t peer_port = 0;
  bool peer_is_switch = false;
  topo::LinkId link = topo::kNoLink;
  link::LinkRate rate{};
  TimeNs prop_ns = 0;
  std::uint16_t gen = 0;
  std::optional<link::CreditPort> credit;
  std::optional<link::SerialClock> clock;
  std::optional<link::PhyChannel> phy;  // receive direction
  std::optional<link::VlArbiter> arb;   // transmit direction
  bool busy = false;
  TimeNs last_delivery_ns = 0;                     // latest data arrival scheduled at the peer
  std::array<std::uint32_t, 16> fc_freed_bytes{};  // drained since the last FC packet, per VL
  bool waiting = false;
  TimeNs wait_start_ns = 0;
  PortCounters counters{};
  std::optional<PortFaults> faults;  // receive-side faults (Fabric::set_port_faults)
  // Management path (VL15 SMPs): the transmitter's own clock (VL15 goes first at the arbiter;
  // its bandwidth is not taken from the data VLs).
  TimeNs smp_tx_free_ns = 0;
  TimeNs smp_serial_ns = 0;
};

// Sees every packet a port receives, before faults and the PHY (emu/simrun writes --pcap
// captures through it). `p.bytes` holds the wire image in kVerified mode only.
class PacketTap {
 public:
  virtual ~PacketTap() = default;
  virtual void on_receive(topo::NodeId node, int port, const Packet& p, TimeNs now_ns) = 0;
};

// A local SM's receive hook: MADs for the SM of this node (responses, traps) arriving on `port`.
using LocalSmHook = std::function<void(std::uint8_t port, std::span<const std::uint8_t> mad)>;

// Common link-end behaviour of switches and HCAs.
class Node : public sim::Component {
 public:
  Node(Fabric& fabric, topo::NodeId id);
  void on_event(sim::Simulator& sim, const sim::Event& ev) override;
  topo::NodeId id() const { return id_; }
  sim::ComponentId component() const { return comp_; }
  PortEnd& port(int p) { return ports_[p]; }
  const PortEnd& port(int p) const { return ports_[p]; }
  int num_ports() const { return static_cast<int>(ports_.size()) - 1; }
  // Management packets (VL15, or QP0/QP1 at an HCA) handed to the SMA/PMA hook, and answered.
  std::uint64_t mads_received() const { return mads_received_; }
  // The last MAD this node received (verified mode), for tests and a local SM.
  const std::vector<std::uint8_t>& last_mad() const { return last_mad_; }
  // The management-visible state (IBA 14.2.5): LIDs, LFT, port states, PMA counters. The SMA
  // and PMA (emu/sma) answer MADs from it; the switch routes by its LFT.
  sma::NodeState& state() { return state_; }
  const sma::NodeState& state() const { return state_; }
  // The SM running on this node (an HCA): gets the MADs the SMA hands to the local SM. An empty
  // hook drops them (the default).
  void set_local_sm(LocalSmHook hook) { local_sm_ = std::move(hook); }
  // Management path counters: SMPs this node's SMA handled, relayed by LFT, dropped.
  std::uint64_t smps_handled() const { return smps_handled_; }

 protected:
  friend class Fabric;
  // The packet at the head of `vl` waiting for output `port`, or kNoPacket.
  virtual std::uint32_t head_packet(int port, std::uint8_t vl) = 0;
  virtual void take_head(int port, std::uint8_t vl) = 0;
  virtual void accept(int port, std::uint32_t pkt) = 0;
  // `info` is the kEvTxDone data: port, and the input port/VL/generation and size of the packet.
  virtual void on_tx_done(int port, std::uint64_t info) = 0;
  virtual void on_link_down(int port) = 0;
  virtual void on_node_event(const sim::Event& ev) = 0;
  virtual bool has_pending(int port) = 0;
  // try_send found nothing it could send on an idle port (no packet, no credit, or not ready).
  virtual void idle(int /*port*/) {}
  // When the kEvArrive of `p`, reaching `port` of this node at `arrival`, is posted for (called
  // by the sender, in arrival order per link). The default: at its arrival.
  virtual TimeNs arrival_event_ns(int /*port*/, Packet& /*p*/, TimeNs arrival) { return arrival; }

  void try_send(int port);
  void drain(int port, std::uint8_t vl, std::uint32_t wire_bytes, std::uint16_t gen);
  void flush_fc(int port);
  void init_credits(int port, TimeNs now);
  void set_link(int port, bool up);
  void arrive(std::uint32_t pkt);
  // Writes the VCRC of a wire image (LRH..VCRC) as its sending port would (see node.cpp).
  static void seal_vcrc(std::vector<std::uint8_t>& bytes);
  // PortFaults of `port` on a packet that just arrived (and its duplicate, if one is drawn);
  // true when it consumed the packet (dropped, or re-posted to arrive later).
  bool apply_faults(int port, std::uint32_t pkt);
  // A copy of `pkt` accepted on `port` without a credit of its own (PortFaults::duplicate).
  void accept_duplicate(int port, std::uint32_t pkt);
  void end_wait(int port, TimeNs t);
  TimeNs now() const { return sim_.now(); }
  sma::PortCounters& pma(int port) { return state_.ports[port].counters; }
  // A MAD that reached this node's SMA (QP0) or PMA (QP1) on `port`: answered from state_, the
  // reply sent as a VL15 (SMP) or data-VL (PMA) packet. Verified mode only (needs the bytes).
  void handle_mad(int port, const Packet& p, bool pma_class);
  // Queues a management reply of `mad` bytes to `dlid` (or out `out_port` when directed).
  virtual void send_mad(std::span<const std::uint8_t> mad, std::uint16_t dlid,
                        std::uint8_t out_port, bool directed, bool vl15) = 0;
  std::uint32_t build_mad_packet(std::span<const std::uint8_t> mad, std::uint16_t slid,
                                 std::uint16_t dlid, bool vl15);
  // Management path (node.cpp): one event per hop. smp_transmit puts SMP `pk` on `port` no
  // earlier than `ready` (VL15 serialization, propagation, the next switch's latency);
  // smp_arrive takes it at the next node (VL15 buffer, then the SMA, the local SM or the LFT).
  void smp_transmit(int port, std::uint32_t pk, TimeNs ready);
  void smp_arrive(std::uint32_t pk, bool local);
  void smp_route_lid(std::uint32_t pk, TimeNs ready);
  void smp_release_held(TimeNs t);
  // After a PortInfo Set (phys_before: the PhysState of the port it addressed, before it).
  void after_port_sets(std::span<const std::uint8_t> ports, sma::PhysState phys_before,
                       TimeNs answered);
  // PortFaults::drop and bit errors on an SMP that reached `port` (true: discarded).
  bool smp_lost_on_wire(int port, const Packet& p);
  void after_set(std::span<const std::uint8_t> mad);
  void send_trap_128();
  // Puts a trap on the management path and schedules its repeat (IBA 13.4.9).
  void send_trap(const sma::TrapMad& trap, std::uint64_t tid);
  // The data VL of `sl` leaving `out` having come in on `in` (sm_managed: the port's SL2VL).
  std::uint8_t data_vl(int out, int in, std::uint8_t sl) const;
  bool port_active(int port) const { return state_.ports[port].state == sma::LinkState::kActive; }
  void rebuild_arbiter(int port);

  Fabric& fabric_;
  sim::Simulator& sim_;  // fabric_.sim()
  topo::NodeId id_;
  sim::ComponentId comp_ = sim::kNoComponent;
  std::vector<PortEnd> ports_;  // index = port number; 0 unused for links
  std::vector<std::uint8_t> rx_scratch_;
  std::uint64_t mads_received_ = 0;
  std::vector<std::uint8_t> last_mad_;
  sma::NodeState state_;
  LocalSmHook local_sm_;
  TimeNs sma_free_ns_ = 0;  // management path: the SMA is busy until then
  Fifo<TimeNs> held_;       // management path: when each SMP queued at the SMA is done
  std::uint64_t smps_handled_ = 0;
  std::uint64_t trap_tid_ = 1;
  std::uint32_t fc_batch_bytes_ = 0;  // drained bytes per FC packet (LinkModel::fc_batch_divisor)
  bool fc_flush_when_empty_ = false;  // batch + largest packet > buffer: flush an emptied buffer
};

class SwitchNode final : public Node {
 public:
  SwitchNode(Fabric& fabric, topo::NodeId id, int num_ports);
  std::uint16_t lid() const { return state_.ports[0].lid; }
  void set_lid(std::uint16_t lid) { state_.ports[0].lid = lid; }
  // Linear forwarding table (IBA 14.2.5.10), kept in the node state: DLID -> output port.
  void set_lft(std::vector<std::uint8_t> lft);
  std::size_t queued_packets(int port, std::uint8_t vl) const { return in_[port][vl].fifo.size(); }
  std::size_t memory_bytes() const;

 protected:
  std::uint32_t head_packet(int port, std::uint8_t vl) override;
  void take_head(int port, std::uint8_t vl) override;
  void accept(int port, std::uint32_t pkt) override;
  void on_tx_done(int port, std::uint64_t info) override;
  void on_link_down(int port) override;
  void on_node_event(const sim::Event& ev) override;
  bool has_pending(int port) override;

 private:
  struct InVl {
    Fifo<std::uint32_t> fifo;
    bool in_service = false;  // the head is being read out to an output
  };
  struct Request {
    std::uint8_t in_port, in_vl;
  };
  void route_head(int in_port, std::uint8_t vl);
  void replicate_head(int in_port, std::uint8_t vl);
  void discard_head(int in_port, std::uint8_t vl);
  void send_mad(std::span<const std::uint8_t> mad, std::uint16_t dlid, std::uint8_t out_port,
                bool directed, bool vl15) override;

  std::vector<std::array<InVl, 16>> in_;
  std::vector<std::array<Fifo<Request>, 16>> requests_;  // per output, per output VL
  std::vector<std::uint32_t> pending_out_;               // requests per output
};

class HcaNode final : public Node {
 public:
  HcaNode(Fabric& fabric, topo::NodeId id, int num_ports, const DeviceConfig& dc,
          std::uint64_t rng_seed);
  Device& device() { return *device_; }
  // Replaces the Device (before traffic; the fabric daemon puts a relay there). The old one goes.
  void replace_device(std::unique_ptr<Device> d) { device_ = std::move(d); }
  // Call after posting work to the Device from outside the Simulator: pulls packets now.
  void kick();
  std::uint64_t data_packets_delivered() const { return data_delivered_; }
  // Called after the Device took a packet or a deadline (when new completions may be in its
  // CQs), so a driver can poll them at the exact virtual time. Empty = none.
  void set_completion_hook(std::function<void()> hook) { completion_hook_ = std::move(hook); }
  // kVerified only: for a packet its Device just returned from poll_transmit, `swap(bytes)` may
  // exchange `bytes` (the fabric packet's buffer) with a buffer already holding that packet's
  // whole wire image (what TxPacket::write_to would write) and return true; the copy is then
  // skipped. The fabric daemon's relay hands over the image it pulled from a process this way.
  using WireSwap = std::function<bool(std::vector<std::uint8_t>& bytes)>;
  void set_wire_swap(WireSwap swap) { wire_swap_ = std::move(swap); }
  // General services on QP1 (SA, CM; every class but PerfMgt, which the PMA answers): each MAD
  // that arrives goes to `hook` (port, LRH SLID, the 256 MAD bytes) instead of being dropped.
  using GsiHook = std::function<void(std::uint8_t, std::uint16_t, std::span<const std::uint8_t>)>;
  void set_gsi_agent(GsiHook hook) { gsi_agent_ = std::move(hook); }
  // Receive gate (the fabric daemon's relay, whose process may not read for a while): while
  // `gate()` says false, a packet due for delivery stays in the port's receive buffer, in
  // arrival order, and keeps its credits, so once that buffer is full the link partner (a switch
  // port) holds further packets for this HCA and back-pressure spreads hop by hop to the senders
  // (IBA 7.9: a receiver that cannot take a packet does not grant its credit). release_rx()
  // delivers the held packets while the gate is open again; discard_rx() drops them all (their
  // credits return; the daemon's hold lifetime). Empty (the default): every packet goes on.
  using RxGate = std::function<bool()>;
  void set_rx_gate(RxGate gate) { rx_gate_ = std::move(gate); }
  std::size_t release_rx();  // packets delivered
  std::size_t discard_rx();  // packets dropped
  std::size_t rx_held() const { return rx_held_.size(); }
  struct RxGateCounters {
    std::uint64_t holds = 0;         // times the gate closed on a packet (none was held before)
    std::uint64_t held_packets = 0;  // packets that waited at the gate
    std::uint64_t held_peak = 0;     // most packets waiting at once
    std::uint64_t discarded = 0;     // held packets dropped by discard_rx
  };
  const RxGateCounters& rx_gate_counters() const { return rx_gate_counters_; }
  std::size_t memory_bytes() const;

 protected:
  std::uint32_t head_packet(int port, std::uint8_t vl) override;
  void take_head(int port, std::uint8_t vl) override;
  void accept(int port, std::uint32_t pkt) override;
  void on_tx_done(int port, std::uint64_t info) override;
  void on_link_down(int port) override;
  void on_node_event(const sim::Event& ev) override;
  bool has_pending(int port) override;
  void idle(int port) override;
  TimeNs arrival_event_ns(int port, Packet& p, TimeNs arrival) override;

 private:
  friend class Fabric;
  // The receive timing model: when a packet arriving at `arrival` reaches the Device.
  TimeNs rx_delivery_ns(const Packet& p, TimeNs arrival);
  void pump();
  void arm_deadline();
  std::uint32_t materialize(const TxPacket& tx);
  void deliver(std::uint32_t pkt);
  void deliver_now(std::uint32_t pkt);
  void send_mad(std::span<const std::uint8_t> mad, std::uint16_t dlid, std::uint8_t out_port,
                bool directed, bool vl15) override;

  SeededRng rng_;
  std::unique_ptr<Device> device_;
  std::vector<std::array<Fifo<std::uint32_t>, 16>> out_;  // per port, per VL, in ready order
  std::vector<TimeNs> wake_ns_;  // per port: a kEvHcaTxWake posted for then, or kNoDeadline
  TimeNs rate_gap_ns_ = 0;       // HcaModel::message_rate_mpps_max as a gap per packet
  std::uint32_t inflight_ = 0;   // pulled, not yet on the wire
  TimeNs tx_rate_free_ns_ = 0, pcie_tx_free_ps_ = 0, last_ready_ns_ = 0;
  TimeNs rx_rate_free_ns_ = 0, pcie_rx_free_ps_ = 0, last_rx_ns_ = 0;
  sim::EventId deadline_{};
  TimeNs deadline_ns_ = kNoDeadline;
  bool pull_posted_ = false;
  std::uint64_t data_delivered_ = 0;
  std::function<void()> completion_hook_;
  WireSwap wire_swap_;
  GsiHook gsi_agent_;
  RxGate rx_gate_;
  Fifo<std::uint32_t> rx_held_;  // packets the gate holds, in arrival order
  RxGateCounters rx_gate_counters_;
  // pump()'s packet, reused: Device::poll_transmit sets what it sends in every call (callers
  // loop with one TxPacket), and a fresh one per pump() cost a ~150-byte zeroing (rep stos).
  TxPacket tx_;
};

class Fabric {
 public:
  Fabric(sim::Simulator& sim, const topo::Topology& topo, const FabricConfig& config = {});
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  ~Fabric();

  // Until the subnet manager exists: LIDs from 1 in node order (one per switch, one per HCA
  // port), LFTs by BFS min-hop (equal-cost next hops spread by DLID), every linked port Active.
  void configure_min_hop();

  sim::Simulator& sim() { return sim_; }
  const topo::Topology& topology() const { return topo_; }
  const FabricConfig& config() const { return config_; }
  PacketPool& pool() { return pool_; }

  bool is_switch(topo::NodeId n) const { return topo_.node(n).is_switch(); }
  HcaNode& hca(topo::NodeId n);
  SwitchNode& switch_node(topo::NodeId n);
  Node& node(topo::NodeId n) { return *nodes_[n]; }
  Device& device(topo::NodeId n) { return hca(n).device(); }
  std::uint16_t lid(topo::NodeId n, int port = 1) const;
  std::vector<topo::NodeId> hcas() const;
  const PortCounters& counters(topo::NodeId n, int port) const {
    return nodes_[n]->port(port).counters;
  }
  void kick(topo::NodeId hca_node) { hca(hca_node).kick(); }

  // Link `link` goes down (or up) at virtual time `at_ns`: both ends change state; a port going
  // down counts LinkDownedCounter and discards what is queued for it (PortXmitDiscards).
  void set_link_state(topo::LinkId link, bool up, TimeNs at_ns);

  // Sends a management packet (VL15, SL15, UD to QP0; `mad_bytes` of zeros as the MAD) from an
  // HCA port to `dlid` now. Returns false if the HCA port is down.
  bool send_smp(topo::NodeId hca_node, std::uint16_t dlid, std::uint32_t mad_bytes = 256);
  // Sends `mad` from an HCA's port 1 to `dlid`: an SMP on VL15 to QP0 (smp), else a GMP on a
  // data VL to QP1 (PMA). The answer comes back to the HCA's QP0/QP1 (counted in
  // mads_received; kept in last_mad for a test or the SM to read).
  bool send_mad(topo::NodeId hca_node, std::uint16_t dlid, std::span<const std::uint8_t> mad,
                bool smp);

  // Receive-side faults of one port (see PortFaults), before traffic or on a live link (a new
  // `ber` changes the rate of the port's PHY, whose counters go on). Returns false if the port
  // is not linked.
  bool set_port_faults(topo::NodeId n, int port, const PortFaults& faults);
  // Every received packet is shown to `tap` (nullptr = none). Not owned.
  void set_tap(PacketTap* tap) { tap_ = tap; }
  PacketTap* tap() const { return tap_; }
  // Takes LIDs from the nodes' management state (as an SM set them through the SMAs): switch
  // port 0, HCA ports (also given to their Devices). Replaces configure_min_hop's LIDs.
  void adopt_lids();
  // Management path (SMPs on VL15, one simulator event per hop; FabricSm uses it). Sends a
  // 256-byte SMP from HCA `node`'s port `port` now: a directed-route SMP already past
  // wire::dr_send leaves by `port`; a LID-routed one goes to `dlid` with LRH SLID `slid`
  // (0 = the port's LID). Returns false if the port is not physically up. Switches relay
  // directed-route SMPs through their SMA (SwitchModel::sma_mad_ns each), LID-routed ones by
  // LFT; VL15 has no credits: an SMP finding the receiver's VL15 buffer full is dropped
  // (vl15_dropped) and the SM retries. Answers reach the node's LocalSmHook.
  bool send_smp_from(topo::NodeId node, std::uint8_t port, std::span<const std::uint8_t> mad,
                     std::uint16_t dlid = 0xFFFF, std::uint16_t slid = 0);
  // An SMP from the SM to the SMA of its own node, as arrived on `port` (a DR SMP with HopCnt 0).
  void send_smp_local(topo::NodeId node, std::uint8_t port, std::span<const std::uint8_t> mad);
  // Forgets everything a subnet manager programmed: every node's LIDs, LFT, MFT, SL2VL, VLArb,
  // SM LID and port states go back to what a freshly trained fabric has (linked ports Init).
  // Counters and physical link state stay. For a second bring-up on the same fabric.
  void reset_management();
  // A component the Fabric keeps alive as long as itself (the Simulator has no removal): the
  // SM's timer target. Returns its id.
  sim::ComponentId adopt_component(std::unique_ptr<sim::Component> c, const std::string& name);
  // Bytes held by the emulated nodes (tables, queues, ports), packets and the Fabric itself.
  std::size_t memory_bytes() const;

  // Sum over every port of every node.
  PortCounters totals() const;
  std::uint64_t data_packets_delivered() const;
  // Packets HCA receive gates hold (HcaNode::set_rx_gate): live in the pool, yet not moving
  // until their gate opens.
  std::size_t rx_held_packets() const { return rx_held_packets_; }

  // Internal: per-packet data VL at the sender.
  std::uint8_t vl_of(std::uint8_t sl) const {
    return sl == 15 ? link::kVl15 : config_.sl2vl.map(sl);
  }
  const std::uint8_t* zero_payload() const { return zeros_.data(); }
  // The VL arbitration tables every output uses (equal weights over the data VLs if unset).
  const link::VlArbConfig& arb_config() const { return arb_; }

 private:
  sim::Simulator& sim_;
  topo::Topology topo_;
  FabricConfig config_;
  PacketPool pool_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::uint8_t> zeros_;
  link::VlArbConfig arb_;
  PacketTap* tap_ = nullptr;
  std::vector<std::unique_ptr<sim::Component>> adopted_;
  std::set<std::string> adopted_names_;
  friend class HcaNode;  // counts rx_held_packets_
  std::size_t rx_held_packets_ = 0;
};

}  // namespace weft::fabric
