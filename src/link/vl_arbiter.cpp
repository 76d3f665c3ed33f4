// link/vl_arbiter.cpp — see vl_arbiter.hpp.
#include "src/link/vl_arbiter.hpp"

#include "src/base/assert.hpp"

namespace weft::link {

// A debt is at most one packet (<= 64 KiB here), repaid at >= 64 bytes per pass.
constexpr std::size_t kDeficitPassesMax = 65536 / kVlArbWeightBytes + 2;

VlArbiter::VlArbiter(VlArbConfig config) : config_(std::move(config)) {
  WEFT_ASSERT(config_.high.size() <= kVlArbTableEntriesMax);
  WEFT_ASSERT(config_.low.size() <= kVlArbTableEntriesMax);
  high_.entries = config_.high;
  low_.entries = config_.low;
  high_.deficit_bytes.assign(high_.entries.size(), 0);
  low_.deficit_bytes.assign(low_.entries.size(), 0);
  for (const auto* t : {&high_, &low_})
    for (const auto& e : t->entries) WEFT_ASSERT(e.vl < 15);  // VL15 is outside the tables
}

bool VlArbiter::ready(const Table& t, std::span<const std::uint32_t, 16> head) const {
  for (const auto& e : t.entries)
    if (e.weight > 0 && head[e.vl] > 0) return true;
  return false;
}

void VlArbiter::advance(Table& t) {
  if (config_.mode == ArbitrationMode::kDeficit && t.entered)
    t.deficit_bytes[t.index] = t.remaining_bytes < 0 ? t.remaining_bytes : 0;
  t.index = (t.index + 1) % t.entries.size();
  t.entered = false;
}

int VlArbiter::pick(Table& t, std::span<const std::uint32_t, 16> head) {
  // kIba: at most two passes (the first may start mid-entry). kDeficit: an entry may owe up to
  // one maximal packet, paid off at >= 64 bytes a pass.
  const std::size_t passes = config_.mode == ArbitrationMode::kIba ? 2 : kDeficitPassesMax;
  for (std::size_t step = 0; step < passes * t.entries.size() + 1; ++step) {
    const VlArbEntry& e = t.entries[t.index];
    if (e.weight == 0 || head[e.vl] == 0) {
      // An idle VL forfeits its turn; in deficit mode its debt is forgiven too (as in DRR).
      if (config_.mode == ArbitrationMode::kDeficit) t.deficit_bytes[t.index] = 0;
      t.entered = false;
      t.index = (t.index + 1) % t.entries.size();
      continue;
    }
    if (!t.entered) {
      t.remaining_bytes = static_cast<std::int64_t>(e.weight) * kVlArbWeightBytes;
      if (config_.mode == ArbitrationMode::kDeficit) {
        t.remaining_bytes += t.deficit_bytes[t.index];
        t.deficit_bytes[t.index] = 0;
      }
      t.entered = true;
      if (t.remaining_bytes <= 0) {  // still paying an earlier overshoot
        advance(t);
        continue;
      }
    }
    int vl = e.vl;
    t.remaining_bytes -= head[e.vl];
    if (t.remaining_bytes <= 0) advance(t);
    return vl;
  }
  return kNoVl;
}

int VlArbiter::next(std::span<const std::uint32_t, 16> head) {
  if (head[15] > 0) return 15;  // VL15 first (IBA 7.6.9)
  bool high = !high_.entries.empty() && ready(high_, head);
  bool low = !low_.entries.empty() && ready(low_, head);
  if (high) {
    bool limited = config_.limit_of_high_priority != kHighPriorityUnbounded && low &&
                   high_bytes_since_low_ > 0 &&
                   high_bytes_since_low_ >=
                       std::uint64_t{config_.limit_of_high_priority} * kHighPriorityLimitUnitBytes;
    if (!limited) {
      int vl = pick(high_, head);
      if (low)
        high_bytes_since_low_ += head[static_cast<std::size_t>(vl)];
      else
        high_bytes_since_low_ = 0;
      return vl;
    }
  }
  if (low) {
    high_bytes_since_low_ = 0;
    return pick(low_, head);
  }
  return kNoVl;
}

}  // namespace weft::link
