// coll/verbs_wire.hpp — how the collectives' transport protocol (README.md, "Flow control and
// wire protocol") maps onto verbs: the work requests of a data chunk and of a credit grant, and
// the decoding of their completions back into TransportEvents. Shared by VerbsTransport and by
// emu/collsim's packet-level fabric (FabricNet), so both speak exactly the same wire.
//   data:  RDMA WRITE WITH IMMEDIATE into the peer's inbox slot, imm = slot (bit 31 clear)
//   grant: zero-length SEND WITH IMMEDIATE, imm = kGrantBit | credits, wr_id = kGrantWrId
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include <weft/verbs.hpp>

#include "src/coll/transport.hpp"

namespace weft::coll {

inline constexpr std::uint32_t kGrantBit = 0x80000000u;  // in the immediate: a credit grant
inline constexpr std::uint64_t kGrantWrId = 1ull << 63;  // wr_id of a grant's SEND
inline constexpr std::uint32_t kSlotsMax = kGrantBit - 1;

// The WRITE WITH IMMEDIATE of a chunk into slot `slot` of the inbox at remote_inbox.
// `sge` must outlive the post (a zero-length chunk posts no SGE).
inline SendWr data_wr(const Sge& sge, std::uint32_t slot, std::uint64_t wr_id,
                      std::uint64_t remote_inbox, std::uint32_t rkey, std::uint32_t slot_bytes) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::kRdmaWriteWithImm;
  wr.sg_list = {&sge, sge.length > 0 ? 1u : 0u};
  wr.imm_data = slot;
  wr.remote_addr = remote_inbox + std::uint64_t{slot} * slot_bytes;
  wr.rkey = rkey;
  return wr;
}

// The zero-length SEND WITH IMMEDIATE that returns `credits` slots (0 < credits < kGrantBit).
inline SendWr grant_wr(std::uint32_t credits) {
  SendWr wr;
  wr.wr_id = kGrantWrId;
  wr.opcode = WrOpcode::kSendWithImm;
  wr.imm_data = kGrantBit | credits;
  return wr;
}

// What one completion of a collectives QP means.
enum class Completion : std::uint8_t {
  kNothing,       // a grant's SEND completed: nothing to report
  kEvent,         // ev is filled (kWriteDone or kError)
  kEventConsumed  // ev is filled (kData or kGrant) and one receive WQE was consumed: repost one
};

// Fills ev's kind and its fields from wc (ev.peer and ev.lane are the caller's).
inline Completion decode_completion(const WorkCompletion& wc, TransportEvent& ev) {
  if (wc.status != WcStatus::kSuccess) {
    ev.kind = TransportEvent::Kind::kError;
    ev.wr_id = wc.wr_id;
    return Completion::kEvent;
  }
  if (wc.opcode == WcOpcode::kRecv || wc.opcode == WcOpcode::kRecvRdmaWithImm) {
    if ((wc.imm_data & kGrantBit) != 0) {
      ev.kind = TransportEvent::Kind::kGrant;
      ev.credits = wc.imm_data & ~kGrantBit;
    } else {
      ev.kind = TransportEvent::Kind::kData;
      ev.slot = wc.imm_data;
      ev.bytes = wc.byte_len;
    }
    return Completion::kEventConsumed;
  }
  if ((wc.wr_id & kGrantWrId) != 0) return Completion::kNothing;
  ev.kind = TransportEvent::Kind::kWriteDone;
  ev.wr_id = wc.wr_id;
  return Completion::kEvent;
}

}  // namespace weft::coll
