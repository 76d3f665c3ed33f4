// transport/qp.hpp — a queue pair (IBA 10.2.4, chapter 9 RC/UD transport) and the state its
// three engines share: the requester (requester.cpp, IBA 9.7.1-9.7.4 sending side), the responder
// (responder.cpp, IBA 9.7.5 receiving side) and the completer (completer.cpp, IBA 9.7.5.1 ACK
// processing, 9.7.6 timers, 10.8 completions). Verbs calls and the QP state machine
// (IBA 10.3, 11.2.5) are in qp.cpp, the attribute table of 11.2.5.3 in qp_attr_table.cpp.
//
// All queues are fixed-capacity rings allocated at create time: the hot paths allocate nothing.
// Lifetime: owned by DeviceImpl. Thread-safety: the Device's owner thread only.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <weft/device.hpp>

#include "src/transport/objects.hpp"
#include "src/wire/packet.hpp"

namespace weft::transport {

// ---- Named limits ---------------------------------------------------------------------------
inline constexpr std::uint32_t kRespQueueMax = 64;    // responses waiting to leave, per QP
inline constexpr std::uint32_t kResendQueueMax = 64;  // selective repeat: PSNs to resend
inline constexpr std::uint32_t kAtomicBytes = 8;

// A send WQE and the requester's bookkeeping for it. The fields a SEND or WRITE touches (post,
// the requester's packet build, the completer's ACK) fill exactly the first cache line and each
// WQE starts on one. In the old declaration order (136 bytes) they spread over two or three
// lines: a burst of 32 SENDs missed L1 on 41 more lines (callgrind's cache simulation of
// transport_profile send64: 175 -> 134 D1 misses per burst). The atomic operands and the UD
// destination, read only for those, come after.
inline constexpr std::size_t kCacheLineBytes = 64;  // x86-64 and most AArch64
struct alignas(kCacheLineBytes) SendWqe {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  bool signaled = false;
  bool fence = false;
  bool is_inline = false;
  bool solicited = false;
  bool credit_stalled = false;  // counted once in credit_stalls
  std::uint32_t num_sge = 0;
  std::uint32_t total_bytes = 0;
  std::uint32_t imm = 0;
  std::uint32_t rkey = 0;
  std::uint64_t remote_addr = 0;
  // Requester: PSNs this message occupies (a READ occupies one per response packet).
  std::uint32_t first_psn = 0, npkts = 0;
  // End-to-end credits (IBA 9.7.7.2): how many credit-consuming WQEs were posted before it.
  std::uint64_t cseq = 0;
  // The payload when it is contiguous (inline bytes, or all inside the first SGE), set at post
  // time so a packet's payload is this plus its offset; nullptr: gather across SGEs.
  const std::uint8_t* contiguous = nullptr;
  // ---- second cache line: atomics and UD only ----
  std::uint64_t compare_add = 0, swap = 0;
  // UD destination
  AddressVector av{};
  std::uint32_t remote_qpn = 0, remote_qkey = 0;
};
static_assert(offsetof(SendWqe, contiguous) + sizeof(SendWqe::contiguous) == kCacheLineBytes,
              "the SEND/WRITE fields of a WQE fill its first cache line");
// A WQE's byte fields (opcode, signaled, fence, is_inline, solicited, credit_stalled; bytes 6-7
// padding) as one 8-byte word, for the loops that write (post_send_burst) or test
// (req_poll_burst) several of them per WQE. Little-endian layout only; elsewhere field by field.
inline constexpr std::size_t kWqeFlagsOffset = offsetof(SendWqe, opcode);
inline constexpr bool kWqeFlagsWide = std::endian::native == std::endian::little &&
                                      sizeof(WrOpcode) == 1 &&
                                      offsetof(SendWqe, signaled) == kWqeFlagsOffset + 1 &&
                                      offsetof(SendWqe, fence) == kWqeFlagsOffset + 2 &&
                                      offsetof(SendWqe, is_inline) == kWqeFlagsOffset + 3 &&
                                      offsetof(SendWqe, solicited) == kWqeFlagsOffset + 4 &&
                                      offsetof(SendWqe, credit_stalled) == kWqeFlagsOffset + 5 &&
                                      offsetof(SendWqe, num_sge) == kWqeFlagsOffset + 8;

// Requester engine states (IBA 9.7.4; rxe_req.c's loop).
enum class ReqState : std::uint8_t {
  kIdle,          // nothing to send
  kSending,       // packets of a WQE are going out
  kWaitCredits,   // a SEND held for end-to-end credits (9.7.7.2)
  kWaitRdAtomic,  // max_rd_atomic READs/atomics outstanding (9.7.4.1.4 initiator depth)
  kWaitFence,     // a fenced WR waits for prior READs/atomics (10.8.3.3)
  kRnrWait,       // RNR NAK timer running (9.7.5.2.8)
  kDrained,       // SQD: nothing new starts
  kError,
};
std::string_view to_string(ReqState s);

// Responder engine states (IBA 9.7.5; rxe_resp.c).
enum class RespState : std::uint8_t {
  kIdle,     // between messages
  kInSend,   // inside a multi-packet SEND (a receive WQE is held)
  kInWrite,  // inside a multi-packet RDMA WRITE
  kError,
};
std::string_view to_string(RespState s);

// Completer engine states (IBA 9.7.5.1, 9.7.6; rxe_comp.c).
enum class CompState : std::uint8_t {
  kIdle,     // nothing outstanding
  kWaitAck,  // packets sent and not yet acknowledged; the retransmission timer runs
  kRnrWait,
  kError,
};
std::string_view to_string(CompState s);

// What the responder queues for sending back (rxe's resp_res + ACK state in one ring).
struct RespItem {
  enum class Kind : std::uint8_t { kAck, kNak, kAtomicAck, kReadResponse } kind = Kind::kAck;
  std::uint8_t syndrome = 0;  // kAck: filled at send time (credits); kNak: full syndrome
  std::uint32_t psn = 0;      // next PSN to send for read responses
  std::uint32_t msn = 0;
  std::uint64_t orig = 0;              // atomic
  const std::uint8_t* data = nullptr;  // read source in the responder's MR
  std::uint32_t len = 0, sent = 0;     // read bytes
};

// Responder resources (IBA 9.7.5.1.4 max_dest_rd_atomic): one per READ/atomic, so a duplicate
// READ is answered again and a duplicate atomic returns the saved result without running again.
struct RdAtomicRes {
  bool valid = false;
  bool atomic = false;
  std::uint32_t first_psn = 0, npkts = 0;
  std::uint64_t orig = 0;
};

// Selective repeat: a request kept while an earlier PSN is missing.
struct OooSlot {
  bool valid = false;
  std::uint32_t psn = 0;
  wire::Headers h{};
  std::uint32_t payload_bytes = 0;
  bool placed = false;  // the payload already went to its place (a WRITE whose offset is known)
};

class QpImpl final : public QueuePair {
 public:
  QpImpl(DeviceImpl* dev, std::uint32_t qpn, const QpInitAttr& init);
  ~QpImpl() override;

