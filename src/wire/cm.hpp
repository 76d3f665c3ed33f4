// wire/cm.hpp — Communication Management MADs (IBA 12.6): REQ, MRA, REJ, REP, RTU, DREQ, DREP
// (class 0x07, class version 2, method Send), and Weft's 8-byte header at the start of the CM
// private data, which carries what the IBA has no field for: the transport's recovery mode.
// Message data starts at MAD byte 24; the offsets in cm.cpp are those of IBA 12.6.5-12.6.11.
// LAP and APR are recognised by attribute ID but not decoded (kBadAttribute); SIDR_REQ/SIDR_REP
// have their own codec (encode_sidr / decode_sidr_*), outside CmMessage.
// Decoding is bounds-checked and returns GmpError; encoding into a too-small span is a bug.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include <weft/types.hpp>

#include "src/wire/gmp.hpp"
#include "src/wire/mad.hpp"

namespace weft::wire {

inline constexpr std::size_t kCmDataOffset = 24, kCmDataBytes = 232;
static_assert(kCmDataOffset + kCmDataBytes == kMadBytes);

enum class CmAttr : std::uint16_t {  // IBA 12.6.1 Table 97
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};
std::string_view to_string(CmAttr a);

// Private data sizes (IBA 12.6.5-12.6.11).
inline constexpr std::size_t kReqPrivateBytes = 92, kRepPrivateBytes = 196, kRtuPrivateBytes = 224,
                             kRejPrivateBytes = 148, kRejAriBytes = 72, kMraPrivateBytes = 222,
                             kDreqPrivateBytes = 220, kDrepPrivateBytes = 224;

enum class CmTransport : std::uint8_t { kRc = 0, kUc = 1, kRd = 2 };  // 12.6.5 Table 99

// REJ reasons (IBA 12.6.7.2 Table 103); the ones Weft sends or names.
enum class RejReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedRequest = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kInvalidPathMtu = 26,
  kConsumerReject = 28,
  kDuplicateLocalCommId = 30,
  kUnsupportedClassVersion = 31,
};
std::string_view to_string(RejReason r);  // "" for codes not in the enum

// MessageRejected / MessageMRAed (12.6.7, 12.6.6).
enum class CmMsgKind : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// One path of a REQ (12.6.5): the primary at bytes 52-95, the alternate at 96-139.
struct CmPath {
  std::uint16_t local_lid = 0, remote_lid = 0;
  std::array<std::uint8_t, 16> local_gid{}, remote_gid{};
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint8_t packet_rate = 0;  // 6 bits, PathRecord rate code
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;  // 4 bits
  bool subnet_local = true;
  std::uint8_t local_ack_timeout = 0;  // 5 bits
  bool operator==(const CmPath&) const = default;
};

struct CmReq {  // 12.6.5
  std::uint32_t local_comm_id = 0;
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;  // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;                // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;  // 5 bits: 4.096 us * 2^value
  CmTransport transport = CmTransport::kRc;
  bool end_to_end_flow_control = false;
  std::uint32_t starting_psn = 0;              // 24 bits
  std::uint8_t local_cm_response_timeout = 0;  // 5 bits
  std::uint8_t retry_count = 0;                // 3 bits
  std::uint16_t pkey = 0;
  std::uint8_t path_mtu = 0;  // 4 bits, MTU code
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  std::uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  std::uint8_t extended_transport = 0;  // 3 bits
  CmPath primary{}, alternate{};
  std::array<std::uint8_t, kReqPrivateBytes> private_data{};
  bool operator==(const CmReq&) const = default;
};

struct CmMra {  // 12.6.6
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  CmMsgKind msg_mraed = CmMsgKind::kReq;
  std::uint8_t service_timeout = 0;  // 5 bits
  std::array<std::uint8_t, kMraPrivateBytes> private_data{};
  bool operator==(const CmMra&) const = default;
};

struct CmRej {  // 12.6.7
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  CmMsgKind msg_rejected = CmMsgKind::kReq;
  std::uint8_t ari_length = 0;  // 7 bits
  std::uint16_t reason = 0;     // RejReason
  std::array<std::uint8_t, kRejAriBytes> ari{};
  std::array<std::uint8_t, kRejPrivateBytes> private_data{};
  bool operator==(const CmRej&) const = default;
};

struct CmRep {  // 12.6.8
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;   // 24 bits
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint32_t starting_psn = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;   // 5 bits
  std::uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  std::array<std::uint8_t, kRepPrivateBytes> private_data{};
  bool operator==(const CmRep&) const = default;
};

struct CmRtu {  // 12.6.9
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<std::uint8_t, kRtuPrivateBytes> private_data{};
  bool operator==(const CmRtu&) const = default;
};

