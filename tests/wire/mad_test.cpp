// tests/wire/mad_test.cpp — MAD/SMP/PMA layouts (byte offsets from the IBA tables), round trips
// and the directed-route rules of IBA 14.2.2 walked over a small path.
#include "src/wire/mad.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace weft::wire {
namespace {

using Mad = std::array<std::uint8_t, kMadBytes>;

TEST(Mad, CommonHeaderOffsets) {
  MadHeader h;
  h.mgmt_class = 0x04;
  h.class_version = 1;
  h.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
  h.status = 0x001C;
  h.class_specific = 0xBEEF;
  h.tid = 0x0102030405060708ULL;
  h.attr_id = 0x0012;
  h.attr_mod = 0xA0B0C0D0;
  std::array<std::uint8_t, kMadHeaderBytes> b{};
  encode_mad_header(h, b);
  const std::uint8_t expect[24] = {1, 4, 1, 0x81, 0x00, 0x1C, 0xBE, 0xEF, 1,    2,    3,    4,
                                   5, 6, 7, 8,    0x00, 0x12, 0,    0,    0xA0, 0xB0, 0xC0, 0xD0};
  EXPECT_EQ(0, std::memcmp(b.data(), expect, 24));
  auto d = decode_mad_header(b);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tid, h.tid);
  EXPECT_EQ(d->attr_mod, h.attr_mod);
  EXPECT_EQ(d->status, h.status);
}

TEST(Mad, DecodeErrors) {
  Mad m{};
  SmpLid s;
  s.hdr.method = 1;
  encode_smp(s, m);
  EXPECT_EQ(decode_mad_header(std::span(m).first(23)).error(), MadError::kTruncated);
  EXPECT_EQ(decode_smp_lid(std::span(m).first(255)).error(), MadError::kTruncated);
  EXPECT_EQ(decode_smp_dr(m).error(), MadError::kBadClass);
  EXPECT_EQ(decode_pma(m).error(), MadError::kBadClass);
  m[0] = 2;
  EXPECT_EQ(decode_smp_lid(m).error(), MadError::kBadBaseVersion);
  SmpDr dr;
  dr.hop_cnt = 64;
  encode_smp(dr, m);
  EXPECT_EQ(decode_smp_dr(m).error(), MadError::kBadHopCount);
  dr.hop_cnt = 2;
  dr.hop_ptr = 4;
  encode_smp(dr, m);
  EXPECT_EQ(decode_smp_dr(m).error(), MadError::kBadHopCount);
  EXPECT_FALSE(to_string(MadError::kBadHopCount).empty());
}

TEST(Smp, DirectedRouteRoundTripAndOffsets) {
  SmpDr s;
  s.hdr.method = static_cast<std::uint8_t>(MadMethod::kGet);
  s.hdr.tid = 42;
  s.hdr.attr_id = static_cast<std::uint16_t>(SmpAttr::kPortInfo);
  s.hdr.attr_mod = 3;
  s.direction = true;
  s.status = 0x0004;
  s.hop_ptr = 2;
  s.hop_cnt = 3;
  s.m_key = 0x1122334455667788ULL;
  s.dr_slid = 0xFFFF;
  s.dr_dlid = 0x0010;
  s.initial_path[1] = 1;
  s.initial_path[2] = 7;
  s.initial_path[3] = 12;
  s.return_path[1] = 4;
  s.data[0] = 0xAA;
  s.data[63] = 0xBB;
  Mad m{};
  encode_smp(s, m);
  EXPECT_EQ(m[1], 0x81);
  EXPECT_EQ(m[4], 0x80);  // D bit
  EXPECT_EQ(m[5], 0x04);
  EXPECT_EQ(m[6], 2);  // HopPointer
  EXPECT_EQ(m[7], 3);  // HopCount
  EXPECT_EQ(m[24], 0x11);
  EXPECT_EQ(m[32], 0xFF);
  EXPECT_EQ(m[35], 0x10);
  EXPECT_EQ(m[64], 0xAA);
  EXPECT_EQ(m[127], 0xBB);
  EXPECT_EQ(m[128 + 2], 7);
  EXPECT_EQ(m[192 + 1], 4);
  auto d = decode_smp_dr(m);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->direction);
  EXPECT_EQ(d->status, 4);
  EXPECT_EQ(d->hop_ptr, 2);
  EXPECT_EQ(d->hop_cnt, 3);
  EXPECT_EQ(d->m_key, s.m_key);
  EXPECT_EQ(d->dr_dlid, 0x10);
  EXPECT_EQ(d->initial_path, s.initial_path);
  EXPECT_EQ(d->return_path, s.return_path);
  EXPECT_EQ(d->data, s.data);
}

