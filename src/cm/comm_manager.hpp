// cm/comm_manager.hpp — the Communication Manager of one HCA port (IBA chapter 12), sans-IO:
// it connects RC queue pairs over QP1 with REQ / REP / RTU, refuses with REJ, and tears down with
// DREQ / DREP, moving the QPs through INIT, RTR and RTS itself (as librdmacm does) with the QPN,
// PSN and path each side learns from the other.
//
// Active side:  connect() (QP RESET -> INIT, REQ sent)  --REP-->  QP RTR, RTS, RTU sent,
//               kEstablished.
// Passive side: listen(service); a REQ raises kReqReceived; accept() (QP INIT, RTR, REP sent)
//               --RTU-->  QP RTS, kEstablished; or reject() (REJ 28, consumer reject).
// Teardown:     disconnect() (QP -> ERR, DREQ sent) --DREP--> TimeWait, kDisconnected; the
//               peer answers DREQ with DREP, moves its QP to ERR and raises kDisconnected. A
//               connection leaves TimeWait after timewait_ns (IBA 12.9.8.6).
// Reliability (IBA 12.7.34-12.7.38): REQ, REP and DREQ are resent after the peer's CM response
// timeout plus twice the packet lifetime, up to max_cm_retries, then the connection fails with
// kTimeout (and a REJ "timeout" to the peer). Duplicates: a REQ seen again while REP Sent gets
// the REP again; a REP seen again while Established gets the RTU again; a DREQ seen again in
// TimeWait gets the DREP again; a REQ seen again while the consumer has not answered (REQ Rcvd)
// gets an MRA, and an MRA received extends the wait by its service timeout.
// No listener for the REQ's ServiceID: REJ reason 8 (invalid service ID).
//
// Recovery mode: the first 8 bytes of REQ/REP/REJ private data are Weft's header
// (wire::WeftCmHeader) carrying go-back-N or selective repeat. A listener refuses a REQ whose
// mode differs from its own with REJ reason 28 (consumer reject) and WeftReject
// kRecoveryModeMismatch; the active side reports both in its kRejected event. A REQ without
// the header (a foreign CM) means go-back-N, the IBA's only mode.
//
// Not done (see README.md): LAP/APR (path migration), MRA for REP/LAP, RD/UC, P_Key checks,
// ClassPortInfo redirection, alternate paths (encoded, not used).
// Thread-safety: none; one owner calls every method. The QueuePairs passed in must outlive their
// connection (until kDisconnected, kRejected or kTimeout).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <weft/device.hpp>
#include <weft/types.hpp>
#include <weft/verbs.hpp>

#include "src/cm/gsi.hpp"
#include "src/wire/cm.hpp"
#include "src/wire/sa.hpp"

