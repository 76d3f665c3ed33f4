// tests/cm/sa_test.cpp — the Subnet Administrator answering over the emulated fabric's QP1:
// PathRecord between every HCA pair, NodeRecord and PortInfoRecord tables through RMPP (with
// component masks), error statuses, a fat tree's table across several RMPP windows with lost
// segments and ACKs, and the RMPP engines alone under random loss over many seeds.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "emu/sa/subnet_admin.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "src/cm/rmpp.hpp"
#include "src/cm/sa_client.hpp"
#include "tests/cm/cm_test_util.hpp"

namespace weft::sa {
namespace {

using test::Subnet;

cm::SaResult ask(Subnet& s, topo::NodeId from, const cm::SaQuery& q) {
  cm::SaClient& c = s.net->sa_client(from);
  auto id = c.query(q, s.sim.now());
  EXPECT_TRUE(id.ok());
  s.net->kick(from);
  cm::SaResult r;
  bool got = false;
  EXPECT_TRUE(s.run_until([&] { return got = got || c.poll_result(r); }));
  // The client has everything; let the SA see the last ACK too.
  EXPECT_TRUE(s.run_until([&] { return s.net->sa().transfers() == 0; }));
  return r;
}

std::uint64_t guid_of(const std::array<std::uint8_t, 16>& gid) {
  std::uint64_t g = 0;
  for (int i = 8; i < 16; ++i) g = g << 8 | gid[static_cast<std::size_t>(i)];
  return g;
}

TEST(Sa, PathRecordBetweenEveryHcaPair) {
  Subnet s(test::two_switches());
  const topo::NodeId from = s.hcas[1];  // not the SM's node: the query crosses the fabric
  for (topo::NodeId x : s.hcas) {
    for (topo::NodeId y : s.hcas) {
      SCOPED_TRACE(std::to_string(x) + " -> " + std::to_string(y));
      const cm::SaResult r = ask(s, from, cm::path_query(s.net->lid(x), s.net->lid(y), false));
      ASSERT_TRUE(r.ok()) << r.mad_status;
      const auto paths = cm::path_records(r);
      ASSERT_EQ(paths.size(), 1u);
      const wire::PathRecord& p = paths[0];
      EXPECT_EQ(p.slid, s.net->lid(x));
      EXPECT_EQ(p.dlid, s.net->lid(y));
      EXPECT_EQ(guid_of(p.sgid), s.fab->node(x).state().ports[1].port_guid);
      EXPECT_EQ(guid_of(p.dgid), s.fab->node(y).state().ports[1].port_guid);
      EXPECT_TRUE(p.reversible);
      EXPECT_EQ(p.pkey, 0xFFFF);
      // Expect: the SMA's defaults, 4x QDR links (40 Gb/s, code 7) and a 4096-byte MTU.
      EXPECT_EQ(p.mtu, 5);
      EXPECT_EQ(p.rate, 7);
      EXPECT_EQ(p.packet_life_time, SaConfig{}.packet_life_time);
    }
  }
  EXPECT_EQ(s.net->sa().stats().errors, 0u);
}

TEST(Sa, NodeRecordTableComesThroughRmpp) {
  Subnet s(test::two_switches());
  // All nodes: 4 CA ports + 2 switches = 6 records of 112 bytes: 4 RMPP segments.
  const cm::SaResult all = ask(s, s.hcas[2], cm::node_query({}, 0));
  ASSERT_TRUE(all.ok());
  const auto recs = cm::node_records(all);
  ASSERT_EQ(recs.size(), 6u);
  std::set<std::uint64_t> guids;
  for (const auto& r : recs) {
    guids.insert(r.node_info.node_guid);
    const topo::NodeId n = *s.topo.find_guid(r.node_info.node_guid);
    EXPECT_EQ(r.description.view(), s.topo.node(n).description);
    EXPECT_EQ(r.lid, s.fab->node(n).state().ports[r.node_info.local_port_num].lid);
  }
  EXPECT_EQ(guids.size(), 6u);
  EXPECT_EQ(s.net->sa().stats().rmpp_done, 1u);
  EXPECT_GE(s.net->sa().stats().rmpp_segments, 4u);

  wire::NodeRecord q;
  q.node_info.node_type = wire::NodeType::kSwitch;
  EXPECT_EQ(
      cm::node_records(ask(s, s.hcas[2], cm::node_query(q, wire::node_comp::kNodeType))).size(),
      2u);
  q.node_info.node_guid = s.topo.node(s.hcas[3]).guid;
  const auto one =
      cm::node_records(ask(s, s.hcas[2], cm::node_query(q, wire::node_comp::kNodeGuid)));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].lid, s.net->lid(s.hcas[3]));
  // Get (not GetTable) of a query that matches several: ERR_REQ_TOO_MANY_RECORDS.
  const cm::SaResult many = ask(s, s.hcas[2], cm::node_query({}, 0, /*table=*/false));
  EXPECT_EQ(many.status, wire::SaStatus::kTooManyRecords);
}

