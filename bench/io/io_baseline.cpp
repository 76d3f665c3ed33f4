// bench/io/io_baseline.cpp — the baselines run-io-bench compares `weft perf` with, measured in
// the same script on the same machine:
//   io_baseline pingpong ITERS      one cache line between two processes, busy-polled (pausing,
//                                   and yielding like weft's Driver only to a peer on the
//                                   same CPU); prints the one-way time in us (median of round
//                                   trips / 2).
//   io_baseline vm_writev SIZE ITERS process_vm_writev of SIZE bytes into another process's
//                                   private buffer; prints Gb/s
//   io_baseline memcpy SIZE ITERS    memcpy of SIZE bytes between two buffers of this process
//                                   on one core (the floor issue 4 sets for transfers between
//                                   buffers from Weft's shared-memory allocator); prints Gb/s
// Pinning, like `weft perf --local --cpus A,B` (server on A, client on B): BASELINE_CPUS=A,B
// (default 0,1; "none" leaves every process to the scheduler; PINGPONG_CPUS is the old name).
// pingpong: the parent on A, the child on B. vm_writev: the writing process on A (in weft perf
// the receiver, the server on A, makes the copy), the target process on B. memcpy: on A.
// Unpinned, Linux often keeps a fork()ed pair on one CPU, and then every ping-pong step is a
// yield to the other process (~5.7 us here, not the ~0.2-0.3 us of a line moving between cores);
// and an unpinned one-process baseline may run on whichever CPU is free while weft's pinned pair
// may not, which under load is a different measurement.
// Output: one JSON object on stdout (with "pinned": whether every process got its CPU).
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The ping-pong's shared page: the line that moves, and (on another line) the CPU each side
// last waited on.
struct PingPongPage {
  alignas(64) std::atomic<std::uint64_t> line;
  alignas(64) std::atomic<int> cpu[2];
};

// One step of waiting: a pause, and every 64th step a look at where the peer waits: as weft's
// Driver does (DriverConfig::peer_check_ns), yield only when the peer last ran on this CPU (it
// cannot run while we spin); a peer on another CPU is polled for without yielding (under load a
// yield hands this CPU to other tasks for a whole slice).
void relax(std::uint32_t& n, PingPongPage* page, int self) {
  if (++n % 64 != 0) {
    __builtin_ia32_pause();
    return;
  }
  const int cpu = sched_getcpu();
  page->cpu[self].store(cpu, std::memory_order_relaxed);
  if (page->cpu[1 - self].load(std::memory_order_relaxed) == cpu) sched_yield();
}

// This process's time on the CPU and waiting for it (runnable) so far, in ms
// (/proc/self/schedstat), as a JSON fragment: under load it says how much of the run the
// scheduler gave it (weft perf prints the same with WEFT_PERF_COUNTERS=1).
std::string schedstat() {
  unsigned long long run = 0, wait = 0, slices = 0;
  if (std::FILE* f = std::fopen("/proc/self/schedstat", "r")) {
    if (std::fscanf(f, "%llu %llu %llu", &run, &wait, &slices) != 3) run = wait = 0;
    std::fclose(f);
  }
  char b[96];
  std::snprintf(b, sizeof b, "\"run_ms\":%.1f,\"runnable_wait_ms\":%.1f", run * 1e-6, wait * 1e-6);
  return b;
}

