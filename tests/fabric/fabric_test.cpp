// tests/fabric/fabric_test.cpp — the emulated fabric: exact latency, byte-exact RC over one and
// three switches, folded receive events, a zero-length SEND kept behind its WRITE (the fabric
// under load is congestion_test.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "emu/fabric/fabric.hpp"
#include "emu/fabric/workload.hpp"
#include "src/link/fec.hpp"
#include "tests/fabric/star.hpp"

namespace weft::fabric {
namespace {

using test::Star;
using test::star;

void fill(std::vector<std::uint8_t>& v, std::uint8_t seed) {
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 8));
}

// Steps the simulator until `cq` holds a completion; returns it (and the time in *at).
WorkCompletion wait_completion(sim::Simulator& sim, CompletionQueue* cq, TimeNs* at = nullptr) {
  WorkCompletion wc{};
  for (int i = 0; i < 10'000'000; ++i) {
    if (cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1) {
      if (at) *at = sim.now();
      return wc;
    }
    if (sim.step() == sim::StopReason::kEmpty) break;
  }
  ADD_FAILURE() << "no completion";
  return wc;
}

TimeNs pcie_ns(std::uint64_t bytes, const HcaModel& m) {
  const std::uint64_t ps = (bytes * 1'000'000 + m.pcie_mbytes_per_s - 1) / m.pcie_mbytes_per_s;
  return (ps + 999) / 1000;
}

TEST(Fabric, WriteLatencyIsTheSumOfTheModelledParts) {
  Star s = star(2);
  sim::Simulator sim({.seed = 1});
  FabricConfig cfg;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  RcEndpoint a = make_endpoint(f, s.hosts[0], 4096), b = make_endpoint(f, s.hosts[1], 4096);
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  sim.run_until(1000);  // link init FC packets settle
  const TimeNs t0 = sim.now();
  fill(a.mem, 3);
  constexpr std::uint32_t kBytes = 256;
  Sge sge{reinterpret_cast<std::uint64_t>(a.mem.data()), kBytes, a.mr->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data());
  wr.rkey = b.mr->rkey();
  ASSERT_EQ(a.qp->post_send(wr), Errc::kOk);
  f.kick(a.node);
  TimeNs done = 0;
  const WorkCompletion wc = wait_completion(sim, a.cq, &done);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), kBytes), 0);

  // Expect: WRITE out (PCIe read, host latency, NIC), wire, switch, wire, NIC, PCIe write,
  // host latency; then the ACK back without PCIe.
  const HcaModel& m = cfg.hca;
  link::FecCodec fec(cfg.link.fec_config);
  auto ser = [&](std::uint32_t wire) {
    return link::serialization_ns(link::kDefaultLinkRate, fec.codeword_bytes(wire));
  };
  const TimeNs prop = s.t.link(0).propagation_ns();
  const std::uint32_t write_wire = 8 + 12 + 16 + kBytes + 6;  // LRH BTH RETH payload CRCs
  const std::uint32_t ack_wire = 8 + 12 + 4 + 6;              // LRH BTH AETH CRCs
  TimeNs t = t0 + pcie_ns(kBytes, m) + m.host_latency_ns + m.tx_proc_ns;  // on the wire
  t += prop + cfg.sw.latency_ns;  // cut-through: head into the switch, out again
  t += ser(write_wire) + prop;    // tail at the responder
  t += m.rx_proc_ns + pcie_ns(kBytes, m) + m.host_latency_ns;  // placed in memory, ACK made
  t += m.tx_proc_ns + prop + cfg.sw.latency_ns + ser(ack_wire) + prop + m.rx_proc_ns;
  EXPECT_EQ(done, t) << "t0=" << t0;
}

