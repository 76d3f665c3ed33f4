// wire/mad_attrs.hpp — the SMP attribute layouts mad.hpp does not carry (IBA 14.2.5): GUIDInfo
// (14.2.5.5), SLtoVLMappingTable (14.2.5.8), VLArbitrationTable (14.2.5.9),
// MulticastForwardingTable (14.2.5.12), the Notice used by traps (13.4.8.2), the PMA
// ClassPortInfo (13.4.8.1), and the MAD status codes (13.4.7, Table 112).
// Each encodes into / decodes from the 64-byte SMP data field (ClassPortInfo: the PMA data).
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>

#include "src/wire/mad.hpp"

namespace weft::wire {

// Attribute ids mad.hpp's SmpAttr lacks (IBA 14.2.5, Table 145).
enum class SmpAttrExt : std::uint16_t {
  kNotice = 0x0002,
  kGuidInfo = 0x0014,
  kSlToVlMappingTable = 0x0017,
  kVlArbitrationTable = 0x0018,
  kRandomForwardingTable = 0x001A,
  kMulticastForwardingTable = 0x001B,
  kSmInfo = 0x0020,
  kVendorDiag = 0x0030,
  kLedInfo = 0x0031,
};

// MAD status field (IBA 13.4.7, Table 112): bit 0 busy, bit 1 redirect, bits 4:2 the code.
enum class MadStatus : std::uint16_t {
  kOk = 0x0000,
  kBadVersion = 0x0004,             // class version not supported
  kUnsupportedMethod = 0x0008,      // method not supported
  kUnsupportedMethodAttr = 0x000C,  // method/attribute combination not supported
  kInvalidField = 0x001C,           // invalid value in attribute or attribute modifier
};

// Additional MAD methods (IBA 13.4.5, Table 111) used by agents here.
inline constexpr std::uint8_t kMethodResponseBit = 0x80;

struct GuidInfo {  // 14.2.5.5: 8 GUIDs per block
  std::array<std::uint64_t, 8> guid{};
};
struct SlToVlTable {  // 14.2.5.8: VL for SL 0..15, 4 bits each, SL0 in the high nibble of byte 0
  std::array<std::uint8_t, 16> vl{};
};
struct VlArbBlock {  // 14.2.5.9: 32 entries of {VL (4 bits), Weight (8 bits)}, 2 bytes each
  struct Entry {
    std::uint8_t vl = 0;
    std::uint8_t weight = 0;
  };
  std::array<Entry, 32> entry{};
};
struct MulticastForwardingTable {  // 14.2.5.12: 32 PortMasks of 16 bits for one position
  std::array<std::uint16_t, 32> port_mask{};
};

// Notice (13.4.8.2). In an SMP the 64 data bytes hold the Notice up to DataDetails; the
// IssuerGID (bytes 64-79 of the full Notice) does not fit and is not carried.
inline constexpr std::size_t kNoticeDetailsBytes = 54;
struct Notice {
  bool is_generic = true;
  std::uint8_t type = 0;            // 7 bits: 0 fatal, 1 urgent, 2 security, 3 SM, 4 info
  std::uint32_t producer_type = 0;  // 24 bits (generic): 1 CA, 2 switch, 3 router, 4 class mgr
  std::uint16_t trap_number = 0;    // generic: the trap number; vendor: DeviceID
  std::uint16_t issuer_lid = 0;
  bool notice_toggle = false;
  std::uint16_t notice_count = 0;  // 15 bits
  std::array<std::uint8_t, kNoticeDetailsBytes> data_details{};
};
inline constexpr std::uint16_t kTrapLinkStateChange = 128;  // 14.2.5.1, Table 119
inline constexpr std::uint8_t kNoticeTypeUrgent = 1;
inline constexpr std::uint32_t kProducerCa = 1, kProducerSwitch = 2;

// PMA ClassPortInfo (13.4.8.1), the fields a PMA reports; 72 bytes.
struct ClassPortInfo {
  std::uint8_t base_version = 1;
  std::uint8_t class_version = 1;
  std::uint16_t capability_mask = 0;
  std::uint32_t capability_mask2 = 0;  // 27 bits
  std::uint8_t resp_time_value = 0;    // 5 bits
  std::array<std::uint8_t, 16> redirect_gid{};
  std::uint32_t redirect_flow_label = 0;  // 20 bits; TC 8 bits and SL 4 bits beside it
  std::uint8_t redirect_tc = 0;
  std::uint8_t redirect_sl = 0;
  std::uint16_t redirect_lid = 0;
  std::uint16_t redirect_pkey = 0;
  std::uint32_t redirect_qp = 0;  // 24 bits
  std::uint32_t redirect_qkey = 0;
  std::array<std::uint8_t, 16> trap_gid{};
  std::uint32_t trap_flow_label = 0;
  std::uint8_t trap_tc = 0;
  std::uint8_t trap_sl = 0;
  std::uint16_t trap_lid = 0;
  std::uint16_t trap_pkey = 0;
  std::uint8_t trap_hop_limit = 0;
  std::uint32_t trap_qp = 0;  // 24 bits
  std::uint32_t trap_qkey = 0;
};

void encode(const GuidInfo& v, SmpData out);
void encode(const SlToVlTable& v, SmpData out);
void encode(const VlArbBlock& v, SmpData out);
void encode(const MulticastForwardingTable& v, SmpData out);
void encode(const Notice& v, SmpData out);
void encode(const ClassPortInfo& v, PmaData out);
GuidInfo decode_guid_info(ConstSmpData in);
SlToVlTable decode_sl2vl(ConstSmpData in);
VlArbBlock decode_vl_arb(ConstSmpData in);
MulticastForwardingTable decode_mft(ConstSmpData in);
Notice decode_notice(ConstSmpData in);
ClassPortInfo decode_class_port_info(ConstPmaData in);

}  // namespace weft::wire
