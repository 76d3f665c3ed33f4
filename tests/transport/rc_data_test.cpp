// tests/transport/rc_data_test.cpp — RC data movement over a lossless pump: SEND/RECV (with
// immediate, multi-packet, multi-SGE, inline), RDMA WRITE (with immediate), READ, atomics. Checks
// packets (opcodes, PSNs, AckReq, AETH), completions and destination bytes, guard bytes intact.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

using wire::Opcode;

void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(seed + i * 7);
}

TEST(RcData, SendOnlyOnePacket) {
  Pair p;
  fill(p.a.data(), 100, 1);
  ASSERT_EQ(p.b.post_recv(0, 200, 77), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 100, 5), Errc::kOk);
  p.run();
  // Expect: one SEND_ONLY at PSN 0x100 with AckReq, answered by one ACK at 0x100.
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].h.bth.opcode, Opcode::kRcSendOnly);
  EXPECT_EQ(a[0].h.bth.psn, 0x100u);
  EXPECT_TRUE(a[0].h.bth.ack_req);
  auto b = p.sent_by(1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].h.bth.opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(b[0].h.bth.psn, 0x100u);
  EXPECT_EQ(wire::aeth_kind(b[0].h.aeth.syndrome), wire::AethKind::kAck);
  EXPECT_EQ(b[0].h.aeth.msn, 1u);
  auto rw = p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].wr_id, 77u);
  EXPECT_EQ(rw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rw[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(rw[0].byte_len, 100u);
  EXPECT_EQ(rw[0].wc_flags, 0u);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 100));
  EXPECT_EQ(p.b.data()[100], 0);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 5u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(sw[0].opcode, WcOpcode::kSend);
  EXPECT_TRUE(p.b.guards_intact());
}

// SEND and WRITE packets are built from a per-QP header template (LRH [GRH] BTH encoded once,
// per-packet fields patched). Expect: every packet is byte-identical to what the wire codec
// encodes from its parsed headers, with and without a GRH, for every SEND/WRITE opcode, odd
// lengths (PadCnt), SE and AckReq; after set_port_lid the template follows the new SLID.
TEST(RcData, TemplatedHeadersEqualTheCodec) {
  for (const bool grh : {false, true}) {
    SCOPED_TRACE(grh ? "GRH" : "LRH only");
    PairOptions o;
    o.grh = grh;
    Pair p(o);
    fill(p.a.data(), 8192, 3);
    for (std::uint64_t i = 0; i < 3; ++i) ASSERT_EQ(p.b.post_recv(i * 4096, 4096, i), Errc::kOk);
    ASSERT_EQ(p.a.post_send(WrOpcode::kSendWithImm, 0, 3001, 1, 0, 0, kSignaled, 0xABCD),
              Errc::kOk);
    ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 5, 7, 2, 0, 0, kSignaled | kInline | kSolicited),
              Errc::kOk);
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 2500, 3, p.b.va(65536), p.b.mr->rkey(), 0),
              Errc::kOk);
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWriteWithImm, 1, 5, 4, p.b.va(70000), p.b.mr->rkey(),
                            kSignaled, 7),
              Errc::kOk);
    p.run();
    std::set<Opcode> seen;
    for (const Packet& pkt : p.sent_by(0)) {
      auto parsed = wire::parse_packet(pkt.bytes);
      ASSERT_TRUE(parsed.ok());
      seen.insert(parsed->h.bth.opcode);
      EXPECT_EQ(parsed->h.has_grh, grh);
      std::vector<std::uint8_t> again(pkt.bytes.size());
      ASSERT_EQ(wire::encode_packet(parsed->h, parsed->payload, again), pkt.bytes.size());
      EXPECT_EQ(again, pkt.bytes) << wire::to_string(parsed->h.bth.opcode);
    }
    EXPECT_EQ(seen,
              (std::set<Opcode>{Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastImm,
                                Opcode::kRcSendOnly, Opcode::kRcWriteFirst, Opcode::kRcWriteMiddle,
                                Opcode::kRcWriteLast, Opcode::kRcWriteOnlyImm}));
    // The responder's ACKs come from the same template.
    std::size_t acks = 0;
    for (const Packet& pkt : p.sent_by(1)) {
      auto parsed = wire::parse_packet(pkt.bytes);
      ASSERT_TRUE(parsed.ok());
      acks += parsed->h.bth.opcode == Opcode::kRcAcknowledge;
      EXPECT_EQ(parsed->h.has_grh, grh);
      std::vector<std::uint8_t> again(pkt.bytes.size());
      ASSERT_EQ(wire::encode_packet(parsed->h, parsed->payload, again), pkt.bytes.size());
      EXPECT_EQ(again, pkt.bytes) << wire::to_string(parsed->h.bth.opcode);
    }
    EXPECT_GT(acks, 0u);
    EXPECT_EQ(p.b.recv_wcs().size(), 3u);
    EXPECT_EQ(0, std::memcmp(p.a.data() + 5, p.b.data() + 4096, 7));
    EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data() + 65536, 2500));

    ASSERT_EQ(p.a.dev->set_port_lid(1, 9), Errc::kOk);
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 5, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
    p.pump->log.clear();
    p.pump->step();
    ASSERT_FALSE(p.sent_by(0).empty());
    EXPECT_EQ(p.sent_by(0)[0].h.lrh.slid, 9u);
  }
}

