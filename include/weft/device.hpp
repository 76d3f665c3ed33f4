// weft/device.hpp — an emulated HCA and its verbs objects, driven sans-IO.
//
// A Device is a pure state machine, like ngtcp2's connection: packets in through on_packet(),
// packets out through poll_transmit(), time in through on_deadline(); work in through post_send /
// post_recv, work out as completions in CQs. It reads no clock, starts no thread, does no I/O;
// randomness comes from the injected Rng. The emulator drives it in virtual time, live media
// with the monotonic clock — the same code in both.
//
// Ownership: the Device owns every object it creates (PD, MR, CQ, SRQ, QP, AH) and hands out
// plain pointers that stay valid until the matching destroy call or the Device's destruction.
// Thread-safety: none; one owner thread per Device (checked in debug builds by the caller).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weft/types.hpp>
#include <weft/verbs.hpp>

namespace weft {

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  virtual std::uint32_t handle() const = 0;
};

// Registered over caller memory (IBA 10.6): the Device never copies or frees it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::uint32_t lkey() const = 0;
  virtual std::uint32_t rkey() const = 0;
  virtual std::uint8_t* addr() const = 0;
  virtual std::size_t length() const = 0;
  virtual std::uint32_t access() const = 0;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Moves up to out.size() completions into out, oldest first; returns how many.
  virtual std::size_t poll(std::span<WorkCompletion> out) = 0;
  virtual std::uint32_t depth() const = 0;
  virtual std::size_t size() const = 0;  // completions waiting
  // IBA 11.4.2.1 / 10.10.2.3: a CQ that overruns is in error; it raises a CQ error event and
  // the QPs that complete into it go to the error state.
  virtual bool overrun() const = 0;
};

class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  virtual Errc post_recv(const RecvWr& wr) = 0;
  virtual std::size_t outstanding() const = 0;
};

class AddressHandle {
 public:
  virtual ~AddressHandle() = default;
  virtual const AddressVector& av() const = 0;
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual std::uint32_t qp_num() const = 0;
  virtual QpType type() const = 0;
  virtual QpState state() const = 0;
  // IBA 11.2.5: a transition with a missing, extra or out-of-range attribute returns an error
  // and changes nothing.
  virtual Errc modify(const QpAttr& attr, std::uint32_t attr_mask) = 0;
  virtual QpAttr query() const = 0;
  // Validates fully before queuing: an error return means nothing was queued.
  virtual Errc post_send(const SendWr& wr) = 0;
  virtual Errc post_recv(const RecvWr& wr) = 0;
  // A list of work requests (ibv_post_send's list): posted in order exactly as post_send of each
  // in turn would post them, stopping at the first that fails. Returns that error (kOk when all
  // were queued) and sets `posted` to how many were queued. One call per burst lets the QP make
  // its state checks once.
  virtual Errc post_send_burst(std::span<const SendWr> wrs, std::size_t& posted) {
    for (posted = 0; posted < wrs.size(); ++posted)
      if (Errc e = post_send(wrs[posted]); e != Errc::kOk) return e;
    return Errc::kOk;
  }
  // The same for receives (ibv_post_recv's list).
  virtual Errc post_recv_burst(std::span<const RecvWr> wrs, std::size_t& posted) {
    for (posted = 0; posted < wrs.size(); ++posted)
      if (Errc e = post_recv(wrs[posted]); e != Errc::kOk) return e;
    return Errc::kOk;
  }
};

// Asynchronous events (IBA 11.6.3): fatal QP errors, CQ errors, port changes.
enum class AsyncEventType : std::uint8_t {
  kQpFatal,    // the QP went to ERR on its own (retry exceeded, remote error, ...)
  kSqDrained,  // SQD reached with nothing outstanding
  kCqError,    // CQ overrun
  kQpLastWqeReached,
  kPortActive,
  kPortError,
};
std::string_view to_string(AsyncEventType t);

struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kQpFatal;
  std::uint32_t qp_num = 0;   // for QP events
  std::uint8_t port_num = 0;  // for port events
};

// Which CRCs the Device computes. kCompute: ICRC and VCRC are computed on transmit and checked
// on receive (the verified fabric). kModel: they are not computed; a medium that corrupts packets
// says so through TxPacket::corrupt instead (timing-only runs, one-copy shared memory).
enum class CrcMode : std::uint8_t { kCompute, kModel };

enum class PortState : std::uint8_t { kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };

struct PortConfig {
  std::uint16_t lid = 0;
  std::uint8_t lmc = 0;
  PortState state = PortState::kActive;  // the foundation runs without an SM
  Mtu max_mtu = Mtu::k4096;
  std::vector<std::uint16_t> pkeys{0xFFFF};  // P_Key table; index 0 is the default full member
  std::array<std::uint8_t, 16> gid{};        // GID index 0
};

