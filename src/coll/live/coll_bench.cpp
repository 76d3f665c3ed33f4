// coll/live/coll_bench.cpp — see coll_bench.hpp.
#include "src/coll/live/coll_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "src/coll/communicator.hpp"
#include "src/coll/model.hpp"
#include "src/coll/pattern.hpp"
#include "src/coll/reduce.hpp"
#include "src/io/clock.hpp"

namespace weft::coll::live {
namespace {

constexpr std::uint8_t kPoison = 0xA5;

struct Shape {
  std::size_t count = 0;  // nccl-tests' count column
  std::size_t arg_count = 0, send_elems = 0, recv_elems = 0;
};

// nccl-tests' size semantics (as emu/collsim): the whole buffer for all-reduce, broadcast and
// reduce; size x per-rank count for reduce-scatter, all-gather and all-to-all.
Shape shape_of(CollKind kind, std::size_t bytes, std::size_t es, std::size_t n) {
  Shape s;
  s.count = s.arg_count = s.send_elems = s.recv_elems = bytes / es;
  switch (kind) {
    case CollKind::kReduceScatter:
      s.arg_count = s.count / n;
      s.send_elems = s.count = s.arg_count * n;
      s.recv_elems = s.arg_count;
      break;
    case CollKind::kAllGather:
      s.arg_count = s.count / n;
      s.send_elems = s.arg_count;
      s.recv_elems = s.count = s.arg_count * n;
      break;
    case CollKind::kAllToAll:
      s.arg_count = s.count / n;
      s.send_elems = s.recv_elems = s.count = s.arg_count * n;
      break;
    default:
      break;
  }
  return s;
}

// This rank's expected output; empty when it has none to check (reduce off the root).
// The process's CPU time and run-queue wait so far (/proc/self/schedstat; zeros without it).
struct Sched {
  double run_ns = 0, wait_ns = 0;
};
Sched sched_now() {
  Sched s;
  if (std::FILE* f = std::fopen("/proc/self/schedstat", "r")) {
    unsigned long long run = 0, wait = 0;
    if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) {
      s.run_ns = static_cast<double>(run);
      s.wait_ns = static_cast<double>(wait);
    }
    std::fclose(f);
  }
  return s;
}

std::vector<std::uint8_t> expected(const BenchOptions& o, const Shape& s, int rank, int n) {
  const std::size_t es = elem_bytes(o.dtype), blk = s.arg_count * es;
  std::vector<std::uint8_t> want(s.recv_elems * es);
  auto fold = [&](std::size_t first, std::size_t cnt) {
    std::vector<std::uint8_t> tmp(cnt * es);
    fill_pattern(o.dtype, o.op, 0, want.data(), cnt, first);
    for (int j = 1; j < n; ++j) {
      fill_pattern(o.dtype, o.op, j, tmp.data(), cnt, first);
      reduce(o.dtype, o.op, want.data(), tmp.data(), cnt);
    }
    if (o.op == RedOp::kAvg) finish_avg(o.dtype, want.data(), cnt, n);
  };
  switch (o.kind) {
    case CollKind::kAllReduce:
      fold(0, s.arg_count);
      break;
    case CollKind::kReduce:
      if (rank != o.root) return {};
      fold(0, s.arg_count);
      break;
    case CollKind::kReduceScatter:
      fold(static_cast<std::size_t>(rank) * s.arg_count, s.arg_count);
      break;
    case CollKind::kAllGather:
      for (int j = 0; j < n; ++j)
        fill_pattern(o.dtype, o.op, j, want.data() + static_cast<std::size_t>(j) * blk,
                     s.arg_count);
      break;
    case CollKind::kBroadcast:
      fill_pattern(o.dtype, o.op, o.root, want.data(), s.arg_count);
      break;
    case CollKind::kAllToAll:
      for (int j = 0; j < n; ++j)
        fill_pattern(o.dtype, o.op, j, want.data() + static_cast<std::size_t>(j) * blk, s.arg_count,
                     static_cast<std::size_t>(rank) * s.arg_count);
      break;
    case CollKind::kSendRecv:
      break;
  }
  return want;
}

}  // namespace

