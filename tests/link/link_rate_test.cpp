// Link rates, serialization without drift, propagation delay.
#include "src/link/link_rate.hpp"

#include <gtest/gtest.h>

#include <weft/types.hpp>

namespace weft::link {
namespace {

TEST(LinkRate, DataRatesPerWidthAndSpeed) {
  struct Case {
    LinkWidth w;
    LaneSpeed s;
    double gbps;
  };
  const Case cases[] = {
      {LinkWidth::k1x, LaneSpeed::kSdr, 2},          {LinkWidth::k4x, LaneSpeed::kSdr, 8},
      {LinkWidth::k4x, LaneSpeed::kDdr, 16},         {LinkWidth::k4x, LaneSpeed::kQdr, 32},
      {LinkWidth::k12x, LaneSpeed::kQdr, 96},        {LinkWidth::k4x, LaneSpeed::kFdr10, 40},
      {LinkWidth::k4x, LaneSpeed::kFdr, 600.0 / 11}, {LinkWidth::k4x, LaneSpeed::kEdr, 100},
      {LinkWidth::k4x, LaneSpeed::kHdr, 200},        {LinkWidth::k8x, LaneSpeed::kHdr, 400},
      {LinkWidth::k4x, LaneSpeed::kNdr, 400},        {LinkWidth::k1x, LaneSpeed::kNdr, 100},
      {LinkWidth::k4x, LaneSpeed::kXdr, 800},        {LinkWidth::k12x, LaneSpeed::kXdr, 2400},
  };
  for (const auto& c : cases) {
    LinkRate r{c.w, c.s};
    EXPECT_DOUBLE_EQ(r.data_rate().gbps(), c.gbps) << to_string(c.w) << " " << to_string(c.s);
  }
  EXPECT_DOUBLE_EQ(kDefaultLinkRate.data_rate().gbps(), 400.0);
}

TEST(LinkRate, SerializationNs) {
  EXPECT_EQ(serialization_ns(kDefaultLinkRate, 4096), 81u);   // 32768 bits / 400 = 81.92
  EXPECT_EQ(serialization_ns(kDefaultLinkRate, 5000), 100u);  // 40000 / 400
  EXPECT_EQ(serialization_ns({LinkWidth::k1x, LaneSpeed::kSdr}, 1), 4u);
  EXPECT_EQ(serialization_ns({LinkWidth::k4x, LaneSpeed::kFdr}, 1000), 146u);  // 8000*11/600
  EXPECT_EQ(serialization_ns({LinkWidth::k4x, LaneSpeed::kEdr}, 4096), 327u);
}

TEST(LinkRate, SerialClockCarriesRemainderWithoutDrift) {
  SerialClock clk(kDefaultLinkRate);
  std::uint64_t sum = 0;
  for (int i = 0; i < 1000000; ++i) sum += clk.next_ns(4096);
  EXPECT_EQ(sum, 81920000u);  // exactly 1e6 * 81.92

  // Random sizes at an irrational-looking rate (FDR: 600/11 bits per ns).
  SeededRng rng(7);
  SerialClock fdr({LinkWidth::k4x, LaneSpeed::kFdr});
  std::uint64_t total_bytes = 0, total_ns = 0;
  for (int i = 0; i < 200000; ++i) {
    std::uint64_t b = 1 + rng.below(4200);
    total_bytes += b;
    total_ns += fdr.next_ns(b);
    ASSERT_EQ(total_ns, total_bytes * 8 * 11 / 600) << "after packet " << i;
  }
}

TEST(LinkRate, SymbolTimeAndPropagation) {
  EXPECT_EQ(kDefaultLinkRate.symbol_time_ps(), 80u);  // 8 bits at 100 Gb/s
  EXPECT_EQ((LinkRate{LinkWidth::k4x, LaneSpeed::kSdr}.symbol_time_ps()), 4000u);
  EXPECT_EQ(propagation_ns(10000), 50u);    // 10 m
  EXPECT_EQ(propagation_ns(100000), 500u);  // 100 m
  EXPECT_EQ(propagation_ns(1500), 8u);      // 7.5 ns rounds to 8
  EXPECT_EQ(propagation_ns(0), 0u);
}

}  // namespace
}  // namespace weft::link
