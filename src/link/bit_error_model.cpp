// link/bit_error_model.cpp — see bit_error_model.hpp.
#include "src/link/bit_error_model.hpp"

#include <cmath>

#include "src/base/assert.hpp"

namespace weft::link {

BitErrorModel::BitErrorModel(double ber) : ber_(ber), log1m_ber_(0.0) {
  WEFT_ASSERT(ber >= 0.0 && ber <= 1.0);
  if (ber > 0.0 && ber < 1.0) log1m_ber_ = std::log1p(-ber);
}

void BitErrorModel::draw(std::uint64_t bits, Rng& rng,
                         std::vector<std::uint64_t>& positions) const {
  positions.clear();
  if (ber_ <= 0.0 || bits == 0) return;
  if (ber_ >= 1.0) {
    for (std::uint64_t b = 0; b < bits && positions.size() < kBitErrorsPerDrawMax; ++b)
      positions.push_back(b);
    return;
  }
  std::uint64_t pos = 0;
  while (positions.size() < kBitErrorsPerDrawMax) {
    double u = 1.0 - rng.unit();  // (0, 1]
    double gap = std::floor(std::log(u) / log1m_ber_);
    if (gap >= static_cast<double>(bits - pos)) return;
    pos += static_cast<std::uint64_t>(gap);
    positions.push_back(pos);
    if (++pos >= bits) return;
  }
}

void flip_bits(std::span<std::uint8_t> bytes, std::span<const std::uint64_t> positions) {
  for (std::uint64_t b : positions) {
    WEFT_ASSERT(b / 8 < bytes.size());
    bytes[b / 8] ^= static_cast<std::uint8_t>(0x80u >> (b % 8));
  }
}

std::uint64_t symbols_hit(std::span<const std::uint64_t> positions) {
  std::uint64_t n = 0;
  std::uint64_t last = UINT64_MAX;
  for (std::uint64_t b : positions) {
    if (b / 8 != last) ++n;
    last = b / 8;
  }
  return n;
}

}  // namespace weft::link
