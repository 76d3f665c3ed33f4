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

// Random tables, modes, limits and ready sets: the arbiter only ever names a ready VL that has
// a weighted entry, answers kNoVl only when no such VL is ready, and, with every table VL
// backlogged, serves each of them.
TEST(VlArbiterProperty, PicksOnlyReadyVlsAndStarvesNone) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    SeededRng rng(seed);
    VlArbConfig cfg;
    cfg.mode = rng.chance(0.5) ? ArbitrationMode::kDeficit : ArbitrationMode::kIba;
    cfg.limit_of_high_priority = static_cast<std::uint8_t>(rng.chance(0.3) ? 255 : rng.below(4));
    bool in_table[16] = {};
    for (auto* t : {&cfg.high, &cfg.low}) {
      std::size_t n = rng.below(6);
      for (std::size_t i = 0; i < n; ++i) {
        VlArbEntry e{static_cast<std::uint8_t>(rng.below(8)),
                     static_cast<std::uint8_t>(rng.below(40))};
        if (e.weight > 0) in_table[e.vl] = true;
        t->push_back(e);
      }
    }
    VlArbiter arb(cfg);
    Heads h{};
    for (int step = 0; step < 3000; ++step) {
      for (int vl = 0; vl < 8; ++vl)
        if (rng.chance(0.1))
          h[vl] = rng.chance(0.3) ? 0 : static_cast<std::uint32_t>(26 + rng.below(4200));
      h[15] = rng.chance(0.02) ? 256 : 0;
      bool any = h[15] > 0;
      for (int vl = 0; vl < 8; ++vl) any = any || (h[vl] > 0 && in_table[vl]);
      int vl = arb.next(h);
      if (!any) {
        ASSERT_EQ(vl, kNoVl);
        continue;
      }
      ASSERT_NE(vl, kNoVl);
      ASSERT_GT(h[vl], 0u);
      ASSERT_TRUE(vl == 15 || in_table[vl]);
    }
    // Then every table VL backlogged: each is served, unless an unbounded high table starves the
    // low one (allowed by design).
    bool in_high[16] = {};
    for (const auto& e : cfg.high)
      if (e.weight > 0) in_high[e.vl] = true;
    h = Heads{};
    for (int v = 0; v < 8; ++v)
      if (in_table[v]) h[v] = static_cast<std::uint32_t>(26 + rng.below(4200));
    std::uint64_t served[16] = {};
    for (int step = 0; step < 5000; ++step) {
      int vl = arb.next(h);
      bool any = false;
      for (int v = 0; v < 8; ++v) any = any || in_table[v];
      if (!any) {
        ASSERT_EQ(vl, kNoVl);
        break;
      }
      ASSERT_TRUE(vl >= 0 && in_table[vl]);
      ++served[vl];
      h[vl] = static_cast<std::uint32_t>(26 + rng.below(4200));
    }
    bool high_backlogged = false;
    for (int v = 0; v < 8; ++v) high_backlogged = high_backlogged || in_high[v];
    for (int v = 0; v < 8; ++v) {
      if (!in_table[v]) continue;
      if (cfg.limit_of_high_priority == kHighPriorityUnbounded && high_backlogged && !in_high[v])
        continue;
      EXPECT_GT(served[v], 0u) << "VL " << v << " starved";
    }
  }
}

}  // namespace
}  // namespace weft::link
