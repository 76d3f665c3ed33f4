// tools/weft/commands.hpp — the weft CLI's subcommands. Each add_* registers one subcommand on
// the app; its logic lives in a library (emu/harness, ...), never here. A subcommand that fails
// throws CLI::RuntimeError(exit_code); CLI11_PARSE turns it into main's return value.
#pragma once

#include <CLI/CLI.hpp>

namespace weft::cli {
void add_version(CLI::App& app);
void add_demo(CLI::App& app);   // tools/weft/cmd_demo.cpp
void add_check(CLI::App& app);  // tools/weft/cmd_check.cpp
void add_topo(CLI::App& app);   // tools/weft/cmd_topo.cpp
void add_route(CLI::App& app);  // tools/weft/cmd_topo.cpp
void add_sm(CLI::App& app);     // tools/weft/cmd_sm.cpp
void add_sim(CLI::App& app);    // tools/weft/cmd_sim.cpp
void add_perf(CLI::App& app);   // tools/weft/cmd_perf.cpp
// tools/weft/cmd_fabric.cpp, tools/weft/cmd_run.cpp
void add_fabric(CLI::App& app);
void add_run(CLI::App& app);
void add_coll_bench(CLI::App& app);  // tools/weft/cmd_coll_bench.cpp
}  // namespace weft::cli