TEST(Smp, LidRoutedRoundTrip) {
  SmpLid s;
  s.hdr.method = static_cast<std::uint8_t>(MadMethod::kSet);
  s.hdr.attr_id = static_cast<std::uint16_t>(SmpAttr::kLinearForwardingTable);
  s.hdr.attr_mod = 5;
  s.m_key = 9;
  s.data[10] = 3;
  Mad m{};
  encode_smp(s, m);
  EXPECT_EQ(m[1], 0x01);
  auto d = decode_smp_lid(m);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->hdr.attr_mod, 5u);
  EXPECT_EQ(d->m_key, 9u);
  EXPECT_EQ(d->data, s.data);
}

TEST(SmpAttr, NodeInfo) {
  NodeInfo v{1,
             1,
             NodeType::kSwitch,
             36,
             0x0002c90300001111ULL,
             0x0002c90300002222ULL,
             0x0002c90300003333ULL,
             64,
             0xCB20,
             0x000000A1,
             0,
             0x0002C9};
  std::array<std::uint8_t, 64> b{};
  encode(v, b);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 36);
  EXPECT_EQ(b[12], 0x00);
  EXPECT_EQ(b[19], 0x22);
  EXPECT_EQ(b[39], 0xC9);
  const NodeInfo d = decode_node_info(b);
  EXPECT_EQ(d.node_type, NodeType::kSwitch);
  EXPECT_EQ(d.system_image_guid, v.system_image_guid);
  EXPECT_EQ(d.node_guid, v.node_guid);
  EXPECT_EQ(d.port_guid, v.port_guid);
  EXPECT_EQ(d.partition_cap, 64);
  EXPECT_EQ(d.device_id, 0xCB20);
  EXPECT_EQ(d.revision, 0xA1u);
  EXPECT_EQ(d.vendor_id, 0x0002C9u);
}

TEST(SmpAttr, NodeDescription) {
  NodeDescription v;
  v.set("weft-hca-0 mlx5_0");
  std::array<std::uint8_t, 64> b{};
  encode(v, b);
  EXPECT_EQ(decode_node_description(b).view(), "weft-hca-0 mlx5_0");
  v.set(std::string(100, 'x'));
  EXPECT_EQ(v.view().size(), 64u);
}

TEST(SmpAttr, SwitchInfo) {
  SwitchInfo v;
  v.linear_fdb_cap = 49152;
  v.linear_fdb_top = 0x0123;
  v.default_port = 1;
  v.life_time_value = 18;
  v.port_state_change = true;
  v.optimized_sl2vl = 1;
  v.lids_per_port = 1;
  v.partition_enforcement_cap = 32;
  v.enforcement_flags = 0xA0;
  v.enhanced_port0 = true;
  v.multicast_fdb_top = 0xC000;
  std::array<std::uint8_t, 64> b{};
  encode(v, b);
  EXPECT_EQ(b[11], (18 << 3) | 4 | 1);
  EXPECT_EQ(b[16], 0xA8);
  const SwitchInfo d = decode_switch_info(b);
  EXPECT_EQ(d.linear_fdb_cap, 49152);
  EXPECT_EQ(d.linear_fdb_top, 0x0123);
  EXPECT_EQ(d.life_time_value, 18);
  EXPECT_TRUE(d.port_state_change);
  EXPECT_EQ(d.optimized_sl2vl, 1);
  EXPECT_EQ(d.enforcement_flags, 0xA0);
  EXPECT_TRUE(d.enhanced_port0);
  EXPECT_EQ(d.multicast_fdb_top, 0xC000);
}