TEST(Sa, PortInfoRecordsByLid) {
  Subnet s(test::two_switches());
  wire::PortInfoRecord q;
  q.endport_lid = s.net->lid(s.hcas[3]);
  const auto hca = cm::port_info_records(
      ask(s, s.hcas[0], cm::port_info_query(q, wire::portinfo_comp::kEndportLid)));
  ASSERT_EQ(hca.size(), 1u);
  EXPECT_EQ(hca[0].port_num, 1);
  EXPECT_EQ(hca[0].port_info.lid, q.endport_lid);
  EXPECT_EQ(hca[0].port_info.port_state, wire::PortState::kActive);
  EXPECT_EQ(hca[0].port_info.master_sm_lid, s.net->sm_lid());
  // A switch answers for ports 0..4 under its one LID; PortNum narrows it to one.
  const topo::NodeId sw = 0;
  q.endport_lid = s.fab->node(sw).state().ports[0].lid;
  EXPECT_EQ(cm::port_info_records(
                ask(s, s.hcas[0], cm::port_info_query(q, wire::portinfo_comp::kEndportLid)))
                .size(),
            5u);
  q.port_num = 4;
  const auto p4 = cm::port_info_records(ask(
      s, s.hcas[0],
      cm::port_info_query(q, wire::portinfo_comp::kEndportLid | wire::portinfo_comp::kPortNum)));
  ASSERT_EQ(p4.size(), 1u);
  EXPECT_EQ(p4[0].port_info.port_state, wire::PortState::kActive);
}

// P_KeyTableRecord (15.2.5.11): the tables as the SMAs hold them (default: 0xFFFF at index 0).
TEST(Sa, PKeyTableRecords) {
  Subnet s(test::two_switches());
  namespace kc = wire::pkey_comp;
  wire::PKeyTableRecord q;
  q.lid = s.net->lid(s.hcas[3]);
  const auto hca = cm::pkey_table_records(ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid)));
  ASSERT_EQ(hca.size(), 1u);  // PartitionCap 32: one block
  wire::PKeyTableRecord want;
  want.lid = q.lid;
  want.block_num = 0;
  want.port_num = 1;
  want.pkeys[0] = 0xFFFF;
  EXPECT_EQ(hca[0], want);
  // The SMA's own table, changed: the SA reports what the node holds (rebuilt tables).
  s.fab->node(s.hcas[3]).state().ports[1].pkeys[1] = 0x8123;
  s.net->sa().set_tables(sa::build_tables(
      s.topo, [&](topo::NodeId n) -> const sma::NodeState& { return s.fab->node(n).state(); }));
  const auto again =
      cm::pkey_table_records(ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid, /*table=*/false)));
  ASSERT_EQ(again.size(), 1u);
  want.pkeys[1] = 0x8123;
  EXPECT_EQ(again[0], want);
  // A switch: ports 0..4 under its LID; PortNum and BlockNum narrow it to one record.
  const sma::NodeState& sw = s.fab->node(0).state();
  q.lid = sw.ports[0].lid;
  std::size_t blocks = 0;
  for (int p = 0; p <= sw.num_ports; ++p) blocks += (sw.ports[p].pkeys.size() + 31) / 32;
  EXPECT_EQ(cm::pkey_table_records(ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid))).size(),
            blocks);
  q.port_num = 3;
  q.block_num = 0;
  const auto p3 = cm::pkey_table_records(
      ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid | kc::kPortNum | kc::kBlockNum)));
  ASSERT_EQ(p3.size(), 1u);
  EXPECT_EQ(p3[0].port_num, 3);
  EXPECT_EQ(p3[0].pkeys[0], sw.ports[3].pkeys[0]);
  // Get of the whole switch: too many; an unknown component: invalid; no such block: none.
  EXPECT_EQ(ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid, false)).status,
            wire::SaStatus::kTooManyRecords);
  EXPECT_EQ(ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid | (1ull << 3))).status,
            wire::SaStatus::kReqInvalid);
  q.block_num = 7;
  EXPECT_EQ(
      ask(s, s.hcas[0], cm::pkey_table_query(q, kc::kLid | kc::kPortNum | kc::kBlockNum, false))
          .status,
      wire::SaStatus::kNoRecords);
}

