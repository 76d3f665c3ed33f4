// tests/sm/fabric_sm_test.cpp — the subnet manager over the emulated fabric (emu/fabric) in
// virtual time: real directed-route and LID-routed SMPs through every switch's SMA and LFT, and
// the data path forwarding by what the SM programmed (FabricConfig::sm_managed).
// Every bring-up is checked by verify_nodes() (the nodes' own tables, not the SM's view).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "emu/fabric/workload.hpp"
#include "emu/sm/fabric_sm.hpp"
#include "emu/sma/sma.hpp"
#include "emu/topo/generators.hpp"
#include "emu/topo/spec.hpp"
#include "tests/sm/port_info_set.hpp"
#include "tests/sm/triangle.hpp"

namespace weft::sm {
namespace {

using fabric::Fabric;
using fabric::FabricConfig;

topo::Topology spec(const char* s) {
  auto t = topo::from_spec(s);
  EXPECT_TRUE(t.ok()) << s;
  return std::move(t).value();
}

topo::Topology must(topo::GenResult r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(r).value();
}

FabricConfig managed(fabric::DataMode mode = fabric::DataMode::kVerified) {
  FabricConfig c;
  c.sm_managed = true;
  c.mode = mode;
  return c;
}

SmOptions options(routing::Engine e) {
  SmOptions o;
  o.sm.routing.engine = e;
  return o;
}

void expect_ok(const BringUpReport& r, const char* what) {
  EXPECT_TRUE(r.ok) << what << ": " << r.error;
  EXPECT_TRUE(r.routes_valid) << what;
  EXPECT_TRUE(r.verify.ok()) << what << ": "
                             << (r.verify.problems.empty() ? "" : r.verify.problems[0]);
  EXPECT_EQ(r.verify.ports_not_active, 0u) << what;
  EXPECT_EQ(r.verify.unreachable_pairs, 0u) << what;
  EXPECT_GT(r.verify.hca_pairs, 0u) << what;
  EXPECT_GT(r.virtual_ns, 0u) << what;
  EXPECT_GE(r.mads, r.sweep.total.mads_sent) << what;  // earlier sweeps lost SMPs and repeated
}

std::map<std::uint64_t, std::uint16_t> lids_of(Fabric& f) {
  std::map<std::uint64_t, std::uint16_t> m;
  for (topo::NodeId n = 0; n < f.topology().node_count(); ++n) {
    const sma::NodeState& s = f.node(n).state();
    for (std::size_t p = s.is_switch() ? 0 : 1; p < (s.is_switch() ? 1 : s.ports.size()); ++p)
      m[s.ports[p].port_guid] = s.ports[p].lid;
  }
  return m;
}

std::vector<topo::NodeId> hcas(const topo::Topology& t) {
  std::vector<topo::NodeId> v;
  for (topo::NodeId i = 0; i < t.node_count(); ++i)
    if (!t.node(i).is_switch()) v.push_back(i);
  return v;
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

// Steps until `cq` holds a completion.
WorkCompletion wait_completion(sim::Simulator& sim, CompletionQueue* cq) {
  WorkCompletion wc{};
  for (int i = 0; i < 10'000'000; ++i) {
    if (cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1) return wc;
    if (sim.step() == sim::StopReason::kEmpty) break;
  }
  ADD_FAILURE() << "no completion";
  return wc;
}

// One RDMA WRITE of `bytes` from x to y, byte-exact, through the tables the SM programmed.
void write_byte_exact(Fabric& f, topo::NodeId x, topo::NodeId y, std::uint32_t bytes) {
  fabric::RcEndpoint a = fabric::make_endpoint(f, x, bytes), b = fabric::make_endpoint(f, y, bytes);
  ASSERT_EQ(fabric::connect_rc(f, a, b), Errc::kOk);
  for (std::size_t i = 0; i < a.mem.size(); ++i) a.mem[i] = static_cast<std::uint8_t>(i * 13 + 5);
  Sge sge{reinterpret_cast<std::uint64_t>(a.mem.data()), bytes, a.mr->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data());
  wr.rkey = b.mr->rkey();
  ASSERT_EQ(a.qp->post_send(wr), Errc::kOk);
  f.kick(x);
  ASSERT_EQ(wait_completion(f.sim(), a.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), bytes), 0);
}

// Same counts as the sans-IO SM over DirectFabric (tests/sm/sm_test.cpp explains them): the
// emulated fabric carries the same SMPs, one per request, none lost.
TEST(FabricSm, ExactMadCountsTwoSwitches) {
  const topo::Topology t = two_switches();
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  // Before the SM: no LIDs, ports in Init, data goes nowhere.
  EXPECT_EQ(f.lid(2), 0);
  EXPECT_EQ(f.node(2).state().ports[1].state, sma::LinkState::kInit);
  std::unique_ptr<FabricSm> sm;
  const BringUpReport r = bring_up(f, options(routing::Engine::kMinHop), sm);
  expect_ok(r, "two switches");
  const SweepReport& s = r.sweep;
  EXPECT_EQ(s.of(Phase::kDiscovery).mads_sent, 28u);
  EXPECT_EQ(s.of(Phase::kLidAssignment).mads_sent, 12u);
  EXPECT_EQ(s.of(Phase::kLftProgramming).mads_sent, 4u);
  EXPECT_EQ(s.of(Phase::kActivation).mads_sent, 14u);  // 12 Sets, 2 Gets of ports read Down
  EXPECT_EQ(r.mads, 58u);
  EXPECT_EQ(s.total.responses, 58u);
  EXPECT_EQ(s.total.mads_retried, 0u);
  EXPECT_EQ(r.vl15_dropped, 0u);
  EXPECT_EQ(sm->mads_received(), 58u);
  EXPECT_EQ(sm->sm().sm_lid(), f.lid(2));
  EXPECT_NE(f.lid(5), 0);
  // Data through the SM's tables, and the Device knows its LID.
  write_byte_exact(f, 2, 5, 4096);
  // A light sweep: 2 SwitchInfo Gets, no heavy sweep.
  sim.run_until(sim.now() + 10'100'000'000);
  EXPECT_EQ(sm->sm().light_sweeps(), 1u);
  EXPECT_EQ(sm->sm().heavy_sweeps(), 1u);
  EXPECT_EQ(sm->sm().last_light().total.mads_sent, 2u);
}

TEST(FabricSm, RefusesAnUnmanagedFabric) {
  const topo::Topology t = two_switches();
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, FabricConfig{});
  const BringUpReport r = bring_up(f);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "the fabric was not built with FabricConfig::sm_managed");
}

TEST(FabricSm, FatTreeK4EveryEngine) {
  const topo::Topology t = spec("fat-tree:k=4");
  for (routing::Engine e :
       {routing::Engine::kFtree, routing::Engine::kMinHop, routing::Engine::kUpDn}) {
    sim::Simulator sim({.seed = 1});
    Fabric f(sim, t, managed());
    const BringUpReport r = bring_up(f, options(e));
    expect_ok(r, std::string(routing::to_string(e)).c_str());
    EXPECT_EQ(r.sweep.hcas, 16u);
    EXPECT_EQ(r.sweep.switches, 20u);
    const auto h = hcas(t);
    write_byte_exact(f, h.front(), h.back(), 8192);
  }
}

TEST(FabricSm, FatTreeK8FtreeRailAndTorus) {
  {
    sim::Simulator sim({.seed = 1});
    Fabric f(sim, spec("fat-tree:k=8"), managed(fabric::DataMode::kTimingOnly));
    const BringUpReport r = bring_up(f, options(routing::Engine::kFtree));
    expect_ok(r, "k=8");
    EXPECT_EQ(r.sweep.hcas, 128u);
    EXPECT_EQ(r.sweep.switches, 80u);
  }
  {
    sim::Simulator sim({.seed = 1});
    Fabric f(sim, must(topo::rail({})), managed());
    const BringUpReport r = bring_up(f, options(routing::Engine::kUpDn));
    expect_ok(r, "rail");
    EXPECT_EQ(r.sweep.hcas, 32u);
  }
  {
    // DOR with datelines: two data VLs, SL2VL and VLArb programmed over SMPs, read by the data
    // path.
    sim::Simulator sim({.seed = 1});
    FabricConfig c = managed();
    c.data_vls = 2;
    const topo::Topology t = spec("torus:dims=4x4x4,hosts=1");
    Fabric f(sim, t, c);
    const BringUpReport r = bring_up(f, options(routing::Engine::kDor));
    expect_ok(r, "torus dor");
    EXPECT_TRUE(r.sweep.check.cdg_checked);
    EXPECT_FALSE(r.sweep.check.credit_loop);
    const auto h = hcas(t);
    write_byte_exact(f, h.front(), h[h.size() / 2 + 3], 4096);
  }
}

TEST(FabricSm, LidsStableAcrossResweepAndSecondBringUp) {
  const topo::Topology t = spec("fat-tree:k=4");
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  std::unique_ptr<FabricSm> sm;
  expect_ok(bring_up(f, options(routing::Engine::kFtree), sm), "first");
  const auto before = lids_of(f);
  // A switch reports PortStateChange: the light sweep sees it and a heavy sweep follows.
  topo::NodeId sw = 0;
  while (!t.node(sw).is_switch()) ++sw;
  f.node(sw).state().sw.port_state_change = true;
  sim.run_until(sim.now() + 10'000'000'000);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().heavy_sweeps(), 2u);
  EXPECT_EQ(sm->sm().last_heavy().lft_blocks_sent, 0u);
  EXPECT_EQ(lids_of(f), before);
  // A new SM on a reset fabric assigns the same LIDs (LidAssigner: by port GUID, same order).
  sm.reset();
  f.reset_management();
  EXPECT_EQ(f.lid(sw), 0);
  const BringUpReport r2 = bring_up(f, options(routing::Engine::kFtree));
  expect_ok(r2, "second");
  EXPECT_EQ(lids_of(f), before);
}

// SMAs that queue one SMP and a window of 64: SMPs are dropped where they pile up at a
// switch's SMA, the SM retries, the bring-up still completes.
TEST(FabricSm, Vl15DropsAreRetried) {
  sim::Simulator sim({.seed = 1});
  FabricConfig c = managed();
  c.sw.sma_queue_max = 4;
  Fabric f(sim, spec("fat-tree:k=4"), c);
  SmOptions o = options(routing::Engine::kFtree);
  o.sm.timeout_ns = 200'000;
  o.sm.retries_max = 20;
  const BringUpReport r = bring_up(f, o);
  expect_ok(r, "drops");
  EXPECT_GT(r.vl15_dropped, 0u);
  EXPECT_GT(r.sweep.total.mads_retried, 0u);
  EXPECT_EQ(r.sweep.total.mads_lost, 0u);
  EXPECT_EQ(f.totals().vl15_dropped, r.vl15_dropped);
}

// VL15 crosses the same wires as data: PortFaults drops and bit errors that FEC cannot repair
// discard SMPs on the management path too; the SM's retries carry the bring-up through.
TEST(FabricSm, SmpsLostToFaultsAndBitErrorsAreRetried) {
  const topo::Topology t = spec("fat-tree:k=4");
  sim::Simulator sim({.seed = 3});
  Fabric f(sim, t, managed());
  std::size_t lossy = 0, noisy = 0;
  for (topo::LinkId l = 0; l < t.link_count(); ++l) {
    const topo::Link& k = t.link(l);
    if (!t.node(k.a.node).is_switch() || !t.node(k.b.node).is_switch()) continue;
    fabric::PortFaults pf;
    if (l % 2 == 0) {
      pf.drop = 0.2;
      ++lossy;
    } else {
      pf.ber = 2e-4;  // ~0.46 bit errors per 290-byte SMP: some beyond what FEC repairs
      ++noisy;
    }
    ASSERT_TRUE(f.set_port_faults(k.a.node, k.a.port, pf));
    ASSERT_TRUE(f.set_port_faults(k.b.node, k.b.port, pf));
  }
  ASSERT_GT(lossy, 0u);
  ASSERT_GT(noisy, 0u);
  SmOptions o = options(routing::Engine::kFtree);
  o.sm.timeout_ns = 200'000;
  o.sm.retries_max = 30;
  const BringUpReport r = bring_up(f, o);
  expect_ok(r, "lossy");
  const fabric::PortCounters c = f.totals();
  EXPECT_GT(c.fault_dropped, 0u);
  EXPECT_GT(c.port_rcv_errors, 0u);
  EXPECT_GT(c.fec_corrected_blocks, 0u);
  EXPECT_EQ(r.sweep.total.mads_lost, 0u);
  // Every SMP the fabric discarded was sent again: the SM's retries cover the losses.
  EXPECT_GE(r.sweep.total.mads_retried + (r.mads - r.sweep.total.mads_sent), c.fault_dropped / 2);
  std::printf("dropped %llu, bad CRC %llu, FEC-corrected %llu, SMPs %llu, retried %llu\n",
              (unsigned long long)c.fault_dropped, (unsigned long long)c.port_rcv_errors,
              (unsigned long long)c.fec_corrected_blocks, (unsigned long long)r.mads,
              (unsigned long long)r.sweep.total.mads_retried);
}

// IBA 13.4.9: a trap the SM never saw is sent again (same TID) every 4.096 us x 2^SubnetTimeOut
// until the SM's TrapRepress comes back; then the SM re-sweeps as for any trap 128.
TEST(FabricSm, LostTrapIsRepeatedUntilRepressed) {
  const topo::Topology t = two_switches();  // 0 s1, 1 s2, 2..5 h0..h3; the SM on h0 (node 2)
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  SmOptions o = options(routing::Engine::kMinHop);
  o.sm.subnet_timeout = 10;  // 4,194,304 ns between repeats
  std::unique_ptr<FabricSm> sm;
  expect_ok(bring_up(f, o, sm), "two switches");
  sma::NodeState& s2 = f.node(1).state();
  EXPECT_EQ(s2.ports[0].subnet_timeout, 10);
  EXPECT_EQ(sma::trap_repeat_ns(s2), 4'194'304u);
  EXPECT_FALSE(s2.trap.active);
  // Everything reaching the SM's port is lost for 2 ms; h3's link (s2 port 2) fails now.
  fabric::PortFaults blackout;
  blackout.drop = 1.0;
  ASSERT_TRUE(f.set_port_faults(2, 1, blackout));
  const TimeNs t0 = sim.now();
  f.set_link_state(t.node(1).ports[2].link, false, t0);
  sim.run_until(t0 + 2'000'000);
  EXPECT_TRUE(s2.trap.active);
  EXPECT_EQ(s2.trap.sends, 1u);
  const std::uint64_t tid = s2.trap.tid;
  EXPECT_EQ(sm->sm().traps_received(), 0u);
  EXPECT_EQ(f.counters(2, 1).fault_dropped, 1u);  // the trap
  ASSERT_TRUE(f.set_port_faults(2, 1, fabric::PortFaults{}));
  // The repeat at t0 + 4.19 ms reaches the SM, which represses it and sweeps.
  sim.run_until(t0 + 4'194'304 - 1);
  EXPECT_EQ(sm->sm().traps_received(), 0u);
  sim.run_until(t0 + 6'000'000);
  EXPECT_EQ(sm->sm().traps_received(), 1u);
  EXPECT_FALSE(s2.trap.active);
  EXPECT_EQ(s2.trap.tid, tid);
  EXPECT_EQ(s2.trap.sends, 2u);
  EXPECT_EQ(s2.stats.traps_repeated, 1u);
  EXPECT_EQ(s2.stats.traps_repressed, 1u);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().heavy_sweeps(), 2u);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.route(f.lid(5)), sma::kLftUnreachable) << "h3's LID no longer routed";
  // Repressed: no more repeats.
  sim.run_until(sim.now() + 20'000'000);
  EXPECT_EQ(s2.trap.sends, 2u);
  EXPECT_EQ(sm->sm().traps_received(), 1u);
}