  std::uint32_t qp_num() const override { return qpn_; }
  QpType type() const override { return init_.type; }
  QpState state() const override { return state_; }
  Errc modify(const QpAttr& attr, std::uint32_t attr_mask) override;
  QpAttr query() const override;
  Errc post_send(const SendWr& wr) override;
  Errc post_recv(const RecvWr& wr) override;
  // Bursts: the state, the QP type and the scheduling once per burst; a WR the lean loop does not
  // take (inline, several SGEs, READ/atomic, an error) goes through post_send/post_recv.
  Errc post_send_burst(std::span<const SendWr> wrs, std::size_t& posted) override;
  Errc post_recv_burst(std::span<const RecvWr> wrs, std::size_t& posted) override;

  // ---- shared helpers (qp.cpp) ----
  // IBA 10.3.1 / 11.6.2: a fatal error completes `status` for the oldest WQE (if any), flushes
  // the rest, moves the QP to ERR and raises kQpFatal.
  void fatal(WcStatus status, bool send_side);
  void enter_error();  // flush both queues, state ERR (no event)
  void flush_all();
  void complete_send(const SendWqe& w, WcStatus status);
  void complete_recv(std::uint64_t wr_id, WcStatus status, WcOpcode op, std::uint32_t byte_len,
                     std::uint32_t imm, std::uint32_t wc_flags, std::uint32_t src_qp = 0,
                     std::uint16_t slid = 0, std::uint8_t sl = 0);
  // complete_send / complete_recv for a success, inline (device_impl.hpp): the CQ slot is written
  // from wc_tmpl_ and patched, the same fields as the general forms write.
  inline void complete_send_ok(const SendWqe& w);
  inline void complete_recv_ok(std::uint64_t wr_id, std::uint32_t byte_len);
  RecvQueue& recv_queue() { return init_.srq ? srq_rq() : rq_; }
  RecvQueue& srq_rq();
  bool uses_srq() const { return init_.srq != nullptr; }
  SendWqe& sq_at(std::uint64_t i) { return sq_[i & sq_mask_]; }
  // A send queue with every WQE completed starts again at its first slot (called when posting).
  // The positions are only counters (no WQE, packet or timer keeps one once its WQE completed:
  // sq_comp_ == sq_head_ makes all four equal), and an application that waits for its
  // completions before posting more (perftest's bursts, `weft perf`) then posts into the same
  // few cache lines instead of walking the whole ring: send64's 1024-deep queue is 64 KiB of
  // WQEs, more than L1, so each burst of 32 started on 32 lines evicted since the last lap
  // (callgrind's cache simulation of transport_profile send64, 48 KiB L1: 81 -> 47 D1 misses
  // per burst). As CqImpl::poll does for a drained CQ.
  void rewind_sq_if_drained() {
    if (sq_comp_ == sq_head_) sq_head_ = sq_comp_ = sq_req_ = sq_launched_ = 0;
  }
  const Sge* sq_sges(std::uint64_t i) const { return &sq_sge_[(i & sq_mask_) * max_send_sge_]; }
  std::uint8_t* sq_inline(std::uint64_t i) { return &sq_inline_[(i & sq_mask_) * inline_max_]; }
  std::uint32_t mtu() const { return mtu_bytes(attr_.path_mtu); }
  bool can_transmit() const {
    if (respq_count_ > 0) return true;
    if (state_ != QpState::kRts && state_ != QpState::kSqd) return false;
    return resend_count_ > 0 || sq_req_ != sq_head_;
  }
  TimeNs next_deadline() const;

