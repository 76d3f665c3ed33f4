// coll/reduce.cpp — the reduction kernels (see reduce.hpp). Loops are branch-free per element so
// GCC vectorises them at -O2 (-ftree-vectorize is on from GCC 12); f16/bf16 go through float
// blocks of kBlockElems on the stack.
#include "src/coll/reduce.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

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

inline float h2f(std::uint16_t h) {
  // Giesen's half -> float: shift into place and rebias the exponent; Inf/NaN get the rest of
  // the bias; zero/denormals are renormalised by one float subtraction.
  const std::uint32_t shifted = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exp = shifted & 0x0f800000u;
  std::uint32_t bits = shifted + ((127u - 15u) << 23);
  float f;
  if (exp == 0x0f800000u) {
    bits += (128u - 16u) << 23;
    std::memcpy(&f, &bits, 4);
  } else if (exp == 0) {
    bits += 1u << 23;
    std::memcpy(&f, &bits, 4);
    f -= 6.103515625e-05f;  // 2^-14
  } else {
    std::memcpy(&f, &bits, 4);
  }
  std::uint32_t out;
  std::memcpy(&out, &f, 4);
  out |= static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&f, &out, 4);
  return f;
}

inline std::uint16_t f2h(float value) {
  // Giesen's float_to_half_fast3_rtne: round to nearest even, overflow to Inf, NaN stays NaN.
  std::uint32_t f;
  std::memcpy(&f, &value, 4);
  const std::uint32_t sign = f & 0x80000000u;
  f ^= sign;
  std::uint16_t o;
  if (f >= 0x47800000u) {  // >= 65536: Inf or NaN
    o = f > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (f < 0x38800000u) {  // denormal or zero
    const std::uint32_t denorm_magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float fd, dm;
    std::memcpy(&fd, &f, 4);
    std::memcpy(&dm, &denorm_magic_bits, 4);
    fd += dm;
    std::uint32_t r;
    std::memcpy(&r, &fd, 4);
    o = static_cast<std::uint16_t>(r - denorm_magic_bits);
  } else {
    const std::uint32_t mant_odd = (f >> 13) & 1u;
    f += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu;
    f += mant_odd;
    o = static_cast<std::uint16_t>(f >> 13);
  }
  return static_cast<std::uint16_t>(o | (sign >> 16));
}

inline float b2f(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t f2b(float value) {
  std::uint32_t u;
  std::memcpy(&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
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
      half_op<false>(op, dst, src, count);
      return;
    case DataType::kBf16:
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
