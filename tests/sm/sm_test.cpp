// tests/sm/sm_test.cpp — the SubnetManager bringing up fabrics of emu/sma nodes through the
// DirectFabric driver. Every bring-up is checked by DirectFabric::verify(), which reads the
// nodes' own LIDs, port states and LFTs (not the SM's view), and by the SM's routes_valid().
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "emu/sm/direct_fabric.hpp"
#include "emu/sm/subnet_manager.hpp"
#include "emu/sma/sma.hpp"
#include "emu/topo/generators.hpp"
#include "emu/topo/spec.hpp"
#include "tests/sm/port_info_set.hpp"
#include "tests/sm/triangle.hpp"

namespace weft::sm {
namespace {

constexpr TimeNs kLimitNs = 60'000'000'000;  // virtual

topo::Topology must(topo::GenResult r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

topo::NodeId first_hca(const topo::Topology& t) {
  for (topo::NodeId i = 0; i < t.node_count(); ++i)
    if (!t.node(i).is_switch()) return i;
  return topo::kNoNode;
}

topo::Topology spec(const char* s) {
  auto t = topo::from_spec(s);
  EXPECT_TRUE(t.ok()) << s;
  return std::move(t).value();
}

struct Rig {
  DirectFabric fab;
  SubnetManager sm;
  Rig(const topo::Topology& t, SmConfig c, DirectConfig d = {}) : fab(t, d), sm(std::move(c)) {
    fab.attach(sm, first_hca(t), 1);
  }
};

SmConfig config(routing::Engine e) {
  SmConfig c;
  c.routing.engine = e;
  return c;
}

void expect_up(SubnetManager& sm, DirectFabric& fab, const char* what) {
  ASSERT_TRUE(fab.run_until_up(kLimitNs))
      << what << ": phase " << to_string(sm.phase()) << " " << sm.last_error();
  EXPECT_TRUE(sm.routes_valid()) << what << ": "
                                 << (sm.last_heavy().check.problems.empty()
                                         ? std::string()
                                         : sm.last_heavy().check.problems[0]);
  const VerifyReport v = fab.verify();
  EXPECT_TRUE(v.ok()) << what << ": " << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_EQ(v.ports_not_active, 0u) << what;
  EXPECT_EQ(v.unreachable_pairs, 0u) << what;
  EXPECT_EQ(v.loops, 0u) << what;
  EXPECT_GT(v.hca_pairs, 0u) << what;
}

void expect_up(Rig& r, const char* what) {
  expect_up(r.sm, r.fab, what);
}

std::map<std::uint64_t, std::uint16_t> lids_of(const DirectFabric& f) {
  std::map<std::uint64_t, std::uint16_t> m;
  for (const auto& n : f.nodes())
    for (std::size_t p = n.is_switch() ? 0 : 1; p < (n.is_switch() ? 1 : n.ports.size()); ++p)
      m[n.ports[p].port_guid] = n.ports[p].lid;
  return m;
}

// Two 4-port switches, two HCAs on each, one inter-switch link; port 4 of each switch is free.
topo::Topology two_switches() {
  topo::Topology t;
  const auto s1 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 0), 4, "s1");
  const auto s2 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 1), 4, "s2");
  for (int h = 0; h < 4; ++h) {
    const auto n = t.add_hca(topo::make_guid(topo::NodeKind::kHca, h), 1, "h" + std::to_string(h));
    t.connect({h < 2 ? s1 : s2, h % 2 + 1}, {n, 1});
  }
  t.connect({s1, 3}, {s2, 3});
  return t;
}

