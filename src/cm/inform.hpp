// cm/inform.hpp — event subscription through the SA (IBA 13.4.8.3, 15.2.5.12): the InformInfo
// record a port sends in a SubnAdmSet to subscribe to (or unsubscribe from) traps, the full
// 80-byte Notice the SA forwards in a SubnAdmReport (13.4.8.2: the SMP form plus IssuerGID), and
// which notices a subscription asks for. SaClient subscribes (inform_query) and answers Reports;
// emu/sa's SubnetAdmin keeps the subscriptions and sends the Reports.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "src/wire/mad_attrs.hpp"

namespace weft::cm {

inline constexpr std::uint16_t kSaAttrNotice = 0x0002;      // 15.2.5 Table 195
inline constexpr std::uint16_t kSaAttrInformInfo = 0x0003;  // 15.2.5 Table 195
inline constexpr std::uint8_t kSaMethodReport = 0x06, kSaMethodReportResp = 0x86;
inline constexpr std::size_t kInformInfoBytes = 36, kSaNoticeBytes = 80;
// Traps the SM (a class manager) produces (14.2.5.1, Table 119): a GID in / out of service.
inline constexpr std::uint16_t kTrapGidInService = 64, kTrapGidOutOfService = 65;
inline constexpr std::uint8_t kNoticeTypeInfo = 4;
inline constexpr std::uint32_t kProducerClassManager = 4;

// InformInfo (13.4.8.3, Table 126). 0xFFFF / 0xFFFFFF are "any"; a non-zero GID names one
// issuer, else LIDRangeBegin..End (Begin 0xFFFF: any LID).
struct InformInfo {
  std::array<std::uint8_t, 16> gid{};
  std::uint16_t lid_range_begin = 0xFFFF;
  std::uint16_t lid_range_end = 0;
  bool is_generic = true;
  bool subscribe = true;
  std::uint16_t type = 0xFFFF;
  std::uint16_t trap_number = 0xFFFF;      // generic; vendor: DeviceID
  std::uint32_t qpn = 1;                   // 24 bits: where Reports go (QP1 here)
  std::uint8_t resp_time_value = 0;        // 5 bits
  std::uint32_t producer_type = 0xFFFFFF;  // 24 bits; vendor: VendorID
};
void encode(const InformInfo& v, std::span<std::uint8_t, kInformInfoBytes> out);
InformInfo decode_inform_info(std::span<const std::uint8_t, kInformInfoBytes> in);

// The Notice attribute as SA Reports carry it: the 64 bytes of wire::Notice, then IssuerGID.
struct SaNotice {
  wire::Notice notice;
  std::array<std::uint8_t, 16> issuer_gid{};
};
void encode(const SaNotice& v, std::span<std::uint8_t, kSaNoticeBytes> out);
SaNotice decode_sa_notice(std::span<const std::uint8_t, kSaNoticeBytes> in);

// Does subscription `s` ask for notice `n` (13.4.8.3: issuer by GID or LID range, IsGeneric,
// Type, TrapNumber and ProducerType, each unless "any")?
bool inform_matches(const InformInfo& s, const SaNotice& n);

// The port GID a port GUID has on this subnet (default subnet prefix FE80::/64).
std::array<std::uint8_t, 16> port_gid(std::uint64_t port_guid);

}  // namespace weft::cm
