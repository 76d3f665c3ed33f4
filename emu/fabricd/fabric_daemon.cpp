// emu/fabricd/fabric_daemon.cpp — the fabric daemon (see fabric_daemon.hpp).
#include "emu/fabricd/fabric_daemon.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <mutex>
#include <span>
#include <sstream>
#include <utility>
#include <vector>

#include "emu/fabricd/gsi_relay.hpp"
#include "emu/fabricd/stub_device.hpp"
#include "emu/faults/injector.hpp"
#include "src/base/log.hpp"
#include "src/cm/gsi_device.hpp"
#include "src/io/clock.hpp"
#include "src/io/driver.hpp"
#include "src/io/fabric_attach.hpp"
#include "src/io/shm/shm_medium.hpp"
#include "src/wire/packet.hpp"

namespace weft::fabricd {
namespace {

namespace proto = io::fabric_proto;

std::shared_ptr<spdlog::logger> log() {
  return base::get_logger("weft.fabricd");
}

struct ForwardRef {
  std::uint64_t key;  // LidTable::forward_key
  std::uint64_t src;  // the payload's address in the sender
  std::uint32_t pid;  // the sender
  std::uint32_t payload_bytes;
};
static_assert(sizeof(ForwardRef) <= io::shm::kZeroCopyBytesMin);

// A packet kept as its wire image, re-presented as a TxPacket (headers + payload reference).
// Every packet passes here once or twice, so instead of a full parse it reads what it needs:
// LNH (GRH or not), the opcode's extension bytes (IBA 9.2, the wire opcode table), PadCnt and
// LRH PktLen, which must agree with the image's length (IBA 7.7.8: LRH..ICRC in words), or, for
// a forwarded packet's image (`forward_key` set), be the length it stands for: headers, the
// ForwardRef, ICRC and VCRC, no pad (payload_bytes is then the real one, payload points at the
// ForwardRef, and so wire_bytes() is the real wire length: the fabric's credits, timing and
// counters see the packet as it is).
bool to_tx(std::span<const std::uint8_t> b, TxPacket& out, std::uint64_t forward_key = 0) {
  if (b.size() < 8) return false;
  const std::uint8_t lnh = b[1] & 0x3;
  const std::size_t bth = lnh == 2 ? 8 : lnh == 3 ? 48 : 0;
  if (bth == 0 || b.size() < bth + 12) return false;
  const wire::OpcodeInfo& op = wire::opcode_info(b[bth]);
  if (!op.valid) return false;
  const std::size_t hb = bth + 12 + op.ext_bytes;
  const std::uint8_t pad = (b[bth + 1] >> 4) & 0x3;
  const std::size_t pkt_words = (std::size_t{b[4]} << 8 | b[5]) & 0x7FF;
  if (hb > TxPacket::kHeaderBytesMax || b.size() < hb + pad + 6) return false;
  std::uint32_t payload_bytes = static_cast<std::uint32_t>(b.size() - hb - pad - 6);
  if (pkt_words * 4 + 2 != b.size()) {
    ForwardRef ref;
    if (forward_key == 0 || b.size() != hb + sizeof ref + 6) return false;
    std::memcpy(&ref, b.data() + hb, sizeof ref);
    if (ref.key != forward_key || hb + ref.payload_bytes + pad + 6 != pkt_words * 4 + 2)
      return false;
    payload_bytes = ref.payload_bytes;
  }
  // Every field set here, none reset first: zeroing the whole TxPacket (~200 bytes, its header
  // array included) cost more than the rest of this function. Header bytes past header_bytes
  // are never read.
  std::memcpy(out.headers.data(), b.data(), hb);
  out.header_bytes = static_cast<std::uint16_t>(hb);
  out.payload = b.data() + hb;
  out.payload_bytes = payload_bytes;
  out.pad_bytes = pad;
  out.icrc = wire::get_icrc(b.subspan(b.size() - 6).first<4>());
  out.vcrc = wire::get_vcrc(b.subspan(b.size() - 2).first<2>());
  out.crcs_valid = true;
  out.corrupt = false;
  out.port_num = 1;
  out.dlid = static_cast<std::uint16_t>(b[2] << 8 | b[3]);
  out.sl = b[1] >> 4;
  return true;
}

// Packet buffers of one HCA's relay queues, reused: a steady stream then costs no malloc / free
// per packet. Holds at most buffers_max (~2 MiB of 4 KiB packets; a daemon-wide pool of 4096
// measured slower: a larger working set).
struct BufferPool {
  static constexpr std::size_t buffers_max = 512;
  std::vector<std::vector<std::uint8_t>> free;
  std::vector<std::uint8_t> get() {
    if (free.empty()) return {};
    std::vector<std::uint8_t> b = std::move(free.back());
    free.pop_back();
    return b;
  }
  void put(std::vector<std::uint8_t>&& b) {
    if (b.capacity() && free.size() < buffers_max) free.push_back(std::move(b));
  }
};

// What travels between the two faces of one HCA's relay.
struct Pipe {
  std::deque<std::vector<std::uint8_t>> to_fabric, to_client;
  BufferPool buffers;
  // The attached process's medium: a packet leaving the fabric goes straight onto its ring when
  // nothing waits before it in to_client (one copy fewer); its driver pass publishes it.
  io::shm::ShmMedium* ring = nullptr;
  std::uint64_t to_client_direct = 0;
  std::uint64_t to_fabric_by_ref = 0;  // payloads pulled from the process (zero copy)
  std::uint64_t cma_dropped = 0;       // packets dropped because a pull failed
  // Forwarding by reference (ForwardRef): packets of this process that entered the fabric with
  // their payload left in it; packets written to this process's ring as kByRefFrom records (it
  // pulls the payload from the sender); forwarded packets whose payload the daemon pulled after
  // all (this process cannot: forwarded_refused, or it does not take such records).
  std::uint64_t to_fabric_forwarded = 0, to_client_forwarded = 0, forward_pulls = 0;
  pid_t pid = 0;              // the attached process
  bool forwarded_rx = false;  // it takes kByRefFrom records (io::kAttachForwardedRx)
  bool takes_forwarded() const {
    return attached && ring && forwarded_rx && !ring->forwarded_refused();
  }
  std::uint16_t lid = 0;
  bool attached = false;
  std::uint64_t to_fabric_packets = 0, to_client_packets = 0, dropped_unattached = 0;
  std::uint64_t to_client_dropped = 0;    // the queue toward the process was full
  std::uint64_t gsi_out = 0, gsi_in = 0;  // QP1 MADs from / to the process (GsiRelay)
  // Hands a MAD from the process's QP1 to the GsiRelay (set at attach).
  std::function<void(const cm::GsiMad&)> gsi_from_client;
  std::size_t to_client_max = SIZE_MAX, to_fabric_max = SIZE_MAX;
  std::size_t to_fabric_peak = 0, to_client_peak = 0;
  bool to_fabric_full() const { return to_fabric.size() >= to_fabric_max; }
  // Congestion toward the process: above half the bound, the HCAs sending to it stop injecting
  // (their packets wait, as behind a link without credits) until it is below a quarter, and the
  // HCA's receive gate closes (what is already in the fabric waits there: see "Receive gate").
  bool congested() const { return to_client.size() >= congested_packets(); }
  std::size_t congested_packets() const {
    return std::max<std::size_t>(1, std::min(to_client_max / 2, kCongestedMax));
  }
  std::size_t released_packets() const { return std::min(to_client_max / 4, kCongestedMax / 4); }
  // A packet queued here costs a copy more than one put straight on the ring (and one arriving
  // while anything is queued must queue behind it): stall the senders early, so most packets
  // wait unpulled in their sender's ring instead.
  static constexpr std::size_t kCongestedMax = 64;
  bool stalled = false;      // this HCA's head packet waits for a congested destination
  std::uint64_t stalls = 0;  // times it began waiting
  // Receive gate (see "Receive gate" below): the HCA inside the fabric; resume_rx() asks the
  // driver thread to deliver what the gate holds (set by the daemon); resume_due: asked;
  // hold_since: wall time of the hold's start or its last progress (0: nothing held);
  // discarding: the hold lifetime expired and the process has taken nothing since: whatever
  // arrives for it is dropped (hold_discarded counts those and the held ones dropped).
  fabric::HcaNode* hca = nullptr;
  std::function<void()> resume_rx;
  bool resume_due = false, discarding = false;
  TimeNs hold_since = 0;
  std::uint64_t hold_discarded = 0;
  bool rx_gate_open() const { return !attached || discarding || !congested(); }
  // Per-path order check (see PathOrder): this HCA's index, the last number given to a packet
  // toward each HCA, and the highest number received from each.
  std::uint32_t index = 0;
  std::vector<std::uint32_t> order_tx, order_rx;
  std::uint64_t order_reordered = 0;  // received after a packet that entered the fabric later
  std::uint64_t order_lost = 0;       // numbers never received: lost between the two relays
};

// A UD packet the process sent to QP1, as a MAD for the GsiRelay (lid = the LRH DLID); false when
// it is not a well-formed GMP.
bool relay_gsi(Pipe& pipe, std::span<const std::uint8_t> wire) {
  cm::GsiMad m;
  if (!cm::gsi_mad_of(wire, 1, m)) return false;
  m.lid = static_cast<std::uint16_t>(wire[2] << 8 | wire[3]);  // outgoing: the LRH DLID
  pipe.gsi_out++;
  pipe.gsi_from_client(m);
  return true;
}

// At a process's hang-up, at most this many packets left on its ring are still taken (a ring
// holds far fewer; the bound only keeps a hang-up from taking unbounded time).
constexpr std::size_t kHangupDrainPacketsMax = 1 << 16;

// `inject ber` accepts up to this: beyond it nearly every 4 KiB packet (~33000 bits) fails, and
// the link is dead rather than lossy.
constexpr double kInjectBerMax = 1e-3;

// Unicast LID -> the HCA's Pipe: what the sources look up before injecting toward a process.
struct LidTable {
  std::vector<Pipe*> by_lid = std::vector<Pipe*>(0xC000, nullptr);
  bool any_stalled = false;
  std::function<void()> release;  // kicks the stalled sources (set by the daemon)
  bool any_held = false;          // some HCA's receive gate closed on a packet since last looked
  // Forwarding by reference (ForwardRef) was possible at the start when nonzero: the key that
  // marks a forwarded image, random per daemon (no process sees it, so none can forge a
  // reference). It stays set when forwarding is turned off (forward_on), so the images already
  // in the fabric are still read as what they stand for.
  std::uint64_t forward_key = 0;
  // New packets may be forwarded: the key is set and no port has bit errors (an `inject ber`
  // turns it off for good).
  bool forward_on = false;
  // The attached process a packet with this DLID goes to, if it takes forwarded records.
  const Pipe* forward_target(std::uint16_t dlid) const {
    const Pipe* p = forward_on && dlid < by_lid.size() ? by_lid[dlid] : nullptr;
    return p && p->takes_forwarded() ? p : nullptr;
  }
};

// Forwarding by reference. A packet a process sent by reference (its payload in the process's
// registered buffer, which stays put until the responder's ACK) needs no payload bytes inside the
// fabric when nothing there reads them: the fabric routes by LRH/BTH, counts credits and port
// counters by the wire length, and drops, delays, duplicates or reorders whole packets. So when
// no port corrupts bits (BER), nothing captures packets and the fabric is on this host only, the
// daemon does not pull such a payload: the packet's image holds its headers (LRH PktLen the real
// length), a ForwardRef instead of the payload, ICRC and VCRC (to_tx reads it as the packet it
// stands for; ~80 bytes instead of ~4 KiB, so the queues of images stay in the cache and a
// queued one costs no 4 KiB copy). At the destination's HCA the packet goes
// to the receiving process as a kByRefFrom record naming the sender, and the receiver pulls the
// payload straight from the sender's buffer (one copy instead of three: pull, ring write, ring
// read). A late copy (a duplicate, a packet held back) finds the responder past its PSN and is
// not placed (IBA 9.7.5.1.2), as in direct mode. A receiver that cannot pull (or a receiver
// that changed meanwhile) gets the payload pulled by the daemon (forward_pulls).

// The reference a packet's image carries instead of its payload, if it does.
bool forwarded(const TxPacket& pkt, std::uint64_t key, ForwardRef& ref) {
  if (key == 0 || pkt.payload_bytes < sizeof ref) return false;
  std::memcpy(&ref, pkt.payload, sizeof ref);
  return ref.key == key && ref.payload_bytes == pkt.payload_bytes;
}

// The whole image of a forwarded packet (pkt: to_tx of its image) with the payload the daemon
// pulls from the sender after all, ICRC and VCRC zero; false when the sender is gone.
bool pull_image(const TxPacket& pkt, const ForwardRef& ref, std::vector<std::uint8_t>& out) {
  out.resize(pkt.wire_bytes());
  std::memcpy(out.data(), pkt.headers.data(), pkt.header_bytes);
  std::memset(out.data() + pkt.header_bytes + pkt.payload_bytes, 0, pkt.pad_bytes + 6u);
  iovec l{out.data() + pkt.header_bytes, ref.payload_bytes};
  iovec r{reinterpret_cast<void*>(ref.src), ref.payload_bytes};
  return process_vm_readv(static_cast<pid_t>(ref.pid), &l, 1, &r, 1, 0) ==
         static_cast<ssize_t>(ref.payload_bytes);
}

// The per-path order check. The fabric routes each (source, destination) pair over one path
// (LFTs, one SL and VL), links and switch VL queues are FIFO and the fabric is lossless, so the
// packets of a pair must leave it in the order they entered (the reliable transports count on
// it: a responder meeting a PSN ahead of the expected one sees a sequence error, IBA 9.7.5.1.2).
// Each data packet from an attached process is numbered per (source HCA, destination HCA) as it
// enters the fabric, in its ICRC field: processes use CrcMode::kModel, whose ICRC is zero and
// never checked, and the fabric checks no ICRC. The destination's relay compares the number with
// the highest it delivered from that source (a lower one: reordered inside the daemon; a gap:
// packets lost between the relays, fault drops included) and zeroes the field again. So a
// responder's out-of-sequence count can be split into true reordering (here) and loss or a
// retransmission (the transport's counters).
struct PathOrder {
  static constexpr std::size_t kMinBytes =
      wire::kLrhBytes + wire::kBthBytes + wire::kIcrcBytes + wire::kVcrcBytes;
  static std::size_t icrc_at(std::size_t size) {
    return size - wire::kIcrcBytes - wire::kVcrcBytes;
  }
  // Numbers a packet leaving `src` for `dst` (a process's data packet, not QP1).
  static std::uint32_t stamp(Pipe& src, const Pipe& dst, std::vector<std::uint8_t>& b) {
    if (b.size() < kMinBytes) return 0;
    const std::uint32_t n = ++src.order_tx[dst.index];
    wire::put_icrc(std::span<std::uint8_t, wire::kIcrcBytes>(b.data() + icrc_at(b.size()), 4), n);
    return n;
  }
  // The number a packet reaching `dst` carries (0: none), checked against its source's.
  static std::uint32_t check(Pipe& dst, const LidTable& lids, std::span<const std::uint8_t> w);
};

std::uint32_t PathOrder::check(Pipe& dst, const LidTable& lids, std::span<const std::uint8_t> w) {
  if (w.size() < kMinBytes || cm::dest_qp_of(w) == 1) return 0;
  const auto slid = static_cast<std::uint16_t>(w[6] << 8 | w[7]);  // LRH.SLID
  const Pipe* src = slid < lids.by_lid.size() ? lids.by_lid[slid] : nullptr;
  if (!src) return 0;  // another daemon's HCA (across hosts): not numbered
  const std::uint32_t n = wire::get_icrc(
      std::span<const std::uint8_t, wire::kIcrcBytes>(w.data() + icrc_at(w.size()), 4));
  if (n == 0) return 0;
  std::uint32_t& last = dst.order_rx[src->index];
  if (n <= last) {
    ++dst.order_reordered;
    --dst.order_lost;  // numbers are unique: this one was counted as skipped
  } else {
    dst.order_lost += n - last - 1;
    last = n;
  }
  return n;
}

// Receive gate: holding instead of dropping toward a process that does not read. The injection
// stall (Pipe::congested) stops only what has not entered the fabric yet: what an HCA already
// pulled from its process (its transmit pipeline, HcaModel::tx_pipeline_packets_max = 16 per
// HCA), what is on the wires and in the switches, packets from another daemon's HCAs (across
// hosts, never stalled here) and MADs still arrive, and the HCA used to hand each to the relay at
// once, its credit returned, so a full queue could only drop it (`to_client_dropped`, then a
// sequence NAK and a resend, each counting against the RC retry count, IBA 9.7.6.1.3). Real
// IB holds it: a receiver grants no credit for a buffer it cannot empty (IBA 7.9). So from the
// congestion mark on, the HCA's receive gate (fabric::HcaNode::set_rx_gate) is closed: arriving
// packets stay in its receive buffer with their credits (`rx_held`; 64 KiB per VL), its switch
// port runs out of credits and keeps the next ones (PortXmitWait, `xmit_wait` on that port), the
// switch input buffers behind it fill, and so on up to the senders. Memory stays bounded by the
// fabric's buffers. The process taking packets again opens the gate (ClientFace asks, the driver
// thread delivers in order before running the simulator).
// What it costs others, as on real IB with one data VL: a packet for the stalled process at the
// head of a switch input buffer blocks the packets behind it for other destinations (head-of-
// line blocking): traffic sharing that input (in two_switches, h1 -> h2 behind h0 -> h3 on s2's
// port from s1) waits too. Only a process that takes nothing for rx_hold_life_ns makes the daemon
// drop (`hold_discarded`): everything held, and whatever arrives for it until it reads again (as
// a switch port past HOQLife and VLStallCount discards, IBA 18.2.5.4), which frees the others.

// Whether process_vm_readv reads the probe word at `addr` in `pid` (errno kept when not).
bool can_read(pid_t pid, std::uint64_t addr) {
  std::uint64_t v = 0;
  iovec l{&v, sizeof v};
  iovec r{reinterpret_cast<void*>(addr), sizeof v};
  if (process_vm_readv(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(sizeof v)) return false;
  if (v == io::kAttachProbeValue) return true;
  errno = EFAULT;
  return false;
}

// Inside the Fabric, in place of the HCA's Device.
class FabricFace final : public StubDevice {
 public:
  FabricFace(DeviceConfig cfg, Pipe& pipe, LidTable& lids)
      : StubDevice(std::move(cfg)), pipe_(pipe), lids_(lids) {}
  using StubDevice::on_packet;
  Errc set_port_lid(std::uint8_t, std::uint16_t lid) override {
    if (pipe_.lid && pipe_.lid < lids_.by_lid.size() && lids_.by_lid[pipe_.lid] == &pipe_)
      lids_.by_lid[pipe_.lid] = nullptr;
    lid_ = pipe_.lid = lid;
    if (lid && lid < lids_.by_lid.size()) lids_.by_lid[lid] = &pipe_;
    return Errc::kOk;
  }
  void on_packet(std::span<const std::uint8_t> wire, TimeNs) override {
    counters_.rx_packets++;
    const bool numbered = PathOrder::check(pipe_, lids_, wire) != 0;
    if (!pipe_.attached) {
      pipe_.dropped_unattached++;
      return;
    }
    if (pipe_.discarding) {  // its hold lifetime expired and it has taken nothing since
      pipe_.hold_discarded++;
      return;
    }
    TxPacket pkt;
    if (!to_tx(wire, pkt, lids_.forward_key)) {
      counters_.rx_malformed++;
      return;
    }
    if (numbered) pkt.icrc = 0;  // as the sender wrote it (CrcMode::kModel)
    ForwardRef ref;
    std::vector<std::uint8_t> pulled;  // a forwarded payload this process cannot pull
    if (forwarded(pkt, lids_.forward_key, ref)) {
      if (pipe_.takes_forwarded()) {
        pkt.payload = reinterpret_cast<const std::uint8_t*>(ref.src);
        if (pipe_.to_client.empty() && pipe_.ring->tx_forwarded(pkt, static_cast<pid_t>(ref.pid))) {
          pipe_.to_client_packets++;
          pipe_.to_client_forwarded++;
          return;
        }
      } else {
        pulled = pipe_.buffers.get();
        if (!pull_image(pkt, ref, pulled)) {
          pipe_.cma_dropped++;
          pipe_.buffers.put(std::move(pulled));
          return;
        }
        pipe_.forward_pulls++;
        wire = pulled;
        pkt.payload = pulled.data() + pkt.header_bytes;
        ref.key = 0;  // an ordinary packet now
      }
      if (ref.key == 0 && pipe_.to_client.empty() && pipe_.ring &&
          pipe_.ring->tx_packet(*this, pkt)) {
        pipe_.to_client_packets++;
        pipe_.to_client_direct++;
        pipe_.buffers.put(std::move(pulled));
        return;
      }
    } else if (pipe_.to_client.empty() && pipe_.ring && pipe_.ring->tx_packet(*this, pkt)) {
      pipe_.to_client_packets++;
      pipe_.to_client_direct++;
      return;
    }
    // Queued (a forwarded image as it is: ClientFace forwards it in its turn).
    if (pipe_.to_client.size() >= pipe_.to_client_max) {
      pipe_.to_client_dropped++;
      pipe_.buffers.put(std::move(pulled));
      return;
    }
    if (pulled.empty()) {
      pipe_.to_client.push_back(pipe_.buffers.get());
      pipe_.to_client.back().assign(wire.begin(), wire.end());
    } else {
      pipe_.to_client.push_back(std::move(pulled));
    }
    std::vector<std::uint8_t>& b = pipe_.to_client.back();
    if (numbered) std::memset(b.data() + PathOrder::icrc_at(b.size()), 0, wire::kIcrcBytes);
    pipe_.to_client_packets++;
    pipe_.to_client_peak = std::max(pipe_.to_client_peak, pipe_.to_client.size());
  }
  bool poll_transmit(TimeNs, TxPacket& out) override {
    cur_out_ = false;
    while (!pipe_.to_fabric.empty()) {
      const std::vector<std::uint8_t>& head = pipe_.to_fabric.front();
      if (cm::dest_qp_of(head) == 1) {  // a MAD queued behind data packets (ClientFace): now
        if (!relay_gsi(pipe_, head)) counters_.rx_malformed++;
        pipe_.buffers.put(std::move(pipe_.to_fabric.front()));
        pipe_.to_fabric.pop_front();
        continue;
      }
      const Pipe* dst = nullptr;
      if (head.size() >= 4) {
        const auto dlid = static_cast<std::uint16_t>(head[2] << 8 | head[3]);  // LRH.DLID
        dst = dlid < lids_.by_lid.size() ? lids_.by_lid[dlid] : nullptr;
        if (dst && dst->attached && dst->congested()) {
          if (!pipe_.stalled) ++pipe_.stalls;
          pipe_.stalled = lids_.any_stalled = true;
          return false;
        }
      }
      pipe_.buffers.put(std::move(cur_));
      cur_ = std::move(pipe_.to_fabric.front());
      pipe_.to_fabric.pop_front();
      if (to_tx(cur_, out, lids_.forward_key)) {
        if (dst) out.icrc = PathOrder::stamp(pipe_, *dst, cur_);
        counters_.tx_packets++;
        cur_out_ = true;
        return true;
      }
      counters_.rx_malformed++;
    }
    return false;
  }
  // HcaNode::WireSwap: the packet poll_transmit just returned is the image in cur_; the fabric
  // takes that buffer instead of copying it (and leaves its old one, reused next time).
  bool swap_wire(std::vector<std::uint8_t>& bytes) {
    if (!cur_out_) return false;
    cur_out_ = false;
    bytes.swap(cur_);
    return true;
  }

 private:
  Pipe& pipe_;
  LidTable& lids_;
  std::vector<std::uint8_t> cur_;
  bool cur_out_ = false;  // cur_ is the packet last returned by poll_transmit
};

// Facing the attached process, driven by the io::Driver over its ShmMedium.
class ClientFace final : public StubDevice {
 public:
  ClientFace(DeviceConfig cfg, Pipe& pipe, LidTable& lids, std::function<void()> on_send)
      : StubDevice(std::move(cfg)), pipe_(pipe), lids_(lids), on_send_(std::move(on_send)) {}
  void set_remote_payload(RemotePayload* rp) override { remote_ = rp; }
  // A packet whose payload is still in the process (a by-reference record): the headers here,
  // the payload pulled by the medium straight into the packet (RemotePayload::place; done before
  // rx_burst returns, so before the fabric reads the packet). ICRC and VCRC stay zero as on the
  // ring (CrcMode::kModel).
  void on_packet(const TxPacket& pkt, TimeNs now) override {
    if (!remote_ || pkt.payload_bytes == 0) {
      StubDevice::on_packet(pkt, now);
      return;
    }
    std::vector<std::uint8_t>& v = take();
    const auto dlid = static_cast<std::uint16_t>(pkt.headers[2] << 8 | pkt.headers[3]);
    const bool forward = pkt.payload_bytes >= sizeof(ForwardRef) && lids_.forward_target(dlid);
    // The image: headers, the payload (or the ForwardRef standing for it), pad, ICRC, VCRC.
    const std::size_t body = forward ? sizeof(ForwardRef) : pkt.payload_bytes;
    const std::size_t tail_at = std::size_t{pkt.header_bytes} + body;
    v.resize(forward ? tail_at + 6 : pkt.wire_bytes());  // a reused buffer keeps its bytes
    std::memcpy(v.data(), pkt.headers.data(), pkt.header_bytes);
    std::memset(v.data() + tail_at, 0, v.size() - tail_at);
    if (forward) {
      // Left in the process: the receiver pulls it (ForwardRef).
      const ForwardRef ref{lids_.forward_key, reinterpret_cast<std::uint64_t>(pkt.payload),
                           static_cast<std::uint32_t>(pipe_.pid), pkt.payload_bytes};
      std::memcpy(v.data() + pkt.header_bytes, &ref, sizeof ref);
      pipe_.to_fabric_forwarded++;
    } else {
      remote_->place(v.data() + pkt.header_bytes, pkt.payload, pkt.payload_bytes);
      pipe_.to_fabric_by_ref++;
    }
    sent();
  }
  void on_packet(std::span<const std::uint8_t> wire, TimeNs) override {
    // QP1: a MAD for the GsiRelay, not a data packet. It leaves the HCA through Fabric::send_mad,
    // straight onto the port's VL queue, so while the process's earlier packets still wait in
    // to_fabric it waits behind them: a port sends in the order its process sent (a DREQ that
    // overtook the ACK sent before it moved the peer's QP to ERR, which flushed a SEND that had
    // been delivered: FabricdGsi.TwoProcessesConnectThroughTheCmAndExchangeData).
    if (cm::dest_qp_of(wire) == 1) {
      if (!pipe_.to_fabric.empty()) {
        take().assign(wire.begin(), wire.end());
        sent();
      } else if (!relay_gsi(pipe_, wire)) {
        counters_.rx_malformed++;
      }
      return;
    }
    take().assign(wire.begin(), wire.end());
    sent();
  }
  std::vector<std::uint8_t>& take() {
    pipe_.to_fabric.push_back(pipe_.buffers.get());
    return pipe_.to_fabric.back();
  }
  void sent() {
    pipe_.to_fabric_packets++;
    pipe_.to_fabric_peak = std::max(pipe_.to_fabric_peak, pipe_.to_fabric.size());
    on_send_();
  }
  bool poll_transmit(TimeNs now, TxPacket& out) override {
    return poll_transmit_burst(now, {&out, 1}) == 1;
  }
  // Every packet of a burst refers to its own buffer, kept until the next call (Device's burst
  // contract): the default burst, poll_transmit over one buffer, would hand the medium packets
  // whose payloads had gone back to the pool (freed when the pool is full).
  // A forwarded image (ForwardRef) at the head is written as a kByRefFrom record here, before
  // the packets this call returns (the medium writes those after it returns), so only while none
  // is taken yet: the ring keeps the queue's order. It counts against the burst's room.
  std::size_t poll_transmit_burst(TimeNs, std::span<TxPacket> out) override {
    for (auto& b : cur_) pipe_.buffers.put(std::move(b));
    cur_.clear();
    std::size_t n = 0, room = out.size();
    const std::size_t queued = pipe_.to_client.size();
    while (n < room && !pipe_.to_client.empty()) {
      std::vector<std::uint8_t>& head = pipe_.to_client.front();
      bool keep = to_tx(head, out[n], lids_.forward_key);
      ForwardRef ref;
      if (keep && forwarded(out[n], lids_.forward_key, ref)) {
        if (pipe_.takes_forwarded()) {
          if (n > 0) break;
          out[n].payload = reinterpret_cast<const std::uint8_t*>(ref.src);
          if (!pipe_.ring->tx_forwarded(out[n], static_cast<pid_t>(ref.pid))) break;
          pipe_.to_client_forwarded++;
          --room;
          keep = false;
        } else if (std::vector<std::uint8_t> full = pipe_.buffers.get();
                   pull_image(out[n], ref, full)) {
          pipe_.forward_pulls++;
          pipe_.buffers.put(std::exchange(head, std::move(full)));
          to_tx(head, out[n]);
        } else {
          pipe_.buffers.put(std::move(full));
          pipe_.cma_dropped++;
          keep = false;
        }
      }
      if (keep) {
        cur_.push_back(std::move(head));
        ++n;
      } else {
        pipe_.buffers.put(std::move(head));
      }
      pipe_.to_client.pop_front();
      if (lids_.any_stalled && pipe_.to_client.size() < pipe_.released_packets() && lids_.release)
        lids_.release();
    }
    if (pipe_.to_client.size() < queued) {
      // The process took packets: it reads again. What its HCA's gate holds is delivered by the
      // driver thread (not here: the medium is writing this burst to the ring, and a packet put
      // straight on the ring now would pass the burst's packets).
      pipe_.discarding = false;
      if (pipe_.hca && pipe_.hca->rx_held() && pipe_.rx_gate_open() && pipe_.resume_rx)
        pipe_.resume_rx();
    }
    return n;
  }

 private:
  Pipe& pipe_;
  LidTable& lids_;
  RemotePayload* remote_ = nullptr;
  std::function<void()> on_send_;
  std::vector<std::vector<std::uint8_t>> cur_;  // the buffers of the last burst's packets
};

// An attached process's ShmMedium, with back-pressure toward the fabric: it takes no more
// packets from the process's ring than the HCA's queue has room for. Packets left on the ring
// fill it and then stay in the process's Device (the medium's tx_burst stops on a full ring).
// While the queue is full the driver does not wait on the ring's doorbell: the fabric draining
// the queue (the clock's deadline) wakes it, and the next pass takes more.
class BoundedMedium final : public io::Medium {
 public:
  BoundedMedium(std::unique_ptr<io::shm::ShmMedium> m, Pipe& pipe)
      : m_(std::move(m)), pipe_(pipe) {}
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override {
    const std::size_t room = pipe_.to_fabric.size() >= pipe_.to_fabric_max
                                 ? 0
                                 : pipe_.to_fabric_max - pipe_.to_fabric.size();
    if (room == 0) {
      ++backpressured;
      return 0;
    }
    const std::size_t before = pipe_.to_fabric.size();
    const std::uint64_t errors = m_->counters().cma_errors;
    const std::size_t n = m_->rx_burst(dev, now, std::min(max, room));
    if (m_->counters().cma_errors != errors) {
      // A pull failed: some packet of this burst lacks its payload. Drop the burst (nothing has
      // read it yet); the transport's retries resend it.
      pipe_.cma_dropped += pipe_.to_fabric.size() - before;
      pipe_.to_fabric.resize(before);
    }
    return n;
  }
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override {
    return m_->tx_burst(dev, now, max);
  }
  int rx_wait_fd() const override { return m_->rx_wait_fd(); }
  bool prepare_sleep() override { return pipe_.to_fabric_full() || m_->prepare_sleep(); }
  void finish_sleep() override { m_->finish_sleep(); }
  int event_fd() const override { return m_->event_fd(); }
  void on_event(TimeNs now) override { m_->on_event(now); }
  PeerState peer_state(TimeNs seen_after, int cpu) const override {
    return m_->peer_state(seen_after, cpu);
  }
  io::shm::ShmMedium& shm() { return *m_; }
  std::uint64_t backpressured = 0;  // passes that took nothing because the queue was full

 private:
  std::unique_ptr<io::shm::ShmMedium> m_;
  Pipe& pipe_;
};

// The accept thread's queue to the driver thread: rings an eventfd the driver sleeps on.
class ControlMedium final : public io::Medium {
 public:
  ControlMedium() : efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~ControlMedium() override { close(efd_); }
  std::size_t rx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  std::size_t tx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  int rx_wait_fd() const override { return efd_; }
  bool prepare_sleep() override { return !pending.load(std::memory_order_seq_cst); }
  void finish_sleep() override {
    std::uint64_t v;
    [[maybe_unused]] auto r = read(efd_, &v, sizeof v);
  }
  void ring() {
    pending.store(true, std::memory_order_seq_cst);
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = write(efd_, &one, sizeof one);
  }
  std::atomic<bool> pending{false};

 private:
  int efd_;
};

}  // namespace

class FabricDaemon::Impl {
 public:
  // Runs the Simulator against the wall clock: the Driver calls on_deadline when the next
  // simulator event is due (or at once when a client sent something).
  class Clock final : public StubDevice {
   public:
    explicit Clock(Impl& d) : StubDevice(DeviceConfig{}), d_(d) {}
    TimeNs next_deadline() const override {
      if (due) return 0;
      if (!d_.opt.pace && d_.packets_moving()) return 0;
      // A backstop while packets wait for a process's ring: nothing wakes the driver when a
      // process frees ring space (only when it sends), so it looks again at least every 1 ms.
      // And a receive gate's hold lifetime (service_holds).
      TimeNs backstop = kNoDeadline;
      bool looked = false;
      for (const auto& p : d_.pipes) {
        if (!looked && p->attached && !p->to_client.empty()) {
          backstop = std::min(backstop, io::monotonic_ns() + 1'000'000);
          looked = true;
        }
        if (p->hold_since && p->hca->rx_held())
          backstop = std::min(backstop, p->hold_since + d_.opt.rx_hold_life_ns);
      }
      const TimeNs ev = d_.next_fault < d_.fault_steps.size()
                            ? d_.fault_steps[d_.next_fault].wall_ns
                            : kNoDeadline;
      backstop = std::min(backstop, d_.sm_start_wall);
      const TimeNs nt = d_.sim.next_time();
      if (nt == kNoDeadline) return std::min(ev, backstop);
      const std::int64_t wall = static_cast<std::int64_t>(nt) - d_.delta;
      return std::min({ev, backstop, wall < 0 ? TimeNs{0} : static_cast<TimeNs>(wall)});
    }
    void on_deadline(TimeNs now) override { d_.advance(now); }
    bool due = false;

