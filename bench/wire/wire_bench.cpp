// bench/wire/wire_bench.cpp — cost of the wire format per packet and per 4 KiB, with memcpy of
// 4 KiB in the same binary as the baseline (compare ratios, not absolute figures: the machines
// are shared and noisy).
#include <benchmark/benchmark.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "src/wire/packet.hpp"
#include "src/wire/roce.hpp"

namespace weft::wire {
namespace {

constexpr std::size_t k4KiB = 4096;

Headers write_first_headers() {
  Headers h;
  h.lrh = {.vl = 0, .lver = 0, .sl = 0, .lnh = Lnh::kIbaLocal, .dlid = 3, .pkt_len = 0, .slid = 4};
  h.bth.opcode = Opcode::kRcWriteFirst;
  h.bth.dest_qp = 0x11;
  h.bth.psn = 100;
  h.reth = {0x7f0000001000ULL, 0x1234, 1 << 20};
  fill_lengths(h, k4KiB);
  return h;
}

void BM_EncodeHeaders(benchmark::State& st) {
  Headers h = write_first_headers();
  std::uint8_t out[128];
  for (auto _ : st) {
    h.bth.psn = (h.bth.psn + 1) & 0xFFFFFF;
    benchmark::DoNotOptimize(encode_headers(h, out));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_EncodeHeaders);

void BM_ParseHeaders(benchmark::State& st) {
  const Headers h = write_first_headers();
  std::uint8_t buf[128];
  const std::size_t n = encode_headers(h, buf);
  for (auto _ : st) {
    auto p = parse_headers({buf, n}, k4KiB, 0);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_ParseHeaders);

// A whole 4 KiB packet with both CRCs checked: what a receiving link + transport pays.
void BM_ParsePacket4KiBWithCrcs(benchmark::State& st) {
  const Headers h = write_first_headers();
  std::vector<std::uint8_t> payload(k4KiB, 0xA5), wire(wire_bytes(h, k4KiB));
  encode_packet(h, payload, wire);
  for (auto _ : st) {
    auto p = parse_packet(wire);
    benchmark::DoNotOptimize(p);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * k4KiB));
}
BENCHMARK(BM_ParsePacket4KiBWithCrcs);

void BM_Icrc4KiB(benchmark::State& st) {
  const Headers h = write_first_headers();
  std::uint8_t hdr[128];
  const std::size_t n = encode_headers(h, hdr);
  std::vector<std::uint8_t> payload(k4KiB);
  std::iota(payload.begin(), payload.end(), 0);
  for (auto _ : st) benchmark::DoNotOptimize(icrc({hdr, n}, payload, 0));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * k4KiB));
}
BENCHMARK(BM_Icrc4KiB);

void BM_Vcrc4KiB(benchmark::State& st) {
  std::vector<std::uint8_t> data(k4KiB);
  std::iota(data.begin(), data.end(), 0);
  for (auto _ : st) benchmark::DoNotOptimize(vcrc(data));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * k4KiB));
}
BENCHMARK(BM_Vcrc4KiB);

void BM_Memcpy4KiB(benchmark::State& st) {
  std::vector<std::uint8_t> src(k4KiB, 1), dst(k4KiB);
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), k4KiB);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * k4KiB));
}
BENCHMARK(BM_Memcpy4KiB);

}  // namespace
}  // namespace weft::wire

BENCHMARK_MAIN();
