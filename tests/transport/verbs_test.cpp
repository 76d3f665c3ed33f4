// tests/transport/verbs_test.cpp — invalid verbs calls return their error and change nothing:
// bad lkey, SGE beyond its region, wrong QP state, too many SGEs, oversized inline, READ on UD,
// UD message above the MTU, full queues, object creation and destruction rules.
#include <gtest/gtest.h>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

struct PostCase {
  const char* name;
  Errc want;
  void (*make)(Side&, SendWr&, std::vector<Sge>&);
};

class BadPost : public ::testing::TestWithParam<PostCase> {};

TEST_P(BadPost, ReturnsErrorAndQueuesNothing) {
  Pair p;
  std::vector<Sge> sges{{p.a.va(0), 64, p.a.mr->lkey()}};
  SendWr wr;
  wr.wr_id = 1;
  wr.send_flags = kSignaled;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = p.b.va(0);
  wr.rkey = p.b.mr->rkey();
  GetParam().make(p.a, wr, sges);
  wr.sg_list = sges;
  EXPECT_EQ(p.a.qp->post_send(wr), GetParam().want);
  const auto tx = p.a.dev->counters().tx_packets;
  p.run();
  EXPECT_EQ(p.a.dev->counters().tx_packets, tx);
  EXPECT_EQ(p.a.send_wcs().size(), 0u);
  EXPECT_EQ(p.a.qp->state(), QpState::kRts);
}

INSTANTIATE_TEST_SUITE_P(
    All, BadPost,
    ::testing::Values(
        PostCase{"bad_lkey", Errc::kBadLkey,
                 [](Side&, SendWr&, std::vector<Sge>& s) { s[0].lkey ^= 0x1000; }},
        PostCase{"lkey_of_another_pd", Errc::kBadLkey,
                 [](Side& a, SendWr&, std::vector<Sge>& s) {
                   auto* other = *a.dev->alloc_pd();
                   s[0].lkey = (*a.dev->reg_mr(other, a.data(), 4096, kAccessLocalWrite))->lkey();
                 }},
        PostCase{"sge_past_region", Errc::kSgeOutOfRange,
                 [](Side& a, SendWr&, std::vector<Sge>& s) { s[0].addr = a.va(a.size() - 10); }},
        PostCase{"sge_before_region", Errc::kSgeOutOfRange,
                 [](Side& a, SendWr&, std::vector<Sge>& s) { s[0].addr = a.va(0) - 1; }},
        PostCase{"too_many_sge", Errc::kTooManySge,
                 [](Side&, SendWr&, std::vector<Sge>& s) { s.resize(5, s[0]); }},
        PostCase{"inline_too_large", Errc::kInlineTooLarge,
                 [](Side&, SendWr& w, std::vector<Sge>& s) {
                   w.send_flags |= kInline;
                   s[0].length = 257;
                 }},
        PostCase{"inline_read", Errc::kInvalidArgument,
                 [](Side&, SendWr& w, std::vector<Sge>&) {
                   w.send_flags |= kInline;
                   w.opcode = WrOpcode::kRdmaRead;
                 }},
        PostCase{
            "atomic_not_8_bytes", Errc::kInvalidArgument,
            [](Side&, SendWr& w, std::vector<Sge>&) { w.opcode = WrOpcode::kAtomicFetchAndAdd; }}),
    [](const auto& i) { return std::string(i.param.name); });

TEST(Verbs, ReadIntoRegionWithoutLocalWriteIsDenied) {
  Pair p;
  auto* ro = *p.a.dev->reg_mr(p.a.pd, p.a.data(), 4096, 0);
  Sge sge{p.a.va(0), 64, ro->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaRead;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = p.b.va(0);
  wr.rkey = p.b.mr->rkey();
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kAccessDenied);
  EXPECT_EQ(p.a.post_recv(0, 8, 1), Errc::kOk);
  Sge rs{p.a.va(0), 8, ro->lkey()};
  EXPECT_EQ(p.a.qp->post_recv(RecvWr{2, {&rs, 1}}), Errc::kAccessDenied);
}

