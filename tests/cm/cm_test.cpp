// tests/cm/cm_test.cpp — RC connections set up by the Communication Manager over the emulated
// fabric's QP1: SA path, REQ/REP/RTU, then data over the connected QPs byte-exact; REJ reason 8
// with no listener; lost REQ, REP and RTU retried; a duplicate REQ answered with the REP again;
// DREQ/DREP teardown (with a lost DREP); recovery-mode agreement and mismatch; time-out; MRA.
#include <gtest/gtest.h>

#include <cstring>

#include "src/cm/comm_manager.hpp"
#include "src/cm/sa_client.hpp"
#include "tests/cm/cm_test_util.hpp"

namespace weft::cm {
namespace {

using test::Subnet;
constexpr std::uint64_t kService = 0x0106000000004000ull;

struct Side {
  topo::NodeId node = topo::kNoNode;
  fabric::RcEndpoint ep;
  std::vector<CmEvent> events;
  bool accept = true;  // passive side: accept REQs with ep.qp
};

void drain(Subnet& s, Side& side) {
  CommManager& cm = s.net->cm(side.node);
  CmEvent e;
  while (cm.poll_event(e)) {
    if (e.type == CmEventType::kReqReceived && side.accept) {
      AcceptParams p;
      p.qp = side.ep.qp;
      p.private_data = {0xAC, 0xCE};
      EXPECT_EQ(cm.accept(e.conn, p, s.sim.now()), Errc::kOk);
      s.net->kick(side.node);
    }
    side.events.push_back(e);
  }
}

const CmEvent* find(const Side& side, CmEventType t) {
  for (const auto& e : side.events)
    if (e.type == t) return &e;
  return nullptr;
}

wire::PathRecord resolve_path(Subnet& s, topo::NodeId from, topo::NodeId to) {
  SaClient& c = s.net->sa_client(from);
  auto id = c.query(path_query(s.net->lid(from), s.net->lid(to)), s.sim.now());
  EXPECT_TRUE(id.ok());
  s.net->kick(from);
  SaResult r;
  bool got = false;
  EXPECT_TRUE(s.run_until([&] { return got = got || c.poll_result(r); }));
  EXPECT_TRUE(r.ok());
  auto paths = path_records(r);
  EXPECT_EQ(paths.size(), 1u);
  return paths.empty() ? wire::PathRecord{} : paths[0];
}

struct Pair {
  Subnet s;
  Side a, b;  // a active (h0), b passive (h3: across the inter-switch link)
  ConnId conn = 0;
  explicit Pair(sa::SubnetOptions o = {}) : s(test::two_switches(), std::move(o)) {
    a.node = s.hcas[0];
    b.node = s.hcas[3];
    a.ep = fabric::make_endpoint(*s.fab, a.node, 16384);
    b.ep = fabric::make_endpoint(*s.fab, b.node, 16384);
  }
  Errc connect(RecoveryMode mode = RecoveryMode::kGoBackN) {
    ConnectParams p;
    p.service_id = kService;
    p.qp = a.ep.qp;
    p.path = resolve_path(s, a.node, b.node);
    p.recovery = mode;
    p.private_data = {1, 2, 3};
    auto r = s.net->cm(a.node).connect(p, s.sim.now());
    if (!r) return r.error();
    conn = r.value();
    s.net->kick(a.node);
    return Errc::kOk;
  }
  bool run_until(const std::function<bool()>& done, TimeNs limit_ns = 1'000'000'000) {
    return s.run_until(
        [&] {
          drain(s, a);
          drain(s, b);
          return done();
        },
        limit_ns);
  }
  bool established() {
    return run_until(
        [&] { return find(a, CmEventType::kEstablished) && find(b, CmEventType::kEstablished); });
  }
};

WorkCompletion wait_wc(Pair& p, CompletionQueue* cq) {
  WorkCompletion wc{};
  bool got = false;
  EXPECT_TRUE(
      p.run_until([&] { return got = got || cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1; }));
  return wc;
}

TEST(Cm, ConnectsThroughSaPathAndCarriesDataByteExact) {
  Pair p;
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_EQ(p.connect(), Errc::kOk);
  ASSERT_TRUE(p.established());
  // Expect: the REQ's private data reached the listener after Weft's header; the REP's back.
  const CmEvent* req = find(p.b, CmEventType::kReqReceived);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(std::vector<std::uint8_t>(req->private_data.begin(), req->private_data.begin() + 3),
            (std::vector<std::uint8_t>{1, 2, 3}));
  EXPECT_EQ(req->remote_qpn, p.a.ep.qp->qp_num());
  EXPECT_EQ(req->remote_lid, p.s.net->lid(p.a.node));
  const CmEvent* est = find(p.a, CmEventType::kEstablished);
  EXPECT_EQ(est->private_data[0], 0xAC);
  // Expect: each QP points at the other with the other's PSN.
  const QpAttr qa = p.a.ep.qp->query(), qb = p.b.ep.qp->query();
  EXPECT_EQ(qa.qp_state, QpState::kRts);
  EXPECT_EQ(qb.qp_state, QpState::kRts);
  EXPECT_EQ(qa.dest_qpn, p.b.ep.qp->qp_num());
  EXPECT_EQ(qb.dest_qpn, p.a.ep.qp->qp_num());
  EXPECT_EQ(qa.sq_psn, qb.rq_psn);
  EXPECT_EQ(qb.sq_psn, qa.rq_psn);
  EXPECT_EQ(qa.av.dlid, p.s.net->lid(p.b.node));
  EXPECT_EQ(qb.av.dlid, p.s.net->lid(p.a.node));
  EXPECT_EQ(p.s.net->cm(p.a.node).state(p.conn), CmState::kEstablished);

  // RDMA WRITE a -> b, then SEND b -> a: byte-exact.
  constexpr std::uint32_t kBytes = 8192;
  for (std::uint32_t i = 0; i < kBytes; ++i) p.a.ep.mem[i] = static_cast<std::uint8_t>(i * 7 + 3);
  Sge sge{reinterpret_cast<std::uint64_t>(p.a.ep.mem.data()), kBytes, p.a.ep.mr->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = std::span<const Sge>(&sge, 1);
  wr.remote_addr = reinterpret_cast<std::uint64_t>(p.b.ep.mem.data());
  wr.rkey = p.b.ep.mr->rkey();
  ASSERT_EQ(p.a.ep.qp->post_send(wr), Errc::kOk);
  p.s.fab->kick(p.a.node);
  EXPECT_EQ(wait_wc(p, p.a.ep.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(p.a.ep.mem.data(), p.b.ep.mem.data(), kBytes), 0);

  Sge rsge{reinterpret_cast<std::uint64_t>(p.a.ep.mem.data() + kBytes), kBytes, p.a.ep.mr->lkey()};
  RecvWr rwr;
  rwr.sg_list = std::span<const Sge>(&rsge, 1);
  ASSERT_EQ(p.a.ep.qp->post_recv(rwr), Errc::kOk);
  for (std::uint32_t i = 0; i < kBytes; ++i)
    p.b.ep.mem[kBytes + i] = static_cast<std::uint8_t>(i * 13 + 1);
  Sge ssge{reinterpret_cast<std::uint64_t>(p.b.ep.mem.data() + kBytes), kBytes, p.b.ep.mr->lkey()};
  SendWr snd;
  snd.opcode = WrOpcode::kSend;
  snd.send_flags = kSignaled;
  snd.sg_list = std::span<const Sge>(&ssge, 1);
  ASSERT_EQ(p.b.ep.qp->post_send(snd), Errc::kOk);
  p.s.fab->kick(p.b.node);
  EXPECT_EQ(wait_wc(p, p.b.ep.cq).status, WcStatus::kSuccess);
  const WorkCompletion rwc = wait_wc(p, p.a.ep.cq);
  EXPECT_EQ(rwc.status, WcStatus::kSuccess);
  EXPECT_EQ(rwc.byte_len, kBytes);
  EXPECT_EQ(std::memcmp(p.a.ep.mem.data() + kBytes, p.b.ep.mem.data() + kBytes, kBytes), 0);
}

TEST(Cm, RejectsWithReason8WhenNobodyListens) {
  Pair p;
  ASSERT_EQ(p.connect(), Errc::kOk);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kRejected) != nullptr; }));
  const CmEvent* e = find(p.a, CmEventType::kRejected);
  EXPECT_EQ(e->rej_reason, static_cast<std::uint16_t>(wire::RejReason::kInvalidServiceId));
  EXPECT_EQ(e->weft_reject, wire::WeftReject::kNone);
  EXPECT_TRUE(p.b.events.empty());
  EXPECT_EQ(p.s.net->cm(p.a.node).connections(), 0u);
  EXPECT_EQ(p.s.net->cm(p.b.node).stats().rej_sent, 1u);
}

