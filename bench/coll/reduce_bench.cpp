// bench/coll/reduce_bench.cpp — the reduction kernels in GB/s of destination bytes, next to
// memcpy of the same bytes in the same binary (the baseline: a reduction reads two streams and
// writes one, memcpy reads one and writes one). 256 KiB fits L2, 16 MiB does not. Compare the
// ratio kernel/memcpy, not absolute numbers (shared, noisy machines).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "src/coll/reduce.hpp"

namespace {

using namespace weft::coll;

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), bytes);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

template <DataType kType, RedOp kOp>
void BM_Reduce(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t n = bytes / elem_bytes(kType);
  // 0x3c00 / 0x3f80 are 1.0 in f16 / bf16; the other types see small values.
  std::vector<std::uint8_t> a(bytes, 0), b(bytes, 0);
  for (std::size_t i = 0; i + 1 < bytes; i += 2) {
    a[i + 1] = b[i + 1] = kType == DataType::kBf16 ? 0x3f : 0x3c;
  }
  for (auto _ : state) {
    reduce(kType, kOp, a.data(), b.data(), n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

constexpr std::int64_t kL2 = 256 * 1024, kDram = 16 * 1024 * 1024;

BENCHMARK(BM_Memcpy)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kF32, RedOp::kSum>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kF32, RedOp::kMax>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kF64, RedOp::kSum>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kF16, RedOp::kSum>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kBf16, RedOp::kSum>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kI32, RedOp::kSum>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kI64, RedOp::kProd>)->Arg(kL2)->Arg(kDram);
BENCHMARK(BM_Reduce<DataType::kU8, RedOp::kMin>)->Arg(kL2)->Arg(kDram);

}  // namespace

BENCHMARK_MAIN();
