// tests/ofi/native_wait_test.cpp — two processes on the weft provider's shm medium that wait
// only natively (src/ofi/ofi_wait.cpp, "Native waits"): no fi_cq_sread, no spinning.
//
// Rank 1 sleeps kLateUs, then runs kRounds ping-pongs with rank 0: it sends a message of
// kSizes[r % 4] bytes (a direct message, the largest direct one, a rendezvous, a split
// rendezvous), rank 0 checks every byte and sends back a message of the same size with another
// pattern, which rank 1 checks. Between CQ reads each rank waits as man fi_poll says an
// application may:
// - `fd`: fi_trywait on the RDM CQ (FI_WAIT_FD), then poll(2) on its FI_GETWAIT descriptor
//   (rank 0) or epoll_wait(2) on an epoll set holding it (rank 1);
// - `waitset`: fi_wait on a wait set with the CQ and a counter (FI_SEND | FI_RECV) bound to it;
//   each rank's counter must end at 2 * kRounds.
// Every blocking call has a 10 s timeout that fails the test: the descriptor must become
// readable through the peer's publish (doorbells), not through a timer. Wake-ups are counted two
// ways, the waits that returned (and fi_trywait answers of -FI_EAGAIN) and the thread's
// voluntary context switches (getrusage RUSAGE_THREAD: every sleep inside fi_wait too), and
// bounded: while rank 1 sleeps, rank 0 may wake at most kLateWakeupsMax times (a 1 ms tick
// makes ~300, the old fi_wait's growing naps ~300, spinning tens of thousands of calls), and
// over the whole run at most kWakeupsPerRoundMax per round.
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr std::size_t kAddrMax = 64;
constexpr int kRounds = 24;
constexpr std::size_t kSizes[4] = {8, 65536, 100000, 1 << 20};
constexpr useconds_t kLateUs = 300'000;
constexpr int kWaitMs = 10'000;  // a wait that ends by its timeout is a failure
// While the peer sleeps: its connection set-up (control datagrams answered by its keeper) may
// wake us a few times; a tick-driven wait would wake every millisecond.
constexpr long kLateWakeupsMax = 30;
// Per round-trip: a rendezvous takes RTS, the copy, FIN (split: kCts, kDone) on each side; each
// hop may cost a wake-up and a fi_trywait that finds the hop's arrival.
constexpr long kWakeupsPerRoundMax = 40;

int g_rank = -1;

long sleeps_so_far() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nvcsw;
}

#define CHECK(x)                                                       \
  do {                                                                 \
    const long r_ = static_cast<long>(x);                              \
    if (r_ < 0) {                                                      \
      std::fprintf(stderr, "rank %d: %s = %ld (%s)\n", g_rank, #x, r_, \
                   fi_strerror(static_cast<int>(-r_)));                \
      std::_Exit(2);                                                   \
    }                                                                  \
  } while (0)

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rank %d: %s\n", g_rank, what);
  std::_Exit(3);
}

std::uint8_t pattern(int from, int round, std::size_t i) {
  return static_cast<std::uint8_t>(from * 101 + round * 13 + i * 7 + (i >> 8));
}

struct Waiter {
  bool waitset;
  fid_fabric* fab = nullptr;
  fid_cq* cq = nullptr;
  fid_wait* ws = nullptr;
  int fd = -1;    // the CQ's FI_GETWAIT descriptor (fd mode)
  int epfd = -1;  // rank 1's epoll set around it
  long wakeups = 0;

