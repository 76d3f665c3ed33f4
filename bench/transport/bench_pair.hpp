// bench/transport/bench_pair.hpp — two connected RC Devices in one thread with no link model
// (4 KiB path MTU), and the loops transport_bench times and transport_profile counts.
#pragma once

#include <array>
#include <cstdlib>
#include <cstring>
#include <span>
#include <memory>
#include <new>
#include <vector>

#include <weft/device.hpp>

namespace weft::bench {

// Byte buffers on their own pages. Where malloc puts two 64 KiB buffers decides how fast memcpy
// copies between them on this EPYC: adjacent heap chunks (b = a + 64 KiB + 16, the two 16 bytes
// apart in their pages) copy in ~800 ns, the same buffers at other offsets in ~600 ns, and under
// --benchmark_enable_random_interleaving each repetition allocates after a different mix of
// other benchmarks, so the memcpy baseline (and with it every ratio against it) flipped between
// the two from run to run (README, 2026-12-04 eng6). Page-aligned, the baseline is always the
// fast one, and the engine's source and destination (an RDMA application registers page-aligned
// memory) are placed by the same rule.
template <class T>
struct PageAllocator {
  using value_type = T;
  static constexpr std::size_t kPage = 4096;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = (n * sizeof(T) + kPage - 1) / kPage * kPage;
    void* p = std::aligned_alloc(kPage, bytes == 0 ? kPage : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  template <class U>
  bool operator==(const PageAllocator<U>&) const {
    return true;
  }
};
using Bytes = std::vector<std::uint8_t, PageAllocator<std::uint8_t>>;

struct Pair {
  SeededRng rng{1};
  std::unique_ptr<Device> da, db;
  QueuePair *qa = nullptr, *qb = nullptr;
  CompletionQueue *ca = nullptr, *cb = nullptr;
  MemoryRegion *ma = nullptr, *mb = nullptr;
  Bytes src, dst;
  // The medium's buffer for the wire image of the packet in flight (the byte path moves one at a
  // time). Each image is placed so that its payload starts on a cache line: headroom of
  // (64 - header bytes) mod 64 in front of it, as a NIC driver leaves headroom in its receive
  // buffers. With the payload at 20 bytes into a line (a WRITE MIDDLE's LRH + BTH), both copies
  // that touch the image (write_to into it, the responder out of it) cost 10-20 % more on this
  // EPYC (README, 2026-12-04 eng6). wire_shift >= 0 places every image at that fixed offset
  // from the aligned start instead (for measuring that; environment WEFT_BENCH_WIRE_SHIFT).
  static constexpr std::size_t kCacheLine = 64, kWireBytes = 8192;
  alignas(kCacheLine) std::array<std::uint8_t, kWireBytes + kCacheLine> wire_buf{};
  long wire_shift = -1;
  std::span<std::uint8_t> wire_for(const TxPacket& pkt) {
    const std::size_t at = wire_shift >= 0
                               ? static_cast<std::size_t>(wire_shift) % kCacheLine
                               : (kCacheLine - pkt.header_bytes % kCacheLine) % kCacheLine;
    return {wire_buf.data() + at, kWireBytes};
  }
  bool bytes_path;
  // Packets move in bursts (poll_transmit_burst / on_packet_burst) or one call per packet. The
  // CRC-computing path delivers packet by packet, as wire images through write_to (there is no
  // burst form of on_packet(bytes)); with bursts its packets are taken with poll_transmit_burst.
  bool burst;
  static constexpr std::size_t kBurstPackets = 32;
  std::vector<TxPacket> pkts = std::vector<TxPacket>(kBurstPackets);

