// weft/types.hpp — basic vocabulary of the public API: time, randomness, results.
//
// Time is an integer count of nanoseconds supplied by the caller (virtual time in the
// emulator, the monotonic clock in live media). Nothing in Weft's engine reads a clock.
// Thread-safety: plain values; Rng implementations are single-owner.
#pragma once

#include <cstdint>
#include <utility>
#include <variant>

namespace weft {

using TimeNs = std::uint64_t;
// "No deadline pending" (as ngtcp2's UINT64_MAX expiry).
inline constexpr TimeNs kNoDeadline = UINT64_MAX;

// Randomness enters the engine only through this interface, so a seeded run replays exactly.
class Rng {
 public:
  virtual ~Rng() = default;
  virtual std::uint64_t next_u64() = 0;
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; bias is negligible for our bounds).
  std::uint64_t below(std::uint64_t bound) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next_u64()) * bound) >> 64);
  }
  // Uniform in [0, 1).
  double unit() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return p > 0.0 && unit() < p; }
};

// xoshiro256** seeded through splitmix64: small, fast, and the same on every platform.
class SeededRng final : public Rng {
 public:
  explicit SeededRng(std::uint64_t seed) { reseed(seed); }
  void reseed(std::uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
  }
  std::uint64_t next_u64() override {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

// A value or an error code (std::expected is C++23; this is the subset Weft needs).
template <class T, class E>
class Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) : v_(std::in_place_index<1>, error) {}             // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() { return std::get<0>(v_); }
  E error() const { return std::get<1>(v_); }

 private:
  std::variant<T, E> v_;
};

}  // namespace weft
