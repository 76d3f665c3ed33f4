// bench/dpdk/dpdk_baseline.cpp — the bare DPDK loops bench/dpdk/run-dpdk-bench compares Weft's
// DPDK medium with: two processes (a fork) joined by net_memif in copy mode (the vdev `weft perf
// --medium dpdk` uses: memif_ring_args()), with the EAL arguments of src/io/dpdk (eal_init).
// An optional last argument A,B pins the server to CPU A and the client to CPU B (as weft perf
// --cpus A,B does).
//   dpdk_baseline bw FRAMES FRAME_BYTES  the client sends FRAMES frames of FRAME_BYTES (each
//                                        written into its mbuf from a template: the one copy a
//                                        sender makes), the server counts them; prints the
//                                        server's {"bw_avg_gbps":..,"mpps":..} (frame bytes)
//   dpdk_baseline bwcrc FRAMES FRAME_BYTES  the same with the RoCEv2 ICRC in software on both
//                                        sides, as a RoCE stack without a NIC must: the client
//                                        computes it over each frame (IP header to the end, less
//                                        the last 4 bytes, where it goes: wire::icrc_roce_v2, the
//                                        function Weft's medium uses), the server checks it; the
//                                        server's JSON adds "crc_mismatches" (must be 0). The
//                                        floor for software RoCE: what bw does, plus the ICRC.
//   ... zc                               (a last argument, bw, bwcrc and lat) memif's zero copy:
//                                        the receiving process (the server; the echo of lat) is
//                                        memif's zero-copy client, as with weft perf
//                                        --dpdk-memif-zero-copy
//   dpdk_baseline lat ITERS FRAME_BYTES  ping-pong of one frame, both sides polling without a
//                                        pause; prints {"rtt_median_us":..,"half_rtt_median_us":..}
//   dpdk_baseline line ITERS             no DPDK: one cache line there and back between the two
//                                        processes (the same CPUs); prints {"rtt_median_ns":..}.
//                                        What a memif hop costs is mostly such transfers (ring
//                                        index, descriptor, buffer), and on these VMs their cost
//                                        is bimodal: ~550 ns round trip, or ~150 ns when the host
//                                        runs the two vCPUs close together. The script measures it
//                                        next to each latency pair to say which placement it had.
// The loops poll without sleeping for the whole run (seconds): a benchmark, not a service. They
// look at the clock (their idle bounds) only every kClockEveryPolls polls: a clock read (~100 ns
// here) in every poll would delay noticing an arrival, and the bare loop is the floor.
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/io/dpdk/dpdk_medium.hpp"
#include "src/wire/roce.hpp"

namespace {

constexpr std::uint16_t kBurst = 32;
constexpr unsigned kClockEveryPolls = 256;

std::uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dpdk_baseline: %s\n", what.c_str());
  weft::io::dpdk::eal_cleanup();  // no run-time directory left behind
  std::exit(1);
}

struct Port {
  std::uint16_t id = 0;
  std::string name;
  rte_mempool* pool = nullptr;
};

Port open_port(const std::string& vdev, int go_fd) {
  std::string err;
  if (!weft::io::dpdk::eal_init({}, &err)) die(err);
  if (rte_dev_probe(vdev.c_str()) < 0) die("cannot probe " + vdev);
  Port p;
  p.name = vdev.substr(0, vdev.find(','));
  if (rte_eth_dev_get_port_by_name(p.name.c_str(), &p.id) != 0) die("no port " + p.name);
  rte_eth_conf conf{};
  if (rte_eth_dev_configure(p.id, 1, 1, &conf) != 0) die("configure");
  p.pool = rte_pktmbuf_pool_create("bare", 4095, 64, 0, RTE_PKTMBUF_HEADROOM + 8192,
                                   static_cast<int>(SOCKET_ID_ANY));
  if (!p.pool) die("pool");
  if (rte_eth_rx_queue_setup(p.id, 0, 512, SOCKET_ID_ANY, nullptr, p.pool) != 0) die("rxq");
  if (rte_eth_tx_queue_setup(p.id, 0, 512, SOCKET_ID_ANY, nullptr) != 0) die("txq");
  if (rte_eth_dev_start(p.id) != 0) die("start");
  if (go_fd >= 0 && write(go_fd, "g", 1) != 1) die("pipe");  // the server listens: client, go
  const std::uint64_t until = now_ns() + 10'000'000'000u;
  for (;;) {
    rte_eth_link l{};
    if (rte_eth_link_get_nowait(p.id, &l) == 0 && l.link_status == RTE_ETH_LINK_UP) break;
    if (now_ns() > until) die("link down");
    usleep(1000);
  }
  return p;
}

