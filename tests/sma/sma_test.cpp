// tests/sma/sma_test.cpp — the SMA's attributes on a switch and a CA: every Get with exact field
// values, Sets that change state (and invalid Sets that must not), the port state machine, bad
// MADs, M_Key, trap 128 and link events.
#include "emu/sma/sma.hpp"

#include <gtest/gtest.h>

#include <weft/types.hpp>

#include "tests/sma/sma_test_util.hpp"

namespace weft::sma::test {
namespace {

using wire::MadStatus;
using wire::SmpAttr;
using wire::SmpAttrExt;

// ---- Gets ---------------------------------------------------------------------------------

TEST(SmaGet, NodeInfoSwitch) {
  NodeState sw = test_switch();
  MadReply r = dr_request(sw, 3, kGet, attr(SmpAttr::kNodeInfo), 0);
  ASSERT_EQ(r.status, 0);
  const Data d = smp_data(r.mad);
  // Raw bytes (IBA 14.2.5.3): versions, NodeType 2, NumPorts 8, LocalPortNum at 36, VendorID.
  EXPECT_EQ(d[0], 1);
  EXPECT_EQ(d[1], 1);
  EXPECT_EQ(d[2], 2);
  EXPECT_EQ(d[3], 8);
  EXPECT_EQ(d[36], 3);
  EXPECT_EQ(d[37], 0x00);
  EXPECT_EQ(d[38], 0x02);
  EXPECT_EQ(d[39], 0xC9);
  const wire::NodeInfo v = wire::decode_node_info(d);
  EXPECT_EQ(v.system_image_guid, kSwitchGuid);
  EXPECT_EQ(v.node_guid, kSwitchGuid);
  EXPECT_EQ(v.port_guid, kSwitchGuid);
  EXPECT_EQ(v.partition_cap, 32);
  EXPECT_EQ(v.device_id, 0xB924);
  EXPECT_EQ(v.revision, 0u);
  EXPECT_EQ(v.local_port_num, 3);
  EXPECT_EQ(v.vendor_id, 0x0002C9u);
}

TEST(SmaGet, NodeInfoCaReportsTheArrivalPort) {
  NodeState ca = test_ca();
  MadReply r = dr_request(ca, 2, kGet, attr(SmpAttr::kNodeInfo), 0);
  ASSERT_EQ(r.status, 0);
  const wire::NodeInfo v = wire::decode_node_info(smp_data(r.mad));
  EXPECT_EQ(v.node_type, wire::NodeType::kChannelAdapter);
  EXPECT_EQ(v.num_ports, 2);
  EXPECT_EQ(v.system_image_guid, 0x0002C90300002FFFull);
  EXPECT_EQ(v.node_guid, kCaGuid);
  EXPECT_EQ(v.port_guid, kCaGuid + 2);
  EXPECT_EQ(v.device_id, 0x1017);
  EXPECT_EQ(v.local_port_num, 2);
}

TEST(SmaGet, NodeDescription) {
  NodeState ca = test_ca();
  MadReply r = dr_request(ca, 1, kGet, attr(SmpAttr::kNodeDescription), 0);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(wire::decode_node_description(smp_data(r.mad)).view(), "weft-hca0 mlx5_0");
  EXPECT_EQ(r.mad[64 + 16], 0);  // NUL padded
}

TEST(SmaGet, SwitchInfo) {
  NodeState sw = test_switch();
  MadReply r = dr_request(sw, 1, kGet, attr(SmpAttr::kSwitchInfo), 0);
  ASSERT_EQ(r.status, 0);
  const Data d = smp_data(r.mad);
  EXPECT_EQ(d[0], 0xC0);  // LinearFDBCap 49152 = 0xC000
  EXPECT_EQ(d[1], 0x00);
  const wire::SwitchInfo v = wire::decode_switch_info(d);
  EXPECT_EQ(v.linear_fdb_cap, 49152);
  EXPECT_EQ(v.random_fdb_cap, 0);
  EXPECT_EQ(v.multicast_fdb_cap, 1024);
  EXPECT_EQ(v.linear_fdb_top, 0);
  EXPECT_EQ(v.life_time_value, 18);
  EXPECT_FALSE(v.port_state_change);
  EXPECT_EQ(v.partition_enforcement_cap, 32);
  EXPECT_EQ(d[11], 18 << 3);
}

TEST(SmaGet, PortInfoSwitchPort0AndExternal) {
  NodeState sw = test_switch();
  struct Case {
    std::uint32_t port;
    wire::PortState state;
    std::uint8_t phys;
  };
  for (const Case c : {Case{0, wire::PortState::kInit, 5}, Case{5, wire::PortState::kDown, 2}}) {
    MadReply r = dr_request(sw, 4, kGet, attr(SmpAttr::kPortInfo), c.port);
    ASSERT_EQ(r.status, 0);
    const Data d = smp_data(r.mad);
    const wire::PortInfo v = wire::decode_port_info(d);
    EXPECT_EQ(v.port_state, c.state) << c.port;
    EXPECT_EQ(v.port_phys_state, c.phys) << c.port;
    EXPECT_EQ(v.local_port_num, 4);
    EXPECT_EQ(v.gid_prefix, 0xFE80000000000000ull);
    EXPECT_EQ(v.lid, 0);
    EXPECT_EQ(v.link_width_supported, 3);
    EXPECT_EQ(v.link_width_enabled, 3);
    EXPECT_EQ(v.link_width_active, 2);
    EXPECT_EQ(v.link_speed_supported, 7);
    EXPECT_EQ(v.link_speed_enabled, 7);
    EXPECT_EQ(v.link_speed_active, 4);
    EXPECT_EQ(v.mtu_cap, 5);
    EXPECT_EQ(v.neighbor_mtu, 5);
    EXPECT_EQ(v.vl_cap, 4);
    EXPECT_EQ(v.operational_vls, 4);
    EXPECT_EQ(v.vl_arb_high_cap, 8);
    EXPECT_EQ(v.vl_arb_low_cap, 8);
    EXPECT_EQ(v.hoq_life, 18);
    EXPECT_EQ(v.guid_cap, 8);
    EXPECT_EQ(v.link_down_default_state, 2);
    // Byte 32: LinkSpeedSupported << 4 | PortState.
    EXPECT_EQ(d[32], (7 << 4) | static_cast<int>(c.state));
  }
  MadReply r0 = dr_request(sw, 4, kGet, attr(SmpAttr::kPortInfo), 0);
  EXPECT_EQ(wire::decode_port_info(smp_data(r0.mad)).capability_mask, 0x48u);
}

TEST(SmaGet, PortInfoCa) {
  NodeState ca = test_ca();
  ca.ports[2].lid = 0x21;
  ca.ports[2].lmc = 1;
  ca.ports[2].master_sm_lid = 1;
  // Modifier 0 is the port the SMP came in on; a named port answers for itself.
  for (std::uint32_t mod : {0u, 2u}) {
    MadReply r = dr_request(ca, 2, kGet, attr(SmpAttr::kPortInfo), mod);
    ASSERT_EQ(r.status, 0);
    const wire::PortInfo v = wire::decode_port_info(smp_data(r.mad));
    EXPECT_EQ(v.lid, 0x21);
    EXPECT_EQ(v.lmc, 1);
    EXPECT_EQ(v.master_sm_lid, 1);
    EXPECT_EQ(v.capability_mask, 0x02010048u);
    EXPECT_EQ(v.port_state, wire::PortState::kDown);
    EXPECT_EQ(v.local_port_num, 2);
  }
  EXPECT_EQ(dr_request(ca, 2, kGet, attr(SmpAttr::kPortInfo), 3).status,
            status(MadStatus::kInvalidField));
}

TEST(SmaGet, PKeyTable) {
  NodeState ca = test_ca();
  MadReply r = dr_request(ca, 1, kGet, attr(SmpAttr::kPKeyTable), 0);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(be16(r.mad, 64), 0xFFFF);
  for (std::size_t k = 1; k < 32; ++k) EXPECT_EQ(be16(r.mad, 64 + 2 * k), 0) << k;
  // Block 1 does not exist with PartitionCap 32.
  EXPECT_EQ(dr_request(ca, 1, kGet, attr(SmpAttr::kPKeyTable), 1).status,
            status(MadStatus::kInvalidField));
  NodeState sw = test_switch();
  // Switch: modifier = port << 16 | block.
  MadReply rs = dr_request(sw, 1, kGet, attr(SmpAttr::kPKeyTable), 5u << 16);
  EXPECT_EQ(rs.status, 0);
  EXPECT_EQ(be16(rs.mad, 64), 0xFFFF);
  EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttr::kPKeyTable), 9u << 16).status,
            status(MadStatus::kInvalidField));
}

