// tests/common/cli_run.hpp — run a command from a test and keep its exit status and output.
// One copy for the tests that drive the `weft` program (perf, sim, coll-bench).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace weft::test_util {

struct CliRun {
  int status = -1;  // the exit status, or -1 when the command could not run or was killed
  std::string out;  // stdout and stderr, interleaved
};

// Runs `cmd` through the shell with stderr merged into stdout.
inline CliRun run_command(const std::string& cmd) {
  CliRun r;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  const int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace weft::test_util
