// coll/reduce.cpp — the reduction kernels (see reduce.hpp). Loops are branch-free per element so
// GCC vectorises them at -O2 (-ftree-vectorize is on from GCC 12); f16/bf16 go through float
// blocks of kBlockElems on the stack.
#include "src/coll/reduce.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#define WEFT_COLL_X86 1
#include <immintrin.h>
#endif

namespace weft::coll {
namespace {

constexpr std::size_t kBlockElems = 256;

// Integers wrap modulo 2^bits (computed unsigned: signed overflow would be undefined).
template <class T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <class T>
struct WideOf<T, true> {
  using type = std::make_unsigned_t<decltype(T{} + T{})>;
};
template <class T>
using Wide = typename WideOf<T>::type;
template <class T>
struct Sum {
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  }
};
template <class T>
struct Prod {
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  }
};
template <class T>
struct Min {
  static T apply(T a, T b) { return b < a ? b : a; }
};
template <class T>
struct Max {
  static T apply(T a, T b) { return a < b ? b : a; }
};

template <class T, class Op>
void loop(T* __restrict d, const T* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = Op::apply(d[i], s[i]);
}

// In-place (dst == src) reductions are legal; __restrict would lie then, so that case takes a
// plain loop.
template <class T, template <class> class Op>
void typed(void* dst, const void* src, std::size_t n) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  if (dst == src) {
    for (std::size_t i = 0; i < n; ++i) d[i] = Op<T>::apply(d[i], s[i]);
    return;
  }
  loop<T, Op<T>>(d, s, n);
}

template <class T>
void typed_op(RedOp op, void* dst, const void* src, std::size_t n) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      typed<T, Sum>(dst, src, n);
      return;
    case RedOp::kProd:
      typed<T, Prod>(dst, src, n);
      return;
    case RedOp::kMin:
      typed<T, Min>(dst, src, n);
      return;
    case RedOp::kMax:
      typed<T, Max>(dst, src, n);
      return;
  }
}

// The conversions are branch-free (selects only) so the block loops vectorise.
inline float h2f(std::uint16_t h) {
  // Giesen's half -> float: shift into place and rebias the exponent; Inf/NaN get the rest of
  // the bias; zero/denormals are renormalised by one float subtraction.
  const std::uint32_t shifted = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted & 0x0f800000u;
  std::uint32_t bits = shifted + ((127u - 15u) << 23);
  bits += exp == 0x0f800000u ? (128u - 16u) << 23 : 0u;
  const float denorm = std::bit_cast<float>(bits + (1u << 23)) - 0x1p-14f;
  bits = exp == 0 ? std::bit_cast<std::uint32_t>(denorm) : bits;
  return std::bit_cast<float>(bits | static_cast<std::uint32_t>(h & 0x8000u) << 16);
}

inline std::uint16_t f2h(float value) {
  // Giesen's float_to_half_fast3_rtne: round to nearest even, overflow to Inf, NaN stays NaN.
  std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = f & 0x80000000u;
  f ^= sign;
  constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const std::uint32_t denorm =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(f) + std::bit_cast<float>(kDenormMagic)) -
      kDenormMagic;
  const std::uint32_t mant_odd = (f >> 13) & 1u;
  const std::uint32_t normal =
      (f + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd) >> 13;
  const std::uint32_t infnan = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const std::uint32_t o = f >= 0x47800000u ? infnan : (f < 0x38800000u ? denorm : normal);
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

inline float b2f(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t f2b(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const std::uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x400000u) : rounded;  // NaN quiet
  return static_cast<std::uint16_t>(r >> 16);
}

template <bool kBf16>
void half_op(RedOp op, void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* s = static_cast<const std::uint16_t*>(src);
  float a[kBlockElems], b[kBlockElems];
  for (std::size_t base = 0; base < n; base += kBlockElems) {
    const std::size_t m = std::min(kBlockElems, n - base);
    for (std::size_t i = 0; i < m; ++i) {
      a[i] = kBf16 ? b2f(d[base + i]) : h2f(d[base + i]);
      b[i] = kBf16 ? b2f(s[base + i]) : h2f(s[base + i]);
    }
    typed_op<float>(op, a, b, m);
    for (std::size_t i = 0; i < m; ++i) d[base + i] = kBf16 ? f2b(a[i]) : f2h(a[i]);
  }
}

