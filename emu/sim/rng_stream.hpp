// emu/sim/rng_stream.hpp — independent, reproducible random streams for simulation components.
//
// A run has one seed. Each component draws from its own SeededRng whose seed is derived from
// (run seed, stream key), where the key is stable across model changes (a hash of the
// component's name, or a value such as a node GUID and port number). Adding, removing or
// reordering components therefore never shifts another component's stream.
// Thread-safety: pure functions; the streams themselves are single-owner SeededRngs.
#pragma once

#include <cstdint>
#include <string_view>

#include <weft/types.hpp>

namespace weft::sim {

// splitmix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a 64 over bytes: the stream key of a name.
constexpr std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Seed of stream `key` in run `run_seed`. Mixing both sides before combining keeps nearby
// seeds and nearby keys (GUID 1, 2, 3...) from producing related seeds.
constexpr std::uint64_t stream_seed(std::uint64_t run_seed, std::uint64_t key) {
  return mix64(mix64(run_seed) ^ mix64(key ^ 0x6a09e667f3bcc909ULL));
}

inline SeededRng make_stream(std::uint64_t run_seed, std::uint64_t key) {
  return SeededRng(stream_seed(run_seed, key));
}
inline SeededRng make_stream(std::uint64_t run_seed, std::string_view name) {
  return SeededRng(stream_seed(run_seed, fnv1a64(name)));
}

}  // namespace weft::sim
