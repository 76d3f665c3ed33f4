// tests/coll/reference.hpp — element access by DataType, seeded inputs that are exact in every
// type, and the reference result of a reduction with its tolerance. Thread-safety: pure.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <weft/types.hpp>

#include "src/coll/reduce.hpp"

namespace weft::coll::test {

inline double get(DataType t, const std::uint8_t* p, std::size_t i) {
  const std::uint8_t* e = p + i * elem_bytes(t);
  switch (t) {
    case DataType::kF32: {
      float v;
      std::memcpy(&v, e, 4);
      return v;
    }
    case DataType::kF64: {
      double v;
      std::memcpy(&v, e, 8);
      return v;
    }
    case DataType::kI32: {
      std::int32_t v;
      std::memcpy(&v, e, 4);
      return v;
    }
    case DataType::kI64: {
      std::int64_t v;
      std::memcpy(&v, e, 8);
      return static_cast<double>(v);
    }
    case DataType::kU8:
      return *e;
    case DataType::kF16: {
      std::uint16_t v;
      std::memcpy(&v, e, 2);
      return f16_to_float(v);
    }
    case DataType::kBf16: {
      std::uint16_t v;
      std::memcpy(&v, e, 2);
      return bf16_to_float(v);
    }
  }
  return 0;
}

inline void put(DataType t, std::uint8_t* p, std::size_t i, double v) {
  std::uint8_t* e = p + i * elem_bytes(t);
  switch (t) {
    case DataType::kF32: {
      float x = static_cast<float>(v);
      std::memcpy(e, &x, 4);
      return;
    }
    case DataType::kF64:
      std::memcpy(e, &v, 8);
      return;
    case DataType::kI32: {
      auto x = static_cast<std::int32_t>(v);
      std::memcpy(e, &x, 4);
      return;
    }
    case DataType::kI64: {
      auto x = static_cast<std::int64_t>(v);
      std::memcpy(e, &x, 8);
      return;
    }
    case DataType::kU8:
      *e = static_cast<std::uint8_t>(static_cast<std::int64_t>(v));
      return;
    case DataType::kF16: {
      auto x = float_to_f16(static_cast<float>(v));
      std::memcpy(e, &x, 2);
      return;
    }
    case DataType::kBf16: {
      auto x = float_to_bf16(static_cast<float>(v));
      std::memcpy(e, &x, 2);
      return;
    }
  }
}

// An input value exact in every type: small integers for prod (so products stay small),
// eighths in [-2, 2] for float sums, small integers for integer sums (u8 wraps by design).
inline double input_value(DataType t, RedOp op, Rng& rng) {
  if (op == RedOp::kProd) {
    const double v[] = {1, 1, 1, 2, -1, 1, 1, 2};
    const double x = v[rng.below(8)];
    return t == DataType::kU8 && x < 0 ? 3 : x;
  }
  if (is_float(t)) return (static_cast<double>(rng.below(33)) - 16.0) / 8.0;
  if (t == DataType::kU8) return static_cast<double>(rng.below(256));
  return static_cast<double>(rng.below(2001)) - 1000.0;
}

// The reduction of `vals` (one per rank) in exact arithmetic, wrapped as the type wraps.
inline double reference(DataType t, RedOp op, const std::vector<double>& vals) {
  double acc = vals[0];
  for (std::size_t i = 1; i < vals.size(); ++i) {
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        acc += vals[i];
        break;
      case RedOp::kProd:
        acc *= vals[i];
        break;
      case RedOp::kMin:
        acc = std::min(acc, vals[i]);
        break;
      case RedOp::kMax:
        acc = std::max(acc, vals[i]);
        break;
    }
  }
  if (t == DataType::kU8)
    acc = static_cast<double>(static_cast<std::uint8_t>(static_cast<std::int64_t>(acc)));
  if (op == RedOp::kAvg) {
    const double n = static_cast<double>(vals.size());
    if (is_float(t)) return acc / n;
    return std::trunc(acc / n);
  }
  return acc;
}

// Absolute tolerance: exact for integers and min/max; for float sums, one rounding of the type
// per step on values up to the sum of magnitudes.
inline double tolerance(DataType t, RedOp op, const std::vector<double>& vals) {
  if (!is_float(t) || op == RedOp::kMin || op == RedOp::kMax) return 0;
  double mag = 0;
  for (double v : vals) mag += std::fabs(v);
  if (op == RedOp::kProd) mag = std::pow(2.0, static_cast<double>(vals.size()));
  double eps = 0;
  switch (t) {
    case DataType::kF16:
      eps = 0x1p-11;
      break;
    case DataType::kBf16:
      eps = 0x1p-8;
      break;
    case DataType::kF32:
      eps = 0x1p-24;
      break;
    default:
      eps = 0x1p-53;
      break;
  }
  return static_cast<double>(vals.size() + 1) * eps * std::max(1.0, mag);
}

}  // namespace weft::coll::test
