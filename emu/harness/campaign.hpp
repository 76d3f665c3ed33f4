// emu/harness/campaign.hpp — the seeded property campaign (TigerBeetle vopr style).
//
// run_seed(seed) draws EVERYTHING from the seed: QP pairs, MTU, recovery mode, timers and retry
// budgets, the link's fault mix, the verbs mix, receive-queue policy, deliberate remote-access
// errors and loss bursts. It runs two Devices over a Sim link until all work is accounted for or
// a limit is hit, then checks invariants with checkers that live here, outside the engine:
//   - every WR completes exactly once, in order, with the status the IBA dictates;
//   - successful WRITE, SEND and READ data is byte-exact; atomics apply exactly once;
//   - receives complete in send order per QP;
//   - retry budgets exceeded end in RETRY_EXC / RNR_RETRY_EXC and flushes, and nothing hangs;
//   - no byte outside a registered region (guard bytes) or outside the WR's target is written.
// Thread-safety: run_seed is reentrant (no globals); one seed per call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::harness {

// What a run exercised. Summed across seeds by `weft check` and the property tests.
struct Exercised {
  std::uint64_t seeds = 0;
  std::uint64_t wrs = 0;      // send WRs posted
  std::uint64_t packets = 0;  // packets transmitted by the Devices
  std::uint64_t retransmits = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t naks_seq = 0, naks_rnr = 0, naks_access = 0;
  std::uint64_t dup_reads_replayed = 0, dup_atomics_replayed = 0;
  std::uint64_t credit_stalls = 0;
  std::uint64_t retry_exc = 0, rnr_retry_exc = 0;  // error completions with these statuses
  std::uint64_t rem_access_err = 0;
  std::uint64_t flushed = 0;  // WR_FLUSH_ERR completions (send and recv)
  std::uint64_t qps_go_back_n = 0, qps_selective_repeat = 0;
  std::uint64_t ud_messages = 0;
  std::uint64_t link_dropped = 0, link_corrupted = 0, link_duplicated = 0, link_reordered = 0;
  std::uint64_t rx_bad_crc = 0;

  void add(const Exercised& o);
  // Names and values of the counts that must all be > 0 over a campaign.
  std::vector<std::pair<std::string_view, std::uint64_t>> required() const;
  std::string format() const;
};

struct CampaignOptions {
  std::string pcap_path;                      // write every transmitted packet here
  std::function<void(std::string_view)> log;  // verbose event log, one line per call
};

struct SeedResult {
  std::uint64_t seed = 0;
  bool passed = false;
  std::vector<std::string> failures;  // what the checkers found
  Exercised exercised{};
  std::uint64_t trace_hash = 0;
  std::uint64_t events = 0;
  std::uint64_t end_ns = 0;
  std::vector<bool> opcodes_sent = std::vector<bool>(256, false);  // BTH opcodes transmitted
  std::vector<bool> aeth_kinds = std::vector<bool>(8, false);  // 0 ACK, 1 RNR, 2 seq, 3 inv, 4 acc
  std::string config;  // one-line description of what the seed drew
};

SeedResult run_seed(std::uint64_t seed, const CampaignOptions& options = {});

// The one command that replays a seed.
std::string replay_command(std::uint64_t seed);

}  // namespace weft::harness
