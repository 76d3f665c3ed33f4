// emu/sma/pma.hpp — the Performance Management Agent of one node (GSI, management class 0x04,
// IBA 16.1), sans-IO: ClassPortInfo (Get), PortCounters (16.1.3.5) and PortCountersExtended
// (16.1.4.11) Get and Set (Set clears the counters CounterSelect names). The counters live in
// NodeState (PortState::counters), where the fabric counts them.
//
// PortSelect: a port number (switch 0..N, CA 1..N), or 0xFF on a switch for the sum over ports
// 1..N (AllPortSelect; saturating for PortCounters). Status codes as the SMA (IBA 13.4.7).
// The reply is LID-routed back to the requester (MadReply::dlid = SmpContext::lrh_slid); the
// fabric swaps the LRH/DETH addressing as for any GMP response (IBA 13.5.4).
// Thread-safety: none; the caller owns the NodeState.
#pragma once

#include <cstdint>
#include <span>

#include "emu/sma/node_state.hpp"
#include "emu/sma/sma.hpp"

namespace weft::sma {

// ClassPortInfo.CapabilityMask bits (16.1.2): AllPortSelect, IsExtendedWidthSupported,
// IsPortCountersXmitWaitSupported.
inline constexpr std::uint16_t kPmaCapAllPortSelect = 0x0100;
inline constexpr std::uint16_t kPmaCapExtendedWidth = 0x0200;
inline constexpr std::uint16_t kPmaCapXmitWait = 0x1000;
inline constexpr std::uint8_t kPmaAllPorts = 0xFF;
inline constexpr std::uint8_t kPmaRespTimeValue = 18;

MadReply handle_pma(NodeState& node, std::uint8_t in_port, std::span<const std::uint8_t> mad,
                    const SmpContext& ctx = {});

}  // namespace weft::sma
