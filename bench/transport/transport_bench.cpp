// bench/transport/transport_bench.cpp — engine-to-engine throughput in one thread, no link model:
// RDMA WRITE payload throughput at a 4 KiB MTU (64 KiB and 1 MiB messages) with CRCs computed
// (the wire image through write_to and on_packet(bytes)) and with CRCs modelled (payload passed by
// reference, one copy into the destination), and 64-byte SENDs per second. Baselines in the same
// binary: memcpy of the same sizes and a bare single-thread SpscRing copying 64-byte messages in
// and out. Compare ratios, not absolute numbers (shared, noisy machines).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <weft/device.hpp>

#include "src/base/spsc_ring.hpp"

namespace {

using namespace weft;

struct Bench {
  SeededRng rng{1};
  std::unique_ptr<Device> da, db;
  QueuePair *qa = nullptr, *qb = nullptr;
  CompletionQueue *ca = nullptr, *cb = nullptr;
  MemoryRegion *ma = nullptr, *mb = nullptr;
  std::vector<std::uint8_t> src, dst, wire;
  bool bytes_path;

  Bench(std::size_t bytes, CrcMode crc) : bytes_path(crc == CrcMode::kCompute) {
    src.assign(bytes, 0x5A);
    dst.assign(bytes, 0);
    wire.resize(8192);
    DeviceConfig cfg;
    cfg.crc = crc;
    cfg.ports[0].lid = 1;
    da = Device::create(cfg, rng);
    cfg.ports[0].lid = 2;
    db = Device::create(cfg, rng);
    setup(*da, qa, ca, ma, src);
    setup(*db, qb, cb, mb, dst);
    connect(qa, 2, qb->qp_num());
    connect(qb, 1, qa->qp_num());
  }
  static void setup(Device& d, QueuePair*& qp, CompletionQueue*& cq, MemoryRegion*& mr,
                    std::vector<std::uint8_t>& buf) {
    auto* pd = *d.alloc_pd();
    cq = *d.create_cq(4096);
    mr = *d.reg_mr(pd, buf.data(), buf.size(),
                   kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.caps.max_send_wr = 1024;
    qa.caps.max_recv_wr = 1024;
    qp = *d.create_qp(qa);
  }
  static void connect(QueuePair* qp, std::uint16_t dlid, std::uint32_t dqpn) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.access_flags = kAccessRemoteWrite | kAccessRemoteRead;
    qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
    a.qp_state = QpState::kRtr;
    a.av.dlid = dlid;
    a.path_mtu = Mtu::k4096;
    a.dest_qpn = dqpn;
    qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                      kQpMinRnrTimer);
    a.qp_state = QpState::kRts;
    qp->modify(a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxRdAtomic);
  }
  void move(Device& from, Device& to) {
    TxPacket pkt;
    while (from.poll_transmit(0, pkt)) {
      if (bytes_path) {
        const std::size_t n = pkt.write_to(wire);
        to.on_packet(std::span<const std::uint8_t>(wire.data(), n), 0);
      } else {
        to.on_packet(pkt, 0);
      }
    }
  }
  // Pumps until `n` completions arrive on cq.
  void pump_until(CompletionQueue* cq, std::size_t n) {
    WorkCompletion wc[64];
    std::size_t got = 0;
    while (got < n) {
      move(*da, *db);
      move(*db, *da);
      got += cq->poll(wc);
    }
  }
};

void BM_Memcpy(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  std::vector<std::uint8_t> a(n, 1), b(n, 0);
  for (auto _ : st) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n));
}
BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(1 << 20);

void write_bench(benchmark::State& st, CrcMode crc) {
  const auto n = static_cast<std::size_t>(st.range(0));
  Bench b(n, crc);
  Sge sge{reinterpret_cast<std::uintptr_t>(b.src.data()), static_cast<std::uint32_t>(n),
          b.ma->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = kSignaled;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = reinterpret_cast<std::uintptr_t>(b.dst.data());
  wr.rkey = b.mb->rkey();
  for (auto _ : st) {
    b.qa->post_send(wr);
    b.pump_until(b.ca, 1);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n));
  if (std::memcmp(b.src.data(), b.dst.data(), n) != 0) st.SkipWithError("data mismatch");
}
void BM_WriteCrcModel(benchmark::State& st) {
  write_bench(st, CrcMode::kModel);
}
void BM_WriteCrcCompute(benchmark::State& st) {
  write_bench(st, CrcMode::kCompute);
}
BENCHMARK(BM_WriteCrcModel)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_WriteCrcCompute)->Arg(64 << 10)->Arg(1 << 20);

