// wire/bytes.hpp — big-endian field access with explicit shifts (IBA 1.4: all multi-byte header
// fields are transmitted most significant byte first). Private to src/wire.
// Callers have already checked the span is long enough; the asserts catch a wrong offset.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "src/base/assert.hpp"

namespace weft::wire::detail {

inline std::uint8_t get8(std::span<const std::uint8_t> b, std::size_t off) {
  WEFT_ASSERT(off < b.size());
  return b[off];
}
inline std::uint16_t get16(std::span<const std::uint8_t> b, std::size_t off) {
  WEFT_ASSERT(off + 2 <= b.size());
  return static_cast<std::uint16_t>((unsigned{b[off]} << 8) | b[off + 1]);
}
inline std::uint32_t get24(std::span<const std::uint8_t> b, std::size_t off) {
  WEFT_ASSERT(off + 3 <= b.size());
  return (std::uint32_t{b[off]} << 16) | (std::uint32_t{b[off + 1]} << 8) | b[off + 2];
}
inline std::uint32_t get32(std::span<const std::uint8_t> b, std::size_t off) {
  WEFT_ASSERT(off + 4 <= b.size());
  return (std::uint32_t{b[off]} << 24) | (std::uint32_t{b[off + 1]} << 16) |
         (std::uint32_t{b[off + 2]} << 8) | b[off + 3];
}
inline std::uint64_t get64(std::span<const std::uint8_t> b, std::size_t off) {
  return (std::uint64_t{get32(b, off)} << 32) | get32(b, off + 4);
}

inline void put8(std::span<std::uint8_t> b, std::size_t off, unsigned v) {
  WEFT_ASSERT(off < b.size());
  b[off] = static_cast<std::uint8_t>(v);
}
inline void put16(std::span<std::uint8_t> b, std::size_t off, unsigned v) {
  WEFT_ASSERT(off + 2 <= b.size());
  b[off] = static_cast<std::uint8_t>(v >> 8);
  b[off + 1] = static_cast<std::uint8_t>(v);
}
inline void put24(std::span<std::uint8_t> b, std::size_t off, std::uint32_t v) {
  WEFT_ASSERT(off + 3 <= b.size());
  b[off] = static_cast<std::uint8_t>(v >> 16);
  b[off + 1] = static_cast<std::uint8_t>(v >> 8);
  b[off + 2] = static_cast<std::uint8_t>(v);
}
inline void put32(std::span<std::uint8_t> b, std::size_t off, std::uint32_t v) {
  WEFT_ASSERT(off + 4 <= b.size());
  b[off] = static_cast<std::uint8_t>(v >> 24);
  b[off + 1] = static_cast<std::uint8_t>(v >> 16);
  b[off + 2] = static_cast<std::uint8_t>(v >> 8);
  b[off + 3] = static_cast<std::uint8_t>(v);
}
inline void put64(std::span<std::uint8_t> b, std::size_t off, std::uint64_t v) {
  put32(b, off, static_cast<std::uint32_t>(v >> 32));
  put32(b, off + 4, static_cast<std::uint32_t>(v));
}

}  // namespace weft::wire::detail
