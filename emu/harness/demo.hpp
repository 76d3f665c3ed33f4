// emu/harness/demo.hpp — `weft demo`: two HCAs over a lossy virtual link doing SEND, a
// multi-packet RDMA WRITE, a READ and both atomics, narrated packet by packet, then verified
// byte-exact. Everything is seeded; the seed is printed so a run replays exactly.
// Thread-safety: reentrant (no globals).
#pragma once

#include <cstdint>
#include <cstdio>

namespace weft::harness {

struct DemoOptions {
  std::uint64_t seed = 1;
  double drop = 0.05;
  double reorder = 0.03;
  double corrupt = 0.02;
  double duplicate = 0.01;
  std::uint32_t mtu_bytes = 1024;
  std::uint32_t write_bytes = 10'000;
  std::uint32_t read_bytes = 4'096;
  bool selective_repeat = false;
  bool quiet = false;  // no per-packet lines
};

// Returns 0 when every operation completed successfully and all data verified, else 1.
int run_demo(const DemoOptions& options, std::FILE* out);

}  // namespace weft::harness