   private:
    Impl& d_;
  };

  // faults::SmControl over the daemon's FabricSm: a failed SM is destroyed (traps reach no SM),
  // a recovered one is a new FabricSm on the same port whose heavy sweep finds the subnet as it is.
  class SmCtl final : public faults::SmControl {
   public:
    explicit SmCtl(Impl& d) : d_(d) {}
    void sm_down(TimeNs) override {
      d_.sm_.reset();
      if (d_.gsi) d_.gsi->set_sa_node(topo::kNoNode);  // the SA goes with its SM
    }
    void sm_up(TimeNs) override {
      if (d_.sm_ || d_.sm_node == topo::kNoNode) return;
      d_.sm_ = std::make_unique<sm::FabricSm>(*d_.fabric, d_.sm_node, d_.opt.sm.sm);
      d_.sm_->start();
      if (d_.gsi) d_.gsi->set_sa_node(d_.sm_node);
    }
    void link_changed(topo::LinkId, bool, TimeNs) override {}  // the SMAs send trap 128

   private:
    Impl& d_;
  };

  // One scheduled fault event, due at a wall-clock time (flaps expanded).
  struct FaultStep {
    TimeNs wall_ns;
    faults::EventSpec event;  // at_ns 0: applied at once when due
  };

  struct Client {
    int sock = -1;
    pid_t pid = 0;
    std::uint32_t hca = 0;
    std::unique_ptr<ClientFace> face;
    std::unique_ptr<BoundedMedium> medium;
    bool zero_copy = false;  // its payloads are pulled (by reference)
  };
  struct Request {
    enum Kind { kAttach, kHangup, kControl } kind;
    int sock;
    io::AttachRequest attach{};
    std::string text;
  };

