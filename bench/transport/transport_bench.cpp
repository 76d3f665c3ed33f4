// bench/transport/transport_bench.cpp — engine-to-engine throughput in one thread, no link model:
// RDMA WRITE payload throughput at a 4 KiB MTU (64 KiB and 1 MiB messages) with CRCs computed
// (the wire image through write_to and on_packet(bytes)) and with CRCs modelled (payload passed by
// reference, one copy into the destination), and 64-byte SENDs per second. Baselines in the same
// binary: memcpy of the same sizes and a bare single-thread SpscRing copying 64-byte messages in
// and out. Compare ratios, not absolute numbers (shared, noisy machines).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

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
void BM_WriteCrcModel(benchmark::State& st) { write_bench(st, CrcMode::kModel); }
void BM_WriteCrcCompute(benchmark::State& st) { write_bench(st, CrcMode::kCompute); }
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

}  // namespace

BENCHMARK_MAIN();
