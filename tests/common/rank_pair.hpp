// tests/common/rank_pair.hpp — two forked ranks joined by a stream socket pair, for the
// provider tests whose two processes share one medium (the dpdk tests' net_memif pair).
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

namespace weft::test_util {

// Runs body(rank, sock) in ranks 0 and 1, each bounded by alarm(alarm_s) and ended with exit()
// (not _Exit: libfabric's fi_fini must run, the DPDK provider releases its EAL there). When a
// rank fails the other is killed; on_failed(pid) then runs for each rank that did not exit 0,
// once it is gone: a rank that was killed or left by _Exit leaves its resources behind (a DPDK
// EAL's run-time directory). 0 when both ranks exited 0.
inline int run_rank_pair(unsigned alarm_s, const std::function<int(int rank, int sock)>& body,
                         const std::function<void(pid_t)>& on_failed = {}) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
  std::fflush(nullptr);  // nothing buffered twice
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) return 1;
    if (pids[rank] == 0) {
      alarm(alarm_s);
      close(sv[1 - rank]);
      std::exit(body(rank, sv[rank]));
    }
  }
  close(sv[0]);
  close(sv[1]);
  int failed = 0;
  bool alive[2] = {true, true};
  for (int left = 2; left > 0; --left) {
    int st = 0;
    const pid_t p = wait(&st);
    if (p < 0) return 1;
    const int rank = p == pids[0] ? 0 : 1;
    alive[rank] = false;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    std::fprintf(stderr, "rank %d failed (status %d)\n", rank, st);
    ++failed;
    if (on_failed) on_failed(p);
    if (alive[1 - rank]) kill(pids[1 - rank], SIGKILL);
  }
  return failed == 0 ? 0 : 1;
}

// The same over the DPDK medium's net_memif pair (src/ofi/README.md): a net_memif of this
// process's own (FI_WEFT_DPDK_MEMIF = prefix + pid, so concurrent tests do not meet), and the
// EAL run-time directory a failed rank left (its default --file-prefix weft-PID) removed.
inline int run_dpdk_rank_pair(const std::string& memif_prefix, unsigned alarm_s,
                              const std::function<int(int rank, int sock)>& body) {
  setenv("FI_WEFT_DPDK_MEMIF", (memif_prefix + std::to_string(getpid())).c_str(), 1);
  return run_rank_pair(alarm_s, body, [](pid_t pid) {
    std::error_code ec;
    std::filesystem::remove_all("/var/run/dpdk/weft-" + std::to_string(pid), ec);
  });
}

}  // namespace weft::test_util