  DaemonOptions opt;
  faults::FaultLog fault_log;
  std::unique_ptr<SmCtl> sm_ctl;
  std::unique_ptr<faults::FaultInjector> injector;
  std::vector<FaultStep> fault_steps;  // by wall time
  std::size_t next_fault = 0;
  TimeNs start_wall = 0;
  topo::NodeId sm_node = topo::kNoNode;
  sim::Simulator sim;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<sm::FabricSm> sm_;
  std::unique_ptr<GsiRelay> gsi;  // after fabric: goes first
  sm::BringUpReport report;
  std::vector<topo::NodeId> hcas;
  std::vector<std::unique_ptr<Pipe>> pipes;  // per HCA index
  LidTable lids;
  std::map<int, Client> clients;  // by socket
  std::int64_t delta = 0;         // vt = wall + delta
  io::Driver driver;
  ControlMedium control;
  std::unique_ptr<Clock> clock;
  // Across hosts: the tunnel and the crossing links; the SM starts when they are all up (or
  // at sm_start_wall), on the daemon that holds the SM's HCA.
  std::unique_ptr<CrossHost> cross;
  TimeNs sm_start_wall = kNoDeadline;
  int listen_fd = -1, ctl_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  bool zero_copy_refused_logged = false;
  std::thread acceptor;
  std::mutex mu;
  std::deque<Request> queue;

