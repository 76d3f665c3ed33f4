// link/bit_error_model.hpp — random bit errors on a link, drawn from its bit error rate.
//
// Each bit is flipped independently with probability `ber`. Rather than one draw per bit, the
// gap to the next error is drawn from the geometric distribution (inverse transform), so a
// packet costs O(errors + 1) draws and a clean 4 KiB packet at BER 1e-12 costs one. The drawn
// positions can be applied to real bytes (verified mode) or only counted (timing-only mode);
// both see the same pattern for the same Rng state, so the two modes take the same decisions.
//
// Randomness comes only from the injected weft::Rng. Thread-safety: single-owner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <weft/types.hpp>

namespace weft::link {

// Stop drawing after this many errors in one unit (a packet at BER ~0.5 would otherwise make
// vectors as large as the packet; any such packet is lost anyway).
inline constexpr std::size_t kBitErrorsPerDrawMax = 4096;

class BitErrorModel {
 public:
  explicit BitErrorModel(double ber = 0.0);
  double ber() const { return ber_; }

  // Appends to `positions` (cleared first) the ascending bit positions in [0, bits) that are in
  // error. Bit position b is bit (7 - b % 8) of byte b / 8: the first bit on the wire is the MSB.
  void draw(std::uint64_t bits, Rng& rng, std::vector<std::uint64_t>& positions) const;

 private:
  double ber_;
  double log1m_ber_;  // log(1 - ber), < 0
};

// Flips the given bits of `bytes` (positions as draw() returns them, all inside `bytes`).
void flip_bits(std::span<std::uint8_t> bytes, std::span<const std::uint64_t> positions);

// Distinct bytes (8-bit symbols) touched by the given ascending positions.
std::uint64_t symbols_hit(std::span<const std::uint64_t> positions);

}  // namespace weft::link
