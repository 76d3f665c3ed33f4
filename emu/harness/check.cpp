// emu/harness/check.cpp — seed ranges and single-seed replays (see check.hpp).
#include "emu/harness/check.hpp"

#include <chrono>
#include <cinttypes>

namespace weft::harness {

CheckReport run_check(std::uint64_t first, std::uint64_t count, std::FILE* out) {
  CheckReport rep;
  // Wall-clock time only for the progress line; the runs themselves are in virtual time.
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t step = count >= 1000 ? count / 10 : 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t seed = first + i;
    const SeedResult r = run_seed(seed);
    rep.exercised.add(r.exercised);
    if (r.passed) {
      ++rep.passed;
    } else {
      ++rep.failed;
      std::fprintf(out, "FAILED seed=%" PRIu64 "\n", seed);
      for (std::size_t k = 0; k < r.failures.size() && k < 5; ++k) {
        std::fprintf(out, "  %s\n", r.failures[k].c_str());
      }
      std::fprintf(out, "  replay: %s\n", replay_command(seed).c_str());
    }
    if (step != 0 && (i + 1) % step == 0 && i + 1 < count) {
      std::fprintf(out, "... %" PRIu64 "/%" PRIu64 " seeds\n", i + 1, count);
      std::fflush(out);
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(out, "Exercised (%.1f s):\n%s", rep.seconds, rep.exercised.format().c_str());
  std::fprintf(out, "%" PRIu64 " passed, %" PRIu64 " failed\n", rep.passed, rep.failed);
  return rep;
}

bool replay_seed(std::uint64_t seed, const std::string& pcap_path, bool verbose, std::FILE* out) {
  CampaignOptions opt;
  opt.pcap_path = pcap_path;
  if (verbose) {
    opt.log = [out](std::string_view line) {
      std::fprintf(out, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  const SeedResult r = run_seed(seed, opt);
  std::fprintf(out, "%s\n", r.config.c_str());
  std::fprintf(out, "events %" PRIu64 ", virtual time %" PRIu64 " ns, trace hash %016" PRIx64 "\n",
               r.events, r.end_ns, r.trace_hash);
  std::fprintf(out, "Exercised:\n%s", r.exercised.format().c_str());
  for (const auto& f : r.failures) std::fprintf(out, "  %s\n", f.c_str());
  if (!pcap_path.empty()) std::fprintf(out, "capture written to %s\n", pcap_path.c_str());
  std::fprintf(out, "%s seed=%" PRIu64 "\n", r.passed ? "PASSED" : "FAILED", seed);
  return r.passed;
}

}  // namespace weft::harness