// A send queue holding one new WQE is built by req_poll_burst's one-WQE path (req_one_only, a
// latency ping-pong's round); several queued WQEs by its ONLY run. Expect: the same WQEs give
// byte-identical packets (CRCs included; the RETH's VA, which names each pair's own buffer, is
// checked and then set alike) both ways, for every SEND/WRITE opcode, lengths 0 to
// the PMTU (PadCnt), SE, AckReq with and without delayed ACKs, with and without a GRH, across the
// PSN wrap at 2^24; a READ (not an ONLY WQE) alone in the queue is left to the general path; the
// data and completions are the same.
TEST(RcData, OneWqeFastPathEqualsTheRunPathByteForByte) {
  struct Wr {
    WrOpcode op;
    std::uint32_t len, flags, imm;
  };
  const std::vector<Wr> wrs = {
      {WrOpcode::kRdmaWrite, 8, 0, 0},
      {WrOpcode::kRdmaWrite, 8, kSignaled, 0},
      {WrOpcode::kRdmaWriteWithImm, 5, kSignaled | kSolicited, 0xA1B2C3D4},
      {WrOpcode::kSend, 0, kSignaled, 0},
      {WrOpcode::kSendWithImm, 7, kSolicited, 0x01020304},
      {WrOpcode::kRdmaWrite, 1024, kSignaled, 0},
      {WrOpcode::kRdmaWrite, 0, 0, 0},
      {WrOpcode::kRdmaRead, 8, kSignaled, 0},
      {WrOpcode::kSend, 3, kSolicited | kSignaled, 0},
      {WrOpcode::kRdmaWriteWithImm, 1023, 0, 0x55AA55AA},
      {WrOpcode::kRdmaWrite, 6, 0, 0},
  };
  for (const bool grh : {false, true})
    for (const TimeNs ack_delay : {TimeNs{0}, TimeNs{50'000}}) {
      SCOPED_TRACE(std::string(grh ? "GRH" : "LRH only") + (ack_delay ? ", delayed ACKs" : ""));
      PairOptions o;
      o.grh = grh;
      o.ack_delay_ns = ack_delay;
      o.psn_a = 0xFFFFFA;  // the WQEs cross the PSN wrap
      Pair one(o), run(o);
      for (Pair* p : {&one, &run}) {
        p->pump->by_ref = true;
        p->pump->burst = true;
        p->pump->burst_packets = 16;
        fill(p->a.data(), 8192, 5);
        for (std::uint64_t i = 0; i < 16; ++i)
          ASSERT_EQ(p->b.post_recv(i * 2048, 2048, i), Errc::kOk);
        // A first exchange: B's ACK gives A its end-to-end credits (IBA 9.7.7.2.5), so the run
        // below is not held to one SEND at a time.
        ASSERT_EQ(p->a.post_send(WrOpcode::kSend, 0, 4, 100), Errc::kOk);
        p->run();
        p->pump->log.clear();
      }
      const auto post = [&](Pair& p, std::size_t i) {
        Wr w = wrs[i];
        // Without delayed ACKs a WQE not last in the queue asks for no ACK unless signaled or
        // credit-consuming, while one alone does: only WQEs whose AckReq both ways agree.
        if (!ack_delay && (w.op == WrOpcode::kRdmaWrite || w.op == WrOpcode::kRdmaWriteWithImm))
          w.flags |= kSignaled;
        const bool read = w.op == WrOpcode::kRdmaRead;
        const std::uint64_t remote = p.b.va(65536 + i * 2048);
        return p.a.post_send(w.op, read ? 4096 + i * 64 : i * 256, w.len, i, remote, p.b.mr->rkey(),
                             w.flags, w.imm);
      };
      for (std::size_t i = 0; i < wrs.size(); ++i) {
        ASSERT_EQ(post(one, i), Errc::kOk);
        one.pump->step();  // alone in the queue: the one-WQE path
      }
      one.run();
      for (std::size_t i = 0; i < wrs.size(); ++i) ASSERT_EQ(post(run, i), Errc::kOk);
      run.run();
      const auto one_pkts = one.sent_by(0), run_pkts = run.sent_by(0);
      ASSERT_EQ(one_pkts.size(), wrs.size());
      ASSERT_EQ(run_pkts.size(), wrs.size());
      for (std::size_t i = 0; i < wrs.size(); ++i) {
        SCOPED_TRACE(i);
        // The pairs' buffers (the RETH's VA, and so the ICRC) differ: one's packet is what the
        // codec encodes from its own parse, byte for byte, and with run's VA it is run's packet.
        auto parsed = wire::parse_packet(one_pkts[i].bytes);
        ASSERT_TRUE(parsed.ok());
        std::vector<std::uint8_t> again(one_pkts[i].bytes.size());
        ASSERT_EQ(wire::encode_packet(parsed->h, parsed->payload, again), again.size());
        EXPECT_EQ(again, one_pkts[i].bytes);
        if (wrs[i].op == WrOpcode::kRdmaWrite || wrs[i].op == WrOpcode::kRdmaWriteWithImm ||
            wrs[i].op == WrOpcode::kRdmaRead) {  // a RETH (9.3.3)
          const std::uint64_t off = 65536 + i * 2048;
          EXPECT_EQ(parsed->h.reth.va, one.b.va(off));
          EXPECT_EQ(run_pkts[i].h.reth.va, run.b.va(off));
          parsed->h.reth.va = run.b.va(off);
          ASSERT_EQ(wire::encode_packet(parsed->h, parsed->payload, again), again.size());
        }
        EXPECT_EQ(again, run_pkts[i].bytes);
        EXPECT_EQ(one_pkts[i].h.bth.psn, (0xFFFFFBu + i) & 0xFFFFFFu);
      }
      EXPECT_EQ(0, std::memcmp(one.b.data(), run.b.data(), 1 << 20));
      EXPECT_EQ(0, std::memcmp(one.a.data(), run.a.data(), 1 << 20));
      const auto wcs_one = one.a.send_wcs(), wcs_run = run.a.send_wcs();
      ASSERT_EQ(wcs_one.size(), wcs_run.size());
      for (std::size_t i = 0; i < wcs_one.size(); ++i) {
        EXPECT_EQ(wcs_one[i].wr_id, wcs_run[i].wr_id);
        EXPECT_EQ(wcs_one[i].status, WcStatus::kSuccess);
      }
      EXPECT_EQ(one.a.dev->counters().tx_packets, run.a.dev->counters().tx_packets);
      EXPECT_EQ(one.a.dev->counters().tx_bytes, run.a.dev->counters().tx_bytes);
      // An unsignaled WRITE alone (the end of what is queued) asks for an ACK unless the
      // responder may delay it (req_poll's rule).
      one.pump->log.clear();
      ASSERT_EQ(one.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 99, one.b.va(0), one.b.mr->rkey(), 0),
                Errc::kOk);
      one.pump->step();
      ASSERT_FALSE(one.sent_by(0).empty());
      EXPECT_EQ(one.sent_by(0)[0].h.bth.ack_req, ack_delay == 0);
    }
}

TEST(RcData, SendMultiPacketWithImmSegmentsByMtu) {
  PairOptions o;
  o.mtu = Mtu::k256;
  Pair p(o);
  fill(p.a.data(), 1000, 3);
  ASSERT_EQ(p.b.post_recv(0, 4096, 1), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSendWithImm, 0, 1000, 2, 0, 0, kSignaled, 0xCAFEBABE),
            Errc::kOk);
  p.run();
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].h.bth.opcode, Opcode::kRcSendFirst);
  EXPECT_EQ(a[1].h.bth.opcode, Opcode::kRcSendMiddle);
  EXPECT_EQ(a[2].h.bth.opcode, Opcode::kRcSendMiddle);
  EXPECT_EQ(a[3].h.bth.opcode, Opcode::kRcSendLastImm);
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(a[i].h.bth.psn, 0x100 + i);
  EXPECT_EQ(a[0].payload_bytes, 256u);
  EXPECT_EQ(a[3].payload_bytes, 1000u - 768u);
  EXPECT_EQ(a[3].h.imm, 0xCAFEBABEu);
  EXPECT_TRUE(a[3].h.bth.ack_req);
  EXPECT_FALSE(a[0].h.bth.ack_req);
  auto rw = p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].byte_len, 1000u);
  EXPECT_EQ(rw[0].imm_data, 0xCAFEBABEu);
  EXPECT_EQ(rw[0].wc_flags, std::uint32_t{kWcWithImm});
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 1000));
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

