// tests/io/driver_test.cpp — the real-time Driver (src/io/driver.hpp) over an in-process loop
// medium: one Driver drives two Devices, the threaded mode (lock + kick), deadlines through the
// timerfd, and an idle Driver that sleeps instead of spinning.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "src/io/driver.hpp"

namespace weft::io {
namespace {

// Two queues between two Devices driven by the same Driver: no doorbell needed, since the one
// thread that fills a queue also drains it. drop_next drops packets (to exercise timers).
struct Loop {
  std::deque<std::vector<std::uint8_t>> q[2];
  int drop_next = 0;
};

class LoopMedium final : public Medium {
 public:
  LoopMedium(Loop& loop, int side) : loop_(loop), side_(side) {}
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override {
    auto& q = loop_.q[side_];
    std::size_t n = 0;
    for (; n < max && !q.empty(); ++n) {
      dev.on_packet(q.front(), now);
      q.pop_front();
    }
    return n;
  }
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override {
    std::size_t n = 0;
    TxPacket pkt;
    for (; n < max && dev.poll_transmit(now, pkt); ++n) {
      if (loop_.drop_next > 0) {
        --loop_.drop_next;
        continue;
      }
      std::vector<std::uint8_t> b(pkt.wire_bytes());
      pkt.write_to(b);
      loop_.q[1 - side_].push_back(std::move(b));
    }
    return n;
  }
  bool prepare_sleep() override { return loop_.q[side_].empty(); }

 private:
  Loop& loop_;
  int side_;
};

struct Node {
  std::unique_ptr<Device> dev;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  QueuePair* qp = nullptr;
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 16);
  MemoryRegion* mr = nullptr;
};

struct Fixture {
  SeededRng rng{7};
  Loop loop;
  Node n[2];
  std::unique_ptr<LoopMedium> m[2];
  Driver drv;
  explicit Fixture(std::uint8_t timeout = 14, TimeNs ack_delay_ns = 0) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig c;
      c.ack_delay_ns = ack_delay_ns;
      c.ports[0].lid = static_cast<std::uint16_t>(i + 1);
      c.crc = CrcMode::kModel;
      n[i].dev = Device::create(c, rng);
      n[i].pd = *n[i].dev->alloc_pd();
      n[i].cq = *n[i].dev->create_cq(256);
      n[i].mr = *n[i].dev->reg_mr(n[i].pd, n[i].buf.data(), n[i].buf.size(),
                                  kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
      QpInitAttr qa;
      qa.pd = n[i].pd;
      qa.send_cq = qa.recv_cq = n[i].cq;
      n[i].qp = *n[i].dev->create_qp(qa);
    }
    RcOptionsLike o{timeout};
    for (int i = 0; i < 2; ++i)
      connect(n[i].qp, static_cast<std::uint16_t>(2 - i), n[1 - i].qp->qp_num(), o);
    for (int i = 0; i < 2; ++i) {
      m[i] = std::make_unique<LoopMedium>(loop, i);
      drv.attach(*n[i].dev, *m[i]);
    }
  }
  struct RcOptionsLike {
    std::uint8_t timeout;
  };
  static void connect(QueuePair* qp, std::uint16_t dlid, std::uint32_t dqpn, RcOptionsLike o) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.access_flags = kAccessRemoteWrite | kAccessRemoteRead;
    ASSERT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), Errc::kOk);
    a.qp_state = QpState::kRtr;
    a.av.dlid = dlid;
    a.path_mtu = Mtu::k1024;
    a.dest_qpn = dqpn;
    a.rq_psn = 0;
    ASSERT_EQ(qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                kQpMaxDestRdAtomic | kQpMinRnrTimer),
              Errc::kOk);
    a.qp_state = QpState::kRts;
    a.sq_psn = 0;
    a.timeout = o.timeout;
    ASSERT_EQ(qp->modify(
                  a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic),
              Errc::kOk);
  }
  Errc write(std::size_t len, std::uint64_t wr_id, bool signaled = true) {
    Sge sge{reinterpret_cast<std::uint64_t>(n[0].buf.data()), static_cast<std::uint32_t>(len),
            n[0].mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = signaled ? kSignaled : 0u;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = reinterpret_cast<std::uint64_t>(n[1].buf.data());
    wr.rkey = n[1].mr->rkey();
    return n[0].qp->post_send(wr);
  }
};

