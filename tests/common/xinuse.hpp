// tests/common/xinuse.hpp — XINUSE (XGETBV with ECX = 1; Intel SDM Vol. 1, 13.6): which register
// state is not in its initial configuration. Tests use it to check that code calling ISA-L's
// AVX-512 kernels leaves no dirty upper vector halves behind (src/wire/crc_isal.hpp says why).
#pragma once

#include <cstdint>
#include <optional>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace weft::test_util {

// Bit 2: the upper halves of ymm0-15; bit 6: the upper halves of zmm0-15.
inline constexpr std::uint64_t kXinuseUpperHalves = (1u << 2) | (1u << 6);

// nullopt when the CPU has no XGETBV1 (CPUID.(EAX=0DH,ECX=1):EAX[2]) or is not x86-64.
inline std::optional<std::uint64_t> xinuse() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(0xD, 1, &a, &b, &c, &d) || !(a & 4)) return std::nullopt;
  std::uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return std::uint64_t{hi} << 32 | lo;
#else
  return std::nullopt;
#endif
}

}  // namespace weft::test_util
