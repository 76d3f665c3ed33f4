// tests/ofi/multi_proc_test.cpp — N processes (default 4) on the weft provider's shm medium:
// each opens an RDM endpoint, the parent hands every address to every child (pipes), each child
// sends one tagged message to every other and receives one from each, checking tag and bytes.
// Exit 0 when every child exited 0. Each child is bounded by alarm(); the parent kills the rest
// when one fails.
// `multi_proc_test N late`: the last rank sleeps kLateUs before it sends and progresses, and
// rank 0 waits with non-blocking fi_cq_read calls: a CQ read loop that finds nothing naps on the
// shm rings' doorbells (FI_WEFT_SPIN_US, src/ofi/README.md) and the peer's publish wakes it, so
// rank 0 must get everything byte-exact in fewer than kLateReadsMax reads.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/common/fd_io.hpp"
#include "tests/common/ofi_endpoint.hpp"

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr std::size_t kMsgBytes = 100000;  // rendezvous (RDMA READ), zero copy
constexpr useconds_t kLateUs = 500'000;
// Naps of at most 1 ms while the late rank sleeps (~500 reads), and the spin before the first
// nap: ~50 us of reads (~400 here), again whenever the spin was interrupted for more than 5 us
// (~15 times a run here, up to 70 under load). Spinning all along makes ~4 million reads here
// quiet, ~200,000 with a 5 % share of a CPU.
constexpr long kLateReadsMax = 100'000;

#define CHECK(x)                                                     \
  do {                                                               \
    long r_ = static_cast<long>(x);                                  \
    if (r_ < 0) {                                                    \
      std::fprintf(stderr, "rank %d: %s = %ld (%s)\n", rank, #x, r_, \
                   fi_strerror(static_cast<int>(-r_)));              \
      std::_Exit(2);                                                 \
    }                                                                \
  } while (0)

using weft::test_util::full_read;
using weft::test_util::full_write;

std::uint8_t byte_of(int src, int dst, std::size_t i) {
  return static_cast<std::uint8_t>(src * 31 + dst * 7 + i);
}

int child(int rank, int n, int to_parent, int from_parent, bool late) {
  alarm(30);
  weft::test_util::OfiEndpoint e;
  weft::test_util::OfiEndpointSpec spec;
  spec.caps = FI_TAGGED;
  spec.cq_format = FI_CQ_FORMAT_TAGGED;
  if (const int r = e.open(spec); r < 0) {
    std::fprintf(stderr, "rank %d: %s = %d (%s)\n", rank, e.failed, r, fi_strerror(-r));
    return 2;
  }
  fid_av* av = e.av;
  fid_cq* cq = e.cq;
  fid_ep* ep = e.ep;
  char addr[kAddrMax]{};
  std::size_t alen = sizeof addr;
  CHECK(fi_getname(&ep->fid, addr, &alen));
  if (!full_write(to_parent, addr, kAddrMax)) return 3;
  std::vector<char> all(kAddrMax * static_cast<std::size_t>(n));
  if (!full_read(from_parent, all.data(), all.size())) return 3;
  std::vector<fi_addr_t> fa(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) CHECK(fi_av_insert(av, &all[kAddrMax * i], 1, &fa[i], 0, nullptr));

  std::vector<std::vector<std::uint8_t>> rx(static_cast<std::size_t>(n),
                                            std::vector<std::uint8_t>(kMsgBytes));
  std::vector<std::vector<std::uint8_t>> tx(static_cast<std::size_t>(n),
                                            std::vector<std::uint8_t>(kMsgBytes));
  int pending = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CHECK(fi_trecv(ep, rx[p].data(), kMsgBytes, nullptr, fa[p], static_cast<std::uint64_t>(p), 0,
                   nullptr));
    ++pending;
  }
  if (late && rank == n - 1) usleep(kLateUs);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (std::size_t i = 0; i < kMsgBytes; ++i) tx[p][i] = byte_of(rank, p, i);
    ssize_t r;
    while ((r = fi_tsend(ep, tx[p].data(), kMsgBytes, nullptr, fa[p],
                         static_cast<std::uint64_t>(rank), nullptr)) == -FI_EAGAIN) {
      fi_cq_tagged_entry e;
      (void)fi_cq_read(cq, &e, 0);
    }
    CHECK(r);
    ++pending;
  }
  long reads = 0;
  while (pending > 0) {
    fi_cq_tagged_entry e[8];
    const bool poll = late && rank == 0;
    reads += poll;
    const ssize_t got = poll ? fi_cq_read(cq, e, 8) : fi_cq_sread(cq, e, 8, nullptr, 100);
    if (got == -FI_EAGAIN) continue;
    CHECK(got);
    pending -= static_cast<int>(got);
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (std::size_t i = 0; i < kMsgBytes; ++i)
      if (rx[p][i] != byte_of(p, rank, i)) {
        std::fprintf(stderr, "rank %d: byte %zu from %d wrong\n", rank, i, p);
        return 4;
      }
  }
  if (late && rank == 0) {
    std::printf("rank 0: %ld fi_cq_read calls while rank %d slept %u us\n", reads, n - 1,
                static_cast<unsigned>(kLateUs));
    std::fflush(stdout);  // the child ends in _Exit
    if (reads >= kLateReadsMax) {
      std::fprintf(stderr, "rank 0: %ld reads, at most %ld expected: the reads did not sleep\n",
                   reads, kLateReadsMax);
      return 5;
    }
  }
  // Everyone must be done before anyone closes (a peer may still need our ACKs).
  char done = 1;
  if (!full_write(to_parent, &done, 1) || !full_read(from_parent, &done, 1)) return 3;
  e.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  const bool late = argc > 2 && std::strcmp(argv[2], "late") == 0;
  std::vector<pid_t> pids;
  std::vector<int> up(n), down(n);
  for (int r = 0; r < n; ++r) {
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(a[0]);
      close(b[1]);
      std::_Exit(child(r, n, a[1], b[0], late));
    }
    close(a[1]);
    close(b[0]);
    up[r] = a[0];
    down[r] = b[1];
    pids.push_back(pid);
  }
  int rc = 0;
  std::vector<char> all(kAddrMax * static_cast<std::size_t>(n));
  for (int r = 0; r < n && rc == 0; ++r)
    if (!full_read(up[r], &all[kAddrMax * r], kAddrMax)) rc = 1;
  for (int r = 0; r < n && rc == 0; ++r)
    if (!full_write(down[r], all.data(), all.size())) rc = 1;
  char done;
  for (int r = 0; r < n && rc == 0; ++r)
    if (!full_read(up[r], &done, 1)) rc = 1;
  for (int r = 0; r < n && rc == 0; ++r)
    if (!full_write(down[r], &done, 1)) rc = 1;
  if (rc)
    for (pid_t p : pids) kill(p, SIGKILL);
  for (int r = 0; r < n; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "rank %d failed (status 0x%x)\n", r, st);
      rc = 1;
    }
  }
  std::printf("%s: %d processes, all-to-all tagged %zu B\n", rc ? "FAIL" : "PASS", n, kMsgBytes);
  return rc;
}