TEST(SmaGet, GuidInfo) {
  NodeState ca = test_ca();
  MadReply r = dr_request(ca, 2, kGet, attr(SmpAttrExt::kGuidInfo), 0);
  ASSERT_EQ(r.status, 0);
  const wire::GuidInfo g = wire::decode_guid_info(smp_data(r.mad));
  EXPECT_EQ(g.guid[0], kCaGuid + 2);
  for (std::size_t k = 1; k < 8; ++k) EXPECT_EQ(g.guid[k], 0u);
  EXPECT_EQ(dr_request(ca, 2, kGet, attr(SmpAttrExt::kGuidInfo), 1).status,
            status(MadStatus::kInvalidField));
}

TEST(SmaGet, DefaultTablesAreEmpty) {
  NodeState sw = test_switch();
  MadReply lft = dr_request(sw, 1, kGet, attr(SmpAttr::kLinearForwardingTable), 0);
  ASSERT_EQ(lft.status, 0);
  for (std::size_t k = 0; k < 64; ++k) EXPECT_EQ(lft.mad[64 + k], 0xFF);
  MadReply mft = dr_request(sw, 1, kGet, attr(SmpAttrExt::kMulticastForwardingTable), 0);
  ASSERT_EQ(mft.status, 0);
  for (std::size_t k = 0; k < 64; ++k) EXPECT_EQ(mft.mad[64 + k], 0);
  MadReply sl2vl = dr_request(sw, 1, kGet, attr(SmpAttrExt::kSlToVlMappingTable), 0x0102);
  ASSERT_EQ(sl2vl.status, 0);
  for (std::size_t k = 0; k < 8; ++k) EXPECT_EQ(sl2vl.mad[64 + k], 0);
  MadReply vla = dr_request(sw, 1, kGet, attr(SmpAttrExt::kVlArbitrationTable), 0x10003);
  ASSERT_EQ(vla.status, 0);
  for (std::size_t k = 0; k < 64; ++k) EXPECT_EQ(vla.mad[64 + k], 0);
}

// Switch-only attributes on a CA, Set on read-only attributes, unknown attributes, bad methods.
TEST(SmaGet, UnsupportedCombinations) {
  NodeState ca = test_ca();
  NodeState sw = test_switch();
  struct Case {
    bool on_switch;
    std::uint8_t method;
    std::uint16_t attr;
    std::uint16_t status;
  };
  const Case cases[] = {
      {false, kGet, attr(SmpAttr::kSwitchInfo), status(MadStatus::kUnsupportedMethodAttr)},
      {false, kGet, attr(SmpAttr::kLinearForwardingTable),
       status(MadStatus::kUnsupportedMethodAttr)},
      {false, kGet, attr(SmpAttrExt::kMulticastForwardingTable),
       status(MadStatus::kUnsupportedMethodAttr)},
      {true, kSet, attr(SmpAttr::kNodeInfo), status(MadStatus::kUnsupportedMethodAttr)},
      {true, kSet, attr(SmpAttr::kNodeDescription), status(MadStatus::kUnsupportedMethodAttr)},
      {true, kGet, 0x0099, status(MadStatus::kUnsupportedMethodAttr)},
      {true, kGet, attr(SmpAttrExt::kRandomForwardingTable),
       status(MadStatus::kUnsupportedMethodAttr)},
      {true, 0x03, attr(SmpAttr::kNodeInfo), status(MadStatus::kUnsupportedMethod)},   // Send
      {false, 0x06, attr(SmpAttr::kPortInfo), status(MadStatus::kUnsupportedMethod)},  // Report
  };
  for (const Case& c : cases) {
    MadReply r = dr_request(c.on_switch ? sw : ca, 1, c.method, c.attr, 0);
    EXPECT_EQ(r.status, c.status) << std::hex << c.attr << " method " << int{c.method};
    EXPECT_EQ(be16(r.mad, 16), c.attr);
  }
}