// Expected SMPs for two_switches(), the SM on h0 (first HCA), no loss:
//   discovery 28 = h0 (NodeInfo hop 0, NodeDescription, PortInfo) 3
//                + per switch: NodeInfo probe 1, NodeDescription 1, SwitchInfo 1, PortInfo
//                  ports 0..4 5 = 8, x2 = 16
//                + per other HCA: NodeInfo probe, NodeDescription, PortInfo = 3, x3 = 9
//                (the port a node was reached by is never probed back; port 4 is down)
//   LID assignment 12 = one PortInfo Set (LID/SMLID/MTU/Armed) per live port: 4 HCA ports,
//                  switch ports 0..3 twice
//   LFT programming 4 = per switch SwitchInfo Set (LinearFDBTop, PortStateChange) + one LFT
//                  block (6 LIDs, top 6 < 64)
//   activation 14 = PortInfo Set Active per live port 12, and PortInfo Get of each switch's
//                  port 4 (read Down; read again once PortStateChange is cleared) 2.
TEST(SubnetManager, ExactMadCountsTwoSwitches) {
  for (int variant = 0; variant < 3; ++variant) {
    // minhop and updn; the last one sends every SMP directed-route (same counts).
    SmConfig c = config(variant == 1 ? routing::Engine::kUpDn : routing::Engine::kMinHop);
    c.lid_routed_when_live = variant != 2;
    Rig r(two_switches(), c);
    expect_up(r, "two switches");
    const SweepReport& s = r.sm.last_heavy();
    EXPECT_EQ(s.of(Phase::kDiscovery).mads_sent, 28u);
    EXPECT_EQ(s.of(Phase::kLidAssignment).mads_sent, 12u);
    EXPECT_EQ(s.of(Phase::kRouting).mads_sent, 0u);
    EXPECT_EQ(s.of(Phase::kLftProgramming).mads_sent, 4u);
    EXPECT_EQ(s.of(Phase::kActivation).mads_sent, 14u);
    EXPECT_EQ(s.total.mads_sent, 58u);
    EXPECT_EQ(s.total.responses, 58u);
    EXPECT_EQ(s.ports_rechecked, 2u);
    EXPECT_EQ(s.ports_left_inactive, 0u);
    EXPECT_EQ(s.total.mads_retried, 0u);
    EXPECT_EQ(s.total.error_status, 0u);
    EXPECT_EQ(s.switches, 2u);
    EXPECT_EQ(s.hcas, 4u);
    EXPECT_EQ(s.links, 5u);
    EXPECT_EQ(r.sm.sm_lid(), r.fab.nodes()[2].ports[1].lid);
    EXPECT_GT(s.end_ns, s.start_ns);
    // A light sweep finds nothing: 2 SwitchInfo Gets and no heavy sweep.
    r.fab.run(r.fab.now() + 11'000'000'000);
    EXPECT_EQ(r.sm.light_sweeps(), 1u);
    EXPECT_EQ(r.sm.heavy_sweeps(), 1u);
    EXPECT_EQ(r.sm.last_light().total.mads_sent, 2u);
  }
}

TEST(SubnetManager, FatTreeK4AllEngines) {
  const topo::Topology t = spec("fat-tree:k=4");
  for (routing::Engine e :
       {routing::Engine::kFtree, routing::Engine::kMinHop, routing::Engine::kUpDn}) {
    Rig r(t, config(e));
    expect_up(r, routing::to_string(e));
    EXPECT_EQ(r.sm.last_heavy().hcas, 16u);
    EXPECT_EQ(r.sm.last_heavy().switches, 20u);
  }
}

TEST(SubnetManager, FatTreeK8Ftree) {
  Rig r(spec("fat-tree:k=8"), config(routing::Engine::kFtree));
  expect_up(r, "k=8");
  EXPECT_EQ(r.sm.last_heavy().hcas, 128u);
  EXPECT_EQ(r.sm.last_heavy().switches, 80u);
}

TEST(SubnetManager, TwoLevel648) {
  for (routing::Engine e : {routing::Engine::kFtree, routing::Engine::kMinHop}) {
    Rig r(must(topo::fat_tree_2({})), config(e));
    expect_up(r, routing::to_string(e));
    EXPECT_EQ(r.sm.last_heavy().hcas, 648u);
    EXPECT_EQ(r.sm.last_heavy().switches, 54u);
  }
}

TEST(SubnetManager, RailCluster) {
  for (routing::Engine e : {routing::Engine::kUpDn, routing::Engine::kMinHop}) {
    Rig r(must(topo::rail({})), config(e));
    expect_up(r, routing::to_string(e));
    EXPECT_EQ(r.sm.last_heavy().hcas, 32u);
  }
}

TEST(SubnetManager, Torus4x4x4Dor) {
  Rig r(spec("torus:dims=4x4x4,hosts=1"), config(routing::Engine::kDor));
  expect_up(r, "dor");
  const routing::Routes& rt = r.sm.routes();
  EXPECT_GT(rt.vls, 1);
  EXPECT_TRUE(r.sm.last_heavy().check.cdg_checked);
  EXPECT_FALSE(r.sm.last_heavy().check.credit_loop);
  // The SLtoVL tables on the switches are the engine's, as programmed over SMPs.
  std::size_t checked = 0;
  for (std::uint32_t s = 0; s < rt.switches.size(); ++s) {
    // The SM numbers nodes in discovery order; the topology by GUID.
    const auto id = r.fab.topology().find_guid(r.sm.fabric().nodes[rt.switches[s]].guid);
    ASSERT_TRUE(id.has_value());
    const auto& n = r.fab.nodes()[*id];
    const int np = n.num_ports + 1;
    for (int out = 1; out < np; ++out)
      for (int in = 0; in < np; ++in)
        for (int sl = 0; sl < 16; ++sl) {
          ASSERT_EQ(n.ports[out].sl2vl[in][sl], rt.vl(s, n.num_ports, in, out, sl))
              << n.description << " in " << in << " out " << out << " sl " << sl;
          ++checked;
        }
    EXPECT_EQ(n.ports[1 + 1].vl_arb_low[1].vl, 1);
  }
  EXPECT_GT(checked, 0u);
}

TEST(SubnetManager, LidsStableAcrossResweep) {
  Rig r(spec("fat-tree:k=4"), config(routing::Engine::kFtree));
  expect_up(r, "first");
  const auto before = lids_of(r.fab);
  // A switch reports PortStateChange: the light sweep sees it and a heavy sweep follows.
  std::size_t sw = 0;
  while (!r.fab.nodes()[sw].is_switch()) ++sw;
  r.fab.nodes()[sw].sw.port_state_change = true;
  r.fab.run(r.fab.now() + 10'500'000'000);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(lids_of(r.fab), before);
  const SweepReport& s = r.sm.last_heavy();
  EXPECT_EQ(s.lft_blocks_sent, 0u);  // nothing changed, nothing rewritten
  EXPECT_EQ(s.ports_set, 0u);
  EXPECT_EQ(s.ports_activated, 0u);
  EXPECT_EQ(s.of(Phase::kLftProgramming).mads_sent, 1u);  // SwitchInfo clearing the flag
  expect_up(r, "second");
}

TEST(SubnetManager, LinkDownTrapReroutes) {
  const topo::Topology t = spec("fat-tree:k=4");
  Rig r(t, config(routing::Engine::kFtree));
  expect_up(r, "before");
  const auto before = lids_of(r.fab);
  // A core link of pod 1 (the SM sits in pod 0): agg <-> core.
  topo::LinkId victim = topo::kNoLink;
  for (topo::LinkId l = 0; l < t.link_count(); ++l) {
    const auto& L = t.link(l);
    const auto& a = t.node(L.a.node);
    const auto& b = t.node(L.b.node);
    if (a.is_switch() && b.is_switch() &&
        (a.description.find("core") != std::string::npos ||
         b.description.find("core") != std::string::npos) &&
        (a.description.rfind("p01", 0) == 0 || b.description.rfind("p01", 0) == 0)) {
      victim = l;
      break;
    }
  }
  ASSERT_NE(victim, topo::kNoLink);
  const std::uint32_t heavy = r.sm.heavy_sweeps();
  r.fab.set_link(victim, false);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_GE(r.sm.traps_received(), 1u);
  EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 1);  // re-routed within one sweep
  EXPECT_EQ(r.sm.light_sweeps(), 0u);         // by the trap, not the light sweep
  const SweepReport& s = r.sm.last_heavy();
  EXPECT_GT(s.lft_blocks_sent, 0u);
  EXPECT_GT(s.lft_blocks_unchanged, 0u);  // only the blocks that changed
  EXPECT_EQ(lids_of(r.fab), before);
  expect_up(r, "after");
  // No LFT entry points at either end of the dead link.
  const auto& L = t.link(victim);
  for (const topo::PortRef& e : {L.a, L.b}) {
    const auto& n = r.fab.nodes()[e.node];
    for (std::size_t lid = 1; lid <= n.sw.linear_fdb_top; ++lid)
      ASSERT_NE(n.lft[lid], e.port) << n.description << " LID " << lid;
  }
  // The link comes back: ports are brought to Active again.
  r.fab.set_link(victim, true);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 2);
  EXPECT_EQ(r.sm.last_heavy().ports_activated, 2u);
  expect_up(r, "restored");
}