// Loses the first CM MAD with attribute `attr`; the connection must still come up.
class LostMessage : public ::testing::TestWithParam<wire::CmAttr> {};

TEST_P(LostMessage, IsRetried) {
  const wire::CmAttr attr = GetParam();
  Pair p;
  int dropped = 0;
  p.s.net->drop_filter = [&](topo::NodeId, std::span<const std::uint8_t> mad) {
    const bool hit = mad[1] == wire::kMgmtClassCm &&
                     (mad[16] << 8 | mad[17]) == static_cast<int>(attr) && dropped == 0;
    dropped += hit;
    return hit;
  };
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_EQ(p.connect(), Errc::kOk);
  ASSERT_TRUE(p.established()) << wire::to_string(attr);
  EXPECT_EQ(dropped, 1);
  const CmStats& sa = p.s.net->cm(p.a.node).stats();
  const CmStats& sb = p.s.net->cm(p.b.node).stats();
  switch (attr) {
    case wire::CmAttr::kReq:
      EXPECT_GE(sa.resends, 1u);
      break;
    case wire::CmAttr::kRep:
      // The active side resends its REQ; the passive side answers the duplicate with the REP.
      EXPECT_GE(sa.resends, 1u);
      EXPECT_GE(sb.dup_req, 1u);
      break;
    default:  // RTU: the passive side resends its REP; the active side answers with the RTU
      EXPECT_GE(sb.resends, 1u);
      EXPECT_GE(sa.dup_rep, 1u);
      break;
  }
  EXPECT_EQ(find(p.a, CmEventType::kEstablished) != nullptr, true);
  EXPECT_EQ(p.b.events.size(), 2u);  // REQ received once, established once: duplicates hidden
}