// The portable path is SSE2 (the x86-64 baseline): ~20 vector ops per 4 f16 elements. Where the
// CPU has them, F16C converts 8 halves per instruction and AVX2 reduces 8 floats; bf16's
// shift-and-round conversions gain from AVX2 alone. Chosen once per call by CPUID (cached by
// the compiler runtime).
#ifdef WEFT_COLL_X86

// One reduction step on 8 floats, as the scalar ops do it: Min and Max take b only when it is
// strictly smaller (larger), so a NaN in a stays (the operand order of minps/maxps).
__attribute__((target("avx2"))) inline __m256 op8(RedOp op, __m256 a, __m256 b) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return _mm256_add_ps(a, b);
    case RedOp::kProd:
      return _mm256_mul_ps(a, b);
    case RedOp::kMin:
      return _mm256_min_ps(b, a);  // b < a ? b : a
    case RedOp::kMax:
      return _mm256_max_ps(b, a);  // b > a ? b : a
    default:
      return a;
  }
}

__attribute__((target("avx2,f16c"))) void f16_op_f16c(RedOp op, std::uint16_t* d,
                                                      const std::uint16_t* s, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    const __m256 r = op8(op, a, b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (i < n) half_op<false>(op, d + i, s + i, n - i);
}

__attribute__((target("avx2"))) void bf16_op_avx2(RedOp op, void* dst, const void* src,
                                                  std::size_t n) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* s = static_cast<const std::uint16_t*>(src);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x400000), bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i))), 16));
    const __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))), 16));
    const __m256 r = op8(op, a, b);
    // Round to nearest even as f2b; NaNs stay NaN (quiet bit set).
    const __m256i u = _mm256_castps_si256(r);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i v =
        _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(packed));
  }
  if (i < n) half_op<true>(op, d + i, s + i, n - i);
}

bool has_f16c() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return v;
}
#endif

}  // namespace

float f16_to_float(std::uint16_t h) {
  return h2f(h);
}
std::uint16_t float_to_f16(float f) {
  return f2h(f);
}
float bf16_to_float(std::uint16_t h) {
  return b2f(h);
}
std::uint16_t float_to_bf16(float f) {
  return f2b(f);
}

void reduce(DataType t, RedOp op, void* dst, const void* src, std::size_t count) {
  switch (t) {
    case DataType::kF32:
      typed_op<float>(op, dst, src, count);
      return;
    case DataType::kF64:
      typed_op<double>(op, dst, src, count);
      return;
    case DataType::kI32:
      typed_op<std::int32_t>(op, dst, src, count);
      return;
    case DataType::kI64:
      typed_op<std::int64_t>(op, dst, src, count);
      return;
    case DataType::kU8:
      typed_op<std::uint8_t>(op, dst, src, count);
      return;
    case DataType::kF16:
#ifdef WEFT_COLL_X86
      if (has_f16c()) {
        f16_op_f16c(op, static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src),
                    count);
        return;
      }
#endif
      half_op<false>(op, dst, src, count);
      return;
    case DataType::kBf16:
#ifdef WEFT_COLL_X86
      if (has_f16c()) {
        bf16_op_avx2(op, dst, src, count);
        return;
      }
#endif
      half_op<true>(op, dst, src, count);
      return;
  }
}

namespace {
template <class T>
void divide(void* dst, std::size_t n, int ranks) {
  T* d = static_cast<T*>(dst);
  const T div = static_cast<T>(ranks);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / div);
}
template <bool kBf16>
void divide_half(void* dst, std::size_t n, int ranks) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const float div = static_cast<float>(ranks);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = (kBf16 ? b2f(d[i]) : h2f(d[i])) / div;
    d[i] = kBf16 ? f2b(v) : f2h(v);
  }
}
}  // namespace

void finish_avg(DataType t, void* dst, std::size_t count, int n) {
  switch (t) {
    case DataType::kF32:
      divide<float>(dst, count, n);
      return;
    case DataType::kF64:
      divide<double>(dst, count, n);
      return;
    case DataType::kI32:
      divide<std::int32_t>(dst, count, n);
      return;
    case DataType::kI64:
      divide<std::int64_t>(dst, count, n);
      return;
    case DataType::kU8:
      divide<std::uint8_t>(dst, count, n);
      return;
    case DataType::kF16:
      divide_half<false>(dst, count, n);
      return;
    case DataType::kBf16:
      divide_half<true>(dst, count, n);
      return;
  }
}

}  // namespace weft::coll
