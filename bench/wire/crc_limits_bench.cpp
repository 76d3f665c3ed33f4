// bench/wire/crc_limits_bench.cpp — what this CPU allows a CRC pass, measured beside the pass
// itself: the core clock (a chain of dependent 1-cycle adds), VPCLMULQDQ zmm throughput (many
// independent chains, no loads) and latency (one chain), the load bandwidth of a plain read loop
// over 4 KiB (L1) and 64 KiB (L2 on a 48 KiB-L1 core), memcpy of 64 KiB (issue 2's baseline,
// page-aligned as in bench/transport), and the fused ICRC+VCRC pass per 4 KiB packet and per
// 64 KiB message (16 packets of 4 KiB behind a 20-byte LRH+BTH, as the engine calls it).
// Counters: "clmul_per_ns", "cycles_per_ns", "bytes_per_ns". Read the ratios, not absolute
// figures: the machine is shared.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "src/wire/packet.hpp"

namespace weft::wire {
namespace {

constexpr std::size_t kPageBytes = 4096;
constexpr std::size_t k4KiB = 4096, k64KiB = 64 << 10;

struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::uint8_t[], FreeDeleter>;
Buffer page_buffer(std::size_t bytes) {
  auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(kPageBytes, bytes));
  std::iota(p, p + bytes, std::uint8_t{7});
  return Buffer(p);
}

#if defined(__x86_64__)
// One add per cycle on any x86 core since the P6: a dependent chain of them counts cycles.
constexpr int kAddsPerStep = 100;
void BM_CoreClock(benchmark::State& st) {
  std::uint64_t x = 0;
  for (auto _ : st) {
    for (int i = 0; i < 10; ++i) asm volatile(".rept 100\n\tadd $1, %0\n\t.endr" : "+r"(x));
  }
  benchmark::DoNotOptimize(x);
  st.counters["cycles_per_ns"] = benchmark::Counter(
      static_cast<double>(st.iterations()) * 10 * kAddsPerStep / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CoreClock);

#define WEFT_CLMUL512 __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq")))

// K independent chains of VPCLMULQDQ zmm (each a 64x64 carry-less multiply in every 128-bit lane:
// 4 per instruction), 64 steps per chain per asm block, no loads; written in assembly so that the
// chains stay in registers (the compiler spilled an array of them). K = 1 is the latency.
#define WEFT_CLMUL_STEP(i) "vpclmulqdq $0x01, %%zmm31, %%zmm" #i ", %%zmm" #i "\n\t"
#define WEFT_CLMUL_CLOBBERS                                                                     \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",      \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
      "xmm21", "xmm22", "xmm23", "xmm30", "xmm31"
#define WEFT_CLMUL_SETUP                                                                    \
  "vpbroadcastq %0, %%zmm31\n\t"                                                            \
  "vpbroadcastq %0, %%zmm0\n\tvmovdqa64 %%zmm0, %%zmm1\n\tvmovdqa64 %%zmm0, %%zmm2\n\t"     \
  "vmovdqa64 %%zmm0, %%zmm3\n\tvmovdqa64 %%zmm0, %%zmm4\n\tvmovdqa64 %%zmm0, %%zmm5\n\t"    \
  "vmovdqa64 %%zmm0, %%zmm6\n\tvmovdqa64 %%zmm0, %%zmm7\n\tvmovdqa64 %%zmm0, %%zmm8\n\t"    \
  "vmovdqa64 %%zmm0, %%zmm9\n\tvmovdqa64 %%zmm0, %%zmm10\n\tvmovdqa64 %%zmm0, %%zmm11\n\t"  \
  "vmovdqa64 %%zmm0, %%zmm12\n\tvmovdqa64 %%zmm0, %%zmm13\n\tvmovdqa64 %%zmm0, %%zmm14\n\t" \
  "vmovdqa64 %%zmm0, %%zmm15\n\tvmovdqa64 %%zmm0, %%zmm30\n\t"
constexpr int kStepsPerBlock = 64;
void count_vpclmul(benchmark::State& st, int per_step) {
  st.counters["vpclmul_per_ns"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * kStepsPerBlock * per_step / 1e9,
                         benchmark::Counter::kIsRate);
}
WEFT_CLMUL512 void BM_VpclmulLatency(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 1);
}
WEFT_CLMUL512 void BM_Vpclmul4Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) WEFT_CLMUL_STEP(1)
                     WEFT_CLMUL_STEP(2) WEFT_CLMUL_STEP(3) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 4);
}
WEFT_CLMUL512 void BM_Vpclmul8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) WEFT_CLMUL_STEP(1)
                     WEFT_CLMUL_STEP(2) WEFT_CLMUL_STEP(3) WEFT_CLMUL_STEP(4) WEFT_CLMUL_STEP(5)
                         WEFT_CLMUL_STEP(6) WEFT_CLMUL_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
