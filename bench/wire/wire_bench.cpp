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

// Both CRCs of one packet (a WRITE FIRST's 28 header bytes and a payload of st.range(0) bytes),
// as a sender computes them: separately (icrc() then the VCRC over headers, payload, pad and
// ICRC, as src/transport did before packet_crcs) and in the fused pass; the fused pass on each
// forced path shows where its thresholds belong.
struct CrcPacket {
  std::uint8_t hdr[128];
  std::size_t header_bytes;
  std::vector<std::uint8_t> payload;
  explicit CrcPacket(std::size_t n) : payload(n) {
    const Headers h = write_first_headers();
    header_bytes = encode_headers(h, hdr);
    std::iota(payload.begin(), payload.end(), 0);
  }
};

void BM_CrcsSeparate(benchmark::State& st) {
  const CrcPacket p(static_cast<std::size_t>(st.range(0)));
  const std::span<const std::uint8_t> hdr(p.hdr, p.header_bytes);
  for (auto _ : st) {
    const std::uint32_t ic = icrc(hdr, p.payload, 0);
    std::uint8_t icb[kIcrcBytes];
    put_icrc(icb, ic);
    std::uint16_t c = vcrc_update(kVcrcInit, hdr);
    c = vcrc_update(c, p.payload);
    c = vcrc_update(c, icb);
    benchmark::DoNotOptimize(ic);
    benchmark::DoNotOptimize(c);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * p.payload.size()));
}
BENCHMARK(BM_CrcsSeparate)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

void BM_CrcsFused(benchmark::State& st) {
  const CrcPacket p(static_cast<std::size_t>(st.range(0)));
  const std::span<const std::uint8_t> hdr(p.hdr, p.header_bytes);
  for (auto _ : st) benchmark::DoNotOptimize(packet_crcs(hdr, p.payload, 0));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * p.payload.size()));
}
BENCHMARK(BM_CrcsFused)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

// The same with each call's length depending on the previous call's result (by a zero that the
// compiler cannot see): calls no longer overlap, so this shows the latency of one packet's CRCs,
// the fold loop plus the tail after it (the reductions), which the rows above hide.
void BM_CrcsFusedChained(benchmark::State& st) {
  const CrcPacket p(static_cast<std::size_t>(st.range(0)));
  const std::span<const std::uint8_t> hdr(p.hdr, p.header_bytes);
  volatile std::uint32_t zero_source = 0;
  const std::uint32_t zero = zero_source;
  std::uint32_t dep = 0;
  for (auto _ : st) {
    const PacketCrcs c = packet_crcs(hdr, std::span(p.payload).first(p.payload.size() + dep), 0);
    dep = (c.icrc ^ c.vcrc) & zero;
  }
  benchmark::DoNotOptimize(dep);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * p.payload.size()));
}
BENCHMARK(BM_CrcsFusedChained)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

void crcs_fused_path(benchmark::State& st, VcrcPath path) {
  if (!vcrc_path_available(path)) {
    st.SkipWithError("path not available on this CPU");
    return;
  }
  const CrcPacket p(static_cast<std::size_t>(st.range(0)));
  const std::span<const std::uint8_t> hdr(p.hdr, p.header_bytes);
  for (auto _ : st) benchmark::DoNotOptimize(packet_crcs_path(path, hdr, p.payload, 0));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * p.payload.size()));
}
BENCHMARK_CAPTURE(crcs_fused_path, own_code, VcrcPath::kTables)
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(4096);
BENCHMARK_CAPTURE(crcs_fused_path, clmul128, VcrcPath::kClmul)
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(4096);
BENCHMARK_CAPTURE(crcs_fused_path, vpclmul512, VcrcPath::kVpclmul)
    ->Arg(256)
    ->Arg(512)
    ->Arg(768)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(3072)
    ->Arg(4096);
BENCHMARK_CAPTURE(crcs_fused_path, vpclmul512_gfni, VcrcPath::kVpclmulGfni)
    ->Arg(768)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(3072)
    ->Arg(4096);

// The receiver's side: a whole packet in one buffer, both CRCs checked (VCRC first).
void BM_CrcCheckSeparate(benchmark::State& st) {
  const Headers h = write_first_headers();
  const auto n = static_cast<std::size_t>(st.range(0));
  std::vector<std::uint8_t> payload(n, 0xA5), wire(wire_bytes(h, n));
  encode_packet(h, payload, wire);
  const std::span<const std::uint8_t> w(wire);
  const std::size_t hb = header_bytes(h), through_icrc = w.size() - kVcrcBytes;
  for (auto _ : st) {
    const bool ok = vcrc(w.first(through_icrc)) == get_vcrc(w.last<kVcrcBytes>()) &&
                    icrc(w.first(hb), w.subspan(hb, n)) ==
                        get_icrc(w.subspan(through_icrc - kIcrcBytes).first<kIcrcBytes>());
    benchmark::DoNotOptimize(ok);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_CrcCheckSeparate)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

void BM_CrcCheckFused(benchmark::State& st) {
  const Headers h = write_first_headers();
  const auto n = static_cast<std::size_t>(st.range(0));
  std::vector<std::uint8_t> payload(n, 0xA5), wire(wire_bytes(h, n));
  encode_packet(h, payload, wire);
  const std::span<const std::uint8_t> w(wire);
  const std::size_t hb = header_bytes(h), through_icrc = w.size() - kVcrcBytes;
  for (auto _ : st) {
    auto e = check_packet_crcs(w.first(hb), w.subspan(hb, n), 0,
                               get_icrc(w.subspan(through_icrc - kIcrcBytes).first<kIcrcBytes>()),
                               get_vcrc(w.last<kVcrcBytes>()));
    benchmark::DoNotOptimize(e);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_CrcCheckFused)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);

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
