// emu/harness/link.hpp — one direction of a minimal virtual-time link: serialization at a rate,
// a propagation latency, and a seeded fault model (drop, duplicate, reorder, corrupt, delay,
// blackout windows), in the spirit of ngtcp2's examples/sim LinkConfig and ns-3's
// queue -> pipe -> error model.
//
// A LinkDirection only decides: when a packet of N bytes sent at `now` arrives, how many copies,
// and whether (and where) it is corrupted. Moving bytes is the Sim's job. Every decision draws
// from the direction's own SeededRng stream, so adding traffic in one direction never changes the
// faults of the other. Thread-safety: single owner (the Sim).
#pragma once

#include <cstdint>
#include <vector>

#include <weft/types.hpp>

namespace weft::harness {

// Everything sent in [start_ns, end_ns) is lost: a loss burst longer than any retry budget.
struct Blackout {
  TimeNs start_ns = 0;
  TimeNs end_ns = 0;
};

struct LinkConfig {
  TimeNs latency_ns = 1000;             // propagation delay
  std::uint64_t rate_mbps = 100'000;    // serialization rate, megabits per second; 0 = infinite
  double drop = 0.0;                    // probability a packet is lost
  double duplicate = 0.0;               // probability a packet arrives twice
  double reorder = 0.0;                 // probability a packet is held back behind later ones
  double corrupt = 0.0;                 // probability one bit of the packet flips
  double delay = 0.0;                   // probability of an extra queueing delay
  TimeNs reorder_ns_max = 4'000;        // how long a reordered packet is held back, at most
  TimeNs delay_ns_max = 100'000;        // extra delay of a delayed packet, at most
  TimeNs duplicate_gap_ns_max = 2'000;  // a duplicate trails the original by up to this
  std::vector<Blackout> blackouts;

  bool lossy() const { return drop > 0.0 || corrupt > 0.0 || !blackouts.empty(); }
};

// What the link does with one packet.
struct LinkVerdict {
  bool dropped = false;
  bool blackout = false;  // dropped because of a blackout window
  bool corrupted = false;
  std::uint64_t corrupt_bit = 0;  // which bit flips, counted from the first wire byte
  TimeNs depart_ns = 0;           // last bit leaves the sender
  TimeNs arrive_ns = 0;           // last bit reaches the receiver
  bool duplicated = false;
  TimeNs duplicate_arrive_ns = 0;
  bool reordered = false;
  bool delayed = false;
};

struct LinkStats {
  std::uint64_t packets = 0, bytes = 0, dropped = 0, blackout_dropped = 0, duplicated = 0,
                reordered = 0, corrupted = 0, delayed = 0;
};

class LinkDirection {
 public:
  LinkDirection(const LinkConfig& config, std::uint64_t seed) : config_(config), rng_(seed) {}

  // Serialization time of `bytes` at the configured rate, rounded up to whole nanoseconds.
  static TimeNs serialization_ns(std::uint64_t bytes, std::uint64_t rate_mbps) {
    if (rate_mbps == 0) return 0;
    return (bytes * 8 * 1000 + rate_mbps - 1) / rate_mbps;
  }

  // Decides the fate of one packet of `wire_bytes` handed to the link at `now`.
  LinkVerdict send(TimeNs now, std::uint64_t wire_bytes);

  const LinkConfig& config() const { return config_; }
  LinkConfig& mutable_config() { return config_; }
  const LinkStats& stats() const { return stats_; }
  TimeNs busy_until_ns() const { return busy_until_ns_; }

 private:
  LinkConfig config_;
  SeededRng rng_;
  TimeNs busy_until_ns_ = 0;
  LinkStats stats_{};
};

}  // namespace weft::harness