TEST(SmpAttr, PortInfo) {
  PortInfo v;
  v.m_key = 1;
  v.gid_prefix = 0xfe80000000000000ULL;
  v.lid = 0x0011;
  v.master_sm_lid = 1;
  v.capability_mask = 0x02510868;
  v.local_port_num = 1;
  v.link_width_enabled = 3;
  v.link_width_supported = 3;
  v.link_width_active = 2;
  v.link_speed_supported = 7;
  v.port_state = PortState::kActive;
  v.port_phys_state = 5;
  v.link_down_default_state = 2;
  v.m_key_protect_bits = 1;
  v.lmc = 2;
  v.link_speed_active = 4;
  v.link_speed_enabled = 7;
  v.neighbor_mtu = 5;
  v.master_sm_sl = 3;
  v.vl_cap = 4;
  v.init_type = 0;
  v.vl_high_limit = 4;
  v.vl_arb_high_cap = 8;
  v.vl_arb_low_cap = 8;
  v.mtu_cap = 5;
  v.vl_stall_count = 7;
  v.hoq_life = 31;
  v.operational_vls = 4;
  v.partition_enforcement_inbound = true;
  v.filter_raw_outbound = true;
  v.p_key_violations = 3;
  v.guid_cap = 128;
  v.client_reregister = true;
  v.subnet_timeout = 18;
  v.resp_time_value = 20;
  v.local_phy_errors = 8;
  v.overrun_errors = 9;
  v.max_credit_hint = 77;
  v.link_round_trip_latency = 0xABCDEF;
  v.capability_mask2 = 0x0040;
  std::array<std::uint8_t, 64> b{};
  encode(v, b);
  EXPECT_EQ(b[16], 0x00);
  EXPECT_EQ(b[17], 0x11);
  EXPECT_EQ(b[32], 0x74);  // LinkSpeedSupported 7, PortState Active
  EXPECT_EQ(b[34], 0x42);  // protect bits 1, LMC 2
  EXPECT_EQ(b[36], 0x53);  // NeighborMTU 4096, MasterSMSL 3
  EXPECT_EQ(b[42], 0xFF);  // VLStallCount 7, HOQLife 31
  EXPECT_EQ(b[43], 0x49);
  EXPECT_EQ(b[51], 0x92);
  EXPECT_EQ(b[57], 0xAB);
  const PortInfo d = decode_port_info(b);
  EXPECT_EQ(d.gid_prefix, v.gid_prefix);
  EXPECT_EQ(d.lid, v.lid);
  EXPECT_EQ(d.capability_mask, v.capability_mask);
  EXPECT_EQ(d.port_state, PortState::kActive);
  EXPECT_EQ(d.port_phys_state, 5);
  EXPECT_EQ(d.link_down_default_state, 2);
  EXPECT_EQ(d.lmc, 2);
  EXPECT_EQ(d.m_key_protect_bits, 1);
  EXPECT_EQ(d.neighbor_mtu, 5);
  EXPECT_EQ(d.master_sm_sl, 3);
  EXPECT_EQ(d.vl_cap, 4);
  EXPECT_EQ(d.mtu_cap, 5);
  EXPECT_EQ(d.vl_stall_count, 7);
  EXPECT_EQ(d.hoq_life, 31);
  EXPECT_EQ(d.operational_vls, 4);
  EXPECT_TRUE(d.partition_enforcement_inbound);
  EXPECT_FALSE(d.partition_enforcement_outbound);
  EXPECT_TRUE(d.filter_raw_outbound);
  EXPECT_EQ(d.p_key_violations, 3);
  EXPECT_TRUE(d.client_reregister);
  EXPECT_EQ(d.subnet_timeout, 18);
  EXPECT_EQ(d.resp_time_value, 20);
  EXPECT_EQ(d.local_phy_errors, 8);
  EXPECT_EQ(d.overrun_errors, 9);
  EXPECT_EQ(d.max_credit_hint, 77);
  EXPECT_EQ(d.link_round_trip_latency, 0xABCDEFu);
  EXPECT_EQ(d.capability_mask2, 0x0040);
}

TEST(SmpAttr, LftAndPKeyTable) {
  LinearForwardingTable lft;
  for (std::size_t i = 0; i < 64; ++i) lft.port[i] = static_cast<std::uint8_t>(i % 37);
  std::array<std::uint8_t, 64> b{};
  encode(lft, b);
  EXPECT_EQ(decode_lft(b).port, lft.port);
  PKeyTable pk;
  pk.pkey[0] = 0xFFFF;
  pk.pkey[1] = 0x8001;
  pk.pkey[31] = 0x7FFF;
  encode(pk, b);
  EXPECT_EQ(b[2], 0x80);
  EXPECT_EQ(b[3], 0x01);
  EXPECT_EQ(decode_pkey_table(b).pkey, pk.pkey);
}