struct DeviceConfig {
  std::string name = "weft0";
  std::uint64_t node_guid = 0;
  std::vector<PortConfig> ports{PortConfig{}};  // ports are numbered from 1
  CrcMode crc = CrcMode::kCompute;
  std::uint32_t ack_coalesce_max = 4;      // responder: ACK at least every this many packets
  std::uint32_t ooo_window_packets = 256;  // selective repeat: packets buffered past a gap
  // Delayed ACKs (IBA 9.7.5.1.1 allows coalescing): 0 = off. Otherwise the responder acknowledges
  // a request that did not ask for an ACK at the latest this long after it came (or with a later
  // ACK), and the requester asks for one (AckReq) only where its application waits for it: the
  // end of a signaled or credit-consuming message, and every 32 packets of a stream — not merely
  // because a packet ends what is queued. Unsignaled traffic (a ping-pong) then carries one ACK
  // per ack_coalesce_max packets instead of one per message. Both ends must set it: a requester
  // with it on and a responder with it off leaves a queue's unsignaled tail to the retry timer.
  TimeNs ack_delay_ns = 0;
};

// One packet leaving the Device: serialized headers plus a reference to the payload.
// Valid until the next call into the Device. A medium that delivers later must copy it
// (write_to), since the payload points into registered memory that may change or go away.
struct TxPacket {
  // LRH(8) + GRH(40) + BTH(12) + the largest extension set (28) rounds up to 96.
  static constexpr std::size_t kHeaderBytesMax = 96;
  std::array<std::uint8_t, kHeaderBytesMax> headers{};
  std::uint16_t header_bytes = 0;
  const std::uint8_t* payload = nullptr;
  std::uint32_t payload_bytes = 0;
  std::uint8_t pad_bytes = 0;  // BTH PadCnt: payload + pad is a multiple of 4
  std::uint32_t icrc = 0;      // valid when crcs_valid
  std::uint16_t vcrc = 0;      // valid when crcs_valid
  bool crcs_valid = false;
  bool corrupt = false;       // set by a medium in CrcMode::kModel to stand for a CRC failure
  std::uint8_t port_num = 1;  // the Device port it leaves from
  std::uint16_t dlid = 0;     // copy of LRH.DLID, for routing without parsing
  std::uint8_t sl = 0;

  // Bytes on the wire: headers, payload, pad, ICRC (4) and VCRC (2).
  std::size_t wire_bytes() const {
    return std::size_t{header_bytes} + payload_bytes + pad_bytes + 6;
  }
  // Writes the whole wire image; out must hold wire_bytes(). Returns bytes written.
  std::size_t write_to(std::span<std::uint8_t> out) const;
};

// Counters a Device keeps. Everything a test or a user needs to see what happened.
struct DeviceCounters {
  // packets
  std::uint64_t tx_packets = 0, rx_packets = 0, tx_bytes = 0, rx_bytes = 0;
  // receive-side drops, by reason (IBA 9.6 / 9.9 / 10.9)
  std::uint64_t rx_malformed = 0;  // failed to parse (truncated, bad version, bad length)
  std::uint64_t rx_bad_icrc = 0, rx_bad_vcrc = 0;
  std::uint64_t rx_bad_pkey = 0;  // P_Key mismatch: dropped (IBA 10.9.3)
  std::uint64_t rx_bad_qkey = 0;  // UD Q_Key mismatch: dropped
  std::uint64_t rx_no_qp = 0;     // no such QP, or QP in a state that accepts nothing
  std::uint64_t rx_bad_dlid = 0;
  std::uint64_t rx_dropped_ooo = 0;   // out of sequence, dropped (go-back-N) or beyond window
  std::uint64_t rx_buffered_ooo = 0;  // selective repeat: accepted past a gap
  std::uint64_t rx_ud_no_wqe = 0;     // UD datagram dropped: no receive WQE posted (IBA 9.8.3)
  // requester
  std::uint64_t retransmit_packets = 0;
  std::uint64_t timeouts = 0;       // transport timer expiries
  std::uint64_t rnr_waits = 0;      // RNR NAKs acted on
  std::uint64_t credit_stalls = 0;  // a SEND held back for lack of end-to-end credits
  std::uint64_t retry_exc = 0, rnr_retry_exc = 0;
  std::uint64_t naks_rx_seq = 0, naks_rx_rnr = 0, naks_rx_access = 0, naks_rx_inv = 0,
                naks_rx_op = 0;
  // responder
  std::uint64_t naks_tx_seq = 0, naks_tx_rnr = 0, naks_tx_access = 0, naks_tx_inv = 0,
                naks_tx_op = 0;
  std::uint64_t acks_tx = 0;
  std::uint64_t dup_requests = 0;  // duplicate PSNs re-acknowledged
  std::uint64_t dup_reads_replayed = 0;
  std::uint64_t dup_atomics_replayed = 0;
  // completions
  std::uint64_t completions = 0, completions_error = 0, flushed_wrs = 0;
  std::uint64_t cq_overruns = 0;
};