INSTANTIATE_TEST_SUITE_P(Cm, LostMessage,
                         ::testing::Values(wire::CmAttr::kReq, wire::CmAttr::kRep,
                                           wire::CmAttr::kRtu),
                         [](const auto& info) { return std::string(wire::to_string(info.param)); });

TEST(Cm, DreqDrepTearDownEvenWhenTheDrepIsLost) {
  for (bool lose_drep : {false, true}) {
    SCOPED_TRACE(lose_drep ? "DREP lost once" : "no loss");
    Pair p;
    int dropped = 0;
    p.s.net->drop_filter = [&](topo::NodeId, std::span<const std::uint8_t> mad) {
      const bool hit = lose_drep && mad[1] == wire::kMgmtClassCm &&
                       mad[17] == static_cast<std::uint8_t>(wire::CmAttr::kDrep) && dropped == 0;
      dropped += hit;
      return hit;
    };
    ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
    ASSERT_EQ(p.connect(), Errc::kOk);
    ASSERT_TRUE(p.established());
    ASSERT_EQ(p.s.net->cm(p.a.node).disconnect(p.conn, p.s.sim.now()), Errc::kOk);
    p.s.net->kick(p.a.node);
    EXPECT_EQ(p.a.ep.qp->state(), QpState::kErr);
    ASSERT_TRUE(p.run_until([&] {
      return find(p.a, CmEventType::kDisconnected) && find(p.b, CmEventType::kDisconnected);
    }));
    EXPECT_EQ(p.b.ep.qp->state(), QpState::kErr);
    if (lose_drep) {
      EXPECT_EQ(dropped, 1);
      EXPECT_GE(p.s.net->cm(p.a.node).stats().resends, 1u);
      EXPECT_GE(p.s.net->cm(p.b.node).stats().dup_dreq, 1u);
      EXPECT_EQ(p.s.net->cm(p.a.node).stats().timeouts, 0u);  // the DREP came, on the resend
    }
    // Both leave TimeWait and forget the connection.
    ASSERT_TRUE(p.run_until([&] {
      return p.s.net->cm(p.a.node).connections() == 0 && p.s.net->cm(p.b.node).connections() == 0;
    }));
    EXPECT_EQ(p.s.net->cm(p.a.node).state(p.conn), CmState::kClosed);
  }
}