TEST(SubnetManager, LightSweepFindsALinkDownWithoutTrap) {
  const topo::Topology t = spec("fat-tree:k=4");
  Rig r(t, config(routing::Engine::kFtree));
  expect_up(r, "before");
  // A leaf-agg link in pod 2 fails and its traps are lost: only PortStateChange tells.
  topo::LinkId victim = topo::kNoLink;
  for (topo::LinkId l = 0; l < t.link_count() && victim == topo::kNoLink; ++l) {
    const auto& L = t.link(l);
    if (t.node(L.a.node).is_switch() && t.node(L.b.node).is_switch() &&
        t.node(L.a.node).description.rfind("p02leaf", 0) == 0)
      victim = l;
  }
  ASSERT_NE(victim, topo::kNoLink);
  const auto& L = t.link(victim);
  sma::link_down(r.fab.nodes()[L.a.node], static_cast<std::uint8_t>(L.a.port));
  sma::link_down(r.fab.nodes()[L.b.node], static_cast<std::uint8_t>(L.b.port));
  r.fab.run(r.fab.now() + 10'500'000'000);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.light_sweeps(), 1u);
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(r.sm.traps_received(), 0u);
  expect_up(r, "after");
}

using test_util::triangle;

// The cross-host failure (issue 7 section 5: spine002/2 left in Init behind a tunnel while its
// peer was Active), made deterministic. A link trains while the first heavy sweep runs: after the
// SM has read one end (s2/3, Down) and before it reaches the other (s3/3, which it then finds
// up, so the probe through it records the link). Neither switch knows the SM's LID yet, so
// neither sends a trap, and the SwitchInfo Set of LFT programming clears PortStateChange. The
// SM must still bring both ends to Active.
struct LateLink {
  static constexpr topo::LinkId kLink = 5;
  DirectFabric fab;
  SubnetManager sm;
  explicit LateLink(SmConfig c) : fab(triangle()), sm(std::move(c)) {
    fab.set_link(kLink, false);         // no SM LID anywhere: no trap
    fab.set_port_blackout(2, 2, true);  // s3 out of reach until the link has trained
    fab.attach(sm, 3, 1);
    fab.run(400'000);  // s1, s2 and the HCAs read; s3's probe awaits a retry
    EXPECT_EQ(fab.nodes()[1].ports[3].state, sma::LinkState::kDown);
    EXPECT_EQ(sm.phase(), Phase::kDiscovery);
    fab.set_link(kLink, true);  // Init at both ends, PortStateChange set on s2 and s3
    fab.set_port_blackout(2, 2, false);
    EXPECT_EQ(fab.stats().traps_sent, 0u);
    EXPECT_TRUE(fab.run(kLimitNs, [this] { return sm.heavy_sweeps() >= 1; }));
    // The SM found the link (through s3/3) but read s2/3 Down: it could not activate it.
    EXPECT_EQ(sm.last_heavy().links, 6u);
    EXPECT_EQ(sm.last_heavy().ports_left_inactive, 1u);
    EXPECT_EQ(fab.nodes()[1].ports[3].state, sma::LinkState::kInit);
    EXPECT_EQ(fab.nodes()[2].ports[3].state, sma::LinkState::kActive);
    EXPECT_FALSE(fab.nodes()[1].sw.port_state_change);  // cleared by LFT programming
  }
};

// Activation reads s2/3 again (discovery read it Down; PortStateChange is cleared by then),
// finds it trained, and a second heavy sweep follows at once: it arms and activates the port.
// No trap, no light sweep.
TEST(SubnetManager, PortThatTrainedDuringTheSweepIsActivatedByTheNextHeavySweep) {
  LateLink r(config(routing::Engine::kMinHop));
  // s1/4, s2/4, s3/4 (free) and s2/3 read again.
  EXPECT_EQ(r.sm.last_heavy().ports_rechecked, 4u);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(r.sm.light_sweeps(), 0u);
  EXPECT_EQ(r.sm.last_heavy().ports_left_inactive, 0u);
  EXPECT_EQ(r.sm.last_heavy().ports_activated, 1u);  // s2/3
  EXPECT_EQ(r.sm.last_heavy().ports_rechecked, 3u);  // the free ports
  EXPECT_EQ(r.fab.nodes()[1].ports[3].state, sma::LinkState::kActive);
  EXPECT_EQ(r.sm.traps_received(), 0u);
  EXPECT_EQ(r.fab.stats().traps_sent, 0u);
  expect_up(r.sm, r.fab, "late link");
  // Settled: the light sweep finds nothing.
  r.fab.run(r.fab.now() + 10'500'000'000);
  EXPECT_EQ(r.sm.light_sweeps(), 1u);
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(r.sm.last_light().total.mads_sent, 3u);
}

// Without that second look (recheck_down_ports off: the SM as it was when the cross-host test
// failed) the first sweep ends with s2/3 in Init, no trap and PortStateChange cleared. The
// periodic light sweep still reads the ports a heavy sweep left short of Active, finds s2/3
// trained, and a heavy sweep re-drives it to Active (as OpenSM's light sweep looks again at
// ports it could not account for).
TEST(SubnetManager, LightSweepReadsPortsLeftShortOfActive) {
  SmConfig c = config(routing::Engine::kMinHop);
  c.recheck_down_ports = false;
  LateLink r(c);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.heavy_sweeps(), 1u);
  EXPECT_EQ(r.fab.nodes()[1].ports[3].state, sma::LinkState::kInit);
  r.fab.run(r.fab.now() + 10'500'000'000);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.light_sweeps(), 1u);
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  // 3 SwitchInfo Gets and the PortInfo Get of s2/3.
  EXPECT_EQ(r.sm.last_light().total.mads_sent, 4u);
  EXPECT_EQ(r.fab.nodes()[1].ports[3].state, sma::LinkState::kActive);
  EXPECT_EQ(r.sm.traps_received(), 0u);
  expect_up(r.sm, r.fab, "late link, no second look");
}

// A far port's activation Set is lost (everything arriving at s3 from s1 is, for less than one
// timeout): the SM sends it again after timeout_ns and every port ends Active in one sweep.
TEST(SubnetManager, LostActivationSetToAFarPortIsRetried) {
  DirectFabric fab(triangle());
  SubnetManager sm(config(routing::Engine::kMinHop));
  fab.attach(sm, 3, 1);
  ASSERT_TRUE(fab.run(kLimitNs, [&] { return sm.phase() == Phase::kActivation; }));
  fab.set_port_blackout(2, 2, true);
  fab.run(fab.now() + 500'000);
  const std::uint64_t dropped = fab.stats().dropped_blackout;
  EXPECT_GT(dropped, 0u);
  EXPECT_NE(fab.nodes()[2].ports[1].state, sma::LinkState::kActive);
  fab.set_port_blackout(2, 2, false);
  expect_up(sm, fab, "activation Set lost");
  EXPECT_EQ(sm.heavy_sweeps(), 1u);
  EXPECT_EQ(sm.last_heavy().of(Phase::kActivation).mads_retried, dropped);
  EXPECT_EQ(sm.last_heavy().total.mads_lost, 0u);
  EXPECT_EQ(sm.last_heavy().ports_left_inactive, 0u);
}

// ---- ports that never become Active: the activation back-off (README "Ports that never become
// Active") and the forced heavy sweep ------------------------------------------------------------

constexpr topo::NodeId kH3 = 5;  // two_switches(): h3 on s2 (node 1) port 2
constexpr topo::LinkId kH3Link = 3;

// A half-configured peer the SM cannot fix, two ways: h3's port holds an M_Key the SM does not
// know (protect bits 1: Gets are answered, every Set is dropped, 14.2.4.1), or h3's port
// reports MTUCap and NeighborMTU 0 (every PortInfo Set is refused, Invalid Field). Either way
// h3/1 stays in Init while s2/2 is Active, and every attempt fails.
enum class Fault { kForeignMKey, kSetRefused };
const char* to_cstr(Fault f) {
  return f == Fault::kForeignMKey ? "foreign M_Key" : "Set refused";
}

void set_fault(DirectFabric& fab, Fault f, bool on) {
  sma::PortState& p = fab.nodes()[kH3].ports[1];
  if (f == Fault::kForeignMKey) {
    p.m_key = on ? 0x5EC2E7ull : 0;
    p.m_key_protect_bits = on ? 1 : 0;
  } else {
    p.mtu_cap = on ? 0 : sma::kMtu4096;
    p.neighbor_mtu = on ? 0 : sma::kMtu4096;
  }
}

struct Stuck {
  std::vector<StuckPort> reports;
  DirectFabric fab;
  SubnetManager sm;
  std::uint32_t heavy_at_up = 0;
  Stuck(Fault f, SmConfig c) : fab(two_switches()), sm(with_hook(std::move(c), reports)) {
    set_fault(fab, f, true);
    fab.attach(sm, 2, 1);
    EXPECT_TRUE(fab.run_until_up(kLimitNs)) << to_cstr(f);
    heavy_at_up = sm.heavy_sweeps();
    EXPECT_EQ(fab.nodes()[kH3].ports[1].state, sma::LinkState::kInit) << to_cstr(f);
    EXPECT_EQ(fab.nodes()[1].ports[2].state, sma::LinkState::kActive) << to_cstr(f);
    EXPECT_EQ(sm.last_heavy().ports_left_inactive, 1u) << to_cstr(f);
  }
  static SmConfig with_hook(SmConfig c, std::vector<StuckPort>& out) {
    c.on_port_stuck = [&out](const StuckPort& p, TimeNs) { out.push_back(p); };
    return c;
  }
  // Runs n more light sweeps (each 10 s apart) and whatever they start.
  void light_sweeps(std::uint32_t n) {
    const std::uint32_t want = sm.light_sweeps() + n;
    fab.run(kLimitNs * 1000, [&] { return sm.light_sweeps() >= want && sm.settled(); });
  }
};

// The bring-up's own attempts: one heavy sweep, then sweeps_incomplete_max (4) more for the
// lost or refused Sets. Then over 100 light sweeps a port retried after 1, 2, 4, ... 32 light
// sweeps costs 7 heavy sweeps (light sweeps 1, 3, 7, 15, 31, 63, 95); without the back-off
// (activation_retry_light_sweeps_max 1, what OpenSM does) every light sweep starts one: 100.
TEST(SubnetManager, NeverActivatablePortCostsABoundedNumberOfHeavySweeps) {
  for (const Fault f : {Fault::kForeignMKey, Fault::kSetRefused}) {
    std::uint64_t mads[2] = {0, 0};
    for (const std::uint32_t cap : {32u, 1u}) {
      SmConfig c = config(routing::Engine::kMinHop);
      c.activation_retry_light_sweeps_max = cap;
      Stuck r(f, c);
      EXPECT_EQ(r.heavy_at_up, 5u) << to_cstr(f);
      const std::uint64_t mads_at_up = r.sm.totals().mads_sent;
      r.light_sweeps(100);
      EXPECT_EQ(r.sm.light_sweeps(), 100u);
      EXPECT_EQ(r.sm.heavy_sweeps() - r.heavy_at_up, cap == 1 ? 100u : 7u) << to_cstr(f);
      EXPECT_EQ(r.fab.nodes()[kH3].ports[1].state, sma::LinkState::kInit);
      EXPECT_EQ(r.sm.ports_stuck(), 1u);
      EXPECT_EQ(r.sm.last_heavy().ports_stuck, 1u);
      mads[cap == 1] = r.sm.totals().mads_sent - mads_at_up;
      // Reported once, naming the port, however many attempts followed.
      ASSERT_EQ(r.reports.size(), 1u) << to_cstr(f);
      EXPECT_EQ(r.sm.stuck_reports(), 1u);
      const StuckPort& p = r.reports[0];
      EXPECT_EQ(p.node_guid, r.fab.nodes()[kH3].node_guid);
      EXPECT_EQ(p.node_desc, "h3");
      EXPECT_EQ(p.port, 1);
      EXPECT_EQ(p.state, wire::PortState::kInit);
      EXPECT_EQ(p.phys_state, 5);  // LinkUp
      EXPECT_EQ(p.attempts, kStuckAfterAttempts);
      const auto now = r.sm.stuck_ports();
      ASSERT_EQ(now.size(), 1u);
      EXPECT_EQ(now[0].attempts, cap == 1 ? 101u : 8u);  // the bring-up's sweeps are one attempt
      EXPECT_EQ(now[0].retry_light_sweeps, cap);
    }
    // A light sweep is 2 SwitchInfo Gets (+1 PortInfo Get when the port is due); a failed heavy
    // sweep of this fabric is 31 SMPs (Sets refused) or 39 (Sets dropped, then resent).
    EXPECT_LT(mads[0] * 5, mads[1]) << to_cstr(f) << ": " << mads[0] << " vs " << mads[1];
    std::printf("%s: SMPs over 100 light sweeps: %llu with the back-off, %llu without\n",
                to_cstr(f), static_cast<unsigned long long>(mads[0]),
                static_cast<unsigned long long>(mads[1]));
  }
}

// Guard: a peer that never answers SMPs at all (every SMP arriving at h3/1 is lost) is never
// found, so its link is not one the SM could activate: light sweeps read nothing for it and
// start no heavy sweep (the bring-up's lost probes are repeated sweeps_incomplete_max times).
TEST(SubnetManager, PeerThatNeverAnswersCostsNoLightSweepHeavySweeps) {
  DirectFabric fab(two_switches());
  fab.set_port_blackout(kH3, 1, true);
  SubnetManager sm(config(routing::Engine::kMinHop));
  fab.attach(sm, 2, 1);
  ASSERT_TRUE(fab.run_until_up(kLimitNs));
  EXPECT_EQ(sm.heavy_sweeps(), 5u);
  EXPECT_EQ(sm.last_heavy().hcas, 3u);
  fab.run(fab.now() + 1'000'500'000'000);  // 100 light sweeps
  EXPECT_EQ(sm.light_sweeps(), 100u);
  EXPECT_EQ(sm.heavy_sweeps(), 5u);
  EXPECT_EQ(sm.last_light().total.mads_sent, 2u);
  EXPECT_EQ(sm.ports_stuck(), 0u);
}

// A real change resets the back-off: a trap 128 from the port's switch (its link bounced), or
// PortStateChange on it. Once the fault is gone, the trap's heavy sweep activates the port at
// once (no waiting for the back-off), and the port leaves the stuck list.
TEST(SubnetManager, ActivationBackoffResetsOnARealChange) {
  for (const Fault f : {Fault::kForeignMKey, Fault::kSetRefused}) {
    Stuck r(f, config(routing::Engine::kMinHop));
    r.light_sweeps(40);  // attempts at light sweeps 1, 3, 7, 15, 31; the next is due at 63
    EXPECT_EQ(r.sm.heavy_sweeps() - r.heavy_at_up, 5u);
    ASSERT_EQ(r.sm.stuck_ports().size(), 1u);
    EXPECT_EQ(r.sm.stuck_ports()[0].retry_light_sweeps, 32u);
    EXPECT_EQ(r.sm.last_light().ports_backed_off, 1u);

    // The link bounces, the fault still there: s2's traps start a heavy sweep (which fails);
    // the failure count started over, so the next light sweep reads the port again.
    std::uint32_t heavy = r.sm.heavy_sweeps();
    const std::uint64_t traps = r.sm.traps_received();
    r.fab.set_link(kH3Link, false);
    r.fab.set_link(kH3Link, true);
    ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
    EXPECT_GT(r.sm.traps_received(), traps);
    EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 1) << to_cstr(f);
    ASSERT_EQ(r.sm.stuck_ports().size(), 1u);       // still short of Active since its report...
    EXPECT_EQ(r.sm.stuck_ports()[0].attempts, 1u);  // ...but its count started over
    EXPECT_EQ(r.sm.stuck_ports()[0].retry_light_sweeps, 1u);
    r.light_sweeps(1);
    EXPECT_EQ(r.sm.last_light().ports_backed_off, 0u);
    EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 2) << to_cstr(f);
    EXPECT_EQ(r.sm.stuck_reports(), 1u);  // still the same stuck episode: not reported again

    // PortStateChange on s2 (its trap lost) resets it too.
    r.light_sweeps(2);  // attempts 1, 2 after the reset; the next is due 4 light sweeps on
    heavy = r.sm.heavy_sweeps();
    r.fab.nodes()[1].sw.port_state_change = true;
    r.light_sweeps(1);
    EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 1) << to_cstr(f);  // by the flag
    r.light_sweeps(1);
    EXPECT_EQ(r.sm.last_light().ports_backed_off, 0u) << to_cstr(f);
    EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 2) << to_cstr(f);  // the port read again

    // The fault is fixed and the cable re-seated: activated by the trap's heavy sweep.
    r.light_sweeps(20);
    ASSERT_EQ(r.sm.ports_stuck(), 1u);
    const std::uint32_t lights = r.sm.light_sweeps();
    heavy = r.sm.heavy_sweeps();
    set_fault(r.fab, f, false);
    const TimeNs t0 = r.fab.now();
    r.fab.set_link(kH3Link, false);
    r.fab.set_link(kH3Link, true);
    ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
    EXPECT_EQ(r.fab.nodes()[kH3].ports[1].state, sma::LinkState::kActive) << to_cstr(f);
    EXPECT_LT(r.fab.now() - t0, 1'000'000) << to_cstr(f);  // virtual: trap hold-off + one sweep
    EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 1);
    EXPECT_EQ(r.sm.light_sweeps(), lights);
    EXPECT_EQ(r.sm.ports_stuck(), 0u);
    EXPECT_TRUE(r.sm.stuck_ports().empty());
    EXPECT_EQ(r.sm.last_heavy().ports_left_inactive, 0u);
    expect_up(r.sm, r.fab, to_cstr(f));
  }
}