// post_recv_burst's run takes a list's first WR once its region passes the lookup; a region it
// may not use (no local write, another PD) stops the list there with post_recv's error.
TEST(Verbs, RecvBurstStopsAtARegionItMayNotUse) {
  Pair p;
  auto* ro = *p.a.dev->reg_mr(p.a.pd, p.a.data(), 4096, 0);
  auto* other_pd = *p.a.dev->alloc_pd();
  auto* other = *p.a.dev->reg_mr(other_pd, p.a.data(), 4096, kAccessLocalWrite);
  Sge good{p.a.va(0), 8, p.a.mr->lkey()}, read_only{p.a.va(8), 8, ro->lkey()},
      foreign{p.a.va(16), 8, other->lkey()};
  const RecvWr first_read_only[] = {RecvWr{1, {&read_only, 1}}, RecvWr{2, {&good, 1}}};
  std::size_t n = 99;
  EXPECT_EQ(p.a.qp->post_recv_burst(first_read_only, n), Errc::kAccessDenied);
  EXPECT_EQ(n, 0u);
  const RecvWr second_foreign[] = {RecvWr{3, {&good, 1}}, RecvWr{4, {&foreign, 1}},
                                   RecvWr{5, {&good, 1}}};
  EXPECT_EQ(p.a.qp->post_recv_burst(second_foreign, n), Errc::kBadLkey);
  EXPECT_EQ(n, 1u);
  const RecvWr all_good[] = {RecvWr{6, {&good, 1}}, RecvWr{7, {&good, 1}}};
  EXPECT_EQ(p.a.qp->post_recv_burst(all_good, n), Errc::kOk);
  EXPECT_EQ(n, 2u);
  // Exactly those three receives were posted, in order: three SENDs complete them, a fourth
  // finds none (RNR, nothing completes).
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(p.b.post_send(WrOpcode::kSend, 0, 8, 10 + i), Errc::kOk);
  p.run();
  const auto wcs = p.a.recv_wcs();
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[1].wr_id, 6u);
  EXPECT_EQ(wcs[2].wr_id, 7u);
  for (const WorkCompletion& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
}

TEST(Verbs, WrongStateForPosts) {
  SeededRng rng(1);
  PairOptions o;
  Side s = make_side(1, 1, o, rng);
  EXPECT_EQ(s.post_send(WrOpcode::kSend, 0, 8, 1), Errc::kInvalidState);  // RESET
  EXPECT_EQ(s.post_recv(0, 8, 1), Errc::kInvalidState);                   // RESET
  QpAttr a;
  a.qp_state = QpState::kInit;
  ASSERT_EQ(s.qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), Errc::kOk);
  EXPECT_EQ(s.post_send(WrOpcode::kSend, 0, 8, 1), Errc::kInvalidState);  // INIT
  EXPECT_EQ(s.post_recv(0, 8, 1), Errc::kOk);                             // receives allowed
}

TEST(Verbs, QueueFull) {
  PairOptions o;
  o.caps.max_send_wr = 2;
  o.caps.max_recv_wr = 1;
  Pair p(o);
  EXPECT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  EXPECT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 2, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  EXPECT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 3, p.b.va(0), p.b.mr->rkey()),
            Errc::kQueueFull);
  EXPECT_EQ(p.b.post_recv(0, 8, 1), Errc::kOk);
  EXPECT_EQ(p.b.post_recv(0, 8, 2), Errc::kQueueFull);
  p.run();
  EXPECT_EQ(p.a.send_wcs().size(), 2u);
  EXPECT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 8, 4, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
}

TEST(Verbs, UdRejectsReadAndOversizedMessages) {
  PairOptions o;
  o.type = QpType::kUd;
  Pair p(o);
  AddressVector av;
  av.dlid = 2;
  auto* ah = *p.a.dev->create_ah(p.a.pd, av);
  Sge sge{p.a.va(0), 64, p.a.mr->lkey()};
  SendWr wr;
  wr.sg_list = {&sge, 1};
  wr.ah = ah;
  wr.remote_qpn = p.b.qp->qp_num();
  wr.opcode = WrOpcode::kRdmaRead;
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kWrongQpType);
  wr.opcode = WrOpcode::kRdmaWrite;
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kWrongQpType);
  wr.opcode = WrOpcode::kSend;
  sge.length = 4097;  // port MTU is 4096
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kInvalidArgument);
  sge.length = 64;
  wr.ah = nullptr;
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kInvalidArgument);
}

TEST(Verbs, ObjectRules) {
  SeededRng rng(1);
  auto dev = Device::create(DeviceConfig{}, rng);
  auto* pd = *dev->alloc_pd();
  std::vector<std::uint8_t> buf(64);
  EXPECT_EQ(dev->reg_mr(pd, buf.data(), 64, kAccessRemoteWrite).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->reg_mr(pd, buf.data(), 64, 1u << 7).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_cq(0).error(), Errc::kInvalidArgument);
  auto* mr = *dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kBusy);
  auto* cq = *dev->create_cq(8);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.caps.max_send_sge = kSgeMax + 1;
  EXPECT_EQ(dev->create_qp(qa).error(), Errc::kInvalidArgument);
  qa.caps.max_send_sge = 1;
  qa.caps.max_inline_data = kInlineBytesMax + 1;
  EXPECT_EQ(dev->create_qp(qa).error(), Errc::kInvalidArgument);
  qa.caps.max_inline_data = 0;
  auto* qp = *dev->create_qp(qa);
  EXPECT_GE(qp->qp_num(), 2u);
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kBusy);
  EXPECT_EQ(dev->destroy_qp(qp), Errc::kOk);
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kOk);
  EXPECT_EQ(dev->dereg_mr(mr), Errc::kOk);
  EXPECT_EQ(dev->dereg_mr(mr), Errc::kNotFound);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kOk);
}