TEST(RcData, PsnWrapsAt24Bits) {
  PairOptions o;
  o.mtu = Mtu::k256;
  o.psn_a = 0xFFFFFE;
  Pair p(o);
  ASSERT_EQ(p.b.post_recv(0, 4096, 1), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 1024, 2), Errc::kOk);
  p.run();
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].h.bth.psn, 0xFFFFFEu);
  EXPECT_EQ(a[1].h.bth.psn, 0xFFFFFFu);
  EXPECT_EQ(a[2].h.bth.psn, 0u);
  EXPECT_EQ(a[3].h.bth.psn, 1u);
  ASSERT_EQ(p.a.send_wcs().size(), 1u);
  ASSERT_EQ(p.b.recv_wcs().size(), 1u);
}

TEST(RcData, RdmaWriteMultiPacketExactBytes) {
  Pair p;
  fill(p.a.data(), 5000, 9);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 5000, 11, p.b.va(100), p.b.mr->rkey()),
            Errc::kOk);
  p.run();
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 5u);  // 1024-byte MTU
  EXPECT_EQ(a[0].h.bth.opcode, Opcode::kRcWriteFirst);
  EXPECT_EQ(a[0].h.reth.dma_len, 5000u);
  EXPECT_EQ(a[0].h.reth.va, p.b.va(100));
  EXPECT_EQ(a[4].h.bth.opcode, Opcode::kRcWriteLast);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data() + 100, 5000));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.b.data()[i], 0);
  EXPECT_EQ(p.b.data()[5100], 0);
  EXPECT_TRUE(p.b.guards_intact());
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(p.b.recv_wcs().size(), 0u);
}

TEST(RcData, RdmaWriteWithImmConsumesReceive) {
  Pair p;
  fill(p.a.data(), 64, 4);
  ASSERT_EQ(p.b.post_recv(0, 0, 42), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWriteWithImm, 0, 64, 1, p.b.va(4096), p.b.mr->rkey(),
                          kSignaled, 0x1234),
            Errc::kOk);
  p.run();
  auto rw = p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].wr_id, 42u);
  EXPECT_EQ(rw[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(rw[0].byte_len, 64u);
  EXPECT_EQ(rw[0].imm_data, 0x1234u);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data() + 4096, 64));
}