TEST(Cm, RecoveryModeMismatchIsRejectedWithAReason) {
  Pair p;
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kSelectiveRepeat), Errc::kOk);
  ASSERT_EQ(p.connect(RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kRejected) != nullptr; }));
  const CmEvent* e = find(p.a, CmEventType::kRejected);
  EXPECT_EQ(e->rej_reason, static_cast<std::uint16_t>(wire::RejReason::kConsumerReject));
  EXPECT_EQ(e->weft_reject, wire::WeftReject::kRecoveryModeMismatch);
  EXPECT_EQ(wire::to_string(e->weft_reject),
            "recovery mode mismatch (go-back-N vs selective repeat)");
  EXPECT_TRUE(p.b.events.empty());  // the listener never saw it as a request
  EXPECT_EQ(p.s.net->cm(p.b.node).connections(), 0u);
  EXPECT_EQ(p.s.net->cm(p.a.node).connections(), 0u);
}

TEST(Cm, SelectiveRepeatOnBothEndsConnects) {
  Pair p;
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kSelectiveRepeat), Errc::kOk);
  ASSERT_EQ(p.connect(RecoveryMode::kSelectiveRepeat), Errc::kOk);
  ASSERT_TRUE(p.established());
  EXPECT_EQ(find(p.b, CmEventType::kReqReceived)->recovery, RecoveryMode::kSelectiveRepeat);
  EXPECT_EQ(p.a.ep.qp->query().recovery, RecoveryMode::kSelectiveRepeat);
  EXPECT_EQ(p.b.ep.qp->query().recovery, RecoveryMode::kSelectiveRepeat);
}

TEST(Cm, SilentPeerTimesOutAfterMaxRetries) {
  sa::SubnetOptions o;
  o.cm.max_cm_retries = 2;
  Pair p(o);
  p.s.net->drop_filter = [&](topo::NodeId from, std::span<const std::uint8_t> mad) {
    return from == p.a.node && mad[1] == wire::kMgmtClassCm;
  };
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_EQ(p.connect(), Errc::kOk);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kTimeout) != nullptr; }));
  const CmStats& st = p.s.net->cm(p.a.node).stats();
  EXPECT_EQ(st.resends, 2u);
  EXPECT_EQ(st.timeouts, 1u);
  EXPECT_EQ(p.s.net->cm(p.a.node).connections(), 0u);
}