// ---- Sets ---------------------------------------------------------------------------------

Data port_info_data(const PortState& p) {
  // The current PortInfo as a Set body: the way an SM does read-modify-write.
  wire::PortInfo v;
  v.m_key = p.m_key;
  v.lid = p.lid;
  v.master_sm_lid = p.master_sm_lid;
  v.lmc = p.lmc;
  v.neighbor_mtu = p.neighbor_mtu;
  v.operational_vls = 0;
  v.port_state = wire::PortState::kNoChange;
  v.hoq_life = p.hoq_life;
  v.vl_stall_count = p.vl_stall_count;
  Data d{};
  wire::encode(v, d);
  return d;
}

TEST(SmaSet, PortInfoAddressing) {
  NodeState ca = test_ca();
  wire::PortInfo v = wire::decode_port_info(port_info_data(ca.ports[1]));
  v.lid = 0x0042;
  v.lmc = 2;
  v.master_sm_lid = 0x0001;
  v.master_sm_sl = 3;
  v.subnet_timeout = 18;
  Data d{};
  wire::encode(v, d);
  MadReply r = dr_request(ca, 1, kSet, attr(SmpAttr::kPortInfo), 1, d);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(ca.ports[1].lid, 0x42);
  EXPECT_EQ(ca.ports[1].lmc, 2);
  EXPECT_EQ(ca.ports[1].master_sm_lid, 1);
  EXPECT_EQ(ca.ports[1].master_sm_sl, 3);
  EXPECT_EQ(ca.ports[1].subnet_timeout, 18);
  EXPECT_EQ(ca.ports[2].lid, 0);
  const wire::PortInfo got = wire::decode_port_info(smp_data(r.mad));
  EXPECT_EQ(got.lid, 0x42);
  EXPECT_EQ(got.lmc, 2);
  EXPECT_TRUE(r.state_changed_ports.empty());
  // A CA port does not take a Set aimed at its other port.
  EXPECT_EQ(dr_request(ca, 1, kSet, attr(SmpAttr::kPortInfo), 2, d).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(ca.ports[2].lid, 0);
}

TEST(SmaSet, SwitchLidLivesOnPort0) {
  NodeState sw = test_switch();
  wire::PortInfo v = wire::decode_port_info(port_info_data(sw.ports[0]));
  v.lid = 7;
  v.master_sm_lid = 1;
  Data d{};
  wire::encode(v, d);
  ASSERT_EQ(dr_request(sw, 2, kSet, attr(SmpAttr::kPortInfo), 0, d).status, 0);
  EXPECT_EQ(sw.ports[0].lid, 7);
  EXPECT_EQ(sw.ports[0].master_sm_lid, 1);
  // On an external port the addressing fields are not the port's: they stay 0.
  ASSERT_EQ(dr_request(sw, 2, kSet, attr(SmpAttr::kPortInfo), 3, d).status, 0);
  EXPECT_EQ(sw.ports[3].lid, 0);
  EXPECT_EQ(sw.ports[3].master_sm_lid, 0);
}

TEST(SmaSet, PortInfoInvalidFieldsChangeNothing) {
  struct Case {
    const char* what;
    void (*edit)(wire::PortInfo&);
  };
  const Case cases[] = {
      {"NeighborMTU above MTUCap", [](wire::PortInfo& v) { v.neighbor_mtu = 6; }},
      {"NeighborMTU 0", [](wire::PortInfo& v) { v.neighbor_mtu = 0; }},
      {"OperationalVLs above VLCap", [](wire::PortInfo& v) { v.operational_vls = 5; }},
      {"width not supported", [](wire::PortInfo& v) { v.link_width_enabled = 8; }},
      {"speed not supported", [](wire::PortInfo& v) { v.link_speed_enabled = 8; }},
      {"PhysState LinkUp not writable", [](wire::PortInfo& v) { v.port_phys_state = 5; }},
      {"LinkDownDefault 3", [](wire::PortInfo& v) { v.link_down_default_state = 3; }},
      {"PortState 5", [](wire::PortInfo& v) { v.port_state = static_cast<wire::PortState>(5); }},
  };
  for (const Case& c : cases) {
    NodeState ca = test_ca();
    wire::PortInfo v = wire::decode_port_info(port_info_data(ca.ports[1]));
    v.lid = 0x99;  // a valid change riding along: it must not be applied
    c.edit(v);
    Data d{};
    wire::encode(v, d);
    MadReply r = dr_request(ca, 1, kSet, attr(SmpAttr::kPortInfo), 1, d);
    EXPECT_EQ(r.status, status(MadStatus::kInvalidField)) << c.what;
    EXPECT_EQ(ca.ports[1].lid, 0) << c.what;
    EXPECT_EQ(wire::decode_port_info(smp_data(r.mad)).lid, 0) << c.what;
  }
}

TEST(SmaSet, PortInfoLinkEnables) {
  NodeState ca = test_ca();
  ca.ports[1].link_width_enabled = kWidth1x;
  ca.ports[1].link_speed_enabled = kSpeedSdr;
  wire::PortInfo v = wire::decode_port_info(port_info_data(ca.ports[1]));
  v.link_width_enabled = 0xFF;  // set to LinkWidthSupported
  v.link_speed_enabled = 0xF;   // set to LinkSpeedSupported
  v.operational_vls = kVlCapVl0To3;
  v.neighbor_mtu = kMtu2048;
  Data d{};
  wire::encode(v, d);
  ASSERT_EQ(dr_request(ca, 1, kSet, attr(SmpAttr::kPortInfo), 1, d).status, 0);
  EXPECT_EQ(ca.ports[1].link_width_enabled, kWidth1x | kWidth4x);
  EXPECT_EQ(ca.ports[1].link_speed_enabled, 7);
  EXPECT_EQ(ca.ports[1].operational_vls, kVlCapVl0To3);
  EXPECT_EQ(ca.ports[1].neighbor_mtu, kMtu2048);
  v.link_width_enabled = kWidth1x;
  v.link_speed_enabled = kSpeedDdr;
  wire::encode(v, d);
  ASSERT_EQ(dr_request(ca, 1, kSet, attr(SmpAttr::kPortInfo), 1, d).status, 0);
  EXPECT_EQ(ca.ports[1].link_width_enabled, kWidth1x);
  EXPECT_EQ(ca.ports[1].link_speed_enabled, kSpeedDdr);
}

// IBA 7.2 / 14.2.5.6: every (current state, requested state) pair.
TEST(SmaSet, PortStateTransitions) {
  using S = LinkState;
  constexpr std::uint8_t kNo = 0, kD = 1, kI = 2, kA = 3, kAc = 4, kBad = 5;
  struct Case {
    S from;
    std::uint8_t want;
    bool valid;
    S to;
  };
  const Case cases[] = {
      {S::kDown, kNo, true, S::kDown},       {S::kDown, kD, true, S::kDown},
      {S::kDown, kI, false, S::kDown},       {S::kDown, kA, false, S::kDown},
      {S::kDown, kAc, false, S::kDown},      {S::kInit, kNo, true, S::kInit},
      {S::kInit, kD, true, S::kDown},        {S::kInit, kI, true, S::kInit},
      {S::kInit, kA, true, S::kArmed},       {S::kInit, kAc, false, S::kInit},
      {S::kArmed, kD, true, S::kDown},       {S::kArmed, kI, false, S::kArmed},
      {S::kArmed, kA, true, S::kArmed},      {S::kArmed, kAc, true, S::kActive},
      {S::kActive, kD, true, S::kDown},      {S::kActive, kI, false, S::kActive},
      {S::kActive, kA, false, S::kActive},   {S::kActive, kAc, true, S::kActive},
      {S::kActive, kBad, false, S::kActive},
  };
  for (const Case& c : cases) {
    NodeState sw = test_switch();
    sw.ports[4].phys_state = PhysState::kLinkUp;
    sw.ports[4].state = c.from;
    wire::PortInfo v = wire::decode_port_info(port_info_data(sw.ports[4]));
    v.port_state = static_cast<wire::PortState>(c.want);
    Data d{};
    wire::encode(v, d);
    MadReply r = dr_request(sw, 1, kSet, attr(SmpAttr::kPortInfo), 4, d);
    const std::string what =
        "from " + std::to_string(static_cast<int>(c.from)) + " to " + std::to_string(c.want);
    EXPECT_EQ(r.status, c.valid ? 0 : status(MadStatus::kInvalidField)) << what;
    EXPECT_EQ(sw.ports[4].state, c.to) << what;
    EXPECT_EQ(wire::decode_port_info(smp_data(r.mad)).port_state, c.to) << what;
    const bool changed = c.to != c.from;
    EXPECT_EQ(r.state_changed_ports,
              changed ? std::vector<std::uint8_t>{4} : std::vector<std::uint8_t>{})
        << what;
    // A state the SM writes does not raise SwitchInfo.PortStateChange: only the link state
    // machine does (link_up / link_down, 14.2.5.4).
    EXPECT_FALSE(sw.sw.port_state_change) << what;
  }
}

// PortState Down on a trained port sends its PhysState to Polling (the link retrains);
// PortPhysicalState Disabled / Polling are written as asked; both list the port for the fabric
// and count LinkDownedCounter once when the link leaves LinkUp.
TEST(SmaSet, PortStateDownAndPhysicalStates) {
  NodeState sw = test_switch();
  ASSERT_TRUE(link_up(sw, 4));
  sw.ports[4].state = LinkState::kActive;
  auto set = [&](wire::PortState state, std::uint8_t phys) {
    wire::PortInfo v = wire::decode_port_info(port_info_data(sw.ports[4]));
    v.port_state = state;
    v.port_phys_state = phys;
    Data d{};
    wire::encode(v, d);
    return dr_request(sw, 1, kSet, attr(SmpAttr::kPortInfo), 4, d);
  };
  MadReply r = set(wire::PortState::kDown, 0);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.state_changed_ports, std::vector<std::uint8_t>{4});
  EXPECT_EQ(sw.ports[4].state, LinkState::kDown);
  EXPECT_EQ(sw.ports[4].phys_state, PhysState::kPolling);
  EXPECT_EQ(wire::decode_port_info(smp_data(r.mad)).port_phys_state, 2);
  EXPECT_EQ(sw.ports[4].counters.link_downed_counter, 1);
  EXPECT_FALSE(link_down(sw, 4)) << "the fabric's link_down then changes nothing";
  EXPECT_EQ(sw.ports[4].counters.link_downed_counter, 1);
  r = set(wire::PortState::kNoChange, 3);  // Disabled
  EXPECT_EQ(r.state_changed_ports, std::vector<std::uint8_t>{4});
  EXPECT_EQ(sw.ports[4].phys_state, PhysState::kDisabled);
  EXPECT_FALSE(link_down(sw, 4));
  EXPECT_EQ(sw.ports[4].phys_state, PhysState::kDisabled) << "link_down keeps Disabled";
  r = set(wire::PortState::kNoChange, 2);  // Polling
  EXPECT_EQ(r.state_changed_ports, std::vector<std::uint8_t>{4});
  EXPECT_EQ(sw.ports[4].phys_state, PhysState::kPolling);
  EXPECT_EQ(sw.ports[4].counters.link_downed_counter, 1);
  r = set(wire::PortState::kNoChange, 5);  // LinkUp is not writable
  EXPECT_EQ(r.status, status(MadStatus::kInvalidField));
  EXPECT_TRUE(r.state_changed_ports.empty());
}