TEST(RcData, RdmaReadMultiPacket) {
  Pair p;
  fill(p.b.data() + 8192, 3000, 5);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 0, 3000, 8, p.b.va(8192), p.b.mr->rkey()),
            Errc::kOk);
  p.run();
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].h.bth.opcode, Opcode::kRcReadRequest);
  EXPECT_EQ(a[0].h.reth.dma_len, 3000u);
  auto b = p.sent_by(1);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].h.bth.opcode, Opcode::kRcReadResponseFirst);
  EXPECT_EQ(b[1].h.bth.opcode, Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(b[2].h.bth.opcode, Opcode::kRcReadResponseLast);
  EXPECT_EQ(b[0].h.bth.psn, 0x100u);
  EXPECT_EQ(b[2].h.bth.psn, 0x102u);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data() + 8192, 3000));
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(sw[0].byte_len, 3000u);
  EXPECT_TRUE(p.a.guards_intact());
  // The next request takes the PSN after the read's three.
  ASSERT_EQ(p.b.post_recv(0, 64, 1), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 8, 9), Errc::kOk);
  p.run();
  EXPECT_EQ(p.pump->log.back().h.bth.psn, 0x103u);
}

TEST(RcData, AtomicsReturnOriginalAndUpdate) {
  Pair p;
  std::uint64_t v = 10;
  std::memcpy(p.b.data() + 64, &v, 8);
  SendWr wr;
  Sge sge{p.a.va(0), 8, p.a.mr->lkey()};
  wr.sg_list = {&sge, 1};
  wr.send_flags = kSignaled;
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.remote_addr = p.b.va(64);
  wr.rkey = p.b.mr->rkey();
  wr.compare_add = 5;
  wr.wr_id = 1;
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  p.run();
  std::uint64_t got, now;
  std::memcpy(&got, p.a.data(), 8);
  std::memcpy(&now, p.b.data() + 64, 8);
  EXPECT_EQ(got, 10u);
  EXPECT_EQ(now, 15u);
  // CMP_AND_SWP that matches, then one that does not.
  wr.opcode = WrOpcode::kAtomicCmpAndSwp;
  wr.compare_add = 15;
  wr.swap = 99;
  wr.wr_id = 2;
  sge.addr = p.a.va(8);
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  wr.compare_add = 15;
  wr.swap = 7;
  wr.wr_id = 3;
  Sge sge2{p.a.va(16), 8, p.a.mr->lkey()};
  wr.sg_list = {&sge2, 1};
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  p.run();
  std::memcpy(&got, p.a.data() + 8, 8);
  EXPECT_EQ(got, 15u);
  std::memcpy(&got, p.a.data() + 16, 8);
  EXPECT_EQ(got, 99u);
  std::memcpy(&now, p.b.data() + 64, 8);
  EXPECT_EQ(now, 99u);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 3u);
  EXPECT_EQ(sw[0].opcode, WcOpcode::kFetchAdd);
  EXPECT_EQ(sw[1].opcode, WcOpcode::kCompSwap);
  EXPECT_EQ(sw[2].wr_id, 3u);
  for (auto& w : sw) EXPECT_EQ(w.status, WcStatus::kSuccess);
  auto b = p.sent_by(1);
  EXPECT_EQ(b[0].h.bth.opcode, Opcode::kRcAtomicAcknowledge);
  EXPECT_EQ(b[0].h.atomic_ack_eth.orig, 10u);
}

TEST(RcData, MultiSgeAndInline) {
  Pair p;
  fill(p.a.data(), 4096, 1);
  Sge sges[3] = {{p.a.va(0), 500, p.a.mr->lkey()},
                 {p.a.va(2000), 700, p.a.mr->lkey()},
                 {p.a.va(3000), 300, p.a.mr->lkey()}};
  SendWr wr;
  wr.wr_id = 1;
  wr.send_flags = kSignaled;
  wr.sg_list = sges;
  ASSERT_EQ(p.b.post_recv(10000, 2000, 1), Errc::kOk);
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  // Inline: the source can change right after posting.
  std::uint8_t tmp[40];
  fill(tmp, 40, 77);
  Sge isge{reinterpret_cast<std::uintptr_t>(tmp), 40, 0};
  SendWr iwr;
  iwr.wr_id = 2;
  iwr.send_flags = kSignaled | kInline;
  iwr.sg_list = {&isge, 1};
  ASSERT_EQ(p.b.post_recv(20000, 100, 2), Errc::kOk);
  ASSERT_EQ(p.a.qp->post_send(iwr), Errc::kOk);
  std::uint8_t expect_inline[40];
  std::memcpy(expect_inline, tmp, 40);
  std::memset(tmp, 0, 40);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.b.data() + 10000, p.a.data(), 500));
  EXPECT_EQ(0, std::memcmp(p.b.data() + 10500, p.a.data() + 2000, 700));
  EXPECT_EQ(0, std::memcmp(p.b.data() + 11200, p.a.data() + 3000, 300));
  EXPECT_EQ(0, std::memcmp(p.b.data() + 20000, expect_inline, 40));
  auto rw = p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 2u);
  EXPECT_EQ(rw[0].byte_len, 1500u);
  EXPECT_EQ(rw[1].byte_len, 40u);
}

TEST(RcData, ByReferenceDeliveryAndModelledCrcs) {
  PairOptions o;
  o.crc = CrcMode::kModel;
  Pair p(o);
  p.pump->by_ref = true;
  fill(p.a.data(), 10000, 2);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 10000, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 10000));
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