// A LID-routed PortInfo Set of `port` of node `target`, sent by the SM's HCA (node 2): the
// port's current PortInfo with `state` / `phys` written (read-modify-write as an SM does it).
void set_port(Fabric& f, topo::NodeId target, std::uint8_t port, wire::PortState state,
              std::uint8_t phys, std::uint64_t tid) {
  const auto mad =
      test_util::port_info_set(f.node(target).state().ports[port], port, state, phys, tid);
  ASSERT_TRUE(f.send_smp_from(2, 1, mad, f.lid(target), f.lid(2)));
}

// IBA 7.2 / 14.2.5.6: PortInfo Set PortState Down takes the link down at both ends; it trains
// again to Init (LinkModel::retrain_ns), the switch's trap 128 brings the SM, which activates it.
// PortPhysicalState Disabled keeps the link down until a Set of Polling.
TEST(FabricSm, PortInfoSetDownAndDisableMoveTheLink) {
  const topo::Topology t = two_switches();  // s2 (node 1) port 2 <-> h3 (node 5)
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  std::unique_ptr<FabricSm> sm;
  expect_ok(bring_up(f, options(routing::Engine::kMinHop), sm), "two switches");
  const sma::NodeState& s2 = f.node(1).state();
  const sma::NodeState& h3 = f.node(5).state();
  const std::uint64_t ignored0 = sm->sm().ignored_mads();
  ASSERT_EQ(s2.ports[2].state, sma::LinkState::kActive);

  // Down: gone at both ends once the answer is out, back in Init 50 us later, then Active.
  TimeNs t0 = sim.now();
  set_port(f, 1, 2, wire::PortState::kDown, 0, 0x5E70001);
  sim.run_until(t0 + 10'000);
  EXPECT_EQ(sm->sm().ignored_mads(), ignored0 + 1) << "the Set's GetResp reached the SM's port";
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kDown);
  EXPECT_EQ(h3.ports[1].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(s2.ports[2].counters.link_downed_counter, 1);
  EXPECT_EQ(f.counters(1, 2).link_downed_counter, 1u);
  EXPECT_EQ(f.counters(5, 1).link_downed_counter, 1u);
  EXPECT_FALSE(f.send_smp(5, f.lid(2))) << "h3's port is down";
  sim.run_until(t0 + 10'000 + f.config().link.retrain_ns);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kLinkUp);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kInit);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_GE(sm->sm().traps_received(), 1u);
  EXPECT_EQ(sm->sm().heavy_sweeps(), 2u);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kActive);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kActive);
  EXPECT_TRUE(verify_nodes(f, sm->sm().sm_lid()).ok());
  write_byte_exact(f, 2, 5, 4096);

  // Disabled: stays down (no training), until PortPhysicalState Polling.
  t0 = sim.now();
  set_port(f, 1, 2, wire::PortState::kNoChange, 3, 0x5E70002);
  sim.run_until(t0 + 5'000'000);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kDown);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kDisabled);
  EXPECT_EQ(h3.ports[1].phys_state, sma::PhysState::kPolling);
  EXPECT_EQ(s2.ports[2].counters.link_downed_counter, 2);
  EXPECT_EQ(f.counters(1, 2).link_downed_counter, 2u);
  // A Set of Down on the disabled port changes nothing physical.
  set_port(f, 1, 2, wire::PortState::kDown, 0, 0x5E70003);
  sim.run_until(sim.now() + 1'000'000);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kDisabled);
  t0 = sim.now();
  set_port(f, 1, 2, wire::PortState::kNoChange, 2, 0x5E70004);
  sim.run_until(t0 + 10'000 + f.config().link.retrain_ns);
  EXPECT_EQ(s2.ports[2].phys_state, sma::PhysState::kLinkUp);
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kInit);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(s2.ports[2].state, sma::LinkState::kActive);
  EXPECT_EQ(h3.ports[1].state, sma::LinkState::kActive);
  EXPECT_EQ(f.counters(1, 2).link_downed_counter, 2u);
  EXPECT_EQ(sm->sm().ignored_mads(), ignored0 + 4) << "four Sets, four GetResps";
  EXPECT_TRUE(verify_nodes(f, sm->sm().sm_lid()).ok());
  write_byte_exact(f, 2, 5, 4096);
}

