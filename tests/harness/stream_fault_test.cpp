// tests/harness/stream_fault_test.cpp — a long multi-packet RDMA WRITE stream (16 KiB messages,
// 1 KiB MTU, PSNs wrapping) under duplicates and reordering but no loss, on the data direction,
// the ACK direction or both. Nothing is lost, so every WRITE must complete with SUCCESS and land
// byte-exact: a RETRY_EXC_ERR here would mean the requester spent its retry budget on stale
// sequence NAKs (duplicated or late ones for a PSN it had already gone back to). The campaign
// covers short messages; this covers long trains of packets, where GBN rewinds whole windows.
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include <weft/device.hpp>

#include "emu/harness/setup.hpp"
#include "emu/harness/sim.hpp"

namespace weft::harness {
namespace {

struct StreamResult {
  int ok = 0, failed = 0;
  WcStatus first_error = WcStatus::kSuccess;
  bool data_exact = true;
  std::uint64_t naks_rx_seq = 0;
  std::uint64_t duplicated = 0, reordered = 0;
};

// faults: 1 = data direction only, 2 = ACK direction only, 3 = both.
StreamResult run_stream(std::uint64_t seed, RecoveryMode mode, double dup, double reorder,
                        int messages, int kWindow = 8, int faults = 3) {
  constexpr std::uint32_t kMsgBytes = 16 * 1024;
  SimConfig sc;
  sc.crc = CrcMode::kModel;
  sc.events_max = 20'000'000;
  Sim sim(sc);
  SeededRng rng_a(seed * 3 + 1), rng_b(seed * 3 + 2), data(seed);
  std::unique_ptr<Device> dev[2];
  ProtectionDomain* pd[2];
  for (int d = 0; d < 2; ++d) {
    DeviceConfig dc;
    dc.name = d == 0 ? "a" : "b";
    dc.node_guid = 0x100 + static_cast<std::uint64_t>(d);
    dc.ports[0].lid = static_cast<std::uint16_t>(d + 1);
    dev[d] = Device::create(dc, d == 0 ? static_cast<Rng&>(rng_a) : static_cast<Rng&>(rng_b));
    sim.add_device(dev[d].get());
    pd[d] = dev[d]->alloc_pd().value();
  }
  LinkConfig lc;
  lc.latency_ns = 1'000;
  lc.rate_mbps = 100'000;
  lc.duplicate = dup;
  lc.reorder = reorder;
  lc.reorder_ns_max = 3'000;
  LinkConfig clean = lc;
  clean.duplicate = 0;
  clean.reorder = 0;
  sim.connect(0, 1, faults & 1 ? lc : clean, faults & 2 ? lc : clean, seed);

  const std::size_t span = static_cast<std::size_t>(kMsgBytes) * kWindow;
  std::vector<std::uint8_t> src(span), dst(span, 0);
  for (auto& b : src) b = static_cast<std::uint8_t>(data.next_u64());
  MemoryRegion* mr_a = dev[0]->reg_mr(pd[0], src.data(), src.size(), kAccessLocalWrite).value();
  MemoryRegion* mr_b =
      dev[1]->reg_mr(pd[1], dst.data(), dst.size(), kAccessLocalWrite | kAccessRemoteWrite).value();
  CompletionQueue* cq[2];
  QueuePair* qp[2];
  for (int d = 0; d < 2; ++d) {
    cq[d] = dev[d]->create_cq(256).value();
    QpInitAttr ia;
    ia.pd = pd[d];
    ia.send_cq = cq[d];
    ia.recv_cq = cq[d];
    qp[d] = dev[d]->create_qp(ia).value();
  }
  for (int d = 0; d < 2; ++d) {
    RcParams p;
    p.mtu = Mtu::k1024;
    p.recovery = mode;
    p.timeout = 8;  // 1 ms: far above the worst reorder delay, so no timeout fires
    p.retry_cnt = 7;
    p.sq_psn = d == 0 ? 0xfffff0 : 77;  // wraps the 24-bit PSN space early in the stream
    p.rq_psn = d == 0 ? 77 : 0xfffff0;
    p.dest_qpn = qp[1 - d]->qp_num();
    p.dlid = static_cast<std::uint16_t>(2 - d);
    EXPECT_EQ(bring_up_rc(*qp[d], p), Errc::kOk);
  }

  StreamResult r;
  int posted = 0, done = 0;
  std::vector<Sge> sges(kWindow);
  auto post = [&](int i) {
    const std::size_t slot = static_cast<std::size_t>(i % kWindow);
    sges[slot] = Sge{reinterpret_cast<std::uintptr_t>(src.data() + slot * kMsgBytes), kMsgBytes,
                     mr_a->lkey()};
    SendWr w;
    w.wr_id = static_cast<std::uint64_t>(i);
    w.opcode = WrOpcode::kRdmaWrite;
    w.send_flags = kSignaled;
    w.sg_list = {&sges[slot], 1};
    w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data() + slot * kMsgBytes);
    w.rkey = mr_b->rkey();
    EXPECT_EQ(qp[0]->post_send(w), Errc::kOk);
  };
  sim.at(0, [&](TimeNs) {
    while (posted < kWindow && posted < messages) post(posted++);
  });
  sim.set_after_event([&](TimeNs) {
    WorkCompletion wc[16];
    std::size_t n;
    while ((n = cq[0]->poll(wc)) > 0) {
      for (std::size_t i = 0; i < n; ++i) {
        ++done;
        if (wc[i].status == WcStatus::kSuccess) {
          ++r.ok;
        } else {
          if (r.failed++ == 0) r.first_error = wc[i].status;
        }
      }
    }
    while (r.failed == 0 && posted < messages && posted - done < kWindow) post(posted++);
  });
  sim.run_until([&] { return done == posted && (posted == messages || r.failed > 0); });
  r.data_exact = r.failed == 0 && std::memcmp(src.data(), dst.data(), span) == 0;
  r.naks_rx_seq = dev[0]->counters().naks_rx_seq;
  r.duplicated = sim.link(0, 1)->stats().duplicated + sim.link(1, 0)->stats().duplicated;
  r.reordered = sim.link(0, 1)->stats().reordered + sim.link(1, 0)->stats().reordered;
  return r;
}

class StreamFaultTest : public ::testing::TestWithParam<RecoveryMode> {};

TEST_P(StreamFaultTest, DuplicatesAndReorderingLoseNothing) {
  std::uint64_t naks = 0, dups = 0, reorders = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const StreamResult r = run_stream(seed, GetParam(), 0.02, 0.05, 150);
    ASSERT_EQ(r.failed, 0) << "seed=" << seed << " first error " << to_string(r.first_error);
    ASSERT_EQ(r.ok, 150) << "seed=" << seed;
    ASSERT_TRUE(r.data_exact) << "seed=" << seed;
    naks += r.naks_rx_seq;
    dups += r.duplicated;
    reorders += r.reordered;
  }
  // The faults really happened, and reordering really produced sequence NAKs.
  EXPECT_GT(dups, 100u);
  EXPECT_GT(reorders, 100u);
  EXPECT_GT(naks, 20u);
}

TEST_P(StreamFaultTest, FaultsOnOneDirectionOnly) {
  for (int faults : {1, 2}) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const StreamResult r = run_stream(seed, GetParam(), 0.05, 0.1, 100, 16, faults);
      ASSERT_EQ(r.failed, 0) << "seed=" << seed << " faults=" << faults << " first error "
                             << to_string(r.first_error);
      ASSERT_TRUE(r.data_exact) << "seed=" << seed << " faults=" << faults;
    }
  }
}

TEST_P(StreamFaultTest, HeavyDuplicationAlone) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const StreamResult r = run_stream(seed, GetParam(), 0.3, 0.0, 100);
    ASSERT_EQ(r.failed, 0) << "seed=" << seed << " first error " << to_string(r.first_error);
    ASSERT_TRUE(r.data_exact) << "seed=" << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamFaultTest,
                         ::testing::Values(RecoveryMode::kGoBackN, RecoveryMode::kSelectiveRepeat),
                         [](const auto& info) {
                           return info.param == RecoveryMode::kGoBackN ? std::string("GoBackN")
                                                                       : std::string("Selective");
                         });

}  // namespace
}  // namespace weft::harness
