// tests/transport/rc_recovery_test.cpp — RC reliability: go-back-N after a lost packet (one NAK
// per gap), ACK loss and timeouts, duplicate requests re-acknowledged, READ replay and atomic
// replay from responder resources, retry exhaustion, RNR NAKs and rnr_retry, selective repeat,
// duplicated / reordered / corrupted packets.
#include <gtest/gtest.h>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

using wire::AethKind;
using wire::Opcode;

void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(seed + i * 13);
}

std::vector<Packet> naks(const std::vector<Packet>& ps, AethKind kind) {
  std::vector<Packet> out;
  for (const auto& p : ps)
    if (p.h.bth.opcode == Opcode::kRcAcknowledge && wire::aeth_kind(p.h.aeth.syndrome) == kind)
      out.push_back(p);
  return out;
}

TEST(RcRecovery, GoBackNAfterLostMiddlePacketNaksOnce) {
  Pair p;
  fill(p.a.data(), 8 * 1024, 1);
  bool dropped = false;
  p.pump->hook = [&](Packet& pk) {
    if (!dropped && pk.from == 0 && pk.h.bth.psn == 0x102) {
      dropped = true;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8 * 1024, 1, p.b.va(0), p.b.mr->rkey()),
            Errc::kOk);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 8 * 1024));
  // Expect: 0x103..0x107 dropped as out of sequence, one NAK(PSN seq error) at 0x102.
  auto n = naks(p.sent_by(1), AethKind::kNak);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].h.bth.psn, 0x102u);
  EXPECT_EQ(wire::aeth_value(n[0].h.aeth.syndrome), 0u);
  EXPECT_EQ(p.b.dev->counters().rx_dropped_ooo, 5u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_seq, 1u);
  EXPECT_EQ(p.a.dev->counters().naks_rx_seq, 1u);
  EXPECT_EQ(p.a.dev->counters().retransmit_packets, 6u);  // 0x102..0x107 again
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.a.dev->counters().timeouts, 0u);
}

TEST(RcRecovery, LostAckTimesOutAndDuplicateIsReacked) {
  Pair p;
  bool dropped = false;
  p.pump->hook = [&](Packet& pk) {
    if (!dropped && pk.from == 1) {
      dropped = true;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.b.post_recv(0, 64, 9), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 32, 1), Errc::kOk);
  p.run();
  EXPECT_EQ(p.a.dev->counters().timeouts, 1u);
  EXPECT_EQ(p.a.dev->counters().retransmit_packets, 1u);
  EXPECT_EQ(p.b.dev->counters().dup_requests, 1u);
  // 4.096 us * 2^14 = 67.1 ms
  EXPECT_EQ(p.pump->now, 4096ull << 14);
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
  EXPECT_EQ(p.b.recv_wcs().size(), 1u);  // delivered once
}

TEST(RcRecovery, LostReadResponseIsReplayed) {
  Pair p;
  fill(p.b.data(), 4096, 7);
  bool dropped = false;
  p.pump->hook = [&](Packet& pk) {
    if (!dropped && pk.from == 1 && pk.h.bth.opcode == Opcode::kRcReadResponseMiddle) {
      dropped = true;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaRead, 0, 4096, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 4096));
  EXPECT_EQ(p.b.dev->counters().dup_reads_replayed, 1u);
  // The retried READ starts at the missing PSN with the address advanced.
  std::vector<Packet> reqs;
  for (auto& pk : p.sent_by(0))
    if (pk.h.bth.opcode == Opcode::kRcReadRequest) reqs.push_back(pk);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].h.bth.psn, 0x101u);
  EXPECT_EQ(reqs[1].h.reth.va, p.b.va(1024));
  EXPECT_EQ(reqs[1].h.reth.dma_len, 3072u);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
}

