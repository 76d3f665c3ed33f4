// tests/sma/pma_test.cpp — the PMA: ClassPortInfo, PortCounters and PortCountersExtended Get and
// Set (clear by CounterSelect), AllPortSelect sums, saturation, and bad requests.
#include "emu/sma/pma.hpp"

#include <gtest/gtest.h>

#include "tests/sma/sma_test_util.hpp"

namespace weft::sma::test {
namespace {

using wire::MadStatus;
using wire::PmaAttr;
using PmaBody = std::array<std::uint8_t, wire::kPmaDataBytes>;

Mad pma(std::uint8_t method, PmaAttr a, const PmaBody& body = {}, std::uint8_t class_version = 1) {
  wire::PmaMad m;
  m.hdr.method = method;
  m.hdr.class_version = class_version;
  m.hdr.tid = 0xFEED;
  m.hdr.attr_id = static_cast<std::uint16_t>(a);
  m.data = body;
  Mad out{};
  wire::encode_pma(m, out);
  return out;
}
PmaBody counters_req(std::uint8_t port, std::uint16_t select, std::uint8_t select2 = 0) {
  PmaBody b{};
  b[1] = port;
  b[2] = static_cast<std::uint8_t>(select >> 8);
  b[3] = static_cast<std::uint8_t>(select);
  b[18] = select2;
  return b;
}
PmaBody body_of(const MadReply& r) {
  PmaBody b{};
  std::copy_n(r.mad.begin() + wire::kPmaDataOffset, wire::kPmaDataBytes, b.begin());
  return b;
}
MadReply ask(NodeState& n, std::uint8_t method, PmaAttr a, const PmaBody& body = {}) {
  MadReply r = handle_pma(n, 1, pma(method, a, body), {.lrh_slid = 9});
  EXPECT_EQ(r.action, SmpAction::kRouteByLid);
  EXPECT_EQ(r.dlid, 9);
  EXPECT_EQ(r.mad[1], 0x04);
  EXPECT_EQ(r.mad[3], kGetResp);
  EXPECT_EQ(r.mad[15], 0xED);
  EXPECT_EQ(be16(r.mad, 4), r.status);
  return r;
}

TEST(Pma, ClassPortInfo) {
  NodeState sw = test_switch();
  NodeState ca = test_ca();
  MadReply rs = ask(sw, kGet, PmaAttr::kClassPortInfo);
  MadReply rc = ask(ca, kGet, PmaAttr::kClassPortInfo);
  ASSERT_EQ(rs.status, 0);
  ASSERT_EQ(rc.status, 0);
  const wire::ClassPortInfo s = wire::decode_class_port_info(body_of(rs));
  const wire::ClassPortInfo c = wire::decode_class_port_info(body_of(rc));
  EXPECT_EQ(s.base_version, 1);
  EXPECT_EQ(s.class_version, 1);
  EXPECT_EQ(s.capability_mask, 0x1300);  // AllPortSelect | ExtendedWidth | XmitWait
  EXPECT_EQ(c.capability_mask, 0x1200);
  EXPECT_EQ(c.resp_time_value, 18);
  EXPECT_EQ(rs.mad[64 + 7], 18);  // RespTimeValue in the low 5 bits of bytes 4-7
  EXPECT_EQ(ask(ca, kSet, PmaAttr::kClassPortInfo).status,
            status(MadStatus::kUnsupportedMethodAttr));
}

TEST(Pma, PortCountersGetExact) {
  NodeState ca = test_ca();
  PortCounters& c = ca.ports[2].counters;
  for (int k = 0; k < 3; ++k) c.count_xmit(1000);
  c.count_rcv(260);
  c.count_rcv(260, true);
  c.count_rcv_error();
  c.count_switch_relay_error();
  c.count_xmit_discard();
  c.count_xmit_discard();
  c.count_symbol_error();
  c.count_link_error_recovery();
  c.count_link_downed();
  c.count_xmit_wait(77);
  c.count_vl15_dropped();
  MadReply r = ask(ca, kGet, PmaAttr::kPortCounters, counters_req(2, 0));
  ASSERT_EQ(r.status, 0);
  const wire::PortCounters v = wire::decode_port_counters(body_of(r));
  EXPECT_EQ(v.port_select, 2);
  EXPECT_EQ(v.port_xmit_data, 750u);  // 3000 bytes in 4-byte words
  EXPECT_EQ(v.port_xmit_pkts, 3u);
  EXPECT_EQ(v.port_rcv_data, 130u);
  EXPECT_EQ(v.port_rcv_pkts, 2u);
  EXPECT_EQ(v.port_rcv_errors, 1);
  EXPECT_EQ(v.port_rcv_switch_relay_errors, 1);
  EXPECT_EQ(v.port_xmit_discards, 2);
  EXPECT_EQ(v.symbol_error_counter, 1);
  EXPECT_EQ(v.link_error_recovery_counter, 1);
  EXPECT_EQ(v.link_downed_counter, 1);
  EXPECT_EQ(v.port_xmit_wait, 77u);
  EXPECT_EQ(v.vl15_dropped, 1);
  // Port 1 saw nothing.
  const wire::PortCounters p1 = wire::decode_port_counters(
      body_of(ask(ca, kGet, PmaAttr::kPortCounters, counters_req(1, 0))));
  EXPECT_EQ(p1.port_xmit_pkts, 0u);
  // Extended.
  MadReply re = ask(ca, kGet, PmaAttr::kPortCountersExtended, counters_req(2, 0));
  ASSERT_EQ(re.status, 0);
  const wire::PortCountersExtended e = wire::decode_port_counters_ext(body_of(re));
  EXPECT_EQ(e.port_xmit_data, 750u);
  EXPECT_EQ(e.port_rcv_data, 130u);
  EXPECT_EQ(e.port_xmit_pkts, 3u);
  EXPECT_EQ(e.port_rcv_pkts, 2u);
  EXPECT_EQ(e.port_unicast_xmit_pkts, 3u);
  EXPECT_EQ(e.port_unicast_rcv_pkts, 1u);
  EXPECT_EQ(e.port_multicast_rcv_pkts, 1u);
  EXPECT_EQ(e.port_multicast_xmit_pkts, 0u);
}

TEST(Pma, Saturation) {
  NodeState ca = test_ca();
  PortCounters& c = ca.ports[1].counters;
  c.count_xmit(4ull * 0xFFFFFFF0ull);  // 0xFFFFFFF0 words
  c.count_xmit(4ull * 0x100);          // past 2^32 - 1 words
  for (int k = 0; k < 70000; ++k) c.count_symbol_error();
  for (int k = 0; k < 300; ++k) c.count_link_downed();
  c.count_xmit_wait(0xFFFFFFFFull);
  c.count_xmit_wait(5);
  const wire::PortCounters v = wire::decode_port_counters(
      body_of(ask(ca, kGet, PmaAttr::kPortCounters, counters_req(1, 0))));
  EXPECT_EQ(v.port_xmit_data, 0xFFFFFFFFu);
  EXPECT_EQ(v.symbol_error_counter, 0xFFFF);
  EXPECT_EQ(v.link_downed_counter, 0xFF);
  EXPECT_EQ(v.port_xmit_wait, 0xFFFFFFFFu);
  EXPECT_EQ(v.port_xmit_pkts, 2u);
  // The 64-bit counter keeps counting.
  const wire::PortCountersExtended e = wire::decode_port_counters_ext(
      body_of(ask(ca, kGet, PmaAttr::kPortCountersExtended, counters_req(1, 0))));
  EXPECT_EQ(e.port_xmit_data, 0xFFFFFFF0ull + 0x100);
}

TEST(Pma, SetClearsOnlySelectedCounters) {
  NodeState ca = test_ca();
  PortCounters& c = ca.ports[1].counters;
  c.count_xmit(400);
  c.count_rcv(800);
  c.count_xmit_discard();
  c.count_symbol_error();
  c.count_xmit_wait(9);
  // Clear PortXmitData (bit 12) and SymbolErrorCounter (bit 0).
  MadReply r = ask(ca, kSet, PmaAttr::kPortCounters, counters_req(1, 0x1001));
  ASSERT_EQ(r.status, 0);
  const wire::PortCounters v = wire::decode_port_counters(body_of(r));
  EXPECT_EQ(v.port_xmit_data, 0u);
  EXPECT_EQ(v.symbol_error_counter, 0);
  EXPECT_EQ(v.port_rcv_data, 200u);
  EXPECT_EQ(v.port_xmit_pkts, 1u);
  EXPECT_EQ(v.port_xmit_discards, 1);
  EXPECT_EQ(v.port_xmit_wait, 9u);
  EXPECT_EQ(v.counter_select, 0x1001);
  EXPECT_EQ(c.port_xmit_data, 0u);
  EXPECT_EQ(c.port_xmit_data_ext, 100u);  // the extended set is separate
  // CounterSelect2 bit 0 clears PortXmitWait; 0xFFFF clears the rest.
  ASSERT_EQ(ask(ca, kSet, PmaAttr::kPortCounters, counters_req(1, 0xFFFF, 1)).status, 0);
  EXPECT_EQ(c.port_xmit_wait, 0u);
  EXPECT_EQ(c.port_rcv_data, 0u);
  EXPECT_EQ(c.port_xmit_discards, 0);
  EXPECT_EQ(c.port_rcv_pkts, 0u);
  // Extended: clear XmitData (bit 0) and UnicastXmitPkts (bit 4) only.
  c.count_xmit(40);
  ASSERT_EQ(ask(ca, kSet, PmaAttr::kPortCountersExtended, counters_req(1, 0x11)).status, 0);
  EXPECT_EQ(c.port_xmit_data_ext, 0u);
  EXPECT_EQ(c.port_unicast_xmit_pkts, 0u);
  EXPECT_EQ(c.port_xmit_pkts_ext, 2u);
  EXPECT_EQ(c.port_rcv_data_ext, 200u);
  EXPECT_EQ(c.port_xmit_pkts, 1u);
}

TEST(Pma, AllPortSelectOnASwitch) {
  NodeState sw = test_switch();
  for (std::uint8_t p = 1; p <= 8; ++p) {
    sw.ports[p].counters.count_xmit(4ull * p);
    sw.ports[p].counters.port_xmit_discards = 0x4000;
  }
  sw.ports[0].counters.count_xmit(4000);  // port 0 is not part of the sum
  const wire::PortCounters v = wire::decode_port_counters(
      body_of(ask(sw, kGet, PmaAttr::kPortCounters, counters_req(0xFF, 0))));
  EXPECT_EQ(v.port_select, 0xFF);
  EXPECT_EQ(v.port_xmit_data, 36u);
  EXPECT_EQ(v.port_xmit_pkts, 8u);
  EXPECT_EQ(v.port_xmit_discards, 0xFFFF);  // 8 x 0x4000 saturates
  ASSERT_EQ(ask(sw, kSet, PmaAttr::kPortCounters, counters_req(0xFF, 0xFFFF)).status, 0);
  for (std::uint8_t p = 1; p <= 8; ++p) EXPECT_EQ(sw.ports[p].counters.port_xmit_pkts, 0u);
  EXPECT_EQ(sw.ports[0].counters.port_xmit_pkts, 1u);
  const wire::PortCountersExtended e = wire::decode_port_counters_ext(
      body_of(ask(sw, kGet, PmaAttr::kPortCountersExtended, counters_req(0xFF, 0))));
  EXPECT_EQ(e.port_xmit_data, 36u);
}

TEST(Pma, BadRequests) {
  NodeState ca = test_ca();
  NodeState sw = test_switch();
  EXPECT_EQ(ask(ca, kGet, PmaAttr::kPortCounters, counters_req(0xFF, 0)).status,
            status(MadStatus::kInvalidField));  // no AllPortSelect on a CA
  EXPECT_EQ(ask(ca, kGet, PmaAttr::kPortCounters, counters_req(3, 0)).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(ask(ca, kGet, PmaAttr::kPortCounters, counters_req(0, 0)).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(ask(sw, kGet, PmaAttr::kPortCounters, counters_req(9, 0)).status,
            status(MadStatus::kInvalidField));
  EXPECT_EQ(ask(sw, kGet, PmaAttr::kPortCounters, counters_req(0, 0)).status, 0);
  EXPECT_EQ(ask(ca, kGet, static_cast<PmaAttr>(0x0016)).status,
            status(MadStatus::kUnsupportedMethodAttr));
  EXPECT_EQ(ask(ca, 0x03, PmaAttr::kPortCounters, counters_req(1, 0)).status,
            status(MadStatus::kUnsupportedMethod));
  MadReply bv = handle_pma(ca, 1, pma(kGet, PmaAttr::kPortCounters, counters_req(1, 0), 2));
  EXPECT_EQ(bv.status, status(MadStatus::kBadVersion));
  EXPECT_EQ(ca.stats.pma_handled, 6u);
  // Dropped: truncated, base version, wrong class, a response.
  const Mad good = pma(kGet, PmaAttr::kPortCounters, counters_req(1, 0));
  EXPECT_EQ(handle_pma(ca, 1, std::span<const std::uint8_t>(good).first(63)).reason,
            DropReason::kTruncated);
  Mad m = good;
  m[0] = 3;
  EXPECT_EQ(handle_pma(ca, 1, m).reason, DropReason::kBadBaseVersion);
  m = good;
  m[1] = 0x01;
  EXPECT_EQ(handle_pma(ca, 1, m).reason, DropReason::kBadClass);
  m = good;
  m[3] = kGetResp;
  EXPECT_EQ(handle_pma(ca, 1, m).reason, DropReason::kNotRequest);
  EXPECT_EQ(ca.stats.pma_dropped, 4u);
  EXPECT_EQ(ca.stats.pma_handled, 6u);
}

}  // namespace
}  // namespace weft::sma::test
