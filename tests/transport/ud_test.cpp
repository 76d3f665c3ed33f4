// tests/transport/ud_test.cpp — UD service: DETH, Q_Key checks (and the "use the QP's Q_Key" high
// bit), the 40-byte GRH area at the head of receive buffers, kWcGrh, receive too small, no WQE.
#include <gtest/gtest.h>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

struct Ud {
  Pair p{[] {
    PairOptions o;
    o.type = QpType::kUd;
    return o;
  }()};
  AddressHandle* ah = nullptr;
  explicit Ud(bool global = false) {
    AddressVector av;
    av.dlid = 2;
    av.global = global;
    av.dgid[15] = 2;
    ah = *p.a.dev->create_ah(p.a.pd, av);
  }
  Errc send(std::uint32_t len, std::uint32_t qkey, WrOpcode op = WrOpcode::kSend) {
    Sge sge{p.a.va(0), len, p.a.mr->lkey()};
    SendWr wr;
    wr.wr_id = 9;
    wr.opcode = op;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.ah = ah;
    wr.remote_qpn = p.b.qp->qp_num();
    wr.remote_qkey = qkey;
    wr.imm_data = 0xABCD;
    return p.a.qp->post_send(wr);
  }
};

TEST(Ud, SendReceiveWithGrhSpace) {
  Ud u;
  for (int i = 0; i < 100; ++i) u.p.a.data()[i] = static_cast<std::uint8_t>(i);
  ASSERT_EQ(u.p.b.post_recv(0, 200, 5), Errc::kOk);
  ASSERT_EQ(u.send(100, 0x1234, WrOpcode::kSendWithImm), Errc::kOk);
  u.p.run();
  auto a = u.p.sent_by(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].h.bth.opcode, wire::Opcode::kUdSendOnlyImm);
  EXPECT_EQ(a[0].h.deth.qkey, 0x1234u);
  EXPECT_EQ(a[0].h.deth.src_qp, u.p.a.qp->qp_num());
  EXPECT_EQ(u.p.sent_by(1).size(), 0u);  // no ACKs on UD
  auto rw = u.p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rw[0].byte_len, 140u);
  EXPECT_EQ(rw[0].src_qp, u.p.a.qp->qp_num());
  EXPECT_EQ(rw[0].slid, 1u);
  EXPECT_EQ(rw[0].imm_data, 0xABCDu);
  EXPECT_EQ(rw[0].wc_flags, std::uint32_t{kWcWithImm});
  EXPECT_EQ(0, std::memcmp(u.p.b.data() + 40, u.p.a.data(), 100));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(u.p.b.data()[i], 0);  // no GRH came
  auto sw = u.p.a.send_wcs();
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, WcStatus::kSuccess);
}

TEST(Ud, GrhIsPlacedAndFlagged) {
  Ud u(/*global=*/true);
  ASSERT_EQ(u.p.b.post_recv(0, 200, 5), Errc::kOk);
  ASSERT_EQ(u.send(10, 0x1234), Errc::kOk);
  u.p.run();
  auto rw = u.p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].wc_flags, std::uint32_t{kWcGrh});
  EXPECT_EQ(u.p.b.data()[0] >> 4, 6);  // IPVer 6
  EXPECT_EQ(u.p.b.data()[39], 2);      // DGID's last byte
}

TEST(Ud, QkeyMismatchDroppedAndCounted) {
  Ud u;
  ASSERT_EQ(u.p.b.post_recv(0, 200, 5), Errc::kOk);
  ASSERT_EQ(u.send(10, 0x9999), Errc::kOk);
  u.p.run();
  EXPECT_EQ(u.p.b.dev->counters().rx_bad_qkey, 1u);
  EXPECT_EQ(u.p.b.recv_wcs().size(), 0u);
}

TEST(Ud, HighBitQkeyUsesTheQpsQkey) {
  Ud u;
  ASSERT_EQ(u.p.b.post_recv(0, 200, 5), Errc::kOk);
  ASSERT_EQ(u.send(10, 0x80000000u), Errc::kOk);
  u.p.run();
  EXPECT_EQ(u.p.sent_by(0)[0].h.deth.qkey, 0x1234u);
  EXPECT_EQ(u.p.b.recv_wcs().size(), 1u);
}

TEST(Ud, ReceiveTooSmallIsLocLenErr) {
  Ud u;
  ASSERT_EQ(u.p.b.post_recv(0, 60, 5), Errc::kOk);
  ASSERT_EQ(u.send(30, 0x1234), Errc::kOk);
  u.p.run();
  auto rw = u.p.b.recv_wcs();
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, WcStatus::kLocLenErr);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(u.p.b.data()[i], 0);
}

TEST(Ud, NoReceiveDropsAndCounts) {
  Ud u;
  ASSERT_EQ(u.send(30, 0x1234), Errc::kOk);
  u.p.run();
  EXPECT_EQ(u.p.b.dev->counters().rx_ud_no_wqe, 1u);
  EXPECT_EQ(u.p.a.send_wcs().size(), 1u);
}

}  // namespace
}  // namespace weft::test