  ~Impl() {
    stop();
    if (acceptor.joinable()) acceptor.join();
    for (auto& [s, c] : clients) {
      if (c.face) driver.detach(*c.face);
      close(s);
    }
    clients.clear();
    if (clock) driver.detach(*clock);  // none when create() failed before making it
    if (cross) driver.detach(cross->device());
    sm_.reset();
    injector.reset();
    for (int fd : {listen_fd, ctl_fd, wake_fd})
      if (fd >= 0) close(fd);
  }

  void stop() {
    stopping.store(true);
    const std::uint64_t one = 1;
    if (wake_fd >= 0) {
      [[maybe_unused]] auto r = write(wake_fd, &one, sizeof one);
    }
    control.ring();
  }

  // Whether packets may cross the fabric without their payload (ForwardRef): asked for, and
  // nothing in the fabric reads payload bytes. Bit errors (the link model's, or a port fault's
  // ber) flip bits of the image (an image without its payload would draw them over ~80 bytes
  // instead of the packet's length), and a capture writes it out; across hosts the image would
  // leave the host, whose processes a reference names. The port faults are those of the start
  // (--faults); an `inject ber` later turns forwarding off (LidTable::forward_on).
  bool forwarding_possible() const {
    if (!opt.zero_copy || !opt.forward_by_ref || cross || fabric->tap() ||
        fabric->config().link.ber > 0.0)
      return false;
    const topo::Topology& t = fabric->topology();
    for (topo::NodeId n = 0; n < t.node_count(); ++n)
      for (int p = 1; p <= fabric->node(n).num_ports(); ++p) {
        const auto& f = fabric->node(n).port(p).faults;
        if (f && f->ber > 0.0) return false;
      }
    return true;
  }