WEFT_CLMUL512 void BM_Vpclmul16Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) WEFT_CLMUL_STEP(1)
                     WEFT_CLMUL_STEP(2) WEFT_CLMUL_STEP(3) WEFT_CLMUL_STEP(4) WEFT_CLMUL_STEP(5)
                         WEFT_CLMUL_STEP(6) WEFT_CLMUL_STEP(7) WEFT_CLMUL_STEP(8) WEFT_CLMUL_STEP(9)
                             WEFT_CLMUL_STEP(10) WEFT_CLMUL_STEP(11) WEFT_CLMUL_STEP(12)
                                 WEFT_CLMUL_STEP(13) WEFT_CLMUL_STEP(14) WEFT_CLMUL_STEP(15) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 16);
}
// The CRC loop's fold step without its load: two VPCLMULQDQ (low and high qwords) and a
// three-way XOR with the data per chain; chain i in zmm(i), its temporary in zmm(16 + i).
#define WEFT_FOLD_STEP(i, t)                         \
  "vpclmulqdq $0x00, %%zmm31, %%zmm" #i ", %%zmm" #t \
  "\n\t"                                             \
  "vpclmulqdq $0x11, %%zmm31, %%zmm" #i ", %%zmm" #i \
  "\n\t"                                             \
  "vpternlogq $0x96, %%zmm30, %%zmm" #t ", %%zmm" #i "\n\t"
WEFT_CLMUL512 void BM_Fold1Chain(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_FOLD_STEP(0, 16) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 2);
}
WEFT_CLMUL512 void BM_Fold4Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_FOLD_STEP(0, 16) WEFT_FOLD_STEP(1, 17)
                     WEFT_FOLD_STEP(2, 18) WEFT_FOLD_STEP(3, 19) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
WEFT_CLMUL512 void BM_Fold8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_FOLD_STEP(0, 16) WEFT_FOLD_STEP(1, 17)
                     WEFT_FOLD_STEP(2, 18) WEFT_FOLD_STEP(3, 19) WEFT_FOLD_STEP(4, 20)
                         WEFT_FOLD_STEP(5, 21) WEFT_FOLD_STEP(6, 22) WEFT_FOLD_STEP(7, 23) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 16);
}
// The same clmul count in ymm registers (two lanes): whether zmm is split in two on this core.
#define WEFT_YCLMUL_STEP(i) "vpclmulqdq $0x01, %%ymm31, %%ymm" #i ", %%ymm" #i "\n\t"
WEFT_CLMUL512 void BM_VpclmulYmm8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_YCLMUL_STEP(0) WEFT_YCLMUL_STEP(1)
                     WEFT_YCLMUL_STEP(2) WEFT_YCLMUL_STEP(3) WEFT_YCLMUL_STEP(4) WEFT_YCLMUL_STEP(5)
                         WEFT_YCLMUL_STEP(6) WEFT_YCLMUL_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
// Scalar-port XORs beside them: how many 512-bit XORs fit per cycle (a multiply-free fold's cost).
#define WEFT_XOR_STEP(i) "vpxorq %%zmm31, %%zmm" #i ", %%zmm" #i "\n\t"
WEFT_CLMUL512 void BM_Vpxor8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_XOR_STEP(0) WEFT_XOR_STEP(1) WEFT_XOR_STEP(2)
                     WEFT_XOR_STEP(3) WEFT_XOR_STEP(4) WEFT_XOR_STEP(5) WEFT_XOR_STEP(6)
                         WEFT_XOR_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  st.counters["vpxor_per_ns"] = benchmark::Counter(
      static_cast<double>(st.iterations()) * kStepsPerBlock * 8 / 1e9, benchmark::Counter::kIsRate);
}
#define WEFT_XCLMUL_STEP(i) "vpclmulqdq $0x01, %%xmm31, %%xmm" #i ", %%xmm" #i "\n\t"
WEFT_CLMUL512 void BM_VpclmulXmm8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_XCLMUL_STEP(0) WEFT_XCLMUL_STEP(1)
                     WEFT_XCLMUL_STEP(2) WEFT_XCLMUL_STEP(3) WEFT_XCLMUL_STEP(4) WEFT_XCLMUL_STEP(5)
                         WEFT_XCLMUL_STEP(6) WEFT_XCLMUL_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
