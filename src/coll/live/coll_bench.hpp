// coll/live/coll_bench.hpp — the runner behind `weft coll-bench` (live mode, nccl-tests' perf
// programs): for each size, `warmup` untimed and `iters` timed collectives back to back on a
// LiveMesh (either medium), then (check) one more on freshly poisoned output buffers whose every
// element is compared with the reference each rank rebuilds from the other ranks' inputs
// (pattern.hpp). Time is the mean per collective on each rank, averaged over the ranks (as
// nccl-tests does by default); #wrong is summed over the ranks. Both are combined with an
// all-reduce on the same mesh. tools/weft only parses arguments and prints.
// Thread-safety: single owner thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/coll/live/live_mesh.hpp"
#include "src/coll/plan.hpp"
#include "src/coll/types.hpp"

namespace weft::coll::live {

struct BenchOptions {
  CollKind kind = CollKind::kAllReduce;
  Algo algo = Algo::kAuto;
  DataType dtype = DataType::kF32;
  RedOp op = RedOp::kSum;
  int root = 0;
  int channels = 1;
  std::size_t chunk_bytes = 128 * 1024;
  std::size_t min_bytes = 8, max_bytes = 8 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  int ranks_per_node = 0;              // 0: every rank on one node
  TimeNs timeout_ns = 60'000'000'000;  // per size
};

struct BenchRow {
  std::size_t bytes = 0, count = 0;          // nccl-tests' size and count columns
  Algo algo = Algo::kAuto;                   // what ran (auto resolved)
  double time_us = 0, algbw = 0, busbw = 0;  // GB/s
  std::optional<std::uint64_t> wrong;        // with check
  // Per collective, mean over the ranks (Linux schedstat of the process, timed iterations):
  // CPU time, and time runnable but waiting for a CPU (the machine's load, not Weft). 0 where
  // /proc/self/schedstat is missing.
  double cpu_us = 0, runq_us = 0;
};

// Runs every size; calls on_row on every rank as each size finishes (rank 0 prints). Returns
// an error sentence when a collective fails (the same on every rank that sees it).
std::optional<std::string> run_bench(LiveMesh& mesh, const BenchOptions& o,
                                     const std::function<void(const BenchRow&)>& on_row);

// nccl-tests' text table.
void print_bench_header(std::FILE* out, const LiveMesh& mesh, const BenchOptions& o);
void print_bench_row(std::FILE* out, const BenchOptions& o, const BenchRow& r);

}  // namespace weft::coll::live