// SIDR (IBA 12.11): a UD service's QPN and Q_Key, resolved over QP1 across the fabric; an
// unknown ServiceID gets status 1; a lost SIDR_REQ is resent; a silent peer times out.
TEST(Cm, SidrResolvesAUdServiceAndRetries) {
  Pair p;
  CommManager& a = p.s.net->cm(p.a.node);
  CommManager& b = p.s.net->cm(p.b.node);
  constexpr std::uint64_t kUdService = 0x0106000000005000ull;
  ASSERT_EQ(b.listen_ud(kUdService, 0x00ABCD, 0x11223344), Errc::kOk);
  EXPECT_EQ(b.listen_ud(kUdService, 1, 1), Errc::kInvalidArgument);
  int dropped = 0;
  p.s.net->drop_filter = [&](topo::NodeId, std::span<const std::uint8_t> mad) {
    const bool hit = mad[1] == wire::kMgmtClassCm &&
                     (mad[16] << 8 | mad[17]) == static_cast<int>(wire::CmAttr::kSidrReq) &&
                     dropped == 0;
    dropped += hit;
    return hit;
  };
  const std::uint8_t pd[] = {0x5D, 0x12};
  auto id = a.sidr_request(kUdService, p.s.net->lid(p.b.node), 0xFFFF, pd, p.s.sim.now());
  ASSERT_TRUE(id.ok());
  p.s.net->kick(p.a.node);
  EXPECT_EQ(a.sidr_pending(), 1u);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kSidrReply) != nullptr; }));
  const CmEvent* e = find(p.a, CmEventType::kSidrReply);
  EXPECT_EQ(e->conn, id.value());
  EXPECT_EQ(e->sidr_status, wire::SidrStatus::kValid);
  EXPECT_EQ(e->remote_qpn, 0x00ABCDu);
  EXPECT_EQ(e->qkey, 0x11223344u);
  EXPECT_EQ(e->service_id, kUdService);
  EXPECT_EQ(e->remote_lid, p.s.net->lid(p.b.node));
  EXPECT_EQ(e->private_data.size(), wire::kSidrRepPrivateBytes);
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(a.stats().resends, 1u);
  EXPECT_EQ(a.sidr_pending(), 0u);
  EXPECT_TRUE(p.b.events.empty()) << "the passive side answers on its own";
  // An RC-only or unknown ServiceID: status 1.
  p.a.events.clear();
  ASSERT_EQ(b.listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_TRUE(a.sidr_request(kService, p.s.net->lid(p.b.node), 0xFFFF, {}, p.s.sim.now()).ok());
  p.s.net->kick(p.a.node);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kSidrReply) != nullptr; }));
  EXPECT_EQ(find(p.a, CmEventType::kSidrReply)->sidr_status,
            wire::SidrStatus::kServiceIdNotSupported);
  EXPECT_EQ(find(p.a, CmEventType::kSidrReply)->remote_qpn, 0u);
  // A silent peer: max_cm_retries resends, then kTimeout with the request ID.
  p.a.events.clear();
  p.s.net->drop_filter = [&](topo::NodeId from, std::span<const std::uint8_t> mad) {
    return from == p.a.node && mad[1] == wire::kMgmtClassCm;
  };
  const std::uint64_t resends0 = a.stats().resends;
  auto lost = a.sidr_request(kUdService, p.s.net->lid(p.b.node), 0xFFFF, {}, p.s.sim.now());
  ASSERT_TRUE(lost.ok());
  p.s.net->kick(p.a.node);
  ASSERT_TRUE(p.run_until([&] { return find(p.a, CmEventType::kTimeout) != nullptr; }));
  EXPECT_EQ(find(p.a, CmEventType::kTimeout)->conn, lost.value());
  EXPECT_EQ(a.stats().resends - resends0, CmConfig{}.max_cm_retries);
  EXPECT_EQ(a.sidr_pending(), 0u);
  // API errors.
  EXPECT_EQ(a.sidr_request(kUdService, 0, 0xFFFF, {}, p.s.sim.now()).error(),
            Errc::kInvalidArgument);
  const std::vector<std::uint8_t> big(wire::kSidrReqPrivateBytes + 1, 0);
  EXPECT_EQ(a.sidr_request(kUdService, 5, 0xFFFF, big, p.s.sim.now()).error(),
            Errc::kInvalidArgument);
  EXPECT_EQ(b.stop_listening(kUdService), Errc::kOk);
}