// 64-byte SENDs, 32 in flight per batch (all signaled), receives reposted.
void BM_Send64(benchmark::State& st) {
  constexpr std::uint32_t kBatch = 32, kBytes = 64;
  Bench b(kBatch * kBytes, CrcMode::kModel);
  Sge sge{reinterpret_cast<std::uintptr_t>(b.src.data()), kBytes, b.ma->lkey()};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = kSignaled;
  wr.sg_list = {&sge, 1};
  std::vector<Sge> rs(kBatch);
  for (std::uint32_t i = 0; i < kBatch; ++i)
    rs[i] = Sge{reinterpret_cast<std::uintptr_t>(b.dst.data() + i * kBytes), kBytes, b.mb->lkey()};
  auto post_recvs = [&] {
    for (std::uint32_t i = 0; i < kBatch; ++i) b.qb->post_recv(RecvWr{i, {&rs[i], 1}});
  };
  post_recvs();
  for (auto _ : st) {
    for (std::uint32_t i = 0; i < kBatch; ++i) b.qa->post_send(wr);
    b.pump_until(b.ca, kBatch);
    WorkCompletion wc[kBatch];
    std::size_t got = 0;
    while (got < kBatch) got += b.cb->poll(std::span<WorkCompletion>(wc + got, kBatch - got));
    post_recvs();
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * kBatch));
}
BENCHMARK(BM_Send64);

// Baseline: a bare single-thread ring that copies 64-byte messages in and out.
void BM_Ring64(benchmark::State& st) {
  constexpr std::uint32_t kBatch = 32;
  base::SpscRing ring(256, 64);
  std::uint8_t in[64] = {1}, out[64];
  for (auto _ : st) {
    for (std::uint32_t i = 0; i < kBatch; ++i) ring.push(in, 64);
    for (std::uint32_t i = 0; i < kBatch; ++i) ring.pop(out, 64);
    benchmark::DoNotOptimize(out);
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * kBatch));
}
BENCHMARK(BM_Ring64);

// Prints the goal ratios after the table, from CPU time per iteration (the machines are shared:
// wall time measures the neighbours). With --benchmark_repetitions the medians are used.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal (the library's own reporter reads --benchmark_color; ours cannot).
  RatioReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Defaults : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type != Run::RT_Iteration && !median) continue;
      const std::string key =
          r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args);
      if (median || !medians_.count(key)) cpu_ns_[key] = r.GetAdjustedCPUTime();
      if (median) medians_.insert(key);
    }
  }
  // Throughput of `what` over throughput of `base` (same work per iteration): base time / time.
  double ratio(const std::string& what, const std::string& base) const {
    auto a = cpu_ns_.find(what), b = cpu_ns_.find(base);
    if (a == cpu_ns_.end() || b == cpu_ns_.end() || a->second <= 0) return -1;
    return b->second / a->second;
  }

 private:
  std::map<std::string, double> cpu_ns_;
  std::set<std::string> medians_;
};

// Passes over the payload the CRC-computing path makes: the sender's ICRC and VCRC, write_to's
// copy into the wire image, the receiver's VCRC and ICRC, and the copy into the destination.
constexpr int kComputePasses = 6;

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  std::printf("\nRatios (CPU time; goal in brackets):\n");
  for (const char* n : {"65536", "1048576"}) {
    const std::string mc = std::string("BM_Memcpy/") + n;
    const double a = rep.ratio(std::string("BM_WriteCrcModel/") + n, mc);
    const double b = rep.ratio(std::string("BM_WriteCrcCompute/") + n, mc);
    std::printf("  (a) WRITE %7s B, CRCs modelled / memcpy:            %.3fx  [>= 0.7]\n", n, a);
    std::printf(
        "  (b) WRITE %7s B, CRCs computed / (memcpy / %d passes): %.3fx  [>= 0.7] "
        "(%.4fx of memcpy)\n",
        n, kComputePasses, b * kComputePasses, b);
  }
  std::printf("  (c) 64 B SENDs/s / bare ring 64 B messages/s:        %.4fx  [>= 0.1]\n",
              rep.ratio("BM_Send64", "BM_Ring64"));
  benchmark::Shutdown();
  return 0;
}
