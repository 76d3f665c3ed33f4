// emu/sma/node_state.hpp — the management-visible state of one emulated node (a switch or a
// channel adapter): what its Subnet Management Agent reports and the SM writes (IBA 14.2.5), and
// the performance counters its PMA reports (IBA 16.1.3.5, 16.1.4.11).
//
// Plain data. The fabric owns one NodeState per node and reads it on the data path directly:
// `ports[p].state`, `lft[dlid]`, `ports[out].sl2vl[in][sl]`, `mft[mlid - kMulticastLidBase]` are
// all O(1). The SMA (sma.hpp) and PMA (pma.hpp) are the only writers of the SM-owned fields; the
// fabric writes the link-owned fields (physical state, active width/speed/MTU, counters) through
// the helpers at the bottom of this file.
//
// Port indexing: `ports` always has num_ports + 1 entries. On a switch, ports[0] is the switch
// management port (it holds the switch's LID, LMC, SMLID, M_Key; IBA 14.2.5.6) and ports[1..N]
// the external ports. On a CA, ports[0] is unused (left default) and ports[1..N] are the ports.
// Thread-safety: none; one owner (the fabric's event loop).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/wire/mad.hpp"

namespace weft::sma {

using wire::NodeType;
// The logical port state, IBA 7.2 / 14.2.5.6 PortState: Down, Init, Armed, Active.
using LinkState = wire::PortState;

// PortPhysicalState, IBA 14.2.5.6 Table 148 (5.6.x): the physical link state machine.
enum class PhysState : std::uint8_t {
  kNoStateChange = 0,
  kSleep = 1,
  kPolling = 2,
  kDisabled = 3,
  kPortConfigurationTraining = 4,
  kLinkUp = 5,
  kLinkErrorRecovery = 6,
  kPhyTest = 7,
};
std::string_view to_string(LinkState s);  // "Down", "Init", "Armed", "Active", "NoChange"
std::string_view to_string(PhysState s);  // "Sleep", "Polling", "LinkUp", ...

// ---- sizes and codes ----------------------------------------------------------------------
inline constexpr std::uint16_t kLinearFdbCap = 49152;       // unicast LIDs 0..0xBFFF
inline constexpr std::uint16_t kMulticastLidBase = 0xC000;  // first multicast LID (IBA 4.1.1)
inline constexpr std::uint16_t kMulticastFdbCapDefault = 1024;
inline constexpr std::uint8_t kLftUnreachable = 0xFF;    // LFT entry: no route (14.2.5.10)
inline constexpr std::size_t kLftBlockEntries = 64;      // LIDs per LFT block
inline constexpr std::size_t kMftBlockEntries = 32;      // MLIDs per MFT block (14.2.5.12)
inline constexpr std::size_t kMftPortsPerPosition = 16;  // ports per 16-bit PortMask
inline constexpr std::size_t kMftPositions = 16;         // 16 x 16 = 256 ports max
inline constexpr std::size_t kPKeyBlockEntries = 32;     // P_Keys per block (14.2.5.7)
inline constexpr std::size_t kGuidBlockEntries = 8;      // GUIDs per GUIDInfo block (14.2.5.5)
inline constexpr std::size_t kSlCount = 16;              // SLs 0..15 (SLtoVL, 14.2.5.8)
inline constexpr std::size_t kVlArbEntriesMax = 64;      // per VLArb table (14.2.5.9)
inline constexpr std::size_t kVlArbBlockEntries = 32;    // entries per VLArb block
inline constexpr std::uint8_t kVl15 = 15;                // management VL
inline constexpr std::uint16_t kDefaultPKey = 0xFFFF;    // full-member default partition

// MTU codes (IBA 14.2.5.6): 1=256 2=512 3=1024 4=2048 5=4096.
inline constexpr std::uint8_t kMtu256 = 1, kMtu512 = 2, kMtu1024 = 3, kMtu2048 = 4, kMtu4096 = 5;
// LinkWidth bits: 1=1x 2=4x 4=8x 8=12x. LinkSpeed bits: 1=SDR 2=DDR 4=QDR.
inline constexpr std::uint8_t kWidth1x = 1, kWidth4x = 2, kWidth8x = 4, kWidth12x = 8;
inline constexpr std::uint8_t kSpeedSdr = 1, kSpeedDdr = 2, kSpeedQdr = 4;
// VLCap / OperationalVLs codes: 1=VL0 2=VL0-1 3=VL0-3 4=VL0-7 5=VL0-14.
inline constexpr std::uint8_t kVlCapVl0 = 1, kVlCapVl0To1 = 2, kVlCapVl0To3 = 3, kVlCapVl0To7 = 4,
                              kVlCapVl0To14 = 5;

// One VLArbitrationTable entry (14.2.5.9): a VL and its weight in 64-byte units.
struct VlArbEntry {
  std::uint8_t vl = 0;      // 4 bits
  std::uint8_t weight = 0;  // 0 = skip this entry
  bool operator==(const VlArbEntry&) const = default;
};

// The PMA counters of one port. The PortCounters fields (16.1.3.5) have the IBA widths and stop
// at their all-ones value instead of wrapping; the *_ext fields are the 64-bit
// PortCountersExtended set (16.1.4.11), kept separately so clearing one set leaves the other.
// Data counters count 4-byte words, as the IBA does.
struct PortCounters {
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
  std::uint32_t port_xmit_data = 0;  // 4-byte words
  std::uint32_t port_rcv_data = 0;
  std::uint32_t port_xmit_pkts = 0;
  std::uint32_t port_rcv_pkts = 0;
  std::uint32_t port_xmit_wait = 0;  // ticks the port had data but no credits