TEST(RcRecovery, LostAtomicAckReturnsSavedResultWithoutRerunning) {
  Pair p;
  std::uint64_t v = 100;
  std::memcpy(p.b.data(), &v, 8);
  bool dropped = false;
  p.pump->hook = [&](Packet& pk) {
    if (!dropped && pk.from == 1) {
      dropped = true;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  SendWr wr;
  Sge sge{p.a.va(0), 8, p.a.mr->lkey()};
  wr.sg_list = {&sge, 1};
  wr.opcode = WrOpcode::kAtomicFetchAndAdd;
  wr.send_flags = kSignaled;
  wr.remote_addr = p.b.va(0);
  wr.rkey = p.b.mr->rkey();
  wr.compare_add = 1;
  ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
  p.run();
  std::uint64_t got, now;
  std::memcpy(&got, p.a.data(), 8);
  std::memcpy(&now, p.b.data(), 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(now, 101u);  // executed once
  EXPECT_EQ(p.b.dev->counters().dup_atomics_replayed, 1u);
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

TEST(RcRecovery, RetryExceededFailsFlushesAndErrors) {
  PairOptions o;
  o.retry_cnt = 2;
  o.timeout = 1;
  Pair p(o);
  p.pump->hook = [&](Packet& pk) { return pk.from == 0 ? Action::kDrop : Action::kDeliver; };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 1, p.b.va(0), p.b.mr->rkey(), 0), Errc::kOk);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 2, p.b.va(0), p.b.mr->rkey(), 0), Errc::kOk);
  ASSERT_EQ(p.a.post_recv(0, 8, 3), Errc::kOk);
  p.run();
  EXPECT_EQ(p.a.dev->counters().timeouts, 3u);
  EXPECT_EQ(p.a.dev->counters().retry_exc, 1u);
  EXPECT_EQ(p.a.qp->state(), QpState::kErr);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 2u);  // unsignaled, but errors always complete
  EXPECT_EQ(sw[0].wr_id, 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(sw[1].wr_id, 2u);
  EXPECT_EQ(sw[1].status, WcStatus::kWrFlushErr);
  auto rw = p.a.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kWrFlushErr);
  auto ev = p.a.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, AsyncEventType::kQpFatal);
  EXPECT_EQ(ev[0].qp_num, p.a.qp->qp_num());
  // In ERR, a new post completes at once with WR_FLUSH_ERR.
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 8, 4, 0, 0, 0), Errc::kOk);
  sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kWrFlushErr);
}

TEST(RcRecovery, RnrNakWaitsTheTimerThenSucceeds) {
  PairOptions o;
  o.min_rnr_timer = 14;  // 1.28 ms (IBA Table 45)
  Pair p(o);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 16, 1), Errc::kOk);
  p.pump->step();  // SEND out, RNR NAK back
  p.pump->step();
  auto r = naks(p.sent_by(1), AethKind::kRnrNak);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(wire::aeth_value(r[0].h.aeth.syndrome), 14u);
  EXPECT_EQ(r[0].h.bth.psn, 0x100u);
  EXPECT_EQ(p.a.dev->next_deadline(), 1'280'000u);
  ASSERT_EQ(p.b.post_recv(0, 64, 5), Errc::kOk);
  p.run();
  EXPECT_EQ(p.a.dev->counters().rnr_waits, 1u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_rnr, 1u);
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
  EXPECT_EQ(p.b.recv_wcs().size(), 1u);
}

TEST(RcRecovery, RnrRetryExceeded) {
  PairOptions o;
  o.rnr_retry = 2;
  Pair p(o);
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 16, 1), Errc::kOk);
  p.run();
  EXPECT_EQ(p.b.dev->counters().naks_tx_rnr, 3u);
  EXPECT_EQ(p.a.dev->counters().rnr_retry_exc, 1u);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(p.a.qp->state(), QpState::kErr);
}

TEST(RcRecovery, SelectiveRepeatResendsOnlyTheMissingPacket) {
  PairOptions o;
  o.recovery = RecoveryMode::kSelectiveRepeat;
  Pair p(o);
  fill(p.a.data(), 8 * 1024, 3);
  bool dropped = false;
  p.pump->hook = [&](Packet& pk) {
    if (!dropped && pk.from == 0 && pk.h.bth.psn == 0x102) {
      dropped = true;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8 * 1024, 1, p.b.va(0), p.b.mr->rkey()),
            Errc::kOk);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 8 * 1024));
  EXPECT_EQ(p.b.dev->counters().rx_buffered_ooo, 5u);
  EXPECT_EQ(p.b.dev->counters().rx_dropped_ooo, 0u);
  EXPECT_EQ(p.b.dev->counters().naks_tx_seq, 1u);
  EXPECT_EQ(p.a.dev->counters().retransmit_packets, 1u);
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
}