namespace weft::cm {

enum class CmState : std::uint8_t {
  kReqSent,      // active: REQ out, waiting for REP
  kReqRcvd,      // passive: REQ in, waiting for accept()/reject()
  kRepSent,      // passive: REP out, waiting for RTU
  kEstablished,  // both
  kDreqSent,     // DREQ out, waiting for DREP
  kTimeWait,     // disconnected; answering late DREQs
  kClosed,       // unknown or gone
};
std::string_view to_string(CmState s);

using ConnId = std::uint32_t;  // the local communication ID

struct CmConfig {
  std::uint8_t port = 1;
  std::uint16_t lid = 0;  // this port's LID (set_lid() once the SM assigned it)
  std::uint64_t ca_guid = 0;
  // What this CM promises to answer within, and expects of its peer (REQ fields Local/Remote
  // CM Response Timeout): 4.096 us * 2^code. 10 = 4.2 ms.
  std::uint8_t cm_response_timeout = 10;
  std::uint8_t max_cm_retries = 8;  // 4 bits
  // Longer than the peer's DREQ resend interval (its response timeout + 2 x packet lifetime,
  // ~6.3 ms with the defaults), so a DREQ resent after a lost DREP is answered from TimeWait.
  TimeNs timewait_ns = 20'000'000;
  std::uint32_t connections_max = 4096;
  // ServiceTimeout of the MRA sent when a REQ is repeated while the consumer has not answered.
  std::uint8_t mra_service_timeout = 16;  // 268 ms
  std::uint32_t comm_id_base = 1;         // first local communication ID
  std::uint32_t psn_seed = 1;             // starting PSNs come from an LCG on this (no global RNG)
};

enum class CmEventType : std::uint8_t {
  kReqReceived,   // passive: accept() or reject() it
  kEstablished,   // both sides
  kRejected,      // active: the peer sent REJ (rej_reason, weft_reject); passive: REJ after REP
  kTimeout,       // the peer did not answer after max_cm_retries resends
  kDisconnected,  // DREQ received, or DREP received for our DREQ (or DREQ retries exhausted)
  kSidrReply,     // SIDR (conn = the request ID): sidr_status, remote_qpn, qkey; or kTimeout
};
std::string_view to_string(CmEventType t);

struct CmEvent {
  CmEventType type = CmEventType::kEstablished;
  ConnId conn = 0;
  std::uint64_t service_id = 0;
  std::uint16_t rej_reason = 0;  // wire::RejReason
  wire::WeftReject weft_reject = wire::WeftReject::kNone;
  RecoveryMode recovery = RecoveryMode::kGoBackN;  // the peer's (REQ/REP/REJ header)
  std::uint32_t remote_qpn = 0;
  std::uint16_t remote_lid = 0;
  std::vector<std::uint8_t> private_data;  // the peer's, after Weft's header (SIDR: all of it)
  wire::SidrStatus sidr_status = wire::SidrStatus::kValid;  // kSidrReply
  std::uint32_t qkey = 0;                                   // kSidrReply
};

// Private data the application may add after Weft's 8-byte header.
inline constexpr std::size_t kReqUserPrivateBytes =
    wire::kReqPrivateBytes - wire::kWeftCmHeaderBytes;
inline constexpr std::size_t kRepUserPrivateBytes =
    wire::kRepPrivateBytes - wire::kWeftCmHeaderBytes;
inline constexpr std::size_t kRejUserPrivateBytes =
    wire::kRejPrivateBytes - wire::kWeftCmHeaderBytes;

struct ConnectParams {
  std::uint64_t service_id = 0;
  QueuePair* qp = nullptr;  // RC, in RESET
  wire::PathRecord path{};  // from the SA: DLID (required), SL, MTU, rate, PacketLifeTime
  RecoveryMode recovery = RecoveryMode::kGoBackN;
  std::vector<std::uint8_t> private_data;  // <= kReqUserPrivateBytes
  std::uint32_t access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  std::uint8_t responder_resources = 1, initiator_depth = 1;
  std::uint8_t retry_count = 7, rnr_retry_count = 7;
  std::uint8_t min_rnr_timer = 12;
};

struct AcceptParams {
  QueuePair* qp = nullptr;                 // RC, in RESET
  std::vector<std::uint8_t> private_data;  // <= kRepUserPrivateBytes
  std::uint32_t access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  std::uint8_t responder_resources = 1, initiator_depth = 1;
  std::uint8_t rnr_retry_count = 7;
  std::uint8_t min_rnr_timer = 12;
};

struct CmStats {
  std::uint64_t mads_sent = 0, resends = 0, mads_received = 0, ignored_mads = 0;
  std::uint64_t dup_req = 0, dup_rep = 0, dup_dreq = 0;
  std::uint64_t rej_sent = 0, rej_received = 0, mra_sent = 0, mra_received = 0, timeouts = 0;
};

class CommManager {
 public:
  explicit CommManager(CmConfig cfg);
  void set_lid(std::uint16_t lid) { cfg_.lid = lid; }
  const CmConfig& config() const { return cfg_; }

  // kInvalidArgument for a duplicate service ID.
  Errc listen(std::uint64_t service_id, RecoveryMode recovery);
  Errc stop_listening(std::uint64_t service_id);
  // kInvalidArgument (no QP, not RC, no DLID, private data too long), kInvalidState (QP not
  // in RESET, no local LID), kNoResources (connections_max), or what modify() returned.
  Result<ConnId, Errc> connect(const ConnectParams& p, TimeNs now);
  Errc accept(ConnId conn, const AcceptParams& p, TimeNs now);
  Errc reject(ConnId conn, std::span<const std::uint8_t> private_data, TimeNs now);
  Errc disconnect(ConnId conn, TimeNs now);

  // SIDR (IBA 12.11): ServiceID -> UD QPN and Q_Key. listen_ud() says what this port answers
  // (kInvalidArgument for a service ID already listened to, RC or UD); a SIDR_REQ for another
  // ServiceID is answered with status 1 (not supported). sidr_request() asks the port at
  // `dlid`; the SIDR_REP comes as a kSidrReply event (conn = the returned request ID), or
  // kTimeout after max_cm_retries resends (each after 4.096 us x 2^cm_response_timeout).
  Errc listen_ud(std::uint64_t service_id, std::uint32_t qpn, std::uint32_t qkey);
  Result<std::uint32_t, Errc> sidr_request(std::uint64_t service_id, std::uint16_t dlid,
                                           std::uint16_t pkey,
                                           std::span<const std::uint8_t> private_data, TimeNs now);
  std::size_t sidr_pending() const { return sidr_.size(); }

