// emu/harness/memory.cpp — guard and shadow checks (see memory.hpp).
#include "emu/harness/memory.hpp"

#include <cstdio>

namespace weft::harness {

void GuardedRegion::check(const std::string& name, std::vector<std::string>& failures) const {
  char buf[256];
  int reported = 0;
  const std::uint8_t* data = storage_.data();
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
      case kExact: ok = v == expect_[o]; break;
      case kEither: ok = v == expect_[o] || v == alt_[o]; break;
      default: break;
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
