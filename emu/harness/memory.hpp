// emu/harness/memory.hpp — caller memory for the campaign: a region with guard bytes on both
// sides and a shadow model of what every byte must hold at the end of a run.
//
// The shadow has three modes per byte: exact (must equal `expect`), either (may equal `expect` or
// `alt`: a WR that failed may or may not have landed) and any (e.g. a receive buffer a failed
// multi-packet SEND may have partly filled). Guard bytes must never change: nothing outside a
// registered region may be written. Thread-safety: single owner.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <weft/device.hpp>

namespace weft::harness {

// Caller memory at a fixed virtual address when the address space allows it: VAs travel in
// RETH/AtomicETH headers, so a run's packet trace (and its hash) replays across processes only if
// the buffers sit at the same addresses. Falls back to the heap (same run, other addresses).
class Arena {
 public:
  explicit Arena(std::size_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  std::uint8_t* alloc(std::size_t bytes);  // 64-byte aligned, zeroed
  bool fixed() const { return fixed_; }

 private:
  std::uint8_t* base_ = nullptr;
  std::size_t size_ = 0, used_ = 0;
  bool fixed_ = false;
  std::vector<std::uint8_t> heap_;
};

struct Chunk {
  std::uint32_t off = 0;
  std::uint32_t len = 0;
};

class GuardedRegion {
 public:
  static constexpr std::size_t kGuardBytes = 64;
  static constexpr std::uint8_t kGuardFill = 0xA5;

  enum Mode : std::uint8_t { kExact = 0, kEither = 1, kAny = 2 };

  // Bump allocation before create(): offsets with a gap so neighbours never touch.
  std::uint32_t reserve(std::uint32_t len, std::uint32_t align = 1) {
    used_ = (used_ + align - 1) / align * align;
    const std::uint32_t off = used_;
    used_ += len + kGapBytes;
    return off;
  }
  std::uint32_t reserved() const { return used_; }

  // Bytes create() will take from an arena.
  std::size_t footprint() const { return used_ + 64 + 2 * kGuardBytes + 64; }
  void create(std::uint8_t salt, Arena& arena) {
    len_ = used_ + 64;
    storage_ = {arena.alloc(len_ + 2 * kGuardBytes), len_ + 2 * kGuardBytes};
    std::memset(storage_.data(), kGuardFill, storage_.size());
    for (std::size_t i = 0; i < len_; ++i) {
      base()[i] = static_cast<std::uint8_t>(i * 131u + salt);
    }
    expect_.assign(base(), base() + len_);
    alt_.assign(len_, 0);
    mode_.assign(len_, kExact);
  }
  std::uint8_t* base() { return storage_.data() + kGuardBytes; }
  MemoryRegion* mr = nullptr;  // set once registered
  std::uint32_t lkey() const { return mr->lkey(); }
  std::uint32_t rkey() const { return mr->rkey(); }
  std::uint64_t addr() { return reinterpret_cast<std::uintptr_t>(base()); }
  std::size_t len() const { return len_; }

  // The harness itself (the "host") writes memory: expected content follows.
  void host_write(std::uint32_t off, std::span<const std::uint8_t> data) {
    if (data.empty()) return;
    std::memcpy(base() + off, data.data(), data.size());
    std::memcpy(expect_.data() + off, data.data(), data.size());
    std::memset(mode_.data() + off, kExact, data.size());
  }
  void expect(std::uint32_t off, std::span<const std::uint8_t> data) {
    if (data.empty()) return;
    std::memcpy(expect_.data() + off, data.data(), data.size());
    std::memset(mode_.data() + off, kExact, data.size());
  }
  void maybe(std::uint32_t off, std::span<const std::uint8_t> data) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (mode_[off + i] == kExact) {
        alt_[off + i] = data[i];
        mode_[off + i] = kEither;
      } else {
        mode_[off + i] = kAny;
      }
    }
  }
  void any(std::uint32_t off, std::uint32_t len) { std::memset(mode_.data() + off, kAny, len); }
  std::uint64_t expected_u64(std::uint32_t off) const {
    std::uint64_t v;
    std::memcpy(&v, expect_.data() + off, 8);
    return v;
  }

  // Appends one failure line per problem (at most a few per region).
  void check(const std::string& name, std::vector<std::string>& failures) const;

 private:
  static constexpr std::uint32_t kGapBytes = 16;
  std::span<std::uint8_t> storage_;
  std::vector<std::uint8_t> expect_, alt_, mode_;
  std::size_t len_ = 0;
  std::uint32_t used_ = 64;  // the first 64 bytes hold atomic words
};

}  // namespace weft::harness