TEST(RcRecovery, SelectiveRepeatTwoGapsNakEachOnce) {
  PairOptions o;
  o.recovery = RecoveryMode::kSelectiveRepeat;
  Pair p(o);
  fill(p.a.data(), 8 * 1024, 5);
  int drops = 0;
  p.pump->hook = [&](Packet& pk) {
    if (pk.from == 0 && (pk.h.bth.psn == 0x101 || pk.h.bth.psn == 0x104) && drops < 2) {
      ++drops;
      return Action::kDrop;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8 * 1024, 1, p.b.va(0), p.b.mr->rkey()),
            Errc::kOk);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 8 * 1024));
  auto n = naks(p.sent_by(1), AethKind::kNak);
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n[0].h.bth.psn, 0x101u);
  EXPECT_EQ(n[1].h.bth.psn, 0x104u);
  EXPECT_EQ(p.a.dev->counters().retransmit_packets, 2u);
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

TEST(RcRecovery, DuplicatedPacketsCompleteOnce) {
  Pair p;
  p.pump->hook = [](Packet&) { return Action::kDuplicate; };
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p.b.post_recv(i * 100, 100, i), Errc::kOk);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 50, i), Errc::kOk);
  p.run();
  EXPECT_EQ(p.a.send_wcs().size(), 3u);
  EXPECT_EQ(p.b.recv_wcs().size(), 3u);
  EXPECT_EQ(p.b.dev->counters().dup_requests, 3u);
}

TEST(RcRecovery, ReorderedPacketsRecover) {
  Pair p;
  fill(p.a.data(), 4096, 9);
  int n = 0;
  p.pump->hook = [&](Packet& pk) {
    if (pk.from == 0 && n < 4) {
      ++n;
      return Action::kHold;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 4096, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.pump->step();
  ASSERT_EQ(p.pump->held(), 4u);
  p.pump->release_held(/*reverse=*/true);
  p.run();
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 4096));
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

TEST(RcRecovery, CorruptedPacketIsDroppedAndResent) {
  Pair p;
  fill(p.a.data(), 2048, 2);
  bool done = false;
  p.pump->hook = [&](Packet& pk) {
    if (!done && pk.from == 0) {
      done = true;
      pk.bytes[pk.bytes.size() / 2] ^= 0x10;
    }
    return Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 2048, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.run();
  EXPECT_EQ(p.b.dev->counters().rx_bad_vcrc + p.b.dev->counters().rx_bad_icrc, 1u);
  EXPECT_EQ(0, std::memcmp(p.a.data(), p.b.data(), 2048));
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

}  // namespace
}  // namespace weft::test

namespace weft::test {
namespace {

TEST(RcRecovery, SelectiveRepeatPlacesWriteMiddlesDirectly) {
  PairOptions o;
  o.recovery = RecoveryMode::kSelectiveRepeat;
  Pair p(o);
  for (int i = 0; i < 8192; ++i) p.a.data()[i] = static_cast<std::uint8_t>(i * 5 + 1);
  p.pump->hook = [&](Packet& pk) {
    return pk.from == 0 && pk.h.bth.psn == 0x102 && p.pump->held() == 0 ? Action::kHold
                                                                        : Action::kDeliver;
  };
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8192, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  p.pump->step();
  ASSERT_EQ(p.pump->held(), 1u);
  // Expect: packets 0x103..0x107 are already at their offsets; 0x102's bytes are not.
  EXPECT_EQ(0, std::memcmp(p.b.data() + 3 * 1024, p.a.data() + 3 * 1024, 5 * 1024));
  EXPECT_EQ(p.b.data()[2 * 1024], 0);
  EXPECT_EQ(p.a.send_wcs().size(), 0u);
  p.pump->hook = nullptr;
  p.pump->release_held();
  p.run();
  EXPECT_EQ(0, std::memcmp(p.b.data(), p.a.data(), 8192));
  EXPECT_EQ(p.a.send_wcs().size(), 1u);
}

}  // namespace
}  // namespace weft::test
