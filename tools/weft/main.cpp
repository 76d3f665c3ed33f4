// tools/weft/main.cpp — the `weft` command: a thin front end over the libraries.
#include <cstdio>

#include "tools/weft/commands.hpp"

namespace weft::cli {

void add_version(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print Weft's version");
  cmd->callback([] { std::printf("weft %s\n", WEFT_VERSION); });
}

}  // namespace weft::cli

int main(int argc, char** argv) {
  CLI::App app{"weft: a user-space RDMA transport and InfiniBand fabric emulator"};
  app.require_subcommand(1);
  weft::cli::add_version(app);
  weft::cli::add_demo(app);
  weft::cli::add_check(app);
  weft::cli::add_topo(app);
  weft::cli::add_route(app);
  weft::cli::add_sm(app);
  weft::cli::add_sim(app);
  weft::cli::add_perf(app);
  weft::cli::add_fabric(app);
  weft::cli::add_run(app);
  weft::cli::add_coll_bench(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