// A fault fixed with no visible change (the foreign M_Key cleared): nothing tells the SM, so
// the port is activated by the retry the back-off has due next (here light sweep 63), not later.
TEST(SubnetManager, SilentFixIsFoundByTheNextRetry) {
  Stuck r(Fault::kForeignMKey, config(routing::Engine::kMinHop));
  r.light_sweeps(40);
  set_fault(r.fab, Fault::kForeignMKey, false);
  const std::uint32_t heavy = r.sm.heavy_sweeps();
  r.light_sweeps(22);  // light sweep 62: still backed off
  EXPECT_EQ(r.sm.heavy_sweeps(), heavy);
  EXPECT_EQ(r.fab.nodes()[kH3].ports[1].state, sma::LinkState::kInit);
  r.light_sweeps(1);  // 63
  EXPECT_EQ(r.sm.heavy_sweeps(), heavy + 1);
  EXPECT_EQ(r.fab.nodes()[kH3].ports[1].state, sma::LinkState::kActive);
  EXPECT_EQ(r.sm.ports_stuck(), 0u);
  expect_up(r.sm, r.fab, "silent fix");
}

// A port that drops to Init with neither PortStateChange nor a trap (which the IBA rules out,
// 14.2.5.4, but a buggy SMA or a reset behind the SM's back can do) is invisible to light
// sweeps. The forced heavy sweep (off by default) finds and re-activates it.
TEST(SubnetManager, ForcedHeavySweepRepairsASilentlyRevertedPort) {
  for (const bool forced : {false, true}) {
    SmConfig c = config(routing::Engine::kMinHop);
    if (forced) c.forced_heavy_interval_ns = 60'000'000'000;  // 60 s: every 6th sweep
    Rig r(two_switches(), c);
    expect_up(r, "before");
    sma::PortState& p = r.fab.nodes()[1].ports[1];  // s2/1, facing h2
    p.state = sma::LinkState::kInit;
    EXPECT_FALSE(r.fab.nodes()[1].sw.port_state_change);
    r.fab.run(r.fab.now() + 59'000'000'000);
    EXPECT_EQ(p.state, sma::LinkState::kInit);  // nothing has looked yet
    EXPECT_EQ(r.sm.heavy_sweeps(), 1u);
    r.fab.run(r.fab.now() + 2'000'000'000);
    EXPECT_EQ(p.state, forced ? sma::LinkState::kActive : sma::LinkState::kInit) << forced;
    EXPECT_EQ(r.sm.heavy_sweeps(), forced ? 2u : 1u);
    EXPECT_EQ(r.sm.forced_heavy_sweeps(), forced ? 1u : 0u);
    if (forced) {
      EXPECT_TRUE(r.sm.last_heavy().forced);
      EXPECT_EQ(r.sm.last_heavy().ports_activated, 1u);
      EXPECT_EQ(r.sm.last_heavy().lft_blocks_sent, 0u);  // nothing else rewritten
      expect_up(r, "repaired");
    }
    // Over 1,000 s: a heavy sweep every 60 s (16) when on, none when off; light sweeps between.
    r.fab.run(1'000'000'000'000);  // virtual time 1,000 s
    EXPECT_EQ(r.sm.forced_heavy_sweeps(), forced ? 16u : 0u);
    EXPECT_EQ(r.sm.heavy_sweeps(), forced ? 17u : 1u);
    EXPECT_GE(r.sm.light_sweeps(), forced ? 80u : 99u);
    EXPECT_EQ(p.state, forced ? sma::LinkState::kActive : sma::LinkState::kInit);
  }
}

TEST(SubnetManager, SmpLossConverges) {
  for (std::uint64_t seed : {1, 2, 3}) {
    DirectConfig d;
    d.loss = 0.05;  // per link traversal
    d.seed = seed;
    SmConfig c = config(routing::Engine::kFtree);
    c.timeout_ns = 100'000;
    Rig r(spec("fat-tree:k=4"), c, d);
    expect_up(r, ("seed " + std::to_string(seed)).c_str());
    EXPECT_GT(r.sm.totals().mads_retried, 0u) << "seed " << seed;
    EXPECT_GT(r.fab.stats().dropped_loss, 0u) << "seed " << seed;
  }
}

// Property: under 10 % loss per link traversal, every seed converges to a verified fabric and
// the same LIDs as a loss-free run (LIDs depend on GUIDs only).
TEST(SubnetManager, LossySeedsConvergeToTheSameLids) {
  const topo::Topology t = spec("leaf-spine:leaves=4,spines=2,hosts=4");
  Rig clean(t, config(routing::Engine::kUpDn));
  expect_up(clean, "clean");
  const auto want = lids_of(clean.fab);
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    DirectConfig d;
    d.loss = 0.10;
    d.seed = seed;
    SmConfig c = config(routing::Engine::kUpDn);
    c.timeout_ns = 50'000;
    c.retries_max = 10;
    Rig r(t, c, d);
    expect_up(r, ("SEED=" + std::to_string(seed)).c_str());
    EXPECT_EQ(lids_of(r.fab), want) << "SEED=" << seed;
  }
}

TEST(SubnetManager, MtuAndRateAreTheMinOfBothEnds) {
  const topo::Topology t = two_switches();
  DirectFabric fab(t);
  // h1 (node 3) can do 2048-byte MTU and 1x only.
  fab.nodes()[3].ports[1].mtu_cap = sma::kMtu2048;
  fab.nodes()[3].ports[1].link_width_supported = sma::kWidth1x;
  SubnetManager sm(config(routing::Engine::kMinHop));
  fab.attach(sm, 2, 1);
  ASSERT_TRUE(fab.run_until_up(kLimitNs));
  EXPECT_EQ(fab.nodes()[3].ports[1].neighbor_mtu, sma::kMtu2048);
  EXPECT_EQ(fab.nodes()[0].ports[2].neighbor_mtu, sma::kMtu2048);  // s1 port 2 faces h1
  EXPECT_EQ(fab.nodes()[0].ports[2].link_width_enabled, sma::kWidth1x);
  EXPECT_EQ(fab.nodes()[0].ports[1].neighbor_mtu, sma::kMtu4096);
  EXPECT_EQ(fab.nodes()[0].ports[1].link_width_enabled, sma::kWidth4x);
  EXPECT_TRUE(fab.verify().ok());
}

TEST(SubnetManager, LmcGivesEveryHcaPortARange) {
  SmConfig c = config(routing::Engine::kMinHop);
  c.lmc = 2;
  Rig r(spec("fat-tree:k=4"), c);
  expect_up(r, "lmc 2");
  for (const auto& n : r.fab.nodes())
    if (!n.is_switch()) {
      EXPECT_EQ(n.ports[1].lmc, 2);
      EXPECT_EQ(n.ports[1].lid % 4, 0);
    }
  EXPECT_EQ(r.fab.verify().hca_lids, 64u);
}

TEST(SubnetManager, DualPortHcasOnTwoSwitches) {
  // Two switches joined by one link; the SM's HCA and h1 have a port on each switch.
  topo::Topology t;
  const auto sm_hca = t.add_hca(topo::make_guid(topo::NodeKind::kHca, 0), 2, "smhca");
  const auto h1 = t.add_hca(topo::make_guid(topo::NodeKind::kHca, 1), 2, "h1");
  const auto s1 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 0), 4, "s1");
  const auto s2 = t.add_switch(topo::make_guid(topo::NodeKind::kSwitch, 1), 4, "s2");
  t.connect({sm_hca, 1}, {s1, 1});
  t.connect({sm_hca, 2}, {s2, 1});
  t.connect({h1, 1}, {s1, 2});
  t.connect({h1, 2}, {s2, 2});
  t.connect({s1, 3}, {s2, 3});
  Rig r(t, config(routing::Engine::kMinHop));
  expect_up(r, "dual port");
  EXPECT_EQ(r.sm.last_heavy().hcas, 2u);
  EXPECT_EQ(r.sm.last_heavy().links, 5u);
  EXPECT_EQ(r.fab.verify().hca_lids, 4u);  // every HCA port has its own LID
}

