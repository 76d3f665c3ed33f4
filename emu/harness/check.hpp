// emu/harness/check.hpp — `weft check`: run a range of campaign seeds and report, or replay one.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "emu/harness/campaign.hpp"

namespace weft::harness {

struct CheckReport {
  std::uint64_t passed = 0, failed = 0;
  Exercised exercised{};
  double seconds = 0;
};

// Runs seeds [first, first + count). Prints progress sparingly, the summary, one
// "FAILED seed=S" line per failing seed, and ends with "N passed, M failed".
CheckReport run_check(std::uint64_t first, std::uint64_t count, std::FILE* out);

// Replays one seed; writes a capture when pcap_path is set; verbose prints the event log.
// Returns true if the seed passed.
bool replay_seed(std::uint64_t seed, const std::string& pcap_path, bool verbose, std::FILE* out);

}  // namespace weft::harness