// Four zmm and four xmm chains interleaved: whether 128-bit multiplies issue beside 512-bit ones.
WEFT_CLMUL512 void BM_VpclmulZmmXmmMixed(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) WEFT_XCLMUL_STEP(4)
                     WEFT_CLMUL_STEP(1) WEFT_XCLMUL_STEP(5) WEFT_CLMUL_STEP(2) WEFT_XCLMUL_STEP(6)
                         WEFT_CLMUL_STEP(3) WEFT_XCLMUL_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
// Eight zmm multiplies with eight XORs and eight GF2P8AFFINEQB between them: whether the vector
// ALU work of a multiply-free method would run beside the multiplies or take their slots.
#define WEFT_MIX_STEP(i, j)               \
  WEFT_CLMUL_STEP(i)                      \
  "vpxorq %%zmm30, %%zmm" #j ", %%zmm" #j \
  "\n\t"                                  \
  "vgf2p8affineqb $0, %%zmm30, %%zmm" #j ", %%zmm" #j "\n\t"
WEFT_CLMUL512 __attribute__((target("gfni"))) void BM_VpclmulBesideAlu(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_MIX_STEP(0, 8) WEFT_MIX_STEP(1, 9)
                     WEFT_MIX_STEP(2, 10) WEFT_MIX_STEP(3, 11) WEFT_MIX_STEP(4, 12)
                         WEFT_MIX_STEP(5, 13) WEFT_MIX_STEP(6, 14) WEFT_MIX_STEP(7, 15) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 8);
}
// GF2P8AFFINEQB zmm, eight independent chains: the multiply-free half's instruction.
#define WEFT_GFNI_STEP(i) "vgf2p8affineqb $0, %%zmm31, %%zmm" #i ", %%zmm" #i "\n\t"
WEFT_CLMUL512 __attribute__((target("gfni"))) void BM_Gf2p8affine8Chains(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_GFNI_STEP(0) WEFT_GFNI_STEP(1)
                     WEFT_GFNI_STEP(2) WEFT_GFNI_STEP(3) WEFT_GFNI_STEP(4) WEFT_GFNI_STEP(5)
                         WEFT_GFNI_STEP(6) WEFT_GFNI_STEP(7) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  st.counters["gfni_per_ns"] = benchmark::Counter(
      static_cast<double>(st.iterations()) * kStepsPerBlock * 8 / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gf2p8affine8Chains);
// Four zmm multiplies and sixteen GF2P8AFFINEQB per step, all independent: if they used separate
// pipes this takes the longer of 8 cycles (multiplies) and 8 (affine at 2 per cycle).
#define WEFT_GF4(i) WEFT_GFNI_STEP(i) WEFT_GFNI_STEP(i) WEFT_GFNI_STEP(i) WEFT_GFNI_STEP(i)
WEFT_CLMUL512 __attribute__((target("gfni"))) void BM_VpclmulBesideGfni(benchmark::State& st) {
  const std::uint64_t seed = 0x5DEECE66D;
  for (auto _ : st)
    asm volatile(WEFT_CLMUL_SETUP ".rept 64\n\t" WEFT_CLMUL_STEP(0) WEFT_GFNI_STEP(4)
                     WEFT_GFNI_STEP(5) WEFT_GFNI_STEP(6) WEFT_GFNI_STEP(7) WEFT_CLMUL_STEP(1)
                         WEFT_GFNI_STEP(8) WEFT_GFNI_STEP(9) WEFT_GFNI_STEP(10) WEFT_GFNI_STEP(11)
                             WEFT_CLMUL_STEP(2) WEFT_GFNI_STEP(12) WEFT_GFNI_STEP(13)
                                 WEFT_GFNI_STEP(14) WEFT_GFNI_STEP(15) WEFT_CLMUL_STEP(3)
                                     WEFT_GFNI_STEP(16) WEFT_GFNI_STEP(17) WEFT_GFNI_STEP(18)
                                         WEFT_GFNI_STEP(19) ".endr"
                 :
                 : "r"(seed)
                 : WEFT_CLMUL_CLOBBERS);
  count_vpclmul(st, 4);
  st.counters["gfni_per_ns"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * kStepsPerBlock * 16 / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VpclmulBesideGfni);

BENCHMARK(BM_VpclmulXmm8Chains);
BENCHMARK(BM_VpclmulZmmXmmMixed);
BENCHMARK(BM_VpclmulBesideAlu);
BENCHMARK(BM_VpclmulYmm8Chains);
BENCHMARK(BM_Vpxor8Chains);
BENCHMARK(BM_VpclmulLatency);
BENCHMARK(BM_Vpclmul4Chains);
BENCHMARK(BM_Vpclmul8Chains);
BENCHMARK(BM_Vpclmul16Chains);
BENCHMARK(BM_Fold1Chain);
BENCHMARK(BM_Fold4Chains);
BENCHMARK(BM_Fold8Chains);

// A plain read of st.range(0) bytes, 64-byte loads XORed into eight accumulators (assembly, so
// that they stay in registers).
WEFT_CLMUL512 void BM_ReadLoop(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  const Buffer b = page_buffer(n);
  for (auto _ : st) {
    const std::uint8_t* p = b.get();
    const std::uint8_t* end = p + n;
    asm volatile(
        "vpxorq %%zmm0, %%zmm0, %%zmm0\n\t"
        "vmovdqa64 %%zmm0, %%zmm1\n\tvmovdqa64 %%zmm0, %%zmm2\n\tvmovdqa64 %%zmm0, %%zmm3\n\t"
        "vmovdqa64 %%zmm0, %%zmm4\n\tvmovdqa64 %%zmm0, %%zmm5\n\tvmovdqa64 %%zmm0, %%zmm6\n\t"
        "vmovdqa64 %%zmm0, %%zmm7\n\t"
        "1:\n\t"
        "vpxorq 0(%0), %%zmm0, %%zmm0\n\tvpxorq 64(%0), %%zmm1, %%zmm1\n\t"
        "vpxorq 128(%0), %%zmm2, %%zmm2\n\tvpxorq 192(%0), %%zmm3, %%zmm3\n\t"
        "vpxorq 256(%0), %%zmm4, %%zmm4\n\tvpxorq 320(%0), %%zmm5, %%zmm5\n\t"
        "vpxorq 384(%0), %%zmm6, %%zmm6\n\tvpxorq 448(%0), %%zmm7, %%zmm7\n\t"
        "add $512, %0\n\tcmp %1, %0\n\tjb 1b"
        : "+r"(p)
        : "r"(end)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "cc");
  }
  st.counters["bytes_per_ns"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * static_cast<double>(n) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReadLoop)->Arg(4096)->Arg(65536);
#endif

void BM_Memcpy(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  const Buffer src = page_buffer(n), dst = page_buffer(n);
  for (auto _ : st) {
    std::memcpy(dst.get(), src.get(), n);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_Memcpy)->Arg(4096)->Arg(65536);

// A 20-byte LRH + BTH (a WRITE MIDDLE), the sender's way: headers apart from the payload.
constexpr std::size_t kMidHeaderBytes = kLrhBytes + kBthBytes;
struct MidHeaders {
  std::uint8_t b[kMidHeaderBytes];
  MidHeaders() {
    Headers h;
    h.lrh = {
        .vl = 0, .lver = 0, .sl = 0, .lnh = Lnh::kIbaLocal, .dlid = 3, .pkt_len = 0, .slid = 4};
    h.bth.opcode = Opcode::kRcWriteMiddle;
    h.bth.dest_qp = 0x11;
    h.bth.psn = 100;
    fill_lengths(h, k4KiB);
    if (encode_headers(h, b) != kMidHeaderBytes) std::abort();
  }
};

// The fused pass over a 64 KiB message in 4 KiB packets (st.range(0) = 1: one packet, 4 KiB).
void BM_FusedPass(benchmark::State& st) {
  const auto packets = static_cast<std::size_t>(st.range(0));
  const MidHeaders h;
  const Buffer msg = page_buffer(packets * k4KiB);
  for (auto _ : st)
    for (std::size_t i = 0; i < packets; ++i)
      benchmark::DoNotOptimize(packet_crcs(h.b, {msg.get() + i * k4KiB, k4KiB}, 0));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * packets * k4KiB));
}
BENCHMARK(BM_FusedPass)->Arg(1)->Arg(16);

}  // namespace
}  // namespace weft::wire

BENCHMARK_MAIN();