  DeviceImpl* dev_;
  std::uint32_t qpn_;
  QpInitAttr init_;
  QpState state_ = QpState::kReset;
  QpAttr attr_{};
  bool scheduled_ = false;  // in the Device's ready ring
  // The P_Key at attr_.pkey_index of attr_.port_num, kept by modify() (a Device's P_Key tables
  // are fixed at creation), so the receive check does not look it up per packet.
  std::uint16_t pkey_ = 0;
  // A successful receive completion of this QP but its wr_id and byte_len (qp_num, pkey_index;
  // the rest zero), kept by modify() with pkey_.
  WorkCompletion wc_tmpl_{};
  void update_wc_tmpl() {
    wc_tmpl_ = WorkCompletion{};
    wc_tmpl_.status = WcStatus::kSuccess;
    wc_tmpl_.opcode = WcOpcode::kRecv;
    wc_tmpl_.qp_num = qpn_;
    wc_tmpl_.pkey_index = attr_.pkey_index;
  }

  // Request header template (requester.cpp): this QP's LRH [GRH] BTH encoded once per route, so
  // a SEND/WRITE packet patches opcode, SE, PadCnt, AckReq, PSN and the lengths instead of
  // filling and encoding a wire::Headers. Valid while hdr_tmpl_bytes_ != 0 and the Device's
  // route epoch (bumped by set_port_lid) equals hdr_tmpl_epoch_; modify() clears it.
  static constexpr std::size_t kTmplBytesMax = wire::kLrhBytes + wire::kGrhBytes + wire::kBthBytes;
  std::array<std::uint8_t, kTmplBytesMax> hdr_tmpl_{};
  std::uint8_t hdr_tmpl_bytes_ = 0;
  std::uint64_t hdr_tmpl_epoch_ = 0;
  // Built with the template when it has no GRH: the whole LRH + BTH of a full-PMTU SEND MIDDLE
  // ([0]) and WRITE MIDDLE ([1]) packet, so such a packet patches only its PSN and AckReq.
  static constexpr std::size_t kMidHdrBytes = wire::kLrhBytes + wire::kBthBytes;
  std::array<std::array<std::uint8_t, kMidHdrBytes>, 2> mid_hdr_{};
  bool sq_drained_event_pending_ = false;

  // ---- send queue (requester + completer) ----
  std::vector<SendWqe> sq_;  // ring_slots(max_send_wr) slots, at most sq_depth_ in use
  std::uint64_t sq_mask_ = 0;
  std::uint32_t sq_depth_ = 0;  // max_send_wr
  std::vector<Sge> sq_sge_;
  std::vector<std::uint8_t> sq_inline_;
  std::uint32_t max_send_sge_ = 0, inline_max_ = 0;
  std::uint64_t sq_head_ = 0;      // next slot to post
  std::uint64_t sq_comp_ = 0;      // oldest WQE not yet completed
  std::uint64_t sq_req_ = 0;       // WQE the requester sends next
  std::uint64_t sq_launched_ = 0;  // one past the last WQE given PSNs