std::uint64_t cpu_us() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<std::uint64_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000u +
         static_cast<std::uint64_t>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

TEST(Driver, InlineModeMovesAWriteBetweenTwoDevicesOfOneDriver) {
  Fixture f;
  for (std::size_t i = 0; i < 5000; ++i) f.n[0].buf[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_EQ(f.write(5000, 42), Errc::kOk);
  WorkCompletion wc{};
  ASSERT_TRUE(f.drv.run_until([&] { return f.n[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(f.n[0].buf.data(), f.n[1].buf.data(), 5000), 0);
}

TEST(Driver, ThreadedModeApplicationPostsUnderTheLockAndKicks) {
  Fixture f;
  f.drv.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let it fall asleep
  const auto sleeps_before = f.drv.counters().sleeps;
  EXPECT_GE(sleeps_before, 1u) << "an idle driver thread blocks";
  for (int round = 0; round < 20; ++round) {
    {
      auto g = f.drv.lock();
      f.n[0].buf[0] = static_cast<std::uint8_t>(round + 1);
      ASSERT_EQ(f.write(64, static_cast<std::uint64_t>(round)), Errc::kOk);
    }
    f.drv.kick();
    WorkCompletion wc{};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      {
        auto g = f.drv.lock();
        if (f.n[0].cq->poll({&wc, 1}) == 1) break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), end) << "round " << round;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    auto g = f.drv.lock();
    EXPECT_EQ(f.n[1].buf[0], round + 1);
  }
  f.drv.stop();
  EXPECT_GE(f.drv.counters().wakeups_kick, 1u);
}

TEST(Driver, DeadlinesFireThroughTheTimerWhileAsleep) {
  // 4.096 us * 2^12 = 16.8 ms: far beyond the 50 us spin even when a loaded machine preempts
  // the driver for a few ms (with 1 ms the deadline could pass while it was still spinning).
  const TimeNs t0 = monotonic_ns();  // before the Driver's first pass
  Fixture f(/*timeout=*/12);
  f.loop.drop_next = 1;  // the WRITE is lost: only the retransmission timer recovers it
  ASSERT_EQ(f.write(100, 1), Errc::kOk);
  WorkCompletion wc{};
  const DriverCounters c0 = f.drv.counters();
  ASSERT_TRUE(f.drv.run_until([&] { return f.n[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  const TimeNs wall = monotonic_ns() - t0;
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(f.n[0].dev->counters().timeouts, 1u);
  EXPECT_GE(f.drv.counters().sleeps, 1u) << "waiting 16 ms for a timer is done asleep";
  EXPECT_GE(f.drv.counters().wakeups_timer, 1u);
  // The wall-time split (DriverCounters::busy_ns ...): the sleep is charged as such, the passes
  // that moved the WRITE and its retransmission as busy, and nothing is counted twice.
  const DriverCounters& c = f.drv.counters();
  EXPECT_GT(c.sleep_ns, c0.sleep_ns);
  EXPECT_GT(c.busy_ns, c0.busy_ns);
  EXPECT_LE(c.busy_ns + c.idle_ns + c.idle_blocked_ns + c.sleep_ns, wall);
}

// DeviceConfig::ack_delay_ns (IBA 9.7.5.1.1 coalesced ACKs) driven in real time: unsignaled WRITEs
// are acknowledged by the count (ack_coalesce_max, 4) or, for a shorter tail, by the responder's
// deadline through the Driver's timer; a signaled WRITE still asks for (and gets) its ACK at once.
TEST(Driver, DelayedAcksCoalesceUnsignaledWritesAndFireOnTheirDeadline) {
  constexpr TimeNs kDelayNs = 20'000'000;
  Fixture f(14, kDelayNs);
  const DeviceCounters& resp = f.n[1].dev->counters();
  auto run_until_rx = [&](std::uint64_t rx) {
    return f.drv.run_until([&] { return resp.rx_packets >= rx; }, 5'000'000'000);
  };
  // Four unsignaled one-packet WRITEs: the fourth reaches the count; the ACK leaves in the same
  // pass, without AckReq and without waiting for the deadline.
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(f.write(64, i, false), Errc::kOk);
  ASSERT_TRUE(run_until_rx(4));
  EXPECT_EQ(resp.acks_tx, 1u) << "one ACK for four requests";
  // Three more: below the count, so nothing is sent until the deadline fires.
  const TimeNs t0 = monotonic_ns();
  for (std::uint64_t i = 4; i < 7; ++i) ASSERT_EQ(f.write(64, i, false), Errc::kOk);
  ASSERT_TRUE(run_until_rx(7));
  EXPECT_EQ(resp.acks_tx, 1u) << "the tail's ACK waits";
  const auto sleeps = f.drv.counters().sleeps;
  ASSERT_TRUE(f.drv.run_until([&] { return resp.acks_tx >= 2; }, 5'000'000'000));
  EXPECT_GE(monotonic_ns() - t0, kDelayNs) << "not before its deadline";
  EXPECT_GT(f.drv.counters().sleeps, sleeps) << "waited for it asleep, on the timer";
  // The requester heard every WR acknowledged (no retransmission), and the unsignaled ones gave
  // no completions. A signaled WRITE asks for its ACK (AckReq) and completes without the delay.
  ASSERT_EQ(f.write(64, 99, true), Errc::kOk);
  ASSERT_TRUE(run_until_rx(8));
  EXPECT_EQ(resp.acks_tx, 3u) << "acknowledged in the pass it arrived";
  WorkCompletion wc{};
  ASSERT_TRUE(f.drv.run_until([&] { return f.n[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(f.n[0].dev->counters().timeouts, 0u);
  EXPECT_EQ(f.n[0].cq->poll({&wc, 1}), 0u);
}

// A medium that holds its received packets back while `hold` is set, and notes what the Driver
// had done when its tx_burst ran: the deferred deadline comparisons so far.
class HoldMedium final : public Medium {
 public:
  HoldMedium(Loop& loop, int side, const Driver& drv) : loop_(loop), side_(side), drv_(drv) {}
  std::size_t rx_burst(Device& dev, TimeNs now, std::size_t max) override {
    auto& q = loop_.q[side_];
    std::size_t n = 0;
    for (; !hold && n < max && !q.empty(); ++n) {
      dev.on_packet(q.front(), now);
      q.pop_front();
    }
    return n;
  }
  std::size_t tx_burst(Device& dev, TimeNs now, std::size_t max) override {
    late_checks_at_tx = drv_.counters().late_deadline_checks;
    std::size_t n = 0;
    TxPacket pkt;
    for (; n < max && dev.poll_transmit(now, pkt); ++n) {
      std::vector<std::uint8_t> b(pkt.wire_bytes());
      pkt.write_to(b);
      loop_.q[1 - side_].push_back(std::move(b));
    }
    sent += n;
    return n;
  }
  bool hold = false;
  std::uint64_t late_checks_at_tx = 0, sent = 0;

 private:
  Loop& loop_;
  int side_;
  const Driver& drv_;
};

// A pass that takes a packet without reading the clock (the Driver reads it after a working pass
// and every few idle ones) compares the Devices' deadlines after its tx bursts, not between the
// packet and its reply: the reply (here the ACK of a WRITE) leaves first. The comparison is not
// skipped, and the retransmission timer still recovers a lost WRITE afterwards.
TEST(Driver, APassThatTakesAPacketComparesDeadlinesAfterItsReplyLeaves) {
  Fixture f(/*timeout=*/12);
  // The fixture's Driver drives LoopMedia; this one drives HoldMedia over the same Devices.
  Driver drv;
  HoldMedium m0(f.loop, 0, drv), m1(f.loop, 1, drv);
  for (auto& a : {std::pair{&f.n[0], &m0}, std::pair{&f.n[1], &m1}}) {
    f.drv.detach(*a.first->dev);
    drv.attach(*a.first->dev, *a.second);
  }
  m1.hold = true;
  ASSERT_EQ(f.write(64, 1), Errc::kOk);
  ASSERT_TRUE(drv.progress());  // the WRITE leaves (m0), m1 holds it
  ASSERT_EQ(m0.sent, 1u);
  // Idle passes until the next one will not read the clock: it reads it after a working pass
  // and on every 8th (pass_in's kClockEveryPasses), so two idle passes past a multiple of 8.
  for (int i = 0; i < 40 && !(drv.counters().passes % 8 == 2); ++i) ASSERT_FALSE(drv.progress());
  ASSERT_EQ(drv.counters().passes % 8, 2u);
  const std::uint64_t late0 = drv.counters().late_deadline_checks;
  m1.hold = false;
  ASSERT_TRUE(drv.progress());  // m1 takes the WRITE without a fresh clock, its ACK leaves
  EXPECT_EQ(m1.sent, 1u) << "the ACK left in the pass that took the WRITE";
  EXPECT_EQ(m1.late_checks_at_tx, late0) << "no deadline comparison before the ACK left";
  EXPECT_EQ(drv.counters().late_deadline_checks, late0 + 1) << "but one after it";
  WorkCompletion wc{};
  ASSERT_TRUE(drv.run_until([&] { return f.n[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  // Timers still fire: a lost WRITE is resent by the retransmission timer (16.8 ms).
  m1.hold = true;
  ASSERT_EQ(f.write(64, 2), Errc::kOk);
  ASSERT_TRUE(drv.progress());
  f.loop.q[1].clear();  // lost
  m1.hold = false;
  ASSERT_TRUE(drv.run_until([&] { return f.n[0].cq->poll({&wc, 1}) == 1; }, 5'000'000'000));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(f.n[0].dev->counters().timeouts, 1u);
}

TEST(Driver, AnIdleDriverThreadCostsAlmostNoCpu) {
  Fixture f;
  f.drv.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::uint64_t before = cpu_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::uint64_t used = cpu_us() - before;
  f.drv.stop();
  EXPECT_LT(used, 25'000u) << "CPU microseconds in 0.5 s of idling";
}

// A medium with nothing to move whose peer and in-flight state the test sets (Medium::peer_state,
// Medium::tx_in_flight).
class IdleMedium final : public Medium {
 public:
  std::size_t rx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  std::size_t tx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  bool rx_ready() const override { return false; }
  bool tx_in_flight() const override { return in_flight; }
  PeerState peer_state(TimeNs, int) const override { return peer; }
  bool in_flight = false;
  PeerState peer = PeerState::kRunning;
};

// While payload sent by reference is still queued at a running peer (tx_in_flight), the Driver
// polls for blocked_spin_ns, not spin_ns, before it blocks: the ACKs of a deep queue come a
// receiver's burst apart (longer than spin_ns), and a sleeping sender costs the receiver a
// doorbell for each (bench/io/README.md, session 22). A stalled peer still makes it block at
// once, and without anything in flight it blocks after spin_ns as before.
TEST(Driver, KeepsPollingWhilePayloadIsInFlightToARunningPeer) {
  SeededRng rng{3};
  const auto idle_run = [&](bool in_flight, Medium::PeerState peer) {
    auto dev = Device::create(DeviceConfig{}, rng);
    IdleMedium m;
    m.in_flight = in_flight;
    m.peer = peer;
    DriverConfig c;
    c.spin_ns = 20'000;
    c.blocked_spin_ns = 60'000'000'000;
    Driver drv(c);
    drv.attach(*dev, m);
    EXPECT_FALSE(drv.run_until([] { return false; }, 3'000'000));  // 3 ms, nothing to do
    return drv.counters();
  };
  const DriverCounters spinning = idle_run(true, Medium::PeerState::kRunning);
  EXPECT_EQ(spinning.sleeps, 0u);
  EXPECT_EQ(spinning.stalled_peers, 0u);
  EXPECT_GT(spinning.passes, 10u);
  const DriverCounters idle = idle_run(false, Medium::PeerState::kRunning);
  EXPECT_GE(idle.sleeps, 1u);
  const DriverCounters stalled = idle_run(true, Medium::PeerState::kStalled);
  EXPECT_GE(stalled.sleeps, 1u);
  EXPECT_GE(stalled.stalled_peers, 1u);
}

}  // namespace
}  // namespace weft::io