// A RemotePayload (the shared-memory medium's CrossMemory, which gathers the copies itself) gets
// a burst's run of WRITE MIDDLE/LAST packets with contiguous payloads in one place() call, as
// receive_run coalesces its own copies, not one call per packet (bench/io/README.md, session
// 22). Bytes exact; every byte placed once.
class CountingPayload final : public RemotePayload {
 public:
  void place(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) override {
    std::memcpy(dst, src, len);  // the "remote" memory is this process's here
    ++calls;
    bytes += len;
  }
  std::size_t calls = 0, bytes = 0;
};

TEST(RcData, ARunOfWritePacketsReachesARemotePayloadInOnePlace) {
  PairOptions o;
  o.crc = CrcMode::kModel;
  Pair p(o);
  p.pump->by_ref = true;
  p.pump->burst = true;
  p.pump->burst_packets = 16;
  CountingPayload rp;
  p.b.dev->set_remote_payload(&rp);
  constexpr std::uint32_t kLen = 16 * 1024;  // 16 packets of the 1024-byte MTU: one burst
  fill(p.a.data(), kLen, 7);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, kLen, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  p.b.dev->set_remote_payload(nullptr);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), kLen));
  EXPECT_EQ(rp.bytes, kLen);
  // The FIRST (its own path), then the 15 MIDDLE/LAST packets in one call.
  EXPECT_EQ(rp.calls, 2u);
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

