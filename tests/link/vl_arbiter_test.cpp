// Weighted VL arbitration (IBA 7.6.9) and the SL-to-VL table (IBA 7.6.6).
#include "src/link/vl_arbiter.hpp"

#include <gtest/gtest.h>

#include <vector>

#include <weft/types.hpp>

namespace weft::link {
namespace {

using Heads = std::array<std::uint32_t, 16>;

std::vector<int> sequence(VlArbiter& arb, const Heads& heads, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(arb.next(heads));
  return out;
}

TEST(SlToVl, Maps) {
  SlToVlTable t;
  t.vl_of_sl[3] = 2;
  t.vl_of_sl[15] = 15;
  EXPECT_EQ(t.map(3), 2);
  EXPECT_EQ(t.map(0), 0);
  EXPECT_EQ(t.map(15), 15);
}

TEST(VlArbiter, WeightsThreeToOneShareBytesWithinTwoPercent) {
  // IBA mode with packets that divide the weights: the share is exact.
  VlArbiter arb({.high = {{0, 48}, {1, 16}}, .low = {}, .limit_of_high_priority = 255});
  Heads h{};
  h[0] = h[1] = 256;
  std::uint64_t bytes[2] = {};
  for (int i = 0; i < 100000; ++i) bytes[arb.next(h)] += 256;
  double ratio = static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]);
  EXPECT_NEAR(ratio, 3.0, 0.06);
  // Expect: 12 packets of VL0 then 4 of VL1, repeating.
  VlArbiter arb2({.high = {{0, 48}, {1, 16}}, .low = {}, .limit_of_high_priority = 255});
  auto seq = sequence(arb2, h, 16);
  EXPECT_EQ(seq, (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(VlArbiter, DeficitModeKeepsThreeToOneWithRandomSizes) {
  SeededRng rng(11);
  VlArbiter arb({.high = {}, .low = {{0, 192}, {1, 64}}, .mode = ArbitrationMode::kDeficit});
  Heads h{};
  std::uint64_t bytes[2] = {};
  h[0] = static_cast<std::uint32_t>(64 + rng.below(4160));
  h[1] = static_cast<std::uint32_t>(64 + rng.below(4160));
  for (int i = 0; i < 200000; ++i) {
    int vl = arb.next(h);
    ASSERT_TRUE(vl == 0 || vl == 1);
    bytes[vl] += h[vl];
    h[vl] = static_cast<std::uint32_t>(64 + rng.below(4160));
  }
  double ratio = static_cast<double>(bytes[0]) / static_cast<double>(bytes[1]);
  EXPECT_NEAR(ratio, 3.0, 0.06) << bytes[0] << " " << bytes[1];
}

TEST(VlArbiter, OvershootEndsTheEntryInIbaMode) {
  // Weight 1 (64 bytes) with 1024-byte packets: one packet per entry turn, 1:1 however the
  // weights compare (why kDeficit exists).
  VlArbiter arb({.high = {}, .low = {{0, 3}, {1, 1}}});
  Heads h{};
  h[0] = h[1] = 1024;
  EXPECT_EQ(sequence(arb, h, 6), (std::vector<int>{0, 1, 0, 1, 0, 1}));
}

TEST(VlArbiter, IdleAndZeroWeightEntriesAreSkipped) {
  VlArbiter arb({.high = {}, .low = {{0, 0}, {1, 4}, {2, 4}}});
  Heads h{};
  h[0] = 64;  // ready, but its entry has weight 0
  h[2] = 256;
  EXPECT_EQ(sequence(arb, h, 3), (std::vector<int>{2, 2, 2}));
  h[2] = 0;
  EXPECT_EQ(arb.next(h), kNoVl);
}

TEST(VlArbiter, Vl15GoesFirst) {
  VlArbiter arb({.high = {{0, 255}}, .low = {}});
  Heads h{};
  h[0] = 256;
  h[15] = 256;
  EXPECT_EQ(arb.next(h), 15);
  h[15] = 0;
  EXPECT_EQ(arb.next(h), 0);
}

TEST(VlArbiter, LimitOfHighPriority) {
  Heads h{};
  h[0] = 1024;  // high
  h[1] = 1024;  // low
  // Limit 0: one high packet, then a low-priority opportunity.
  VlArbiter zero({.high = {{0, 255}}, .low = {{1, 255}}, .limit_of_high_priority = 0});
  EXPECT_EQ(sequence(zero, h, 6), (std::vector<int>{0, 1, 0, 1, 0, 1}));
  // Limit 1 (4096 bytes): four 1 KiB high packets, then one low.
  VlArbiter one({.high = {{0, 255}}, .low = {{1, 255}}, .limit_of_high_priority = 1});
  EXPECT_EQ(sequence(one, h, 10), (std::vector<int>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  // Unbounded: low starves while high is backlogged.
  VlArbiter inf({.high = {{0, 255}}, .low = {{1, 255}}, .limit_of_high_priority = 255});
  EXPECT_EQ(sequence(inf, h, 5), (std::vector<int>{0, 0, 0, 0, 0}));
  // No low packet waiting: high is never held back.
  h[1] = 0;
  EXPECT_EQ(sequence(one, h, 6), (std::vector<int>{0, 0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace weft::link