TEST(SubnetManager, FtreeRefusesATorus) {
  Rig r(spec("torus:dims=3x3,hosts=1"), config(routing::Engine::kFtree));
  EXPECT_FALSE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.phase(), Phase::kFailed);
  EXPECT_FALSE(r.sm.last_error().empty());
}

// ---- DirectFabric: trap repetition and PortInfo Sets that move links (as emu/fabric) ----------

// IBA 13.4.9: a trap 128 lost on its way is sent again, same TID, every 4.096 us x
// 2^SubnetTimeOut until the SM's TrapRepress; then the repeats stop.
TEST(DirectFabric, LostTrapIsRepeatedUntilRepressed) {
  const topo::Topology t = two_switches();  // 0 s1, 1 s2, 2..5 h0..h3; the SM on h0 (node 2)
  SmConfig c = config(routing::Engine::kMinHop);
  c.subnet_timeout = 10;  // 4,194,304 ns between repeats
  Rig r(t, c);
  expect_up(r, "two switches");
  const sma::NodeState& s2 = r.fab.nodes()[1];
  EXPECT_EQ(s2.ports[0].subnet_timeout, 10);
  EXPECT_FALSE(s2.trap.active);
  // Everything reaching the SM's port is lost for 2 ms; h3's link (s2 port 2) fails now.
  r.fab.set_port_blackout(2, 1, true);
  const TimeNs t0 = r.fab.now();
  r.fab.set_link(t.node(1).ports[2].link, false);
  r.fab.run(t0 + 2'000'000);
  EXPECT_TRUE(s2.trap.active);
  EXPECT_EQ(s2.trap.sends, 1u);
  const std::uint64_t tid = s2.trap.tid;
  EXPECT_EQ(r.sm.traps_received(), 0u);
  EXPECT_EQ(r.fab.stats().dropped_blackout, 1u);  // the trap
  r.fab.set_port_blackout(2, 1, false);
  r.fab.run(t0 + 4'194'304 - 1);
  EXPECT_EQ(r.sm.traps_received(), 0u);
  r.fab.run(t0 + 4'194'304 + 100'000 - 1);  // the repeat arrives; the SM holds off 100 us
  EXPECT_EQ(r.sm.traps_received(), 1u);
  EXPECT_FALSE(s2.trap.active);
  EXPECT_EQ(s2.trap.tid, tid);
  EXPECT_EQ(s2.trap.sends, 2u);
  EXPECT_EQ(s2.stats.traps_repeated, 1u);
  EXPECT_EQ(s2.stats.traps_repressed, 1u);
  EXPECT_EQ(r.fab.stats().traps_sent, 2u);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.route(r.fab.nodes()[5].ports[1].lid), sma::kLftUnreachable);
  // Repressed: no more repeats.
  r.fab.run(r.fab.now() + 20'000'000);
  EXPECT_EQ(s2.trap.sends, 2u);
  EXPECT_EQ(r.sm.traps_received(), 1u);
}

