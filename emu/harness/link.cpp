// emu/harness/link.cpp — the fault model of one link direction (see link.hpp).
#include "emu/harness/link.hpp"

#include <algorithm>

namespace weft::harness {

LinkVerdict LinkDirection::send(TimeNs now, std::uint64_t wire_bytes) {
  LinkVerdict v;
  ++stats_.packets;
  stats_.bytes += wire_bytes;
  // Serialization: the transmitter is busy until the previous packet's last bit has left.
  const TimeNs start = std::max(now, busy_until_ns_);
  v.depart_ns = start + serialization_ns(wire_bytes, config_.rate_mbps);
  busy_until_ns_ = v.depart_ns;
  v.arrive_ns = v.depart_ns + config_.latency_ns;

  // Fixed draw order (one draw per fault kind, always) so a stream's verdicts depend only on
  // how many packets went through it, not on which faults fired.
  const bool drop = rng_.chance(config_.drop);
  const bool corrupt = rng_.chance(config_.corrupt);
  const bool dup = rng_.chance(config_.duplicate);
  const bool reorder = rng_.chance(config_.reorder);
  const bool delay = rng_.chance(config_.delay);
  const std::uint64_t r_bit = rng_.next_u64();
  const std::uint64_t r_reorder = rng_.next_u64();
  const std::uint64_t r_delay = rng_.next_u64();
  const std::uint64_t r_dup = rng_.next_u64();

  for (const Blackout& b : config_.blackouts) {
    if (now >= b.start_ns && now < b.end_ns) {
      v.dropped = v.blackout = true;
      ++stats_.dropped;
      ++stats_.blackout_dropped;
      return v;
    }
  }
  if (drop) {
    v.dropped = true;
    ++stats_.dropped;
    return v;
  }
  if (corrupt && wire_bytes > 0) {
    v.corrupted = true;
    v.corrupt_bit = r_bit % (wire_bytes * 8);
    ++stats_.corrupted;
  }
  if (reorder && config_.reorder_ns_max > 0) {
    v.reordered = true;
    v.arrive_ns += 1 + r_reorder % config_.reorder_ns_max;
    ++stats_.reordered;
  }
  if (delay && config_.delay_ns_max > 0) {
    v.delayed = true;
    v.arrive_ns += 1 + r_delay % config_.delay_ns_max;
    ++stats_.delayed;
  }
  if (dup) {
    v.duplicated = true;
    v.duplicate_arrive_ns = v.arrive_ns + 1 + r_dup % (config_.duplicate_gap_ns_max + 1);
    ++stats_.duplicated;
  }
  return v;
}

}  // namespace weft::harness
