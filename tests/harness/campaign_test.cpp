// tests/harness/campaign_test.cpp — the property campaign over many seeds, and determinism.
// WEFT_CAMPAIGN_SEEDS sets how many seeds (default 200); meson registers a 200-seed run in suite
// 'harness' and a 2,000-seed run in suites 'harness' and 'slow'. Every failing seed is reported
// with the command that replays it; the run also fails unless every exercised count is > 0.
#include "emu/harness/campaign.hpp"

#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

namespace weft::harness {
namespace {

std::uint64_t seeds_from_env() {
  const char* s = std::getenv("WEFT_CAMPAIGN_SEEDS");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 200;
}

TEST(CampaignTest, PropertyEverySeedPassesAndEverythingIsExercised) {
  const std::uint64_t n = seeds_from_env();
  Exercised total;
  std::uint64_t failed = 0;
  for (std::uint64_t seed = 1; seed <= n; ++seed) {
    const SeedResult r = run_seed(seed);
    total.add(r.exercised);
    if (!r.passed) {
      ++failed;
      std::string why;
      for (std::size_t k = 0; k < r.failures.size() && k < 4; ++k) why += "\n  " + r.failures[k];
      ADD_FAILURE() << "FAILED seed=" << seed << " (" << r.config << ")" << why
                    << "\n  replay: " << replay_command(seed);
    }
  }
  std::printf("%llu seeds, %llu failed. Exercised:\n%s", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(failed), total.format().c_str());
  for (const auto& [name, value] : total.required()) {
    EXPECT_GT(value, 0u) << "the campaign never exercised: " << name;
  }
}

TEST(CampaignTest, SameSeedSameTraceHashOtherSeedOtherHash) {
  for (std::uint64_t seed : {5u, 77u, 1234u}) {
    const SeedResult a = run_seed(seed), b = run_seed(seed), c = run_seed(seed + 1);
    EXPECT_EQ(a.trace_hash, b.trace_hash) << "seed " << seed << " did not replay exactly";
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.end_ns, b.end_ns);
    EXPECT_NE(a.trace_hash, c.trace_hash) << "seeds " << seed << " and " << seed + 1;
  }
}

TEST(CampaignTest, VerboseLogAndReplayDoNotChangeTheRun) {
  std::size_t lines = 0;
  CampaignOptions opt;
  opt.log = [&](std::string_view) { ++lines; };
  const SeedResult quiet = run_seed(9), verbose = run_seed(9, opt);
  EXPECT_EQ(quiet.trace_hash, verbose.trace_hash);
  EXPECT_GT(lines, 10u);
}

}  // namespace
}  // namespace weft::harness
