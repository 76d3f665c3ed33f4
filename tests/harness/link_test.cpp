// tests/harness/link_test.cpp — the link model: serialization is exact, latency is added, and
// each fault fires at its configured rate (fixed seed, so the counts are deterministic) and
// draws from its own stream.
#include "emu/harness/link.hpp"

#include <gtest/gtest.h>

namespace weft::harness {
namespace {

TEST(LinkTest, SerializationTimeIsExact) {
  // 1000 bytes at 100 Gb/s = 8000 bits / 100 bits per ns = 80 ns.
  EXPECT_EQ(LinkDirection::serialization_ns(1000, 100'000), 80u);
  // Rounded up to whole ns: 1 byte at 3 Gb/s = 8/3 ns -> 3 ns.
  EXPECT_EQ(LinkDirection::serialization_ns(1, 3'000), 3u);
  EXPECT_EQ(LinkDirection::serialization_ns(4096, 0), 0u);  // infinite rate
}

TEST(LinkTest, BackToBackPacketsQueueBehindEachOther) {
  LinkConfig c;
  c.latency_ns = 1000;
  c.rate_mbps = 100'000;
  LinkDirection d(c, 1);
  // Three 1000-byte packets handed over at t=0 leave at 80, 160, 240 ns and arrive 1 us later.
  for (TimeNs k = 1; k <= 3; ++k) {
    const LinkVerdict v = d.send(0, 1000);
    EXPECT_EQ(v.depart_ns, 80 * k);
    EXPECT_EQ(v.arrive_ns, 80 * k + 1000);
  }
  // An idle link starts serializing immediately.
  const LinkVerdict v = d.send(10'000, 500);
  EXPECT_EQ(v.depart_ns, 10'040u);
  EXPECT_EQ(v.arrive_ns, 11'040u);
}

TEST(LinkTest, FaultRatesWithinTolerance) {
  LinkConfig c;
  c.drop = 0.10;
  c.duplicate = 0.05;
  c.reorder = 0.02;
  c.corrupt = 0.01;
  LinkDirection d(c, 12345);
  constexpr int kPackets = 100'000;
  for (int i = 0; i < kPackets; ++i) d.send(static_cast<TimeNs>(i) * 100, 256);
  const LinkStats& s = d.stats();
  EXPECT_EQ(s.packets, static_cast<std::uint64_t>(kPackets));
  // Binomial: sd of 10% over 100k is ~95; allow about 5 sd.
  EXPECT_NEAR(static_cast<double>(s.dropped), 10'000, 500);
  // The other faults apply to the packets that survive.
  const double survived = static_cast<double>(kPackets - s.dropped);
  EXPECT_NEAR(static_cast<double>(s.duplicated), survived * 0.05, 350);
  EXPECT_NEAR(static_cast<double>(s.reordered), survived * 0.02, 220);
  EXPECT_NEAR(static_cast<double>(s.corrupted), survived * 0.01, 160);
}

TEST(LinkTest, SameSeedSameVerdictsOtherSeedOthers) {
  LinkConfig c;
  c.drop = 0.2;
  c.corrupt = 0.1;
  LinkDirection a(c, 7), b(c, 7), other(c, 8);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const LinkVerdict va = a.send(0, 300), vb = b.send(0, 300), vo = other.send(0, 300);
    ASSERT_EQ(va.dropped, vb.dropped);
    ASSERT_EQ(va.corrupted, vb.corrupted);
    ASSERT_EQ(va.corrupt_bit, vb.corrupt_bit);
    differ += va.dropped != vo.dropped;
  }
  EXPECT_GT(differ, 0);
}

TEST(LinkTest, CorruptBitIsInsideThePacket) {
  LinkConfig c;
  c.corrupt = 1.0;
  LinkDirection d(c, 3);
  for (int i = 0; i < 1000; ++i) {
    const LinkVerdict v = d.send(0, 70);
    ASSERT_TRUE(v.corrupted);
    ASSERT_LT(v.corrupt_bit, 70u * 8);
  }
}

TEST(LinkTest, BlackoutDropsEverythingInsideTheWindowOnly) {
  LinkConfig c;
  c.blackouts.push_back({1000, 2000});
  LinkDirection d(c, 9);
  EXPECT_FALSE(d.send(999, 100).dropped);
  EXPECT_TRUE(d.send(1000, 100).blackout);
  EXPECT_TRUE(d.send(1999, 100).dropped);
  EXPECT_FALSE(d.send(2000, 100).dropped);
}

TEST(LinkTest, ReorderAndDelayOnlyAddTime) {
  LinkConfig c;
  c.reorder = 0.5;
  c.delay = 0.5;
  c.latency_ns = 100;
  c.rate_mbps = 0;
  LinkDirection d(c, 11);
  for (int i = 0; i < 1000; ++i) {
    const LinkVerdict v = d.send(50, 64);
    ASSERT_GE(v.arrive_ns, 150u);
    ASSERT_LE(v.arrive_ns, 150u + c.reorder_ns_max + c.delay_ns_max);
  }
}

}  // namespace
}  // namespace weft::harness