TEST(Pma, PortCounters) {
  PortCounters v;
  v.port_select = 1;
  v.counter_select = 0xFFFF;
  v.symbol_error_counter = 0x1234;
  v.link_error_recovery_counter = 2;
  v.link_downed_counter = 3;
  v.port_rcv_errors = 4;
  v.port_rcv_remote_physical_errors = 5;
  v.port_rcv_switch_relay_errors = 6;
  v.port_xmit_discards = 7;
  v.port_xmit_constraint_errors = 8;
  v.port_rcv_constraint_errors = 9;
  v.local_link_integrity_errors = 10;
  v.excessive_buffer_overrun_errors = 11;
  v.vl15_dropped = 12;
  v.port_xmit_data = 0xA0000001;
  v.port_rcv_data = 0xA0000002;
  v.port_xmit_pkts = 0xA0000003;
  v.port_rcv_pkts = 0xA0000004;
  v.port_xmit_wait = 0xA0000005;
  PmaMad m;
  m.hdr.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
  m.hdr.attr_id = static_cast<std::uint16_t>(PmaAttr::kPortCounters);
  encode(v, m.data);
  EXPECT_EQ(m.data[19], 0xAB);
  EXPECT_EQ(m.data[24], 0xA0);
  EXPECT_EQ(m.data[43], 0x05);
  Mad raw{};
  encode_pma(m, raw);
  EXPECT_EQ(raw[1], 0x04);
  EXPECT_EQ(raw[64 + 1], 1);
  auto d = decode_pma(raw);
  ASSERT_TRUE(d.ok());
  const PortCounters c = decode_port_counters(d->data);
  EXPECT_EQ(c.symbol_error_counter, 0x1234);
  EXPECT_EQ(c.port_xmit_discards, 7);
  EXPECT_EQ(c.local_link_integrity_errors, 10);
  EXPECT_EQ(c.excessive_buffer_overrun_errors, 11);
  EXPECT_EQ(c.vl15_dropped, 12);
  EXPECT_EQ(c.port_xmit_data, 0xA0000001u);
  EXPECT_EQ(c.port_xmit_wait, 0xA0000005u);
}

TEST(Pma, PortCountersExtended) {
  PortCountersExtended v;
  v.port_select = 2;
  v.counter_select = 0x00FF;
  v.port_xmit_data = 0x0102030405060708ULL;
  v.port_rcv_data = 2;
  v.port_xmit_pkts = 3;
  v.port_rcv_pkts = 4;
  v.port_unicast_xmit_pkts = 5;
  v.port_unicast_rcv_pkts = 6;
  v.port_multicast_xmit_pkts = 7;
  v.port_multicast_rcv_pkts = 0xFFFFFFFFFFFFFFFFULL;
  std::array<std::uint8_t, kPmaDataBytes> b{};
  encode(v, b);
  EXPECT_EQ(b[8], 0x01);
  EXPECT_EQ(b[15], 0x08);
  EXPECT_EQ(b[71], 0xFF);
  const auto d = decode_port_counters_ext(b);
  EXPECT_EQ(d.port_select, 2);
  EXPECT_EQ(d.counter_select, 0x00FF);
  EXPECT_EQ(d.port_xmit_data, v.port_xmit_data);
  EXPECT_EQ(d.port_unicast_rcv_pkts, 6u);
  EXPECT_EQ(d.port_multicast_rcv_pkts, v.port_multicast_rcv_pkts);
}

