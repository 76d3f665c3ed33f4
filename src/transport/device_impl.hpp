// transport/device_impl.hpp — the Device (an HCA, IBA chapter 10/11 verbs consumer interface)
// behind <weft/device.hpp>: object tables, packet dispatch (LID, QPN, P_Key checks, IBA 9.6 /
// 10.9), the transmit scheduler (a ready ring of QPs), timers, counters and async events.
//
// Lifetime: owns every object it creates. Thread-safety: one owner thread.
#pragma once

#include <bit>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include <weft/device.hpp>

#include "src/transport/objects.hpp"
#include "src/transport/qp.hpp"
#include "src/wire/packet.hpp"

namespace weft::transport {

inline constexpr std::uint32_t kQpnFirst = 2;  // QP0 and QP1 are the management QPs (IBA 10.2.4.1)
inline constexpr std::uint32_t kQpMax = 1u << 16;
inline constexpr std::uint32_t kMrMax = 1u << 20;
inline constexpr std::size_t kAsyncEventsMax = 4096;

// The ICRC and VCRC fields are stored low byte first (wire::put_icrc / put_vcrc); these are the
// same as single loads and stores (the wire functions go byte by byte, out of line), for the
// byte path's every packet.
inline std::uint32_t load_le32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return std::endian::native == std::endian::little ? v : __builtin_bswap32(v);
}
inline std::uint16_t load_le16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return std::endian::native == std::endian::little ? v : __builtin_bswap16(v);
}
// The headers' big-endian fields (IBA 9.2: most significant byte first) as single loads: GCC
// does not merge a byte loop into one (the RETH's 8-byte VA took ~48 instructions that way).
inline std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return std::endian::native == std::endian::little ? __builtin_bswap64(v) : v;
}
inline std::uint32_t load_be32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return std::endian::native == std::endian::little ? __builtin_bswap32(v) : v;
}
inline void store_le32(std::uint8_t* p, std::uint32_t v) {
  if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline void store_le16(std::uint8_t* p, std::uint16_t v) {
  if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}

class DeviceImpl final : public Device {
 public:
  DeviceImpl(const DeviceConfig& config, Rng& rng);
  ~DeviceImpl() override;

  const DeviceConfig& config() const override { return config_; }
  std::uint64_t node_guid() const override { return config_.node_guid; }
  std::uint16_t lid(std::uint8_t port_num) const override;
  Errc set_port_lid(std::uint8_t port_num, std::uint16_t lid) override;
  Errc set_port_state(std::uint8_t port_num, PortState state) override;

  Result<ProtectionDomain*, Errc> alloc_pd() override;
  Result<MemoryRegion*, Errc> reg_mr(ProtectionDomain* pd, void* addr, std::size_t length,
                                     std::uint32_t access) override;
  Result<CompletionQueue*, Errc> create_cq(std::uint32_t depth) override;
  Result<SharedReceiveQueue*, Errc> create_srq(ProtectionDomain* pd, std::uint32_t max_wr,
                                               std::uint32_t max_sge) override;
  Result<QueuePair*, Errc> create_qp(const QpInitAttr& attr) override;
  Result<AddressHandle*, Errc> create_ah(ProtectionDomain* pd, const AddressVector& av) override;
  Errc destroy_qp(QueuePair* qp) override;
  Errc destroy_cq(CompletionQueue* cq) override;
  Errc destroy_srq(SharedReceiveQueue* srq) override;
  Errc dereg_mr(MemoryRegion* mr) override;
  Errc destroy_ah(AddressHandle* ah) override;
  Errc dealloc_pd(ProtectionDomain* pd) override;

  void on_packet(std::span<const std::uint8_t> wire, TimeNs now) override;
  void on_packet(const TxPacket& pkt, TimeNs now) override;
  bool poll_transmit(TimeNs now, TxPacket& out) override;
  std::size_t poll_transmit_burst(TimeNs now, std::span<TxPacket> out) override;
  void on_packet_burst(std::span<const TxPacket> pkts, TimeNs now) override;
  TimeNs next_deadline() const override;
  void on_deadline(TimeNs now) override;
  bool poll_async_event(AsyncEvent& out) override;
  const DeviceCounters& counters() const override { return counters_; }
  void set_remote_payload(RemotePayload* rp) override { remote_payload_ = rp; }
  bool payload_stable(const TxPacket& pkt) const override {
    const auto p = reinterpret_cast<std::uintptr_t>(pkt.payload);
    const auto b = reinterpret_cast<std::uintptr_t>(bounce_.data());
    return p < b || p >= b + bounce_.size();
  }

  struct TimerEntry {  // the timer heap's element
    TimeNs at;
    std::uint32_t qpn;
  };

  // ---- for the engines ----
  // Inline: on every post and every RDMA request.
  MrImpl* find_mr(std::uint32_t key) const {
    const std::uint32_t index = key >> 8;
    if (index == 0 || index >= mrs_.size()) return nullptr;
    MrImpl* mr = mrs_[index].get();
    return (mr && mr->lkey() == key) ? mr : nullptr;
  }
  // The AH `ah` names if this Device created it and it still exists (by identity: a stale or
  // foreign pointer is never dereferenced), else nullptr.
  const AhImpl* find_ah(const AddressHandle* ah);
  // Validates a local gather/scatter list (IBA 10.6.3.2 L_Key checks).
  Errc check_sges(const PdImpl* pd, std::span<const Sge> sges, std::uint32_t need_access) const {
    for (const Sge& s : sges) {
      const MrImpl* mr = find_mr(s.lkey);
      if (!mr || mr->pd_ != pd) return Errc::kBadLkey;
      if (!mr->contains(s.addr, s.length)) return Errc::kSgeOutOfRange;
      if ((mr->access() & need_access) != need_access) return Errc::kAccessDenied;
    }
    return Errc::kOk;
  }
  // Pushes a completion; an overrun marks the CQ, raises kCqError and errors the QPs on it.
  void push_cqe(CqImpl* cq, const WorkCompletion& wc);
  // In-place form of push_cqe for the common case: the CQ slot to fill, or nullptr when push_cqe
  // must take the completion (the CQ is full or in error). After filling every field,
  // commit_cqe(cq, status) appends it and counts it as push_cqe would.
  WorkCompletion* cqe_slot(CqImpl* cq) { return cq->overrun_ ? nullptr : cq->slot(); }
  void commit_cqe(CqImpl* cq, WcStatus status) {
    if (status == WcStatus::kWrFlushErr) ++counters_.flushed_wrs;
    cq->commit();
    ++counters_.completions;
    if (status != WcStatus::kSuccess) ++counters_.completions_error;
  }
  void raise(AsyncEventType type, std::uint32_t qpn, std::uint8_t port = 0);
  // Called after a QP's rto/rnr/ACK deadline was set: keeps the timer heap's invariant (an entry
  // at or before every QP's next_deadline()). Cheap when the deadline moved later (the common
  // re-arm): nothing moves; the entry is found stale and moved down when it surfaces.
  void note_deadline(QpImpl& qp) {
    const TimeNs d = qp.next_deadline();
    if (d >= qp.timer_entry_at_) return;
    qp.timer_entry_at_ = d;
    timer_earlier(qp, d);
  }
  void schedule(QpImpl& qp);
  // Encodes headers and fills the packet (lengths, pad, CRCs in kCompute, counters).
  void finish_packet(wire::Headers& h, const std::uint8_t* payload, std::uint32_t payload_bytes,
                     std::uint8_t port_num, TxPacket& out);
  // The tail of finish_packet for headers already encoded into out.headers (header_bytes set):
  // payload, pad, routing copies, CRCs in kCompute, counters.
  void finish_encoded(const std::uint8_t* payload, std::uint32_t payload_bytes,
                      std::uint8_t pad_bytes, std::uint8_t port_num, TxPacket& out) {
    out.payload = payload;
    out.payload_bytes = payload_bytes;
    out.pad_bytes = pad_bytes;
    out.port_num = port_num;
    out.corrupt = false;
    if (config_.crc == CrcMode::kCompute) {
      compute_crcs(out);
    } else {
      out.icrc = 0;
      out.vcrc = 0;
      out.crcs_valid = false;
    }
    ++counters_.tx_packets;
    counters_.tx_bytes += out.wire_bytes();
  }
  // ICRC and VCRC of a finished packet (IBA 7.8), into out.icrc / out.vcrc.
  void compute_crcs(TxPacket& out) const;
  // Fills the routing part of the headers from an address vector.
  void fill_route(wire::Headers& h, const AddressVector& av, std::uint16_t pkey_index,
                  std::uint8_t port_num) const;
  // Scratch buffer for a payload that spans SGEs (the only copy on the send side).
  std::uint8_t* bounce(std::size_t bytes) {
    if (bounce_.size() < bytes) bounce_.resize(bytes);
    return bounce_.data();
  }
  // The P_Key tables are fixed at creation (QpImpl::pkey_ caches a QP's entry).
  std::uint16_t pkey_at(std::uint8_t port_num, std::uint16_t index) const {
    if (port_num == 0 || port_num > config_.ports.size()) return 0;
    const auto& t = config_.ports[port_num - 1].pkeys;
    return index < t.size() ? t[index] : 0;
  }

  DeviceConfig config_;
  Rng& rng_;
  std::uint64_t route_epoch_ = 1;  // bumped when a port's LID changes (QP header templates)
  RemotePayload* remote_payload_ = nullptr;  // set by a cross-process medium (src/io/shm)
  // The copy of a WRITE FIRST's payload, held by the responder's lean path (fast_write_first)
  // while on_packet_burst sets hold_first_copy_, for the receive_run that on_packet_burst calls
  // right after it: the MIDDLE packets' payloads follow it in the sender's memory, so the whole
  // message is placed with one copy (the FIRST's own 4 KiB copy cost ~1.5x its share of the
  // message's, perf on BM_WriteCrcModel/65536). Nothing reads or writes memory for the packet
  // stream in between; receive_run places it in every case.
  struct HeldCopy {
    std::uint8_t* dst = nullptr;
    const std::uint8_t* src = nullptr;
    std::uint64_t bytes = 0;
  };
  bool hold_first_copy_ = false;
  HeldCopy held_copy_{};
  TimeNs rx_now_ = 0;  // the `now` of the packet being received (delayed ACK deadlines)
  DeviceCounters counters_{};

 private:
  // The timer heap (timers_): QpImpl::timer_pos_ follows each QP's entry as it moves.
  // timer_earlier: the QP's entry at `at`, earlier than its entry (if any) was: moved up, or
  // inserted. timer_sift_down / timer_sift_up: entry e placed at or below / above position i.
  void timer_earlier(QpImpl& qp, TimeNs at) const;
  void timer_place(std::size_t i, TimerEntry e) const;
  void timer_sift_up(std::size_t i, TimerEntry e) const;
  void timer_sift_down(std::size_t i, TimerEntry e) const;
  void timer_pop_top() const;
  // Drops stale entries from the heap's top until it is a live QP's exact next deadline.
  void clean_timer_top() const;
  void dispatch(const wire::Headers& h, std::span<const std::uint8_t> payload,
                std::span<const std::uint8_t> grh_bytes, TimeNs now);
  // IBA 10.9.3: a packet's P_Key matches a table entry when the low 15 bits agree and at least
  // one of the two is a full member; the invalid P_Keys 0x0000 / 0x8000 never match.
  bool pkey_ok(const QpImpl& qp, std::uint16_t pkt_pkey) const {
    if ((pkt_pkey & 0x7FFF) == 0) return false;
    const std::uint16_t mine = qp.pkey_;
    if ((mine & 0x7FFF) != (pkt_pkey & 0x7FFF)) return false;
    return (mine & 0x8000) || (pkt_pkey & 0x8000);
  }
  // IBA 7.11.1 / 9.6.1.1: the DLID must name one of our active ports (under its LMC), or be the
  // permissive LID. Port 1 inline (the common case), the rest out of line.
  bool dlid_ok(std::uint16_t dlid) const {
    const PortConfig& p = config_.ports[0];
    const auto lmc_mask = static_cast<std::uint16_t>(~((1u << p.lmc) - 1));
    if (p.state == PortState::kActive && (dlid & lmc_mask) == (p.lid & lmc_mask)) return true;
    return dlid_ok_slow(dlid);
  }
  bool dlid_ok_slow(std::uint16_t dlid) const;
  // The lean receive path for packets without a GRH: SEND ONLY, WRITE MIDDLE/LAST (LRH + BTH),
  // WRITE FIRST (+ RETH) and positive ACKs (+ AETH) whose CRCs are checked or not to be
  // checked: the checks of parse_headers_to + dispatch, then resp_fast_request or
  // comp_fast_ack. False (nothing counted, nothing changed) sends the packet down the general
  // path. The first form takes the header bytes, the pad and the payload.
  [[gnu::always_inline]] inline bool fast_receive(const std::uint8_t* headers,
                                                  std::uint8_t pad_bytes,
                                                  std::span<const std::uint8_t> payload,
                                                  TimeNs now);
  [[gnu::always_inline]] inline bool fast_receive(const TxPacket& pkt, TimeNs now);
  // on_packet_burst's lean path: a request (not an ACK) fast_receive would take, with the
  // routing checks (DLID, QP, QP type, P_Key) skipped when the packet's routing fields equal those
  // of the last packet that passed them in this burst (`route`), and its ACK held in `ack`.
  struct BurstRoute {
    QpImpl* qp = nullptr;
    std::uint64_t lrh = 0, bth = 0;  // the routing bytes of the packet that found qp
  };
  [[gnu::always_inline]] inline bool fast_receive_burst(const TxPacket& pkt, BurstRoute& route,
                                                        DeferredAck& ack);
  // fast_receive_burst's routing checks: the RC QP the packet's LRH and BTH route it to (the
  // cached `route` when its routing bytes are the same, else found and cached), or nullptr.
  [[gnu::always_inline]] inline QpImpl* burst_route(const TxPacket& pkt, BurstRoute& route);
  // Once burst_route has routed the first of `pkts` to route.qp (any held ACK of another QP
  // flushed): the packets from the start that continue the QP's responder in a run — WRITE
  // MIDDLE packets inside the current WRITE (and the LAST ending it), or SEND ONLY packets each
  // into a posted receive with a free CQ slot — taken with the responder's state (ePSN, MSN,
  // bytes, ACK count, receive queue) in locals and stored back once. Exactly
  // fast_receive_burst's checks and effects for each packet it takes; it stops (returning how
  // many it took) at the first packet it is not sure of, which goes to fast_receive_burst.
  // Places held_copy_ first, or merges it into its run's copy.
  std::size_t receive_run(std::span<const TxPacket> pkts, const BurstRoute& route,
                          DeferredAck& ack);
  // on_packet(const TxPacket&) for what the lean path does not take.
  [[gnu::noinline]] void receive_general(const TxPacket& pkt, TimeNs now);

  std::vector<std::unique_ptr<PdImpl>> pds_;
  std::vector<std::unique_ptr<MrImpl>> mrs_;  // index = key >> 8
  std::vector<std::uint8_t> mr_variant_;
  std::vector<std::uint32_t> mr_free_;
  std::vector<std::unique_ptr<CqImpl>> cqs_;
  std::vector<std::unique_ptr<SrqImpl>> srqs_;
  std::vector<std::unique_ptr<AhImpl>> ahs_;
  std::unordered_map<const AddressHandle*, const AhImpl*> live_ahs_;  // the AHs of ahs_ by address
  std::vector<std::unique_ptr<QpImpl>> qps_;                          // index = QPN
  std::uint32_t next_pd_handle_ = 1;
  // QPNs with something to send, round robin: a power-of-two ring that doubles when full. A QP
  // is in it at most once (QpImpl::scheduled_), so it never holds more than the QP count.
  std::vector<std::uint32_t> ready_ = std::vector<std::uint32_t>(64);
  std::uint64_t ready_head_ = 0, ready_tail_ = 0;
  // Min-heap of (deadline, QPN), so next_deadline()/on_deadline() do not scan every QP; at most
  // one entry per QP (QpImpl::timer_pos_), so it never holds more than the QP count. Entries
  // are lazy: a QP whose deadline moved later or went away leaves its entry, which is moved down
  // to the QP's real deadline (or dropped) when it reaches the top; a deadline moved earlier
  // moves the entry up. (With a new entry pushed for each earlier deadline, the entries left
  // behind at a deadline the QP still had were each taken for live at the top: a ping-pong with
  // delayed ACKs left one per 4 round trips until they fell due, ~16,000 at a 64 ms RTO, and
  // each push sifted through them.) Destroyed QPs' entries (QPNs are not reused) are dropped
  // at the top. Mutable: next_deadline() is const and cleans the top to return an exact answer.
  mutable std::vector<TimerEntry> timers_;
  std::vector<std::uint32_t> due_;  // on_deadline scratch
  std::deque<AsyncEvent> events_;
  std::vector<std::uint8_t> bounce_;
};

// WcOpcode of a send WR's completion, by WrOpcode.
inline constexpr WcOpcode kSendWcOpcode[] = {
    WcOpcode::kSend,     WcOpcode::kSend,     WcOpcode::kRdmaWrite, WcOpcode::kRdmaWrite,
    WcOpcode::kRdmaRead, WcOpcode::kCompSwap, WcOpcode::kFetchAdd};
static_assert(static_cast<int>(WrOpcode::kAtomicFetchAndAdd) == 6);

inline void QpImpl::complete_send_ok(const SendWqe& w) {
  if (!w.signaled) return;
  auto* cq = static_cast<CqImpl*>(init_.send_cq);
  WorkCompletion* wc = dev_->cqe_slot(cq);
  if (wc == nullptr) {
    complete_send(w, WcStatus::kSuccess);  // full or in error: push_cqe's overrun
    return;
  }
  *wc = wc_tmpl_;
  wc->wr_id = w.wr_id;
  wc->opcode = kSendWcOpcode[static_cast<unsigned>(w.opcode)];
  wc->byte_len = w.total_bytes;
  dev_->commit_cqe(cq, WcStatus::kSuccess);
}

inline void QpImpl::complete_recv_ok(std::uint64_t wr_id, std::uint32_t byte_len) {
  auto* cq = static_cast<CqImpl*>(init_.recv_cq);
  WorkCompletion* wc = dev_->cqe_slot(cq);
  if (wc == nullptr) {
    complete_recv(wr_id, WcStatus::kSuccess, WcOpcode::kRecv, byte_len, 0, 0);
    return;
  }
  *wc = wc_tmpl_;
  wc->wr_id = wr_id;
  wc->byte_len = byte_len;
  dev_->commit_cqe(cq, WcStatus::kSuccess);
}

}  // namespace weft::transport
