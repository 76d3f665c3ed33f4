// tests/transport/qp_state_test.cpp — the QP state machine (IBA 10.3.1) and modify_qp attribute
// rules (IBA 11.2.5.3): every (from, to) pair for RC and UD, with the required mask, each required
// attribute missing, and an extra attribute; illegal transitions; out-of-range values. A failing
// modify returns its error and leaves the QP unchanged.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

constexpr QpState kAll[] = {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts,
                            QpState::kSqd,   QpState::kSqe,  QpState::kErr};

// The expected table, written from IBA 11.2.5.3 / ibv_modify_qp(3) (required attributes besides
// the state; -1 = no such transition).
std::int64_t expected_required(QpType t, QpState from, QpState to) {
  using S = QpState;
  const bool rc = t == QpType::kRc;
  if (to == S::kReset || to == S::kErr) return from == S::kSqe ? (rc ? -1 : 0) : 0;
  if (from == S::kReset && to == S::kInit)
    return rc ? (kQpPkeyIndex | kQpPort | kQpAccessFlags) : (kQpPkeyIndex | kQpPort | kQpQkey);
  if (from == S::kInit && to == S::kInit) return 0;
  if (from == S::kInit && to == S::kRtr)
    return rc ? (kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer)
              : 0;
  if (from == S::kRtr && to == S::kRts)
    return rc ? (kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic) : kQpSqPsn;
  if (from == S::kRts && (to == S::kRts || to == S::kSqd)) return 0;
  if (from == S::kSqd && (to == S::kRts || to == S::kSqd)) return 0;
  if (from == S::kSqe && to == S::kRts) return rc ? -1 : 0;
  return -1;
}

QpAttr good_attr(QpState to) {
  QpAttr a;
  a.qp_state = to;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = 0x11;
  a.access_flags = kAccessRemoteWrite;
  a.av.dlid = 2;
  a.path_mtu = Mtu::k1024;
  a.dest_qpn = 5;
  a.rq_psn = 1;
  a.sq_psn = 2;
  a.max_dest_rd_atomic = 2;
  a.max_rd_atomic = 2;
  a.min_rnr_timer = 3;
  a.timeout = 10;
  a.retry_cnt = 3;
  a.rnr_retry = 3;
  return a;
}

struct Fixture {
  SeededRng rng{1};
  std::unique_ptr<Device> dev;
  QueuePair* qp = nullptr;
  explicit Fixture(QpType t) {
    DeviceConfig cfg;
    cfg.ports[0].lid = 1;
    dev = Device::create(cfg, rng);
    auto* pd = *dev->alloc_pd();
    auto* cq = *dev->create_cq(64);
    QpInitAttr ia;
    ia.type = t;
    ia.pd = pd;
    ia.send_cq = cq;
    ia.recv_cq = cq;
    qp = *dev->create_qp(ia);
  }
  // Drives the QP from RESET to `s` along the usual path.
  bool drive(QpState s) {
    const QpType t = qp->type();
    auto step = [&](QpState to) {
      const auto req = expected_required(t, qp->state(), to);
      return qp->modify(good_attr(to), kQpState | static_cast<std::uint32_t>(req)) == Errc::kOk;
    };
    switch (s) {
      case QpState::kReset:
        return true;
      case QpState::kErr:
        return step(QpState::kErr);
      case QpState::kSqe:
        return false;
      default:
        break;
    }
    if (!step(QpState::kInit) || s == QpState::kInit) return qp->state() == s;
    if (!step(QpState::kRtr) || s == QpState::kRtr) return qp->state() == s;
    if (!step(QpState::kRts) || s == QpState::kRts) return qp->state() == s;
    return step(QpState::kSqd) && qp->state() == s;
  }
};

class Transition : public ::testing::TestWithParam<std::tuple<QpType, QpState, QpState>> {};

TEST_P(Transition, RequiredMissingExtra) {
  const auto [type, from, to] = GetParam();
  Fixture f(type);
  if (!f.drive(from)) GTEST_SKIP() << "SQE is entered by errors only";
  const std::int64_t req = expected_required(type, from, to);
  const QpAttr a = good_attr(to);
  const auto before = f.qp->query();
  if (req < 0) {
    EXPECT_EQ(f.qp->modify(a, kQpState), Errc::kInvalidTransition);
    EXPECT_EQ(f.qp->state(), from);
    return;
  }
  const auto required = static_cast<std::uint32_t>(req);
  for (std::uint32_t bit = 1; bit != 0 && bit <= kQpCurState; bit <<= 1) {
    if (!(required & bit)) continue;
    EXPECT_EQ(f.qp->modify(a, kQpState | (required & ~bit)), Errc::kMissingAttribute) << bit;
    EXPECT_EQ(f.qp->state(), from);
  }
  const bool rc_init_rtr = type == QpType::kRc && from == QpState::kInit && to == QpState::kRtr;
  const std::uint32_t extra = rc_init_rtr ? kQpSqPsn : kQpDestQpn;
  EXPECT_EQ(f.qp->modify(a, kQpState | required | extra), Errc::kExtraAttribute);
  EXPECT_EQ(f.qp->state(), from);
  EXPECT_EQ(f.qp->query().dest_qpn, before.dest_qpn);
  EXPECT_EQ(f.qp->modify(a, kQpState | required), Errc::kOk);
  EXPECT_EQ(f.qp->state(), to);
}