void close_port(Port& p) {
  // The peer's disconnect may be running on EAL's interrupt thread, freeing the memif regions
  // rte_eth_dev_stop frees too: wait for it first, as src/io/dpdk does.
  if (!weft::io::dpdk::interrupt_thread_barrier())
    std::fprintf(stderr, "dpdk_baseline: EAL's interrupt thread did not come round; stopping\n");
  rte_eth_dev_stop(p.id);
  rte_eth_dev_close(p.id);
  // Removed, as DpdkMedium removes its port; eal_cleanup() then holds the interrupt thread for
  // good before rte_eal_cleanup: each unregistering (the barrier's, the port's, the cleanup's own)
  // wakes that thread to walk its sources again, some of them in EAL memory, and a walk still
  // under way when rte_eal_cleanup unmapped that memory faulted (SIGSEGV in rte_intr_fd_get on
  // the interrupt thread: 4 of 70 runs with the first barrier alone; src/io/dpdk/README.md).
  rte_eal_hotplug_remove("vdev", p.name.c_str());
  weft::io::dpdk::eal_cleanup();
}

// The ICRC of a frame of `bytes` at f (its last 4 bytes excluded: where it goes).
std::uint32_t frame_icrc(const std::uint8_t* f, std::size_t bytes) {
  return weft::wire::icrc_roce_v2({f + weft::wire::kEthHeaderBytes,
                                   bytes - weft::wire::kEthHeaderBytes - weft::wire::kIcrcBytes});
}

