// bench/transport/transport_profile.cpp — runs one transport_bench scenario a fixed number of
// times, for instruction counting: the machines are shared and wall time is noisy, so the
// deterministic measure is
//   valgrind --tool=callgrind build/bench/transport/transport_profile SCENARIO N
// run for two values of N: the difference of the totals over the difference of N is the exact
// instruction count of one iteration, setup excluded.
//
// Scenarios: write64k, write1m (CRCs modelled), write64k-crc, write1m-crc (CRCs computed),
// send64 (32 SENDs per iteration, all signaled, two batches of receives posted), send64-cq100
// (every 100th signaled), send64-rx1 (one batch of receives: credit round trips), lat8 (one
// round trip of perf's 8-byte WRITE ping-pong, bench_pair.hpp's LatLoop); with the
// suffix -percall (e.g. send64-percall), one verbs call per WR and per packet instead of bursts.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/transport/bench_pair.hpp"

int main(int argc, char** argv) {
  using namespace weft;
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: %s "
                 "write64k|write1m|write64k-crc|write1m-crc|send64|send64-cq100|send64-rx1|lat8[-"
                 "percall] N\n",
                 argv[0]);
    return 2;
  }
  std::string what = argv[1];
  // A "-percall" suffix: one verbs call per WR and per packet instead of bursts.
  const bool burst = what.find("-percall") == std::string::npos;
  if (!burst) what.erase(what.find("-percall"));
  const long n = std::atol(argv[2]);
  if (what.rfind("write", 0) == 0) {
    const std::size_t bytes = what.find("1m") != std::string::npos ? (1u << 20) : (64u << 10);
    const CrcMode crc = what.find("crc") != std::string::npos ? CrcMode::kCompute : CrcMode::kModel;
    bench::Pair p(bytes, crc, burst);
    bench::WriteLoop loop(p);
    for (long i = 0; i < n; ++i) loop.once();
    if (!loop.ok()) return 1;
  } else if (what == "lat8") {
    bench::Pair p(4096, CrcMode::kModel, burst, 20'000);
    bench::LatLoop loop(p);
    for (long i = 0; i < n; ++i) loop.once();
  } else if (what == "send64" || what == "send64-cq100" || what == "send64-rx1") {
    bench::Pair p(2 * bench::SendLoop::kBatch * bench::SendLoop::kBytes, CrcMode::kModel, burst);
    bench::SendLoop loop(p, what == "send64-cq100" ? 100 : 1, what == "send64-rx1" ? 1 : 2);
    for (long i = 0; i < n; ++i) loop.once();
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", what.c_str());
    return 2;
  }
  return 0;
}