TEST(SmaSet, LftBlocksAndLinearFdbTop) {
  NodeState sw = test_switch();
  Data d{};
  for (std::size_t k = 0; k < 64; ++k) d[k] = static_cast<std::uint8_t>(1 + k % 8);
  MadReply r = dr_request(sw, 1, kSet, attr(SmpAttr::kLinearForwardingTable), 2, d);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(smp_data(r.mad), d);
  EXPECT_EQ(sw.lft[128], 1);
  EXPECT_EQ(sw.lft[130], 3);
  EXPECT_EQ(sw.lft[191], 8);
  EXPECT_EQ(sw.lft[192], kLftUnreachable);
  EXPECT_EQ(sw.lft[127], kLftUnreachable);
  // LinearFDBTop still 0: the data path treats everything above it as unreachable.
  EXPECT_EQ(sw.route(130), kLftUnreachable);
  wire::SwitchInfo si = wire::decode_switch_info(
      smp_data(dr_request(sw, 1, kGet, attr(SmpAttr::kSwitchInfo), 0).mad));
  si.linear_fdb_top = 191;
  si.life_time_value = 10;
  Data sd{};
  wire::encode(si, sd);
  ASSERT_EQ(dr_request(sw, 1, kSet, attr(SmpAttr::kSwitchInfo), 0, sd).status, 0);
  EXPECT_EQ(sw.sw.linear_fdb_top, 191);
  EXPECT_EQ(sw.sw.life_time_value, 10);
  EXPECT_EQ(sw.route(130), 3);
  EXPECT_EQ(sw.route(192), kLftUnreachable);
  MadReply g = dr_request(sw, 1, kGet, attr(SmpAttr::kLinearForwardingTable), 2);
  EXPECT_EQ(smp_data(g.mad), d);
  // Block 767 is the last of 49152 LIDs; 768 is past LinearFDBCap.
  EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttr::kLinearForwardingTable), 767).status, 0);
  EXPECT_EQ(dr_request(sw, 1, kSet, attr(SmpAttr::kLinearForwardingTable), 768, d).status,
            status(MadStatus::kInvalidField));
  // LinearFDBTop at or above the cap is invalid.
  si.linear_fdb_top = 49152;
  wire::encode(si, sd);
  EXPECT_EQ(dr_request(sw, 1, kSet, attr(SmpAttr::kSwitchInfo), 0, sd).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(sw.sw.linear_fdb_top, 191);
}

