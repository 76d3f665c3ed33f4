// wire/mad.hpp — management datagrams (IBA chapter 13-16): the MAD common header (13.4.2),
// subnet management packets LID-routed and directed-route (14.2.1), the SMP attributes the
// emulated subnet manager uses (14.2.5), the performance-management counters (16.1.3.5, 16.1.4)
// and the directed-route hop rules (14.2.2). A MAD is the 256-byte payload of a UD SEND on QP0
// (SMPs) or QP1 (GMPs such as PMA). Structs are host order; encode/decode use big-endian bytes.
// Decoding is bounds-checked and returns MadError; encoding into a too-small span is a bug.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <weft/types.hpp>

namespace weft::wire {

inline constexpr std::size_t kMadBytes = 256, kMadHeaderBytes = 24, kSmpDataBytes = 64,
                             kDrPathBytes = 64, kPmaDataOffset = 64, kPmaDataBytes = 192;
inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint16_t kPermissiveLid = 0xFFFF;  // the permissive LID (IBA chapter 4)
inline constexpr std::uint32_t kQp0 = 0, kQp1 = 1;
inline constexpr std::uint32_t kQp1Qkey = 0x80010000;  // the well-known GSI Q_Key (IBA 13.5)

enum class MgmtClass : std::uint8_t {  // IBA 13.4.4, Table 110
  kSubnLidRouted = 0x01,
  kSubnDirectedRoute = 0x81,
  kSubnAdm = 0x03,
  kPerfMgt = 0x04,
};
enum class MadMethod : std::uint8_t {  // IBA 13.4.5, Table 111
  kGet = 0x01,
  kSet = 0x02,
  kGetResp = 0x81,
  kTrap = 0x05,
  kTrapRepress = 0x07,
};
enum class SmpAttr : std::uint16_t {  // IBA 14.2.5, Table 145
  kNodeDescription = 0x0010,
  kNodeInfo = 0x0011,
  kSwitchInfo = 0x0012,
  kPortInfo = 0x0015,
  kPKeyTable = 0x0016,
  kLinearForwardingTable = 0x0019,
};
enum class PmaAttr : std::uint16_t {  // IBA 16.1.2, Table 233
  kClassPortInfo = 0x0001,
  kPortCounters = 0x0012,
  kPortCountersExtended = 0x001D,
};

enum class MadError : std::uint8_t {
  kTruncated,       // fewer bytes than the layout needs
  kBadBaseVersion,  // BaseVersion != 1
  kBadClass,        // not the management class this decoder handles
  kBadHopCount,     // directed route: HopCnt > 63 or HopPtr beyond HopCnt + 1 (14.2.1.2)
};
std::string_view to_string(MadError e);

// ---- MAD common header (IBA 13.4.2) --------------------------------------------------------
struct MadHeader {
  std::uint8_t base_version = kMadBaseVersion;
  std::uint8_t mgmt_class = 0;
  std::uint8_t class_version = 1;
  std::uint8_t method = 0;           // 8 bits: bit 7 is R (response), 6:0 the method
  std::uint16_t status = 0;          // for directed-route SMPs bit 15 is D; see SmpDr
  std::uint16_t class_specific = 0;  // directed-route SMPs: HopPointer << 8 | HopCount
  std::uint64_t tid = 0;
  std::uint16_t attr_id = 0;
  std::uint32_t attr_mod = 0;
};
void encode_mad_header(const MadHeader& h, std::span<std::uint8_t, kMadHeaderBytes> out);
Result<MadHeader, MadError> decode_mad_header(std::span<const std::uint8_t> mad);

// ---- SMPs (IBA 14.2.1) ---------------------------------------------------------------------
struct SmpLid {  // 14.2.1.1
  MadHeader hdr{};
  std::uint64_t m_key = 0;
  std::array<std::uint8_t, kSmpDataBytes> data{};
};
struct SmpDr {               // 14.2.1.2
  MadHeader hdr{};           // status/class_specific are rebuilt from the fields below
  bool direction = false;    // D: false outgoing (from the SM), true returning
  std::uint16_t status = 0;  // 15 bits
  std::uint8_t hop_ptr = 0;
  std::uint8_t hop_cnt = 0;  // 0..63
  std::uint64_t m_key = 0;
  std::uint16_t dr_slid = kPermissiveLid;
  std::uint16_t dr_dlid = kPermissiveLid;
  std::array<std::uint8_t, kSmpDataBytes> data{};
  std::array<std::uint8_t, kDrPathBytes> initial_path{};  // [1..hop_cnt] are output ports
  std::array<std::uint8_t, kDrPathBytes> return_path{};   // [1..hop_cnt] are input ports
};
inline constexpr std::uint8_t kDrHopCountMax = 63;

void encode_smp(const SmpLid& s, std::span<std::uint8_t, kMadBytes> out);
void encode_smp(const SmpDr& s, std::span<std::uint8_t, kMadBytes> out);
// kBadClass unless MgmtClass is SubnLidRouted / SubnDirectedRoute respectively.
Result<SmpLid, MadError> decode_smp_lid(std::span<const std::uint8_t> mad);
Result<SmpDr, MadError> decode_smp_dr(std::span<const std::uint8_t> mad);

// ---- Directed-route hop processing (IBA 14.2.2) --------------------------------------------
// What a node does with a directed-route SMP. The SMP's hop pointer and paths are updated in
// place as the rules say; out_port is meaningful for kForward only.
enum class DrVerdict : std::uint8_t {
  kForward,       // send out of out_port
  kForwardByLid,  // the directed part is done; route by DrDLID (outgoing) / DrSLID (returning)
  kConsume,       // deliver to this node's SMA (outgoing) or SM (returning)
  kDiscard,       // the rules say drop it silently
};
struct DrDecision {
  DrVerdict verdict = DrVerdict::kDiscard;
  std::uint8_t out_port = 0;
};
std::string_view to_string(DrVerdict v);
// The node that starts an SMP (the SM with D=0, HopPtr=0) or that turns a request into its
// response (the SMA with D=1, HopPtr=HopCnt+1) calls dr_send (14.2.2.1, 14.2.2.3).
DrDecision dr_send(SmpDr& smp);
// A node that receives a directed-route SMP on in_port calls dr_receive (14.2.2.2 outgoing,
// 14.2.2.4 returning). Channel adapters (is_switch false) may only be path end points.
DrDecision dr_receive(SmpDr& smp, std::uint8_t in_port, bool is_switch, std::uint8_t num_ports);
// Turns a request into a GetResp for the same path: D=1, method GetResp, HopPtr unchanged.
void dr_make_response(SmpDr& smp);

// ---- SMP attributes (IBA 14.2.5) -----------------------------------------------------------
// Each encodes into / decodes from the 64-byte SMP data field.
using SmpData = std::span<std::uint8_t, kSmpDataBytes>;
using ConstSmpData = std::span<const std::uint8_t, kSmpDataBytes>;

enum class NodeType : std::uint8_t { kChannelAdapter = 1, kSwitch = 2, kRouter = 3 };
struct NodeInfo {  // 14.2.5.3, 40 bytes
  std::uint8_t base_version = 1;
  std::uint8_t class_version = 1;
  NodeType node_type = NodeType::kChannelAdapter;
  std::uint8_t num_ports = 1;
  std::uint64_t system_image_guid = 0;
  std::uint64_t node_guid = 0;
  std::uint64_t port_guid = 0;
  std::uint16_t partition_cap = 0;
  std::uint16_t device_id = 0;
  std::uint32_t revision = 0;
  std::uint8_t local_port_num = 0;
  std::uint32_t vendor_id = 0;  // 24 bits
};
struct NodeDescription {  // 14.2.5.2: 64 bytes of UTF-8, NUL padded
  std::array<char, 64> text{};
  std::string_view view() const;  // up to the first NUL
  void set(std::string_view s);   // truncates to 64 bytes
};
struct SwitchInfo {  // 14.2.5.4
  std::uint16_t linear_fdb_cap = 0;
  std::uint16_t random_fdb_cap = 0;
  std::uint16_t multicast_fdb_cap = 0;
  std::uint16_t linear_fdb_top = 0;
  std::uint8_t default_port = 0;
  std::uint8_t default_mcast_primary_port = 0;
  std::uint8_t default_mcast_not_primary_port = 0;
  std::uint8_t life_time_value = 0;  // 5 bits
  bool port_state_change = false;
  std::uint8_t optimized_sl2vl = 0;  // 2 bits
  std::uint16_t lids_per_port = 0;
  std::uint16_t partition_enforcement_cap = 0;
  std::uint8_t enforcement_flags = 0;  // In/OutboundEnforcementCap, FilterRaw In/Out (bits 7:4)
  bool enhanced_port0 = false;
  std::uint16_t multicast_fdb_top = 0;
};
enum class PortState : std::uint8_t {
  kNoChange = 0,
  kDown = 1,
  kInit = 2,
  kArmed = 3,
  kActive = 4
};
struct PortInfo {  // 14.2.5.6, the fields Weft's SM uses (reserved and vendor bits round-trip 0)
  std::uint64_t m_key = 0;
  std::uint64_t gid_prefix = 0;
  std::uint16_t lid = 0;
  std::uint16_t master_sm_lid = 0;
  std::uint32_t capability_mask = 0;
  std::uint16_t diag_code = 0;
  std::uint16_t m_key_lease_period = 0;
  std::uint8_t local_port_num = 0;
  std::uint8_t link_width_enabled = 0;
  std::uint8_t link_width_supported = 0;
  std::uint8_t link_width_active = 0;
  std::uint8_t link_speed_supported = 0;  // 4 bits
  PortState port_state = PortState::kDown;
  std::uint8_t port_phys_state = 0;          // 4 bits
  std::uint8_t link_down_default_state = 0;  // 4 bits
  std::uint8_t m_key_protect_bits = 0;       // 2 bits
  std::uint8_t lmc = 0;                      // 3 bits
  std::uint8_t link_speed_active = 0;        // 4 bits
  std::uint8_t link_speed_enabled = 0;       // 4 bits
  std::uint8_t neighbor_mtu = 0;             // 4 bits, IBA MTU code (1 = 256 .. 5 = 4096)
  std::uint8_t master_sm_sl = 0;             // 4 bits
  std::uint8_t vl_cap = 0;                   // 4 bits
  std::uint8_t init_type = 0;                // 4 bits
  std::uint8_t vl_high_limit = 0;
  std::uint8_t vl_arb_high_cap = 0;
  std::uint8_t vl_arb_low_cap = 0;
  std::uint8_t init_type_reply = 0;  // 4 bits
  std::uint8_t mtu_cap = 0;          // 4 bits
  std::uint8_t vl_stall_count = 0;   // 3 bits
  std::uint8_t hoq_life = 0;         // 5 bits
  std::uint8_t operational_vls = 0;  // 4 bits
  bool partition_enforcement_inbound = false;
  bool partition_enforcement_outbound = false;
  bool filter_raw_inbound = false;
  bool filter_raw_outbound = false;
  std::uint16_t m_key_violations = 0;
  std::uint16_t p_key_violations = 0;
  std::uint16_t q_key_violations = 0;
  std::uint8_t guid_cap = 0;
  bool client_reregister = false;
  std::uint8_t subnet_timeout = 0;    // 5 bits
  std::uint8_t resp_time_value = 0;   // 5 bits
  std::uint8_t local_phy_errors = 0;  // 4 bits
  std::uint8_t overrun_errors = 0;    // 4 bits
  std::uint16_t max_credit_hint = 0;
  std::uint32_t link_round_trip_latency = 0;  // 24 bits
  std::uint16_t capability_mask2 = 0;
};
struct LinearForwardingTable {  // 14.2.5.10: ports for LIDs 64*block .. 64*block+63
  std::array<std::uint8_t, 64> port{};
};
struct PKeyTable {  // 14.2.5.7: 32 P_Keys per block
  std::array<std::uint16_t, 32> pkey{};
};

void encode(const NodeInfo& v, SmpData out);
void encode(const NodeDescription& v, SmpData out);
void encode(const SwitchInfo& v, SmpData out);
void encode(const PortInfo& v, SmpData out);
void encode(const LinearForwardingTable& v, SmpData out);
void encode(const PKeyTable& v, SmpData out);
NodeInfo decode_node_info(ConstSmpData in);
NodeDescription decode_node_description(ConstSmpData in);
SwitchInfo decode_switch_info(ConstSmpData in);
PortInfo decode_port_info(ConstSmpData in);
LinearForwardingTable decode_lft(ConstSmpData in);
PKeyTable decode_pkey_table(ConstSmpData in);

// ---- Performance management (IBA 16.1) -----------------------------------------------------
// A PMA MAD is the common header, 40 reserved bytes, then 192 bytes of attribute data.
struct PmaMad {
  MadHeader hdr{};
  std::array<std::uint8_t, kPmaDataBytes> data{};
};
void encode_pma(const PmaMad& m, std::span<std::uint8_t, kMadBytes> out);
Result<PmaMad, MadError> decode_pma(std::span<const std::uint8_t> mad);  // kBadClass if not 0x04
using PmaData = std::span<std::uint8_t, kPmaDataBytes>;
using ConstPmaData = std::span<const std::uint8_t, kPmaDataBytes>;

struct PortCounters {  // 16.1.3.5, 44 bytes; counters saturate rather than wrap
  std::uint8_t port_select = 0;
  std::uint16_t counter_select = 0;
  std::uint16_t symbol_error_counter = 0;
  std::uint8_t link_error_recovery_counter = 0;
  std::uint8_t link_downed_counter = 0;
  std::uint16_t port_rcv_errors = 0;
  std::uint16_t port_rcv_remote_physical_errors = 0;
  std::uint16_t port_rcv_switch_relay_errors = 0;
  std::uint16_t port_xmit_discards = 0;
  std::uint8_t port_xmit_constraint_errors = 0;
  std::uint8_t port_rcv_constraint_errors = 0;
  std::uint8_t local_link_integrity_errors = 0;      // 4 bits
  std::uint8_t excessive_buffer_overrun_errors = 0;  // 4 bits
  std::uint16_t vl15_dropped = 0;
  std::uint32_t port_xmit_data = 0;  // in 4-byte words (16.1.3.5)
  std::uint32_t port_rcv_data = 0;
  std::uint32_t port_xmit_pkts = 0;
  std::uint32_t port_rcv_pkts = 0;
  std::uint32_t port_xmit_wait = 0;
};
struct PortCountersExtended {  // 16.1.4.11 (PortCountersExtended), 72 bytes
  std::uint8_t port_select = 0;
  std::uint16_t counter_select = 0;
  std::uint64_t port_xmit_data = 0;  // in 4-byte words
  std::uint64_t port_rcv_data = 0;
  std::uint64_t port_xmit_pkts = 0;
  std::uint64_t port_rcv_pkts = 0;
  std::uint64_t port_unicast_xmit_pkts = 0;
  std::uint64_t port_unicast_rcv_pkts = 0;
  std::uint64_t port_multicast_xmit_pkts = 0;
  std::uint64_t port_multicast_rcv_pkts = 0;
};
void encode(const PortCounters& v, PmaData out);
void encode(const PortCountersExtended& v, PmaData out);
PortCounters decode_port_counters(ConstPmaData in);
PortCountersExtended decode_port_counters_ext(ConstPmaData in);

}  // namespace weft::wire
