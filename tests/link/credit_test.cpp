// Per-VL credit-based link flow control (IBA 7.9): exact unit cases, then a seeded property run
// over a lossy link with several VLs, random packet sizes and random drain rates.
#include "src/link/credit.hpp"

#include <gtest/gtest.h>

#include <deque>

#include "src/link/vl_arbiter.hpp"
#include <weft/types.hpp>

namespace weft::link {
namespace {

std::array<std::uint32_t, kVlCount> buffers(std::uint32_t data_bytes, std::uint32_t vl15_bytes) {
  std::array<std::uint32_t, kVlCount> b{};
  for (std::size_t i = 0; i < 15; ++i) b[i] = data_bytes;
  b[15] = vl15_bytes;
  return b;
}

TEST(Credit, BlocksAreCeil64) {
  EXPECT_EQ(credit_blocks(1), 1u);
  EXPECT_EQ(credit_blocks(64), 1u);
  EXPECT_EQ(credit_blocks(65), 2u);
  EXPECT_EQ(credit_blocks(4096 + 30), 65u);
}

TEST(Credit, SenderBlockedUntilFirstFcPacket) {
  CreditSender s;
  EXPECT_FALSE(s.can_send(0, 64));
  EXPECT_EQ(s.available_blocks(0), 0u);
  EXPECT_TRUE(s.can_send(kVl15, 4096));  // VL15: no flow control
}

TEST(Credit, ExactLimitFromReceiverBuffer) {
  CreditReceiver r(buffers(4096, 512));  // 64 blocks per data VL
  CreditSender s;
  FcPacket fc = r.make_fc_packet(0, 0);
  EXPECT_EQ(fc.fccl, 64);
  s.on_fc_packet(fc);
  EXPECT_EQ(s.available_blocks(0), 64u);
  for (int i = 0; i < 16; ++i) {  // 16 packets of 4 blocks fill it exactly
    ASSERT_TRUE(s.can_send(0, 256)) << i;
    s.on_sent(0, 256);
    EXPECT_EQ(r.on_packet_arrived(0, 256), Arrival::kAccepted);
  }
  EXPECT_FALSE(s.can_send(0, 1));
  EXPECT_EQ(s.fctbs(0), 64);
  EXPECT_EQ(r.abr(0), 64);
  EXPECT_EQ(r.fccl(0), 64);  // nothing freed: the limit stays put
  r.on_packet_drained(0, 256);
  EXPECT_EQ(r.fccl(0), 68);
  s.on_fc_packet(r.make_fc_packet(0));
  EXPECT_TRUE(s.can_send(0, 256));
  EXPECT_FALSE(s.can_send(0, 257));  // 5 blocks > 4 free
  EXPECT_FALSE(s.can_send(1, 64));   // other VLs untouched
}

TEST(Credit, AdvertisedWindowCapsAt2048Blocks) {
  CreditReceiver r(buffers(1 << 20, 0));  // 16384 blocks
  EXPECT_EQ(r.fccl(0), 2048);
  CreditSender s;
  s.on_fc_packet(r.make_fc_packet(0));
  EXPECT_EQ(s.available_blocks(0), 2048u);
  EXPECT_TRUE(s.can_send(0, 2048 * 64));
  EXPECT_FALSE(s.can_send(0, 2048 * 64 + 1));
}

TEST(Credit, OverflowOnDataVlIsCountedAndVl15DropsWhenFull) {
  CreditReceiver r(buffers(256, 128));  // 4 blocks data, 2 blocks VL15
  EXPECT_EQ(r.on_packet_arrived(2, 256), Arrival::kAccepted);
  EXPECT_EQ(r.on_packet_arrived(2, 64), Arrival::kOverflow);
  EXPECT_EQ(r.stats().overflows, 1u);
  EXPECT_EQ(r.abr(2), 4);  // a packet discarded for lack of buffer is not counted in ABR
  EXPECT_EQ(r.on_packet_arrived(kVl15, 128), Arrival::kAccepted);
  EXPECT_EQ(r.on_packet_arrived(kVl15, 64), Arrival::kVl15Dropped);
  EXPECT_EQ(r.stats().vl15_dropped, 1u);
  r.on_packet_drained(kVl15, 128);
  EXPECT_EQ(r.on_packet_arrived(kVl15, 64), Arrival::kAccepted);
}

TEST(Credit, AbrResyncsFromFctbsAfterLostDataPackets) {
  CreditReceiver r(buffers(1024, 0));  // 16 blocks
  CreditSender s;
  s.on_fc_packet(r.make_fc_packet(0));
  s.on_sent(0, 512);  // 8 blocks, lost on the wire
  s.on_sent(0, 512);  // 8 blocks, lost too
  EXPECT_FALSE(s.can_send(0, 64));
  s.on_fc_packet(r.make_fc_packet(0));  // receiver saw nothing: FCCL still 16
  EXPECT_FALSE(s.can_send(0, 64));
  r.on_fc_packet(FcPacket{FcOp::kNormal, s.fctbs(0), 0, 0});  // ABR := FCTBS = 16
  EXPECT_EQ(r.abr(0), 16);
  s.on_fc_packet(r.make_fc_packet(0));
  EXPECT_EQ(s.available_blocks(0), 16u);
}

TEST(Credit, LostFcPacketsCostOnlyDelayBecauseFcclIsAbsolute) {
  CreditReceiver r(buffers(1024, 0));  // 16 blocks
  CreditSender s;
  s.on_fc_packet(r.make_fc_packet(0));
  for (int i = 0; i < 4; ++i) {
    s.on_sent(0, 256);
    ASSERT_EQ(r.on_packet_arrived(0, 256), Arrival::kAccepted);
  }
  EXPECT_FALSE(s.can_send(0, 64));
  r.on_packet_drained(0, 256);
  FcPacket lost1 = r.make_fc_packet(0);  // FCCL 20, lost
  r.on_packet_drained(0, 256);
  FcPacket lost2 = r.make_fc_packet(0);  // FCCL 24, lost
  EXPECT_EQ(lost1.fccl, 20);
  EXPECT_EQ(lost2.fccl, 24);
  EXPECT_FALSE(s.can_send(0, 64));
  r.on_packet_drained(0, 256);
  s.on_fc_packet(r.make_fc_packet(0));  // the next one carries the whole limit
  EXPECT_EQ(s.available_blocks(0), 12u);
  // A stale FC packet arriving late (reordered) lowers the limit again, harmlessly: the
  // sender only ever waits longer, never overruns.
  s.on_fc_packet(lost1);
  EXPECT_EQ(s.available_blocks(0), 4u);
}

TEST(Credit, TwelveBitWraparound) {
  CreditReceiver r(buffers(8192, 0));  // 128 blocks
  CreditSender s;
  std::uint64_t sent_blocks = 0;
  for (int i = 0; i < 10000; ++i) {
    s.on_fc_packet(r.make_fc_packet(0));
    ASSERT_TRUE(s.can_send(0, 4096)) << i;
    s.on_sent(0, 4096);
    sent_blocks += 64;
    ASSERT_EQ(r.on_packet_arrived(0, 4096), Arrival::kAccepted);
    r.on_packet_drained(0, 4096);
    ASSERT_EQ(s.fctbs(0), sent_blocks % 4096);
  }
  EXPECT_GT(sent_blocks, 100u * 4096);
}

TEST(CreditPort, FcPacketsDueOnFreeAndEveryUpdatePeriod) {
  CreditPortConfig cfg;
  cfg.data_vls = 2;
  cfg.buffer_bytes = buffers(4096, 512);
  CreditPort p(cfg, 1000);
  EXPECT_EQ(p.fc_update_period_ns(), 5242u);  // 65536 symbols * 80 ps at NDR
  CreditPortConfig sdr = cfg;
  sdr.rate = {LinkWidth::k4x, LaneSpeed::kSdr};
  EXPECT_EQ(CreditPort(sdr, 0).fc_update_period_ns(), 262144u);  // 65536 * 4 ns
  FcPacket fc;
  // Expect: one initial FC packet per data VL, then nothing until the period ends.
  ASSERT_TRUE(p.poll_fc_packet(1000, fc));
  EXPECT_EQ(fc.vl, 0);
  EXPECT_EQ(fc.fccl, 64);
  ASSERT_TRUE(p.poll_fc_packet(1000, fc));
  EXPECT_EQ(fc.vl, 1);
  EXPECT_FALSE(p.poll_fc_packet(1000, fc));
  EXPECT_EQ(p.next_deadline(), 1000u + 5242u);
  EXPECT_FALSE(p.poll_fc_packet(6241, fc));
  ASSERT_TRUE(p.poll_fc_packet(6242, fc));
  ASSERT_TRUE(p.poll_fc_packet(6242, fc));
  EXPECT_FALSE(p.poll_fc_packet(6242, fc));
  // Credits freed on VL1: its FC packet is due at once.
  ASSERT_EQ(p.receiver().on_packet_arrived(1, 128), Arrival::kAccepted);
  p.on_packet_drained(1, 128);
  EXPECT_EQ(p.next_deadline(), 6242u);
  ASSERT_TRUE(p.poll_fc_packet(6300, fc));
  EXPECT_EQ(fc.vl, 1);
  EXPECT_EQ(fc.fccl, 66);
}

// ---- property run ---------------------------------------------------------------------------
// Port A sends data on `vls` VLs to port B over a FIFO wire with latency; B drains each VL at a
// random rate; FC packets flow both ways, some lost; some data packets are lost on the wire.
// Checks: no data-VL overflow ever, every VL keeps moving (no deadlock), FCTBS wraps many times,
// and after traffic stops every credit returns.
struct Item {
  TimeNs arrive_ns;
  bool is_fc;
  FcPacket fc;
  std::uint8_t vl;
  std::uint32_t bytes;
};

void run_seed(std::uint64_t seed) {
  SCOPED_TRACE("seed=" + std::to_string(seed));
  SeededRng rng(seed);
  constexpr std::uint8_t kVls = 4;
  constexpr TimeNs kTickNs = 10, kLatencyNs = 300, kRunNs = 20'000'000;
  constexpr TimeNs kStallNsMax = 400'000;  // a VL with a backlog must deliver within this
  CreditPortConfig cfg;
  cfg.data_vls = kVls;
  for (std::uint8_t vl = 0; vl < kVls; ++vl)
    cfg.buffer_bytes[vl] =
        static_cast<std::uint32_t>(4224 + rng.below(200'000));  // one MTU packet at least
  cfg.buffer_bytes[kVl15] = 8192;
  CreditPort a(cfg, 0), b(cfg, 0);
  VlArbiter arb({.high = {}, .low = {{0, 32}, {1, 32}, {2, 64}, {3, 16}}});
  SerialClock clk(kDefaultLinkRate);
  double drain_p[kVls];
  for (auto& d : drain_p) d = 0.002 + rng.unit() * 0.05;
  const double fc_loss = rng.unit() * 0.3, data_loss = rng.unit() * 0.01;

  std::deque<std::uint32_t> tx_q[kVls];
  std::deque<std::uint32_t> rx_buf[kVls];
  std::deque<Item> a_to_b, b_to_a;
  TimeNs busy_until = 0;
  std::uint64_t delivered_blocks[kVls] = {};
  TimeNs last_delivery[kVls] = {};
  bool traffic = true;

  for (TimeNs now = 0; now < kRunNs + 2'000'000; now += kTickNs) {
    if (now >= kRunNs) traffic = false;
    for (std::uint8_t vl = 0; vl < kVls; ++vl)
      while (traffic && tx_q[vl].size() < 4)
        tx_q[vl].push_back(static_cast<std::uint32_t>(26 + rng.below(4200)));
    // A transmits when the wire is free: FC packets first, then data by arbitration.
    if (now >= busy_until) {
      FcPacket fc;
      if (a.poll_fc_packet(now, fc)) {
        busy_until = now + clk.next_ns(kFcPacketBytes);
        if (!rng.chance(fc_loss)) a_to_b.push_back({busy_until + kLatencyNs, true, fc, 0, 0});
      } else {
        std::array<std::uint32_t, 16> head{};
        for (std::uint8_t vl = 0; vl < kVls; ++vl)
          if (!tx_q[vl].empty() && a.sender().can_send(vl, tx_q[vl].front()))
            head[vl] = tx_q[vl].front();
        int vl = arb.next(head);
        if (vl != kNoVl) {
          std::uint32_t bytes = tx_q[vl].front();
          tx_q[vl].pop_front();
          a.sender().on_sent(static_cast<std::uint8_t>(vl), bytes);
          busy_until = now + clk.next_ns(bytes);
          if (!rng.chance(data_loss))
            a_to_b.push_back(
                {busy_until + kLatencyNs, false, {}, static_cast<std::uint8_t>(vl), bytes});
        }
      }
    }
    while (!a_to_b.empty() && a_to_b.front().arrive_ns <= now) {
      Item it = a_to_b.front();
      a_to_b.pop_front();
      if (it.is_fc) {
        b.on_fc_packet(it.fc);
        continue;
      }
      ASSERT_EQ(b.receiver().on_packet_arrived(it.vl, it.bytes), Arrival::kAccepted)
          << "overflow on VL " << int(it.vl) << " at " << now;
      rx_buf[it.vl].push_back(it.bytes);
    }
    for (std::uint8_t vl = 0; vl < kVls; ++vl) {
      if (!rx_buf[vl].empty() && rng.chance(drain_p[vl])) {
        b.on_packet_drained(vl, rx_buf[vl].front());
        delivered_blocks[vl] += credit_blocks(rx_buf[vl].front());
        rx_buf[vl].pop_front();
        last_delivery[vl] = now;
      }
      if (traffic) {
        ASSERT_LT(now - last_delivery[vl], kStallNsMax) << "VL " << int(vl) << " stalled";
      }
    }
    FcPacket fc;
    while (b.poll_fc_packet(now, fc))  // B's FC packets ride the reverse direction
      if (!rng.chance(fc_loss)) b_to_a.push_back({now + kLatencyNs, true, fc, 0, 0});
    while (!b_to_a.empty() && b_to_a.front().arrive_ns <= now) {
      a.on_fc_packet(b_to_a.front().fc);
      b_to_a.pop_front();
    }
  }
  EXPECT_EQ(b.receiver().stats().overflows, 0u);
  for (std::uint8_t vl = 0; vl < kVls; ++vl) {
    EXPECT_GT(delivered_blocks[vl], 2u * kFcModulus) << "VL " << int(vl) << " did not wrap FCTBS";
    EXPECT_EQ(b.receiver().used_blocks(vl), 0u);
    // All credit is back: the sender may use the whole advertised window again.
    EXPECT_EQ(a.sender().available_blocks(vl),
              std::min<std::uint32_t>(b.receiver().capacity_blocks(vl), kCreditWindowBlocksMax))
        << "VL " << int(vl);
  }
}

TEST(CreditProperty, RandomTrafficNeverOverflowsNorDeadlocks) {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    run_seed(seed);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace weft::link