TEST(SmaSet, MftBlocks) {
  NodeState sw = test_switch();
  Data d{};
  d[0] = 0x00;
  d[1] = 0x06;  // MLID 0xC020: ports 1, 2
  d[62] = 0x01;
  d[63] = 0x01;  // MLID 0xC03F: ports 0, 8
  // Modifier: position << 28 | block.
  MadReply r = dr_request(sw, 1, kSet, attr(SmpAttrExt::kMulticastForwardingTable), 1, d);
  ASSERT_EQ(r.status, 0);
  EXPECT_TRUE(sw.mcast_has_port(0xC020, 1));
  EXPECT_TRUE(sw.mcast_has_port(0xC020, 2));
  EXPECT_FALSE(sw.mcast_has_port(0xC020, 3));
  EXPECT_TRUE(sw.mcast_has_port(0xC03F, 0));
  EXPECT_TRUE(sw.mcast_has_port(0xC03F, 8));
  EXPECT_FALSE(sw.mcast_has_port(0xC000, 1));
  EXPECT_EQ(smp_data(dr_request(sw, 1, kGet, attr(SmpAttrExt::kMulticastForwardingTable), 1).mad),
            d);
  // Position 1 (ports 16-31) does not exist on an 8-port switch; block 32 is past the cap.
  EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttrExt::kMulticastForwardingTable), 1u << 28).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttrExt::kMulticastForwardingTable), 32).status,
            status(MadStatus::kInvalidField));
}

TEST(SmaSet, PKeyTable) {
  NodeState ca = test_ca();
  Data d{};
  d[0] = 0xFF;
  d[1] = 0xFF;
  d[2] = 0x80;
  d[3] = 0x01;
  d[62] = 0x7F;
  d[63] = 0xFE;
  ASSERT_EQ(dr_request(ca, 2, kSet, attr(SmpAttr::kPKeyTable), 0, d).status, 0);
  EXPECT_EQ(ca.ports[2].pkeys[1], 0x8001);
  EXPECT_EQ(ca.ports[2].pkeys[31], 0x7FFE);
  EXPECT_EQ(ca.ports[1].pkeys[1], 0);
  EXPECT_EQ(smp_data(dr_request(ca, 2, kGet, attr(SmpAttr::kPKeyTable), 0).mad), d);
  NodeState sw = test_switch();
  ASSERT_EQ(dr_request(sw, 1, kSet, attr(SmpAttr::kPKeyTable), (6u << 16) | 0, d).status, 0);
  EXPECT_EQ(sw.ports[6].pkeys[1], 0x8001);
  EXPECT_EQ(sw.ports[5].pkeys[1], 0);
}

TEST(SmaSet, SlToVlPerInputOutputPair) {
  NodeState sw = test_switch();
  Data d{};
  for (std::size_t k = 0; k < 8; ++k)
    d[k] = static_cast<std::uint8_t>(((2 * k) % 8) << 4 | ((2 * k + 1) % 8));
  // Modifier: input port << 8 | output port.
  ASSERT_EQ(dr_request(sw, 1, kSet, attr(SmpAttrExt::kSlToVlMappingTable), 0x0205, d).status, 0);
  for (std::uint8_t sl = 0; sl < 16; ++sl) {
    EXPECT_EQ(sw.ports[5].vl_for(2, sl), sl % 8) << int{sl};
    EXPECT_EQ(sw.ports[5].vl_for(3, sl), 0) << int{sl};
    EXPECT_EQ(sw.ports[2].vl_for(5, sl), 0) << int{sl};
  }
  EXPECT_EQ(smp_data(dr_request(sw, 1, kGet, attr(SmpAttrExt::kSlToVlMappingTable), 0x0205).mad),
            d);
  EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttrExt::kSlToVlMappingTable), 0x0905).status,
            status(MadStatus::kInvalidField));
  NodeState ca = test_ca();
  ASSERT_EQ(dr_request(ca, 1, kSet, attr(SmpAttrExt::kSlToVlMappingTable), 0, d).status, 0);
  EXPECT_EQ(ca.ports[1].vl_for(0, 3), 3);
  EXPECT_EQ(ca.ports[2].vl_for(0, 3), 0);
}

