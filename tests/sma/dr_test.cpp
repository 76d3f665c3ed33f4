// tests/sma/dr_test.cpp — directed-route SMPs through handle_smp at each node of a made-up path
// (IBA 14.2.2): hop pointer and return path at every step out and back, the LID-routed tail,
// and the cases the rules discard.
//
//   SM on CA "a" port 1 --- port 4 [S1] port 6 --- port 2 [S2] port 7 --- port 2 CA "t"
#include "emu/sma/sma.hpp"

#include <gtest/gtest.h>

#include "tests/sma/sma_test_util.hpp"

namespace weft::sma::test {
namespace {

using wire::SmpAttr;

struct Path {
  NodeState a = make_ca({.node_guid = 0xA000, .description = "sm-host", .num_ports = 2});
  NodeState s1 = make_switch({.node_guid = 0x51000, .description = "s1", .num_ports = 8});
  NodeState s2 = make_switch({.node_guid = 0x52000, .description = "s2", .num_ports = 8});
  NodeState t = make_ca({.node_guid = 0x7000, .description = "target", .num_ports = 2});
};

// What the SM on "a" puts on the wire for a Get of `attr` hop_cnt hops out along 1, 6, 7.
Mad sm_request(std::uint8_t hop_cnt, std::uint16_t a, std::uint16_t dr_dlid = wire::kPermissiveLid,
               std::array<std::uint8_t, 4> path = {0, 1, 6, 7}) {
  wire::SmpDr s;
  s.hdr.method = kGet;
  s.hdr.tid = 0xD1;
  s.hdr.attr_id = a;
  s.hop_cnt = hop_cnt;
  s.dr_dlid = dr_dlid;
  for (std::size_t k = 0; k < path.size(); ++k) s.initial_path[k] = path[k];
  const wire::DrDecision d = wire::dr_send(s);
  EXPECT_EQ(d.verdict, wire::DrVerdict::kForward);
  EXPECT_EQ(d.out_port, 1);
  EXPECT_EQ(s.hop_ptr, 1);
  Mad m{};
  wire::encode_smp(s, m);
  return m;
}

wire::SmpDr decode(const Mad& m) {
  auto s = wire::decode_smp_dr(m);
  EXPECT_TRUE(s.ok());
  return *s;
}

TEST(DirectedRoute, ThreeHopsOutAndBack) {
  Path p;
  const Mad req = sm_request(3, attr(SmpAttr::kNodeInfo));
  struct Step {
    NodeState* node;
    std::uint8_t in_port;
    SmpAction action;
    std::uint8_t out_port;
    bool direction;
    std::uint8_t hop_ptr;
  };
  // Expect: out along InitialPath 1, 6, 7, each switch recording its arrival port in the return
  // path; the target answers out the port it came in on, and the response retraces the return
  // path with the hop pointer counting down to 0 at the SM.
  const Step steps[] = {
      {&p.s1, 4, SmpAction::kSendOut, 6, false, 2}, {&p.s2, 2, SmpAction::kSendOut, 7, false, 3},
      {&p.t, 2, SmpAction::kSendOut, 2, true, 3},   {&p.s2, 7, SmpAction::kSendOut, 2, true, 2},
      {&p.s1, 6, SmpAction::kSendOut, 4, true, 1},  {&p.a, 1, SmpAction::kToLocalSm, 0, true, 0},
  };
  Mad m = req;
  int i = 0;
  for (const Step& s : steps) {
    MadReply r = handle_smp(*s.node, s.in_port, m);
    ASSERT_EQ(r.action, s.action) << "step " << i << ": " << to_string(r.reason);
    if (s.action == SmpAction::kSendOut) {
      EXPECT_EQ(r.out_port, s.out_port) << "step " << i;
    }
    const wire::SmpDr d = decode(r.mad);
    EXPECT_EQ(d.direction, s.direction) << "step " << i;
    EXPECT_EQ(d.hop_ptr, s.hop_ptr) << "step " << i;
    EXPECT_EQ(d.hop_cnt, 3) << "step " << i;
    m = r.mad;
    ++i;
  }
  const wire::SmpDr back = decode(m);
  EXPECT_EQ(back.return_path[1], 4);
  EXPECT_EQ(back.return_path[2], 2);
  EXPECT_EQ(back.return_path[3], 2);
  EXPECT_EQ(back.initial_path[1], 1);
  EXPECT_EQ(back.initial_path[2], 6);
  EXPECT_EQ(back.initial_path[3], 7);
  EXPECT_EQ(back.hdr.method, kGetResp);
  EXPECT_EQ(back.status, 0);
  EXPECT_EQ(back.hdr.tid, 0xD1u);
  const wire::NodeInfo ni = wire::decode_node_info(back.data);
  EXPECT_EQ(ni.node_guid, 0x7000u);
  EXPECT_EQ(ni.port_guid, 0x7002u);
  EXPECT_EQ(ni.local_port_num, 2);
  EXPECT_EQ(p.s1.stats.smps_forwarded, 2u);
  EXPECT_EQ(p.s2.stats.smps_forwarded, 2u);
  EXPECT_EQ(p.t.stats.smps_handled, 1u);
  EXPECT_EQ(p.s1.stats.smps_handled, 0u);
}

TEST(DirectedRoute, SwitchAtTheEndAnswersOutItsArrivalPort) {
  Path p;
  MadReply r1 = handle_smp(p.s1, 4, sm_request(2, attr(SmpAttr::kNodeInfo)));
  ASSERT_EQ(r1.action, SmpAction::kSendOut);
  MadReply r2 = handle_smp(p.s2, 2, r1.mad);
  ASSERT_EQ(r2.action, SmpAction::kSendOut);
  EXPECT_EQ(r2.out_port, 2);
  const wire::SmpDr d = decode(r2.mad);
  EXPECT_TRUE(d.direction);
  EXPECT_EQ(d.hop_ptr, 2);
  EXPECT_EQ(wire::decode_node_info(d.data).node_guid, 0x52000u);
  EXPECT_EQ(wire::decode_node_info(d.data).local_port_num, 2);
}

TEST(DirectedRoute, LidRoutedTail) {
  Path p;
  constexpr std::uint16_t kTargetLid = 0x50, kS1Lid = 3;
  // HopCnt 1 with DrDLID set: S1 ends the directed part and routes by LID.
  MadReply r = handle_smp(p.s1, 4, sm_request(1, attr(SmpAttr::kNodeInfo), kTargetLid));
  ASSERT_EQ(r.action, SmpAction::kRouteByLid);
  EXPECT_EQ(r.dlid, kTargetLid);
  EXPECT_EQ(decode(r.mad).hop_ptr, 2);
  EXPECT_EQ(decode(r.mad).return_path[1], 4);
  // The target answers by LID to the switch that sent it (LRH SLID); HopPtr stays HopCnt + 1.
  MadReply ans = handle_smp(p.t, 1, r.mad, {.lrh_slid = kS1Lid});
  ASSERT_EQ(ans.action, SmpAction::kRouteByLid);
  EXPECT_EQ(ans.dlid, kS1Lid);
  EXPECT_TRUE(decode(ans.mad).direction);
  EXPECT_EQ(decode(ans.mad).hop_ptr, 2);
  // S1 resumes the directed return path.
  MadReply back = handle_smp(p.s1, 1, ans.mad);
  ASSERT_EQ(back.action, SmpAction::kSendOut);
  EXPECT_EQ(back.out_port, 4);
  EXPECT_EQ(decode(back.mad).hop_ptr, 1);
  MadReply at_sm = handle_smp(p.a, 1, back.mad);
  EXPECT_EQ(at_sm.action, SmpAction::kToLocalSm);
  EXPECT_EQ(decode(at_sm.mad).hop_ptr, 0);
}

TEST(DirectedRoute, LidRoutedHeadOnTheWayBack) {
  Path p;
  // A response at hop 1 whose DrSLID is a real LID: S1 hands it to LID routing toward DrSLID.
  wire::SmpDr s;
  s.hdr.method = kGetResp;
  s.direction = true;
  s.hop_cnt = 2;
  s.hop_ptr = 2;
  s.dr_slid = 0x0001;
  s.return_path[1] = 4;
  s.return_path[2] = 2;
  Mad m{};
  wire::encode_smp(s, m);
  MadReply r = handle_smp(p.s2, 7, m);
  ASSERT_EQ(r.action, SmpAction::kSendOut);
  EXPECT_EQ(r.out_port, 4);  // ReturnPath[1] on this (second) switch's numbering
  MadReply r2 = handle_smp(p.s1, 6, r.mad);
  ASSERT_EQ(r2.action, SmpAction::kRouteByLid);
  EXPECT_EQ(r2.dlid, 0x0001);
  EXPECT_EQ(decode(r2.mad).hop_ptr, 0);
  // A CA cannot hand a response to LID routing.
  EXPECT_EQ(handle_smp(p.a, 1, r.mad).reason, DropReason::kDrRules);
}

TEST(DirectedRoute, Discards) {
  struct Case {
    const char* what;
    std::uint8_t hop_cnt;
    std::array<std::uint8_t, 4> path;
    bool to_ca;                  // deliver the first hop to a CA instead of S1
    std::uint8_t clear_hop_ptr;  // 1: the sender did not advance the pointer
  };
  const Case cases[] = {
      {"out port past NumPorts", 3, {0, 1, 9, 7}, false, 0},
      {"out port 0", 3, {0, 1, 0, 7}, false, 0},
      {"CA in the middle of a path", 3, {0, 1, 6, 7}, true, 0},
      {"hop pointer not advanced", 3, {0, 1, 6, 7}, false, 1},
  };
  for (const Case& c : cases) {
    Path p;
    Mad m = sm_request(c.hop_cnt, attr(SmpAttr::kNodeInfo), wire::kPermissiveLid, c.path);
    if (c.clear_hop_ptr) m[6] = 0;
    NodeState& n = c.to_ca ? p.t : p.s1;
    MadReply r = handle_smp(n, c.to_ca ? 1 : 4, m);
    EXPECT_EQ(r.action, SmpAction::kDrop) << c.what;
    EXPECT_EQ(r.reason, DropReason::kDrRules) << c.what;
    EXPECT_EQ(n.stats.dropped_dr_rules, 1u) << c.what;
  }
}

TEST(DirectedRoute, HopCountZeroIsTheLocalNode) {
  Path p;
  wire::SmpDr s;
  s.hdr.method = kGet;
  s.hdr.attr_id = attr(SmpAttr::kNodeInfo);
  s.hop_cnt = 0;
  ASSERT_EQ(wire::dr_send(s).verdict, wire::DrVerdict::kConsume);
  Mad m{};
  wire::encode_smp(s, m);
  MadReply r = handle_smp(p.s1, 0, m);
  ASSERT_EQ(r.action, SmpAction::kToLocalSm);
  EXPECT_TRUE(r.is_response);
  EXPECT_EQ(decode(r.mad).hop_ptr, 0);
  EXPECT_EQ(wire::decode_node_info(decode(r.mad).data).node_guid, 0x51000u);
}

}  // namespace
}  // namespace weft::sma::test