// SEND ONLY, WRITE FIRST (with its RETH), WRITE MIDDLE/LAST and ACK packets without a GRH take
// the Device's lean receive path (by reference in CrcMode::kModel, or as bytes once their CRCs
// check); with a GRH they take the general one. The burst run posts each round's WRs as lists
// (post_send_burst / post_recv_burst) and moves packets in bursts of 3-16 (poll_transmit_burst's
// lean build of single-packet SEND/WRITE WQEs and its run of MIDDLE packets, on_packet_burst's
// per-burst routing checks, held ACKs and its receive runs of WRITE MIDDLE and of SEND ONLY
// packets). Each round has a run of small SENDs (zero-length and padded ones among them) and a
// 20-packet WRITE, so the runs meet drops (gaps: out-of-sequence packets), duplicates, RNR
// waits (fewer receives than SENDs) in their middle; seeds 21-26 give every CQ 6 entries, never
// polled, so a CQ overrun errors the QPs in the middle of a burst. Expect: lean (by reference,
// as bytes, in bursts) and general runs put the same packets on the wire (GRH aside), complete
// the same work requests with the same statuses, count the same and leave the same bytes — so
// neither the lean paths nor the bursts change anything observable.
TEST(RcData, LeanReceivePathMatchesTheGeneralPath) {
  struct Outcome {
    std::vector<std::vector<std::uint8_t>> wire;
    std::vector<std::tuple<std::uint64_t, WcStatus, WcOpcode, std::uint32_t>> wcs;
    std::vector<std::uint64_t> counters;
    std::vector<std::uint8_t> memory;
  };
  enum class Path { kLeanByRef, kLeanBytes, kBurst, kGeneral };
  auto run = [](Path path, std::uint64_t seed) {
    const bool by_ref = path == Path::kLeanByRef || path == Path::kBurst;
    const bool burst = path == Path::kBurst;
    PairOptions o;
    o.crc = by_ref ? CrcMode::kModel : CrcMode::kCompute;
    o.grh = path == Path::kGeneral;
    o.mtu = Mtu::k1024;
    o.timeout = 10;
    if (seed > 20) o.cq_depth = 6;
    // Seeds 11-20: a 16-slot receive ring (at most 13 receives outstanding here), so that the
    // 60 receives wrap it three times and runs of SEND ONLY packets cross its end.
    if (seed > 10 && seed <= 20) o.caps.max_recv_wr = 16;
    Pair p(o);
    p.pump->by_ref = by_ref;
    p.pump->burst = burst;
    p.pump->burst_packets = 3 + seed % 14;
    SeededRng faults(seed);
    p.pump->hook = [&](Packet&) {
      if (faults.chance(0.08)) return Action::kDrop;
      if (faults.chance(0.05)) return Action::kDuplicate;
      return Action::kDeliver;
    };
    fill(p.a.data(), 65536, static_cast<std::uint8_t>(seed));
    // Receives and sends, posted one call per WR or (burst) as one list.
    std::vector<Sge> sges;
    std::vector<RecvWr> recvs;
    std::vector<SendWr> sends;
    sges.reserve(64);
    const auto recv = [&](std::size_t off, std::uint64_t wr_id) {
      sges.push_back(Sge{p.b.va(off), 4096, p.b.mr->lkey()});
      recvs.push_back(RecvWr{wr_id, {&sges.back(), 1}});
    };
    const auto send = [&](WrOpcode op, std::size_t off, std::uint32_t len, std::uint64_t wr_id,
                          std::uint64_t remote_addr, std::uint32_t flags,
                          std::uint32_t rkey_xor = 0) {
      sges.push_back(Sge{p.a.va(off), len, p.a.mr->lkey()});
      SendWr wr;
      wr.wr_id = wr_id;
      wr.opcode = op;
      wr.send_flags = flags;
      wr.sg_list = {&sges.back(), len ? 1u : 0u};
      wr.remote_addr = remote_addr;
      wr.rkey = p.b.mr->rkey() ^ rkey_xor;
      wr.imm_data = static_cast<std::uint32_t>(wr_id * 7);
      sends.push_back(wr);
    };
    const auto post = [&] {
      std::size_t n = 0;
      if (burst) {
        EXPECT_EQ(p.b.qp->post_recv_burst(recvs, n), Errc::kOk);
        EXPECT_EQ(n, recvs.size());
        EXPECT_EQ(p.a.qp->post_send_burst(sends, n), Errc::kOk);
        EXPECT_EQ(n, sends.size());
      } else {
        for (const RecvWr& r : recvs) EXPECT_EQ(p.b.qp->post_recv(r), Errc::kOk);
        for (const SendWr& w : sends) EXPECT_EQ(p.a.qp->post_send(w), Errc::kOk);
      }
      recvs.clear();
      sends.clear();
      sges.clear();
    };
    // Pump steps while receives are short: each RNR NAK cycle risks a timeout at this loss rate
    // (a dropped SEND or NAK), and timeouts add up until an ACK shows progress (as in rxe), so a
    // long RNR phase ends in RETRY_EXC and flushes every later round.
    constexpr std::size_t kRnrSteps = 30;
    // Odd rounds post 3 receives, then these once the RNR phase is over: with the round's 9
    // SENDs, every SEND finds a receive in its own round (otherwise the rest would RNR-loop
    // until the retries run out, and every later round would only flush).
    constexpr int kLateRecvs = 6;
    std::uint64_t id = 0;
    for (int round = 0; round < 6; ++round) {
      // Fewer receives than SENDs in odd rounds: RNR NAKs, then the rest once receives arrive.
      for (int i = 0; i < (round % 2 ? 3 : 11); ++i) recv(32768 + i * 4096, 100 + id + i);
      send(WrOpcode::kSend, 64, 64, ++id, 0, kSignaled);
      send(WrOpcode::kRdmaWrite, 0, 10000, ++id, p.b.va(0), kSignaled);
      send(WrOpcode::kSend, 128, 7, ++id, 0, kSignaled);
      send(WrOpcode::kRdmaWrite, 3, 5, ++id, p.b.va(20000), kSignaled);
      send(WrOpcode::kSendWithImm, 256, 100, ++id, 0, 0);  // unsignaled
      send(WrOpcode::kRdmaWriteWithImm, 512, 33, ++id, p.b.va(30000), kSignaled);
      send(WrOpcode::kRdmaWrite, 1024, 1024, ++id, p.b.va(40000), 0);  // one whole PMTU
      for (std::uint32_t k = 0; k < 6; ++k)                            // a run of SEND ONLY packets
        send(WrOpcode::kSend, 2048 + k * 64, k * 13 % 65, ++id, 0, k % 2 ? kSignaled : 0u);
      send(WrOpcode::kRdmaWrite, 4096, 20000, ++id, p.b.va(100000), kSignaled);  // 18 MIDDLEs
      // WRITE ONLY packets (the lean path's single-packet WRITEs): a run of 8-byte ones,
      // zero-length ones (no R_Key to check), and in the last round of some seeds a bad R_Key or
      // a range beyond the region (a NAK remote access error: the requester's QP ends in error).
      for (std::uint32_t k = 0; k < 4; ++k)
        send(WrOpcode::kRdmaWrite, 8192 + k * 8, 8, ++id, p.b.va(50000 + k * 8),
             k == 3 ? kSignaled : 0u);
      send(WrOpcode::kRdmaWrite, 0, 0, ++id, p.b.va(0), kSignaled);
      send(WrOpcode::kRdmaWrite, 0, 0, ++id, p.b.va(p.b.size() + 4096), 0);  // beyond the region
      if (round == 5 && seed % 4 == 1)
        send(WrOpcode::kRdmaWrite, 64, 8, ++id, p.b.va(60000), 0, 0x100);
      if (round == 5 && seed % 4 == 2)
        send(WrOpcode::kRdmaWrite, 64, 8, ++id, p.b.va(p.b.size() - 4), kSignaled);
      send(WrOpcode::kRdmaWrite, 72, 8, ++id, p.b.va(60008), kSignaled);
      post();
      if (round % 2) p.pump->run(kRnrSteps);
      for (int i = 0; i < (round % 2 ? kLateRecvs : 0); ++i) recv(32768 + i * 4096, 200 + id + i);
      post();
      p.pump->run();
    }
    Outcome out;
    // The wire images, with RETH VAs relative to b's region (the two runs' buffers live at
    // different addresses) and without the CRCs that cover them.
    for (const Packet& pkt : p.pump->log) {
      auto parsed = wire::parse_packet(pkt.bytes, wire::ParseOptions{false, false});
      EXPECT_TRUE(parsed.ok());
      if (!parsed) continue;
      wire::Headers h = parsed->h;
      if (wire::opcode_info(h.bth.opcode).mask & wire::kHasReth) h.reth.va -= p.b.va(0);
      h.has_grh = false;
      std::vector<std::uint8_t> img(wire::wire_bytes(h, parsed->payload.size()));
      wire::encode_packet(h, parsed->payload, img);
      img.resize(img.size() - wire::kIcrcBytes - wire::kVcrcBytes);
      out.wire.push_back(img);
    }
    for (auto* side : {&p.a, &p.b})
      for (auto* cq : {side->scq, side->rcq})
        for (auto wcs = side->poll(cq); !wcs.empty(); wcs = side->poll(cq))
          for (const WorkCompletion& wc : wcs)
            out.wcs.emplace_back(wc.wr_id, wc.status, wc.opcode, wc.byte_len);
    for (auto* side : {&p.a, &p.b}) {
      const DeviceCounters& c = side->dev->counters();
      // rx_bytes aside: the general run's packets carry GRHs.
      out.counters.insert(
          out.counters.end(),
          {c.tx_packets, c.rx_packets, c.rx_dropped_ooo, c.retransmit_packets, c.timeouts,
           c.rnr_waits, c.naks_tx_seq, c.naks_tx_rnr, c.acks_tx, c.dup_requests, c.completions,
           c.completions_error, static_cast<std::uint64_t>(side->qp->state())});
    }
    out.memory.assign(p.b.buf.begin(), p.b.buf.end());
    EXPECT_TRUE(p.b.guards_intact());
    return out;
  };
  for (std::uint64_t seed = 1; seed <= 26; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Outcome general = run(Path::kGeneral, seed);
    EXPECT_FALSE(general.wcs.empty());
    // Seeds 21-26: the 6-entry CQs overran and errored the QPs (the last counter of each side).
    if (seed > 20) {
      EXPECT_EQ(general.counters.back(), static_cast<std::uint64_t>(QpState::kErr));
    }
    for (const Path path : {Path::kLeanByRef, Path::kLeanBytes, Path::kBurst}) {
      SCOPED_TRACE(path == Path::kLeanByRef   ? "lean by reference"
                   : path == Path::kLeanBytes ? "lean bytes"
                                              : "bursts");
      const Outcome lean = run(path, seed);
      EXPECT_EQ(lean.wire, general.wire);
      EXPECT_EQ(lean.wcs, general.wcs);
      EXPECT_EQ(lean.counters, general.counters);
      EXPECT_TRUE(lean.memory == general.memory);
    }
  }
}

