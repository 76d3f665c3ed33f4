// tests/io/peer_protocol.hpp — the control messages between shm_test (the parent, which drives
// every verb) and io_peer (the child process it execs, which checks what landed in its memory).
// Both sides use the same deterministic pattern, so every byte is verified independently.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::test {

enum class PeerCmd : std::uint32_t {
  kFill = 1,    // fill [off, off+len) with pattern(seed)
  kCheck,       // verify [off, off+len) == pattern(seed)
  kPostRecvRc,  // post an RC receive over [off, off+len)
  kWaitRecvRc,  // wait for an RC receive completion
  kPostRecvUd,  // post a UD receive over [off, off+len)
  kWaitRecvUd,  // wait for a UD receive completion
  kExit,
  kPause,   // hold the driver lock: the peer's driver stops taking packets off the medium
  kResume,  // release it
};

struct PeerMsg {
  PeerCmd cmd;
  std::uint32_t len;
  std::uint64_t off;
  std::uint64_t seed;
};

struct PeerReply {
  std::uint32_t ok;      // 1 = as expected
  std::uint32_t status;  // WcStatus for the waits
  std::uint64_t value;   // byte_len for waits, first bad index for kCheck
};

struct PeerInfo {
  std::uint32_t rc_qpn, ud_qpn;
  std::uint64_t addr;
  std::uint64_t bytes;
  std::uint32_t rkey;
  std::uint32_t psn;
};

inline constexpr std::uint32_t kPeerQkey = 0x11223344;

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// Byte i of pattern(seed).
inline void fill_pattern(std::uint8_t* p, std::size_t len, std::uint64_t seed) {
  std::size_t i = 0;
  for (std::uint64_t w = 0; i < len; ++w) {
    std::uint64_t v = splitmix(seed * 0x100000001b3ULL + w);
    for (int k = 0; k < 8 && i < len; ++k, ++i, v >>= 8) p[i] = static_cast<std::uint8_t>(v);
  }
}
// Index of the first byte that differs from pattern(seed), or len.
inline std::size_t check_pattern(const std::uint8_t* p, std::size_t len, std::uint64_t seed) {
  std::size_t i = 0;
  for (std::uint64_t w = 0; i < len; ++w) {
    std::uint64_t v = splitmix(seed * 0x100000001b3ULL + w);
    for (int k = 0; k < 8 && i < len; ++k, ++i, v >>= 8)
      if (p[i] != static_cast<std::uint8_t>(v)) return i;
  }
  return len;
}

}  // namespace weft::test