  // Reads until `want` completions arrived, blocking natively in between.
  void complete(int want) {
    while (want > 0) {
      fi_cq_tagged_entry e[4];
      const ssize_t n = fi_cq_read(cq, e, 4);
      if (n > 0) {
        want -= static_cast<int>(n);
        continue;
      }
      if (n != -FI_EAGAIN) CHECK(n);
      ++wakeups;
      if (waitset) {
        const int r = fi_wait(ws, kWaitMs);
        if (r == -FI_ETIMEDOUT) fail("fi_wait timed out: nothing woke it");
        CHECK(r);
        continue;
      }
      fid* f = &cq->fid;
      const int t = fi_trywait(fab, &f, 1);
      if (t == -FI_EAGAIN) continue;
      CHECK(t);
      if (epfd >= 0) {
        epoll_event ev;
        const int r = epoll_wait(epfd, &ev, 1, kWaitMs);
        if (r == 0) fail("epoll_wait timed out: the CQ's descriptor never became readable");
        if (r < 0) fail("epoll_wait failed");
      } else {
        pollfd p{fd, POLLIN, 0};
        const int r = poll(&p, 1, kWaitMs);
        if (r == 0) fail("poll timed out: the CQ's descriptor never became readable");
        if (r < 0) fail("poll failed");
      }
    }
  }
};

