// tests/transport/device_test.cpp — the Device's receive checks: malformed bytes (short, garbage,
// bit flips) dropped and counted without crashing, DLID and QPN checks, P_Key membership rules
// (IBA 10.9.3), CRC failures in both delivery paths, and a seeded lossy-medium stress run
// (drops, duplicates, reordering, corruption) over both recovery modes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "tests/transport/pump.hpp"

namespace weft::test {
namespace {

std::vector<std::uint8_t> one_packet(Pair& p) {
  EXPECT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 100, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  TxPacket pkt;
  EXPECT_TRUE(p.a.dev->poll_transmit(0, pkt));
  std::vector<std::uint8_t> bytes(pkt.wire_bytes());
  pkt.write_to(bytes);
  return bytes;
}

TEST(Device, ShortAndGarbageBytesAreCountedMalformed) {
  Pair p;
  auto good = one_packet(p);
  for (std::size_t n = 0; n < good.size(); ++n)
    p.b.dev->on_packet(std::span<const std::uint8_t>(good.data(), n), 0);
  EXPECT_EQ(p.b.dev->counters().rx_malformed + p.b.dev->counters().rx_bad_vcrc +
                p.b.dev->counters().rx_bad_icrc,
            good.size());
  EXPECT_EQ(p.b.dev->counters().rx_malformed, good.size());
  SeededRng r(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::uint8_t> junk(r.below(200));
    for (auto& b : junk) b = static_cast<std::uint8_t>(r.next_u64());
    p.b.dev->on_packet(junk, 0);
  }
  EXPECT_EQ(p.b.dev->counters().rx_packets, good.size() + 2000);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.b.data()[i], 0);
}

TEST(Device, EveryBitFlipIsDropped) {
  Pair p;
  auto good = one_packet(p);
  std::uint64_t drops = 0;
  for (std::size_t bit = 0; bit < good.size() * 8; ++bit) {
    auto bad = good;
    bad[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    p.b.dev->on_packet(bad, 0);
  }
  const auto& c = p.b.dev->counters();
  drops = c.rx_malformed + c.rx_bad_icrc + c.rx_bad_vcrc;
  EXPECT_EQ(drops, good.size() * 8);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.b.data()[i], 0);
  p.b.dev->on_packet(good, 0);  // the intact one still lands
  EXPECT_EQ(p.b.data()[0], p.a.data()[0]);
}

TEST(Device, CorruptFlagByReferenceIsCrcFailure) {
  PairOptions o;
  o.crc = CrcMode::kModel;
  Pair p(o);
  ASSERT_EQ(p.a.post_send(WrOpcode::kRdmaWrite, 0, 100, 1, p.b.va(0), p.b.mr->rkey()), Errc::kOk);
  TxPacket pkt;
  ASSERT_TRUE(p.a.dev->poll_transmit(0, pkt));
  EXPECT_FALSE(pkt.crcs_valid);
  pkt.corrupt = true;
  p.b.dev->on_packet(pkt, 0);
  EXPECT_EQ(p.b.dev->counters().rx_bad_icrc, 1u);
  // write_to of a corrupt packet gives a real ICRC failure to a computing receiver.
  PairOptions oc;
  Pair q(oc);
  std::vector<std::uint8_t> bytes(pkt.wire_bytes());
  pkt.write_to(bytes);
  q.b.dev->on_packet(bytes, 0);
  EXPECT_EQ(q.b.dev->counters().rx_bad_icrc, 1u);
}

TEST(Device, BadDlidAndUnknownQpAreCounted) {
  Pair p;
  auto good = one_packet(p);
  p.a.dev->on_packet(good, 0);  // DLID 2 is not a's LID
  EXPECT_EQ(p.a.dev->counters().rx_bad_dlid, 1u);
  ASSERT_EQ(p.b.dev->set_port_lid(1, 3), Errc::kOk);
  p.b.dev->on_packet(good, 0);
  EXPECT_EQ(p.b.dev->counters().rx_bad_dlid, 1u);
  ASSERT_EQ(p.b.dev->set_port_lid(1, 2), Errc::kOk);
  QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_EQ(p.b.qp->modify(a, kQpState), Errc::kOk);
  p.b.dev->on_packet(good, 0);
  EXPECT_EQ(p.b.dev->counters().rx_no_qp, 1u);
}

// IBA 10.9.3: low 15 bits must match; at least one side a full member; 0x0000/0x8000 invalid.
struct PkeyCase {
  std::uint16_t mine, theirs;
  bool accepted;
};
class Pkey : public ::testing::TestWithParam<PkeyCase> {};

TEST_P(Pkey, MembershipRules) {
  SeededRng rng(1);
  PairOptions o;
  Side a = make_side(1, 1, o, rng);
  Side b = make_side(2, 2, o, rng);
  DeviceConfig ca = a.dev->config(), cb = b.dev->config();
  ca.ports[0].pkeys = {GetParam().theirs};
  cb.ports[0].pkeys = {GetParam().mine};
  a.dev = Device::create(ca, rng);
  b.dev = Device::create(cb, rng);
  for (Side* s : {&a, &b}) {
    s->pd = *s->dev->alloc_pd();
    s->scq = s->rcq = *s->dev->create_cq(64);
    s->mr = *s->dev->reg_mr(s->pd, s->data(), s->size(), o.access);
    QpInitAttr qa;
    qa.pd = s->pd;
    qa.send_cq = qa.recv_cq = s->scq;
    s->qp = *s->dev->create_qp(qa);
  }
  connect_rc(a.qp, 2, b.qp->qp_num(), 0, 0, o);
  connect_rc(b.qp, 1, a.qp->qp_num(), 0, 0, o);
  ASSERT_EQ(a.post_send(WrOpcode::kRdmaWrite, 0, 8, 1, b.va(0), b.mr->rkey()), Errc::kOk);
  TxPacket pkt;
  ASSERT_TRUE(a.dev->poll_transmit(0, pkt));
  b.dev->on_packet(pkt, 0);
  EXPECT_EQ(b.dev->counters().rx_bad_pkey, GetParam().accepted ? 0u : 1u);
}

INSTANTIATE_TEST_SUITE_P(
    All, Pkey,
    ::testing::Values(PkeyCase{0xFFFF, 0xFFFF, true}, PkeyCase{0xFFFF, 0x7FFF, true},
                      PkeyCase{0x7FFF, 0xFFFF, true}, PkeyCase{0x7FFF, 0x7FFF, false},
                      PkeyCase{0x8001, 0x8002, false}, PkeyCase{0x8000, 0x8000, false}));

// ---- seeded lossy stress ------------------------------------------------------------------

struct Stress {
  std::uint64_t seed;
  RecoveryMode mode;
};

void run_stress(std::uint64_t seed, RecoveryMode mode) {
  SCOPED_TRACE("SEED=" + std::to_string(seed));
  SeededRng r(seed);
  PairOptions o;
  o.mtu = static_cast<Mtu>(1 + r.below(5));
  o.recovery = mode;
  o.timeout = 1;
  o.retry_cnt = 7;
  o.region_bytes = 1 << 18;
  o.crc = r.chance(0.5) ? CrcMode::kCompute : CrcMode::kModel;
  Pair p(o);
  const double drop = 0.01 + 0.2 * r.unit(), dup = 0.02, hold = 0.05 * r.unit(), corrupt = 0.01;
  p.pump->hook = [&](Packet& pk) {
    const double u = r.unit();
    if (u < drop) return Action::kDrop;
    if (u < drop + dup) return Action::kDuplicate;
    if (u < drop + dup + hold) return Action::kHold;
    // kModel receivers do not check CRCs (the medium says "corrupt" instead): flip bits only
    // where a CRC will catch them.
    if (u < drop + dup + hold + corrupt && o.crc == CrcMode::kCompute) {
      pk.bytes[r.below(pk.bytes.size())] ^= 0x40;
      return Action::kDeliver;
    }
    return Action::kDeliver;
  };
  constexpr int kOps = 24;
  constexpr std::size_t kSlot = 8192;
  for (std::size_t i = 0; i < (1 << 18); ++i)
    p.a.data()[i] = static_cast<std::uint8_t>(i * 31 + seed);
  std::vector<WrOpcode> ops;
  int sends = 0;
  for (int i = 0; i < kOps; ++i) {
    const auto k = r.below(5);
    const WrOpcode op = k == 0   ? WrOpcode::kSend
                        : k == 1 ? WrOpcode::kRdmaRead
                        : k == 2 ? WrOpcode::kAtomicFetchAndAdd
                                 : WrOpcode::kRdmaWrite;
    const auto len = static_cast<std::uint32_t>(1 + r.below(kSlot - 1));
    const std::size_t off = i * kSlot;
    if (op == WrOpcode::kSend) {
      ASSERT_EQ(p.b.post_recv(off, kSlot, i), Errc::kOk);
      ++sends;
    }
    if (op == WrOpcode::kAtomicFetchAndAdd) {
      SendWr wr;
      Sge sge{p.a.va(off), 8, p.a.mr->lkey()};
      wr.wr_id = i;
      wr.sg_list = {&sge, 1};
      wr.opcode = op;
      wr.send_flags = kSignaled;
      wr.remote_addr = p.b.va((1 << 18) - 8);
      wr.rkey = p.b.mr->rkey();
      wr.compare_add = 1;
      ASSERT_EQ(p.a.qp->post_send(wr), Errc::kOk);
    } else if (op == WrOpcode::kRdmaRead) {
      for (std::size_t j = 0; j < len; ++j) p.b.data()[off + j] = static_cast<std::uint8_t>(j ^ i);
      ASSERT_EQ(p.a.post_send(op, off, len, i, p.b.va(off), p.b.mr->rkey()), Errc::kOk);
    } else {
      ASSERT_EQ(p.a.post_send(op, off, len, i, p.b.va(off), p.b.mr->rkey()), Errc::kOk);
    }
    ops.push_back(op);
  }
  for (int it = 0; it < 200000; ++it) {
    const std::size_t moved = p.pump->step();
    if (p.pump->held() && (moved == 0 || r.chance(0.3))) {
      p.pump->release_held(r.chance(0.5));
      continue;
    }
    if (moved) continue;
    TimeNs t = std::min(p.a.dev->next_deadline(), p.b.dev->next_deadline());
    if (t == kNoDeadline) break;
    p.pump->now = std::max(p.pump->now, t);
    p.a.dev->on_deadline(p.pump->now);
    p.b.dev->on_deadline(p.pump->now);
  }
  auto sw = p.a.send_wcs();
  ASSERT_EQ(sw.size(), static_cast<std::size_t>(kOps));
  for (int i = 0; i < kOps; ++i) {
    EXPECT_EQ(sw[i].wr_id, static_cast<std::uint64_t>(i));
    EXPECT_EQ(sw[i].status, WcStatus::kSuccess) << to_string(sw[i].status);
  }
  EXPECT_EQ(p.b.recv_wcs().size(), static_cast<std::size_t>(sends));
  std::uint64_t counter;
  std::memcpy(&counter, p.b.data() + (1 << 18) - 8, 8);
  int adds = 0;
  for (auto op : ops) adds += op == WrOpcode::kAtomicFetchAndAdd;
  EXPECT_EQ(counter, static_cast<std::uint64_t>(adds));  // each atomic ran exactly once
  EXPECT_TRUE(p.a.guards_intact());
  EXPECT_TRUE(p.b.guards_intact());
}

// WEFT_STRESS_SEEDS=n runs n seeds (default 60); WEFT_STRESS_SEED=s runs only seed s.
std::pair<std::uint64_t, std::uint64_t> seed_range() {
  if (const char* one = std::getenv("WEFT_STRESS_SEED")) {
    const auto s = std::strtoull(one, nullptr, 10);
    return {s, s};
  }
  const char* n = std::getenv("WEFT_STRESS_SEEDS");
  return {1, n ? std::strtoull(n, nullptr, 10) : 60};
}

TEST(Device, LossyStressGoBackN) {
  const auto [lo, hi] = seed_range();
  for (std::uint64_t s = lo; s <= hi && !HasFatalFailure(); ++s)
    run_stress(s, RecoveryMode::kGoBackN);
}

TEST(Device, LossyStressSelectiveRepeat) {
  const auto [lo, hi] = seed_range();
  for (std::uint64_t s = lo; s <= hi && !HasFatalFailure(); ++s)
    run_stress(s, RecoveryMode::kSelectiveRepeat);
}

}  // namespace
}  // namespace weft::test

