// tests/sma/mad_attrs_test.cpp — byte layouts of src/wire/mad_attrs (IBA 14.2.5.5, 14.2.5.8,
// 14.2.5.9, 14.2.5.12, 13.4.8.1, 13.4.8.2): exact offsets, then round trips.
#include "src/wire/mad_attrs.hpp"

#include <gtest/gtest.h>

namespace weft::wire {
namespace {

using Data = std::array<std::uint8_t, kSmpDataBytes>;

TEST(MadAttrs, GuidInfo) {
  GuidInfo g;
  g.guid[0] = 0x0102030405060708ull;
  g.guid[7] = 0xF1F2F3F4F5F6F7F8ull;
  Data d{};
  encode(g, d);
  EXPECT_EQ(d[0], 0x01);
  EXPECT_EQ(d[7], 0x08);
  EXPECT_EQ(d[56], 0xF1);
  EXPECT_EQ(d[63], 0xF8);
  EXPECT_EQ(decode_guid_info(d).guid, g.guid);
}

TEST(MadAttrs, SlToVlNibbles) {
  SlToVlTable t;
  for (std::uint8_t sl = 0; sl < 16; ++sl) t.vl[sl] = static_cast<std::uint8_t>(15 - sl);
  Data d{};
  d.fill(0xEE);
  encode(t, d);
  EXPECT_EQ(d[0], 0xFE);  // SL0 high nibble, SL1 low
  EXPECT_EQ(d[7], 0x10);
  EXPECT_EQ(d[8], 0x00);  // the rest is reserved, zero
  EXPECT_EQ(decode_sl2vl(d).vl, t.vl);
}

TEST(MadAttrs, VlArb) {
  VlArbBlock b;
  b.entry[0] = {3, 0x40};
  b.entry[31] = {14, 0xFF};
  Data d{};
  encode(b, d);
  EXPECT_EQ(d[0], 0x03);
  EXPECT_EQ(d[1], 0x40);
  EXPECT_EQ(d[62], 0x0E);
  EXPECT_EQ(d[63], 0xFF);
  const VlArbBlock r = decode_vl_arb(d);
  EXPECT_EQ(r.entry[31].vl, 14);
  EXPECT_EQ(r.entry[31].weight, 0xFF);
  EXPECT_EQ(r.entry[0].weight, 0x40);
}

TEST(MadAttrs, Mft) {
  MulticastForwardingTable t;
  t.port_mask[0] = 0x8001;
  t.port_mask[31] = 0x1234;
  Data d{};
  encode(t, d);
  EXPECT_EQ(d[0], 0x80);
  EXPECT_EQ(d[1], 0x01);
  EXPECT_EQ(d[62], 0x12);
  EXPECT_EQ(d[63], 0x34);
  EXPECT_EQ(decode_mft(d).port_mask, t.port_mask);
}

TEST(MadAttrs, Notice) {
  Notice n;
  n.type = 1;
  n.producer_type = 2;
  n.trap_number = 128;
  n.issuer_lid = 0x0102;
  n.notice_toggle = true;
  n.notice_count = 5;
  n.data_details[0] = 0xAB;
  n.data_details[53] = 0xCD;
  Data d{};
  encode(n, d);
  const std::uint8_t head[10] = {0x81, 0, 0, 2, 0, 128, 0x01, 0x02, 0x80, 0x05};
  for (std::size_t k = 0; k < 10; ++k) EXPECT_EQ(d[k], head[k]) << k;
  EXPECT_EQ(d[10], 0xAB);
  EXPECT_EQ(d[63], 0xCD);
  const Notice r = decode_notice(d);
  EXPECT_TRUE(r.is_generic);
  EXPECT_EQ(r.type, 1);
  EXPECT_EQ(r.producer_type, 2u);
  EXPECT_EQ(r.trap_number, 128);
  EXPECT_EQ(r.issuer_lid, 0x0102);
  EXPECT_TRUE(r.notice_toggle);
  EXPECT_EQ(r.notice_count, 5);
  EXPECT_EQ(r.data_details, n.data_details);
}

TEST(MadAttrs, ClassPortInfo) {
  ClassPortInfo c;
  c.capability_mask = 0x1300;
  c.capability_mask2 = 0x1;
  c.resp_time_value = 18;
  c.redirect_lid = 0x0A0B;
  c.redirect_qp = 0x123456;
  c.redirect_qkey = 0x80010000;
  c.trap_lid = 0x0C0D;
  c.trap_hop_limit = 0x40;
  c.trap_qp = 0x000001;
  std::array<std::uint8_t, kPmaDataBytes> d{};
  encode(c, d);
  EXPECT_EQ(d[0], 1);
  EXPECT_EQ(d[1], 1);
  EXPECT_EQ(d[2], 0x13);
  EXPECT_EQ(d[3], 0x00);
  EXPECT_EQ(d[7], (1 << 5) | 18);
  EXPECT_EQ(d[28], 0x0A);
  EXPECT_EQ(d[29], 0x0B);
  EXPECT_EQ(d[33], 0x12);
  EXPECT_EQ(d[35], 0x56);
  EXPECT_EQ(d[36], 0x80);
  EXPECT_EQ(d[60], 0x0C);
  EXPECT_EQ(d[64], 0x40);
  EXPECT_EQ(d[67], 0x01);
  const ClassPortInfo r = decode_class_port_info(d);
  EXPECT_EQ(r.capability_mask, 0x1300);
  EXPECT_EQ(r.capability_mask2, 1u);
  EXPECT_EQ(r.resp_time_value, 18);
  EXPECT_EQ(r.redirect_qp, 0x123456u);
  EXPECT_EQ(r.trap_lid, 0x0C0D);
  EXPECT_EQ(r.trap_hop_limit, 0x40);
}

}  // namespace
}  // namespace weft::wire
