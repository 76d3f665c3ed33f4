// emu/harness/memory.cpp — guard and shadow checks (see memory.hpp).
#include "emu/harness/memory.hpp"

#include <sys/mman.h>

#include <cstdio>

namespace weft::harness {

namespace {
// Inside x86-64 user space (and outside ASan's shadow ranges); any free range works.
constexpr std::uintptr_t kArenaAddress = 0x5eed00000000ULL;
}  // namespace

Arena::Arena(std::size_t bytes) : size_((bytes + 4095) / 4096 * 4096) {
#ifdef MAP_FIXED_NOREPLACE
  void* p = ::mmap(reinterpret_cast<void*>(kArenaAddress), size_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != MAP_FAILED && reinterpret_cast<std::uintptr_t>(p) == kArenaAddress) {
    base_ = static_cast<std::uint8_t*>(p);
    fixed_ = true;
    return;
  }
  if (p != MAP_FAILED) ::munmap(p, size_);
#endif
  heap_.assign(size_ + 64, 0);
  base_ = heap_.data() + (64 - reinterpret_cast<std::uintptr_t>(heap_.data()) % 64) % 64;
}

Arena::~Arena() {
  if (fixed_) ::munmap(base_, size_);
}

std::uint8_t* Arena::alloc(std::size_t bytes) {
  used_ = (used_ + 63) / 64 * 64;
  if (used_ + bytes > size_) return nullptr;  // sized by footprint(): a harness bug
  std::uint8_t* p = base_ + used_;
  used_ += bytes;
  return p;
}

void GuardedRegion::check(const std::string& name, std::vector<std::string>& failures) const {
  char buf[256];
  int reported = 0;
  const std::uint8_t* data = storage_.data();
  if (data == nullptr) return;
  for (std::size_t i = 0; i < storage_.size() && reported < 3; ++i) {
    const bool guard = i < kGuardBytes || i >= kGuardBytes + len_;
    if (guard) {
      if (data[i] != kGuardFill) {
        const long off = static_cast<long>(i) - static_cast<long>(kGuardBytes);
        std::snprintf(buf, sizeof buf,
                      "%s: guard byte at offset %ld written (0x%02x): write outside the region",
                      name.c_str(), off, data[i]);
        failures.emplace_back(buf);
        ++reported;
      }
      continue;
    }
    const std::size_t o = i - kGuardBytes;
    const std::uint8_t v = data[i];
    bool ok = true;
    switch (mode_[o]) {
      case kExact:
        ok = v == expect_[o];
        break;
      case kEither:
        ok = v == expect_[o] || v == alt_[o];
        break;
      default:
        break;
    }
    if (!ok) {
      std::snprintf(buf, sizeof buf, "%s: byte at offset %zu is 0x%02x, expected 0x%02x%s",
                    name.c_str(), o, v, expect_[o], mode_[o] == kEither ? " (or alt)" : "");
      failures.emplace_back(buf);
      ++reported;
    }
  }
}

}  // namespace weft::harness