  // requester
  ReqState req_state_ = ReqState::kIdle;
  std::uint32_t req_psn_ = 0;  // PSN of the next request packet
  std::uint32_t rd_atomic_inflight_ = 0;
  std::uint64_t cseq_next_ = 0;     // credit-consuming WQEs posted
  std::uint64_t credit_limit_ = 0;  // may start credit-consuming WQEs with cseq < this
  bool credits_unlimited_ = false;  // AETH credit code 31 (SRQ at the responder)
  std::uint64_t cseq_acked_ = 0;    // credit-consuming WQEs acknowledged
  std::uint32_t psn_high_ = 0;      // first PSN never sent (below it, a send is a retransmission)
  std::uint32_t pkts_since_ackreq_ = 0;
  std::array<std::uint32_t, kResendQueueMax> resend_{};
  std::uint32_t resend_head_ = 0, resend_count_ = 0;

  // completer
  CompState comp_state_ = CompState::kIdle;
  std::uint32_t comp_psn_ = 0;  // oldest PSN not yet acknowledged
  TimeNs rto_deadline_ = kNoDeadline;
  TimeNs rnr_deadline_ = kNoDeadline;
  TimeNs timer_entry_at_ = kNoDeadline;  // its entry's deadline in the Device's timer heap
  static constexpr std::size_t kNoTimerPos = SIZE_MAX;
  std::size_t timer_pos_ = kNoTimerPos;  // its entry's index in that heap (one entry per QP)
  std::uint8_t retry_left_ = 0, rnr_retry_left_ = 0;
  std::uint32_t last_ack_psn_ = 0;
  bool gap_rewound_ = false;  // a read-response gap already triggered a rewind at comp_psn_