  void apply_due_faults(TimeNs now) {
    while (next_fault < fault_steps.size() && fault_steps[next_fault].wall_ns <= now) {
      faults::Scenario one;
      one.events.push_back(fault_steps[next_fault++].event);
      injector->apply(one);  // posted at the simulator's now: runs below
    }
  }

  void schedule_faults(const faults::Scenario& sc) {
    injector = std::make_unique<faults::FaultInjector>(*fabric, fault_log, sm_ctl.get());
    faults::Scenario ports = sc;
    ports.events.clear();
    injector->apply(ports);
    for (const faults::EventSpec& e : sc.events) {
      auto at0 = [&](TimeNs at, faults::Action a) {
        faults::EventSpec x = e;
        x.at_ns = 0;
        x.action = a;
        fault_steps.push_back({start_wall + at, x});
      };
      if (e.action == faults::Action::kFlap) {
        for (std::uint32_t i = 0; i < e.count; ++i) {
          const TimeNs t0 = e.at_ns + static_cast<TimeNs>(i) * e.period_ns;
          at0(t0, faults::Action::kLinkDown);
          at0(t0 + e.period_ns / 2, faults::Action::kLinkUp);
        }
      } else {
        at0(e.at_ns, e.action);
      }
    }
    std::stable_sort(fault_steps.begin(), fault_steps.end(),
                     [](const FaultStep& a, const FaultStep& b) { return a.wall_ns < b.wall_ns; });
  }

  // The receive gates (see "Receive gate"): delivers what a gate held once its process reads
  // again; drops it once it waited rx_hold_life_ns (wall time) without progress.
  void service_holds(TimeNs now) {
    lids.any_held = false;
    for (auto& pp : pipes) {
      Pipe& p = *pp;
      if (p.resume_due) {
        p.resume_due = false;
        if (p.hca->release_rx() > 0) p.hold_since = now;
      }
      if (p.hca->rx_held() == 0) {
        p.hold_since = 0;
        continue;
      }
      lids.any_held = true;
      if (p.hold_since == 0) {
        p.hold_since = now;
      } else if (now - p.hold_since >= opt.rx_hold_life_ns) {
        const std::size_t n = p.hca->discard_rx();
        p.hold_discarded += n;
        p.discarding = true;
        p.hold_since = 0;
        log()->warn(
            "HCA {} (pid {}) took nothing for {} ms: {} held packets dropped, and what "
            "arrives for it until it reads again",
            p.index, p.pid, opt.rx_hold_life_ns / 1'000'000, n);
        clock->due = true;  // their credits go back: the fabric moves again
      }
    }
  }

  // Without pace, whether packets in flight still move (advance runs them to completion at
  // once): some live packet is not one a receive gate holds, and the simulator has an event
  // within kRunAheadNs (not a far-away timer). Packets waiting for a held packet's credits (in
  // switch buffers, in a sender's pipeline) have no event: they move when the gate opens.
  static constexpr TimeNs kRunAheadNs = 1'000'000'000;
  bool packets_moving() {
    if (fabric->pool().live() <= fabric->rx_held_packets()) return false;
    const TimeNs nt = sim.next_time();
    return nt != kNoDeadline && nt <= sim.now() + kRunAheadNs;
  }