// RC WRITE, SEND and READ of `bytes` between hosts[0] and hosts[last], byte-exact.
void rc_ops_byte_exact(Fabric& f, topo::NodeId x, topo::NodeId y, std::uint32_t bytes) {
  RcEndpoint a = make_endpoint(f, x, bytes * 2), b = make_endpoint(f, y, bytes * 2);
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  fill(a.mem, 1);
  fill(b.mem, 99);
  // WRITE a[0..bytes) -> b[0..bytes)
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
  // READ b[bytes..2*bytes) -> a[bytes..)
  Sge rsge{reinterpret_cast<std::uint64_t>(a.mem.data() + bytes), bytes, a.mr->lkey()};
  SendWr rd = wr;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.sg_list = std::span<const Sge>(&rsge, 1);
  rd.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data() + bytes);
  ASSERT_EQ(a.qp->post_send(rd), Errc::kOk);
  f.kick(x);
  ASSERT_EQ(wait_completion(f.sim(), a.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data() + bytes, b.mem.data() + bytes, bytes), 0);
  // SEND b <- a: receive into b[bytes..)
  fill(a.mem, 42);
  Sge recv_sge{reinterpret_cast<std::uint64_t>(b.mem.data() + bytes), bytes, b.mr->lkey()};
  RecvWr rwr;
  rwr.sg_list = std::span<const Sge>(&recv_sge, 1);
  ASSERT_EQ(b.qp->post_recv(rwr), Errc::kOk);
  SendWr snd = wr;
  snd.opcode = WrOpcode::kSend;
  ASSERT_EQ(a.qp->post_send(snd), Errc::kOk);
  f.kick(x);
  ASSERT_EQ(wait_completion(f.sim(), a.cq).status, WcStatus::kSuccess);
  const WorkCompletion rc = wait_completion(f.sim(), b.cq);
  EXPECT_EQ(rc.status, WcStatus::kSuccess);
  EXPECT_EQ(rc.byte_len, bytes);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data() + bytes, bytes), 0);
}

TEST(Fabric, RcOpsByteExactThroughOneSwitch) {
  Star s = star(2);
  sim::Simulator sim({.seed = 2});
  Fabric f(sim, s.t);
  f.configure_min_hop();
  rc_ops_byte_exact(f, s.hosts[0], s.hosts[1], 100'000);
  EXPECT_EQ(f.totals().buffer_overflows, 0u);
}

TEST(Fabric, RcOpsByteExactOverThreeSwitchLevels) {
  // h0 - leaf0 - spine - leaf1 - h1 plus a core above the spines: a 3-level path h0->h1 via
  // leaf, aggregation and core.
  topo::Topology t;
  const auto leaf0 = t.add_switch(0x10, 8, "leaf0"), leaf1 = t.add_switch(0x11, 8, "leaf1");
  const auto agg0 = t.add_switch(0x20, 8, "agg0"), agg1 = t.add_switch(0x21, 8, "agg1");
  const auto core = t.add_switch(0x30, 8, "core");
  const auto h0 = t.add_hca(0x100, 1, "h0"), h1 = t.add_hca(0x200, 1, "h1");
  t.connect({h0, 1}, {leaf0, 1});
  t.connect({h1, 1}, {leaf1, 1});
  t.connect({leaf0, 2}, {agg0, 1});
  t.connect({leaf1, 2}, {agg1, 1});
  t.connect({agg0, 2}, {core, 1});
  t.connect({agg1, 2}, {core, 2});
  for (const auto mode : {DataMode::kVerified, DataMode::kTimingOnly}) {
    sim::Simulator sim({.seed = 3});
    FabricConfig cfg;
    cfg.mode = mode;
    Fabric f(sim, t, cfg);
    f.configure_min_hop();
    if (mode == DataMode::kVerified) {
      rc_ops_byte_exact(f, h0, h1, 50'000);
    } else {
      RcEndpoint a = make_endpoint(f, h0, 65536), b = make_endpoint(f, h1, 65536);
      ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
      std::vector<WriteStream> st{{&a, &b, 65536, 4, 20}};
      run_streams(f, st, 200'000);
      EXPECT_EQ(st[0].completed, 20u);
      EXPECT_EQ(st[0].errors, 0u);
    }
    EXPECT_GT(f.counters(core, 2).xmit_pkts, 0u);  // went over the core
    EXPECT_EQ(f.totals().buffer_overflows, 0u);
  }
}

// A tap sees every packet a port receives; attaching one turns off the HCA's folded receive
// (one event at the delivery time, Node::arrival_event_ns) so it can stamp arrival times. The
// fold must not move anything the Device or the user sees: the same completions at the same
// virtual times, with fewer events.
struct NullTap : PacketTap {
  std::uint64_t packets = 0;
  void on_receive(topo::NodeId, int, const Packet&, TimeNs) override { packets++; }
};

struct StreamResult {
  std::vector<TimeNs> done;
  std::uint64_t events = 0;
};

StreamResult write_stream(bool tap) {
  Star s = star(2);
  sim::Simulator sim({.seed = 7});
  FabricConfig cfg;
  Fabric f(sim, s.t, cfg);
  NullTap nt;
  if (tap) f.set_tap(&nt);
  f.configure_min_hop();
  constexpr std::uint32_t kBytes = 16384;
  constexpr int kMessages = 8;
  RcEndpoint a = make_endpoint(f, s.hosts[0], kBytes), b = make_endpoint(f, s.hosts[1], kBytes);
  EXPECT_EQ(connect_rc(f, a, b), Errc::kOk);
  sim.run_until(1000);
  fill(a.mem, 5);
  Sge sge{reinterpret_cast<std::uint64_t>(a.mem.data()), kBytes, a.mr->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data());
  wr.rkey = b.mr->rkey();
  for (int i = 0; i < kMessages; ++i) EXPECT_EQ(a.qp->post_send(wr), Errc::kOk);
  f.kick(s.hosts[0]);
  StreamResult r;
  for (int i = 0; i < kMessages; ++i) {
    TimeNs at = 0;
    EXPECT_EQ(wait_completion(sim, a.cq, &at).status, WcStatus::kSuccess);
    r.done.push_back(at);
  }
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), kBytes), 0);
  r.events = sim.events_dispatched();
  if (tap) {
    EXPECT_GT(nt.packets, 8u * kMessages);
  }
  return r;
}