// Optional hook for media whose packets carry their payload by reference into another address
// space (src/io/shm's zero copy): while set on a Device, the payload pointer of a packet given to
// on_packet(const TxPacket&) is an address in the sending process, and every payload byte the
// engines would copy from it goes through place() instead. A medium may defer the copies and
// must complete them (its own flush) before it calls poll_transmit again or lets anyone look at
// a completion, so no acknowledgement or completion overtakes its data.
class RemotePayload {
 public:
  virtual ~RemotePayload() = default;
  virtual void place(std::uint8_t* dst, const std::uint8_t* remote_src, std::size_t len) = 0;
  // Completes the copies placed so far now: the engine is about to read bytes it placed (a
  // selective-repeat responder draining packets it buffered earlier in the same burst).
  virtual void complete() {}
};

class Device {
 public:
  virtual ~Device() = default;
  // The Device keeps a reference to rng; it must outlive the Device.
  static std::unique_ptr<Device> create(const DeviceConfig& config, Rng& rng);

  virtual const DeviceConfig& config() const = 0;
  virtual std::uint64_t node_guid() const = 0;
  virtual std::uint16_t lid(std::uint8_t port_num = 1) const = 0;
  virtual Errc set_port_lid(std::uint8_t port_num, std::uint16_t lid) = 0;
  virtual Errc set_port_state(std::uint8_t port_num, PortState state) = 0;

  // ---- objects ------------------------------------------------------------------------------
  virtual Result<ProtectionDomain*, Errc> alloc_pd() = 0;
  virtual Result<MemoryRegion*, Errc> reg_mr(ProtectionDomain* pd, void* addr, std::size_t length,
                                             std::uint32_t access) = 0;
  virtual Result<CompletionQueue*, Errc> create_cq(std::uint32_t depth) = 0;
  virtual Result<SharedReceiveQueue*, Errc> create_srq(ProtectionDomain* pd, std::uint32_t max_wr,
                                                       std::uint32_t max_sge) = 0;
  virtual Result<QueuePair*, Errc> create_qp(const QpInitAttr& attr) = 0;
  virtual Result<AddressHandle*, Errc> create_ah(ProtectionDomain* pd, const AddressVector& av) = 0;
  // Fail with kBusy while something still uses the object (an MR of a PD, a QP of a CQ).
  virtual Errc destroy_qp(QueuePair* qp) = 0;
  virtual Errc destroy_cq(CompletionQueue* cq) = 0;
  virtual Errc destroy_srq(SharedReceiveQueue* srq) = 0;
  virtual Errc dereg_mr(MemoryRegion* mr) = 0;
  virtual Errc destroy_ah(AddressHandle* ah) = 0;
  virtual Errc dealloc_pd(ProtectionDomain* pd) = 0;

  // ---- sans-IO ------------------------------------------------------------------------------
  // A whole packet as it came off the wire (LRH .. VCRC). Malformed packets are dropped and
  // counted; this never reads outside `wire`.
  virtual void on_packet(std::span<const std::uint8_t> wire, TimeNs now) = 0;
  // The same packet by reference (headers + payload pointer), for media that move the payload
  // once. CRCs are checked when pkt.crcs_valid; pkt.corrupt drops it as a CRC failure.
  virtual void on_packet(const TxPacket& pkt, TimeNs now) = 0;
  // The next packet to send, if any. Call until it returns false.
  virtual bool poll_transmit(TimeNs now, TxPacket& out) = 0;
  // Bursts (DPDK's tx_burst/rx_burst): the same packets, in the same order, as that many
  // poll_transmit calls, or on_packet of each packet in turn, would give or take — one call per
  // burst, so the Device makes its per-QP checks once per burst instead of once per packet.
  // poll_transmit_burst fills up to out.size() packets and returns how many (fewer: nothing more
  // to send now, or a packet whose payload is not stable ended the burst, see payload_stable);
  // every one of them stays valid until the next call into the Device.
  virtual std::size_t poll_transmit_burst(TimeNs now, std::span<TxPacket> out) {
    std::size_t n = 0;
    while (n < out.size() && poll_transmit(now, out[n]))
      if (!payload_stable(out[n++])) break;
    return n;
  }
  virtual void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) {
    for (const TxPacket& p : pkts) on_packet(p, now);
  }
  // The earliest time on_deadline must be called, or kNoDeadline.
  virtual TimeNs next_deadline() const = 0;
  virtual void on_deadline(TimeNs now) = 0;

  virtual bool poll_async_event(AsyncEvent& out) = 0;
  virtual const DeviceCounters& counters() const = 0;

  // ---- cross-process payloads (see RemotePayload) -------------------------------------------
  // nullptr restores ordinary (local) payloads.
  virtual void set_remote_payload(RemotePayload* rp) = 0;
  // False when pkt's payload lives in a scratch buffer the next poll_transmit may overwrite (a
  // gather across SGEs); true when it stays put until the packet is acknowledged (registered
  // memory, a WQE's inline copy), so a peer may read it later by reference.
  virtual bool payload_stable(const TxPacket& pkt) const = 0;
};

}  // namespace weft
