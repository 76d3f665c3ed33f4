// tests/transport/rc_error_test.cpp — RC error paths: remote access (bad R_Key, bounds, QP access
// flags) NAKed with nothing written, invalid requests (receive too small, misaligned atomic),
// fatal completion + flush + ERR + kQpFatal on both sides, CQ overrun, fences, initiator depth,
// end-to-end credits (IBA 9.7.7.2) and the SRQ "invalid" credit code.
#include <gtest/gtest.h>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

using wire::AethKind;
using wire::NakCode;
using wire::Opcode;

std::vector<Packet> acks(const std::vector<Packet>& ps) {
  std::vector<Packet> out;
  for (const auto& p : ps)
    if (p.h.bth.opcode == Opcode::kRcAcknowledge) out.push_back(p);
  return out;
}

struct AccessCase {
  const char* name;
  int kind;  // 0 bad rkey, 1 out of bounds, 2 QP lacks remote write, 3 MR lacks remote write
};

class RemoteAccess : public ::testing::TestWithParam<AccessCase> {};

TEST_P(RemoteAccess, WriteIsNakedAndNothingWritten) {
  PairOptions o;
  Pair p(o);
  std::uint32_t rkey = p.b.mr->rkey();
  std::uint64_t va = p.b.va(0);
  std::uint32_t len = 2048;
  switch (GetParam().kind) {
    case 0:
      rkey ^= 0x100;
      break;
    case 1:
      va = p.b.va(p.b.size() - 1024);
      break;
    case 2: {
      QpAttr a;
      a.access_flags = kAccessRemoteRead;
      ASSERT_EQ(p.b.qp->modify(a, kQpAccessFlags), Errc::kOk);
      break;
    }
    case 3: {
      auto* mr = *p.b.dev->reg_mr(p.b.pd, p.b.data(), 4096, kAccessLocalWrite | kAccessRemoteRead);
      rkey = mr->rkey();
      break;
    }
  }
  std::memset(p.a.data(), 0xEE, len);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, len, 1, va, rkey), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 2, p.b.va(0), p.b.mr->rkey(), 0), Errc::kOk);
  p.run();
  // Expect: one NAK (remote access error) for PSN 0x100; nothing written anywhere.
  auto n = acks(p.sent_by(1));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(wire::aeth_kind(n[0].h.aeth.syndrome), AethKind::kNak);
  EXPECT_EQ(wire::aeth_value(n[0].h.aeth.syndrome),
            static_cast<std::uint8_t>(NakCode::kRemoteAccessError));
  EXPECT_EQ(n[0].h.bth.psn, 0x100u);
  for (std::size_t i = 0; i < p.b.size(); ++i) ASSERT_EQ(p.b.data()[i], 0) << i;
  EXPECT_TRUE(p.b.guards_intact());
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(sw[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(p.a.qp->state(), QpState::kErr);
  EXPECT_EQ(p.b.qp->state(), QpState::kErr);
  EXPECT_EQ(p.a.dev->counters().naks_rx_access, 1u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_access, 1u);
  auto ev = p.a.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, AsyncEventType::kQpFatal);
}

INSTANTIATE_TEST_SUITE_P(All, RemoteAccess,
                         ::testing::Values(AccessCase{"bad_rkey", 0}, AccessCase{"bounds", 1},
                                           AccessCase{"qp_access", 2}, AccessCase{"mr_access", 3}),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(RcError, ReadWithBadRkeyIsRemoteAccessError) {
  Pair p;
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 0, 64, 1, p.b.va(0), 0x12345), Errc::kOk);
  p.run();
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kRemAccessErr);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(p.a.data()[i], 0);
}