  void on_mad(const GsiMad& in, TimeNs now);  // a CM-class MAD from QP1
  bool poll_mad(TimeNs now, GsiMad& out);
  TimeNs next_deadline() const;
  void on_deadline(TimeNs now);
  bool poll_event(CmEvent& out);

  CmState state(ConnId conn) const;
  std::size_t connections() const { return conns_.size(); }
  const CmStats& stats() const { return stats_; }

 private:
  struct Conn {
    ConnId local_id = 0;
    std::uint32_t remote_id = 0;
    bool active = false;
    CmState state = CmState::kClosed;
    std::uint64_t service_id = 0, tid = 0, remote_ca_guid = 0;
    QueuePair* qp = nullptr;
    std::uint16_t remote_lid = 0;
    std::uint8_t sl = 0, mtu = 3, packet_life_time = 0, ack_timeout = 0;
    std::uint32_t local_psn = 0, remote_psn = 0, remote_qpn = 0;
    RecoveryMode recovery = RecoveryMode::kGoBackN;
    std::uint32_t access_flags = 0;
    std::uint8_t responder_resources = 1, initiator_depth = 1;
    std::uint8_t retry_count = 7, rnr_retry_count = 7, peer_rnr_retry = 7, min_rnr_timer = 12;
    std::uint8_t peer_response_timeout = 10;  // how long the peer may take to answer (code)
    std::array<std::uint8_t, wire::kMadBytes> last_sent{};  // REQ / REP / RTU / DREQ / DREP
    int retries = 0;
    TimeNs deadline = kNoDeadline;
  };

  std::uint32_t next_psn();
  TimeNs wait_ns(const Conn& c) const;
  void send(Conn& c, const wire::CmMessage& m);
  void resend(Conn& c);
  void send_rej(std::uint16_t dlid, std::uint64_t tid, std::uint32_t local_id,
                std::uint32_t remote_id, wire::CmMsgKind kind, wire::RejReason reason,
                wire::WeftReject weft, RecoveryMode recovery);
  void event(const Conn& c, CmEventType t, std::uint16_t rej_reason = 0,
             wire::WeftReject wr = wire::WeftReject::kNone,
             std::span<const std::uint8_t> private_data = {});
  void close(ConnId id);
  void enter_timewait(Conn& c, TimeNs now);
  Errc to_rtr(Conn& c);
  Errc to_rts(Conn& c);
  Conn* find(std::uint32_t local_id);

  void on_req(const GsiMad& in, std::uint64_t tid, const wire::CmReq& m, TimeNs now);
  void on_rep(const GsiMad& in, const wire::CmRep& m, TimeNs now);
  void on_rtu(const wire::CmRtu& m, TimeNs now);
  void on_rej(const wire::CmRej& m);
  void on_mra(const wire::CmMra& m, TimeNs now);
  void on_dreq(const GsiMad& in, std::uint64_t tid, const wire::CmDreq& m, TimeNs now);
  void on_drep(const wire::CmDrep& m, TimeNs now);

  struct Sidr {
    std::uint64_t service_id = 0;
    std::uint16_t dlid = 0;
    std::array<std::uint8_t, wire::kMadBytes> mad{};
    int retries = 0;
    TimeNs deadline = kNoDeadline;
  };
  struct UdService {
    std::uint32_t qpn = 0, qkey = 0;
  };
  void on_sidr(const GsiMad& in, TimeNs now);
  void sidr_deadlines(TimeNs now);

  CmConfig cfg_;
  std::map<std::uint32_t, Sidr> sidr_;               // by request ID
  std::map<std::uint64_t, UdService> ud_listeners_;  // by ServiceID
  std::uint32_t next_sidr_id_ = 1;
  std::uint32_t next_comm_id_;
  std::uint32_t psn_state_;
  std::map<std::uint64_t, RecoveryMode> listeners_;
  std::map<ConnId, Conn> conns_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, ConnId> by_remote_;  // (CA GUID, comm ID)
  std::deque<GsiMad> out_;
  std::deque<CmEvent> events_;
  CmStats stats_;
};

}  // namespace weft::cm
