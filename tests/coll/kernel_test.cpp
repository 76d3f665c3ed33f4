// tests/coll/kernel_test.cpp — the reduction kernels against a scalar reference for every type
// and op (lengths around the vector and block widths), and the f16/bf16 conversions over every
// 16-bit pattern.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tests/coll/reference.hpp"

namespace weft::coll::test {
namespace {

TEST(CollKernel, EveryTypeAndOpMatchesScalarReference) {
  SeededRng rng(42);
  for (DataType t : kAllTypes) {
    for (RedOp op : kAllOps) {
      for (std::size_t n : {0, 1, 7, 31, 255, 256, 257, 1000}) {
        const std::size_t es = elem_bytes(t);
        std::vector<std::uint8_t> a(n * es), b(n * es);
        std::vector<double> va(n), vb(n);
        for (std::size_t i = 0; i < n; ++i) {
          put(t, a.data(), i, input_value(t, op, rng));
          put(t, b.data(), i, input_value(t, op, rng));
          va[i] = get(t, a.data(), i);
          vb[i] = get(t, b.data(), i);
        }
        reduce(t, op, a.data(), b.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          double want = reference(t, op == RedOp::kAvg ? RedOp::kSum : op, {va[i], vb[i]});
          if (t == DataType::kU8) want = static_cast<std::uint8_t>(static_cast<std::int64_t>(want));
          ASSERT_EQ(get(t, a.data(), i), want)
              << to_string(t) << " " << to_string(op) << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST(CollKernel, AvgDividesAtTheEnd) {
  std::int32_t v[3] = {7, -7, 9};
  finish_avg(DataType::kI32, v, 3, 2);
  EXPECT_EQ(v[0], 3);  // truncation toward zero
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(v[2], 4);
  float f[2] = {3.0f, -1.0f};
  finish_avg(DataType::kF32, f, 2, 4);
  EXPECT_EQ(f[0], 0.75f);
  EXPECT_EQ(f[1], -0.25f);
}

TEST(CollKernel, HalfConversionsRoundTripEveryPattern) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const float f = f16_to_float(x);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f)))) << h;
    } else {
      ASSERT_EQ(float_to_f16(f), x) << h;
    }
    const float g = bf16_to_float(x);
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(g)))) << h;
    } else {
      ASSERT_EQ(float_to_bf16(g), x) << h;
    }
  }
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);         // smallest denormal
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);         // rounds to Inf
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);  // tie to even
}

}  // namespace
}  // namespace weft::coll::test