using test_util::triangle;

// The cross-host failure of issue 7 section 5 (a crossing port left in Init while its peer was
// Active) over the emulated fabric: link s2-s3 trains during the first heavy sweep, after s2/3
// was read Down and before s3 is reached (PortFaults drop everything s3 gets from s1 until
// then). No switch knows the SM's LID yet, so no trap; the SM still activates both ends (its
// activation phase reads s2/3 again, finds it trained and sweeps again), and data crosses it.
TEST(FabricSm, LinkThatTrainsDuringTheFirstSweepIsActivated) {
  const topo::Topology t = triangle();
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  f.set_link_state(5, false, sim.now());
  fabric::PortFaults blackout;
  blackout.drop = 1.0;
  ASSERT_TRUE(f.set_port_faults(2, 2, blackout));
  SmConfig c;
  c.routing.engine = routing::Engine::kMinHop;
  FabricSm sm(f, 3, c);
  sm.start();
  sim.run_until(sim.now() + 400'000);
  EXPECT_EQ(f.node(1).state().ports[3].state, sma::LinkState::kDown);
  EXPECT_EQ(sm.sm().phase(), Phase::kDiscovery);
  f.set_link_state(5, true, sim.now());
  ASSERT_TRUE(f.set_port_faults(2, 2, fabric::PortFaults{}));
  ASSERT_TRUE(sm.run_until_settled(1'000'000'000));
  EXPECT_EQ(sm.sm().heavy_sweeps(), 2u);
  EXPECT_EQ(sm.sm().light_sweeps(), 0u);
  EXPECT_EQ(sm.sm().traps_received(), 0u);
  EXPECT_EQ(sm.sm().last_heavy().ports_left_inactive, 0u);
  EXPECT_EQ(f.node(1).state().ports[3].state, sma::LinkState::kActive);
  EXPECT_EQ(f.node(2).state().ports[3].state, sma::LinkState::kActive);
  const VerifyReport v = verify_nodes(f, sm.sm().sm_lid());
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_EQ(v.ports_not_active, 0u);
  EXPECT_EQ(v.unreachable_pairs, 0u);
  write_byte_exact(f, 4, 5, 4096);  // h1 (on s2) to h2 (on s3): over the late link
  EXPECT_GT(f.counters(1, 3).xmit_pkts, 0u);
}

// The activation back-off over the emulated fabric (tests/sm/sm_test.cpp has the cases): h3's
// port holds an M_Key the SM does not know, so its SMA answers Gets and drops every Set. Over 100
// light sweeps the port costs 7 heavy sweeps (not 100) and one report; cleared and re-seated,
// it is activated by the trap's heavy sweep and carries an RDMA WRITE.
TEST(FabricSm, NeverActivatablePortIsBackedOffAndActivatedOnceFixed) {
  const topo::Topology t = two_switches();
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  sma::PortState& h3 = f.node(5).state().ports[1];
  h3.m_key = 0x5EC2E7;
  h3.m_key_protect_bits = 1;
  std::vector<StuckPort> reports;
  SmOptions o = options(routing::Engine::kMinHop);
  o.sm.on_port_stuck = [&](const StuckPort& p, TimeNs) { reports.push_back(p); };
  std::unique_ptr<FabricSm> sm;
  const BringUpReport r = bring_up(f, o, sm);
  EXPECT_FALSE(r.ok);  // h3 has no LID: verify_nodes says so
  ASSERT_TRUE(sm);
  const std::uint32_t heavy = sm->sm().heavy_sweeps();
  EXPECT_EQ(heavy, 5u);  // the first sweep and sweeps_incomplete_max repeats (Sets dropped)
  EXPECT_EQ(h3.state, sma::LinkState::kInit);
  sim.run_until(sim.now() + 1'000'500'000'000);  // 100 light sweeps, 10 s apart
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().light_sweeps(), 100u);
  EXPECT_EQ(sm->sm().heavy_sweeps(), heavy + 7);
  EXPECT_EQ(sm->sm().ports_stuck(), 1u);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].node_guid, f.node(5).state().node_guid);
  EXPECT_EQ(reports[0].port, 1);
  EXPECT_EQ(reports[0].state, wire::PortState::kInit);
  // Fixed and re-seated: s2's trap 128 starts a heavy sweep at once.
  h3.m_key = 0;
  h3.m_key_protect_bits = 0;
  const topo::LinkId link = t.node(5).ports[1].link;
  f.set_link_state(link, false, sim.now());
  f.set_link_state(link, true, sim.now());
  sim.run_until(sim.now() + 1'000'000);  // the traps reach the SM; its hold-off; one sweep
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().heavy_sweeps(), heavy + 8);
  EXPECT_EQ(h3.state, sma::LinkState::kActive);
  EXPECT_EQ(sm->sm().light_sweeps(), 100u);
  EXPECT_EQ(sm->sm().ports_stuck(), 0u);
  const VerifyReport v = verify_nodes(f, sm->sm().sm_lid());
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  write_byte_exact(f, 2, 5, 4096);
}

