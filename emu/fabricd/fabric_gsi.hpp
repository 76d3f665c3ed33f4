// emu/fabricd/fabric_gsi.hpp — QP1 for a process attached to the fabric daemon: an
// io::FabricAttach whose Device is wrapped in a cm::GsiDevice, so the process runs the
// Communication Manager and an SA client over the fabric (its HCA in the daemon relays the MADs,
// gsi_relay.hpp). Blocking helpers for the common cases: a PathRecord query, connecting an RC
// QP to a listener through the CM (REQ / REP / RTU, the path from the SA), accepting one, and
// disconnecting (DREQ / DREP). For anything else use cm() / sa_client() directly (holding the
// driver's lock when the driver runs threaded) and kick the driver.
//
// The helpers drive the attachment's Driver themselves in inline mode (run_until), or wait for
// its thread in threaded mode (Driver::start), looking every 200 us. They keep CM events and SA
// results they are not waiting for, for a later helper; a CM event is handed out once.
// Thread-safety: one application thread calls the helpers; see io/driver.hpp for the rest.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/types.hpp>

#include "src/cm/gsi_device.hpp"
#include "src/io/fabric_attach.hpp"
#include "src/wire/sa.hpp"

namespace weft::fabricd {

enum class GsiError : std::uint8_t {
  kTimeout,       // no answer (or no connection) within the helper's timeout
  kSaError,       // the SA answered with an error status (or no record), or RMPP failed
  kRejected,      // the peer sent REJ (its reason: FabricGsi::last_rej_reason())
  kCmTimeout,     // the CM gave up after its retries
  kInvalid,       // the CM refused the call (see the log for its Errc)
  kDisconnected,  // the peer disconnected before the connection was established
};
std::string_view to_string(GsiError e);

struct GsiOptions {
  // 4.096 us x 2^16 = 268 ms: what this CM promises its peers to answer in. A process may be
  // busy elsewhere when a REQ comes; the peer resends (and we answer repeats with MRA).
  std::uint8_t cm_response_timeout = 16;
  std::uint8_t max_cm_retries = 8;
  TimeNs sa_timeout_ns = 200'000'000;  // per SA attempt
  int sa_retries_max = 4;
};

struct CmConnection {
  cm::ConnId id = 0;
  std::uint16_t remote_lid = 0;
  std::uint32_t remote_qpn = 0;
  std::vector<std::uint8_t> private_data;  // the peer's REQ (accept) or REP (connect)
  wire::PathRecord path{};                 // connect: the SA's path
};

class FabricGsi {
 public:
  // Attaches like io::FabricAttach::connect (o.wrap_device is taken), with QP1.
  static Result<std::unique_ptr<FabricGsi>, io::IoError> connect(std::string name,
                                                                 io::FabricAttachOptions o = {},
                                                                 GsiOptions g = {});
  io::FabricAttach& attach() { return *attach_; }
  Device& device() { return attach_->device(); }  // the GsiDevice
  io::Driver& driver() { return attach_->driver(); }
  std::uint16_t lid() const { return attach_->lid(); }
  cm::GsiDevice& gsi() { return *gsi_; }
  cm::CommManager& cm() { return gsi_->cm(); }
  cm::SaClient& sa_client() { return gsi_->sa_client(); }

  // SubnAdmGet(PathRecord) from this port to `dlid`.
  Result<wire::PathRecord, GsiError> path_record(std::uint16_t dlid,
                                                 TimeNs timeout_ns = 5'000'000'000);
  // Connects `qp` (RC, RESET) to the listener of `service_id` at `dlid`: the path from the SA,
  // then REQ -> REP -> RTU; the QP is in RTS on success. private_data <= 84 bytes.
  Result<CmConnection, GsiError> connect_rc(QueuePair& qp, std::uint16_t dlid,
                                            std::uint64_t service_id,
                                            std::span<const std::uint8_t> private_data = {},
                                            TimeNs timeout_ns = 10'000'000'000);
  // Listens on `service_id` (once), waits for a REQ, accepts it on `qp` (RC, RESET) with REP,
  // and waits for the RTU (or the first packet). private_data <= 188 bytes.
  Result<CmConnection, GsiError> accept_rc(std::uint64_t service_id, QueuePair& qp,
                                           std::span<const std::uint8_t> private_data = {},
                                           TimeNs timeout_ns = 10'000'000'000);
  // DREQ; waits for the DREP (or the CM's give-up). The QP is in ERR afterwards.
  std::optional<GsiError> disconnect(cm::ConnId id, TimeNs timeout_ns = 5'000'000'000);
  // Waits for the peer's DREQ on `id` (answered by the CM).
  std::optional<GsiError> wait_disconnected(cm::ConnId id, TimeNs timeout_ns = 5'000'000'000);
  // The REJ reason (IBA Table 112) of the last connect_rc/accept_rc that gave kRejected.
  std::uint16_t last_rej_reason() const { return last_rej_reason_; }

 private:
  FabricGsi() = default;
  // Runs (or waits for) the driver until pred() holds, with the lock held while pred runs.
  template <class Pred>
  bool wait(Pred pred, TimeNs timeout_ns);
  void drain();  // CM events and SA results into the queues below (lock held)
  bool take_event(cm::ConnId id, cm::CmEvent& out);
  // The connection's next CM event by wall time `end`, or the error it (or its absence) means:
  // only ESTABLISHED is a success.
  Result<cm::CmEvent, GsiError> await_established(cm::ConnId id, TimeNs end);
  std::uint16_t last_rej_reason_ = 0;
  std::unique_ptr<io::FabricAttach> attach_;
  cm::GsiDevice* gsi_ = nullptr;
  std::deque<cm::CmEvent> events_;
  std::deque<cm::SaResult> results_;
  std::vector<std::uint64_t> listening_;
};

}  // namespace weft::fabricd
