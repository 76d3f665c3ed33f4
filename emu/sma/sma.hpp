// emu/sma/sma.hpp — the Subnet Management Agent of one node, sans-IO (IBA 14.2.5 attributes,
// 14.2.2 directed-route rules, 14.2.4 M_Key, 13.4.7 status codes). A switch runs one SMA behind
// port 0; a CA runs one per port. The fabric hands every SMP that reaches the node's QP0 (or, for
// directed-route SMPs, every one that arrives on any of its ports) to handle_smp, and does what
// the returned MadReply says. Nothing here does I/O or reads a clock.
//
// Errors: a malformed MAD is dropped and counted in NodeState::stats (an SMA never answers what
// it cannot parse); a well-formed request the SMA cannot satisfy gets a GetResp carrying the IBA
// status (unsupported method / method+attribute / invalid field). Never an assertion on input.
// Thread-safety: none; the caller owns the NodeState.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <weft/types.hpp>

#include "emu/sma/node_state.hpp"
#include "src/wire/mad.hpp"
#include "src/wire/mad_attrs.hpp"

namespace weft::sma {

// What the fabric does with the MAD in MadReply::mad.
enum class SmpAction : std::uint8_t {
  kSendOut,     // transmit `mad` out of `out_port` (a directed-route hop or DR response)
  kRouteByLid,  // transmit `mad` LID-routed to `dlid` (LID-routed reply; DR LID-routed part)
  kToLocalSm,   // deliver `mad` to the SM on this node (responses, traps, SMInfo); drop if none
  kAbsorbed,    // consumed, nothing to send (TrapRepress)
  kDrop,        // dropped; `reason` says why, and NodeState::stats counted it
};
std::string_view to_string(SmpAction a);

enum class DropReason : std::uint8_t {
  kNone,
  kTruncated,  // fewer than 256 bytes
  kBadBaseVersion,
  kBadClass,     // not an SMP class (0x01 / 0x81)
  kBadHopCount,  // DR HopCnt > 63 or HopPtr > HopCnt + 1
  kDrRules,      // the 14.2.2 rules said discard (bad port, CA mid-path, ...)
  kMKey,         // M_Key mismatch (14.2.4.1); M_KeyViolations counted
  kNotRequest,   // a response arrived where only requests are handled
};
std::string_view to_string(DropReason r);

struct MadReply {
  SmpAction action = SmpAction::kDrop;
  DropReason reason = DropReason::kNone;
  bool is_response = false;   // `mad` is a GetResp this agent built
  std::uint16_t status = 0;   // MAD status of the response (IBA 13.4.7), 0 = success
  std::uint8_t out_port = 0;  // kSendOut: the port; kRouteByLid: the port the request came in
  std::uint16_t dlid = 0;     // kRouteByLid: the destination LID
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  // Ports whose logical or physical state this MAD changed (PortInfo Set). The fabric reacts:
  // a port Set to Down (its PhysState then Polling) or to PortPhysicalState Polling drops its
  // link, which trains again to Init; Disabled keeps it down until a Set of Polling (7.2, 5.6);
  // Armed/Active change what it forwards.
  std::vector<std::uint8_t> state_changed_ports;
};

// What the fabric knows about the packet that carried the MAD.
struct SmpContext {
  std::uint16_t lrh_slid = 0;  // the LRH SLID: where a LID-routed response goes
};

// Handles one SMP (class 0x01 or 0x81) that arrived on in_port (1..num_ports; a switch's own SM
// or a CA's local SM submitting a DR SMP with HopCnt 0 passes the port it sends from).
MadReply handle_smp(NodeState& node, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                    const SmpContext& ctx = {});

// Trap 128 "link state change" (IBA 14.2.5.1, Notice 13.4.8.2), from a switch's port 0 to its
// MasterSMLID, LID-routed (class 0x01, method Trap, attribute Notice). It leaves
// SwitchInfo.PortStateChange alone (link_up / link_down set it). Returns nullopt for a CA (trap 128
// is a switch trap) or while the switch has no SM LID yet (ibsim suppresses it the same way).
struct TrapMad {
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  std::uint16_t dlid = 0;  // MasterSMLID
  std::uint16_t slid = 0;  // the switch's LID
  std::uint8_t sl = 0;     // MasterSMSL
};
std::optional<TrapMad> make_trap_128(NodeState& node, std::uint64_t tid);

// Trap repetition (IBA 13.4.9): make_trap_128 records the trap in NodeState::trap; a
// LID-routed TrapRepress (method 0x07, attribute Notice) whose TID matches clears it (counted in
// stats.traps_repressed; any other TrapRepress is absorbed and changes nothing). While it is
// pending, repeat_trap() builds the same trap again, same TID, to the current MasterSMLID
// (nullopt when nothing is pending or the node has no SM LID). The fabric calls it every
// trap_repeat_ns(): 4.096 us x 2^SubnetTimeOut of the node's LID port (PortInfo, set by the SM),
// the subnet's maximum expected propagation delay.
std::optional<TrapMad> repeat_trap(NodeState& node);
TimeNs trap_repeat_ns(const NodeState& node);

}  // namespace weft::sma