// The LID-routed path of `src` to `dst`'s LID: the first switch-to-switch link it takes.
topo::LinkId first_uplink(Fabric& f, topo::NodeId src, topo::NodeId dst) {
  const topo::Topology& t = f.topology();
  topo::PortRef at = *t.peer({src, 1});
  const std::uint16_t dlid = f.lid(dst);
  const std::uint8_t out = f.node(at.node).state().route(dlid);
  return t.node(at.node).ports[out].link;
}

struct LinkDownRun {
  std::uint64_t completed = 0, ok = 0, retry_exc = 0, flushed = 0, posted = 0;
  TimeNs trap_to_lft_ns = 0;
  std::uint64_t link_downed = 0;
  std::uint32_t heavy_sweeps = 0;
  std::uint64_t traps = 0;
};

// 4,000 RC WRITEs of 16 KiB between two pods of a k=4 fat tree; the first up-link of their
// path fails 50 us in.
LinkDownRun link_down_under_traffic(std::uint8_t timeout, std::uint8_t retry_cnt) {
  LinkDownRun out;
  const topo::Topology t = spec("fat-tree:k=4");
  sim::Simulator sim({.seed = 7});
  Fabric f(sim, t, managed());
  SmOptions o = options(routing::Engine::kFtree);
  std::unique_ptr<FabricSm> sm;
  const BringUpReport r = bring_up(f, o, sm);
  EXPECT_TRUE(r.ok) << r.error;
  const auto h = hcas(t);
  const topo::NodeId src = h[1], dst = h.back();
  fabric::RcConnectParams p;
  p.timeout = timeout;
  p.retry_cnt = retry_cnt;
  fabric::RcEndpoint a = fabric::make_endpoint(f, src, 1 << 20, p);
  fabric::RcEndpoint b = fabric::make_endpoint(f, dst, 1 << 20, p);
  EXPECT_EQ(fabric::connect_rc(f, a, b, p), Errc::kOk);
  const topo::LinkId down = first_uplink(f, src, dst);
  const topo::Link& dl = t.link(down);
  const TimeNs t_down = sim.now() + 50'000;
  f.set_link_state(down, false, t_down);
  constexpr int kMessages = 4000;
  int posted = 0;
  std::uint64_t ids_seen = 0;
  auto post = [&] {
    Sge sge{reinterpret_cast<std::uint64_t>(a.mem.data()), 16384, a.mr->lkey()};
    SendWr wr;
    wr.wr_id = static_cast<std::uint64_t>(posted);
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSignaled;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data());
    wr.rkey = b.mr->rkey();
    if (a.qp->post_send(wr) == Errc::kOk) ++posted;
  };
  std::uint32_t heavy0 = sm->sm().heavy_sweeps();
  TimeNs lft_ns = 0;
  const TimeNs end = sim.now() + 3'000'000'000;
  while (sim.now() < end && out.completed < static_cast<std::uint64_t>(kMessages)) {
    while (posted < kMessages && posted - static_cast<int>(out.completed) < 8) post();
    f.kick(src);
    sim.run_until(sim.now() + 2'000);
    WorkCompletion wc[16];
    std::size_t n;
    while ((n = a.cq->poll(std::span<WorkCompletion>(wc, 16))) > 0) {
      for (std::size_t i = 0; i < n; ++i) {
        ++out.completed;
        ids_seen += wc[i].wr_id;
        if (wc[i].status == WcStatus::kSuccess) ++out.ok;
        if (wc[i].status == WcStatus::kRetryExcErr) ++out.retry_exc;
        if (wc[i].status == WcStatus::kWrFlushErr) ++out.flushed;
      }
    }
    if (lft_ns == 0 && sm->sm().heavy_sweeps() > heavy0 && sm->sm().settled())
      lft_ns = sm->sm().last_heavy().end_ns;
    if (out.retry_exc > 0 && posted > static_cast<int>(out.completed)) continue;
    if (out.retry_exc > 0 && posted == static_cast<int>(out.completed)) break;
  }
  out.posted = static_cast<std::uint64_t>(posted);
  std::printf("posted %llu completed %llu ok %llu retry_exc %llu flushed %llu at %.1f us\n",
              (unsigned long long)out.posted, (unsigned long long)out.completed,
              (unsigned long long)out.ok, (unsigned long long)out.retry_exc,
              (unsigned long long)out.flushed, (sim.now() - t_down) / 1e3);
  sim.run_until(std::max(sim.now(), t_down + 20'000'000));  // the re-route is done by then
  EXPECT_TRUE(sm->run_until_settled(1'000'000'000));
  const VerifyReport v = verify_nodes(f, sm->sm().sm_lid());
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]) << " lost "
                      << sm->sm().last_heavy().total.mads_lost << " complete "
                      << sm->sm().last_heavy().complete << " valid " << sm->sm().routes_valid()
                      << " phase " << to_string(sm->sm().phase()) << " sent "
                      << sm->sm().last_heavy().lft_blocks_sent << " err "
                      << sm->sm().last_heavy().total.error_status << " heavy "
                      << sm->sm().heavy_sweeps();
  if (out.ok == out.posted) {
    EXPECT_EQ(ids_seen, out.posted * (out.posted - 1) / 2) << "every message exactly once";
  }
  out.trap_to_lft_ns = lft_ns > t_down ? lft_ns - t_down : 0;
  out.link_downed = f.counters(dl.a.node, dl.a.port).link_downed_counter;
  out.heavy_sweeps = sm->sm().heavy_sweeps() - heavy0;
  out.traps = sm->sm().traps_received();
  return out;
}

