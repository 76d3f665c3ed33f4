// tools/weft/cmd_demo.cpp — `weft demo`: two HCAs over a lossy virtual link (emu/harness/demo.hpp).
#include <cstdio>
#include <memory>

#include "emu/harness/demo.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {

void add_demo(CLI::App& app) {
  auto o = std::make_shared<harness::DemoOptions>();
  auto* cmd =
      app.add_subcommand("demo", "Two HCAs over a lossy virtual link: SEND, WRITE, READ, atomics");
  cmd->add_option("--seed", o->seed, "Seed of the link's faults and the data")
      ->capture_default_str();
  cmd->add_option("--drop", o->drop, "Packet drop probability")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_option("--reorder", o->reorder, "Reorder probability")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--corrupt", o->corrupt, "Bit-flip probability")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_option("--duplicate", o->duplicate, "Duplicate probability")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--mtu", o->mtu_bytes, "Path MTU in bytes (256..4096)")
      ->check(CLI::Range(256, 4096))
      ->capture_default_str();
  cmd->add_option("--write-bytes", o->write_bytes, "RDMA WRITE size")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--read-bytes", o->read_bytes, "RDMA READ size")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--selective-repeat", o->selective_repeat, "Use selective-repeat recovery");
  cmd->add_flag("--quiet", o->quiet, "Do not print every packet");
  cmd->callback([o] {
    if (harness::run_demo(*o, stdout) != 0) throw CLI::RuntimeError(1);
  });
}

}  // namespace weft::cli