std::optional<std::string> run_bench(LiveMesh& mesh, const BenchOptions& o,
                                     const std::function<void(const BenchRow&)>& on_row) {
  const int n = mesh.size(), rank = mesh.rank();
  const std::size_t es = elem_bytes(o.dtype), un = static_cast<std::size_t>(n);
  const Topology topo{.ranks_per_node = o.ranks_per_node > 0 ? o.ranks_per_node : n};
  Communicator comm(mesh.transport(), topo);
  std::string error;
  auto fail = [&](const std::string& what) { return "rank " + std::to_string(rank) + ": " + what; };
  for (double sz = static_cast<double>(o.min_bytes);; sz = sz > 0 ? sz * o.factor : 1) {
    const Shape s = shape_of(o.kind, static_cast<std::size_t>(sz), es, un);
    std::vector<std::uint8_t> send(std::max<std::size_t>(s.send_elems * es, 1)),
        recv(std::max<std::size_t>(s.recv_elems * es, 1), kPoison);
    fill_pattern(o.dtype, o.op, rank, send.data(), s.send_elems);
    const CollArgs a{.kind = o.kind,
                     .send = send.data(),
                     .recv = recv.data(),
                     .count = s.arg_count,
                     .dtype = o.dtype,
                     .op = o.op,
                     .root = o.root,
                     .algo = o.algo,
                     .channels = o.channels,
                     .chunk_bytes = o.chunk_bytes};
    BenchRow row;
    row.bytes = s.count * es;
    row.count = s.count;
    TimeNs t0 = 0;
    Sched s0;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      if (i == o.warmup) t0 = io::monotonic_ns(), s0 = sched_now();
      if (mesh.run(comm, a, o.timeout_ns, &error) != CollState::kDone) return fail(error);
    }
    if (o.iters <= 0) s0 = sched_now();
    const Sched s1 = sched_now();
    const double per = o.iters > 0 ? 1e3 * o.iters : 1;
    const double mine_us =
        o.iters > 0 ? static_cast<double>(io::monotonic_ns() - t0) / 1e3 / o.iters : 0;
    row.algo = comm.algo();
    double wrong = 0;
    if (o.check) {
      std::memset(recv.data(), kPoison, recv.size());
      if (mesh.run(comm, a, o.timeout_ns, &error) != CollState::kDone) return fail(error);
      const auto want = expected(o, s, rank, n);
      if (!want.empty())
        wrong = static_cast<double>(count_wrong(recv.data(), want.data(), want.size() / es, es));
    }
    // Mean time over the ranks and total #wrong, by an all-reduce on the same mesh.
    double stats[4] = {mine_us, wrong, (s1.run_ns - s0.run_ns) / per,
                       (s1.wait_ns - s0.wait_ns) / per},
           total[4] = {0, 0, 0, 0};
    const CollArgs sum{.kind = CollKind::kAllReduce,
                       .send = stats,
                       .recv = total,
                       .count = 4,
                       .dtype = DataType::kF64,
                       .op = RedOp::kSum,
                       .algo = Algo::kRing};
    if (mesh.run(comm, sum, o.timeout_ns, &error) != CollState::kDone) return fail(error);
    row.time_us = total[0] / n;
    row.cpu_us = total[2] / n;
    row.runq_us = total[3] / n;
    if (o.check) row.wrong = static_cast<std::uint64_t>(total[1]);
    row.algbw = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
    row.busbw = row.algbw * busbw_factor(o.kind, n);
    on_row(row);
    if (sz * o.factor > static_cast<double>(o.max_bytes) * (1 + 1e-9)) break;
  }
  return std::nullopt;
}

void print_bench_header(std::FILE* out, const LiveMesh& mesh, const BenchOptions& o) {
  std::fprintf(out,
               "# %s, live: %d ranks (processes), %s, %d per node, algo %s, "
               "channels %d, chunk %zu, iters %d, warmup %d, check %d\n",
               std::string(to_string(o.kind)).c_str(), mesh.size(), mesh.describe().c_str(),
               o.ranks_per_node > 0 ? o.ranks_per_node : mesh.size(),
               std::string(to_string(o.algo)).c_str(), o.channels, o.chunk_bytes, o.iters, o.warmup,
               o.check ? 1 : 0);
  std::fprintf(out, "#%11s %12s %9s %6s %5s %10s %9s %9s %7s %-10s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "algo");
  std::fprintf(out, "#%11s %12s %9s %6s %5s %10s %9s %9s %7s %-10s\n", "(B)", "(elements)", "", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "");
  std::fflush(out);
}

void print_bench_row(std::FILE* out, const BenchOptions& o, const BenchRow& r) {
  const bool rooted = o.kind == CollKind::kBroadcast || o.kind == CollKind::kReduce;
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::fprintf(out, " %11zu %12zu %9s %6s %5d %10.2f %9.3f %9.3f %7s %-10s\n", r.bytes, r.count,
               std::string(to_string(o.dtype)).c_str(), std::string(to_string(o.op)).c_str(),
               rooted ? o.root : -1, r.time_us, r.algbw, r.busbw, wrong.c_str(),
               std::string(to_string(r.algo)).c_str());
  std::fflush(out);
}

}  // namespace weft::coll::live