TEST(SmaSet, VlArbitration) {
  NodeState sw = test_switch();
  Data d{};
  for (std::size_t k = 0; k < 32; ++k) {
    d[2 * k] = static_cast<std::uint8_t>(k % 8);
    d[2 * k + 1] = static_cast<std::uint8_t>(k + 1);
  }
  // Part 1 (low, entries 0-31) of port 5; only VLArbLowCap = 8 entries exist.
  MadReply r = dr_request(sw, 1, kSet, attr(SmpAttrExt::kVlArbitrationTable), 0x10005, d);
  ASSERT_EQ(r.status, 0);
  for (std::size_t k = 0; k < 8; ++k)
    EXPECT_EQ(sw.ports[5].vl_arb_low[k],
              (VlArbEntry{static_cast<std::uint8_t>(k % 8), static_cast<std::uint8_t>(k + 1)}));
  EXPECT_EQ(sw.ports[5].vl_arb_low[8], VlArbEntry{});
  EXPECT_EQ(sw.ports[5].vl_arb_high[0], VlArbEntry{});
  const Data back = smp_data(r.mad);
  EXPECT_EQ(back[2 * 7 + 1], 8);
  EXPECT_EQ(back[2 * 8 + 1], 0);  // entries past the cap read as 0
  // Part 3 is the high table.
  ASSERT_EQ(dr_request(sw, 1, kSet, attr(SmpAttrExt::kVlArbitrationTable), 0x30005, d).status, 0);
  EXPECT_EQ(sw.ports[5].vl_arb_high[1], (VlArbEntry{1, 2}));
  // Part 0, part 5, part 2 with cap 8, and VL15 in an entry are invalid.
  for (std::uint32_t mod : {0x00005u, 0x50005u, 0x20005u, 0x40005u})
    EXPECT_EQ(dr_request(sw, 1, kGet, attr(SmpAttrExt::kVlArbitrationTable), mod).status,
              status(MadStatus::kInvalidField))
        << std::hex << mod;
  Data bad = d;
  bad[2 * 3] = 15;
  EXPECT_EQ(dr_request(sw, 1, kSet, attr(SmpAttrExt::kVlArbitrationTable), 0x10006, bad).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(sw.ports[6].vl_arb_low[0], VlArbEntry{});
}

TEST(SmaSet, GuidInfoIndex0IsReadOnly) {
  NodeState ca = test_ca();
  wire::GuidInfo g;
  for (std::size_t k = 0; k < 8; ++k) g.guid[k] = 0xAA00 + k;
  Data d{};
  wire::encode(g, d);
  MadReply r = dr_request(ca, 1, kSet, attr(SmpAttrExt::kGuidInfo), 0, d);
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(ca.ports[1].guids[0], kCaGuid + 1);
  EXPECT_EQ(ca.ports[1].guids[1], 0xAA01u);
  EXPECT_EQ(ca.ports[1].guids[7], 0xAA07u);
  EXPECT_EQ(wire::decode_guid_info(smp_data(r.mad)).guid[0], kCaGuid + 1);
}

TEST(SmaSet, SwitchInfoPortStateChangeClearsOnWritingOne) {
  NodeState sw = test_switch();
  ASSERT_TRUE(link_up(sw, 3));
  EXPECT_TRUE(sw.sw.port_state_change);
  wire::SwitchInfo si;
  si.port_state_change = false;
  Data d{};
  wire::encode(si, d);
  ASSERT_EQ(dr_request(sw, 1, kSet, attr(SmpAttr::kSwitchInfo), 0, d).status, 0);
  EXPECT_TRUE(sw.sw.port_state_change);  // writing 0 leaves it
  si.port_state_change = true;
  wire::encode(si, d);
  MadReply r = dr_request(sw, 1, kSet, attr(SmpAttr::kSwitchInfo), 0, d);
  ASSERT_EQ(r.status, 0);
  EXPECT_FALSE(sw.sw.port_state_change);
  EXPECT_FALSE(wire::decode_switch_info(smp_data(r.mad)).port_state_change);
}

// ---- LID-routed, bad MADs, M_Key ------------------------------------------------------------

TEST(SmaLidRouted, ReplyGoesBackToTheRequesterLid) {
  NodeState ca = test_ca();
  MadReply r = handle_smp(ca, 1, lid_smp(kGet, attr(SmpAttr::kNodeInfo), 0), {.lrh_slid = 1});
  ASSERT_EQ(r.action, SmpAction::kRouteByLid);
  EXPECT_EQ(r.dlid, 1);
  EXPECT_EQ(r.out_port, 1);
  EXPECT_EQ(r.mad[1], 0x01);
  EXPECT_EQ(r.mad[3], kGetResp);
  EXPECT_EQ(be16(r.mad, 4), 0);
  EXPECT_EQ(r.mad[15], 0x34);  // TID kept
  EXPECT_EQ(wire::decode_node_info(smp_data(r.mad)).port_guid, kCaGuid + 1);
  EXPECT_EQ(ca.stats.smps_handled, 1u);
}

TEST(SmaBadMad, DroppedOrAnsweredWithStatus) {
  NodeState sw = test_switch();
  // Truncated.
  const Mad good = lid_smp(kGet, attr(SmpAttr::kNodeInfo), 0);
  MadReply r = handle_smp(sw, 1, std::span<const std::uint8_t>(good).first(100));
  EXPECT_EQ(r.action, SmpAction::kDrop);
  EXPECT_EQ(r.reason, DropReason::kTruncated);
  // Base version 2.
  Mad m = good;
  m[0] = 2;
  EXPECT_EQ(handle_smp(sw, 1, m).reason, DropReason::kBadBaseVersion);
  // Not an SMP class.
  m = good;
  m[1] = 0x03;
  EXPECT_EQ(handle_smp(sw, 1, m).reason, DropReason::kBadClass);
  // DR HopCnt 64.
  Mad dr = dr_smp_1hop(kGet, attr(SmpAttr::kNodeInfo), 0);
  dr[7] = 64;
  EXPECT_EQ(handle_smp(sw, 1, dr).reason, DropReason::kBadHopCount);
  EXPECT_EQ(sw.stats.dropped_bad_mad, 4u);
  // Class version 2: answered with "bad version".
  m = good;
  m[2] = 2;
  r = handle_smp(sw, 1, m);
  EXPECT_EQ(r.action, SmpAction::kRouteByLid);
  EXPECT_EQ(r.status, status(MadStatus::kBadVersion));
  EXPECT_EQ(be16(r.mad, 4), 0x0004);
  // A DR GetResp travelling outwards (D = 0) is not a request.
  dr = dr_smp_1hop(kGetResp, attr(SmpAttr::kNodeInfo), 0);
  EXPECT_EQ(handle_smp(sw, 1, dr).reason, DropReason::kNotRequest);
  EXPECT_EQ(sw.stats.dropped_not_request, 1u);
  EXPECT_EQ(sw.stats.smps_handled, 1u);
}

TEST(SmaBadMad, TrapsTrapRepressAndSmInfo) {
  NodeState sw = test_switch();
  EXPECT_EQ(handle_smp(sw, 1, lid_smp(0x07, attr(SmpAttrExt::kNotice), 0)).action,
            SmpAction::kAbsorbed);
  EXPECT_EQ(handle_smp(sw, 1, lid_smp(0x05, attr(SmpAttrExt::kNotice), 0)).action,
            SmpAction::kToLocalSm);
  MadReply r = handle_smp(sw, 1, dr_smp_1hop(kGet, attr(SmpAttrExt::kSmInfo), 0));
  EXPECT_EQ(r.action, SmpAction::kToLocalSm);
  EXPECT_EQ(r.mad[6], 2);  // HopPtr advanced to HopCnt + 1 for the SM there
}

TEST(SmaMKey, ProtectBits) {
  struct Case {
    std::uint8_t protect;
    std::uint8_t method;
    std::uint64_t key;
    bool answered;
    std::uint64_t m_key_seen;
  };
  constexpr std::uint64_t kKey = 0x1122334455667788ull;
  const Case cases[] = {
      {0, kGet, 0, true, kKey},    {1, kGet, 0, true, 0},       {2, kGet, 0, false, 0},
      {3, kGet, 0, false, 0},      {2, kGet, kKey, true, kKey}, {0, kSet, 0, false, 0},
      {0, kSet, kKey, true, kKey},
  };
  for (const Case& c : cases) {
    NodeState ca = test_ca();
    ca.ports[1].m_key = kKey;
    ca.ports[1].m_key_protect_bits = c.protect;
    Data d = port_info_data(ca.ports[1]);
    MadReply r = handle_smp(ca, 1, dr_smp_1hop(c.method, attr(SmpAttr::kPortInfo), 1, d, c.key));
    EXPECT_EQ(r.action == SmpAction::kSendOut, c.answered) << int{c.protect};
    if (c.answered) {
      EXPECT_EQ(wire::decode_port_info(smp_data(r.mad)).m_key, c.m_key_seen) << int{c.protect};
      EXPECT_EQ(ca.ports[1].m_key_violations, 0);
    } else {
      EXPECT_EQ(r.reason, DropReason::kMKey);
      EXPECT_EQ(ca.ports[1].m_key_violations, 1);
      EXPECT_EQ(ca.stats.dropped_m_key, 1u);
    }
  }
}

// ---- Trap 128 and link events ---------------------------------------------------------------

TEST(SmaTrap, Trap128Layout) {
  NodeState sw = test_switch();
  EXPECT_FALSE(make_trap_128(sw, 1).has_value());  // no SM LID yet
  NodeState ca = test_ca();
  ca.ports[1].master_sm_lid = 1;
  EXPECT_FALSE(make_trap_128(ca, 1).has_value());  // switches only
  sw.ports[0].lid = 0x0007;
  sw.ports[0].master_sm_lid = 0x0001;
  sw.ports[0].master_sm_sl = 2;
  sw.ports[0].m_key = 0xABCD;
  const auto t = make_trap_128(sw, 0x99);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->dlid, 1);
  EXPECT_EQ(t->slid, 7);
  EXPECT_EQ(t->sl, 2);
  const Mad& m = t->mad;
  EXPECT_EQ(m[0], 1);
  EXPECT_EQ(m[1], 0x01);  // LID-routed SMP
  EXPECT_EQ(m[2], 1);
  EXPECT_EQ(m[3], 0x05);           // Trap
  EXPECT_EQ(be16(m, 16), 0x0002);  // Notice
  EXPECT_EQ(m[15], 0x99);
  EXPECT_EQ(m[31], 0xCD);  // M_Key
  EXPECT_EQ(m[64], 0x81);  // IsGeneric, Type 1 (urgent)
  EXPECT_EQ(m[65], 0);
  EXPECT_EQ(m[66], 0);
  EXPECT_EQ(m[67], 2);  // ProducerType switch
  EXPECT_EQ(be16(m, 68), 128);
  EXPECT_EQ(be16(m, 70), 7);              // IssuerLID
  EXPECT_EQ(be16(m, 74), 7);              // DataDetails: LIDADDR
  EXPECT_FALSE(sw.sw.port_state_change);  // link_up / link_down set it, not the trap
  const wire::Notice n = wire::decode_notice(smp_data(m));
  EXPECT_EQ(n.trap_number, 128);
  EXPECT_TRUE(n.is_generic);
}