int run(int rank, int sock, bool waitset) {
  g_rank = rank;
  alarm(60);
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED;
  h->fabric_attr->prov_name = strdup("weft");
  h->domain_attr->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  fi_info* info = nullptr;
  CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info));
  Waiter w{waitset};
  fid_domain* dom;
  fid_av* av;
  fid_ep* ep;
  fid_cntr* cntr = nullptr;
  CHECK(fi_fabric(info->fabric_attr, &w.fab, nullptr));
  CHECK(fi_domain(w.fab, info, &dom, nullptr));
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  CHECK(fi_av_open(dom, &aa, &av, nullptr));
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  if (waitset) {
    fi_wait_attr wa{};
    wa.wait_obj = FI_WAIT_FD;
    CHECK(fi_wait_open(w.fab, &wa, &w.ws));
    ca.wait_obj = FI_WAIT_SET;
    ca.wait_set = w.ws;
  } else {
    ca.wait_obj = FI_WAIT_FD;
  }
  CHECK(fi_cq_open(dom, &ca, &w.cq, nullptr));
  CHECK(fi_endpoint(dom, info, &ep, nullptr));
  CHECK(fi_ep_bind(ep, &av->fid, 0));
  CHECK(fi_ep_bind(ep, &w.cq->fid, FI_TRANSMIT | FI_RECV));
  if (waitset) {
    fi_cntr_attr cna{};
    cna.events = FI_CNTR_EVENTS_COMP;
    cna.wait_obj = FI_WAIT_SET;
    cna.wait_set = w.ws;
    CHECK(fi_cntr_open(dom, &cna, &cntr, nullptr));
    CHECK(fi_ep_bind(ep, &cntr->fid, FI_SEND | FI_RECV));
  } else {
    CHECK(fi_control(&w.cq->fid, FI_GETWAIT, &w.fd));
    if (rank == 1) {
      w.epfd = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      if (w.epfd < 0 || epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.fd, &ev) != 0) fail("epoll set");
    }
  }
  CHECK(fi_enable(ep));
  char mine[kAddrMax]{}, theirs[kAddrMax]{};
  std::size_t alen = sizeof mine;
  CHECK(fi_getname(&ep->fid, mine, &alen));
  if (write(sock, mine, kAddrMax) != static_cast<ssize_t>(kAddrMax) ||
      recv(sock, theirs, kAddrMax, MSG_WAITALL) != static_cast<ssize_t>(kAddrMax))
    fail("address exchange");
  fi_addr_t peer;
  CHECK(fi_av_insert(av, theirs, 1, &peer, 0, nullptr));

  std::vector<std::uint8_t> tx(kSizes[3]), rx(kSizes[3]);
  long late_wakeups = 0, late_sleeps = 0;
  const long sleeps0 = sleeps_so_far();
  if (rank == 1) usleep(kLateUs);
  for (int r = 0; r < kRounds; ++r) {
    const std::size_t size = kSizes[r % 4];
    const int from = rank == 1 ? 1 : 0;
    for (std::size_t i = 0; i < size; ++i) tx[i] = pattern(from, r, i);
    std::memset(rx.data(), 0, size);
    CHECK(fi_trecv(ep, rx.data(), size, nullptr, peer, static_cast<std::uint64_t>(r), 0, nullptr));
    if (rank == 1) {  // ping, then the send's and the pong's completions
      CHECK(fi_tsend(ep, tx.data(), size, nullptr, peer, static_cast<std::uint64_t>(r), nullptr));
      w.complete(2);
    } else {  // the ping, then the pong and its completion
      w.complete(1);
      if (r == 0) {
        late_wakeups = w.wakeups;
        late_sleeps = sleeps_so_far() - sleeps0;
      }
      CHECK(fi_tsend(ep, tx.data(), size, nullptr, peer, static_cast<std::uint64_t>(r), nullptr));
      w.complete(1);
    }
    for (std::size_t i = 0; i < size; ++i)
      if (rx[i] != pattern(1 - from, r, i)) {
        std::fprintf(stderr, "rank %d: round %d (%zu B): byte %zu is %u, not %u\n", rank, r, size,
                     i, rx[i], pattern(1 - from, r, i));
        std::_Exit(4);
      }
  }
  const long sleeps = sleeps_so_far() - sleeps0 - (rank == 1 ? 1 : 0);  // minus the usleep
  std::printf(
      "rank %d (%s): %d round trips byte-exact, %ld wake-ups and %ld sleeps (%ld and %ld "
      "while the peer slept)\n",
      rank,
      waitset ? "fi_wait on a wait set"
      : rank  ? "epoll on FI_GETWAIT"
              : "poll on FI_GETWAIT",
      kRounds, w.wakeups, sleeps, late_wakeups, late_sleeps);
  std::fflush(stdout);
  int rc = 0;
  if (rank == 0 && std::max(late_wakeups, late_sleeps) > kLateWakeupsMax) {
    std::fprintf(stderr,
                 "rank 0: %ld wake-ups, %ld sleeps while the peer slept, at most %ld "
                 "expected\n",
                 late_wakeups, late_sleeps, kLateWakeupsMax);
    rc = 5;
  }
  if (std::max(w.wakeups, sleeps) > kWakeupsPerRoundMax * kRounds) {
    std::fprintf(stderr,
                 "rank %d: %ld wake-ups, %ld sleeps, at most %ld expected: the waits did "
                 "not sleep\n",
                 rank, w.wakeups, sleeps, kWakeupsPerRoundMax * kRounds);
    rc = 5;
  }
  if (cntr && fi_cntr_read(cntr) != 2u * kRounds) {
    std::fprintf(stderr, "rank %d: counter %llu, %d expected\n", rank,
                 static_cast<unsigned long long>(fi_cntr_read(cntr)), 2 * kRounds);
    rc = 6;
  }
  // Both done before either closes (the peer may still need our ACKs).
  char done = 1;
  if (write(sock, &done, 1) != 1 || recv(sock, &done, 1, MSG_WAITALL) != 1) fail("final sync");
  fi_close(&ep->fid);
  if (cntr) fi_close(&cntr->fid);
  fi_close(&w.cq->fid);
  if (w.ws) fi_close(&w.ws->fid);
  if (w.epfd >= 0) close(w.epfd);
  fi_close(&av->fid);
  fi_close(&dom->fid);
  fi_close(&w.fab->fid);
  fi_freeinfo(info);
  fi_freeinfo(h);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const bool waitset = argc > 1 && std::strcmp(argv[1], "waitset") == 0;
  if (argc > 1 && !waitset && std::strcmp(argv[1], "fd") != 0) {
    std::fprintf(stderr, "usage: %s fd|waitset\n", argv[0]);
    return 1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    std::_Exit(run(1, sv[1], waitset));
  }
  close(sv[1]);
  const int rc0 = run(0, sv[0], waitset);
  close(sv[0]);
  if (rc0 != 0) kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  const int rc1 = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (rc1 != 0) std::fprintf(stderr, "rank 1 exited with %d\n", rc1);
  return rc0 ? rc0 : rc1;
}
