// coll/pattern.cpp — see pattern.hpp.
#include "src/coll/pattern.hpp"

#include <cstring>

#include "src/coll/reduce.hpp"

namespace weft::coll {

int pattern_value(RedOp op, int rank, std::size_t i) {
  const auto k = static_cast<std::uint64_t>(i);
  const auto rr = static_cast<std::uint64_t>(rank);
  switch (op) {
    case RedOp::kProd:
      return (k + rr) % 13 == 0 ? 2 : 1;
    case RedOp::kMin:
    case RedOp::kMax:
      return static_cast<int>((rr * 5 + k) % 7);
    default:
      return static_cast<int>((rr * 3 + k) % 4);
  }
}

void put_value(DataType t, std::uint8_t* p, std::size_t i, int v) {
  const auto f = static_cast<float>(v);
  switch (t) {
    case DataType::kF32:
      std::memcpy(p + i * 4, &f, 4);
      break;
    case DataType::kF16: {
      const std::uint16_t h = float_to_f16(f);
      std::memcpy(p + i * 2, &h, 2);
      break;
    }
    case DataType::kBf16: {
      const std::uint16_t h = float_to_bf16(f);
      std::memcpy(p + i * 2, &h, 2);
      break;
    }
    case DataType::kF64: {
      const double d = v;
      std::memcpy(p + i * 8, &d, 8);
      break;
    }
    case DataType::kI32: {
      const std::int32_t x = v;
      std::memcpy(p + i * 4, &x, 4);
      break;
    }
    case DataType::kI64: {
      const std::int64_t x = v;
      std::memcpy(p + i * 8, &x, 8);
      break;
    }
    case DataType::kU8:
      p[i] = static_cast<std::uint8_t>(v);
      break;
  }
}

void fill_pattern(DataType t, RedOp op, int rank, std::uint8_t* p, std::size_t count,
                  std::size_t first) {
  for (std::size_t k = 0; k < count; ++k) put_value(t, p, k, pattern_value(op, rank, first + k));
}

std::uint64_t count_wrong(const std::uint8_t* got, const std::uint8_t* want, std::size_t count,
                          std::size_t es) {
  // An empty buffer may come as a null pointer, which memcmp must not be given even for 0 bytes.
  if (count == 0 || std::memcmp(got, want, count * es) == 0) return 0;
  std::uint64_t w = 0;
  for (std::size_t i = 0; i < count; ++i) w += std::memcmp(got + i * es, want + i * es, es) != 0;
  return w;
}

}  // namespace weft::coll