  std::uint64_t port_xmit_data_ext = 0;
  std::uint64_t port_rcv_data_ext = 0;
  std::uint64_t port_xmit_pkts_ext = 0;
  std::uint64_t port_rcv_pkts_ext = 0;
  std::uint64_t port_unicast_xmit_pkts = 0;
  std::uint64_t port_unicast_rcv_pkts = 0;
  std::uint64_t port_multicast_xmit_pkts = 0;
  std::uint64_t port_multicast_rcv_pkts = 0;

  // Saturating add for a counter `bits` wide (IBA 16.1.3.5: "stops at all ones").
  template <class T>
  static void sat_add(T& c, std::uint64_t n, unsigned bits = sizeof(T) * 8) {
    const std::uint64_t max = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
    const std::uint64_t v = std::uint64_t{c} + n;
    c = static_cast<T>(v > max || v < n ? max : v);
  }
  // The fabric's hooks: one packet of `bytes` bytes (LRH through VCRC) sent / received.
  void count_xmit(std::uint64_t bytes, bool multicast = false) {
    sat_add(port_xmit_data, bytes / 4);
    sat_add(port_xmit_pkts, 1);
    port_xmit_data_ext += bytes / 4;
    ++port_xmit_pkts_ext;
    ++(multicast ? port_multicast_xmit_pkts : port_unicast_xmit_pkts);
  }
  void count_rcv(std::uint64_t bytes, bool multicast = false) {
    sat_add(port_rcv_data, bytes / 4);
    sat_add(port_rcv_pkts, 1);
    port_rcv_data_ext += bytes / 4;
    ++port_rcv_pkts_ext;
    ++(multicast ? port_multicast_rcv_pkts : port_unicast_rcv_pkts);
  }
  void count_rcv_error() { sat_add(port_rcv_errors, 1); }
  void count_switch_relay_error() { sat_add(port_rcv_switch_relay_errors, 1); }
  void count_xmit_discard() { sat_add(port_xmit_discards, 1); }
  void count_xmit_wait(std::uint64_t ticks) { sat_add(port_xmit_wait, ticks); }
  void count_symbol_error() { sat_add(symbol_error_counter, 1); }
  void count_link_error_recovery() { sat_add(link_error_recovery_counter, 1); }
  void count_link_downed() { sat_add(link_downed_counter, 1); }
  void count_vl15_dropped() { sat_add(vl15_dropped, 1); }
};

// One port as the SMA sees it (PortInfo, 14.2.5.6, plus the per-port tables).
struct PortState {
  std::uint8_t port_num = 0;
  std::uint64_t port_guid = 0;                       // also GUIDInfo index 0
  std::uint64_t gid_prefix = 0xFE80000000000000ull;  // link-local default (IBA 4.1.1)
  // Addressing. On a switch only ports[0] carries LID/LMC/SMLID (external ports report 0).
  std::uint16_t lid = 0;
  std::uint8_t lmc = 0;             // 3 bits
  std::uint16_t master_sm_lid = 0;  // SMLID: where traps go
  std::uint8_t master_sm_sl = 0;    // 4 bits
  // M_Key (14.2.4). The SMA checks it minimally: see sma.hpp.
  std::uint64_t m_key = 0;
  std::uint16_t m_key_lease_period = 0;
  std::uint8_t m_key_protect_bits = 0;  // 2 bits
  std::uint16_t m_key_violations = 0;
  std::uint16_t p_key_violations = 0;
  std::uint16_t q_key_violations = 0;
  std::uint32_t capability_mask = 0;
  std::uint16_t capability_mask2 = 0;
  std::uint16_t diag_code = 0;
  // States (IBA 7.2). The SMA moves `state` on PortInfo Set; the fabric moves phys_state and
  // brings state Down -> Init when a link trains (link_up / link_down below).
  LinkState state = LinkState::kDown;
  PhysState phys_state = PhysState::kPolling;
  std::uint8_t link_down_default_state = 2;  // 4 bits: 1 Sleep, 2 Polling
  // Link geometry: supported is fixed by the device, enabled is set by the SM, active is the
  // result of training with the neighbour (the fabric computes it).
  std::uint8_t link_width_supported = kWidth1x | kWidth4x;
  std::uint8_t link_width_enabled = kWidth1x | kWidth4x;
  std::uint8_t link_width_active = kWidth4x;
  std::uint8_t link_speed_supported = kSpeedSdr | kSpeedDdr | kSpeedQdr;  // 4 bits
  std::uint8_t link_speed_enabled = kSpeedSdr | kSpeedDdr | kSpeedQdr;    // 4 bits
  std::uint8_t link_speed_active = kSpeedQdr;                             // 4 bits
  std::uint8_t mtu_cap = kMtu4096;                                        // 4 bits
  std::uint8_t neighbor_mtu = kMtu4096;         // 4 bits, the active MTU the SM chose
  std::uint8_t vl_cap = kVlCapVl0To7;           // 4 bits
  std::uint8_t operational_vls = kVlCapVl0To7;  // 4 bits, <= vl_cap
  std::uint8_t vl_high_limit = 0;
  std::uint8_t vl_arb_high_cap = 8;  // entries of the high-priority table
  std::uint8_t vl_arb_low_cap = 8;   // entries of the low-priority table
  std::uint8_t vl_stall_count = 7;   // 3 bits
  std::uint8_t hoq_life = 18;        // 5 bits
  std::uint8_t init_type = 0;
  std::uint8_t init_type_reply = 0;
  bool partition_enforcement_inbound = false;
  bool partition_enforcement_outbound = false;
  bool filter_raw_inbound = false;
  bool filter_raw_outbound = false;
  bool client_reregister = false;
  std::uint8_t subnet_timeout = 0;     // 5 bits
  std::uint8_t resp_time_value = 8;    // 5 bits
  std::uint8_t local_phy_errors = 15;  // 4 bits, threshold
  std::uint8_t overrun_errors = 15;    // 4 bits, threshold
  std::uint16_t max_credit_hint = 0;
  std::uint32_t link_round_trip_latency = 0;  // 24 bits