struct CmDreq {  // 12.6.10
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::uint32_t remote_qpn = 0;  // 24 bits (QPN or EECN)
  std::array<std::uint8_t, kDreqPrivateBytes> private_data{};
  bool operator==(const CmDreq&) const = default;
};

struct CmDrep {  // 12.6.11
  std::uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<std::uint8_t, kDrepPrivateBytes> private_data{};
  bool operator==(const CmDrep&) const = default;
};

using CmMessage = std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep>;
CmAttr attr_of(const CmMessage& m);

struct CmMad {
  MadHeader hdr{};
  CmMessage msg;
};
// Class 0x07, ClassVersion 2, method Send, AttributeID from the message.
void encode_cm(std::uint64_t tid, const CmMessage& m, std::span<std::uint8_t, kMadBytes> out);
// kBadClass / kBadClassVersion / kBadAttribute (ClassPortInfo, LAP, APR, SIDR: not decoded) /
// kBadField (a REJ ARI length above 72, a reserved transport type or message kind).
Result<CmMad, GmpError> decode_cm(std::span<const std::uint8_t> mad);

// ---- SIDR (IBA 12.11): ServiceID resolution for UD, outside the CmMessage variant ------------
// SIDR_REQ: RequestID 0-3, P_Key 4-5, ServiceID 8-15, PrivateData 16-231.
// SIDR_REP: RequestID 0-3, Status 4, AddInfoLength 5, QPN 8-10, ServiceID 12-19, Q_Key 20-23,
// ClassPortInfo / additional info 24-95, PrivateData 96-231.
inline constexpr std::size_t kSidrReqPrivateBytes = 216, kSidrRepPrivateBytes = 136,
                             kSidrRepInfoBytes = 72;
enum class SidrStatus : std::uint8_t {  // 12.11.2 Table 114
  kValid = 0,                           // QPN and Q_Key are valid
  kServiceIdNotSupported = 1,
  kRejected = 2,  // by the service provider
  kNoQp = 3,
  kRedirect = 4,
  kVersionNotSupported = 5,
};
struct CmSidrReq {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = 0;
  std::uint64_t service_id = 0;
  std::array<std::uint8_t, kSidrReqPrivateBytes> private_data{};
  bool operator==(const CmSidrReq&) const = default;
};
struct CmSidrRep {
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kValid;
  std::uint8_t info_length = 0;
  std::uint32_t qpn = 0;  // 24 bits
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::uint8_t, kSidrRepInfoBytes> info{};
  std::array<std::uint8_t, kSidrRepPrivateBytes> private_data{};
  bool operator==(const CmSidrRep&) const = default;
};
// Class 0x07, ClassVersion 2, method Send, AttributeID 0x0017 / 0x0018.
void encode_sidr(std::uint64_t tid, const CmSidrReq& m, std::span<std::uint8_t, kMadBytes> out);
void encode_sidr(std::uint64_t tid, const CmSidrRep& m, std::span<std::uint8_t, kMadBytes> out);
// kBadClass / kBadClassVersion as decode_cm; kBadAttribute for another attribute; kBadField for
// a SIDR_REP status above 5 or an AddInfoLength above 72.
Result<CmSidrReq, GmpError> decode_sidr_req(std::span<const std::uint8_t> mad);
Result<CmSidrRep, GmpError> decode_sidr_rep(std::span<const std::uint8_t> mad);

// ---- Weft's private-data header (first 8 bytes of REQ/REP/REJ private data) ---------------
// 0-1 magic "WF", 2 version (1), 3 recovery mode (0 go-back-N, 1 selective repeat), 4 Weft
// reject code (WeftReject, REJ only), 5-7 reserved. A REQ without it is a foreign peer: the
// IBA's go-back-N is assumed.
inline constexpr std::size_t kWeftCmHeaderBytes = 8;
inline constexpr std::uint8_t kWeftCmVersion = 1;
enum class WeftRecovery : std::uint8_t { kGoBackN = 0, kSelectiveRepeat = 1 };
enum class WeftReject : std::uint8_t { kNone = 0, kRecoveryModeMismatch = 1 };
std::string_view to_string(WeftReject r);
struct WeftCmHeader {
  WeftRecovery recovery = WeftRecovery::kGoBackN;
  WeftReject reject = WeftReject::kNone;
  bool operator==(const WeftCmHeader&) const = default;
};
void encode(const WeftCmHeader& h, std::span<std::uint8_t> private_data);  // size >= 8
// nullopt when the bytes are not a Weft header (wrong magic or version, or a reserved value).
std::optional<WeftCmHeader> decode_weft_cm_header(std::span<const std::uint8_t> private_data);

}  // namespace weft::wire