// Pins the calling process to `cpu`; false when that CPU is not available.
bool pin(int cpu) {
  if (cpu < 0) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

// The two CPUs of BASELINE_CPUS (or PINGPONG_CPUS); -1, -1 for "none". False on a bad value.
bool cpus(int& cpu_a, int& cpu_b) {
  cpu_a = 0;
  cpu_b = 1;
  const char* e = std::getenv("BASELINE_CPUS");
  if (!e) e = std::getenv("PINGPONG_CPUS");
  if (!e) return true;
  if (std::strcmp(e, "none") == 0) {
    cpu_a = cpu_b = -1;
    return true;
  }
  return std::sscanf(e, "%d,%d", &cpu_a, &cpu_b) == 2;
}

int pingpong(std::uint32_t iters) {
  int cpu_a, cpu_b;
  if (!cpus(cpu_a, cpu_b)) return 2;
  bool pinned = pin(cpu_a);
  auto* page = static_cast<PingPongPage*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* line = &page->line;
  line->store(0);
  page->cpu[0].store(-1);
  page->cpu[1].store(-1);
  const pid_t child = fork();
  if (child == 0) {
    if (cpu_b >= 0 && !pin(cpu_b)) _exit(3);
    for (std::uint64_t i = 1; i <= iters; ++i) {
      std::uint32_t n = 0;
      while (line->load(std::memory_order_acquire) != 2 * i - 1) relax(n, page, 1);
      line->store(2 * i, std::memory_order_release);
    }
    _exit(0);
  }
  std::vector<double> rtt;
  rtt.reserve(iters);
  for (std::uint64_t i = 1; i <= iters; ++i) {
    const std::uint64_t t0 = now_ns();
    line->store(2 * i - 1, std::memory_order_release);
    std::uint32_t n = 0;
    while (line->load(std::memory_order_acquire) != 2 * i) relax(n, page, 0);
    rtt.push_back(static_cast<double>(now_ns() - t0) / 2000.0);
  }
  int st = 0;
  waitpid(child, &st, 0);
  pinned = pinned && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  std::sort(rtt.begin(), rtt.end());
  std::printf(
      "{\"baseline\":\"pingpong\",\"iterations\":%u,\"pinned\":%s,\"lat_typical_us\":%.4f,"
      "\"lat_min_us\":%.4f}\n",
      iters, pinned ? "true" : "false", rtt[rtt.size() / 2], rtt.front());
  return 0;
}

int vm_writev(std::size_t size, std::uint32_t iters) {
  int cpu_a, cpu_b;
  if (!cpus(cpu_a, cpu_b)) return 2;
  bool pinned = pin(cpu_a);
  auto* dst = static_cast<std::uint8_t*>(std::aligned_alloc(4096, size));
  auto* src = static_cast<std::uint8_t*>(std::aligned_alloc(4096, size));
  std::memset(src, 1, size);
  int ready[2], done[2];
  if (pipe(ready) || pipe(done)) return 1;
  const pid_t child = fork();
  if (child == 0) {
    if (cpu_b >= 0 && !pin(cpu_b)) _exit(3);
    std::memset(dst, 0, size);  // its own private pages
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    if (read(done[0], &c, 1) != 1) _exit(1);
    _exit(dst[size - 1] == 1 ? 0 : 2);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return 1;
  iovec l{src, size}, r{dst, size};
  const std::uint64_t t0 = now_ns();
  for (std::uint32_t i = 0; i < iters; ++i)
    if (process_vm_writev(child, &l, 1, &r, 1, 0) != static_cast<ssize_t>(size)) return 1;
  const double secs = static_cast<double>(now_ns() - t0) * 1e-9;
  if (write(done[1], &c, 1) != 1) return 1;
  int st = 0;
  waitpid(child, &st, 0);
  pinned = pinned && cpu_b >= 0;
  std::printf(
      "{\"baseline\":\"vm_writev\",\"bytes\":%zu,\"iterations\":%u,\"pinned\":%s,"
      "\"bw_avg_gbps\":%.4f,%s}\n",
      size, iters, pinned ? "true" : "false", static_cast<double>(size) * iters * 8 / secs * 1e-9,
      schedstat().c_str());
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int memcpy_bw(std::size_t size, std::uint32_t iters) {
  int cpu_a, cpu_b;
  if (!cpus(cpu_a, cpu_b)) return 2;
  const bool pinned = pin(cpu_a);
  auto* dst = static_cast<std::uint8_t*>(std::aligned_alloc(4096, size));
  auto* src = static_cast<std::uint8_t*>(std::aligned_alloc(4096, size));
  std::memset(src, 1, size);
  std::memset(dst, 0, size);
  const std::uint64_t t0 = now_ns();
  for (std::uint32_t i = 0; i < iters; ++i) {
    std::memcpy(dst, src, size);
    asm volatile("" : : "r"(dst) : "memory");  // keep every copy
  }
  const double secs = static_cast<double>(now_ns() - t0) * 1e-9;
  const bool ok = dst[size - 1] == 1;
  std::printf(
      "{\"baseline\":\"memcpy\",\"bytes\":%zu,\"iterations\":%u,\"pinned\":%s,"
      "\"bw_avg_gbps\":%.4f,%s}\n",
      size, iters, pinned ? "true" : "false", static_cast<double>(size) * iters * 8 / secs * 1e-9,
      schedstat().c_str());
  std::free(dst);
  std::free(src);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "pingpong") == 0)
    return pingpong(static_cast<std::uint32_t>(std::atoi(argv[2])));
  if (argc == 4 && std::strcmp(argv[1], "vm_writev") == 0)
    return vm_writev(std::strtoull(argv[2], nullptr, 10),
                     static_cast<std::uint32_t>(std::atoi(argv[3])));
  if (argc == 4 && std::strcmp(argv[1], "memcpy") == 0)
    return memcpy_bw(std::strtoull(argv[2], nullptr, 10),
                     static_cast<std::uint32_t>(std::atoi(argv[3])));
  std::fprintf(stderr,
               "usage: io_baseline pingpong ITERS | vm_writev SIZE ITERS | memcpy SIZE ITERS\n");
  return 2;
}
