// tools/weft/cmd_check.cpp — `weft check`: the seeded property campaign (emu/harness/check.hpp).
//   weft check --seeds N [--first S]            run N seeds from S; exit 1 if any failed
//   weft check --seed S [--pcap FILE] [--verbose]  replay one seed
#include <cstdio>
#include <memory>
#include <string>

#include "emu/harness/check.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {

namespace {
struct CheckArgs {
  std::uint64_t seeds = 0;
  std::uint64_t first = 1;
  std::uint64_t seed = 0;
  std::string pcap;
  bool verbose = false;
};
}  // namespace

void add_check(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  auto* cmd = app.add_subcommand("check", "Seeded fault campaign with invariant checkers");
  auto* seeds = cmd->add_option("--seeds", args->seeds, "Number of seeds to run");
  cmd->add_option("--first", args->first, "First seed of the range (default 1)")->needs(seeds);
  auto* seed = cmd->add_option("--seed", args->seed, "Replay this one seed")->excludes(seeds);
  cmd->add_option("--pcap", args->pcap, "Write the replayed seed's packets to a pcap file")
      ->needs(seed);
  cmd->add_flag("--verbose", args->verbose, "Print the event log of the replayed seed")
      ->needs(seed);
  cmd->callback([args, seeds, seed] {
    if (*seed) {
      if (!harness::replay_seed(args->seed, args->pcap, args->verbose, stdout)) {
        throw CLI::RuntimeError(1);
      }
      return;
    }
    if (!*seeds) throw CLI::ValidationError("check", "give --seeds N or --seed S");
    const auto rep = harness::run_check(args->first, args->seeds, stdout);
    if (rep.failed != 0) throw CLI::RuntimeError(1);
  });
}

}  // namespace weft::cli