TEST(RcError, ReceiveTooSmallIsLocLenAtResponderAndInvReqAtRequester) {
  Pair p;
  ASSERT_EQ(p.b.post_recv(0, 100, 7), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 200, 1), Errc::kOk);
  p.run();
  auto rw = p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].wr_id, 7u);
  EXPECT_EQ(rw[0].status, WcStatus::kLocLenErr);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kRemInvReqErr);
  auto n = acks(p.sent_by(1));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(
      n[0].h.aeth.syndrome,
      wire::aeth_syndrome(AethKind::kNak, static_cast<std::uint8_t>(NakCode::kInvalidRequest)));
  EXPECT_EQ(p.b.dev->counters().naks_tx_inv, 1u);
}

TEST(RcError, MisalignedAtomicIsInvalidRequest) {
  Pair p;
  SendWr wr;
  Sge sge{p.a.va(0), 8, p.a.mr->lkey()};
  wr.sg_list = {&sge, 1};
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.remote_addr = p.b.va(4);
  wr.rkey = p.b.mr->rkey();
  wr.compare_add = 1;
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  p.run();
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kRemInvReqErr);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(p.b.data()[i], 0);
}

TEST(RcError, CqOverrunErrorsQpAndRaisesCqError) {
  PairOptions o;
  o.cq_depth = 2;
  Pair p(o);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, i, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  EXPECT_EQ(p.a.dev->counters().cq_overruns, 1u);
  EXPECT_TRUE(p.a.scq->overrun());
  EXPECT_EQ(p.a.qp->state(), QpState::kErr);
  auto ev = p.a.events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0].type, AsyncEventType::kCqError);
  EXPECT_EQ(ev[1].type, AsyncEventType::kQpFatal);
  EXPECT_EQ(p.a.send_wcs().size(), 2u);
}

TEST(RcError, FenceWaitsForPriorRead) {
  Pair p;
  ASSERT_EQ(p.b.post_recv(0, 64, 1), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 0, 3000, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 4096, 8, 2, 0, 0, kSignaled | kFence), Errc::kOk);
  p.pump->step();
  // Expect: only the READ request left; the fenced SEND waits for the READ to complete.
  auto a = p.sent_by(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].h.bth.opcode, Opcode::kRcReadRequest);
  p.run();
  a = p.sent_by(0);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].h.bth.opcode, Opcode::kRcSendOnly);
  EXPECT_EQ(a[1].h.bth.psn, 0x103u);
  EXPECT_EQ(p.a.send_wcs().size(), 2u);
}

TEST(RcError, InitiatorDepthLimitsOutstandingReads) {
  PairOptions o;
  o.max_rd_atomic = 1;
  Pair p(o);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 0, 64, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 64, 64, 2, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  TxPacket pkt;
  ASSERT_TRUE(p.a.dev->poll_transmit(0, pkt));
  EXPECT_FALSE(p.a.dev->poll_transmit(0, pkt));  // second READ held: max_rd_atomic = 1
  p.run();
  EXPECT_EQ(p.a.send_wcs().size(), 2u);
}

TEST(RcError, CreditsLimitSendsAndAreAdvertisedInAeth) {
  Pair p;
  ASSERT_EQ(p.b.post_recv(0, 64, 1), Errc::kOk);
  ASSERT_EQ(p.b.post_recv(64, 64, 2), Errc::kOk);
  ASSERT_EQ(p.b.post_recv(128, 64, 3), Errc::kOk);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 8, i), Errc::kOk);
  // Without credits the requester sends one message and waits for the ACK.
  TxPacket pkt;
  ASSERT_TRUE(p.a.dev->poll_transmit(0, pkt));
  EXPECT_FALSE(p.a.dev->poll_transmit(0, pkt));
  EXPECT_EQ(p.a.dev->counters().credit_stalls, 1u);
  p.b.dev->on_packet(pkt, 0);
  TxPacket ack;
  ASSERT_TRUE(p.b.dev->poll_transmit(0, ack));
  std::vector<std::uint8_t> bytes(ack.wire_bytes());
  ack.write_to(bytes);
  auto parsed = wire::parse_packet(bytes);
  ASSERT_TRUE(parsed.ok());
  // Two receive WQEs left: credit code 2 (Table 44).
  EXPECT_EQ(parsed->h.aeth.syndrome, wire::aeth_syndrome(AethKind::kAck, 2));
  p.a.dev->on_packet(ack, 0);
  // Now both remaining SENDs may go.
  ASSERT_TRUE(p.a.dev->poll_transmit(0, pkt));
  p.b.dev->on_packet(pkt, 0);
  ASSERT_TRUE(p.a.dev->poll_transmit(0, pkt));
  p.b.dev->on_packet(pkt, 0);
  p.run();
  EXPECT_EQ(p.a.send_wcs().size(), 3u);
  EXPECT_EQ(p.b.recv_wcs().size(), 3u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_rnr, 0u);
}

