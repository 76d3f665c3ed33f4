// bench/ofi/ring_pingpong.cpp — the floor under `fi_pingpong -p weft`: two processes ping-pong
// one record of SIZE bytes over the same shared-memory rings the weft provider's shm medium uses
// (src/io/shm/ring.hpp, one SPSC ring per direction in a memfd segment), with no provider, no
// engine and no packet headers. bench/ofi/run-ofi-bench prints it next to weft's and shm's
// one-way times, so "what the provider adds" is weft minus this.
//
// Usage: ofi_ring_pingpong [iterations] [size] [cpu_a] [cpu_b]
// Prints the one-way time in microseconds (round trip / 2, wall clock, median of 5 batches).
// Both sides spin (the provider's fi_cq_read loop spins too); pin them to two vCPUs, as the
// script does, or the numbers measure the scheduler.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "src/io/shm/ring.hpp"

namespace {

namespace shm = weft::io::shm;

constexpr std::size_t kRingBytes = std::size_t{1} << 20;
constexpr int kBatches = 5;
constexpr std::size_t kSizeMax = 4096;

double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

struct Segment {
  shm::RingShared rings[2];
};

// One side: sends `size` bytes, waits for the answer, `n` times (the server answers instead).
void run(shm::RingProducer& tx, shm::RingConsumer& rx, std::size_t size, long n, bool client,
         std::uint8_t* scratch) {
  auto send = [&] {
    std::uint8_t* p;
    while (!(p = tx.reserve(size))) {
    }
    std::memcpy(p, scratch, size);
    tx.commit(size, shm::RecordKind::kUser);
    tx.publish();
  };
  auto recv = [&] {
    const shm::RecordHeader* h;
    while (!(h = rx.peek())) {
    }
    std::memcpy(scratch, shm::RingConsumer::body(h), h->bytes);
    rx.pop();
    rx.release();
  };
  for (long i = 0; i < n; ++i) {
    if (client) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long iters = argc > 1 ? std::atol(argv[1]) : 100000;
  const std::size_t size = std::min<std::size_t>(argc > 2 ? std::atol(argv[2]) : 8, kSizeMax);
  const int cpu_a = argc > 3 ? std::atoi(argv[3]) : -1;
  const int cpu_b = argc > 4 ? std::atoi(argv[4]) : -1;
  const std::size_t bytes = 4096 + 2 * kRingBytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* seg = new (mem) Segment{};
  auto* data0 = static_cast<std::uint8_t*>(mem) + 4096;
  auto* data1 = data0 + kRingBytes;
  const long per_batch = iters / kBatches + 1;
  const pid_t child = fork();
  if (child == 0) {
    pin(cpu_b);
    shm::RingProducer tx(&seg->rings[1], data1, kRingBytes);
    shm::RingConsumer rx(&seg->rings[0], data0, kRingBytes);
    std::vector<std::uint8_t> scratch(kSizeMax);
    run(tx, rx, size, per_batch * (kBatches + 1), false, scratch.data());
    _exit(0);
  }
  pin(cpu_a);
  shm::RingProducer tx(&seg->rings[0], data0, kRingBytes);
  shm::RingConsumer rx(&seg->rings[1], data1, kRingBytes);
  std::vector<std::uint8_t> scratch(kSizeMax, 0x5A);
  run(tx, rx, size, per_batch, true, scratch.data());  // warm-up
  std::vector<double> one_way;
  for (int b = 0; b < kBatches; ++b) {
    const double t0 = now_us();
    run(tx, rx, size, per_batch, true, scratch.data());
    one_way.push_back((now_us() - t0) / per_batch / 2);
  }
  waitpid(child, nullptr, 0);
  munmap(mem, bytes);
  std::sort(one_way.begin(), one_way.end());
  std::printf("%.3f\n", one_way[kBatches / 2]);
  return 0;
}