TEST(Fabric, FoldedReceiveKeepsEveryCompletionTimeWithFewerEvents) {
  const StreamResult folded = write_stream(false), unfolded = write_stream(true);
  ASSERT_EQ(folded.done.size(), unfolded.done.size());
  EXPECT_EQ(folded.done, unfolded.done);
  EXPECT_LT(folded.events, unfolded.events);
}

// A zero-length SEND right behind a WRITE on one QP (what src/coll's credit grants are): the
// receiving HCA's model gives the SEND no PCIe time, but it must still reach the Device after the
// WRITE (IBA 9.5: one QP's requests arrive in PSN order over a path; PCIe posted writes stay in
// order). It used to overtake it, so the responder saw a PSN gap with nothing lost: go-back-N
// NAKed and dropped (here 126 dropped, 31 NAKs, 312 packets resent), selective repeat buffered.
TEST(Fabric, ZeroLengthSendDoesNotOvertakeTheWriteBeforeIt) {
  Star s = star(2);
  sim::Simulator sim({.seed = 3});
  FabricConfig cfg;
  Fabric f(sim, s.t, cfg);
  f.configure_min_hop();
  constexpr std::uint32_t kBytes = 4096;
  constexpr int kPairs = 16;
  RcEndpoint a = make_endpoint(f, s.hosts[0], kBytes), b = make_endpoint(f, s.hosts[1], kBytes);
  ASSERT_EQ(connect_rc(f, a, b), Errc::kOk);
  sim.run_until(1000);
  fill(a.mem, 9);
  Sge sge{reinterpret_cast<std::uint64_t>(a.mem.data()), kBytes, a.mr->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = reinterpret_cast<std::uint64_t>(b.mem.data());
  wr.rkey = b.mr->rkey();
  SendWr grant;
  grant.opcode = WrOpcode::kSendWithImm;
  grant.send_flags = kSignaled;
  grant.imm_data = 0x80000001;
  RecvWr rwr;
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(b.qp->post_recv(rwr), Errc::kOk);
    ASSERT_EQ(a.qp->post_send(wr), Errc::kOk);
    ASSERT_EQ(a.qp->post_send(grant), Errc::kOk);
  }
  f.kick(s.hosts[0]);
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(wait_completion(sim, a.cq).status, WcStatus::kSuccess) << i;
    const WorkCompletion rc = wait_completion(sim, b.cq);
    ASSERT_EQ(rc.status, WcStatus::kSuccess) << i;
    EXPECT_EQ(rc.imm_data, 0x80000001u);
  }
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), kBytes), 0);
  const DeviceCounters& ca = f.device(s.hosts[0]).counters();
  const DeviceCounters& cb = f.device(s.hosts[1]).counters();
  EXPECT_EQ(cb.rx_dropped_ooo, 0u);
  EXPECT_EQ(cb.naks_tx_seq, 0u);
  EXPECT_EQ(ca.retransmit_packets, 0u);
  EXPECT_EQ(ca.timeouts, 0u);
}

}  // namespace
}  // namespace weft::fabric