  Pair(std::size_t bytes, CrcMode crc, bool bursts = true, TimeNs ack_delay_ns = 0)
      : bytes_path(crc == CrcMode::kCompute), burst(bursts) {
    if (const char* e = std::getenv("WEFT_BENCH_WIRE_SHIFT")) wire_shift = std::atol(e);
    src.assign(bytes, 0x5A);
    dst.assign(bytes, 0);
    DeviceConfig cfg;
    cfg.crc = crc;
    cfg.ack_delay_ns = ack_delay_ns;
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
                    Bytes& buf) {
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
    if (burst) {
      while (const std::size_t n = from.poll_transmit_burst(0, pkts)) {
        if (!bytes_path) {
          to.on_packet_burst({pkts.data(), n}, 0);
          continue;
        }
        for (std::size_t i = 0; i < n; ++i) {
          const std::span<std::uint8_t> w = wire_for(pkts[i]);
          to.on_packet(w.first(pkts[i].write_to(w)), 0);
        }
      }
      return;
    }
    TxPacket pkt;
    while (from.poll_transmit(0, pkt)) {
      if (bytes_path) {
        const std::span<std::uint8_t> w = wire_for(pkt);
        to.on_packet(w.first(pkt.write_to(w)), 0);
      } else {
        to.on_packet(pkt, 0);
      }
    }
  }
  // Completions are polled into this (allocated once, as perftest does: a WorkCompletion array on
  // the stack is value-initialised on every call, 3 KiB of stores per poll loop).
  std::array<WorkCompletion, 64> wc;
  // Pumps until `n` completions arrive on cq.
  void pump_until(CompletionQueue* cq, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      move(*da, *db);
      move(*db, *da);
      got += cq->poll(wc);
    }
  }
};

// One RDMA WRITE of the whole source buffer per call, signaled, pumped to its completion.
struct WriteLoop {
  Pair& p;
  Sge sge;
  SendWr wr;
  explicit WriteLoop(Pair& pair) : p(pair) {
    sge = Sge{reinterpret_cast<std::uintptr_t>(p.src.data()),
              static_cast<std::uint32_t>(p.src.size()), p.ma->lkey()};
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = reinterpret_cast<std::uintptr_t>(p.dst.data());
    wr.rkey = p.mb->rkey();
  }
  void once() {
    p.qa->post_send(wr);
    p.pump_until(p.ca, 1);
  }
  bool ok() const { return std::memcmp(p.src.data(), p.dst.data(), p.src.size()) == 0; }
};

// kBatch 64-byte SENDs per call, every `signal_every`-th signaled (1: all), receives reposted.
// With p.burst, the WRs are posted as one list each way (post_send_burst / post_recv_burst), as
// perftest posts its batches; otherwise one call per WR. `rx_batches` batches of receives are
// kept posted: with 1, the receiver has none left when it ACKs a batch, so the ACK carries no
// end-to-end credits (IBA 9.7.7.2) and the next batch starts one SEND at a time until one
// comes back (several ACK round trips per batch); with 2 (as perftest keeps rx_depth above its
// burst), the receives of the next batch are already posted and one ACK per batch suffices.
struct SendLoop {
  static constexpr std::uint32_t kBatch = 32, kBytes = 64;
  Pair& p;
  std::uint32_t signal_every;
  std::uint32_t until_signal;  // WRs up to and including the next signaled one
  Sge sge;
  std::vector<SendWr> wrs;
  std::vector<Sge> rs;
  std::vector<RecvWr> rwrs;
  std::uint32_t rx_batches, rx_next = 0;  // the batch of receives to repost next
  // The Pair's buffers must hold rx_batches * kBatch * kBytes bytes.
  SendLoop(Pair& pair, std::uint32_t every, std::uint32_t rx = 2)
      : p(pair),
        signal_every(every),
        until_signal(every),
        wrs(kBatch),
        rs(kBatch * rx),
        rwrs(kBatch * rx),
        rx_batches(rx) {
    sge = Sge{reinterpret_cast<std::uintptr_t>(p.src.data()), kBytes, p.ma->lkey()};
    for (SendWr& wr : wrs) {
      wr.opcode = WrOpcode::kSend;
      wr.sg_list = {&sge, 1};
    }
    for (std::uint32_t i = 0; i < kBatch * rx; ++i) {
      rs[i] =
          Sge{reinterpret_cast<std::uintptr_t>(p.dst.data() + i * kBytes), kBytes, p.mb->lkey()};
      rwrs[i] = RecvWr{i, {&rs[i], 1}};
    }
    for (std::uint32_t b = 0; b < rx; ++b) post_recvs();
    // All signaled: the flags are set once here, as an application that signals every WR
    // builds its WRs once; once() recounts them per batch only for signal_every > 1.
    if (signal_every == 1)
      for (SendWr& wr : wrs) wr.send_flags = kSignaled;
  }
  void post_recvs() {
    const std::span<const RecvWr> batch(&rwrs[rx_next * kBatch], kBatch);
    rx_next = (rx_next + 1) % rx_batches;
    if (p.burst) {
      std::size_t n;
      p.qb->post_recv_burst(batch, n);
      return;
    }
    for (const RecvWr& r : batch) p.qb->post_recv(r);
  }
  void once() {
    // Every signal_every-th WR signaled, by a countdown (a 64-bit `%` per WR was a division,
    // ~6 % of this loop's time with every WR signaled), kept in a local: as the member, each
    // WR's flag store (which may alias it) made the compiler store and reload it, a chain
    // through memory of 32 store-to-load forwards per batch. With every WR signaled the loop
    // rewrote the constructor's flags (~6 % of BM_Send64's time, perf): not run then.
    std::uint32_t signaled = kBatch;
    if (signal_every != 1) {
      signaled = 0;
      std::uint32_t countdown = until_signal;
      for (SendWr& wr : wrs) {
        const bool sig = --countdown == 0;
        if (sig) countdown = signal_every;
        wr.send_flags = sig ? kSignaled : 0u;
        signaled += sig;
      }
      until_signal = countdown;
    }
    if (p.burst) {
      std::size_t n;
      p.qa->post_send_burst(wrs, n);
    } else {
      for (const SendWr& wr : wrs) p.qa->post_send(wr);
    }
    // Until every receive and every signaled send has completed.
    const std::span<WorkCompletion> wc(p.wc.data(), kBatch);
    std::size_t recvs = 0, sends = 0;
    while (recvs < kBatch || sends < signaled) {
      p.move(*p.da, *p.db);
      p.move(*p.db, *p.da);
      sends += p.ca->poll(wc);
      recvs += p.cb->poll(wc);
    }
    post_recvs();
  }
};

// `weft perf write --lat -s 8` direct, its engine work only: A WRITEs 8 bytes into B's half, B
// sees them and WRITEs 8 bytes back, every 16th WRITE signaled (perf's kLatSignalEvery), one
// post_send per WR, packets moved in bursts as the io Driver moves them (one pass: receive, the
// deadline check, transmit), the send CQs polled each pass. Delayed ACKs as perf's direct
// links (20 us, DirectOptions::ack_delay_ns; the clock stands still here, so only the coalescing
// count sends them). One call = one round trip.
struct LatLoop {
  static constexpr std::uint32_t kBytes = 8, kSignalEvery = 16;
  Pair& p;
  Sge sa, sb;
  SendWr wa, wb;
  std::uint32_t i = 0;
  explicit LatLoop(Pair& pair) : p(pair) {
    sa = Sge{reinterpret_cast<std::uintptr_t>(p.src.data()), kBytes, p.ma->lkey()};
    sb = Sge{reinterpret_cast<std::uintptr_t>(p.dst.data() + kBytes), kBytes, p.mb->lkey()};
    wa.opcode = wb.opcode = WrOpcode::kRdmaWrite;
    wa.sg_list = {&sa, 1};
    wb.sg_list = {&sb, 1};
    wa.remote_addr = reinterpret_cast<std::uintptr_t>(p.dst.data());
    wa.rkey = p.mb->rkey();
    wb.remote_addr = reinterpret_cast<std::uintptr_t>(p.src.data() + kBytes);
    wb.rkey = p.ma->rkey();
  }
  // One Driver pass over one Device: its packets to the peer, its deadline, its send CQ.
  void pass(Device& from, Device& to, CompletionQueue* cq) {
    p.move(from, to);
    (void)to.next_deadline();
    (void)cq->poll(std::span<WorkCompletion>(p.wc.data(), 16));
  }
  void once() {
    const bool sig = ++i % kSignalEvery == 0;
    wa.send_flags = wb.send_flags = sig ? kSignaled : 0u;
    p.qa->post_send(wa);
    pass(*p.da, *p.db, p.cb);
    p.qb->post_send(wb);
    pass(*p.db, *p.da, p.ca);
  }
};

}  // namespace weft::bench