// ServiceRecord (15.2.5.14): registered with SubnAdmSet, found by ID / name, a lease ends one,
// SubnAdmDelete removes one; refusals for missing components and unknown GIDs.
TEST(Sa, ServiceRecordsRegisterQueryLeaseDelete) {
  Subnet s(test::two_switches());
  namespace sc = wire::service_comp;
  constexpr auto kSet = static_cast<std::uint8_t>(wire::GmpMethod::kSet);
  constexpr auto kDelete = static_cast<std::uint8_t>(wire::GmpMethod::kDelete);
  auto gid = [&](topo::NodeId n) {
    std::array<std::uint8_t, 16> g{0xFE, 0x80};
    const std::uint64_t guid = s.fab->node(n).state().ports[1].port_guid;
    for (int i = 0; i < 8; ++i) g[8 + i] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
    return g;
  };
  wire::ServiceRecord echo;
  echo.service_id = 0x1000000000000ABCull;
  echo.gid = gid(s.hcas[1]);
  echo.pkey = 0xFFFF;
  echo.lease = wire::kServiceLeaseInfinite;
  std::copy_n("weft-echo", 9, echo.name.begin());
  echo.data8[0] = 7;
  echo.data64[1] = 0x0102030405060708ull;
  const cm::SaResult reg =
      ask(s, s.hcas[1], cm::service_query(echo, sc::kId | sc::kGid | sc::kPkey, false, kSet));
  ASSERT_TRUE(reg.ok()) << reg.mad_status;
  ASSERT_EQ(cm::service_records(reg).size(), 1u);
  EXPECT_EQ(cm::service_records(reg)[0], echo);
  // Another HCA finds it by ServiceID (GetTable) and by name (Get).
  const auto by_id = cm::service_records(ask(s, s.hcas[2], cm::service_query(echo, sc::kId)));
  ASSERT_EQ(by_id.size(), 1u);
  EXPECT_EQ(by_id[0], echo);
  wire::ServiceRecord q;
  q.name = echo.name;
  const auto by_name =
      cm::service_records(ask(s, s.hcas[3], cm::service_query(q, sc::kName, false)));
  ASSERT_EQ(by_name.size(), 1u);
  EXPECT_EQ(by_name[0].gid, echo.gid);
  q.name[0] = 'x';
  EXPECT_EQ(ask(s, s.hcas[3], cm::service_query(q, sc::kName, false)).status,
            wire::SaStatus::kNoRecords);
  // A second provider with a 1 s lease: two records, then one once the lease has run out.
  wire::ServiceRecord second = echo;
  second.gid = gid(s.hcas[3]);
  second.lease = 1;
  ASSERT_TRUE(ask(s, s.hcas[3], cm::service_query(second, sc::kId | sc::kGid, false, kSet)).ok());
  EXPECT_EQ(cm::service_records(ask(s, s.hcas[2], cm::service_query(echo, sc::kId))).size(), 2u);
  // Registering again replaces (same ID, GID, P_Key): still two.
  ASSERT_TRUE(ask(s, s.hcas[3], cm::service_query(second, sc::kId | sc::kGid, false, kSet)).ok());
  EXPECT_EQ(s.net->sa().services(s.sim.now()), 2u);
  s.sim.run_until(s.sim.now() + 1'100'000'000);
  const auto left = cm::service_records(ask(s, s.hcas[2], cm::service_query(echo, sc::kId)));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].gid, echo.gid);
  // Delete by ID and GID: DeleteResp with the record, then nothing left.
  const cm::SaResult del =
      ask(s, s.hcas[1], cm::service_query(echo, sc::kId | sc::kGid, false, kDelete));
  ASSERT_TRUE(del.ok()) << del.mad_status;
  ASSERT_EQ(cm::service_records(del).size(), 1u);
  EXPECT_EQ(cm::service_records(del)[0], echo);
  const cm::SaResult none = ask(s, s.hcas[2], cm::service_query(echo, sc::kId));
  EXPECT_TRUE(none.ok());
  EXPECT_EQ(cm::service_records(none).size(), 0u);
  EXPECT_EQ(ask(s, s.hcas[1], cm::service_query(echo, sc::kId | sc::kGid, false, kDelete)).status,
            wire::SaStatus::kNoRecords);
  // Refusals.
  EXPECT_EQ(ask(s, s.hcas[1], cm::service_query(echo, sc::kId, false, kSet)).status,
            wire::SaStatus::kInsufficientComponents);
  wire::ServiceRecord stranger = echo;
  stranger.gid[15] ^= 0x5A;
  EXPECT_EQ(ask(s, s.hcas[1], cm::service_query(stranger, sc::kId | sc::kGid, false, kSet)).status,
            wire::SaStatus::kInvalidGid);
  EXPECT_EQ(ask(s, s.hcas[1], cm::service_query(echo, sc::kId | (1ull << 7))).status,
            wire::SaStatus::kReqInvalid);
  EXPECT_EQ(s.net->sa().services(s.sim.now()), 0u);
}