  // P_KeyTable (14.2.5.7): size = NodeInfo.PartitionCap on a CA and on switch port 0,
  // SwitchInfo.PartitionEnforcementCap on switch external ports.
  std::vector<std::uint16_t> pkeys;
  // SLtoVLMappingTable (14.2.5.8): sl2vl[in][sl] is the VL that SL maps to leaving this port
  // when the packet came in on port `in`. A CA port has one table (index 0); a switch port has
  // num_ports + 1 (index = input port, 0 = from the switch's own management port).
  std::vector<std::array<std::uint8_t, kSlCount>> sl2vl;
  // VLArbitrationTable (14.2.5.9): vl_arb_low_cap / vl_arb_high_cap entries are meaningful.
  std::array<VlArbEntry, kVlArbEntriesMax> vl_arb_low{};
  std::array<VlArbEntry, kVlArbEntriesMax> vl_arb_high{};
  // GUIDInfo (14.2.5.5): guid_cap entries; guids[0] is the port GUID.
  std::vector<std::uint64_t> guids;

  PortCounters counters;

  bool is_up() const { return phys_state == PhysState::kLinkUp; }
  // The VL a packet on `sl` takes when it leaves this port, having come in on `in_port`.
  std::uint8_t vl_for(std::uint8_t in_port, std::uint8_t sl) const {
    const auto& t = sl2vl.size() == 1 ? sl2vl[0] : sl2vl[in_port];
    return t[sl & 0xF];
  }
};

// SwitchInfo fields the SM reads and writes (14.2.5.4).
struct SwitchState {
  std::uint16_t linear_fdb_cap = kLinearFdbCap;
  std::uint16_t random_fdb_cap = 0;
  std::uint16_t multicast_fdb_cap = kMulticastFdbCapDefault;
  std::uint16_t linear_fdb_top = 0;  // highest LID the LFT holds; above it is unreachable
  std::uint8_t default_port = 0;
  std::uint8_t default_mcast_primary_port = 0;
  std::uint8_t default_mcast_not_primary_port = 0;
  std::uint8_t life_time_value = 18;  // 5 bits
  bool port_state_change = false;     // set by the SMA when a port changes state; SM clears
  std::uint8_t optimized_sl2vl = 0;
  std::uint16_t lids_per_port = 0;
  std::uint16_t partition_enforcement_cap = 32;
  std::uint8_t enforcement_flags = 0;  // In/OutboundEnforcementCap, FilterRaw In/Out, bits 7:4
  bool enhanced_port0 = false;
  std::uint16_t multicast_fdb_top = 0;
};

// What the SMA did not answer, per reason (for tests and checkers).
struct SmaStats {
  std::uint64_t smps_handled = 0;         // replies produced here
  std::uint64_t smps_forwarded = 0;       // directed-route SMPs relayed out another port
  std::uint64_t dropped_bad_mad = 0;      // undecodable: truncated, base version, bad hop fields
  std::uint64_t dropped_dr_rules = 0;     // 14.2.2 said discard
  std::uint64_t dropped_m_key = 0;        // M_Key check failed (14.2.4)
  std::uint64_t dropped_not_request = 0;  // a response or trap arrived at the SMA
  std::uint64_t pma_handled = 0;
  std::uint64_t pma_dropped = 0;
  std::uint64_t traps_repressed = 0;  // TrapRepress that matched the pending trap's TID
  std::uint64_t traps_repeated = 0;   // trap sends after the first (repeat_trap)
};

// The last trap this node sent that its SM has not repressed yet (IBA 13.4.9: a trap is sent
// again until a TrapRepress with its TID arrives). A newer trap replaces it.
struct PendingTrap {
  bool active = false;
  std::uint64_t tid = 0;
  std::uint32_t sends = 0;  // the first send and every repeat
};

struct NodeState {
  NodeType type = NodeType::kChannelAdapter;
  std::uint64_t node_guid = 0;
  std::uint64_t system_image_guid = 0;
  std::string description;             // NodeDescription, at most 64 bytes on the wire
  std::uint32_t vendor_id = 0x0002C9;  // 24 bits
  std::uint16_t device_id = 0;
  std::uint32_t revision = 0;
  std::uint16_t partition_cap = 32;  // P_Key table entries on a CA port / switch port 0
  std::uint8_t num_ports = 0;        // external ports
  std::vector<PortState> ports;      // num_ports + 1 entries; see the file comment

