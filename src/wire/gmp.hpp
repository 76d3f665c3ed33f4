// wire/gmp.hpp — general management packets (IBA 13.4, 13.6): the GMP classes Weft speaks on
// QP1 besides PerfMgt (Subnet Administration 0x03, Communication Management 0x07), their
// methods, and the RMPP header (IBA 13.6.2) that multi-segment transfers such as an SA
// GetTableResp carry at bytes 24-35. The class layouts themselves are in sa.hpp and cm.hpp.
// Decoding is bounds-checked and returns GmpError; encoding into a too-small span is a bug.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <weft/types.hpp>

#include "src/wire/mad.hpp"
#include "src/wire/mad_attrs.hpp"  // kMethodResponseBit, MadStatus

namespace weft::wire {

// Management classes on QP1 (IBA 13.4.4 Table 110) that this header family covers.
inline constexpr std::uint8_t kMgmtClassSa = 0x03, kMgmtClassCm = 0x07;
inline constexpr std::uint8_t kSaClassVersion = 2, kCmClassVersion = 2;

// Methods (IBA 13.4.5 Table 111, 15.2.2 Table 191 for the SA-only ones).
enum class GmpMethod : std::uint8_t {
  kGet = 0x01,
  kSet = 0x02,
  kSend = 0x03,
  kGetResp = 0x81,
  kGetTable = 0x12,
  kGetTableResp = 0x92,
  kDelete = 0x15,      // SubnAdmDelete (15.2.2)
  kDeleteResp = 0x95,  // SubnAdmDeleteResp
};

enum class GmpError : std::uint8_t {
  kTruncated,        // fewer than 256 bytes
  kBadBaseVersion,   // BaseVersion != 1
  kBadClass,         // not the class this decoder handles
  kBadClassVersion,  // ClassVersion this decoder does not speak
  kBadRmpp,          // RMPP header inconsistent (version, type, flags)
  kBadAttribute,     // attribute ID this decoder does not know
  kBadField,         // a field outside its range (a reserved value, a length too large)
};
std::string_view to_string(GmpError e);

// ---- RMPP (IBA 13.6.2), bytes 24-35 of a GMP ---------------------------------------------
inline constexpr std::size_t kRmppHeaderOffset = 24, kRmppHeaderBytes = 12;
inline constexpr std::uint8_t kRmppVersion = 1;
inline constexpr std::uint8_t kRmppRespTimeNone = 0x1F;  // "no time value provided" (13.6.2.1)

enum class RmppType : std::uint8_t { kNone = 0, kData = 1, kAck = 2, kStop = 3, kAbort = 4 };
std::string_view to_string(RmppType t);
enum RmppFlag : std::uint8_t { kRmppActive = 1, kRmppFirst = 2, kRmppLast = 4 };
// RMPPStatus for STOP/ABORT (IBA 13.6.2.1 Table 116).
enum class RmppStatus : std::uint8_t {
  kNormal = 0,
  kResourcesExhausted = 1,
  kTotalTimeTooLong = 118,
  kInconsistentLastAndLength = 119,
  kInconsistentFirstAndSegment = 120,
  kBadRmppType = 121,
  kNewWindowLastTooSmall = 122,
  kSegmentNumberTooBig = 123,
  kIllegalStatus = 124,
  kUnsupportedVersion = 125,
  kTooManyRetries = 126,
  kUnspecified = 127,
};

struct RmppHeader {
  std::uint8_t version = 0;  // 0 when RMPP is not used (13.6.2.1)
  RmppType type = RmppType::kNone;
  std::uint8_t resp_time = kRmppRespTimeNone;  // 5 bits
  std::uint8_t flags = 0;                      // 3 bits: RmppFlag
  std::uint8_t status = 0;
  std::uint32_t data1 = 0;  // DATA/ACK: SegmentNumber
  std::uint32_t data2 = 0;  // DATA: PayloadLength (first and last); ACK: NewWindowLast
  bool active() const { return (flags & kRmppActive) != 0; }
};
void encode_rmpp(const RmppHeader& r, std::span<std::uint8_t, kMadBytes> mad);
// Reads bytes 24-35. With the Active flag set, the version must be 1 and the type 1-4.
Result<RmppHeader, GmpError> decode_rmpp(std::span<const std::uint8_t> mad);

// The common header of a GMP of class `mgmt_class` (any class when 0): length, BaseVersion,
// class. The class version is the class decoder's business.
Result<MadHeader, GmpError> decode_gmp_header(std::span<const std::uint8_t> mad,
                                              std::uint8_t mgmt_class = 0);

}  // namespace weft::wire