namespace weft::test {
namespace {

// The Device keeps QP timers in a heap (next_deadline/on_deadline do not scan every QP).
// Expect: with 300 QPs of different timeouts whose packets all vanish, next_deadline() is always
// the earliest pending QP deadline, each QP times out retry_cnt times at multiples of its own
// timeout and then completes RETRY_EXC_ERR at exactly (retry_cnt + 1) x its timeout; QPs
// destroyed or moved to ERR while their timers run never fire.
TEST(Device, ManyQpTimersFireInDeadlineOrder) {
  constexpr std::uint32_t kQps = 300, kRetry = 2;
  SeededRng rng(7);
  DeviceConfig cfg;
  cfg.ports[0].lid = 1;
  auto dev = Device::create(cfg, rng);
  auto* pd = *dev->alloc_pd();
  auto* cq = *dev->create_cq(4 * kQps);
  std::vector<std::uint8_t> buf(64);
  auto* mr = *dev->reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  std::vector<QueuePair*> qps;
  std::map<std::uint32_t, TimeNs> want;  // QPN -> time of its RETRY_EXC_ERR
  PairOptions o;
  o.retry_cnt = kRetry;
  for (std::uint32_t i = 0; i < kQps; ++i) {
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    auto* qp = *dev->create_qp(qa);
    o.timeout = static_cast<std::uint8_t>(1 + (i * 7) % 12);
    connect_rc(qp, 2, 100 + i, 0, 0, o);
    Sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 8, mr->lkey()};
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    ASSERT_EQ(qp->post_send(wr), Errc::kOk);
    qps.push_back(qp);
    want[qp->qp_num()] = (kRetry + 1) * (TimeNs{4096} << o.timeout);
  }
  TxPacket pkt;
  while (dev->poll_transmit(0, pkt)) {
  }
  // Two QPs leave early: one destroyed (after ERR, as verbs require no users), one to ERR.
  QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_EQ(qps[5]->modify(err, kQpState), Errc::kOk);
  want[qps[5]->qp_num()] = 0;  // flushed at once
  const std::uint32_t gone = qps[9]->qp_num();
  ASSERT_EQ(qps[9]->modify(err, kQpState), Errc::kOk);
  ASSERT_EQ(dev->destroy_qp(qps[9]), Errc::kOk);
  want.erase(gone);
  std::map<std::uint32_t, TimeNs> got;
  std::vector<WorkCompletion> wcs(4 * kQps);
  auto collect = [&](TimeNs now) {
    for (std::size_t n = cq->poll(wcs), i = 0; i < n; ++i) {
      if (wcs[i].qp_num == gone) continue;  // its flush, before the destroy
      EXPECT_EQ(got.count(wcs[i].qp_num), 0u) << "qp " << wcs[i].qp_num << " completed twice";
      got[wcs[i].qp_num] = now;
      EXPECT_EQ(wcs[i].status, now == 0 ? WcStatus::kWrFlushErr : WcStatus::kRetryExcErr);
    }
  };
  collect(0);
  TimeNs now = 0;
  for (int steps = 0; steps < 10000; ++steps) {
    const TimeNs t = dev->next_deadline();
    if (t == kNoDeadline) break;
    // The earliest pending deadline: no QP still waiting has an earlier one.
    for (const auto& [qpn, at] : want)
      if (!got.count(qpn)) {
        EXPECT_GE(at, t) << "qp " << qpn;
      }
    ASSERT_GE(t, now);
    now = t;
    dev->on_deadline(now);
    while (dev->poll_transmit(now, pkt)) {  // retransmissions, dropped
    }
    collect(now);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(dev->counters().retry_exc, kQps - 2);
  EXPECT_EQ(dev->counters().timeouts, (kQps - 2) * (kRetry + 1));
}

}  // namespace
}  // namespace weft::test
