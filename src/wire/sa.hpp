// wire/sa.hpp — Subnet Administration MADs (IBA 15.2): the SA header and the records Weft's SA
// serves, PathRecord (15.2.5.16), NodeRecord (15.2.5.2) and PortInfoRecord (15.2.5.3), with
// their component-mask bits (15.2.4). An SA MAD is the common header (0-23), the RMPP header
// (24-35), the SA header (36-55: SM_Key, AttributeOffset, ComponentMask) and 200 bytes of data
// (56-255). A GetTableResp carries its records back to back, AttributeOffset * 8 bytes apart,
// across the data of all its RMPP segments (15.2.6.1).
// Decoding is bounds-checked and returns GmpError; encoding into a too-small span is a bug.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <weft/types.hpp>

#include "src/wire/gmp.hpp"
#include "src/wire/mad.hpp"

namespace weft::wire {

inline constexpr std::size_t kSaHeaderOffset = 36, kSaDataOffset = 56, kSaDataBytes = 200;
// Bytes an RMPP segment of an SA MAD carries after the RMPP header (SA header + data): what
// PayloadLength counts (13.6.2.3, as Linux's ib_mad counts it).
inline constexpr std::size_t kSaSegmentPayloadBytes =
    kMadBytes - kRmppHeaderOffset - kRmppHeaderBytes;
static_assert(kSaDataOffset + kSaDataBytes == kMadBytes);
static_assert(kSaSegmentPayloadBytes == 220);

enum class SaAttr : std::uint16_t {  // IBA 15.2.5 Table 195
  kClassPortInfo = 0x0001,
  kNodeRecord = 0x0011,
  kPortInfoRecord = 0x0012,
  kServiceRecord = 0x0031,
  kPKeyTableRecord = 0x0033,
  kMcMemberRecord = 0x0038,
  kPathRecord = 0x0035,
};

// SA class-specific status (IBA 15.2.1.1 Table 190), MAD Status bits 14:8.
enum class SaStatus : std::uint8_t {
  kOk = 0,
  kNoResources = 1,
  kReqInvalid = 2,
  kNoRecords = 3,
  kTooManyRecords = 4,
  kInvalidGid = 5,
  kInsufficientComponents = 6,
};
constexpr std::uint16_t mad_status(SaStatus s) {
  return static_cast<std::uint16_t>(static_cast<unsigned>(s) << 8);
}
constexpr SaStatus sa_status_of(std::uint16_t mad_status) {
  return static_cast<SaStatus>((mad_status >> 8) & 0x7F);
}

struct SaMad {
  MadHeader hdr{};  // mgmt_class 0x03, class_version 2
  RmppHeader rmpp{};
  std::uint64_t sm_key = 0;
  std::uint16_t attr_offset = 0;  // in 8-byte words
  std::uint64_t comp_mask = 0;
  std::array<std::uint8_t, kSaDataBytes> data{};
};
void encode_sa(const SaMad& m, std::span<std::uint8_t, kMadBytes> out);
// kBadClass unless class 0x03; kBadClassVersion unless 2; kBadRmpp as decode_rmpp.
Result<SaMad, GmpError> decode_sa(std::span<const std::uint8_t> mad);

// ---- PathRecord (15.2.5.16), 64 bytes ----------------------------------------------------
inline constexpr std::size_t kPathRecordBytes = 64;
// Selectors (15.2.5.16): how a query's MTU/Rate/PacketLifeTime compares with a path's.
enum class Selector : std::uint8_t { kGreater = 0, kLess = 1, kExactly = 2, kLargest = 3 };
struct PathRecord {
  std::uint64_t service_id = 0;  // bytes 0-7 (reserved before IBA 1.2.1)
  std::array<std::uint8_t, 16> dgid{};
  std::array<std::uint8_t, 16> sgid{};
  std::uint16_t dlid = 0;
  std::uint16_t slid = 0;
  bool raw_traffic = false;
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint8_t hop_limit = 0;
  std::uint8_t tclass = 0;
  bool reversible = false;
  std::uint8_t numb_path = 0;  // 7 bits
  std::uint16_t pkey = 0;
  std::uint16_t qos_class = 0;  // 12 bits
  std::uint8_t sl = 0;          // 4 bits
  Selector mtu_selector = Selector::kGreater;
  std::uint8_t mtu = 0;  // 6 bits, IBA MTU code (1 = 256 .. 5 = 4096)
  Selector rate_selector = Selector::kGreater;
  std::uint8_t rate = 0;  // 6 bits, IBA rate code (Table 205: 3 = 10 Gb/s, 7 = 40, 16 = 100, ...)
  Selector packet_life_time_selector = Selector::kGreater;
  std::uint8_t packet_life_time = 0;  // 6 bits: 4.096 us * 2^value
  std::uint8_t preference = 0;
  bool operator==(const PathRecord&) const = default;
};
// PathRecord ComponentMask bits (15.2.5.16; the numbering of Linux's IB_SA_PATH_REC_*).
namespace path_comp {
inline constexpr std::uint64_t kServiceId = 3ull << 0, kDgid = 1ull << 2, kSgid = 1ull << 3,
                               kDlid = 1ull << 4, kSlid = 1ull << 5, kRawTraffic = 1ull << 6,
                               kFlowLabel = 1ull << 8, kHopLimit = 1ull << 9, kTclass = 1ull << 10,
                               kReversible = 1ull << 11, kNumbPath = 1ull << 12, kPkey = 1ull << 13,
                               kQosClass = 1ull << 14, kSl = 1ull << 15, kMtuSelector = 1ull << 16,
                               kMtu = 1ull << 17, kRateSelector = 1ull << 18, kRate = 1ull << 19,
                               kPacketLifeTimeSelector = 1ull << 20, kPacketLifeTime = 1ull << 21,
                               kPreference = 1ull << 22;
}  // namespace path_comp
void encode(const PathRecord& r, std::span<std::uint8_t, kPathRecordBytes> out);
PathRecord decode_path_record(std::span<const std::uint8_t, kPathRecordBytes> in);

// ---- NodeRecord (15.2.5.2): LID, reserved, NodeInfo (40), NodeDescription (64) -----------
inline constexpr std::size_t kNodeRecordBytes = 108;
struct NodeRecord {
  std::uint16_t lid = 0;
  NodeInfo node_info{};
  NodeDescription description{};
};
namespace node_comp {
inline constexpr std::uint64_t kLid = 1ull << 0, kBaseVersion = 1ull << 2,
                               kClassVersion = 1ull << 3, kNodeType = 1ull << 4,
                               kNumPorts = 1ull << 5, kSystemImageGuid = 1ull << 6,
                               kNodeGuid = 1ull << 7, kPortGuid = 1ull << 8,
                               kPartitionCap = 1ull << 9, kDeviceId = 1ull << 10,
                               kRevision = 1ull << 11, kLocalPortNum = 1ull << 12,
                               kVendorId = 1ull << 13, kNodeDescription = 1ull << 14;
}  // namespace node_comp
void encode(const NodeRecord& r, std::span<std::uint8_t, kNodeRecordBytes> out);
NodeRecord decode_node_record(std::span<const std::uint8_t, kNodeRecordBytes> in);

// ---- PortInfoRecord (15.2.5.3): EndportLID, PortNum, Options, PortInfo (64) --------------
inline constexpr std::size_t kPortInfoRecordBytes = 68;
struct PortInfoRecord {
  std::uint16_t endport_lid = 0;
  std::uint8_t port_num = 0;
  std::uint8_t options = 0;
  PortInfo port_info{};
};
namespace portinfo_comp {
// EndportLID and PortNum; bit 2 is Options, then one bit per PortInfo field in order (M_Key
// 3, GIDPrefix 4, LID 5, MasterSMLID 6, CapabilityMask 7, ...).
inline constexpr std::uint64_t kEndportLid = 1ull << 0, kPortNum = 1ull << 1, kOptions = 1ull << 2,
                               kLid = 1ull << 5, kCapabilityMask = 1ull << 7;
}  // namespace portinfo_comp
void encode(const PortInfoRecord& r, std::span<std::uint8_t, kPortInfoRecordBytes> out);
PortInfoRecord decode_port_info_record(std::span<const std::uint8_t, kPortInfoRecordBytes> in);

// ---- P_KeyTableRecord (15.2.5.11): LID, BlockNum, PortNum, reserved (3), P_KeyTable (64) --
inline constexpr std::size_t kPKeyTableRecordBytes = 72;
struct PKeyTableRecord {
  std::uint16_t lid = 0;        // the end port's LID (switch: its port-0 LID)
  std::uint16_t block_num = 0;  // block of 32 P_Keys
  std::uint8_t port_num = 0;    // switch: any port 0..N; CA: the port
  std::array<std::uint16_t, 32> pkeys{};
  bool operator==(const PKeyTableRecord&) const = default;
};
namespace pkey_comp {
inline constexpr std::uint64_t kLid = 1ull << 0, kBlockNum = 1ull << 1, kPortNum = 1ull << 2;
}  // namespace pkey_comp
void encode(const PKeyTableRecord& r, std::span<std::uint8_t, kPKeyTableRecordBytes> out);
PKeyTableRecord decode_pkey_table_record(std::span<const std::uint8_t, kPKeyTableRecordBytes> in);

// ---- ServiceRecord (15.2.5.14), 176 bytes ------------------------------------------------
inline constexpr std::size_t kServiceRecordBytes = 176;
inline constexpr std::uint32_t kServiceLeaseInfinite = 0xFFFFFFFF;
struct ServiceRecord {
  std::uint64_t service_id = 0;           // 0-7
  std::array<std::uint8_t, 16> gid{};     // 8-23: the port providing the service
  std::uint16_t pkey = 0;                 // 24-25
  std::uint32_t lease = 0;                // 28-31: seconds; 0xFFFFFFFF = forever
  std::array<std::uint8_t, 16> key{};     // 32-47
  std::array<char, 64> name{};            // 48-111, UTF-8, NUL padded
  std::array<std::uint8_t, 16> data8{};   // 112-127
  std::array<std::uint16_t, 8> data16{};  // 128-143
  std::array<std::uint32_t, 4> data32{};  // 144-159
  std::array<std::uint64_t, 2> data64{};  // 160-175
  bool operator==(const ServiceRecord&) const = default;
};
namespace service_comp {  // 15.2.5.14 (OpenSM's IB_SR_COMPMASK_*); data bits 7..36
inline constexpr std::uint64_t kId = 1ull << 0, kGid = 1ull << 1, kPkey = 1ull << 2,
                               kLease = 1ull << 4, kKey = 1ull << 5, kName = 1ull << 6;
}  // namespace service_comp
void encode(const ServiceRecord& r, std::span<std::uint8_t, kServiceRecordBytes> out);
ServiceRecord decode_service_record(std::span<const std::uint8_t, kServiceRecordBytes> in);

// ---- MCMemberRecord (15.2.5.17), 52 bytes ------------------------------------------------
inline constexpr std::size_t kMcMemberRecordBytes = 52;
struct McMemberRecord {
  std::array<std::uint8_t, 16> mgid{};      // 0-15
  std::array<std::uint8_t, 16> port_gid{};  // 16-31
  std::uint32_t qkey = 0;                   // 32-35
  std::uint16_t mlid = 0;                   // 36-37
  Selector mtu_selector = Selector::kGreater;
  std::uint8_t mtu = 0;  // 38: selector 7:6, MTU 5:0
  std::uint8_t tclass = 0;
  std::uint16_t pkey = 0;  // 40-41
  Selector rate_selector = Selector::kGreater;
  std::uint8_t rate = 0;  // 42
  Selector packet_life_time_selector = Selector::kGreater;
  std::uint8_t packet_life_time = 0;  // 43
  std::uint8_t sl = 0;                // 44 7:4
  std::uint32_t flow_label = 0;       // 20 bits, 44 3:0 .. 46
  std::uint8_t hop_limit = 0;         // 47
  std::uint8_t scope = 0;             // 48 7:4
  std::uint8_t join_state = 0;        // 48 3:0: bit 0 full, 1 non-member, 2 send-only
  bool proxy_join = false;            // 49 bit 7
  bool operator==(const McMemberRecord&) const = default;
};
namespace mcmember_comp {
inline constexpr std::uint64_t kMgid = 1ull << 0, kPortGid = 1ull << 1, kQkey = 1ull << 2,
                               kMlid = 1ull << 3, kMtuSelector = 1ull << 4, kMtu = 1ull << 5,
                               kTclass = 1ull << 6, kPkey = 1ull << 7, kRateSelector = 1ull << 8,
                               kRate = 1ull << 9, kPacketLifeTimeSelector = 1ull << 10,
                               kPacketLifeTime = 1ull << 11, kSl = 1ull << 12,
                               kFlowLabel = 1ull << 13, kHopLimit = 1ull << 14, kScope = 1ull << 15,
                               kJoinState = 1ull << 16, kProxyJoin = 1ull << 17;
}  // namespace mcmember_comp
void encode(const McMemberRecord& r, std::span<std::uint8_t, kMcMemberRecordBytes> out);
McMemberRecord decode_mcmember_record(std::span<const std::uint8_t, kMcMemberRecordBytes> in);

// AttributeOffset (in 8-byte words) of a record of `bytes` bytes: records are 8-byte aligned.
constexpr std::uint16_t attr_offset_for(std::size_t bytes) {
  return static_cast<std::uint16_t>((bytes + 7) / 8);
}

// IBA rate code (Table 205) of a link, from its Gb/s; 0 when none fits.
std::uint8_t rate_code_of_gbps(double gbps);
double gbps_of_rate_code(std::uint8_t code);

}  // namespace weft::wire