// SM (CA, port 1) -> switch A (in 1, out 5) -> switch B (in 2, out 9) -> CA (port 1), then back.
TEST(DirectedRoute, WalkOutAndBack) {
  SmpDr s;
  s.hdr.method = static_cast<std::uint8_t>(MadMethod::kGet);
  s.hop_cnt = 3;
  s.initial_path[1] = 1;  // the SM's own port
  s.initial_path[2] = 5;
  s.initial_path[3] = 9;

  DrDecision d = dr_send(s);
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 1);
  EXPECT_EQ(s.hop_ptr, 1);

  d = dr_receive(s, /*in_port=*/1, /*is_switch=*/true, /*num_ports=*/36);  // switch A
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 5);
  EXPECT_EQ(s.hop_ptr, 2);
  EXPECT_EQ(s.return_path[1], 1);

  d = dr_receive(s, 2, true, 36);  // switch B
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 9);
  EXPECT_EQ(s.hop_ptr, 3);
  EXPECT_EQ(s.return_path[2], 2);

  d = dr_receive(s, 1, false, 1);  // the target CA
  EXPECT_EQ(d.verdict, DrVerdict::kConsume);
  EXPECT_EQ(s.hop_ptr, 4);
  EXPECT_EQ(s.return_path[3], 1);

  dr_make_response(s);
  EXPECT_TRUE(s.direction);
  EXPECT_EQ(s.hdr.method, 0x81);
  d = dr_send(s);
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 1);  // out the port the request came in on
  EXPECT_EQ(s.hop_ptr, 3);

  d = dr_receive(s, 9, true, 36);  // switch B, returning
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 2);
  EXPECT_EQ(s.hop_ptr, 2);

  d = dr_receive(s, 5, true, 36);  // switch A
  EXPECT_EQ(d.verdict, DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 1);
  EXPECT_EQ(s.hop_ptr, 1);

  d = dr_receive(s, 1, false, 1);  // back at the SM
  EXPECT_EQ(d.verdict, DrVerdict::kConsume);
  EXPECT_EQ(s.hop_ptr, 0);
}

TEST(DirectedRoute, DiscardRules) {
  SmpDr s;
  s.hop_cnt = 3;
  s.initial_path[2] = 5;
  s.hop_ptr = 0;
  EXPECT_EQ(dr_receive(s, 1, true, 36).verdict, DrVerdict::kDiscard);  // sender did not advance
  s.hop_ptr = 1;
  EXPECT_EQ(dr_receive(s, 1, false, 1).verdict, DrVerdict::kDiscard);  // a CA mid-path
  s.hop_ptr = 1;
  s.initial_path[2] = 40;
  EXPECT_EQ(dr_receive(s, 1, true, 36).verdict, DrVerdict::kDiscard);  // no such port
  s.hop_ptr = 1;
  s.initial_path[2] = 0;
  EXPECT_EQ(dr_receive(s, 1, true, 36).verdict, DrVerdict::kDiscard);  // port 0 is internal
  s.hop_ptr = 6;
  EXPECT_EQ(dr_receive(s, 1, true, 36).verdict, DrVerdict::kDiscard);  // pointer past the end
  s.direction = true;
  s.hop_ptr = 2;
  EXPECT_EQ(dr_receive(s, 1, false, 1).verdict, DrVerdict::kDiscard);  // CA mid-path returning
  s.hop_ptr = 1;
  s.dr_slid = 0x0001;  // LID-routed tail to the SM
  EXPECT_EQ(dr_receive(s, 1, true, 36).verdict, DrVerdict::kForwardByLid);
  EXPECT_EQ(to_string(DrVerdict::kForwardByLid), "forward-by-lid");
}

TEST(DirectedRoute, ZeroHopsIsTheLocalNode) {
  SmpDr s;
  s.hop_cnt = 0;
  EXPECT_EQ(dr_send(s).verdict, DrVerdict::kConsume);
  EXPECT_EQ(s.hop_ptr, 1);
  dr_make_response(s);
  EXPECT_EQ(dr_send(s).verdict, DrVerdict::kConsume);
  EXPECT_EQ(s.hop_ptr, 0);
}

TEST(DirectedRoute, OutgoingDrSegmentThenLidRouting) {
  SmpDr s;
  s.hop_cnt = 1;
  s.initial_path[1] = 2;
  s.dr_dlid = 0x0020;
  EXPECT_EQ(dr_send(s).out_port, 2);
  // The switch at the end of the directed part hands over to LID routing toward DrDLID.
  EXPECT_EQ(dr_receive(s, 4, true, 36).verdict, DrVerdict::kForwardByLid);
  EXPECT_EQ(s.hop_ptr, 2);
  EXPECT_EQ(dr_receive(s, 7, false, 1).verdict, DrVerdict::kConsume);  // destination by LID
}

}  // namespace
}  // namespace weft::wire
