// tests/fabric/congestion_test.cpp — the fabric under load: lossless incast, head-of-line
// blocking and congestion spreading, VL arbitration weights, FEC and CRC drops repaired by RC,
// determinism of the event trace, VL15 drops, link down/up.
#include <gtest/gtest.h>

#include <cstdio>

#include <weft/forwarding_device.hpp>

#include "emu/fabric/fabric.hpp"
#include "emu/fabric/workload.hpp"
#include "src/wire/mad.hpp"
#include "tests/fabric/star.hpp"

namespace weft::fabric {
namespace {

using test::Star;
using test::star;

std::uint64_t device_timeouts(Fabric& f) {
  std::uint64_t n = 0;
  for (auto h : f.hcas()) n += f.device(h).counters().timeouts;
  return n;
}

// n senders -> 1 receiver at full rate: nothing dropped, the bottleneck saturated, the senders
// held back by credits (XmitWait).
void incast(int n) {
  Star s = star(n + 1, std::max(36, n + 1));
  sim::Simulator sim({.seed = 11});
  FabricConfig cfg;
  cfg.mode = DataMode::kTimingOnly;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  std::vector<RcEndpoint> eps;
  eps.reserve(2 * n);
  std::vector<WriteStream> st;
  for (int i = 0; i < n; ++i) {
    eps.push_back(make_endpoint(f, s.hosts[i], 65536));
    eps.push_back(make_endpoint(f, s.hosts[n], 65536));
    ASSERT_EQ(connect_rc(f, eps[2 * i], eps[2 * i + 1]), Errc::kOk);
  }
  for (int i = 0; i < n; ++i) st.push_back({&eps[2 * i], &eps[2 * i + 1], 65536, 4});
  const int bottleneck = n + 1;  // switch port to the receiver
  run_streams(f, st, 50'000);
  const PortCounters c0 = f.counters(s.sw, bottleneck);
  const TimeNs t0 = sim.now();
  run_streams(f, st, 250'000);
  const PortCounters& c1 = f.counters(s.sw, bottleneck);
  const double util =
      static_cast<double>(c1.busy_ns - c0.busy_ns) / static_cast<double>(sim.now() - t0);
  std::uint64_t sender_wait = 0;
  for (int i = 0; i < n; ++i) sender_wait += f.counters(s.hosts[i], 1).xmit_wait_ns;
  const PortCounters tot = f.totals();
  std::printf("incast %d:1 bottleneck utilization %.4f, sender XmitWait %llu ns, completed", n,
              util, static_cast<unsigned long long>(sender_wait));
  for (auto& x : st) std::printf(" %llu", static_cast<unsigned long long>(x.completed));
  std::printf("\n");
  EXPECT_GE(util, 0.95);
  EXPECT_GT(sender_wait, 0u);
  EXPECT_EQ(tot.buffer_overflows, 0u);
  EXPECT_EQ(tot.port_xmit_discards, 0u);
  EXPECT_EQ(device_timeouts(f), 0u);
  for (auto& x : st) {
    EXPECT_GT(x.completed, 0u);
    EXPECT_EQ(x.errors, 0u);
  }
}

TEST(Congestion, Incast8To1IsLosslessAndSaturatesTheBottleneck) {
  incast(8);
}
TEST(Congestion, Incast32To1IsLosslessAndSaturatesTheBottleneck) {
  incast(32);
}

// A1, A2 -> C (behind a 1x link) and B -> D, all through one inter-switch link: with one VL the
// packets for C fill S2's input buffer and block B's packets behind them.
struct HolResult {
  double b_gbps = 0;
  std::uint64_t uplink_wait_ns = 0;
};

HolResult hol_run(bool with_congestion) {
  topo::Topology t;
  const auto s1 = t.add_switch(0x10, 8, "s1"), s2 = t.add_switch(0x11, 8, "s2");
  const auto a1 = t.add_hca(0x100, 1, "a1"), a2 = t.add_hca(0x110, 1, "a2");
  const auto b = t.add_hca(0x120, 1, "b"), c = t.add_hca(0x130, 1, "c");
  const auto d = t.add_hca(0x140, 1, "d");
  t.connect({a1, 1}, {s1, 1});
  t.connect({a2, 1}, {s1, 2});
  t.connect({b, 1}, {s1, 3});
  t.connect({s1, 4}, {s2, 1});
  t.connect({c, 1}, {s2, 2}, topo::LinkProps{topo::LinkWidth::k1x, topo::LinkSpeed::kNdr, 2.0});
  t.connect({d, 1}, {s2, 3});
  sim::Simulator sim({.seed = 5});
  FabricConfig cfg;
  cfg.mode = DataMode::kTimingOnly;
  Fabric f(sim, t, cfg);
  f.configure_min_hop();
  std::vector<RcEndpoint> eps;
  eps.reserve(6);
  auto pair = [&](topo::NodeId x, topo::NodeId y) {
    eps.push_back(make_endpoint(f, x, 65536));
    eps.push_back(make_endpoint(f, y, 65536));
    EXPECT_EQ(connect_rc(f, eps[eps.size() - 2], eps.back()), Errc::kOk);
    return eps.size() - 2;
  };
  const auto ib = pair(b, d);
  std::vector<WriteStream> st{{&eps[ib], &eps[ib + 1], 65536, 4}};
  if (with_congestion) {
    const auto i1 = pair(a1, c), i2 = pair(a2, c);
    st.push_back({&eps[i1], &eps[i1 + 1], 65536, 4});
    st.push_back({&eps[i2], &eps[i2 + 1], 65536, 4});
  }
  run_streams(f, st, 50'000);
  const std::uint64_t b0 = st[0].bytes_completed;
  const TimeNs t0 = sim.now();
  run_streams(f, st, 300'000);
  HolResult r;
  r.b_gbps =
      static_cast<double>(st[0].bytes_completed - b0) * 8 / static_cast<double>(sim.now() - t0);
  r.uplink_wait_ns = f.counters(s1, 4).xmit_wait_ns;
  EXPECT_EQ(f.totals().buffer_overflows, 0u);
  return r;
}

TEST(Congestion, HeadOfLineBlockingSpreadsCongestion) {
  const HolResult alone = hol_run(false);
  const HolResult hol = hol_run(true);
  std::printf(
      "B->D alone %.1f Gb/s, with A1,A2->C congested %.1f Gb/s; s1 uplink XmitWait %llu ns\n",
      alone.b_gbps, hol.b_gbps, static_cast<unsigned long long>(hol.uplink_wait_ns));
  EXPECT_GT(alone.b_gbps, 200.0);  // 4x NDR less FEC 8+2 and headers: ~290 Gb/s of payload at most
  // B's own path has room for ~300 Gb/s next to the 100 Gb/s for C; HOL blocking caps it far
  // lower, and the congestion shows upstream as XmitWait on s1's uplink.
  EXPECT_LT(hol.b_gbps, 0.6 * alone.b_gbps);
  EXPECT_GT(hol.uplink_wait_ns, 0u);
}

TEST(Congestion, TwoVlsShareACongestedLinkInTheArbitrationRatio) {
  Star s = star(3);
  sim::Simulator sim({.seed = 9});
  FabricConfig cfg;
  cfg.mode = DataMode::kTimingOnly;
  cfg.data_vls = 2;
  cfg.sl2vl.vl_of_sl[1] = 1;
  cfg.vl_arb.low = {{0, 48}, {1, 16}};  // 3:1
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  RcConnectParams p0, p1;
  p1.sl = 1;
  RcEndpoint a = make_endpoint(f, s.hosts[0], 65536, p0),
             ra = make_endpoint(f, s.hosts[2], 65536, p0);
  RcEndpoint b = make_endpoint(f, s.hosts[1], 65536, p1),
             rb = make_endpoint(f, s.hosts[2], 65536, p1);
  ASSERT_EQ(connect_rc(f, a, ra, p0), Errc::kOk);
  ASSERT_EQ(connect_rc(f, b, rb, p1), Errc::kOk);
  std::vector<WriteStream> st{{&a, &ra, 65536, 4}, {&b, &rb, 65536, 4}};
  run_streams(f, st, 30'000);
  const PortCounters c0 = f.counters(s.sw, 3);
  run_streams(f, st, 230'000);
  const PortCounters& c1 = f.counters(s.sw, 3);
  const double v0 = static_cast<double>(c1.xmit_bytes_vl[0] - c0.xmit_bytes_vl[0]);
  const double v1 = static_cast<double>(c1.xmit_bytes_vl[1] - c0.xmit_bytes_vl[1]);
  std::printf("VL0:VL1 bytes = %.3f (weights 3:1)\n", v0 / v1);
  EXPECT_NEAR(v0 / v1, 3.0, 0.09);
  EXPECT_EQ(f.totals().buffer_overflows, 0u);
}

struct FecRun {
  PortCounters tot;
  std::uint64_t completed = 0, errors = 0, retransmits = 0;
  std::uint64_t hash = 0;
};

FecRun fec_run(double ber, DataMode mode, std::uint64_t seed, std::uint64_t messages) {
  Star s = star(2);
  sim::Simulator sim({.seed = seed});
  FabricConfig cfg;
  cfg.mode = mode;
  cfg.link.ber = ber;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  RcEndpoint a = make_endpoint(f, s.hosts[0], 65536), b = make_endpoint(f, s.hosts[1], 65536);
  EXPECT_EQ(connect_rc(f, a, b), Errc::kOk);
  std::vector<WriteStream> st{{&a, &b, 65536, 4, messages}};
  for (int i = 0; i < 2000 && st[0].completed < messages; ++i) {
    run_streams(f, st, sim.now() + 50'000, 2000);
  }
  FecRun r;
  r.tot = f.totals();
  r.completed = st[0].completed;
  r.errors = st[0].errors;
  r.retransmits = f.device(s.hosts[0]).counters().retransmit_packets;
  r.hash = sim.trace_hash();
  return r;
}

TEST(Errors, CorrectableBerDropsNothing) {
  for (const auto mode : {DataMode::kVerified, DataMode::kTimingOnly}) {
    const FecRun r = fec_run(2e-6, mode, 21, 200);
    EXPECT_EQ(r.completed, 200u);
    EXPECT_EQ(r.errors, 0u);
    EXPECT_GT(r.tot.fec_corrected_blocks, 0u);
    EXPECT_GT(r.tot.symbol_error_counter, 0u);
    EXPECT_EQ(r.tot.port_rcv_errors, 0u);
    EXPECT_EQ(r.retransmits, 0u);
  }
}

TEST(Errors, UncorrectableErrorsAreDroppedCountedAndRepairedByRc) {
  for (const auto mode : {DataMode::kVerified, DataMode::kTimingOnly}) {
    const FecRun r = fec_run(6e-5, mode, 22, 40);
    std::printf("BER 6e-5: PortRcvErrors %llu, uncorrectable %llu, retransmitted %llu\n",
                static_cast<unsigned long long>(r.tot.port_rcv_errors),
                static_cast<unsigned long long>(r.tot.fec_uncorrectable),
                static_cast<unsigned long long>(r.retransmits));
    EXPECT_EQ(r.completed, 40u);
    EXPECT_EQ(r.errors, 0u);
    EXPECT_GT(r.tot.port_rcv_errors, 0u);
    EXPECT_GT(r.tot.fec_uncorrectable, 0u);
    EXPECT_GT(r.retransmits, 0u);
    EXPECT_EQ(r.tot.buffer_overflows, 0u);
  }
}

// A Device whose packets carry ICRC and VCRC zero, as the packets of processes attached to the
// fabric daemon do (CrcMode::kModel; the relay puts their images into a verified fabric as they
// are): write_to then copies the zeros instead of computing the CRCs.
class NoCrcDevice final : public ForwardingDevice {
 public:
  explicit NoCrcDevice(std::unique_ptr<Device> d) : ForwardingDevice(d.get()), own_(std::move(d)) {}
  bool poll_transmit(TimeNs now, TxPacket& out) override {
    if (!ForwardingDevice::poll_transmit(now, out)) return false;
    out.icrc = 0;
    out.vcrc = 0;
    out.crcs_valid = true;
    return true;
  }

 private:
  std::unique_ptr<Device> own_;
};

// Devices that write no VCRC (NoCrcDevice) across two links with bit
// errors, h0 -> switch and switch -> h1. The VCRC is the link's (IBA 7.8.2): each port with bit
// errors checks the one its sender would have written, so only packets whose damage FEC could
// not repair are dropped; before, every packet failed there and nothing completed. Per link,
// every packet sent is received or counted in PortRcvErrors; RC repairs the loss byte-exact.
TEST(Errors, PacketsWithoutAVcrcAreDroppedOnlyWhenBitErrorsHitThem) {
  Star s = star(2);
  sim::Simulator sim({.seed = 23});
  FabricConfig cfg;
  cfg.mode = DataMode::kVerified;
  Fabric f(sim, s.t, cfg);
  SeededRng rng(5);
  for (const topo::NodeId h : s.hosts) {
    DeviceConfig dc = f.device(h).config();
    dc.crc = CrcMode::kModel;
    f.hca(h).replace_device(std::make_unique<NoCrcDevice>(Device::create(dc, rng)));
  }
  f.configure_min_hop();
  PortFaults pf;
  pf.ber = 6e-5;  // with FEC 8+2, a few percent of 1 KiB packets lost
  const topo::NodeId h0 = s.hosts[0], h1 = s.hosts[1];
  ASSERT_TRUE(f.set_port_faults(s.sw, 1, pf));  // from h0
  ASSERT_TRUE(f.set_port_faults(h1, 1, pf));    // from the switch
  RcEndpoint a = make_endpoint(f, h0, 65536), b = make_endpoint(f, h1, 65536);
  for (std::size_t i = 0; i < a.mem.size(); ++i)
    a.mem[i] = static_cast<std::uint8_t>(i * 7 + (i >> 9));
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  constexpr std::uint64_t kMessages = 40;
  std::vector<WriteStream> st{{&a, &b, 65536, 4, kMessages}};
  for (int i = 0; i < 2000 && st[0].completed < kMessages; ++i)
    run_streams(f, st, sim.now() + 50'000, 2000);
  run_streams(f, st, sim.now() + 1'000'000, 2000);  // quiet: nothing left in flight
  EXPECT_EQ(st[0].completed, kMessages);
  EXPECT_EQ(st[0].errors, 0u);
  EXPECT_EQ(a.mem, b.mem);
  const PortCounters &tx = f.counters(h0, 1), &in = f.counters(s.sw, 1);
  const PortCounters &out = f.counters(s.sw, 2), &rx = f.counters(h1, 1);
  std::printf(
      "no VCRC, BER 6e-5: h0 sent %llu, switch dropped %llu; switch sent %llu, h1 "
      "dropped %llu; retransmitted %llu\n",
      static_cast<unsigned long long>(tx.xmit_pkts),
      static_cast<unsigned long long>(in.port_rcv_errors),
      static_cast<unsigned long long>(out.xmit_pkts),
      static_cast<unsigned long long>(rx.port_rcv_errors),
      static_cast<unsigned long long>(f.device(h0).counters().retransmit_packets));
  EXPECT_EQ(tx.xmit_pkts, in.rcv_pkts + in.port_rcv_errors);
  EXPECT_EQ(out.xmit_pkts, rx.rcv_pkts + rx.port_rcv_errors);
  for (const PortCounters* c : {&in, &rx}) {
    EXPECT_GT(c->port_rcv_errors, 0u);
    EXPECT_LT(c->port_rcv_errors * 10, c->rcv_pkts);  // lossy, not dead
    EXPECT_GT(c->fec_corrected_blocks, 0u);
  }
  EXPECT_GT(f.device(h0).counters().retransmit_packets, 0u);
}

TEST(Determinism, SameSeedSameTraceOtherSeedOtherTrace) {
  const FecRun a = fec_run(1e-5, DataMode::kTimingOnly, 7, 30);
  const FecRun b = fec_run(1e-5, DataMode::kTimingOnly, 7, 30);
  const FecRun c = fec_run(1e-5, DataMode::kTimingOnly, 8, 30);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_NE(a.hash, c.hash);
}

TEST(Management, Vl15DropsUnderCongestionAreCountedDataVlsNeverDrop) {
  Star s = star(3);
  sim::Simulator sim({.seed = 31});
  FabricConfig cfg;
  cfg.mode = DataMode::kTimingOnly;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  // Data: h1, h2 -> h0 (congests the switch's port to h0); management: h0 floods the SMA.
  RcEndpoint a = make_endpoint(f, s.hosts[1], 65536), ra = make_endpoint(f, s.hosts[0], 65536);
  RcEndpoint b = make_endpoint(f, s.hosts[2], 65536), rb = make_endpoint(f, s.hosts[0], 65536);
  ASSERT_EQ(connect_rc(f, a, ra), Errc::kOk);
  ASSERT_EQ(connect_rc(f, b, rb), Errc::kOk);
  std::vector<WriteStream> st{{&a, &ra, 65536, 4}, {&b, &rb, 65536, 4}};
  run_streams(f, st, 10'000);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(f.send_smp(s.hosts[0], f.lid(s.sw)));
  run_streams(f, st, 400'000);
  const PortCounters& in = f.counters(s.sw, 1);
  std::printf("SMPs: %llu reached the SMA, %llu dropped at VL15\n",
              static_cast<unsigned long long>(f.node(s.sw).mads_received()),
              static_cast<unsigned long long>(in.vl15_dropped));
  EXPECT_GT(in.vl15_dropped, 0u);
  EXPECT_EQ(f.node(s.sw).mads_received() + in.vl15_dropped, 100u);
  EXPECT_EQ(f.totals().buffer_overflows, 0u);
  EXPECT_EQ(f.totals().port_xmit_discards, 0u);
  EXPECT_EQ(device_timeouts(f), 0u);
  for (auto& x : st) EXPECT_EQ(x.errors, 0u);
}

TEST(Links, LinkDownDiscardsAndCountsAndRcRecoversAfterUp) {
  Star s = star(2);
  sim::Simulator sim({.seed = 41});
  FabricConfig cfg;
  cfg.mode = DataMode::kVerified;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  RcEndpoint a = make_endpoint(f, s.hosts[0], 65536), b = make_endpoint(f, s.hosts[1], 65536);
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  std::vector<WriteStream> st{{&a, &b, 65536, 4, 60}};
  f.set_link_state(1, false, 20'000);
  f.set_link_state(1, true, 30'000);
  for (int i = 0; i < 400 && st[0].completed < 60; ++i)
    run_streams(f, st, sim.now() + 50'000, 5000);
  EXPECT_EQ(f.counters(s.sw, 2).link_downed_counter, 1u);
  EXPECT_EQ(f.counters(s.hosts[1], 1).link_downed_counter, 1u);
  EXPECT_GT(f.totals().port_xmit_discards, 0u);
  EXPECT_EQ(st[0].completed, 60u);
  EXPECT_EQ(st[0].errors, 0u);
  EXPECT_EQ(f.totals().buffer_overflows, 0u);
}

}  // namespace
}  // namespace weft::fabric

namespace weft::fabric {
namespace {

TEST(Management, SmaAnswersALidRoutedGetNodeInfoAndPmaCountersFollowTheDataPath) {
  Star s = star(2);
  sim::Simulator sim({.seed = 51});
  Fabric f(sim, s.t);  // verified: MAD bytes are carried
  f.configure_min_hop();
  wire::SmpLid q;
  q.hdr.mgmt_class = static_cast<std::uint8_t>(wire::MgmtClass::kSubnLidRouted);
  q.hdr.method = static_cast<std::uint8_t>(wire::MadMethod::kGet);
  q.hdr.attr_id = static_cast<std::uint16_t>(wire::SmpAttr::kNodeInfo);
  q.hdr.tid = 77;
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  wire::encode_smp(q, mad);
  ASSERT_TRUE(f.send_mad(s.hosts[0], f.lid(s.sw), mad, /*smp=*/true));
  sim.run_until(100'000);
  EXPECT_EQ(f.node(s.sw).state().stats.smps_handled, 1u);
  ASSERT_EQ(f.node(s.hosts[0]).mads_received(), 1u);  // the GetResp came back to QP0
  const auto hdr = wire::decode_mad_header(f.node(s.hosts[0]).last_mad());
  ASSERT_TRUE(hdr.ok());
  EXPECT_EQ(hdr->method, static_cast<std::uint8_t>(wire::MadMethod::kGetResp));
  EXPECT_EQ(hdr->tid, 77u);

  RcEndpoint a = make_endpoint(f, s.hosts[0], 65536), b = make_endpoint(f, s.hosts[1], 65536);
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  std::vector<WriteStream> st{{&a, &b, 65536, 4, 10}};
  run_streams(f, st, sim.now() + 100'000);
  EXPECT_EQ(st[0].completed, 10u);
  for (int port : {1, 2}) {
    const auto& pc = f.node(s.sw).state().ports[port].counters;
    EXPECT_EQ(pc.port_xmit_pkts_ext, f.counters(s.sw, port).xmit_pkts);
    EXPECT_EQ(pc.port_rcv_data_ext, f.counters(s.sw, port).rcv_data);
  }
}

}  // namespace
}  // namespace weft::fabric