  // Switch only (empty on a CA).
  SwitchState sw;
  std::vector<std::uint8_t> lft;  // indexed by LID, size linear_fdb_cap, 0xFF = unreachable
  // mft[mlid - 0xC000][position] is the 16-port mask for ports 16*position .. 16*position+15.
  std::vector<std::array<std::uint16_t, kMftPositions>> mft;

  SmaStats stats;
  PendingTrap trap;  // see make_trap_128 / repeat_trap (sma.hpp)

  bool is_switch() const { return type == NodeType::kSwitch; }
  // The port whose PortInfo holds this node's LID for a request that arrived on in_port.
  PortState& lid_port(std::uint8_t in_port) { return ports[is_switch() ? 0 : in_port]; }
  const PortState& lid_port(std::uint8_t in_port) const { return ports[is_switch() ? 0 : in_port]; }
  // Unicast forwarding: the output port for dlid, or kLftUnreachable.
  std::uint8_t route(std::uint16_t dlid) const {
    if (dlid > sw.linear_fdb_top || dlid >= lft.size()) return kLftUnreachable;
    return lft[dlid];
  }
  // Multicast forwarding: does mlid go out `port`?
  bool mcast_has_port(std::uint16_t mlid, std::uint8_t port) const {
    if (mlid < kMulticastLidBase) return false;
    const std::size_t i = mlid - kMulticastLidBase;
    if (i >= mft.size()) return false;
    return (mft[i][port / kMftPortsPerPosition] >> (port % kMftPortsPerPosition)) & 1u;
  }
};

// ---- construction and link events (node_state.cpp) ----------------------------------------
struct NodeParams {
  std::uint64_t node_guid = 0;
  std::uint64_t system_image_guid = 0;  // 0 = same as node_guid
  std::string description;
  std::uint8_t num_ports = 1;
  std::uint16_t device_id = 0;
};
// A switch: port 0 up (LinkUp, Init), external ports Down/Polling, LFT all 0xFF, SL2VL all 0,
// P_Key tables with the default key 0xFFFF at index 0, port GUID of every port = node GUID.
NodeState make_switch(const NodeParams& p);
// A CA: ports 1..N Down/Polling, port GUID = node GUID + port number.
NodeState make_ca(const NodeParams& p);
// The fabric calls these when a link trains / fails. link_up moves a Down port to Init with
// PhysState LinkUp; link_down moves it to Down/Polling (a port the SM Disabled stays Disabled)
// and counts LinkDowned if it was up (LinkUp: not when a PortInfo Set took it down).
// Both return true when the logical state changed (the caller then sends trap 128 if the node
// is a switch, see sma.hpp make_trap_128) and set SwitchInfo.PortStateChange on a switch.
bool link_up(NodeState& n, std::uint8_t port);
bool link_down(NodeState& n, std::uint8_t port);

}  // namespace weft::sma