// IBA 13.4.9: the trap stays pending until a TrapRepress with its TID; repeats are the same
// MAD (same TID, same Notice); a TrapRepress with another TID changes nothing.
TEST(SmaTrap, RepeatedUntilTrapRepress) {
  NodeState sw = test_switch();
  EXPECT_FALSE(repeat_trap(sw).has_value());  // nothing pending
  sw.ports[0].lid = 0x0007;
  sw.ports[0].master_sm_lid = 0x0001;
  sw.ports[0].subnet_timeout = 10;
  EXPECT_EQ(trap_repeat_ns(sw), 4'194'304u);  // 4.096 us * 2^10
  const auto first = make_trap_128(sw, 0x42);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(sw.trap.active);
  EXPECT_EQ(sw.trap.tid, 0x42u);
  EXPECT_EQ(sw.trap.sends, 1u);
  const auto again = repeat_trap(sw);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->mad, first->mad);  // byte for byte: TID 0x42, Notice of trap 128
  EXPECT_EQ(again->dlid, 1);
  EXPECT_EQ(sw.trap.sends, 2u);
  EXPECT_EQ(sw.stats.traps_repeated, 1u);
  // The SM moved: the repeat follows the new MasterSMLID.
  sw.ports[0].master_sm_lid = 0x0003;
  EXPECT_EQ(repeat_trap(sw)->dlid, 3);
  // TrapRepress of another TID: absorbed, still pending.
  Mad rep = lid_smp(0x07, attr(SmpAttrExt::kNotice), 0);  // TID 0x1234
  EXPECT_EQ(handle_smp(sw, 1, rep).action, SmpAction::kAbsorbed);
  EXPECT_TRUE(sw.trap.active);
  EXPECT_EQ(sw.stats.traps_repressed, 0u);
  // The SM's TrapRepress: the trap's own bytes with method 0x07.
  rep = first->mad;
  rep[3] = 0x07;
  EXPECT_EQ(handle_smp(sw, 3, rep).action, SmpAction::kAbsorbed);
  EXPECT_FALSE(sw.trap.active);
  EXPECT_EQ(sw.stats.traps_repressed, 1u);
  EXPECT_FALSE(repeat_trap(sw).has_value());
  // A newer trap replaces the pending one.
  ASSERT_TRUE(make_trap_128(sw, 0x43).has_value());
  ASSERT_TRUE(make_trap_128(sw, 0x44).has_value());
  EXPECT_EQ(sw.trap.tid, 0x44u);
  EXPECT_EQ(sw.trap.sends, 1u);
}