// A LID-routed PortInfo Set of `port` of node `target` from the SM's port: the port's current
// PortInfo with `state` / `phys` written.
void set_port(Rig& r, topo::NodeId target, std::uint8_t port, wire::PortState state,
              std::uint8_t phys, std::uint64_t tid) {
  const sma::NodeState& n = r.fab.nodes()[target];
  const auto mad = test_util::port_info_set(n.ports[port], port, state, phys, tid);
  ASSERT_TRUE(r.fab.send_from_sm(mad, n.lid_port(port).lid));
}

// IBA 7.2 / 14.2.5.6 over DirectFabric: PortInfo Set PortState Down takes the link down at both
// ends, it trains again to Init retrain_ns later and the switch's trap 128 brings the SM, which
// activates it; the Set itself leaves SwitchInfo.PortStateChange clear, the retraining raises it.
// PortPhysicalState Disabled keeps the link down until a Set of Polling.
TEST(DirectFabric, PortInfoSetDownAndDisableMoveTheLink) {
  const topo::Topology t = two_switches();  // s2 (node 1) port 2 <-> h3 (node 5)
  Rig r(t, config(routing::Engine::kMinHop));
  expect_up(r, "two switches");
  const sma::NodeState& s2 = r.fab.nodes()[1];
  const sma::NodeState& h3 = r.fab.nodes()[5];
  const std::uint64_t ignored0 = r.sm.ignored_mads();
  ASSERT_EQ(s2.ports[2].state, sma::LinkState::kActive);
  ASSERT_FALSE(s2.sw.port_state_change);

  TimeNs t0 = r.fab.now();
  set_port(r, 1, 2, wire::PortState::kDown, 0, 0x5E70001);
  r.fab.run(t0 + 10'000);
  EXPECT_EQ(r.sm.ignored_mads(), ignored0 + 1) << "the Set's GetResp reached the SM";
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kDown);
  EXPECT_EQ(h3.ports[1].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(s2.ports[2].counters.link_downed_counter, 1);
  EXPECT_EQ(h3.ports[1].counters.link_downed_counter, 1);
  EXPECT_FALSE(s2.sw.port_state_change) << "a Set is not a link state machine change";
  EXPECT_EQ(r.fab.stats().links_moved, 1u);
  r.fab.run(t0 + 10'000 + DirectConfig{}.retrain_ns);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kLinkUp);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kInit);
  EXPECT_TRUE(s2.sw.port_state_change) << "the retraining (Down -> Init) raises it";
  EXPECT_EQ(r.fab.stats().links_moved, 2u);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.sm.traps_received(), 1u);
  EXPECT_EQ(r.sm.heavy_sweeps(), 2u);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kActive);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kActive);
  expect_up(r, "after Down");

  // Disabled: stays down (no training), until PortPhysicalState Polling.
  t0 = r.fab.now();
  set_port(r, 1, 2, wire::PortState::kNoChange, 3, 0x5E70002);
  r.fab.run(t0 + 5'000'000);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kDisabled);
  EXPECT_EQ(h3.ports[1].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(s2.ports[2].counters.link_downed_counter, 2);
  EXPECT_EQ(r.fab.stats().links_moved, 3u);
  // The SM wrote it: no trap (s2's own end did not fall by itself, h3 is a CA) and no
  // PortStateChange; the SM's next sweep sees the port Down.
  EXPECT_EQ(r.sm.traps_received(), 1u);
  EXPECT_FALSE(s2.sw.port_state_change);
  // A Set of Down on the disabled port changes nothing physical.
  set_port(r, 1, 2, wire::PortState::kDown, 0, 0x5E70003);
  r.fab.run(r.fab.now() + 1'000'000);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kDisabled);
  EXPECT_EQ(r.fab.stats().links_moved, 3u);
  // Polling trains it; the SM activates it again.
  set_port(r, 1, 2, wire::PortState::kNoChange, 2, 0x5E70004);
  ASSERT_TRUE(r.fab.run_until_up(kLimitNs));
  EXPECT_EQ(r.fab.stats().links_moved, 4u);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kActive);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kActive);
  expect_up(r, "after Polling");
}