// A second destroy of any object finds nothing (the pointer is stale: it is looked up by identity,
// never dereferenced, so this is ASan/UBSan clean), and a stale or foreign AH in a UD work
// request is rejected before it is read.
TEST(Verbs, DoubleDestroyIsAnError) {
  SeededRng rng(1);
  auto dev = Device::create(DeviceConfig{}, rng);
  auto other = Device::create(DeviceConfig{}, rng);
  auto* pd = *dev->alloc_pd();
  auto* cq = *dev->create_cq(8);
  auto* srq = *dev->create_srq(pd, 4, 1);
  std::vector<std::uint8_t> buf(64);
  auto* mr = *dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite);
  QpInitAttr qa;
  qa.type = QpType::kUd;
  qa.pd = pd;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  auto* qp = *dev->create_qp(qa);
  AddressVector av;
  av.dlid = 2;
  auto* ah = *dev->create_ah(pd, av);
  auto* foreign_ah = *other->create_ah(*other->alloc_pd(), av);

  // UD to RTS, so post_send reaches its AH checks.
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = 7;
  ASSERT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpQkey), Errc::kOk);
  a.qp_state = QpState::kRtr;
  ASSERT_EQ(qp->modify(a, kQpState), Errc::kOk);
  a.qp_state = QpState::kRts;
  ASSERT_EQ(qp->modify(a, kQpState | kQpSqPsn), Errc::kOk);
  Sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 8, mr->lkey()};
  SendWr wr;
  wr.sg_list = {&sge, 1};
  wr.remote_qpn = 5;
  wr.ah = foreign_ah;
  EXPECT_EQ(qp->post_send(wr), Errc::kInvalidArgument);
  wr.ah = ah;
  EXPECT_EQ(qp->post_send(wr), Errc::kOk);

  EXPECT_EQ(dev->destroy_ah(ah), Errc::kOk);
  EXPECT_EQ(dev->destroy_ah(ah), Errc::kNotFound);
  EXPECT_EQ(qp->post_send(wr), Errc::kInvalidArgument);  // wr.ah is stale now
  EXPECT_EQ(dev->destroy_ah(foreign_ah), Errc::kNotFound);
  EXPECT_EQ(dev->destroy_qp(qp), Errc::kOk);
  EXPECT_EQ(dev->destroy_qp(qp), Errc::kNotFound);
  EXPECT_EQ(dev->destroy_srq(srq), Errc::kOk);
  EXPECT_EQ(dev->destroy_srq(srq), Errc::kNotFound);
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kOk);
  EXPECT_EQ(dev->destroy_cq(cq), Errc::kNotFound);
  qa.send_cq = qa.recv_cq = cq;  // stale CQ
  EXPECT_EQ(dev->create_qp(qa).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->dereg_mr(mr), Errc::kOk);
  EXPECT_EQ(dev->dereg_mr(mr), Errc::kNotFound);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kOk);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kNotFound);
  EXPECT_EQ(dev->reg_mr(pd, buf.data(), 64, kAccessLocalWrite).error(), Errc::kNotFound);
  EXPECT_EQ(dev->create_ah(pd, av).error(), Errc::kNotFound);
  EXPECT_EQ(dev->destroy_qp(nullptr), Errc::kNotFound);
  EXPECT_EQ(dev->dealloc_pd(nullptr), Errc::kNotFound);
}

TEST(Verbs, StaleLkeyAfterDeregIsRejected) {
  Pair p;
  const std::uint32_t old = p.a.mr->lkey();
  ASSERT_EQ(p.a.dev->dereg_mr(p.a.mr), Errc::kOk);
  p.a.mr = *p.a.dev->reg_mr(p.a.pd, p.a.data(), 4096, kAccessLocalWrite);
  EXPECT_NE(p.a.mr->lkey(), old);
  Sge sge{p.a.va(0), 8, old};
  SendWr wr;
  wr.sg_list = {&sge, 1};
  wr.opcode = WrOpcode::kRdmaWrite;
  EXPECT_EQ(p.a.qp->post_send(wr), Errc::kBadLkey);
}

TEST(Verbs, ToStringNames) {
  EXPECT_EQ(to_string(WcStatus::kRnrRetryExcErr), "RNR_RETRY_EXC_ERR");
  EXPECT_EQ(to_string(QpState::kSqd), "SQD");
  EXPECT_EQ(to_string(Errc::kBadLkey), "BAD_LKEY");
  EXPECT_EQ(to_string(WrOpcode::kAtomicCmpAndSwp), "ATOMIC_CMP_AND_SWP");
  EXPECT_EQ(to_string(WcOpcode::kRecvRdmaWithImm), "RECV_RDMA_WITH_IMM");
  EXPECT_EQ(to_string(AsyncEventType::kCqError), "CQ_ERROR");
  EXPECT_EQ(to_string(QpType::kUd), "UD");
}

}  // namespace
}  // namespace weft::test