// `zc`: memif's zero copy, as `weft perf --dpdk-memif-zero-copy` sets it up: the receiving
// process (our server) is memif's zero-copy client, the sending one the memif server.
int run(bool server, bool bw, bool crc, bool zc, std::uint64_t count, std::size_t bytes,
        const std::string& sock, int go_fd) {
  const bool memif_server = server != zc;
  Port p =
      open_port(std::string("net_memif0,role=") + (memif_server ? "server" : "client") +
                    ",socket=" + sock + ",socket-abstract=yes" + weft::io::dpdk::memif_ring_args() +
                    (memif_server ? ""
                     : zc         ? ",zero-copy=yes"
                                  : ""),
                go_fd);
  std::vector<std::uint8_t> frame(bytes, 0xA5);
  if (crc) frame[weft::wire::kEthHeaderBytes] = 0x45;  // IPv4: the ICRC masks by IP version
  rte_mbuf* m[kBurst];
  int rc = 0;
  if (bw && server) {
    std::uint64_t got = 0, t0 = 0, t1 = 0, last = now_ns(), mismatches = 0;
    while (got < count && now_ns() - last < 2'000'000'000u) {
      const std::uint16_t k = rte_eth_rx_burst(p.id, 0, m, kBurst);
      if (!k) continue;
      if (!got) t0 = now_ns();
      got += k;
      if (crc)
        for (std::uint16_t i = 0; i < k; ++i) {
          const auto* f = rte_pktmbuf_mtod(m[i], const std::uint8_t*);
          std::uint32_t want;
          std::memcpy(&want, f + bytes - weft::wire::kIcrcBytes, sizeof want);
          mismatches += m[i]->data_len != bytes || frame_icrc(f, bytes) != want;
        }
      t1 = last = now_ns();
      rte_pktmbuf_free_bulk(m, k);
    }
    const double s = t1 > t0 ? static_cast<double>(t1 - t0) / 1e9 : 1e-9;
    std::printf(
        "{\"bw_avg_gbps\":%.4f,\"mpps\":%.4f,\"frames\":%llu,\"frame_bytes\":%zu,"
        "\"crc_mismatches\":%llu}\n",
        static_cast<double>(got) * static_cast<double>(bytes) * 8 / s / 1e9,
        static_cast<double>(got) / s / 1e6, static_cast<unsigned long long>(got), bytes,
        static_cast<unsigned long long>(mismatches));
    rc = got == count && mismatches == 0 ? 0 : 1;
  } else if (bw) {
    for (std::uint64_t sent = 0; sent < count;) {
      const auto want = static_cast<std::uint16_t>(std::min<std::uint64_t>(kBurst, count - sent));
      if (rte_pktmbuf_alloc_bulk(p.pool, m, want) != 0) continue;
      for (std::uint16_t i = 0; i < want; ++i) {
        auto* f = rte_pktmbuf_mtod(m[i], std::uint8_t*);
        std::memcpy(f, frame.data(), bytes);
        if (crc) {
          const std::uint32_t c = frame_icrc(f, bytes);
          std::memcpy(f + bytes - weft::wire::kIcrcBytes, &c, sizeof c);
        }
        m[i]->data_len = static_cast<std::uint16_t>(bytes);
        m[i]->pkt_len = static_cast<std::uint32_t>(bytes);
      }
      std::uint16_t done = 0;
      while (done < want) done += rte_eth_tx_burst(p.id, 0, m + done, want - done);
      sent += want;
    }
    usleep(200'000);    // let the server drain before the port goes
  } else if (server) {  // echo
    std::uint64_t echoed = 0, last = now_ns();
    for (unsigned polls = 0; echoed < count;) {
      const std::uint16_t k = rte_eth_rx_burst(p.id, 0, m, kBurst);
      if (!k) {
        if (++polls % kClockEveryPolls == 0 && now_ns() - last >= 2'000'000'000u) break;
        continue;
      }
      std::uint16_t done = 0;
      while (done < k) done += rte_eth_tx_burst(p.id, 0, m + done, k - done);
      echoed += k;
      last = now_ns();
    }
  } else {  // ping
    std::vector<double> rtt;
    rtt.reserve(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      rte_mbuf* b = rte_pktmbuf_alloc(p.pool);
      if (!b) die("alloc");
      std::memcpy(rte_pktmbuf_mtod(b, void*), frame.data(), bytes);
      b->data_len = static_cast<std::uint16_t>(bytes);
      b->pkt_len = static_cast<std::uint32_t>(bytes);
      const std::uint64_t t0 = now_ns();
      while (rte_eth_tx_burst(p.id, 0, &b, 1) != 1) {
      }
      std::uint16_t k = 0;
      const std::uint64_t until = t0 + 1'000'000'000u;
      for (unsigned polls = 0; (k = rte_eth_rx_burst(p.id, 0, m, kBurst)) == 0;)
        if (++polls % kClockEveryPolls == 0 && now_ns() >= until) break;
      if (!k) die("no echo within 1 s");
      rtt.push_back(static_cast<double>(now_ns() - t0) / 1000.0);
      rte_pktmbuf_free_bulk(m, k);
    }
    std::sort(rtt.begin(), rtt.end());
    const double med = rtt[rtt.size() / 2];
    std::printf("{\"rtt_median_us\":%.4f,\"half_rtt_median_us\":%.4f,\"iterations\":%llu}\n", med,
                med / 2, static_cast<unsigned long long>(count));
  }
  close_port(p);
  return rc;
}

void pin(int c) {
  if (c < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(c, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// One cache line there and back between two processes on cpu[0] (the timer) and cpu[1]: each
// side polls its own line and answers on the other's (two lines, so neither polls a line the
// other writes to answer).
int line_pingpong(std::uint32_t iters, const int cpu[2]) {
  auto* shared = static_cast<std::atomic<std::uint32_t>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) return 1;
  std::atomic<std::uint32_t>& ping = shared[0];
  std::atomic<std::uint32_t>& pong = shared[64 / sizeof(std::uint32_t)];
  const pid_t child = fork();
  if (child == 0) {
    pin(cpu[1]);
    for (std::uint32_t i = 1; i <= iters; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
    _exit(0);
  }
  pin(cpu[0]);
  std::vector<double> rtt;
  rtt.reserve(iters);
  for (std::uint32_t i = 1; i <= iters; ++i) {
    const std::uint64_t t0 = now_ns();
    ping.store(i, std::memory_order_release);
    while (pong.load(std::memory_order_acquire) != i) {
    }
    rtt.push_back(static_cast<double>(now_ns() - t0));
  }
  int st = 0;
  waitpid(child, &st, 0);
  munmap(shared, 4096);
  std::sort(rtt.begin(), rtt.end());
  std::printf("{\"rtt_median_ns\":%.1f,\"iterations\":%u}\n", rtt[rtt.size() / 2], iters);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int cpu[2] = {-1, -1};
  if (argc >= 3 && !std::strcmp(argv[1], "line")) {
    const auto iters = static_cast<std::uint32_t>(std::strtoul(argv[2], nullptr, 10));
    if (!iters || argc > 4 || (argc == 4 && std::sscanf(argv[3], "%d,%d", &cpu[0], &cpu[1]) != 2))
      return 2;
    return line_pingpong(iters, cpu);
  }
  // A last argument `zc`: memif's zero copy (see run).
  const bool zc = argc >= 5 && !std::strcmp(argv[argc - 1], "zc");
  if (zc) --argc;
  if ((argc != 4 && argc != 5) || (std::strcmp(argv[1], "bw") && std::strcmp(argv[1], "bwcrc") &&
                                   std::strcmp(argv[1], "lat"))) {
    std::fprintf(stderr,
                 "usage: dpdk_baseline bw|bwcrc FRAMES FRAME_BYTES [A,B] [zc] | lat ITERS "
                 "FRAME_BYTES [A,B] [zc] | line ITERS [A,B]\n");
    return 2;
  }
  const bool crc = !std::strcmp(argv[1], "bwcrc");
  const bool bw = crc || !std::strcmp(argv[1], "bw");
  const std::uint64_t count = std::strtoull(argv[2], nullptr, 10);
  const std::size_t bytes = std::strtoull(argv[3], nullptr, 10);
  if (!count || bytes < 60 || bytes > 8192) return 2;
  const std::string sock = "weft-dpdk-baseline-" + std::to_string(getpid());
  int go[2];
  if (pipe(go) != 0) return 1;
  // The bandwidth figure comes from the server (the receiver), the latency from the client.
  if (argc == 5 && std::sscanf(argv[4], "%d,%d", &cpu[0], &cpu[1]) != 2) return 2;
  const pid_t child = fork();
  if (child == 0) {
    pin(cpu[1]);  // the client: its EAL starts after the memif server's port listens
    char c;
    if (!zc && read(go[0], &c, 1) != 1) _exit(1);
    std::fflush(stdout);
    const int r = run(false, bw, crc, zc, count, bytes, sock, zc ? go[1] : -1);
    std::fflush(stdout);
    _exit(r);
  }
  pin(cpu[0]);
  char c;
  if (zc && read(go[0], &c, 1) != 1) return 1;
  const int r = run(true, bw, crc, zc, count, bytes, sock, zc ? -1 : go[1]);
  int st = 0;
  waitpid(child, &st, 0);
  return r != 0 ? r : (WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}