TEST(Cm, MraReceivedExtendsTheWait) {
  Pair p;
  p.s.net->drop_filter = [&](topo::NodeId from, std::span<const std::uint8_t> mad) {
    return from == p.a.node && mad[1] == wire::kMgmtClassCm;
  };
  ASSERT_EQ(p.connect(), Errc::kOk);
  CommManager& cm = p.s.net->cm(p.a.node);
  const TimeNs before = cm.next_deadline();
  ASSERT_LT(before, p.s.sim.now() + 100'000'000);
  wire::CmMra mra;
  mra.local_comm_id = 77;
  mra.remote_comm_id = p.conn;
  mra.msg_mraed = wire::CmMsgKind::kReq;
  mra.service_timeout = 20;  // 4.096 us * 2^20 = 4.3 s
  GsiMad in{p.s.net->lid(p.b.node), 1, {}};
  wire::encode_cm(1, mra, in.mad);
  cm.on_mad(in, p.s.sim.now());
  EXPECT_EQ(cm.stats().mra_received, 1u);
  EXPECT_GE(cm.next_deadline(), p.s.sim.now() + timeout_code_ns(20));
  // An MRA for a message we did not send is ignored.
  mra.msg_mraed = wire::CmMsgKind::kRep;
  wire::encode_cm(2, mra, in.mad);
  cm.on_mad(in, p.s.sim.now());
  EXPECT_EQ(cm.stats().mra_received, 1u);
}

TEST(Cm, SlowConsumerSendsMraThenAccepts) {
  Pair p;
  p.b.accept = false;  // the consumer sits on the REQ
  ASSERT_EQ(p.s.net->cm(p.b.node).listen(kService, RecoveryMode::kGoBackN), Errc::kOk);
  ASSERT_EQ(p.connect(), Errc::kOk);
  // The active side resends its REQ; the passive side answers the duplicate with an MRA.
  ASSERT_TRUE(p.run_until([&] { return p.s.net->cm(p.a.node).stats().mra_received > 0; }));
  EXPECT_EQ(p.s.net->cm(p.b.node).stats().mra_sent, 1u);
  EXPECT_EQ(p.s.net->cm(p.b.node).stats().dup_req, 1u);
  // Now the consumer accepts; nothing timed out meanwhile.
  const CmEvent* req = find(p.b, CmEventType::kReqReceived);
  ASSERT_NE(req, nullptr);
  AcceptParams ap;
  ap.qp = p.b.ep.qp;
  ASSERT_EQ(p.s.net->cm(p.b.node).accept(req->conn, ap, p.s.sim.now()), Errc::kOk);
  p.s.net->kick(p.b.node);
  ASSERT_TRUE(p.established());
  EXPECT_EQ(p.s.net->cm(p.a.node).stats().timeouts, 0u);
}

TEST(Cm, ApiErrors) {
  Pair p;
  CommManager& cm = p.s.net->cm(p.a.node);
  ConnectParams c;
  c.service_id = kService;
  EXPECT_EQ(cm.connect(c, 0).error(), Errc::kInvalidArgument);  // no QP
  c.qp = p.a.ep.qp;
  EXPECT_EQ(cm.connect(c, 0).error(), Errc::kInvalidArgument);  // no DLID
  c.path.dlid = p.s.net->lid(p.b.node);
  c.private_data.assign(kReqUserPrivateBytes + 1, 0);
  EXPECT_EQ(cm.connect(c, 0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(cm.listen(5, RecoveryMode::kGoBackN), Errc::kOk);
  EXPECT_EQ(cm.listen(5, RecoveryMode::kGoBackN), Errc::kInvalidArgument);
  EXPECT_EQ(cm.stop_listening(5), Errc::kOk);
  EXPECT_EQ(cm.stop_listening(5), Errc::kNotFound);
  EXPECT_EQ(cm.disconnect(12345, 0), Errc::kNotFound);
  EXPECT_EQ(cm.accept(12345, {}, 0), Errc::kNotFound);
  EXPECT_EQ(p.a.ep.qp->state(), QpState::kReset);  // nothing was touched
}

}  // namespace
}  // namespace weft::cm