// Moves every packet side `from` of `p` has to send now to the other side, by hand (no clock, no
// deadlines): poll_transmit packet by packet, or poll_transmit_burst, each burst delivered with
// on_packet_burst before the next call (its packets stay valid until then). Returns them parsed.
std::vector<Packet> flush_side(Pair& p, std::size_t from, bool burst) {
  Device& tx = from == 0 ? *p.a.dev : *p.b.dev;
  Device& rx = from == 0 ? *p.b.dev : *p.a.dev;
  constexpr std::size_t kBurstPackets = 16;  // more than any step below sends
  std::vector<Packet> out;
  std::vector<TxPacket> pkts(burst ? kBurstPackets : 1);
  for (;;) {
    const std::size_t n =
        burst ? tx.poll_transmit_burst(0, pkts) : (tx.poll_transmit(0, pkts[0]) ? 1 : 0);
    if (n == 0) return out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(p.pump->record(from, pkts[i]));
    rx.on_packet_burst(std::span<const TxPacket>(pkts.data(), n), 0);
  }
}

// The requester's packets: SEND ONLY each, with these PSNs.
void expect_sends(const std::vector<Packet>& ps, std::uint32_t first_psn, std::size_t count) {
  ASSERT_EQ(ps.size(), count);
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_EQ(ps[i].h.bth.opcode, Opcode::kRcSendOnly);
    EXPECT_EQ(ps[i].h.bth.psn, first_psn + i);
  }
}

// The responder's packets: ACKs only, the last advertising `credits` (Table 44 codes 0-4 are the
// counts themselves).
void expect_acks_with_credits(const std::vector<Packet>& ps, std::uint8_t credits) {
  ASSERT_FALSE(ps.empty());
  for (const Packet& a : ps) {
    EXPECT_EQ(a.h.bth.opcode, Opcode::kRcAcknowledge);
    EXPECT_EQ(wire::aeth_kind(a.h.aeth.syndrome), AethKind::kAck);
  }
  EXPECT_EQ(wire::aeth_value(ps.back().h.aeth.syndrome), credits);
}

// End-to-end credits (IBA 9.7.7.2) on both transmit paths: poll_transmit's req_poll, and
// poll_transmit_burst's lean run (req_poll_burst), whose rule is one compare, cseq <
// max(credit_limit, cseq_acked + 1). 9.7.7.2.5: a credit-consuming message starts only with a
// credit for it, except that a requester without credits may send one at a time (nothing
// credit-consuming unacknowledged), so that the next ACK tells it the count. Expect, with 3
// receives posted and 9 SENDs: before any ACK (no credits yet) 1 SEND; after the ACK of 2
// credits exactly 2; after the ACK of 0 one probe and no second while it is unacknowledged;
// after 5 more receives the probe's ACK of 4 credits releases exactly 4, and the ninth goes as the
// next probe. Each step moves what can be sent now and counts it, so a wrong rule fails at once.
class CreditRule : public ::testing::TestWithParam<bool> {};

