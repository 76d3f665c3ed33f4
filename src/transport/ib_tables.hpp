// transport/ib_tables.hpp — small IBA tables and arithmetic the three QP engines share:
// 24-bit PSN arithmetic (IBA 9.7.1), the AETH credit code (Table 44, 9.7.7.2), the RNR NAK timer
// code (Table 45, 9.7.5.2.8) and the local ACK timeout (9.7.6.1.3).
// Thread-safety: pure constexpr functions.
#pragma once

#include <array>
#include <cstdint>

#include <weft/types.hpp>
#include <weft/verbs.hpp>

namespace weft::transport {

// ---- PSNs: 24-bit serial numbers (IBA 9.7.1); "a < b" within half the space. ---------------
constexpr std::uint32_t psn_add(std::uint32_t psn, std::uint32_t n) {
  return (psn + n) & kPsnMask;
}
constexpr std::uint32_t psn_sub(std::uint32_t a, std::uint32_t b) {
  return (a - b) & kPsnMask;
}
// Signed distance a - b in (-2^23, 2^23].
constexpr std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) {
  std::int32_t d = static_cast<std::int32_t>(psn_sub(a, b));
  return d >= (1 << 23) ? d - (1 << 24) : d;
}
constexpr bool psn_lt(std::uint32_t a, std::uint32_t b) {
  return psn_diff(a, b) < 0;
}
// psn_diff(a, b) <= 0, i.e. (a - b) mod 2^24 is 0 or at least 2^23, as one compare: minus one,
// 0 wraps to 2^24 - 1 and the rest move down by one (the ACK walk tests this once per WQE; as
// two tests it was two branches).
constexpr bool psn_le(std::uint32_t a, std::uint32_t b) {
  return psn_sub(a - 1, b) >= (1u << 23) - 1;
}
// Same as psn_diff(a, b) <= 0 at the edges (checked over all 2^24 distances when written).
static_assert(psn_le(5, 5) && psn_le(4, 5) && !psn_le(6, 5) && psn_le(kPsnMask, 0) &&
              !psn_le(0, kPsnMask) && psn_le(0, 1u << 23) && psn_le(1u << 23, 0) &&
              psn_le(0, (1u << 23) - 1) && !psn_le((1u << 23) - 1, 0) &&
              psn_le((1u << 23) + 1, 0) && !psn_le(0, (1u << 23) + 1));

// ---- Send WR classes, as bit tests on the opcode (one instruction, not a chain of compares).
// READ and atomics: responses carry the data, bounded by max_rd_atomic (IBA 9.7.4.1.4).
constexpr bool is_rd_atomic(WrOpcode op) {
  constexpr unsigned kMask = 1u << static_cast<unsigned>(WrOpcode::kRdmaRead) |
                             1u << static_cast<unsigned>(WrOpcode::kAtomicCmpAndSwp) |
                             1u << static_cast<unsigned>(WrOpcode::kAtomicFetchAndAdd);
  return (kMask >> static_cast<unsigned>(op)) & 1u;
}
// What consumes a receive WQE at the responder, hence an end-to-end credit (IBA 9.7.7.2): SEND
// and RDMA WRITE with immediate.
constexpr bool consumes_credit(WrOpcode op) {
  constexpr unsigned kMask = 1u << static_cast<unsigned>(WrOpcode::kSend) |
                             1u << static_cast<unsigned>(WrOpcode::kSendWithImm) |
                             1u << static_cast<unsigned>(WrOpcode::kRdmaWriteWithImm);
  return (kMask >> static_cast<unsigned>(op)) & 1u;
}
// consumes_credit for a SEND or WRITE (with or without immediate), as the lean loops take
// them: one compare instead of the table's shift and test (they run it once per WQE).
constexpr bool send_write_consumes_credit(WrOpcode op) {
  return op != WrOpcode::kRdmaWrite;
}
static_assert(send_write_consumes_credit(WrOpcode::kSend) == consumes_credit(WrOpcode::kSend) &&
              send_write_consumes_credit(WrOpcode::kSendWithImm) ==
                  consumes_credit(WrOpcode::kSendWithImm) &&
              send_write_consumes_credit(WrOpcode::kRdmaWrite) ==
                  consumes_credit(WrOpcode::kRdmaWrite) &&
              send_write_consumes_credit(WrOpcode::kRdmaWriteWithImm) ==
                  consumes_credit(WrOpcode::kRdmaWriteWithImm));
static_assert(static_cast<unsigned>(WrOpcode::kAtomicFetchAndAdd) < 32);

// ---- End-to-end credits (IBA 9.7.7.2.6, Table 44): a 5-bit logarithmic code. ---------------
inline constexpr std::uint8_t kCreditCodeInvalid = 31;
inline constexpr std::array<std::uint32_t, 31> kCreditCodeValue = {
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};
constexpr std::uint32_t credit_code_value(std::uint8_t code) {
  return kCreditCodeValue[code];
}
// The largest code whose value does not exceed `credits`.
constexpr std::uint8_t credit_code_for(std::uint64_t credits) {
  std::uint8_t code = 0;
  while (std::size_t{code} + 1 < kCreditCodeValue.size() && kCreditCodeValue[code + 1] <= credits)
    ++code;
  return code;
}

// ---- RNR NAK timer (IBA 9.7.5.2.8, Table 45): code -> time. --------------------------------
// Units of 10 us. Code 0 is 655.36 ms; 1..31 run 0.01 ms .. 491.52 ms.
inline constexpr std::array<std::uint32_t, 32> kRnrTimerUs10 = {
    65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
    48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
    2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
static_assert(kRnrTimerUs10[14] == 128 && kRnrTimerUs10[31] == 49152);  // 1.28 ms, 491.52 ms
constexpr TimeNs rnr_timer_ns(std::uint8_t code) {
  return TimeNs{kRnrTimerUs10[code & 31]} * 10'000;
}

// ---- Local ACK timeout (IBA 9.7.6.1.3): 4.096 us x 2^timeout; 0 means "never". ------------
constexpr TimeNs ack_timeout_ns(std::uint8_t timeout) {
  return timeout == 0 ? kNoDeadline : TimeNs{4096} << timeout;
}

}  // namespace weft::transport