// MCMemberRecord (15.2.5.17): joins create the group and add members, the SM programs the
// MFTs, a multicast reaches exactly the members; a leave takes one out.
TEST(Sa, McMemberJoinProgramsTheSwitchesAndLeaveUndoesIt) {
  Subnet s(test::two_switches());
  namespace mc = wire::mcmember_comp;
  constexpr auto kSet = static_cast<std::uint8_t>(wire::GmpMethod::kSet);
  constexpr auto kDelete = static_cast<std::uint8_t>(wire::GmpMethod::kDelete);
  auto gid = [&](topo::NodeId n) {
    std::array<std::uint8_t, 16> g{0xFE, 0x80};
    const std::uint64_t guid = s.fab->node(n).state().ports[1].port_guid;
    for (int i = 0; i < 8; ++i) g[8 + i] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
    return g;
  };
  wire::McMemberRecord j;
  j.port_gid = gid(s.hcas[1]);
  j.qkey = 0x0001E240;
  j.pkey = 0xFFFF;
  j.join_state = 1;  // full member
  const cm::SaResult created =
      ask(s, s.hcas[1],
          cm::mcmember_query(j, mc::kMgid | mc::kPortGid | mc::kQkey | mc::kPkey | mc::kJoinState,
                             false, kSet));
  ASSERT_TRUE(created.ok()) << created.mad_status;
  const auto c = cm::mcmember_records(created);
  ASSERT_EQ(c.size(), 1u);
  const std::array<std::uint8_t, 16> mgid{0xFF, 0x12, 0xA0, 0x1B, 0, 0, 0,    0,
                                          0,    0,    0,    0,    0, 0, 0xC0, 0x00};
  EXPECT_EQ(c[0].mgid, mgid);
  EXPECT_EQ(c[0].mlid, 0xC000);
  EXPECT_EQ(c[0].qkey, 0x0001E240u);
  EXPECT_EQ(c[0].pkey, 0xFFFF);
  EXPECT_EQ(c[0].mtu, 5);
  EXPECT_EQ(c[0].rate, 7);
  EXPECT_EQ(c[0].port_gid, j.port_gid);
  EXPECT_EQ(c[0].join_state, 1);
  for (topo::NodeId n : {s.hcas[2], s.hcas[3]}) {
    wire::McMemberRecord k;
    k.mgid = mgid;
    k.port_gid = gid(n);
    k.join_state = 1;
    const cm::SaResult r =
        ask(s, n, cm::mcmember_query(k, mc::kMgid | mc::kPortGid | mc::kJoinState, false, kSet));
    ASSERT_TRUE(r.ok()) << r.mad_status;
    EXPECT_EQ(cm::mcmember_records(r)[0].mlid, 0xC000);
  }
  EXPECT_EQ(s.net->sa().multicast_groups(), 1u);
  sm::FabricSm& fsm = *s.net->fabric_sm();
  ASSERT_TRUE(fsm.run_until_settled(1'000'000'000));
  ASSERT_EQ(fsm.sm().multicast_groups().count(0xC000), 1u);
  EXPECT_EQ(fsm.sm().multicast_groups().at(0xC000).size(), 3u);
  wire::McMemberRecord all;
  all.mgid = mgid;
  const auto members = cm::mcmember_records(ask(s, s.hcas[0], cm::mcmember_query(all, mc::kMgid)));
  ASSERT_EQ(members.size(), 3u);
  // A PMA Get to the MLID from h1: h2 and h3 answer, h0 never sees it.
  auto multicast = [&](topo::NodeId from) {
    std::map<topo::NodeId, std::uint64_t> before, got;
    for (topo::NodeId n : s.hcas) before[n] = s.fab->node(n).mads_received();
    std::array<std::uint8_t, wire::kMadBytes> mad{};
    mad[0] = 1;
    mad[1] = static_cast<std::uint8_t>(wire::MgmtClass::kPerfMgt);
    mad[2] = 1;
    mad[3] = static_cast<std::uint8_t>(wire::MadMethod::kGet);
    EXPECT_TRUE(s.fab->send_mad(from, 0xC000, mad, /*smp=*/false));
    s.sim.run_until(s.sim.now() + 100'000);
    for (topo::NodeId n : s.hcas) got[n] = s.fab->node(n).mads_received() - before[n];
    return got;
  };
  auto got = multicast(s.hcas[1]);
  EXPECT_EQ(got[s.hcas[0]], 0u);
  EXPECT_EQ(got[s.hcas[1]], 2u);  // two GetResps
  EXPECT_EQ(got[s.hcas[2]], 1u);
  EXPECT_EQ(got[s.hcas[3]], 1u);
  // h3 leaves.
  wire::McMemberRecord l;
  l.mgid = mgid;
  l.port_gid = gid(s.hcas[3]);
  l.join_state = 1;
  const cm::SaResult left =
      ask(s, s.hcas[3],
          cm::mcmember_query(l, mc::kMgid | mc::kPortGid | mc::kJoinState, false, kDelete));
  ASSERT_TRUE(left.ok()) << left.mad_status;
  EXPECT_EQ(cm::mcmember_records(left)[0].join_state, 0);
  ASSERT_TRUE(fsm.run_until_settled(1'000'000'000));
  EXPECT_EQ(fsm.sm().multicast_groups().at(0xC000).size(), 2u);
  got = multicast(s.hcas[1]);
  EXPECT_EQ(got[s.hcas[2]], 1u);
  EXPECT_EQ(got[s.hcas[3]], 0u);
  EXPECT_EQ(got[s.hcas[1]], 1u);
  // Refusals: an unknown port, a group created without its Q_Key, a leave of a non-member.
  wire::McMemberRecord bad = j;
  bad.port_gid[15] ^= 0x5A;
  EXPECT_EQ(ask(s, s.hcas[1],
                cm::mcmember_query(bad, mc::kPortGid | mc::kQkey | mc::kPkey | mc::kJoinState,
                                   false, kSet))
                .status,
            wire::SaStatus::kInvalidGid);
  EXPECT_EQ(ask(s, s.hcas[1],
                cm::mcmember_query(j, mc::kPortGid | mc::kPkey | mc::kJoinState, false, kSet))
                .status,
            wire::SaStatus::kInsufficientComponents);
  EXPECT_EQ(ask(s, s.hcas[3],
                cm::mcmember_query(l, mc::kMgid | mc::kPortGid | mc::kJoinState, false, kDelete))
                .status,
            wire::SaStatus::kNoRecords);
}

TEST(Sa, ErrorStatuses) {
  Subnet s(test::two_switches());
  const topo::NodeId from = s.hcas[1];
  // No destination: insufficient components.
  cm::SaQuery q = cm::path_query(s.net->lid(from), s.net->lid(s.hcas[2]));
  q.comp_mask &= ~wire::path_comp::kDlid;
  EXPECT_EQ(ask(s, from, q).status, wire::SaStatus::kInsufficientComponents);
  // An MTU larger than 4096 exists on no path.
  wire::PathRecord pr;
  pr.slid = s.net->lid(from);
  pr.dlid = s.net->lid(s.hcas[2]);
  pr.mtu_selector = wire::Selector::kGreater;
  pr.mtu = 5;
  q = cm::path_query(pr.slid, pr.dlid, false);
  wire::encode(pr, std::span<std::uint8_t, wire::kPathRecordBytes>(q.record));
  q.comp_mask = wire::path_comp::kSlid | wire::path_comp::kDlid | wire::path_comp::kMtu |
                wire::path_comp::kMtuSelector;
  EXPECT_EQ(ask(s, from, q).status, wire::SaStatus::kNoRecords);
  // "Less than 4096" does: 4096 is not, so no; "exactly 4096" is.
  pr.mtu_selector = wire::Selector::kExactly;
  wire::encode(pr, std::span<std::uint8_t, wire::kPathRecordBytes>(q.record));
  EXPECT_EQ(cm::path_records(ask(s, from, q)).size(), 1u);
  // A component this SA does not evaluate is refused, not ignored.
  q.comp_mask |= wire::path_comp::kQosClass;
  EXPECT_EQ(ask(s, from, q).status, wire::SaStatus::kReqInvalid);
  // An unknown destination LID: no record.
  q = cm::path_query(s.net->lid(from), 0x7777, false);
  EXPECT_EQ(ask(s, from, q).status, wire::SaStatus::kNoRecords);
  // An attribute this SA does not serve (LinkRecord 0x20): method/attribute unsupported.
  q.attr = static_cast<wire::SaAttr>(0x0020);
  const cm::SaResult r = ask(s, from, q);
  EXPECT_EQ(r.mad_status, static_cast<std::uint16_t>(wire::MadStatus::kUnsupportedMethodAttr));
}

// Event forwarding (13.4.8.3, 15.2.5.12): InformInfo subscriptions by SubnAdmSet, and
// SubnAdmReports of trap 128 (from a switch, through the SM) and traps 64 / 65 (the SM's own:
// a port in / out of service) to exactly the subscribers that asked; a lost ReportResp makes
// the SA send the Report again, and the client answers it without delivering it twice.
TEST(Sa, InformInfoSubscribersGetReportsForTraps128_64_65) {
  Subnet s(test::two_switches());  // h0 (the SM, s.hcas[0]) h1 on s1; h2 h3 on s2
  const topo::NodeId h0 = s.hcas[0], h1 = s.hcas[1], h2 = s.hcas[2], h3 = s.hcas[3];
  cm::InformInfo only128;
  only128.trap_number = 128;
  cm::InformInfo all;
  cm::InformInfo only65;
  only65.trap_number = cm::kTrapGidOutOfService;
  for (const auto& [n, v] : {std::pair{h1, only128}, std::pair{h2, all}, std::pair{h0, only65}}) {
    const cm::SaResult r = ask(s, n, cm::inform_query(v));
    ASSERT_TRUE(r.ok()) << r.mad_status;
    ASSERT_EQ(r.data.size(), 40u);  // AttributeOffset 5 words
    std::array<std::uint8_t, cm::kInformInfoBytes> want{};
    cm::encode(v, want);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), r.data.begin()));
  }
  EXPECT_EQ(s.net->sa().subscriptions(), 3u);
  // The same subscription again changes nothing.
  ASSERT_TRUE(ask(s, h1, cm::inform_query(only128)).ok());
  EXPECT_EQ(s.net->sa().subscriptions(), 3u);

  // h2's first ReportResp is lost.
  int resp_drops = 0;
  s.net->drop_filter = [&](topo::NodeId from, std::span<const std::uint8_t> mad) {
    return from == h2 && mad[3] == cm::kSaMethodReportResp && resp_drops++ == 0;
  };
  std::map<topo::NodeId, std::vector<cm::SaNotice>> got;
  auto collect = [&] {
    for (topo::NodeId n : {h0, h1, h2, h3}) {
      cm::SaNotice x;
      while (s.net->sa_client(n).poll_report(x)) got[n].push_back(x);
    }
  };
  const sma::NodeState& s2 = s.fab->node(1).state();
  const std::uint64_t h3_guid = s.fab->node(h3).state().ports[1].port_guid;
  const topo::LinkId link = s.topo.node(h3).ports[1].link;
  s.fab->set_link_state(link, false, s.sim.now());
  ASSERT_TRUE(s.run_until([&] {
    collect();
    return got[h1].size() == 1 && got[h2].size() == 2 && got[h0].size() == 1 &&
           s.net->sa().reports_pending() == 0;
  })) << got[h1].size()
      << " " << got[h2].size() << " " << got[h0].size();
  // Trap 128 from s2, as the switch sent it, with s2's port GID.
  const cm::SaNotice& t128 = got[h1][0];
  EXPECT_EQ(t128.notice.trap_number, 128);
  EXPECT_TRUE(t128.notice.is_generic);
  EXPECT_EQ(t128.notice.type, wire::kNoticeTypeUrgent);
  EXPECT_EQ(t128.notice.producer_type, wire::kProducerSwitch);
  EXPECT_EQ(t128.notice.issuer_lid, s2.ports[0].lid);
  EXPECT_EQ(t128.issuer_gid, cm::port_gid(s2.ports[0].port_guid));
  EXPECT_EQ(got[h2][0].notice.trap_number, 128);
  // Trap 65: h3's GID went out of service, issued by the SM.
  for (const cm::SaNotice& t65 : {got[h2][1], got[h0][0]}) {
    EXPECT_EQ(t65.notice.trap_number, cm::kTrapGidOutOfService);
    EXPECT_EQ(t65.notice.type, cm::kNoticeTypeInfo);
    EXPECT_EQ(t65.notice.producer_type, cm::kProducerClassManager);
    EXPECT_EQ(t65.notice.issuer_lid, s.net->sm_lid());
    const auto gid = cm::port_gid(h3_guid);
    EXPECT_TRUE(std::equal(gid.begin(), gid.end(), t65.notice.data_details.begin() + 6));
  }
  EXPECT_TRUE(got[h3].empty());
  EXPECT_EQ(resp_drops, 3) << "h2's ReportResps: 128 (dropped), 128 again, 65";
  EXPECT_EQ(s.net->sa().stats().reports_resent, 1u);
  EXPECT_EQ(s.net->sa_client(h2).stats().reports_repeated, 1u);
  EXPECT_EQ(s.net->sa().stats().reports_answered, 4u);

  // The link comes back: trap 128 (h1, h2) and trap 64 for h3 (h2 only).
  s.fab->set_link_state(link, true, s.sim.now());
  ASSERT_TRUE(s.run_until([&] {
    collect();
    return got[h1].size() == 2 && got[h2].size() == 4 && s.net->sa().reports_pending() == 0;
  }));
  EXPECT_EQ(got[h1][1].notice.trap_number, 128);
  EXPECT_EQ(got[h2][2].notice.trap_number, 128);
  EXPECT_EQ(got[h2][3].notice.trap_number, cm::kTrapGidInService);
  EXPECT_EQ(got[h0].size(), 1u);

  // Unsubscribe h1; a second unsubscribe finds nothing: ERR_REQ_INVALID.
  cm::InformInfo off = only128;
  off.subscribe = false;
  EXPECT_TRUE(ask(s, h1, cm::inform_query(off)).ok());
  EXPECT_EQ(s.net->sa().subscriptions(), 2u);
  EXPECT_EQ(ask(s, h1, cm::inform_query(off)).status, wire::SaStatus::kReqInvalid);
}

// The matching rules on their own: GID or LID range, IsGeneric, Type, TrapNumber, ProducerType.
TEST(Sa, InformInfoMatching) {
  cm::SaNotice n;
  n.notice.is_generic = true;
  n.notice.type = 1;
  n.notice.producer_type = 2;
  n.notice.trap_number = 128;
  n.notice.issuer_lid = 7;
  n.issuer_gid = cm::port_gid(0x1234);
  cm::InformInfo s;
  EXPECT_TRUE(cm::inform_matches(s, n));
  s.lid_range_begin = 8;
  s.lid_range_end = 9;
  EXPECT_FALSE(cm::inform_matches(s, n));
  s.lid_range_begin = 7;
  EXPECT_TRUE(cm::inform_matches(s, n));
  s.gid = cm::port_gid(0x9999);  // a GID wins over the LID range
  EXPECT_FALSE(cm::inform_matches(s, n));
  s.gid = n.issuer_gid;
  EXPECT_TRUE(cm::inform_matches(s, n));
  s.type = 4;
  EXPECT_FALSE(cm::inform_matches(s, n));
  s.type = 1;
  s.producer_type = 1;
  EXPECT_FALSE(cm::inform_matches(s, n));
  s.producer_type = 0xFFFFFF;
  s.is_generic = false;
  EXPECT_FALSE(cm::inform_matches(s, n));
  // Byte layout (Table 126) round trip.
  cm::InformInfo v;
  v.gid[15] = 9;
  v.lid_range_begin = 0x0102;
  v.lid_range_end = 0x0304;
  v.subscribe = false;
  v.type = 4;
  v.trap_number = 65;
  v.qpn = 0xABCDEF;
  v.resp_time_value = 19;
  v.producer_type = 0x123456;
  std::array<std::uint8_t, cm::kInformInfoBytes> b{};
  cm::encode(v, b);
  EXPECT_EQ(b[16], 0x01);
  EXPECT_EQ(b[19], 0x04);
  EXPECT_EQ(b[22], 1);
  EXPECT_EQ(b[23], 0);
  EXPECT_EQ(b[27], 65);
  EXPECT_EQ(b[28], 0xAB);
  EXPECT_EQ(b[30], 0xEF);
  EXPECT_EQ(b[31], 19);
  EXPECT_EQ(b[33], 0x12);
  EXPECT_EQ(b[35], 0x56);
  const cm::InformInfo d = cm::decode_inform_info(b);
  EXPECT_EQ(d.gid, v.gid);
  EXPECT_EQ(d.qpn, v.qpn);
  EXPECT_EQ(d.producer_type, v.producer_type);
  EXPECT_FALSE(d.subscribe);
}

// SM_Key (15.2.1.2): PortInfoRecords carry the ports' M_Key only to a requester whose SA header
// holds the SA's SM_Key; others get M_Key 0, and may not select on it.
TEST(Sa, SmKeyHidesMKeysFromUntrustedRequesters) {
  sa::SubnetOptions o;
  o.sm.m_key = 0x00000000ABCD0001ull;  // the SM writes it into every port
  o.sa.sm_key = 0x5EC0000000000001ull;
  Subnet s(test::two_switches(), o);
  const topo::NodeId from = s.hcas[1];
  EXPECT_EQ(s.fab->node(from).state().ports[1].m_key, o.sm.m_key);
  auto query = [&](std::uint64_t sm_key, std::uint64_t mask) {
    wire::SaMad q;
    q.hdr.mgmt_class = wire::kMgmtClassSa;
    q.hdr.class_version = wire::kSaClassVersion;
    q.hdr.method = static_cast<std::uint8_t>(wire::GmpMethod::kGet);
    q.hdr.tid = 0x77;
    q.hdr.attr_id = static_cast<std::uint16_t>(wire::SaAttr::kPortInfoRecord);
    q.sm_key = sm_key;
    q.comp_mask = mask;
    wire::PortInfoRecord t;
    t.endport_lid = s.net->lid(from);
    t.port_num = 1;
    t.port_info.m_key = o.sm.m_key;
    wire::encode(t, std::span<std::uint8_t>(q.data).first<wire::kPortInfoRecordBytes>());
    cm::GsiMad in{s.net->lid(from), 1, {}};
    wire::encode_sa(q, in.mad);
    s.net->sa().on_mad(in, s.sim.now());
    cm::GsiMad out;
    EXPECT_TRUE(s.net->sa().poll_mad(s.sim.now(), out));
    return wire::decode_sa(out.mad).value();
  };
  namespace pc = wire::portinfo_comp;
  const std::uint64_t by_lid = pc::kEndportLid | pc::kPortNum;
  wire::SaMad r = query(o.sa.sm_key, by_lid);
  ASSERT_EQ(r.hdr.status, 0);
  EXPECT_EQ(wire::decode_port_info_record(
                std::span<const std::uint8_t>(r.data).first<wire::kPortInfoRecordBytes>())
                .port_info.m_key,
            o.sm.m_key);
  r = query(0, by_lid);
  ASSERT_EQ(r.hdr.status, 0);
  const wire::PortInfoRecord hidden = wire::decode_port_info_record(
      std::span<const std::uint8_t>(r.data).first<wire::kPortInfoRecordBytes>());
  EXPECT_EQ(hidden.port_info.m_key, 0u);
  EXPECT_EQ(hidden.port_info.lid, s.net->lid(from));  // the rest is there
  r = query(0, by_lid | (std::uint64_t{1} << 3));
  EXPECT_EQ(r.hdr.status, wire::mad_status(wire::SaStatus::kReqInvalid));
}

TEST(Sa, FatTreeTableAcrossWindowsWithLostSegmentsAndAcks) {
  Subnet s(*topo::from_spec("fat-tree:k=4"));
  int seg3 = 0, acks = 0;
  s.net->drop_filter = [&](topo::NodeId, std::span<const std::uint8_t> mad) {
    if (mad[1] != wire::kMgmtClassSa || !(mad[26] & wire::kRmppActive)) return false;
    const std::uint32_t seg = std::uint32_t{mad[28]} << 24 | mad[29] << 16 | mad[30] << 8 | mad[31];
    if (mad[25] == 1 && seg == 3 && seg3++ == 0) return true;  // DATA segment 3, once
    if (mad[25] == 2 && seg >= 1 && acks++ == 1) return true;  // the second ACK
    return false;
  };
  const cm::SaResult r = ask(s, s.hcas.back(), cm::node_query({}, 0));
  ASSERT_TRUE(r.ok());
  // 16 CA ports + 20 switches = 36 records (4 KB): 21 segments, more than one 16-segment window.
  EXPECT_EQ(cm::node_records(r).size(), 36u);
  EXPECT_GE(seg3, 2);
  EXPECT_GE(acks, 2);
  EXPECT_EQ(s.net->sa().stats().rmpp_done, 1u);
  EXPECT_GT(s.net->sa().stats().rmpp_segments, 21u);  // resends happened
  EXPECT_EQ(s.net->sa().transfers(), 0u);
}

// The RMPP engines alone: random loss in both directions, many seeds; every transfer completes
// with the exact bytes. A failure prints the seed that reproduces it.
TEST(Rmpp, RandomLossPropertyOverSeeds) {
  std::uint64_t resent = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    SeededRng rng(seed);
    const std::size_t len = rng.next_u64() % 6000;
    std::vector<std::uint8_t> data(len);
    for (auto& b : data) b = static_cast<std::uint8_t>(rng.next_u64());
    std::array<std::uint8_t, wire::kMadBytes> tmpl{};
    tmpl[0] = 1;
    tmpl[1] = wire::kMgmtClassSa;
    tmpl[2] = 2;
    tmpl[3] = static_cast<std::uint8_t>(wire::GmpMethod::kGetTableResp);
    cm::RmppConfig cfg;
    cfg.retries_max = 30;
    cfg.window_segments = 1 + rng.next_u64() % 8;
    TimeNs now = 0;
    cm::RmppSender tx(tmpl, data, cfg, now);
    cm::RmppReceiver rx(cfg);
    const double loss = 0.3;
    std::array<std::uint8_t, wire::kMadBytes> mad{}, ack{};
    for (int step = 0; step < 100000 && tx.outcome() == cm::RmppOutcome::kInProgress; ++step) {
      bool moved = false;
      while (tx.poll(now, mad)) {
        moved = true;
        if (static_cast<double>(rng.next_u64() % 1000) / 1000 < loss) continue;
        const auto h = wire::decode_rmpp(mad);
        ASSERT_TRUE(h.ok()) << "seed " << seed;
        if (rx.on_segment(mad, h.value())) {
          rx.ack(mad, ack);
          if (static_cast<double>(rng.next_u64() % 1000) / 1000 < loss) continue;
          tx.on_rmpp(wire::decode_rmpp(ack).value(), now);
        }
      }
      if (!moved) {
        now = std::max(now, tx.next_deadline());
        tx.on_deadline(now);
      }
    }
    ASSERT_EQ(tx.outcome(), cm::RmppOutcome::kDone) << "seed " << seed;
    ASSERT_EQ(rx.outcome(), cm::RmppOutcome::kDone) << "seed " << seed;
    ASSERT_EQ(rx.data(), data) << "seed " << seed;
    resent += tx.segments_sent() - tx.segments();
  }
  EXPECT_GT(resent, 300u);  // the loss was real: segments were resent
}

TEST(Rmpp, SenderGivesUpWithAbort) {
  std::array<std::uint8_t, wire::kMadBytes> tmpl{}, mad{};
  cm::RmppConfig cfg;
  cfg.retries_max = 2;
  cm::RmppSender tx(tmpl, std::vector<std::uint8_t>(1000, 7), cfg, 0);
  int sent = 0;
  TimeNs now = 0;
  for (int i = 0; i < 10 && tx.outcome() == cm::RmppOutcome::kInProgress; ++i) {
    while (tx.poll(now, mad)) sent++;
    now = tx.next_deadline();
    tx.on_deadline(now);
  }
  EXPECT_EQ(tx.outcome(), cm::RmppOutcome::kFailed);
  EXPECT_EQ(sent, 3);  // segment 1, then 2 resends; the window never opened
  ASSERT_TRUE(tx.poll(now, mad));
  EXPECT_EQ(wire::decode_rmpp(mad).value().type, wire::RmppType::kAbort);
  EXPECT_EQ(mad[27], static_cast<std::uint8_t>(wire::RmppStatus::kTooManyRetries));
}

}  // namespace
}  // namespace weft::sa
