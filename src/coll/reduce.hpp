// coll/reduce.hpp — reduction kernels: dst[i] = dst[i] (op) src[i] for every element type and
// operation, written as plain loops GCC auto-vectorises; f16 and bf16 are widened to float in
// blocks, reduced, and rounded back (round to nearest even).
//
// avg: the kernels reduce avg as sum; the collective divides by the rank count once at the end
// (finish_avg). Integers divide with C++ `/` (truncation toward zero) after the sum, which wraps
// modulo 2^bits for overflowing sums (u8: modulo 256), as the sum itself does.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/coll/types.hpp"

namespace weft::coll {

// dst[i] = dst[i] op src[i], i < count. dst and src may be equal, must not partially overlap.
void reduce(DataType t, RedOp op, void* dst, const void* src, std::size_t count);
// dst[i] /= n (the end of avg).
void finish_avg(DataType t, void* dst, std::size_t count, int n);

// Conversions used by the kernels and by tests' references.
float f16_to_float(std::uint16_t h);
std::uint16_t float_to_f16(float f);
float bf16_to_float(std::uint16_t h);
std::uint16_t float_to_bf16(float f);

}  // namespace weft::coll