TEST(FabricSm, LinkDownTrapReroutesWithinTheRetryBudget) {
  // timeout 4.096 us * 2^10 = 4.2 ms, retry_cnt 7: 33.6 ms of retries.
  const LinkDownRun r = link_down_under_traffic(10, 7);
  EXPECT_GE(r.traps, 1u);
  EXPECT_EQ(r.heavy_sweeps, 1u) << "both ends' traps share one sweep";
  ASSERT_GT(r.trap_to_lft_ns, 0u);
  const TimeNs budget = 4096ull * (1u << 10) * (7 + 1);
  EXPECT_GT(budget, r.trap_to_lft_ns);
  EXPECT_EQ(r.link_downed, 1u);
  EXPECT_EQ(r.completed, 4000u);
  EXPECT_EQ(r.ok, 4000u);  // and link_down_under_traffic checked each wr_id came back once
  EXPECT_EQ(r.retry_exc, 0u);
  std::printf("trap to new LFTs: %.1f us, budget %.1f us\n", r.trap_to_lft_ns / 1e3, budget / 1e3);
}

TEST(FabricSm, LinkDownWithAShortRetryBudgetFailsCleanly) {
  // timeout 4.096 us * 2^1 = 8 us, retry_cnt 1: 16 us, shorter than any re-route.
  const LinkDownRun r = link_down_under_traffic(1, 1);
  EXPECT_GE(r.retry_exc, 1u);
  EXPECT_EQ(r.completed, r.posted) << "nothing hangs: every WR completes (error or flush)";
  EXPECT_EQ(r.retry_exc + r.flushed + r.ok, r.posted);
}