// A CQ drained by a poll starts again at its ring's first slot (CqImpl::poll); one polled only
// in part keeps its place. Expect: a 4-deep CQ keeps its completions in order across a partial
// poll, a refill to the full depth with the ring wrapping, and a drain, and never overruns.
TEST(RcData, CompletionsKeepTheirOrderAcrossPartialPollsAndDrains) {
  PairOptions o;
  o.cq_depth = 4;
  Pair p(o);
  std::uint64_t next_id = 0, want_id = 0;
  const auto post = [&](int n) {
    for (int i = 0; i < n; ++i, ++next_id)
      ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, next_id, p.b.va(0), p.b.mr->rkey()),
                Errc::kOk);
    p.run();
  };
  const auto poll = [&](std::size_t max, std::size_t expect) {
    std::vector<WorkCompletion> wc(max);
    ASSERT_EQ(p.a.scq->poll(wc), expect);
    for (std::size_t i = 0; i < expect; ++i, ++want_id) {
      EXPECT_EQ(wc[i].wr_id, want_id);
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
    }
  };
  post(3);
  poll(1, 1);  // two left: not drained
  post(2);     // the CQ full, across the ring's end
  EXPECT_EQ(p.a.scq->size(), 4u);
  poll(2, 2);
  poll(8, 2);  // drained
  post(4);     // full again from the first slot
  poll(8, 4);
  post(1);
  poll(8, 1);
  EXPECT_FALSE(p.a.scq->overrun());
  EXPECT_EQ(p.a.dev->counters().completions, 10u);
}

TEST(RcData, UnsignaledProducesNoCompletionButAdvances) {
  Pair p;
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, i * 8, 8, i, p.b.va(i * 8), p.b.mr->rkey(),
                            i == 4 ? std::uint32_t{kSignaled} : 0u),
              Errc::kOk);
  p.run();
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].wr_id, 4u);
  EXPECT_EQ(p.a.dev->counters().completions, 1u);
}

}  // namespace
}  // namespace weft::test

namespace weft::test {
namespace {

TEST(RcData, AckCoalescingAcksEveryNPacketsAndOnAckReq) {
  PairOptions o;
  o.mtu = Mtu::k256;
  o.ack_coalesce_max = 3;
  Pair p(o);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 256 * 7, 1, p.b.va(0), p.b.mr->rkey()),
            Errc::kOk);
  // Deliver one packet at a time and collect what b sends after each (an ACK still queued
  // when a newer one is due is superseded, so this drives the engine packet by packet).
  std::vector<std::uint32_t> ack_psns;
  std::vector<bool> ack_req;
  TxPacket pkt, ack;
  while (p.a.dev->poll_transmit(0, pkt)) {
    std::vector<std::uint8_t> bytes(pkt.wire_bytes());
    pkt.write_to(bytes);
    ack_req.push_back(wire::parse_packet(bytes)->h.bth.ack_req);
    p.b.dev->on_packet(pkt, 0);
    while (p.b.dev->poll_transmit(0, ack)) {
      std::vector<std::uint8_t> ab(ack.wire_bytes());
      ack.write_to(ab);
      ack_psns.push_back(wire::parse_packet(ab)->h.bth.psn);
      p.a.dev->on_packet(ack, 0);
    }
  }
  // Expect: 7 packets, AckReq only on the last; ACKs after packets 3, 6 (coalesced) and 7.
  ASSERT_EQ(ack_req.size(), 7u);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(ack_req[i]);
  EXPECT_TRUE(ack_req[6]);
  ASSERT_EQ(ack_psns.size(), 3u);
  EXPECT_EQ(ack_psns[0], 0x102u);
  EXPECT_EQ(ack_psns[1], 0x105u);
  EXPECT_EQ(ack_psns[2], 0x106u);
  EXPECT_EQ(p.b.dev->counters().acks_tx, 3u);
}

