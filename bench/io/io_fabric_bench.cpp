// bench/io/io_fabric_bench.cpp — the fabric daemon's baselines and probes for run-io-bench:
//   io_fabric_bench relay NAME          a bare relay that speaks the daemon's attach protocol on
//                                       "weft/fabric/NAME" for two HCAs (LIDs 1 and 2) and copies
//                                       each record from one process's ring to the other's as it
//                                       is, nothing else (no fabric, no SM). `weft perf --local
//                                       --fabric NAME` then runs sender, relay and receiver as
//                                       three processes over the same rings as through the daemon.
//                                       It does not offer zero copy (no kAttachZeroCopyTx), so
//                                       every record is a copied packet (kWire): each payload is
//                                       copied three times, once by each process.
//                                       Spins 50 us when idle, then blocks; exits on
//                                       SIGTERM/SIGINT.
//   io_fabric_bench idle FABRIC N SECS PID
//                                       attaches N processes to FABRIC (each with its Driver on
//                                       its own thread, idle), then measures the CPU time of
//                                       process PID (the daemon) over SECS seconds; prints JSON.
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/io/clock.hpp"
#include "src/io/fabric_attach.hpp"
#include "src/io/shm/ring.hpp"
#include "src/io/shm/shm_medium.hpp"

namespace {

using namespace weft;
namespace shm = weft::io::shm;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

constexpr std::size_t kRingBytes = std::size_t{2} << 20;  // as the daemon's default

struct Side {
  int sock = -1, memfd = -1, rx_bell = -1, tx_bell = -1;
  void* base = nullptr;
  shm::RingConsumer rx;  // the process's packets
  shm::RingProducer tx;  // toward the process
};

bool attach_side(int listen_fd, Side& s, std::uint32_t hca) {
  s.sock = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (s.sock < 0) return false;
  io::AttachRequest req;
  int none[3];
  if (io::sock::recv_with_fds(s.sock, &req, sizeof req, none, 5'000'000'000) != 0 ||
      req.magic != io::kAttachMagic)
    return false;
  s.memfd = memfd_create("weft-relay", MFD_CLOEXEC);
  s.rx_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s.tx_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s.memfd < 0 || s.rx_bell < 0 || s.tx_bell < 0 || !shm::ShmMedium::format(s.memfd, kRingBytes))
    return false;
  io::AttachReply rep;
  rep.hca = hca;
  rep.lid = static_cast<std::uint16_t>(hca + 1);
  rep.ring_bytes = kRingBytes;
  rep.node_guid = 0x1000 + hca;
  const int fds[3] = {s.memfd, s.rx_bell, s.tx_bell};
  if (!io::sock::send_with_fds(s.sock, &rep, sizeof rep, fds, 3)) return false;
  const std::size_t bytes = shm::segment_bytes(kRingBytes);
  s.base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s.memfd, 0);
  if (s.base == MAP_FAILED) return false;
  auto* b = static_cast<std::uint8_t*>(s.base);
  auto* rings = reinterpret_cast<shm::RingShared*>(b + shm::kRingSharedOffset);  // side A
  s.tx = shm::RingProducer(&rings[0], b + shm::kSegmentHeaderBytes, kRingBytes);
  s.rx = shm::RingConsumer(&rings[1], b + shm::kSegmentHeaderBytes + kRingBytes, kRingBytes);
  return true;
}

// Copies records from `from` to `to` as they are; returns how many.
std::size_t forward(Side& from, Side& to) {
  std::size_t n = 0;
  while (const shm::RecordHeader* h = from.rx.peek()) {
    if (!to.tx.can_reserve(h->bytes)) break;
    std::uint8_t* p = to.tx.reserve(h->bytes);
    std::memcpy(p, shm::RingConsumer::body(h), h->bytes);
    // The batch-end mark is the producer's own (publish sets it on its batch's last record):
    // this side's publish marks the batches it forwards.
    to.tx.commit(h->bytes, h->kind, static_cast<std::uint16_t>(h->flags & ~shm::kFlagBatchEnd));
    from.rx.pop();
    ++n;
  }
  if (n) {
    from.rx.release();
    if (to.tx.publish()) {
      const std::uint64_t one = 1;
      [[maybe_unused]] auto r = write(to.tx_bell, &one, sizeof one);
    }
  }
  return n;
}