std::string name(const ::testing::TestParamInfo<Transition::ParamType>& i) {
  return std::string(to_string(std::get<0>(i.param))) + "_" +
         std::string(to_string(std::get<1>(i.param))) + "_to_" +
         std::string(to_string(std::get<2>(i.param)));
}

INSTANTIATE_TEST_SUITE_P(All, Transition,
                         ::testing::Combine(::testing::Values(QpType::kRc, QpType::kUd),
                                            ::testing::ValuesIn(kAll), ::testing::ValuesIn(kAll)),
                         name);

struct RangeCase {
  const char* name;
  std::uint32_t mask;
  void (*set)(QpAttr&);
};

class OutOfRange : public ::testing::TestWithParam<RangeCase> {};

TEST_P(OutOfRange, RejectedAndUnchanged) {
  Fixture f(QpType::kRc);
  ASSERT_TRUE(f.drive(QpState::kInit));
  const std::uint32_t req =
      kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
  QpAttr a = good_attr(QpState::kRtr);
  GetParam().set(a);
  const QpAttr before = f.qp->query();
  EXPECT_EQ(f.qp->modify(a, kQpState | req | GetParam().mask), Errc::kInvalidArgument);
  const QpAttr after = f.qp->query();
  EXPECT_EQ(after.qp_state, QpState::kInit);
  EXPECT_EQ(after.dest_qpn, before.dest_qpn);
  EXPECT_EQ(after.path_mtu, before.path_mtu);
  EXPECT_EQ(after.pkey_index, before.pkey_index);
  EXPECT_EQ(after.access_flags, before.access_flags);
}

INSTANTIATE_TEST_SUITE_P(
    All, OutOfRange,
    ::testing::Values(
        RangeCase{"mtu_8192", 0, [](QpAttr& a) { a.path_mtu = static_cast<Mtu>(6); }},
        RangeCase{"mtu_0", 0, [](QpAttr& a) { a.path_mtu = static_cast<Mtu>(0); }},
        RangeCase{"dest_qpn_25_bits", 0, [](QpAttr& a) { a.dest_qpn = 1u << 24; }},
        RangeCase{"rq_psn_25_bits", 0, [](QpAttr& a) { a.rq_psn = 1u << 24; }},
        RangeCase{"max_dest_rd_atomic_17", 0, [](QpAttr& a) { a.max_dest_rd_atomic = 17; }},
        RangeCase{"min_rnr_timer_32", 0, [](QpAttr& a) { a.min_rnr_timer = 32; }},
        RangeCase{"pkey_index_past_table", kQpPkeyIndex, [](QpAttr& a) { a.pkey_index = 1; }},
        RangeCase{"access_unknown_bit", kQpAccessFlags,
                  [](QpAttr& a) { a.access_flags = 1u << 9; }},
        RangeCase{"av_sl_16", 0, [](QpAttr& a) { a.av.sl = 16; }},
        RangeCase{"av_port_2", 0, [](QpAttr& a) { a.av.port_num = 2; }}),
    [](const auto& i) { return std::string(i.param.name); });

TEST(QpState, RtsOutOfRangeTimeoutRetryRnr) {
  for (int k = 0; k < 4; ++k) {
    Fixture f(QpType::kRc);
    ASSERT_TRUE(f.drive(QpState::kRtr));
    QpAttr a = good_attr(QpState::kRts);
    if (k == 0) a.timeout = 32;
    if (k == 1) a.retry_cnt = 8;
    if (k == 2) a.rnr_retry = 8;
    if (k == 3) a.max_rd_atomic = 17;
    EXPECT_EQ(f.qp->modify(
                  a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic),
              Errc::kInvalidArgument)
        << k;
    EXPECT_EQ(f.qp->state(), QpState::kRtr);
  }
}

TEST(QpState, CurStateMustMatch) {
  Fixture f(QpType::kRc);
  ASSERT_TRUE(f.drive(QpState::kRts));
  QpAttr a = good_attr(QpState::kRts);
  a.cur_qp_state = QpState::kRtr;
  EXPECT_EQ(f.qp->modify(a, kQpCurState | kQpMinRnrTimer), Errc::kInvalidArgument);
  a.cur_qp_state = QpState::kRts;
  a.min_rnr_timer = 9;
  EXPECT_EQ(f.qp->modify(a, kQpCurState | kQpMinRnrTimer), Errc::kOk);
  EXPECT_EQ(f.qp->query().min_rnr_timer, 9);
}

TEST(QpState, SqdRaisesSqDrained) {
  Fixture f(QpType::kRc);
  ASSERT_TRUE(f.drive(QpState::kSqd));
  AsyncEvent e;
  ASSERT_TRUE(f.dev->poll_async_event(e));
  EXPECT_EQ(e.type, AsyncEventType::kSqDrained);
  EXPECT_EQ(e.qp_num, f.qp->qp_num());
}

TEST(QpState, ResetForgetsWork) {
  Pair p;
  ASSERT_EQ(p.a.post_send(WrOpcode::kSend, 0, 8, 1), Errc::kOk);
  QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_EQ(p.a.qp->modify(a, kQpState), Errc::kOk);
  TxPacket pkt;
  EXPECT_FALSE(p.a.dev->poll_transmit(0, pkt));
  EXPECT_EQ(p.a.send_wcs().size(), 0u);  // RESET completes nothing (IBA 10.3.1)
}

}  // namespace
}  // namespace weft::test
