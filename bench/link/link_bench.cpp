// link_bench — FEC throughput against memcpy (the baseline, same binary, same run), and the
// per-packet cost of the credit check, VL arbitration and the PHY channel. At the end it prints
// each FEC figure as a ratio of the memcpy figure.
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "src/link/credit.hpp"
#include "src/link/fec.hpp"
#include "src/link/phy_channel.hpp"
#include "src/link/vl_arbiter.hpp"
#include "src/wire/packet.hpp"
#include <weft/types.hpp>

namespace {

using namespace weft;
using namespace weft::link;

constexpr std::size_t kPacketBytes = 4096;

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  SeededRng rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng.next_u64());
  return v;
}

void BM_Memcpy4K(benchmark::State& state) {
  auto src = random_bytes(kPacketBytes, 1);
  std::vector<std::uint8_t> dst(kPacketBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kPacketBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kPacketBytes);
}
BENCHMARK(BM_Memcpy4K);

void BM_FecEncode4K(benchmark::State& state) {
  FecCodec c(
      {static_cast<std::uint8_t>(state.range(0)), static_cast<std::uint8_t>(state.range(1))});
  auto p = random_bytes(kPacketBytes, 2);
  std::vector<std::uint8_t> cw(c.codeword_bytes(kPacketBytes));
  for (auto _ : state) {
    c.encode(p, cw);
    benchmark::DoNotOptimize(cw.data());
  }
  state.SetBytesProcessed(state.iterations() * kPacketBytes);
}
BENCHMARK(BM_FecEncode4K)->Args({8, 2})->Args({16, 2});

// range(2): shards lost (0: the clean path, CRC checks and copy only).
void BM_FecDecode4K(benchmark::State& state) {
  FecCodec c(
      {static_cast<std::uint8_t>(state.range(0)), static_cast<std::uint8_t>(state.range(1))});
  auto p = random_bytes(kPacketBytes, 3);
  auto cw = c.encode(p);
  const std::size_t stride = c.shard_bytes(kPacketBytes) + kFecShardCrcBytes;
  for (long i = 0; i < state.range(2); ++i) cw[static_cast<std::size_t>(i) * stride + 5] ^= 0x10;
  std::vector<std::uint8_t> out(kPacketBytes);
  for (auto _ : state) {
    auto r = c.decode(cw, std::span<std::uint8_t>(out));
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(state.iterations() * kPacketBytes);
}
BENCHMARK(BM_FecDecode4K)->Args({8, 2, 0})->Args({8, 2, 1})->Args({8, 2, 2})->Args({16, 2, 2});

// The transmitter's credit check alone, as the arbiter asks it for every ready VL.
void BM_CreditCanSend(benchmark::State& state) {
  CreditSender s;
  s.on_fc_packet(FcPacket{FcOp::kNormal, 0, 0, 2048});
  std::uint32_t bytes = 64;
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.can_send(0, bytes));
    bytes = (bytes + 61) & 0xFFF;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CreditCanSend);

// One packet's whole credit life: check, send, arrive, drain, FC packet back to the sender.
void BM_CreditPacketCycle(benchmark::State& state) {
  std::array<std::uint32_t, kVlCount> buf{};
  buf.fill(64 * 1024);
  CreditReceiver r(buf);
  CreditSender s;
  s.on_fc_packet(r.make_fc_packet(0));
  for (auto _ : state) {
    if (!s.can_send(0, 4150)) state.SkipWithError("no credit");
    s.on_sent(0, 4150);
    r.on_packet_arrived(0, 4150);
    r.on_packet_drained(0, 4150);
    s.on_fc_packet(r.make_fc_packet(0, s.fctbs(0)));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CreditPacketCycle);

void BM_VlArbiterNext(benchmark::State& state) {
  VlArbiter arb(
      {.high = {{0, 16}, {1, 16}}, .low = {{2, 32}, {3, 32}, {4, 8}}, .limit_of_high_priority = 4});
  std::array<std::uint32_t, 16> h{};
  for (int vl = 0; vl < 5; ++vl) h[vl] = 1024;
  for (auto _ : state) benchmark::DoNotOptimize(arb.next(h));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_VlArbiterNext);

std::vector<std::uint8_t> ib_packet() {
  wire::Headers h;
  h.bth.opcode = wire::Opcode::kRcSendOnly;
  auto payload = random_bytes(kPacketBytes, 4);
  std::vector<std::uint8_t> out(wire::wire_bytes(h, kPacketBytes));
  wire::encode_packet(h, payload, out);
  return out;
}

// Verified mode: encode, draw and flip, decode, VCRC check; BER 1e-6 (some packets repaired).
void BM_PhyCarryVerified(benchmark::State& state) {
  PhyChannel ch({.ber = 1e-6, .fec = FecMode::kOn});
  SeededRng rng(5);
  auto p = ib_packet();
  std::vector<std::uint8_t> out;
  for (auto _ : state) benchmark::DoNotOptimize(ch.carry(p, rng, out));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(p.size()));
}
BENCHMARK(BM_PhyCarryVerified);

// Timing-only mode: the same decisions without bytes.
void BM_PhyCarryModelled(benchmark::State& state) {
  PhyChannel ch({.ber = 1e-6, .fec = FecMode::kOn});
  SeededRng rng(5);
  for (auto _ : state) benchmark::DoNotOptimize(ch.carry_modelled(4126, rng));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PhyCarryModelled);

// Console output as usual, then each byte-rate figure as a ratio of memcpy's.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) rates_[r.benchmark_name()] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    auto base = rates_.find("BM_Memcpy4K");
    if (base == rates_.end() || base->second <= 0) return;
    std::printf("\nratio to memcpy of 4 KiB (%.1f GB/s):\n", base->second / 1e9);
    for (const auto& [name, rate] : rates_)
      std::printf("  %-32s %7.2f GB/s  %6.3f x memcpy\n", name.c_str(), rate / 1e9,
                  rate / base->second);
  }

 private:
  std::map<std::string, double> rates_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