int relay(const std::string& name) {
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  const int l = io::fabric_proto::listen_abstract("weft/fabric/" + name);
  if (l < 0) {
    std::perror("relay: listen");
    return 1;
  }
  std::printf("relay %s up\n", name.c_str());
  std::fflush(stdout);
  for (;;) {  // one pair of processes after another
    Side a, b;
    if (!io::sock::wait_readable(l, 100'000'000)) {
      if (g_stop) break;
      continue;
    }
    if (!attach_side(l, a, 0) || !attach_side(l, b, 1)) return 1;
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int fd : {a.rx_bell, b.rx_bell, a.sock, b.sock}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    // The same idle policy as the daemon's Driver (src/io/driver.hpp, DriverConfig defaults,
    // with the daemon's media: its clients' ShmMedia and the control medium, which cannot tell):
    // heartbeats on both rings it produces (ShmMedium::beat); while idle, polling without
    // yielding while a side runs on another CPU, else a sched_yield() once per 4 us of idling;
    // blocking after 50 us of idling.
    constexpr std::uint64_t kSpinNs = 50'000, kPeerCheckNs = 2'000, kPeerStallNs = 20'000,
                            kYieldNs = 4'000;
    std::uint64_t last_work = io::monotonic_ns(), last_check = last_work, last_yield = 0, beat = 0;
    bool gone = false;
    while (!g_stop && !gone) {
      const std::uint64_t now = io::monotonic_ns();
      if (now != beat) {
        beat = now;
        const auto cpu = static_cast<std::uint32_t>(sched_getcpu());
        a.tx.beat(now, cpu);
        b.tx.beat(now, cpu);
      }
      if (forward(a, b) + forward(b, a)) {
        last_work = last_check = now;
        continue;
      }
      if (now < last_work + kSpinNs) {
        if (now < last_check + kPeerCheckNs) {
          __builtin_ia32_pause();
          continue;
        }
        last_check = now;
        const std::uint64_t seen_after = now - last_work < kPeerStallNs ? 0 : now - kPeerStallNs;
        const auto cpu = static_cast<std::uint32_t>(sched_getcpu());
        const auto running = [&](const Side& s) {
          return s.rx.producer_cpu() != cpu && s.rx.producer_beat_ns() >= seen_after;
        };
        if (!running(a) && !running(b) && now >= std::max(last_work, last_yield) + kYieldNs) {
          last_yield = now;
          sched_yield();
        }
        continue;
      }
      const bool sleep_a = a.rx.prepare_sleep();
      const bool sleep_b = sleep_a && b.rx.prepare_sleep();
      if (sleep_a && sleep_b) {
        epoll_event evs[4];
        const int n = epoll_wait(ep, evs, 4, 100);
        for (int k = 0; k < n; ++k) {
          if (evs[k].data.fd == a.sock || evs[k].data.fd == b.sock) {
            char c;
            if (recv(evs[k].data.fd, &c, 1, MSG_DONTWAIT) <= 0) gone = true;
          }
        }
      }
      if (sleep_a) a.rx.finish_sleep();
      if (sleep_b) b.rx.finish_sleep();
      for (int fd : {a.rx_bell, b.rx_bell}) {
        std::uint64_t v;
        [[maybe_unused]] auto r = read(fd, &v, sizeof v);
      }
      last_work = io::monotonic_ns();
    }
    close(ep);
    for (Side* s : {&a, &b}) {
      munmap(s->base, shm::segment_bytes(kRingBytes));
      for (int fd : {s->sock, s->memfd, s->rx_bell, s->tx_bell}) close(fd);
    }
  }
  close(l);
  return 0;
}

// utime + stime of `pid` in clock ticks.
long long cpu_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close_paren = s.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream in(s.substr(close_paren + 2));
  std::string field;
  long long ut = 0, st = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) ut = std::stoll(field);
    if (i == 15) st = std::stoll(field);
  }
  return ut + st;
}

int idle(const std::string& fabric, int n, double secs, pid_t daemon) {
  int ready[2], done[2];
  if (pipe(ready) || pipe(done)) return 1;
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t k = fork();
    if (k == 0) {
      close(done[1]);
      io::FabricAttachOptions o;
      auto a = io::FabricAttach::connect(fabric, o);
      char c = a ? 1 : 0;
      if (a) (*a)->driver().start();  // the Driver thread: spins 50 us, then blocks
      [[maybe_unused]] auto w = write(ready[1], &c, 1);
      [[maybe_unused]] auto r = read(done[0], &c, 1);  // until the parent closes it
      _exit(a ? 0 : 1);
    }
    kids.push_back(k);
  }
  close(done[0]);
  int attached = 0;
  for (int i = 0; i < n; ++i) {
    char c = 0;
    if (read(ready[0], &c, 1) == 1 && c) ++attached;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let everything settle
  const long long t0 = cpu_ticks(daemon);
  const std::uint64_t w0 = io::monotonic_ns();
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  const long long t1 = cpu_ticks(daemon);
  const double wall = static_cast<double>(io::monotonic_ns() - w0) * 1e-9;
  close(done[1]);
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::printf(
      "{\"probe\":\"idle\",\"clients\":%d,\"attached\":%d,\"seconds\":%.2f,"
      "\"daemon_cpu_pct\":%.3f}\n",
      n, attached, wall, static_cast<double>(t1 - t0) / hz / wall * 100.0);
  return attached == n && t0 >= 0 && t1 >= 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "relay") == 0) return relay(argv[2]);
  if (argc == 6 && std::strcmp(argv[1], "idle") == 0)
    return idle(argv[2], std::atoi(argv[3]), std::atof(argv[4]),
                static_cast<pid_t>(std::atoi(argv[5])));
  std::fprintf(stderr, "usage: io_fabric_bench relay NAME | idle FABRIC N SECS DAEMON_PID\n");
  return 2;
}