  void advance(TimeNs now) {
    clock->due = false;
    apply_due_faults(now);
    if (lids.any_held) service_holds(now);
    const std::int64_t target = static_cast<std::int64_t>(now) + delta;
    const auto t = static_cast<TimeNs>(std::max<std::int64_t>(target, sim.now()));
    sim.run_until(t);
    if (!opt.pace) {
      // Packets in flight run to completion now (bounded, and not past a far-away timer).
      for (int i = 0; i < 1'000'000 && packets_moving(); ++i) sim.step();
      if (static_cast<std::int64_t>(sim.now()) > target)
        delta += static_cast<std::int64_t>(sim.now()) - target;
    }
    if (sm_start_wall != kNoDeadline && (now >= sm_start_wall || cross->all_up())) start_sm();
  }

  // Across hosts: the SM's first heavy sweep, now that the crossing links are up.
  void start_sm() {
    sm_start_wall = kNoDeadline;
    log()->info("fabric {}: crossing links {}; starting the SM", opt.name,
                cross->all_up() ? "up" : "not all up");
    sm_ = std::make_unique<sm::FabricSm>(*fabric, sm_node, opt.sm.sm);
    sm_->start();
  }

  void accept_main() {
    std::vector<int> socks;  // attached clients, watched for hang-up
    while (!stopping.load()) {
      std::vector<pollfd> p{{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}, {ctl_fd, POLLIN, 0}};
      for (int s : socks) p.push_back({s, POLLIN, 0});
      if (poll(p.data(), p.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (p[0].revents) break;
      std::vector<Request> out;
      if (p[1].revents & POLLIN) {
        const int s = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        io::AttachRequest req;
        int none[3];
        if (s >= 0 && proto::recv_with_fds(s, &req, sizeof req, none, 1'000'000'000) == 0 &&
            req.magic == io::kAttachMagic && req.version == io::kAttachVersion) {
          out.push_back({Request::kAttach, s, req, {}});
          socks.push_back(s);
        } else if (s >= 0) {
          close(s);
        }
      }
      if (p[2].revents & POLLIN) {
        const int s = accept4(ctl_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (s >= 0 && proto::wait_readable(s, 1'000'000'000)) {
          char buf[1024];
          const ssize_t n = recv(s, buf, sizeof buf, 0);
          if (n > 0)
            out.push_back({Request::kControl, s, {}, std::string(buf, static_cast<size_t>(n))});
          else
            close(s);
        } else if (s >= 0) {
          close(s);
        }
      }
      for (std::size_t i = 3; i < p.size(); ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char b;
        if (recv(p[i].fd, &b, 1, MSG_DONTWAIT) > 0) continue;  // no messages expected
        out.push_back({Request::kHangup, p[i].fd, {}, {}});
        std::erase(socks, p[i].fd);
      }
      if (!out.empty()) {
        {
          std::lock_guard g(mu);
          for (auto& r : out) queue.push_back(std::move(r));
        }
        control.ring();
      }
    }
  }

  void do_attach(const Request& r) {
    io::AttachReply rep;
    rep.ring_bytes = opt.ring_bytes;
    rep.sm_lid = sm_ ? fabric->lid(sm_->node(), sm_->port()) : 0;
    std::uint32_t h = r.attach.hca;
    if (h == io::kAnyHca) {
      h = 0;
      while (h < pipes.size() && pipes[h]->attached) ++h;
      if (h == pipes.size()) rep.status = io::AttachStatus::kNoFreeHca;
    } else if (h >= pipes.size()) {
      rep.status = io::AttachStatus::kNoSuchHca;
    } else if (pipes[h]->attached) {
      rep.status = io::AttachStatus::kHcaBusy;
    }
    ucred cred{};
    socklen_t cl = sizeof cred;
    getsockopt(r.sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl);
    int fds[3] = {-1, -1, -1};
    if (rep.status == io::AttachStatus::kOk) {
      fds[0] = memfd_create("weft-fabric", MFD_CLOEXEC);
      fds[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      fds[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0 ||
          !io::shm::ShmMedium::format(fds[0], opt.ring_bytes))
        rep.status = io::AttachStatus::kSystem;
    }
    if (rep.status != io::AttachStatus::kOk) {
      proto::send_with_fds(r.sock, &rep, sizeof rep, nullptr, 0);
      for (int fd : fds)
        if (fd >= 0) close(fd);
      log()->warn("attach from pid {} refused (status {})", cred.pid,
                  static_cast<unsigned>(rep.status));
      clients[r.sock] = Client{r.sock, cred.pid, UINT32_MAX, nullptr, nullptr};
      return;
    }
    rep.hca = h;
    if (r.attach.flags & io::kAttachWantZeroCopy) {
      if (!opt.zero_copy) {
        // copies by request
      } else if (can_read(cred.pid, r.attach.probe_addr)) {
        rep.flags |= io::kAttachZeroCopyTx;
      } else if (!zero_copy_refused_logged) {
        zero_copy_refused_logged = true;
        log()->warn(
            "cannot read pid {}'s memory ({}): its payloads are copied through the ring (said "
            "once)",
            cred.pid, std::strerror(errno));
      }
    }
    rep.lid = fabric->lid(hcas[h], 1);
    rep.node_guid = fabric->topology().node(hcas[h]).guid;
    const bool sent = proto::send_with_fds(r.sock, &rep, sizeof rep, fds, 3);
    io::shm::ShmLinkConfig link;
    link.memfd = fds[0];
    link.rx_doorbell = fds[1];  // the client rings it when it fills our rx ring
    link.tx_doorbell = fds[2];
    link.ring_bytes = opt.ring_bytes;
    link.side_a = true;
    link.peer_pid = cred.pid;
    link.zero_copy_tx = false;
    link.by_ref_bytes_max = opt.forwarded_bytes_max;  // kByRefFrom payloads toward it
    link.wake_producer_records = opt.wake_sender_records;
    Client c;
    c.sock = r.sock;
    c.pid = cred.pid;
    c.hca = h;
    c.zero_copy = (rep.flags & io::kAttachZeroCopyTx) != 0;
    auto shm = std::make_unique<io::shm::ShmMedium>(link);
    if (!sent || !shm->ok()) {
      clients[r.sock] = Client{r.sock, cred.pid, UINT32_MAX, nullptr, nullptr};
      return;
    }
    Pipe& pipe = *pipes[h];
    c.medium = std::make_unique<BoundedMedium>(std::move(shm), pipe);
    pipe.ring = &c.medium->shm();
    pipe.attached = true;
    pipe.pid = cred.pid;
    pipe.forwarded_rx = (r.attach.flags & io::kAttachForwardedRx) != 0;
    pipe.discarding = false;
    pipe.to_client.clear();
    pipe.to_fabric.clear();
    const topo::NodeId node = hcas[h];
    DeviceConfig dc;
    dc.name = "client-face";
    pipe.gsi_from_client = [this, h](const cm::GsiMad& m) {
      gsi->from_client(h, m);
      clock->due = true;
    };
    c.face = std::make_unique<ClientFace>(dc, pipe, lids, [this, node] {
      fabric->kick(node);
      clock->due = true;
    });
    driver.attach(*c.face, *c.medium);
    log()->info("pid {} attached to HCA {} ({}), LID {}", cred.pid, h,
                fabric->topology().node(node).description, rep.lid);
    clients[r.sock] = std::move(c);
  }

  void do_hangup(int sock) {
    auto it = clients.find(sock);
    if (it == clients.end()) {
      close(sock);
      return;
    }
    Client& c = it->second;
    if (c.face) {
      // The process's last packets may still be on its ring (it exits right after sending its
      // DREP): take them before the ring goes. One at a time, so that a packet whose payload
      // the gone process can no longer give is dropped alone.
      const TimeNs now = io::monotonic_ns();
      for (std::size_t i = 0; i < kHangupDrainPacketsMax && c.medium->rx_burst(*c.face, now, 1);
           ++i) {
      }
      driver.detach(*c.face);
      Pipe& pipe = *pipes[c.hca];
      pipe.attached = false;
      pipe.ring = nullptr;
      pipe.forwarded_rx = false;
      pipe.discarding = false;
      pipe.to_client.clear();
      if (pipe.hca->rx_held()) pipe.resume_rx();  // the gate is open now: dropped as unattached
      // What the process sent before it left is the HCA's now, as a real HCA's queued packets
      // are: the fabric still sends it (its last MAD, a DREP say, was queued behind its data and
      // must not vanish with it). The payloads were pulled in when the packets were taken.
      if (!pipe.to_fabric.empty()) {
        fabric->kick(hcas[c.hca]);
        clock->due = true;
      }
      if (lids.any_stalled) lids.release();
      log()->info("pid {} left HCA {}", c.pid, c.hca);
    }
    close(sock);
    clients.erase(it);
  }

  // "NODE/PORT": a node's description or index.
  bool parse_port(const std::string& s, topo::NodeId& n, int& port) {
    const auto slash = s.rfind('/');
    if (slash == std::string::npos) return false;
    const std::string node = s.substr(0, slash);
    port = std::atoi(s.c_str() + slash + 1);
    const topo::Topology& t = fabric->topology();
    n = topo::kNoNode;
    for (topo::NodeId i = 0; i < t.node_count(); ++i)
      if (t.node(i).description == node) n = i;
    if (n == topo::kNoNode && !node.empty() &&
        node.find_first_not_of("0123456789") == std::string::npos)
      n = static_cast<topo::NodeId>(std::stoul(node));
    return n < t.node_count() && port >= 1 && port <= fabric->node(n).num_ports() &&
           fabric->node(n).port(port).connected;
  }

  std::string status() {
    std::ostringstream o;
    const topo::Topology& t = fabric->topology();
    o << "fabric " << opt.name << " nodes " << t.node_count() << " hcas " << hcas.size()
      << " attached "
      << std::count_if(pipes.begin(), pipes.end(), [](auto& p) { return p->attached; })
      << " vtime_ns " << sim.now() << " client_queue " << opt.to_client_packets_max
      << " hold_life_us " << opt.rx_hold_life_ns / 1000 << " forward_by_ref "
      << int{lids.forward_on} << "\n";
    if (cross) o << cross->status();
    {  // the driver thread's loop (io::DriverCounters): where its wall time went
      const io::DriverCounters& d = driver.counters();
      o << "driver passes " << d.passes << " sleeps " << d.sleeps << " wakeups_kick "
        << d.wakeups_kick << " wakeups_timer " << d.wakeups_timer << " wakeups_rx " << d.wakeups_rx
        << " yields " << d.yields << " stalled_peers " << d.stalled_peers << " busy_ms "
        << d.busy_ns / 1'000'000 << " idle_ms " << d.idle_ns / 1'000'000 << " asleep_ms "
        << d.sleep_ns / 1'000'000 << "\n";
    }
    if (sm_) {  // the SM's sweeps and the ports it cannot bring to Active (emu/sm README)
      const sm::SubnetManager& s = sm_->sm();
      o << "sm node " << sm_->node() << " lid " << s.sm_lid() << " engine "
        << routing::to_string(opt.sm.sm.routing.engine) << " lmc " << opt.sm.sm.lmc << " phase "
        << sm::to_string(s.phase()) << " heavy_sweeps " << s.heavy_sweeps() << " light_sweeps "
        << s.light_sweeps() << " forced_heavy_sweeps " << s.forced_heavy_sweeps() << " traps "
        << s.traps_received() << " ports_stuck " << s.ports_stuck() << "\n";
      for (const sm::StuckPort& p : s.stuck_ports())
        o << "sm stuck port node " << std::hex << std::showbase << p.node_guid << std::dec
          << std::noshowbase << " " << p.node_desc << "/" << int{p.port} << " state "
          << sma::to_string(p.state) << " attempts " << p.attempts << " retry_light_sweeps "
          << p.retry_light_sweeps << "\n";
    }
    for (topo::NodeId n = 0; n < t.node_count(); ++n) {
      if (cross && !cross->local(n)) continue;  // run by the other host's daemon
      const auto& st = fabric->node(n).state();
      const bool sw = t.node(n).is_switch();
      o << "node " << n << " " << (sw ? "switch " : "hca ") << t.node(n).description << " lid "
        << (sw ? st.ports[0].lid : fabric->lid(n, 1));
      if (!sw) {
        const auto it = std::find(hcas.begin(), hcas.end(), n);
        const auto h = static_cast<std::size_t>(it - hcas.begin());
        o << " hca_index " << h;
        for (const auto& [s, c] : clients)
          if (c.face && c.hca == h)
            o << " pid " << c.pid << " zero_copy " << int{c.zero_copy} << " forwarded_rx "
              << int{lids.forward_on && pipes[h]->takes_forwarded()};
        if (h < pipes.size()) {
          const Pipe& pp = *pipes[h];
          o << " to_fabric " << pp.to_fabric_packets << " to_client " << pp.to_client_packets
            << " to_client_direct " << pp.to_client_direct << " to_fabric_by_ref "
            << pp.to_fabric_by_ref << " to_fabric_forwarded " << pp.to_fabric_forwarded
            << " to_client_forwarded " << pp.to_client_forwarded << " forward_pulls "
            << pp.forward_pulls << " cma_dropped " << pp.cma_dropped << " to_client_dropped "
            << pp.to_client_dropped << " to_fabric_peak " << pp.to_fabric_peak << " to_client_peak "
            << pp.to_client_peak << " stalls " << pp.stalls;
          const fabric::HcaNode::RxGateCounters& g = pp.hca->rx_gate_counters();
          o << " rx_holds " << g.holds << " rx_held " << g.held_packets << " rx_held_peak "
            << g.held_peak << " rx_held_now " << pp.hca->rx_held() << " hold_discarded "
            << pp.hold_discarded << " gsi_out " << pp.gsi_out << " gsi_in " << pp.gsi_in
            << " reordered " << pp.order_reordered << " path_lost " << pp.order_lost;
        }
      }
      o << "\n";
      for (int p = 1; p <= fabric->node(n).num_ports(); ++p) {
        const fabric::PortEnd& pe = fabric->node(n).port(p);
        if (!pe.connected) continue;
        const auto& c = pe.counters;
        o << "  port " << p << " state " << sma::to_string(st.ports[p].state) << " xmit_pkts "
          << c.xmit_pkts << " rcv_pkts " << c.rcv_pkts << " xmit_wait " << c.xmit_wait
          << " overflows " << c.buffer_overflows << " fault_dropped " << c.fault_dropped
          << " xmit_discards " << c.port_xmit_discards << " symbol_errors "
          << c.symbol_error_counter << " rcv_errors " << c.port_rcv_errors << " fec_corrected "
          << c.fec_corrected_blocks << "\n";
      }
    }
    for (const faults::LogEntry& e : fault_log.entries())
      o << "fault vtime_ns " << e.at_ns << " " << e.what << "\n";
    return o.str();
  }

  std::string do_control(const std::string& text) {
    std::istringstream in(text);
    std::string cmd;
    in >> cmd;
    if (cmd == "status") return status();
    if (cmd == "down") {
      stopping.store(true);
      return "ok\n";
    }
    if (cmd == "inject") {
      std::string where, what;
      in >> where >> what;
      topo::NodeId n;
      int port;
      if (!parse_port(where, n, port)) return "error: no linked port " + where + "\n";
      const fabric::PortEnd& pe = fabric->node(n).port(port);
      if (what == "drop" || what == "ber") {
        double v = -1;
        in >> v;
        if (what == "drop" && !(v >= 0 && v <= 1))
          return "error: drop wants a probability in [0, 1]\n";
        if (what == "ber" && !(v >= 0 && v <= kInjectBerMax))
          return "error: ber wants a bit error rate in [0, 0.001]\n";
        if (what == "ber" && v > 0) {
          // Bit errors flip image bits: from now on payloads are pulled into the images (see
          // forwarding_possible). Images already in the fabric stay readable (forward_key).
          lids.forward_on = false;
        }
        // Both directions of the link: this port's receive side and its peer's. The other
        // faults of each side stay as they were.
        topo::NodeId peer = topo::kNoNode;
        for (topo::NodeId i = 0; i < fabric->topology().node_count(); ++i)
          if (fabric->node(i).component() == pe.peer) peer = i;
        auto set = [&](topo::NodeId node, int q) {
          fabric::PortFaults f = fabric->node(node).port(q).faults.value_or(fabric::PortFaults{});
          (what == "drop" ? f.drop : f.ber) = v;
          fabric->set_port_faults(node, q, f);
          fault_log.add(sim.now(), "faults on " + faults::port_name(fabric->topology(), {node, q}) +
                                       " (inject): " + faults::describe(f));
        };
        set(n, port);
        if (peer != topo::kNoNode) set(peer, pe.peer_port);
        return "ok\n";
      }
      if (what == "down" || what == "up") {
        fabric->set_link_state(pe.link, what == "up", sim.now());
        fault_log.add(sim.now(), "link " + what + ": " +
                                     faults::link_name(fabric->topology(), pe.link) + " (inject)");
        clock->due = true;
        return "ok\n";
      }
      return "error: inject wants drop P, ber B, down or up\n";
    }
    return "error: unknown request '" + cmd + "'\n";
  }

  void handle_queue() {
    std::deque<Request> q;
    {
      std::lock_guard g(mu);
      q.swap(queue);
      control.pending.store(false, std::memory_order_seq_cst);
    }
    for (auto& r : q) {
      switch (r.kind) {
        case Request::kAttach:
          do_attach(r);
          break;
        case Request::kHangup:
          do_hangup(r.sock);
          break;
        case Request::kControl: {
          const std::string ans = do_control(r.text);
          send(r.sock, ans.data(), ans.size(), MSG_NOSIGNAL);
          close(r.sock);
          break;
        }
      }
    }
  }

  void run() {
    while (!stopping.load()) {
      driver.run_until([this] { return control.pending.load(std::memory_order_seq_cst); },
                       kNoDeadline);
      handle_queue();
    }
  }
};

FabricDaemon::FabricDaemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FabricDaemon::~FabricDaemon() = default;
void FabricDaemon::run() {
  impl_->run();
}
void FabricDaemon::stop() {
  impl_->stop();
}
std::size_t FabricDaemon::hca_count() const {
  return impl_->hcas.size();
}
const sm::BringUpReport& FabricDaemon::bring_up_report() const {
  return impl_->report;
}

Result<std::unique_ptr<FabricDaemon>, std::string> FabricDaemon::create(
    const topo::Topology& topo, const DaemonOptions& options) {
  auto d = std::make_unique<Impl>();
  d->opt = options;
  if (const char* w = std::getenv("WEFT_FABRIC_WAKE_RECORDS"); w && *w)
    d->opt.wake_sender_records = std::strtoul(w, nullptr, 10);
  fabric::FabricConfig fc = options.fabric;
  fc.sm_managed = true;
  fc.mode = fabric::DataMode::kVerified;
  d->fabric = std::make_unique<fabric::Fabric>(d->sim, topo, fc);
  d->hcas = d->fabric->hcas();
  if (options.cross_host) {
    Impl* self = d.get();
    auto ch = CrossHost::create(
        *d->fabric, *options.cross_host,
        [self] {
          const std::int64_t w = static_cast<std::int64_t>(io::monotonic_ns()) + self->delta;
          return std::max(self->sim.now(), static_cast<TimeNs>(std::max<std::int64_t>(w, 0)));
        },
        [self] {
          if (self->clock) self->clock->due = true;
        });
    if (!ch.ok()) return ch.error();
    d->cross = std::move(ch).value();
    std::erase_if(d->hcas, [&](topo::NodeId n) { return !d->cross->local(n); });
  }
  for (topo::NodeId n : d->hcas) {
    d->pipes.push_back(std::make_unique<Pipe>());
    d->pipes.back()->index = static_cast<std::uint32_t>(d->pipes.size() - 1);
    d->pipes.back()->order_tx.assign(d->hcas.size(), 0);
    d->pipes.back()->order_rx.assign(d->hcas.size(), 0);
    d->pipes.back()->to_fabric_max = std::max<std::size_t>(options.to_fabric_packets_max, 1);
    d->pipes.back()->to_client_max = std::max<std::size_t>(options.to_client_packets_max, 1);
    DeviceConfig dc;
    dc.name = "relay";
    dc.node_guid = topo.node(n).guid;
    auto face = std::make_unique<FabricFace>(dc, *d->pipes.back(), d->lids);
    FabricFace* f = face.get();
    d->fabric->hca(n).replace_device(std::move(face));
    d->fabric->hca(n).set_wire_swap(
        [f](std::vector<std::uint8_t>& bytes) { return f->swap_wire(bytes); });
    Pipe* pipe = d->pipes.back().get();
    Impl* self = d.get();
    pipe->hca = &d->fabric->hca(n);
    pipe->hca->set_rx_gate([pipe, self] {
      if (pipe->rx_gate_open()) return true;
      self->lids.any_held = true;
      if (pipe->hold_since == 0) pipe->hold_since = io::monotonic_ns();
      return false;
    });
    pipe->resume_rx = [pipe, self] {
      pipe->resume_due = true;
      self->lids.any_held = true;
      self->clock->due = true;
    };
  }
  if (d->cross) {
    // The SM waits for the crossing links (advance() starts it); its SMPs cross the tunnel, so
    // an attempt gets more time than on one host.
    d->opt.sm.sm.timeout_ns = std::max<TimeNs>(d->opt.sm.sm.timeout_ns, 20'000'000);
    topo::NodeId smn = options.sm.sm_node;
    for (topo::NodeId n = 0; smn == topo::kNoNode && n < topo.node_count(); ++n)
      if (!topo.node(n).is_switch()) smn = n;
    if (smn != topo::kNoNode && d->cross->local(smn)) {
      d->sm_node = smn;
      d->sm_start_wall = io::monotonic_ns() + options.cross_host->sm_wait_ns;
    }
    d->report.ok = true;
  } else {
    d->report = sm::bring_up(*d->fabric, options.sm, d->sm_);
    if (!d->report.ok) return "subnet bring-up failed: " + d->report.error;
  }
  if (d->sm_) d->sm_node = d->sm_->node();
  {
    Impl* self = d.get();
    d->gsi = std::make_unique<GsiRelay>(
        *d->fabric, d->hcas, options.sa, [self](std::size_t h, const cm::GsiMad& in) {
          Pipe& pipe = *self->pipes[h];
          if (!pipe.attached) return false;
          // The MAD as the UD packet that reached the HCA's QP1 (LRH SLID = its sender).
          TxPacket pkt;
          cm::gsi_packet(in.lid, pipe.lid, in.mad, pkt);
          std::vector<std::uint8_t> b(pkt.wire_bytes());
          pkt.write_to(b);
          pipe.gsi_in++;
          self->fabric->device(self->hcas[h])
              .on_packet(std::span<const std::uint8_t>(b), self->sim.now());
          return true;
        });
    d->gsi->set_sa_node(d->sm_node);
  }
  Impl* self = d.get();
  d->lids.release = [self] {
    self->lids.any_stalled = false;
    for (std::size_t i = 0; i < self->pipes.size(); ++i)
      if (self->pipes[i]->stalled) {
        self->pipes[i]->stalled = false;
        self->fabric->kick(self->hcas[i]);
        self->clock->due = true;
      }
  };
  d->sm_ctl = std::make_unique<Impl::SmCtl>(*d);
  const std::string path = "weft/fabric/" + options.name;
  d->listen_fd = proto::listen_abstract(path);
  if (d->listen_fd < 0)
    return std::string(errno == EADDRINUSE ? "a fabric named '" + options.name + "' is running"
                                           : "cannot bind " + path + ": " + std::strerror(errno));
  d->ctl_fd = proto::listen_abstract(path + "/ctl");
  if (d->ctl_fd < 0) return "cannot bind " + path + "/ctl: " + std::strerror(errno);
  d->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  d->delta =
      static_cast<std::int64_t>(d->sim.now()) - static_cast<std::int64_t>(io::monotonic_ns());
  d->clock = std::make_unique<Impl::Clock>(*d);
  d->start_wall = io::monotonic_ns();
  d->schedule_faults(options.faults);
  if (d->forwarding_possible()) {
    std::random_device rd;
    while (d->lids.forward_key == 0) d->lids.forward_key = std::uint64_t{rd()} << 32 | rd();
    d->lids.forward_on = true;
  }
  d->driver.attach(*d->clock, d->control);
  if (d->cross) d->driver.attach(d->cross->device(), d->cross->medium());
  Impl* raw = d.get();
  d->acceptor = std::thread([raw] { raw->accept_main(); });
  log()->info("fabric {}: {} nodes, {} HCAs, subnet up in {} virtual ns", options.name,
              topo.node_count(), d->hcas.size(), d->report.virtual_ns);
  return std::unique_ptr<FabricDaemon>(new FabricDaemon(std::move(d)));
}

bool control(const std::string& name, const std::string& request, std::string& answer,
             TimeNs timeout_ns) {
  const int s = proto::connect_abstract("weft/fabric/" + name + "/ctl");
  if (s < 0) {
    answer = "no fabric named '" + name + "' is running";
    return false;
  }
  if (send(s, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(s);
    answer = "cannot send the request";
    return false;
  }
  if (!proto::wait_readable(s, timeout_ns)) {
    close(s);
    answer = "the daemon did not answer";
    return false;
  }
  answer.assign(1 << 20, '\0');
  const ssize_t n = recv(s, answer.data(), answer.size(), 0);
  close(s);
  if (n <= 0) {
    answer = "the daemon closed the connection";
    return false;
  }
  answer.resize(static_cast<std::size_t>(n));
  return true;
}

}  // namespace weft::fabricd