// Delayed ACKs (DeviceConfig::ack_delay_ns, IBA 9.7.5.1.1) on the per-packet and the burst
// receive paths: an unsignaled seven-packet RDMA WRITE asks for no ACK. The responder
// acknowledges the first four (ack_coalesce_max; in bursts of four packets that ACK ends the
// first burst, and the second burst is a lean packet and a run of MIDDLE, LAST). The last three
// are owed: nothing more is sent until the deadline (the time of the packets plus the delay),
// then one ACK for the last PSN; the requester never times out and the bytes arrive.
TEST(RcData, DelayedAckOwedByAnUnsignaledWriteFiresAtItsDeadline) {
  constexpr TimeNs kDelayNs = 1'000'000;
  constexpr std::uint32_t kBytes = 7 * 1024;  // seven packets at the 1 KiB MTU
  for (const bool burst : {false, true}) {
    SCOPED_TRACE(burst ? "burst path" : "per-packet path");
    PairOptions o;
    o.crc = CrcMode::kModel;
    o.ack_delay_ns = kDelayNs;
    Pair p(o);
    p.pump->by_ref = true;
    p.pump->burst = burst;
    p.pump->burst_packets = 4;
    fill(p.a.data(), kBytes, 7);
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, kBytes, 1, p.b.va(0), p.b.mr->rkey(), 0u),
              Errc::kOk);
    while (p.pump->step() > 0) {
    }
    EXPECT_EQ(std::memcmp(p.a.data(), p.b.data(), kBytes), 0);
    EXPECT_EQ(p.b.dev->counters().acks_tx, 1u) << "only the coalesced ACK before the deadline";
    EXPECT_EQ(p.b.dev->next_deadline(), kDelayNs);
    p.pump->run();
    EXPECT_EQ(p.b.dev->counters().acks_tx, 2u);
    ASSERT_FALSE(p.pump->log.empty());
    EXPECT_EQ(p.pump->log.back().h.bth.opcode, wire::Opcode::kRcAcknowledge);
    EXPECT_EQ(p.pump->log.back().h.bth.psn, o.psn_a + 6);
    EXPECT_EQ(p.pump->now, kDelayNs);
    EXPECT_EQ(p.a.dev->counters().timeouts, 0u);
    EXPECT_EQ(p.a.dev->next_deadline(), kNoDeadline) << "everything acknowledged";
    EXPECT_TRUE(p.a.send_wcs().empty());
  }
}

// Two QPs' WRITEs interleave packet by packet (round robin), one call per packet as bytes and in
// bursts by reference. In a burst the first QP's WRITE FIRST is followed by the second's, so the
// FIRST's held copy (DeviceImpl::held_copy_) cannot join a run and is placed on its own.
// Expect: both destinations byte-exact, two completions.
TEST(RcData, TwoQpsOnOneDeviceShareTheWire) {
  for (const bool burst : {false, true}) {
    SCOPED_TRACE(burst ? "bursts by reference" : "per packet, bytes");
    PairOptions o;
    if (burst) o.crc = CrcMode::kModel;
    Pair p(o);
    p.pump->by_ref = burst;
    p.pump->burst = burst;
    // A second QP pair between the same Devices.
    QpInitAttr qa;
    qa.pd = p.a.pd;
    qa.send_cq = p.a.scq;
    qa.recv_cq = p.a.rcq;
    auto* qa2 = *p.a.dev->create_qp(qa);
    qa.pd = p.b.pd;
    qa.send_cq = p.b.scq;
    qa.recv_cq = p.b.rcq;
    auto* qb2 = *p.b.dev->create_qp(qa);
    connect_rc(qa2, 2, qb2->qp_num(), 7, 9, o);
    connect_rc(qb2, 1, qa2->qp_num(), 9, 7, o);
    for (int i = 0; i < 8000; ++i) p.a.data()[i] = static_cast<std::uint8_t>(i * 7 + i / 251);
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 3000, 1, p.b.va(0), p.b.mr->rkey()),
              Errc::kOk);
    Sge sge{p.a.va(4000), 3000, p.a.mr->lkey()};
    SendWr wr;
    wr.wr_id = 2;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = p.b.va(10000);
    wr.rkey = p.b.mr->rkey();
    ASSERT_EQ(qa2->post_send(wr), Errc::kOk);
    p.run();
    auto sw = p.a.send_wcs();
    ASSERT_EQ(sw.size(), 2u);
    EXPECT_EQ(0, std::memcmp(p.b.data(), p.a.data(), 3000));
    EXPECT_EQ(0, std::memcmp(p.b.data() + 10000, p.a.data() + 4000, 3000));
    // Round robin: the two QPs' packets interleave.
    auto a = p.sent_by(0);
    ASSERT_EQ(a.size(), 6u);
    EXPECT_NE(a[0].h.bth.dest_qp, a[1].h.bth.dest_qp);
    EXPECT_TRUE(p.b.guards_intact());
  }
}

}  // namespace
}  // namespace weft::test