TEST_P(CreditRule, ExactlyTheCreditedSendsGoAndOneProbesWithout) {
  const bool burst = GetParam();
  Pair p;
  constexpr std::size_t kSends = 9, kLen = 8, kRecvBytes = 64;
  const std::uint32_t psn = p.opt.psn_a;
  for (std::size_t i = 0; i < kSends * kLen; ++i) p.a.data()[i] = static_cast<std::uint8_t>(i + 1);
  std::size_t recvs = 0;
  const auto post_recvs = [&](std::size_t k) {
    for (std::size_t i = 0; i < k; ++i, ++recvs)
      ASSERT_EQ(p.b.post_recv(recvs * kRecvBytes, kRecvBytes, 100 + recvs), Errc::kOk);
  };
  post_recvs(3);
  for (std::size_t i = 0; i < kSends; ++i)
    ASSERT_EQ(p.a.post_send(WrOpcode::kSend, i * kLen, kLen, i), Errc::kOk);

  expect_sends(flush_side(p, 0, burst), psn, 1);  // no credits known: one at a time
  EXPECT_EQ(p.a.dev->counters().credit_stalls, 1u);
  expect_acks_with_credits(flush_side(p, 1, burst), 2);
  expect_sends(flush_side(p, 0, burst), psn + 1, 2);  // the 2 credited; the fourth waits
  EXPECT_EQ(p.a.dev->counters().credit_stalls, 2u);
  expect_acks_with_credits(flush_side(p, 1, burst), 0);
  post_recvs(5);  // unknown to the requester until the probe's ACK
  expect_sends(flush_side(p, 0, burst), psn + 3, 1);  // no credits: the probe, then nothing
  EXPECT_EQ(flush_side(p, 0, burst).size(), 0u);
  EXPECT_EQ(p.a.dev->counters().credit_stalls, 3u);
  expect_acks_with_credits(flush_side(p, 1, burst), 4);
  expect_sends(flush_side(p, 0, burst), psn + 4, 4);  // the 4 credited; the ninth waits
  EXPECT_EQ(p.a.dev->counters().credit_stalls, 4u);
  expect_acks_with_credits(flush_side(p, 1, burst), 0);
  post_recvs(1);
  expect_sends(flush_side(p, 0, burst), psn + 8, 1);  // the last as a probe
  expect_acks_with_credits(flush_side(p, 1, burst), 0);
  EXPECT_EQ(flush_side(p, 0, burst).size(), 0u);

  // Every SEND once, in order, into its receive, byte-exact; no RNR NAK, nothing resent.
  const auto swcs = p.a.send_wcs();
  const auto rwcs = p.b.recv_wcs();
  ASSERT_EQ(swcs.size(), kSends);
  ASSERT_EQ(rwcs.size(), kSends);
  for (std::size_t i = 0; i < kSends; ++i) {
    EXPECT_EQ(swcs[i].wr_id, i);
    EXPECT_EQ(swcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(rwcs[i].wr_id, 100 + i);
    EXPECT_EQ(rwcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(rwcs[i].byte_len, kLen);
    EXPECT_EQ(std::memcmp(p.b.data() + i * kRecvBytes, p.a.data() + i * kLen, kLen), 0) << i;
  }
  EXPECT_EQ(p.a.dev->counters().tx_packets, kSends);
  EXPECT_EQ(p.a.dev->counters().retransmit_packets, 0u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_rnr, 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, CreditRule, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Burst" : "PerPacket"; });

TEST(RcError, SrqAdvertisesInvalidCreditCode) {
  PairOptions o;
  o.use_srq = true;
  Pair p(o);
  // The QP's receives come from the SRQ.
  EXPECT_EQ(p.b.post_recv(0, 64, 1), Errc::kInvalidState);
  std::vector<WorkCompletion> none;
  SeededRng r(1);
  (void)r;
  // Post to b's SRQ through the QP's init attr: find it by creating a receive via the API.
  // (make_side created the SRQ; fetch it from the QP's init attributes is not public, so post
  // through a fresh SRQ-backed QP would be needed; instead check the ACK code below with no
  // receives: the SEND is RNR-NAKed, and the first ACK of a WRITE carries code 31.)
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  auto n = acks(p.sent_by(1));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(wire::aeth_value(n[0].h.aeth.syndrome), 31u);
}

}  // namespace
}  // namespace weft::test