std::uint64_t trace_hash_256(std::uint64_t seed) {
  sim::Simulator sim({.seed = seed});
  Fabric f(sim, spec("fat-tree:levels=2,radix=32,leaves=16"),
           managed(fabric::DataMode::kTimingOnly));
  const BringUpReport r = bring_up(f, options(routing::Engine::kFtree));
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.sweep.hcas, 256u);
  return sim.trace_hash();
}

TEST(FabricSm, Deterministic256Hcas) {
  const std::uint64_t a = trace_hash_256(11), b = trace_hash_256(11);
  EXPECT_EQ(a, b) << "seed 11";
}

// A GMP (PMA Get) to a multicast LID goes out of every port of the MFT entry except the one
// it came in on: the member HCAs get it once, the others never, the sender not its own copy.
TEST(FabricSm, MulticastThroughTheMft) {
  const topo::Topology t = spec("fat-tree:k=4");
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  ASSERT_TRUE(bring_up(f, options(routing::Engine::kFtree)).ok);
  const auto h = hcas(t);
  const std::vector<topo::NodeId> members = {h[0], h[5], h[9], h[15]};
  constexpr std::uint16_t kMlid = 0xC001;
  // An empty MFT entry 1 (MLID 0xC001) on every switch, then filled below.
  for (topo::NodeId s = 0; s < t.node_count(); ++s) {
    if (!t.node(s).is_switch()) continue;
    sma::NodeState& ns = f.node(s).state();
    ns.mft.assign(2, {});  // entry 1: MLID 0xC001
  }
  // Tree: union of the unicast paths from members[0] to each member (ftree paths from one
  // source form a tree), and members[0] sends.
  for (topo::NodeId m : members) {
    if (m == members[0]) continue;
    topo::PortRef at = *t.peer({members[0], 1});
    for (int hop = 0; hop < 8 && t.node(at.node).is_switch(); ++hop) {
      const std::uint8_t out = f.node(at.node).state().route(f.lid(m));
      auto& e = f.node(at.node).state().mft[kMlid - sma::kMulticastLidBase][out / 16];
      e |= static_cast<std::uint16_t>(1u << (out % 16));
      at = *t.peer({at.node, out});
    }
  }
  std::vector<std::uint64_t> before(t.node_count());
  for (topo::NodeId n : h) before[n] = f.node(n).mads_received();
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  mad[0] = 1;
  mad[1] = static_cast<std::uint8_t>(wire::MgmtClass::kPerfMgt);
  mad[2] = 1;
  mad[3] = static_cast<std::uint8_t>(wire::MadMethod::kGet);
  ASSERT_TRUE(f.send_mad(members[0], kMlid, mad, /*smp=*/false));
  sim.run_until(sim.now() + 100'000);
  for (topo::NodeId n : h) {
    const bool member =
        n != members[0] && std::find(members.begin(), members.end(), n) != members.end();
    // Each member's PMA answers the Get (LID-routed back): the sender receives three GetResps.
    const std::uint64_t want = n == members[0] ? 3 : member ? 1 : 0;
    EXPECT_EQ(f.node(n).mads_received() - before[n], want) << t.node(n).description;
  }
}

// The MFT entry of `mlid` every switch should hold, derived from the nodes' own LFTs: the union
// of the paths from each member's switch to the first member's switch.
std::map<topo::NodeId, std::uint16_t> expected_mft(Fabric& f, const std::vector<topo::NodeId>& m) {
  const topo::Topology& t = f.topology();
  std::map<topo::NodeId, std::uint16_t> want;
  const topo::NodeId root = t.peer({m[0], 1})->node;
  const std::uint16_t root_lid = f.lid(root);
  for (topo::NodeId x : m) {
    topo::PortRef at = *t.peer({x, 1});
    want[at.node] |= static_cast<std::uint16_t>(1u << at.port);
    for (int hop = 0; hop < 8 && at.node != root; ++hop) {
      const std::uint8_t out = f.node(at.node).state().route(root_lid);
      want[at.node] |= static_cast<std::uint16_t>(1u << out);
      at = *t.peer({at.node, out});
      want[at.node] |= static_cast<std::uint16_t>(1u << at.port);
    }
  }
  return want;
}

// A PMA Get to `mlid` from `from`: how many MADs each HCA received (the members' PMAs answer
// by LID, so the sender counts one GetResp per other member).
std::map<topo::NodeId, std::uint64_t> multicast_once(Fabric& f, topo::NodeId from,
                                                     std::uint16_t mlid) {
  const auto h = hcas(f.topology());
  std::map<topo::NodeId, std::uint64_t> before, got;
  for (topo::NodeId n : h) before[n] = f.node(n).mads_received();
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  mad[0] = 1;
  mad[1] = static_cast<std::uint8_t>(wire::MgmtClass::kPerfMgt);
  mad[2] = 1;
  mad[3] = static_cast<std::uint8_t>(wire::MadMethod::kGet);
  EXPECT_TRUE(f.send_mad(from, mlid, mad, /*smp=*/false));
  f.sim().run_until(f.sim().now() + 100'000);
  for (topo::NodeId n : h) got[n] = f.node(n).mads_received() - before[n];
  return got;
}

// The SM builds the multicast tree and programs it with MulticastForwardingTable Sets (one per
// switch on the tree: block 0, position 0 holds MLID 0xC001's ports 0-15), in a light sweep;
// members change, the differing blocks are re-sent; a heavy sweep re-sends nothing.
TEST(FabricSm, SmProgramsMulticastForwardingTables) {
  const topo::Topology t = spec("fat-tree:k=4");
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, t, managed());
  std::unique_ptr<FabricSm> sm;
  expect_ok(bring_up(f, options(routing::Engine::kFtree), sm), "k=4");
  const auto h = hcas(t);
  constexpr std::uint16_t kMlid = 0xC001;
  auto guids = [&](const std::vector<topo::NodeId>& v) {
    std::vector<std::uint64_t> g;
    for (topo::NodeId n : v) g.push_back(f.node(n).state().ports[1].port_guid);
    return g;
  };
  auto check_tables = [&](const std::vector<topo::NodeId>& members, const char* what) {
    const auto want =
        members.empty() ? std::map<topo::NodeId, std::uint16_t>{} : expected_mft(f, members);
    for (topo::NodeId s = 0; s < t.node_count(); ++s) {
      if (!t.node(s).is_switch()) continue;
      const sma::NodeState& ns = f.node(s).state();
      const auto it = want.find(s);
      EXPECT_EQ(ns.mft[1][0], it == want.end() ? 0 : it->second) << what << " switch " << s;
      EXPECT_EQ(ns.mft[0][0], 0) << what;
      EXPECT_EQ(ns.mft[2][0], 0) << what;
    }
    return want.size();
  };
  std::size_t switches = 0;
  for (topo::NodeId s = 0; s < t.node_count(); ++s) switches += t.node(s).is_switch();

  const std::vector<topo::NodeId> members = {h[0], h[5], h[9], h[15]};
  sm->set_multicast_group(kMlid, guids(members));
  EXPECT_FALSE(sm->sm().settled()) << "the MFT Sets are still to go";
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().light_sweeps(), 1u);
  EXPECT_EQ(sm->sm().heavy_sweeps(), 1u);
  const std::size_t on_tree = check_tables(members, "four members");
  const SweepReport& ls = sm->sm().last_light();
  EXPECT_EQ(ls.mft_blocks_sent, on_tree);
  EXPECT_EQ(ls.total.mads_sent, switches + on_tree);  // SwitchInfo Gets + MFT Sets
  EXPECT_EQ(ls.total.error_status, 0u);
  std::printf("multicast: %zu of %zu switches on the tree, %llu SMPs in the light sweep\n", on_tree,
              switches, (unsigned long long)ls.total.mads_sent);
  // From any member: every other member once, nobody else, never the sender.
  for (topo::NodeId from : {h[0], h[9]}) {
    const auto got = multicast_once(f, from, kMlid);
    for (topo::NodeId n : h) {
      const bool member = std::find(members.begin(), members.end(), n) != members.end();
      const std::uint64_t want = n == from ? 3 : member ? 1 : 0;
      EXPECT_EQ(got.at(n), want) << "from " << from << " to " << t.node(n).description;
    }
  }

  // Two members leave: the switches whose entry changed get a new block, the others none.
  const std::vector<topo::NodeId> fewer = {h[0], h[5]};
  sm->set_multicast_group(kMlid, guids(fewer));
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  check_tables(fewer, "two members");
  std::size_t changed = 0;
  {
    const auto a = expected_mft(f, members), b = expected_mft(f, fewer);
    for (const auto& [s, m] : a) changed += !b.count(s) || b.at(s) != m;
    for (const auto& [s, m] : b) changed += !a.count(s);
  }
  EXPECT_EQ(sm->sm().last_light().mft_blocks_sent, changed);
  EXPECT_GT(changed, 0u);
  const auto got = multicast_once(f, h[0], kMlid);
  EXPECT_EQ(got.at(h[5]), 1u);
  EXPECT_EQ(got.at(h[9]), 0u);
  EXPECT_EQ(got.at(h[0]), 1u);

  // A heavy sweep re-derives the same trees: no MFT Set.
  topo::NodeId sw = 0;
  while (!t.node(sw).is_switch()) ++sw;
  f.node(sw).state().sw.port_state_change = true;
  sim.run_until(sim.now() + 10'000'000'000);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  EXPECT_EQ(sm->sm().heavy_sweeps(), 2u);
  EXPECT_EQ(sm->sm().last_heavy().mft_blocks_sent, 0u);
  check_tables(fewer, "after a heavy sweep");

  // The group goes: every entry cleared.
  sm->remove_multicast_group(kMlid);
  ASSERT_TRUE(sm->run_until_settled(1'000'000'000));
  check_tables({}, "removed");
  EXPECT_EQ(multicast_once(f, h[0], kMlid).at(h[5]), 0u);
  EXPECT_TRUE(sm->sm().multicast_groups().empty());
}

TEST(FabricSmSlow, TwoLevel648) {
  sim::Simulator sim({.seed = 1});
  Fabric f(sim, must(topo::fat_tree_2({})), managed(fabric::DataMode::kTimingOnly));
  const BringUpReport r = bring_up(f, options(routing::Engine::kFtree));
  expect_ok(r, "648");
  EXPECT_EQ(r.sweep.hcas, 648u);
  std::printf("648 HCAs: %.3f s wall, %.2f ms virtual, %llu MADs, %llu events\n", r.wall_s,
              r.virtual_ns / 1e6, static_cast<unsigned long long>(r.mads),
              static_cast<unsigned long long>(r.events));
}

}  // namespace
}  // namespace weft::sm