  // ---- receive side (responder) ----
  RecvQueue rq_;
  RespState resp_state_ = RespState::kIdle;
  std::uint32_t epsn_ = 0;     // expected request PSN
  std::uint32_t msn_ = 0;      // 24 bits
  bool seq_nak_sent_ = false;  // go-back-N: one NAK per gap (IBA 9.7.5.1.2)
  std::uint32_t since_ack_ = 0;
  // DeviceConfig::ack_delay_ns: when the ACK owed for requests accepted without one goes out.
  TimeNs ack_deadline_ = kNoDeadline;
  // current message
  RecvWqe cur_recv_{};
  std::vector<Sge> cur_sges_;
  bool have_recv_ = false;
  std::uint64_t msg_bytes_ = 0;  // bytes of the current SEND/WRITE received so far
  std::uint64_t write_va_ = 0;
  std::uint32_t write_len_ = 0;  // RETH DMA length
  std::uint8_t* write_dst_ = nullptr;
  bool write_imm_ = false;
  std::uint32_t msg_first_psn_ = 0;  // PSN of the current WRITE's first packet
  std::vector<RdAtomicRes> res_;
  std::uint32_t res_next_ = 0;
  std::array<RespItem, kRespQueueMax> respq_{};
  std::uint32_t respq_head_ = 0, respq_count_ = 0;
  bool resp_fatal_pending_ = false;  // go to ERR once the queued NAK is out
  WcStatus resp_fatal_status_ = WcStatus::kSuccess;
  // selective repeat
  std::vector<OooSlot> ooo_;
  std::vector<std::uint8_t> ooo_data_;
  std::uint32_t nak_high_ = 0;  // PSNs below this (and >= epsn_) have been NAKed once
  bool nak_high_valid_ = false;
};

// ---- engines --------------------------------------------------------------------------------
// queue_ack's queue part for an ACK whose responder-side effects (since_ack_ = 0, the MSN) were
// applied when it was decided: merged into an ACK waiting at the tail, or queued.
void resp_push_ack(QpImpl& qp, std::uint32_t psn, std::uint32_t msn);
// Delayed ACKs (DeviceConfig::ack_delay_ns): a request was accepted and no ACK queued for it;
// arms ack_deadline_ unless armed. resp_on_deadline queues the owed ACK when it is due.
void resp_owe_ack(QpImpl& qp);
void resp_on_deadline(QpImpl& qp, TimeNs now);
// An ACK the lean burst path decided on and holds until the burst's run of requests to this QP
// ends (on_packet_burst): the ACKs of one burst coalesce into the last one (IBA 9.7.5.1.1), and
// queued then they are exactly the ACK the per-packet path leaves in the response queue.
struct DeferredAck {
  QpImpl* qp = nullptr;
  std::uint32_t psn = 0, msn = 0;
  void flush() {
    if (qp == nullptr) return;
    resp_push_ack(*qp, psn, msn);
    qp = nullptr;
  }
};
// requester.cpp
bool req_poll(QpImpl& qp, TimeNs now, TxPacket& out);
// req_poll repeated up to out.size() times, for poll_transmit_burst while this QP is the only one
// ready and has no responses queued: exactly the packets and state changes of that many req_poll
// calls. Single-packet SEND/WRITE WQEs (with or without immediate, payload contiguous) of an RC
// QP in RTS with no GRH, nothing to resend and no RNR wait are built inline, with the QP's checks
// made once per burst and per WQE only what can hold one back (fence, credits); so are the
// MIDDLE packets of a WQE under way (build_middle's, with the state in locals); any other packet
// comes from req_poll. Ends when out is full (kFull), when req_poll has nothing to send (kIdle,
// as a poll_transmit that found this QP idle), or after a packet whose payload is not stable
// (kUnstable: the next packet may reuse the bounce buffer).
struct ReqBurst {
  std::size_t packets;
  enum End : std::uint8_t { kFull, kIdle, kUnstable } end;
};
ReqBurst req_poll_burst(QpImpl& qp, TimeNs now, std::span<TxPacket> out);
void req_rewind(QpImpl& qp, std::uint32_t psn);        // go-back-N from psn
void req_queue_resend(QpImpl& qp, std::uint32_t psn);  // selective repeat: resend psn only
std::uint32_t wqe_npkts(const QpImpl& qp, const SendWqe& w);
// Makes the QP's header template (hdr_tmpl_) current; the responder builds its ACKs from it too
// (same route, P_Key and destination QP).
void req_ensure_template(QpImpl& qp);
// responder.cpp
void resp_on_request(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                     TimeNs now);
bool resp_poll(QpImpl& qp, TxPacket& out);
// The responder's lean path for the commonest in-sequence requests — RDMA WRITE FIRST (with
// its RETH) and MIDDLE/LAST inside the current WRITE, and SEND ONLY into a receive that holds it
// — given the raw BTH (`bth`, 12 bytes, followed by the RETH of a WRITE FIRST or ONLY; no other
// extension headers) of a packet the Device has already routed to this RC QP. It makes exactly
// the checks and state changes resp_on_request would; anything else (duplicates, gaps, errors,
// RNR, selective-repeat buffering) returns false having changed nothing, and the packet takes
// the general path.
// Inline, in responder_lean.hpp.
// With `defer` (on_packet_burst), an ACK is held in *defer instead of queued, and a SEND ONLY
// whose completion could not be written in place (CQ full or in error) is not taken.
inline bool resp_fast_request(QpImpl& qp, const std::uint8_t* bth,
                              std::span<const std::uint8_t> payload, DeferredAck* defer = nullptr);
// Its out-of-line parts: a WRITE FIRST or a WRITE ONLY without immediate (false: not taken,
// nothing changed) and an ACK to queue.
bool resp_fast_write_first(QpImpl& qp, const std::uint8_t* bth, std::uint32_t psn,
                           std::span<const std::uint8_t> payload);
bool resp_fast_write_only(QpImpl& qp, const std::uint8_t* bth, std::uint32_t psn,
                          std::span<const std::uint8_t> payload);
void resp_queue_ack(QpImpl& qp, std::uint32_t psn);
void resp_on_ud(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                std::span<const std::uint8_t> grh_bytes);
// completer.cpp
void comp_on_response(QpImpl& qp, const wire::Headers& h, std::span<const std::uint8_t> payload,
                      TimeNs now);
void comp_on_deadline(QpImpl& qp, TimeNs now);
// The completer's lean path: the raw BTH and AETH (`bth`, 16 bytes) of an ACK the Device has
// already checked and routed to this RC QP. A positive ACK is processed as comp_on_response
// would; anything else (NAK, RNR NAK, reserved) returns false having changed nothing.
bool comp_fast_ack(QpImpl& qp, const std::uint8_t* bth, TimeNs now);
void comp_arm_rto(QpImpl& qp, TimeNs now);
// A request packet left: arm the retransmission timer unless it runs already.
inline void comp_after_send(QpImpl& qp, TimeNs now) {
  if (qp.rto_deadline_ == kNoDeadline) comp_arm_rto(qp, now);
}

}  // namespace weft::transport