TEST(SmaLink, UpAndDown) {
  NodeState sw = test_switch();
  EXPECT_TRUE(link_up(sw, 2));
  EXPECT_EQ(sw.ports[2].state, LinkState::kInit);
  EXPECT_EQ(sw.ports[2].phys_state, PhysState::kLinkUp);
  EXPECT_FALSE(link_up(sw, 2));
  sw.sw.port_state_change = false;
  sw.ports[2].state = LinkState::kActive;
  EXPECT_TRUE(link_down(sw, 2));
  EXPECT_EQ(sw.ports[2].state, LinkState::kDown);
  EXPECT_EQ(sw.ports[2].phys_state, PhysState::kPolling);
  EXPECT_EQ(sw.ports[2].counters.link_downed_counter, 1);
  EXPECT_TRUE(sw.sw.port_state_change);
  EXPECT_FALSE(link_down(sw, 2));
  EXPECT_EQ(sw.ports[2].counters.link_downed_counter, 1);
  NodeState ca = test_ca();
  EXPECT_TRUE(link_up(ca, 1));
  EXPECT_EQ(ca.ports[1].state, LinkState::kInit);
  EXPECT_EQ(to_string(ca.ports[1].state), "Init");
  EXPECT_EQ(to_string(ca.ports[1].phys_state), "LinkUp");
  EXPECT_EQ(to_string(ca.ports[2].phys_state), "Polling");
}

// ---- Robustness -------------------------------------------------------------------------------

// Random MADs (mostly well-formed headers with random fields, so they reach the attribute
// handlers) never crash the SMA or PMA, and whatever comes back is consistent.
TEST(SmaRobust, RandomMadsAcrossSeeds) {
  constexpr int kSeeds = 20, kMadsPerSeed = 2000;
  const std::uint16_t attrs[] = {0x0002, 0x0010, 0x0011, 0x0012, 0x0014, 0x0015, 0x0016,
                                 0x0017, 0x0018, 0x0019, 0x001A, 0x001B, 0x0020, 0x0033};
  const std::uint8_t classes[] = {0x01, 0x81, 0x04, 0x03};
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    SCOPED_TRACE("SEED=" + std::to_string(seed));
    SeededRng rng(seed);
    NodeState sw = test_switch();
    NodeState ca = test_ca();
    for (int i = 0; i < kMadsPerSeed; ++i) {
      Mad m{};
      for (auto& b : m) b = static_cast<std::uint8_t>(rng.next_u64());
      if (!rng.chance(0.05)) m[0] = 1;
      m[1] = classes[rng.below(std::size(classes))];
      if (!rng.chance(0.05)) m[2] = 1;
      m[3] = static_cast<std::uint8_t>(rng.chance(0.8) ? 1 + rng.below(2) : rng.next_u64());
      if (rng.chance(0.9)) {
        m[6] = static_cast<std::uint8_t>(rng.below(5));  // HopPtr
        m[7] = static_cast<std::uint8_t>(rng.below(4));  // HopCnt
      }
      const std::uint16_t a = attrs[rng.below(std::size(attrs))];
      m[16] = static_cast<std::uint8_t>(a >> 8);
      m[17] = static_cast<std::uint8_t>(a);
      if (rng.chance(0.7)) {  // a small modifier
        m[20] = m[21] = 0;
        m[22] = static_cast<std::uint8_t>(rng.below(3));
        m[23] = static_cast<std::uint8_t>(rng.below(10));
      }
      const bool on_switch = rng.chance(0.5);
      NodeState& n = on_switch ? sw : ca;
      const auto in_port = static_cast<std::uint8_t>(1 + rng.below(n.num_ports));
      const std::size_t len = rng.chance(0.05) ? rng.below(256) : 256;
      const std::span<const std::uint8_t> bytes(m.data(), len);
      const MadReply r =
          m[1] == 0x04 ? handle_pma(n, in_port, bytes) : handle_smp(n, in_port, bytes);
      if (r.is_response) {
        EXPECT_EQ(r.mad[3], kGetResp);
        EXPECT_EQ(r.mad[0], 1);
        EXPECT_EQ(be16(r.mad, 4) & 0x7FFF, r.status);
      }
      if (r.action == SmpAction::kDrop) {
        EXPECT_NE(r.reason, DropReason::kNone);
      }
      if (r.action == SmpAction::kSendOut) {
        EXPECT_GE(r.out_port, 1);
        EXPECT_LE(r.out_port, n.num_ports);
      }
    }
    // Enough of them got past the header checks to exercise the handlers.
    EXPECT_GT(sw.stats.smps_handled + ca.stats.smps_handled, std::uint64_t{kMadsPerSeed} / 10);
    EXPECT_GT(sw.stats.pma_handled + ca.stats.pma_handled, std::uint64_t{kMadsPerSeed} / 10);
    // The tables keep their shapes whatever was written.
    EXPECT_EQ(sw.lft.size(), kLinearFdbCap);
    EXPECT_EQ(sw.ports.size(), 9u);
    EXPECT_EQ(ca.ports.size(), 3u);
    EXPECT_EQ(ca.ports[1].guids[0], kCaGuid + 1);
  }
}

}  // namespace
}  // namespace weft::sma::test