// verify_nodes counts per (source HCA port, destination LID) even though it walks once per
// switch: a hole in s1's LFT toward h3 leaves exactly h0 and h1 unable to reach it.
TEST(DirectFabric, VerifyCountsEveryPairBehindABrokenLft) {
  Rig r(two_switches(), config(routing::Engine::kMinHop));
  expect_up(r, "two switches");
  const std::uint16_t h3 = r.fab.nodes()[5].ports[1].lid;
  r.fab.nodes()[0].lft[h3] = sma::kLftUnreachable;
  const VerifyReport v = r.fab.verify();
  EXPECT_EQ(v.hca_pairs, 12u);
  EXPECT_EQ(v.unreachable_pairs, 2u);
  EXPECT_EQ(v.loops, 0u);
  ASSERT_FALSE(v.problems.empty());
  EXPECT_EQ(v.problems[0], "h0 cannot reach LID " + std::to_string(h3) + " (h3)");
  // h0's own port goes Down: its pairs as a source fail one by one, the rest by switch.
  r.fab.nodes()[2].ports[1].state = sma::LinkState::kDown;
  // h0 -> h1, h2, h3; h1, h2, h3 -> h0 (its port is the last hop); h1 -> h3.
  EXPECT_EQ(r.fab.verify().unreachable_pairs, 7u);
}

}  // namespace
}  // namespace weft::sm
