// The fabric daemon (emu/fabricd) with clients attached through io::FabricAttach: RDMA WRITE,
// READ and SEND byte-exact through two switches, injected drops, the status text.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "emu/fabricd/fabric_daemon.hpp"
#include "emu/fabricd/stub_device.hpp"
#include "emu/faults/scenario.hpp"
#include "emu/topo/generators.hpp"
#include "tests/fabricd/two_switches.hpp"
#include "src/io/driver.hpp"
#include "src/io/fabric_attach.hpp"
#include "src/io/medium.hpp"

namespace weft {
namespace {

using test::two_switches;

std::string unique_name(const char* what) {
  return std::string(what) + "-" + std::to_string(getpid());
}

using test::Daemon;

constexpr std::size_t kBytes = 1 << 20;

struct Endpoint {
  explicit Endpoint(const std::string& fabric, std::uint32_t hca, std::size_t bytes = kBytes,
                    bool zero_copy = true)
      : bytes(bytes), fabric(fabric) {
    io::FabricAttachOptions o;
    o.hca = hca;
    o.zero_copy = zero_copy;
    auto r = io::FabricAttach::connect(fabric, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return;
    a = std::move(r).value();
    Device& dev = a->device();
    buf = static_cast<std::uint8_t*>(std::aligned_alloc(4096, bytes));
    std::memset(buf, 0, bytes);
    pd = *dev.alloc_pd();
    cq = *dev.create_cq(4096);
    mr = *dev.reg_mr(
        pd, buf, bytes,
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qp = *dev.create_qp(qa);
  }
  ~Endpoint() { std::free(buf); }
  std::size_t bytes;
  std::string fabric;
  std::unique_ptr<io::FabricAttach> a;
  std::uint8_t* buf = nullptr;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  MemoryRegion* mr = nullptr;
  QueuePair* qp = nullptr;
};

void connect(Endpoint& x, Endpoint& y) {
  io::RcOptions o;
  o.timeout = 14;  // 67 ms per try: a loaded machine may deschedule the daemon for a while
  ASSERT_EQ(io::connect_rc(x.qp, {y.a->lid(), y.qp->qp_num(), 100}, 200, o), Errc::kOk);
  ASSERT_EQ(io::connect_rc(y.qp, {x.a->lid(), x.qp->qp_num(), 200}, 100, o), Errc::kOk);
}

// Drives both clients until `cq` of `e` yields a completion (backs off when idle).
WorkCompletion wait(Endpoint& e, Endpoint& other) {
  WorkCompletion wc{};
  const TimeNs end = io::monotonic_ns() + 20'000'000'000;
  std::uint32_t idle = 0;
  while (io::monotonic_ns() < end) {
    const bool w1 = e.a->driver().progress();
    const bool w2 = other.a->driver().progress();
    if (e.cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1) return wc;
    if (w1 || w2)
      idle = 0;
    else if (++idle > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  ADD_FAILURE() << "no completion";
  wc.status = WcStatus::kGeneralErr;
  return wc;
}

void fill(std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>((i * 131 + seed) ^ (i >> 8));
}

// A signaled RDMA WRITE of `s` to `to`'s buffer at `offset`.
SendWr write_wr(const Endpoint& to, const Sge& s, std::uint64_t wr_id, std::size_t offset = 0) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kRdmaWrite;
  w.send_flags = kSignaled;
  w.sg_list = {&s, 1};
  w.remote_addr = reinterpret_cast<std::uint64_t>(to.buf + offset);
  w.rkey = to.mr->rkey();
  return w;
}

// A signaled SEND of `s`.
SendWr send_wr(const Sge& s, std::uint64_t wr_id) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kSend;
  w.send_flags = kSignaled;
  w.sg_list = {&s, 1};
  return w;
}

void write_read_send(Endpoint& x, Endpoint& y, std::uint32_t seed) {
  // WRITE x -> y, the first half of the buffer.
  const std::size_t half = kBytes / 2;
  fill(x.buf, half, seed);
  const Sge s{reinterpret_cast<std::uint64_t>(x.buf), static_cast<std::uint32_t>(half),
              x.mr->lkey()};
  SendWr w = write_wr(y, s, 1);
  ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
  x.a->driver().kick();
  WorkCompletion wc = wait(x, y);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(std::memcmp(x.buf, y.buf, half), 0);
  // READ y's second half into x's second half.
  fill(y.buf + half, half, seed + 7);
  Sge r{reinterpret_cast<std::uint64_t>(x.buf + half), static_cast<std::uint32_t>(half),
        x.mr->lkey()};
  w.wr_id = 2;
  w.opcode = WrOpcode::kRdmaRead;
  w.sg_list = {&r, 1};
  w.remote_addr = reinterpret_cast<std::uint64_t>(y.buf + half);
  ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
  wc = wait(x, y);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(std::memcmp(x.buf + half, y.buf + half, half), 0);
  // SEND 64 KiB y -> x into a posted receive.
  const std::size_t n = 64 * 1024;
  fill(y.buf, n, seed + 13);
  Sge rs{reinterpret_cast<std::uint64_t>(x.buf), static_cast<std::uint32_t>(n), x.mr->lkey()};
  ASSERT_EQ(x.qp->post_recv(RecvWr{9, {&rs, 1}}), Errc::kOk);
  const Sge ss{reinterpret_cast<std::uint64_t>(y.buf), static_cast<std::uint32_t>(n), y.mr->lkey()};
  ASSERT_EQ(y.qp->post_send(send_wr(ss, 3)), Errc::kOk);
  wc = wait(y, x);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  wc = wait(x, y);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(wc.wr_id, 9u);
  ASSERT_EQ(wc.byte_len, n);
  ASSERT_EQ(std::memcmp(x.buf, y.buf, n), 0);
}

using test::field;

// Why a WR failed: both transports' loss and retry counters and the daemon's status (drops in
// the daemon, held packets, port counters), so that a failure under load names its cause.
std::string why(const Endpoint& x, const Endpoint& y) {
  std::ostringstream o;
  for (const Endpoint* e : {&x, &y}) {
    const DeviceCounters& c = e->a->device().counters();
    o << "lid " << e->a->lid() << ": timeouts " << c.timeouts << " retry_exc " << c.retry_exc
      << " retransmit_packets " << c.retransmit_packets << " naks_rx_seq " << c.naks_rx_seq
      << " naks_tx_seq " << c.naks_tx_seq << " rx_dropped_ooo " << c.rx_dropped_ooo << "\n";
  }
  std::string st;
  fabricd::control(x.fabric, "status", st);
  return o.str() + st;
}

TEST(Fabricd, WriteReadSendThroughTwoSwitches) {
  const std::string name = unique_name("t1");
  Daemon d(name);
  ASSERT_TRUE(d.d);
  EXPECT_EQ(d.d->hca_count(), 4u);
  Endpoint x(name, 0), y(name, 3);  // h0 on s1, h3 on s2
  ASSERT_TRUE(x.a && y.a);
  EXPECT_NE(x.a->lid(), 0);
  EXPECT_NE(y.a->lid(), 0);
  EXPECT_NE(x.a->lid(), y.a->lid());
  EXPECT_EQ(x.a->device().lid(), x.a->lid());
  connect(x, y);
  write_read_send(x, y, 1);
  // The relay loses nothing: no drop, no retransmission.
  EXPECT_EQ(x.a->device().counters().retransmit_packets, 0u);
  EXPECT_EQ(y.a->device().counters().retransmit_packets, 0u);
  EXPECT_EQ(x.a->device().counters().rx_malformed + y.a->device().counters().rx_malformed, 0u);
  // The HCA is taken: a second attach to it is refused; any free one is given.
  io::FabricAttachOptions o;
  o.hca = 0;
  o.timeout_ns = 1'000'000'000;
  EXPECT_FALSE(io::FabricAttach::connect(name, o).ok());
  o.hca = io::kAnyHca;
  auto z = io::FabricAttach::connect(name, o);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ((*z)->hca(), 1u);
}

TEST(Fabricd, StatusInjectDropAndDown) {
  const std::string name = unique_name("t2");
  Daemon d(name);
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 2);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  std::string ans;
  ASSERT_TRUE(fabricd::control(name, "inject s9/3 drop 0.05", ans)) << ans;
  EXPECT_EQ(ans.rfind("error:", 0), 0u) << ans;
  ASSERT_TRUE(fabricd::control(name, "inject s1/3 drop 0.05", ans)) << ans;
  EXPECT_EQ(ans, "ok\n");
  for (std::uint32_t seed = 1; seed <= 3; ++seed) write_read_send(x, y, seed);

  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  std::istringstream in(st);
  std::string line, node;
  std::uint64_t dropped = 0, hcas_attached = 0;
  std::set<std::uint64_t> lids;
  while (std::getline(in, line)) {
    if (line.rfind("fabric ", 0) == 0) hcas_attached = field(line, "attached");
    if (line.rfind("node ", 0) == 0) {
      node = line;
      lids.insert(field(line, "lid"));
    }
    if (line.rfind("  port ", 0) == 0) {
      EXPECT_NE(line.find("state Active"), std::string::npos) << line;
      if (node.find(" s1 ") != std::string::npos || node.find(" s2 ") != std::string::npos)
        if (field(line, "port") == 3) dropped += field(line, "fault_dropped");
    }
  }
  EXPECT_EQ(hcas_attached, 2u);
  EXPECT_EQ(lids.size(), 6u);  // 2 switches + 4 HCAs, all distinct
  EXPECT_FALSE(lids.count(0));
  EXPECT_GT(dropped, 0u) << st;
  // The SM's line: up, one heavy sweep, no port it could not bring to Active.
  EXPECT_NE(st.find("\nsm node 2 lid 3 engine minhop lmc 0 "), std::string::npos) << st;  // on h0
  EXPECT_NE(st.find(" phase subnet-up heavy_sweeps 1 "), std::string::npos) << st;
  EXPECT_NE(st.find(" ports_stuck 0\n"), std::string::npos) << st;

  ASSERT_TRUE(fabricd::control(name, "down", ans)) << ans;
  EXPECT_EQ(ans, "ok\n");
  d.th.join();  // the run loop returned
}

// The status lines of the HCA with index `h`.
std::string hca_line(const std::string& status, std::uint32_t h) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("node ", 0) == 0 && field(line, "hca_index") == h) return line;
  return {};
}

// One WR of `op` with `n` bytes from x (WRITE, READ: x's buffer is the local side) or a SEND
// x -> y into a posted receive; the destination is cleared first, the bytes compared after.
void byte_exact(Endpoint& x, Endpoint& y, WrOpcode op, std::size_t n, std::uint32_t seed) {
  SCOPED_TRACE(std::to_string(n) + " bytes, opcode " + std::to_string(static_cast<int>(op)));
  std::uint8_t* src = op == WrOpcode::kRdmaRead ? y.buf : x.buf;
  std::uint8_t* dst = op == WrOpcode::kRdmaRead ? x.buf : y.buf;
  fill(src, n, seed);
  std::memset(dst, 0, n);
  Sge s{reinterpret_cast<std::uint64_t>(x.buf), static_cast<std::uint32_t>(n), x.mr->lkey()};
  if (op == WrOpcode::kSend) {
    Sge r{reinterpret_cast<std::uint64_t>(y.buf), static_cast<std::uint32_t>(n), y.mr->lkey()};
    ASSERT_EQ(y.qp->post_recv(RecvWr{77, {&r, 1}}), Errc::kOk);
  }
  SendWr w;
  w.wr_id = 5;
  w.opcode = op;
  w.send_flags = kSignaled;
  w.sg_list = {&s, 1};
  w.remote_addr = reinterpret_cast<std::uint64_t>(op == WrOpcode::kRdmaRead ? y.buf : y.buf);
  w.rkey = y.mr->rkey();
  ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
  WorkCompletion wc = wait(x, y);
  ASSERT_EQ(wc.status, WcStatus::kSuccess) << why(x, y);
  if (op == WrOpcode::kSend) {
    wc = wait(y, x);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << why(x, y);
    ASSERT_EQ(wc.wr_id, 77u);
    ASSERT_EQ(wc.byte_len, n);
  }
  ASSERT_EQ(std::memcmp(src, dst, n), 0);
}

// The paths of a payload through the daemon: left in the sender and pulled by the receiver
// (forwarded by reference, the default with zero copy), pulled by the daemon from the sender's
// buffer (zero copy without forwarding), or copied through the rings.
enum class PayloadPath { kForwarded, kPulled, kCopied };
class FabricdPaths : public ::testing::TestWithParam<PayloadPath> {};

TEST_P(FabricdPaths, EveryVerbByteExactFromOneByteToSixtyFourMiB) {
  const PayloadPath path = GetParam();
  const bool zero_copy = path != PayloadPath::kCopied;
  const std::string name = unique_name(path == PayloadPath::kForwarded ? "t3f"
                                       : zero_copy                     ? "t3z"
                                                                       : "t3c");
  fabricd::DaemonOptions dopt;
  dopt.forward_by_ref = path == PayloadPath::kForwarded;
  Daemon d(name, dopt);
  ASSERT_TRUE(d.d);
  constexpr std::size_t kBig = std::size_t{64} << 20;
  // h1 on s1, h2 on s2.
  Endpoint x(name, 1, kBig, zero_copy), y(name, 2, kBig, zero_copy);
  ASSERT_TRUE(x.a && y.a);
  EXPECT_EQ(x.a->zero_copy_tx(), zero_copy);
  EXPECT_EQ(y.a->zero_copy_tx(), zero_copy);
  connect(x, y);
  std::uint32_t seed = 1;
  for (std::size_t n :
       {std::size_t{1}, std::size_t{2}, std::size_t{63}, std::size_t{4095}, std::size_t{4096},
        std::size_t{4097}, std::size_t{65539}, std::size_t{1} << 20, std::size_t{3} << 20, kBig})
    for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead, WrOpcode::kSend}) {
      byte_exact(x, y, op, n, ++seed);
      if (HasFatalFailure()) return;
    }
  // An atomic: FETCH_AND_ADD returns the old value and adds.
  std::uint64_t v = 0x0102030405060708ull;
  std::memcpy(y.buf, &v, 8);
  Sge s{reinterpret_cast<std::uint64_t>(x.buf), 8, x.mr->lkey()};
  SendWr w;
  w.wr_id = 6;
  w.opcode = WrOpcode::kAtomicFetchAndAdd;
  w.send_flags = kSignaled;
  w.sg_list = {&s, 1};
  w.remote_addr = reinterpret_cast<std::uint64_t>(y.buf);
  w.rkey = y.mr->rkey();
  w.compare_add = 5;
  ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
  ASSERT_EQ(wait(x, y).status, WcStatus::kSuccess);
  std::uint64_t old = 0, now = 0;
  std::memcpy(&old, x.buf, 8);
  std::memcpy(&now, y.buf, 8);
  EXPECT_EQ(old, v);
  EXPECT_EQ(now, v + 5);
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  const std::string line = hca_line(st, 1), rline = hca_line(st, 2);
  EXPECT_NE(line.find(zero_copy ? " zero_copy 1" : " zero_copy 0"), std::string::npos) << line;
  const bool fwd = path == PayloadPath::kForwarded;
  EXPECT_NE(st.find(fwd ? " forward_by_ref 1\n" : " forward_by_ref 0\n"), std::string::npos) << st;
  EXPECT_NE(rline.find(fwd ? " forwarded_rx 1" : " forwarded_rx 0"), std::string::npos) << rline;
  // 64 MiB in 4 KiB packets each way (WRITE and SEND from x, READ responses from y), every one
  // of them by the path asked for.
  const std::uint64_t by_ref = x.a->medium().counters().tx_by_ref;
  EXPECT_EQ(by_ref > 16000, zero_copy) << by_ref;
  EXPECT_EQ(field(line, "to_fabric_forwarded"), fwd ? by_ref : 0) << line;
  EXPECT_EQ(field(line, "to_fabric_by_ref"), path == PayloadPath::kPulled ? by_ref : 0) << line;
  // Toward y, every one of x's forwarded packets arrived as a record naming x, and y pulled it
  // from x (the daemon pulled none).
  EXPECT_EQ(field(rline, "to_client_forwarded"), fwd ? by_ref : 0) << rline;
  EXPECT_EQ(y.a->medium().counters().rx_forwarded, fwd ? by_ref : 0);
  EXPECT_EQ(y.a->medium().counters().forwarded_dropped, 0u);
  EXPECT_EQ(y.a->medium().counters().fwd_cma_errors, 0u);
  if (fwd) {
    EXPECT_GT(y.a->medium().counters().fwd_cma_bytes, std::uint64_t{2} * kBig);  // WRITE, SEND
  }
  // ... and READ responses the other way.
  const std::uint64_t y_by_ref = y.a->medium().counters().tx_by_ref;
  EXPECT_EQ(field(rline, "to_fabric_forwarded"), fwd ? y_by_ref : 0) << rline;
  EXPECT_EQ(x.a->medium().counters().rx_forwarded, fwd ? y_by_ref : 0);
  EXPECT_EQ(field(line, "forward_pulls") + field(rline, "forward_pulls"), 0u) << st;
  EXPECT_EQ(field(line, "cma_dropped"), 0u) << line;
  // Nothing dropped toward a process that was slow (a loaded machine deschedules them): what
  // its queue cannot take waits in the fabric (receive gate), and no hold outlives its lifetime.
  for (const std::string* l : {&line, &rline}) {
    EXPECT_EQ(field(*l, "to_client_dropped"), 0u) << *l;
    EXPECT_EQ(field(*l, "hold_discarded"), 0u) << *l;
    EXPECT_EQ(field(*l, "path_lost"), 0u) << *l;
  }
}

INSTANTIATE_TEST_SUITE_P(Fabricd, FabricdPaths,
                         ::testing::Values(PayloadPath::kForwarded, PayloadPath::kPulled,
                                           PayloadPath::kCopied),
                         [](const auto& i) {
                           return i.param == PayloadPath::kForwarded ? "ZeroCopyForwarded"
                                  : i.param == PayloadPath::kPulled  ? "ZeroCopyPulled"
                                                                     : "Copy";
                         });

// A process that stops draining its ring: its queue in the daemon stays within its bound, the
// HCA sending to it stops injecting (back-pressure, as behind a link out of credits) and its own
// queue stays bounded too; once the slow process drains again every byte arrives.
TEST(Fabricd, ASlowProcessBackPressuresItsSenderWithinBounds) {
  const std::string name = unique_name("t4");
  fabricd::DaemonOptions o;
  o.ring_bytes = 64 << 10;  // a small ring fills fast
  o.to_client_packets_max = 32;
  o.to_fabric_packets_max = 16;
  Daemon d(name, o);
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0, 4 << 20), y(name, 3, 4 << 20);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  fill(x.buf, 2 << 20, 3);
  const Sge s{reinterpret_cast<std::uint64_t>(x.buf), 2 << 20, x.mr->lkey()};
  ASSERT_EQ(x.qp->post_send(write_wr(y, s, 1)), Errc::kOk);
  // Only x runs for a while: y's ring (64 KiB) and then its queue (32 packets) fill up.
  const TimeNs until = io::monotonic_ns() + 300'000'000;
  while (io::monotonic_ns() < until) {
    if (!x.a->driver().progress()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  const std::string line = hca_line(st, 3);
  ASSERT_FALSE(line.empty()) << st;
  EXPECT_LE(field(line, "to_client_peak"), 32u) << line;
  EXPECT_GE(field(line, "to_client_peak"), 16u) << line;  // it did fill up
  EXPECT_EQ(field(line, "to_client_dropped"), 0u) << line;
  EXPECT_GT(field(hca_line(st, 0), "stalls"), 0u) << st;
  EXPECT_LE(field(hca_line(st, 0), "to_fabric_peak"), 16u) << st;
  // y drains again: the write completes and every byte is there.
  const WorkCompletion wc = wait(x, y);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(x.buf, y.buf, 2 << 20), 0);
}

// The "  port P" status line of the node described `node`.
std::string port_line(const std::string& status, const std::string& node, int port) {
  std::istringstream in(status);
  std::string line;
  bool in_node = false;
  while (std::getline(in, line)) {
    if (line.rfind("node ", 0) == 0)
      in_node = line.find(" " + node + " lid ") != std::string::npos;
    else if (in_node && line.rfind("  port " + std::to_string(port) + " ", 0) == 0)
      return line;
  }
  return {};
}

// Drives `run` (not the others) for `ns` of wall time, sleeping a little when it had nothing to do.
void drive_only(std::initializer_list<Endpoint*> run, TimeNs ns) {
  const TimeNs until = io::monotonic_ns() + ns;
  while (io::monotonic_ns() < until) {
    bool any = false;
    for (Endpoint* e : run) any |= e->a->driver().progress();
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// A receiver that stops reading in the middle of a large transfer (its process not driven for
// 250 ms, as a descheduled or SIGSTOPped one). Its relay queue is tiny (8 packets: the injection
// stall starts at 4), so what its sender had already pulled into the fabric (the HCA's pipeline
// holds 16 packets) cannot all wait there: before the receive gate the rest was dropped
// (`to_client_dropped` 13-30 per run, each a go-back-N NAK and a resend). Now the packets wait
// in the fabric as behind a link out of credits: in h3's receive buffer (`rx_holds`,
// `rx_held`), then in s2's port toward h3 (`xmit_wait`: it had data and no credit), and nothing is
// lost. Both ways of carrying payloads: copied through the rings and forwarded by reference.
class FabricdHold : public ::testing::TestWithParam<bool> {};

TEST_P(FabricdHold, AReceiverThatStopsReadingIsHeldByCreditsNotDropped) {
  const bool zero_copy = GetParam();
  const std::string name = unique_name(zero_copy ? "t4hz" : "t4hc");
  fabricd::DaemonOptions o;
  o.ring_bytes = 64 << 10;
  o.to_client_packets_max = 8;
  o.to_fabric_packets_max = 16;
  // Receive buffers of 16 KiB per VL (3 packets of 4 KiB) instead of 64: what the sender has in
  // flight when it stops (up to its HCA's pipeline, 16) cannot all wait in h3's buffer, so the
  // switch ports before it hold the rest.
  o.fabric.link.data_vl_buffer_bytes = 16 << 10;
  Daemon d(name, o);
  ASSERT_TRUE(d.d);
  constexpr std::size_t kHalf = 4 << 20;
  Endpoint x(name, 0, 2 * kHalf, zero_copy), y(name, 3, 2 * kHalf, zero_copy);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  // A SEND into a posted receive (the first half) and a WRITE (the second half).
  fill(x.buf, 2 * kHalf, 17);
  Sge rs{reinterpret_cast<std::uint64_t>(y.buf), kHalf, y.mr->lkey()};
  ASSERT_EQ(y.qp->post_recv(RecvWr{31, {&rs, 1}}), Errc::kOk);
  const Sge ss{reinterpret_cast<std::uint64_t>(x.buf), kHalf, x.mr->lkey()};
  ASSERT_EQ(x.qp->post_send(send_wr(ss, 1)), Errc::kOk);
  const Sge ws{reinterpret_cast<std::uint64_t>(x.buf + kHalf), kHalf, x.mr->lkey()};
  ASSERT_EQ(x.qp->post_send(write_wr(y, ws, 2, kHalf)), Errc::kOk);
  x.a->driver().kick();
  drive_only({&x}, 250'000'000);  // y reads nothing meanwhile
  std::string mid;
  ASSERT_TRUE(fabricd::control(name, "status", mid)) << mid;
  // y reads again: every WR completes at both sides, every byte is there.
  for (std::uint64_t id : {1u, 2u}) {
    const WorkCompletion wc = wait(x, y);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << why(x, y);
    EXPECT_EQ(wc.wr_id, id);
  }
  const WorkCompletion rc = wait(y, x);
  ASSERT_EQ(rc.status, WcStatus::kSuccess);
  EXPECT_EQ(rc.wr_id, 31u);
  EXPECT_EQ(rc.byte_len, kHalf);
  EXPECT_EQ(std::memcmp(x.buf, y.buf, 2 * kHalf), 0);
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  const std::string line = hca_line(st, 3), mline = hca_line(mid, 3);
  ASSERT_FALSE(line.empty()) << st;
  EXPECT_EQ(field(line, "to_client_dropped"), 0u) << line;
  EXPECT_EQ(field(line, "path_lost"), 0u) << st;
  EXPECT_LE(field(line, "to_client_peak"), 8u) << line;
  EXPECT_GT(field(hca_line(st, 0), "stalls"), 0u) << st;  // the sender stopped injecting
  // The hold: while y read nothing, packets waited at its HCA's gate and in s2's port to it.
  auto counted = [](const std::string& l, const char* key) {
    const std::uint64_t v = field(l, key);
    EXPECT_NE(v, UINT64_MAX) << "no " << key << " in: " << l;
    return v == UINT64_MAX ? 0 : v;
  };
  EXPECT_GT(counted(mline, "rx_holds"), 0u) << mid;
  EXPECT_GT(counted(mline, "rx_held"), 0u) << mid;
  EXPECT_GT(counted(mline, "rx_held_now"), 0u) << mid;
  EXPECT_EQ(field(line, "rx_held_now"), 0u) << line;
  EXPECT_EQ(field(line, "hold_discarded"), 0u) << line;
  EXPECT_GT(counted(port_line(st, "s2", 2), "xmit_wait"), 0u) << st;
}

INSTANTIATE_TEST_SUITE_P(Fabricd, FabricdHold, ::testing::Bool(),
                         [](const auto& i) { return i.param ? "Forwarded" : "Copied"; });

// A process that never reads again (y on h3): its held packets wait the hold lifetime (here
// 100 ms), then they are dropped and counted (`hold_discarded`), and so is what arrives for it
// afterwards, while it still reads nothing. Meanwhile u (h1) writes to v (h2): its packets share
// s2's input from s1 with x's packets for y, so they wait behind the held ones (head-of-line
// blocking, as on real IB with one data VL) until the hold lifetime frees that input; then the
// WRITE completes byte-exact. Nothing grows: y's queue stays within its bound.
TEST(Fabricd, AProcessThatNeverReadsIsCutOffAfterTheHoldLifetime) {
  const std::string name = unique_name("t4l");
  fabricd::DaemonOptions o;
  o.ring_bytes = 64 << 10;
  o.to_client_packets_max = 8;
  o.to_fabric_packets_max = 16;
  // Receive buffers of 16 KiB per VL (3 packets of 4 KiB) instead of 64: what the sender has in
  // flight when it stops (up to its HCA's pipeline, 16) cannot all wait in h3's buffer, so the
  // switch ports before it hold the rest.
  o.fabric.link.data_vl_buffer_bytes = 16 << 10;
  o.rx_hold_life_ns = 100'000'000;
  Daemon d(name, o);
  ASSERT_TRUE(d.d);
  constexpr std::size_t kLen = 2 << 20;
  Endpoint x(name, 0, kLen), y(name, 3, kLen), u(name, 1, kLen), v(name, 2, kLen);
  ASSERT_TRUE(x.a && y.a && u.a && v.a);
  connect(x, y);
  connect(u, v);
  fill(x.buf, kLen, 5);
  const Sge s{reinterpret_cast<std::uint64_t>(x.buf), kLen, x.mr->lkey()};
  ASSERT_EQ(x.qp->post_send(write_wr(y, s, 1)), Errc::kOk);
  x.a->driver().kick();
  drive_only({&x}, 30'000'000);  // y's ring and queue fill, its gate closes
  std::string mid;
  ASSERT_TRUE(fabricd::control(name, "status", mid)) << mid;
  EXPECT_GT(field(hca_line(mid, 3), "rx_held_now"), 0u) << mid;
  // u writes to v while y still reads nothing.
  fill(u.buf, kLen, 9);
  const Sge us{reinterpret_cast<std::uint64_t>(u.buf), kLen, u.mr->lkey()};
  ASSERT_EQ(u.qp->post_send(write_wr(v, us, 1)), Errc::kOk);
  u.a->driver().kick();
  const TimeNs t0 = io::monotonic_ns(), end = t0 + 5'000'000'000;
  WorkCompletion wc{};
  while (io::monotonic_ns() < end && u.cq->poll(std::span<WorkCompletion>(&wc, 1)) == 0)
    drive_only({&x, &u, &v}, 1'000'000);
  const TimeNs took = io::monotonic_ns() - t0;
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  ASSERT_EQ(wc.status, WcStatus::kSuccess) << "after " << took / 1'000'000 << " ms\n" << st;
  EXPECT_GE(took, 50'000'000u);  // it waited for the hold lifetime (100 ms from the hold's start)
  EXPECT_EQ(std::memcmp(u.buf, v.buf, kLen), 0);
  const std::string line = hca_line(st, 3);
  EXPECT_GT(field(line, "hold_discarded"), 0u) << line;
  EXPECT_EQ(field(line, "rx_held_now"), 0u) << line;
  EXPECT_EQ(field(line, "to_client_dropped"), 0u) << line;
  EXPECT_LE(field(line, "to_client_peak"), 8u) << line;
  EXPECT_EQ(field(hca_line(st, 2), "hold_discarded"), 0u) << st;  // v lost nothing
  std::printf("u's WRITE took %llu ms behind the hold\n",
              static_cast<unsigned long long>(took / 1'000'000));
}

// Credit grants behind data on one QP, as src/coll's transport sends them: multi-packet WRITEs
// each followed by a zero-length SEND WITH IMMEDIATE. Nothing is lost, so the daemon must deliver
// every packet in the order it entered (its per-path check: `reordered 0`, `path_lost 0`), the
// responder must see no PSN gap and the requester resend nothing. Before the receiving HCA's
// model kept its delivery times in order, each SEND overtook the WRITE packets ahead of it (their
// DMA write and host latency): 8,068 packets reordered, 189 go-back-N NAKs and 9,833 packets
// resent for these 320 (each resend overtaken again).
TEST(Fabricd, ZeroLengthSendsBehindWritesArriveInOrder) {
  const std::string name = unique_name("t6");
  Daemon d(name);
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 3);  // across both switches
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  constexpr int kPairs = 64;
  constexpr std::uint32_t kWriteBytes = 3 * 4096 + 100;  // FIRST, 2 MIDDLE, LAST
  fill(x.buf, kWriteBytes, 11);
  Sge s{reinterpret_cast<std::uint64_t>(x.buf), kWriteBytes, x.mr->lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = {&s, 1};
  w.remote_addr = reinterpret_cast<std::uint64_t>(y.buf);
  w.rkey = y.mr->rkey();
  SendWr g;
  g.opcode = WrOpcode::kSendWithImm;
  g.send_flags = kSignaled;
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(y.qp->post_recv(RecvWr{static_cast<std::uint64_t>(i), {}}), Errc::kOk);
    g.wr_id = static_cast<std::uint64_t>(i);
    g.imm_data = 0x80000000u | static_cast<std::uint32_t>(i);
    ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
    ASSERT_EQ(x.qp->post_send(g), Errc::kOk);
  }
  x.a->driver().kick();
  for (int i = 0; i < kPairs; ++i) {
    const WorkCompletion sc = wait(x, y);
    ASSERT_EQ(sc.status, WcStatus::kSuccess) << i;
    const WorkCompletion rc = wait(y, x);
    ASSERT_EQ(rc.status, WcStatus::kSuccess) << i;
    EXPECT_EQ(rc.imm_data, 0x80000000u | static_cast<std::uint32_t>(i));
  }
  EXPECT_EQ(std::memcmp(x.buf, y.buf, kWriteBytes), 0);
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  const std::string line = hca_line(st, 3);
  EXPECT_EQ(field(line, "reordered"), 0u) << line;
  EXPECT_EQ(field(line, "path_lost"), 0u) << line;
  EXPECT_EQ(field(hca_line(st, 0), "reordered"), 0u) << st;  // the ACKs' way back
  const DeviceCounters& cx = x.a->device().counters();
  const DeviceCounters& cy = y.a->device().counters();
  EXPECT_EQ(cy.rx_dropped_ooo, 0u);
  EXPECT_EQ(cy.naks_tx_seq, 0u);
  EXPECT_EQ(cx.retransmit_packets, 0u);
  EXPECT_EQ(cx.timeouts, 0u);
}

// Posts a signaled RDMA WRITE of x's [src, src + n) to `remote` (rkey) in the peer.
void post_write(Endpoint& x, const std::uint8_t* src, std::size_t n, std::uint64_t remote,
                std::uint32_t rkey, std::uint64_t wr_id) {
  Sge s{reinterpret_cast<std::uint64_t>(src), static_cast<std::uint32_t>(n), x.mr->lkey()};
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kRdmaWrite;
  w.send_flags = kSignaled;
  w.sg_list = {&s, 1};
  w.remote_addr = remote;
  w.rkey = rkey;
  ASSERT_EQ(x.qp->post_send(w), Errc::kOk);
}

// Daemon options with the fault scenario `toml` (two_switches' port names) from the start.
fabricd::DaemonOptions with_faults(const std::string& toml) {
  fabricd::DaemonOptions o;
  auto sc = faults::parse_scenario(two_switches(), toml, "test.toml");
  EXPECT_TRUE(sc.ok()) << (sc.ok() ? "" : sc.error().message);
  if (sc.ok()) o.faults = *sc;
  return o;
}

// Waits for one completion of `e` while driving both; kGeneralErr after `limit_ns` (a hang).
WorkCompletion wait_bounded(Endpoint& e, Endpoint& other, TimeNs limit_ns) {
  WorkCompletion wc{};
  const TimeNs end = io::monotonic_ns() + limit_ns;
  std::uint32_t idle = 0;
  while (io::monotonic_ns() < end) {
    const bool w1 = e.a->driver().progress();
    const bool w2 = other.a->driver().progress();
    if (e.cq->poll(std::span<WorkCompletion>(&wc, 1)) == 1) return wc;
    if (w1 || w2)
      idle = 0;
    else if (++idle > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  wc.status = WcStatus::kGeneralErr;
  return wc;
}

// A scenario file applied live (`--faults`): 2 % drop on the inter-switch link from the start,
// and that link down at 150 ms and up at 350 ms on the wall clock while WRITEs stream across
// it. Every WRITE completes (the retries outlast the outage and the SM re-routes on trap 128);
// none hangs; every byte arrives; the status shows the faults and when they happened.
TEST(Fabricd, ScenarioDropsAndALinkDownAndUpUnderTraffic) {
  const std::string name = unique_name("t5");
  Daemon d(name, with_faults(R"(
[[fault]]
link = "s1/p3"
drop = 0.02
[[event]]
at = "150ms"
action = "link-down"
link = "s1/p3"
[[event]]
at = "350ms"
action = "link-up"
link = "s1/p3"
)"));
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 3);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  const TimeNs start = io::monotonic_ns();
  std::uint32_t writes = 0, after_up = 0;
  while (io::monotonic_ns() < start + 700'000'000 || after_up < 3) {
    const std::size_t n = 256 << 10;
    fill(x.buf, n, ++writes);
    std::memset(y.buf, 0, n);
    post_write(x, x.buf, n, reinterpret_cast<std::uint64_t>(y.buf), y.mr->rkey(), writes);
    if (HasFatalFailure()) return;
    const WorkCompletion wc = wait_bounded(x, y, 10'000'000'000);
    ASSERT_NE(wc.status, WcStatus::kGeneralErr) << "write " << writes << " hung";
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << "write " << writes;
    ASSERT_EQ(std::memcmp(x.buf, y.buf, n), 0) << "write " << writes;
    if (io::monotonic_ns() > start + 350'000'000) ++after_up;
    ASSERT_LT(io::monotonic_ns(), start + 20'000'000'000);
  }
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  EXPECT_NE(st.find("link down: s1/p3 - s2/p3"), std::string::npos) << st;
  EXPECT_NE(st.find("link up: s1/p3 - s2/p3"), std::string::npos) << st;
  EXPECT_NE(st.find("faults on s1/p3 (receive)"), std::string::npos) << st;
  EXPECT_GT(x.a->device().counters().retransmit_packets, 0u);
}

// Forwarded payloads (left in the sender, pulled by the receiver) across a link that drops,
// duplicates and holds back packets: the fabric needs no payload bytes for those, so forwarding
// stays on. A duplicate or a held-back packet may arrive after its WRITE completed and the sender
// reused its buffer; the responder is past its PSN then and must not place it (it would pull the
// sender's new bytes). So each WRITE goes to its own slot of y's buffer, the sender refills its
// buffer at once, and every earlier slot is checked again after the stream. Each WRITE is
// followed by a SEND (into a receive of its own): with selective repeat a SEND packet past a gap
// is pulled into a staging slot by a deferred copy, which must land before the responder drains
// the slot (RemotePayload::complete).
class FabricdForwardedRecovery : public ::testing::TestWithParam<RecoveryMode> {};

TEST_P(FabricdForwardedRecovery, ForwardedPayloadsThroughDropsDuplicatesAndReordering) {
  const bool sr = GetParam() == RecoveryMode::kSelectiveRepeat;
  const std::string name = unique_name(sr ? "t7s" : "t7g");
  Daemon d(name, with_faults(R"(
[[fault]]
link = "s1/p3"
drop = 0.01
duplicate = 0.05
reorder = 0.05
reorder_max = "30us"
)"));
  ASSERT_TRUE(d.d);
  constexpr std::size_t kSlot = 192 << 10, kSlots = 24, kSend = 48 << 10;
  Endpoint x(name, 0, kSlot + kSend), y(name, 3, (kSlot + kSend) * kSlots);
  ASSERT_TRUE(x.a && y.a);
  for (QueuePair* qp : {x.qp, y.qp}) {  // RESET -> INIT with the recovery mode; connect goes on
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.access_flags = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    a.recovery = GetParam();
    ASSERT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags | kQpRecoveryMode),
              Errc::kOk);
  }
  connect(x, y);
  std::uint8_t* const sends = y.buf + kSlot * kSlots;  // the receives' buffers
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    fill(x.buf, kSlot + kSend, 1000 + i);
    Sge r{reinterpret_cast<std::uint64_t>(sends + i * kSend), static_cast<std::uint32_t>(kSend),
          y.mr->lkey()};
    ASSERT_EQ(y.qp->post_recv(RecvWr{i, {&r, 1}}), Errc::kOk);
    post_write(x, x.buf, kSlot, reinterpret_cast<std::uint64_t>(y.buf + i * kSlot), y.mr->rkey(),
               i);
    if (HasFatalFailure()) return;
    Sge ss{reinterpret_cast<std::uint64_t>(x.buf + kSlot), static_cast<std::uint32_t>(kSend),
           x.mr->lkey()};
    SendWr sw;
    sw.wr_id = 1000 + i;
    sw.opcode = WrOpcode::kSend;
    sw.send_flags = kSignaled;
    sw.sg_list = {&ss, 1};
    ASSERT_EQ(x.qp->post_send(sw), Errc::kOk);
    for (int k = 0; k < 2; ++k) {
      const WorkCompletion wc = wait_bounded(x, y, 10'000'000'000);
      ASSERT_EQ(wc.status, WcStatus::kSuccess) << "write " << i;
    }
    const WorkCompletion rc = wait_bounded(y, x, 10'000'000'000);
    ASSERT_EQ(rc.status, WcStatus::kSuccess) << "send " << i;
    ASSERT_EQ(std::memcmp(x.buf, y.buf + i * kSlot, kSlot), 0) << "write " << i;
    ASSERT_EQ(std::memcmp(x.buf + kSlot, sends + i * kSend, kSend), 0) << "send " << i;
  }
  // Late copies had their chance to land (the longest hold-back is 30 us of virtual time).
  const TimeNs until = io::monotonic_ns() + 50'000'000;
  while (io::monotonic_ns() < until) {
    x.a->driver().progress();
    y.a->driver().progress();
  }
  std::vector<std::uint8_t> want(kSlot + kSend);
  for (std::uint32_t i = 0; i < kSlots; ++i) {
    fill(want.data(), kSlot + kSend, 1000 + i);
    EXPECT_EQ(std::memcmp(want.data(), y.buf + i * kSlot, kSlot), 0) << "slot " << i;
    EXPECT_EQ(std::memcmp(want.data() + kSlot, sends + i * kSend, kSend), 0) << "send " << i;
  }
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  EXPECT_NE(st.find(" forward_by_ref 1\n"), std::string::npos) << st;
  const std::string line = hca_line(st, 0), rline = hca_line(st, 3);
  EXPECT_GT(field(line, "to_fabric_forwarded"), 1000u) << line;
  EXPECT_EQ(field(line, "to_fabric_by_ref"), 0u) << line;
  EXPECT_GT(field(rline, "to_client_forwarded"), 1000u) << rline;
  EXPECT_GT(x.a->device().counters().retransmit_packets, 0u);  // the drops were felt
  EXPECT_GT(y.a->device().counters().dup_requests, 0u);        // and the duplicates
  if (sr) {
    EXPECT_GT(y.a->device().counters().rx_buffered_ooo, 0u);  // and the gaps
  }
  EXPECT_EQ(y.a->medium().counters().fwd_cma_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fabricd, FabricdForwardedRecovery,
                         ::testing::Values(RecoveryMode::kGoBackN, RecoveryMode::kSelectiveRepeat),
                         [](const auto& i) {
                           return i.param == RecoveryMode::kSelectiveRepeat ? "SelectiveRepeat"
                                                                            : "GoBackN";
                         });

// A port with bit errors flips bits of the packets it receives: the fabric needs their payloads,
// so the daemon pulls them (forwarding off, for every path), and says so. The port is h1's, off
// the path used here (bit errors on the path: FabricdBitErrors below).
TEST(Fabricd, BitErrorsTurnForwardingOff) {
  const std::string name = unique_name("t8");
  Daemon d(name, with_faults("[[fault]]\nlink = \"s1/p2\"\nber = 1e-9\n"));
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 3);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  byte_exact(x, y, WrOpcode::kRdmaWrite, kBytes, 5);
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  EXPECT_NE(st.find(" forward_by_ref 0\n"), std::string::npos) << st;
  const std::string line = hca_line(st, 0);
  EXPECT_EQ(field(line, "to_fabric_forwarded"), 0u) << line;
  EXPECT_GE(field(line, "to_fabric_by_ref"), kBytes / 4096) << line;
  EXPECT_EQ(y.a->medium().counters().rx_forwarded, 0u);
}

// What the bit error tests read from the status: per direction of the faulty link, the packets
// the sending port sent and the receiving port received, dropped by faults or dropped as
// received with errors (its VCRC failed after FEC); per HCA, the per-path loss (numbers that never
// reached the destination's relay).
struct BerCounters {
  std::uint64_t xmit[2], rcv[2], fault_dropped[2], rcv_errors[2], symbol_errors[2];
  std::uint64_t path_lost = 0, to_client_dropped = 0, cma_dropped = 0;
};

// The link between port pa of the node described `a` and port pb of `b`.
BerCounters ber_counters(const std::string& name, const std::string& a, int pa,
                         const std::string& b, int pb) {
  std::string st;
  EXPECT_TRUE(fabricd::control(name, "status", st)) << st;
  BerCounters c{};
  const std::string la = port_line(st, a, pa), lb = port_line(st, b, pb);
  EXPECT_FALSE(la.empty() || lb.empty()) << st;
  // Direction 0: a sends, b receives; direction 1 the other way.
  c.xmit[0] = field(la, "xmit_pkts");
  c.xmit[1] = field(lb, "xmit_pkts");
  for (int d = 0; d < 2; ++d) {
    const std::string& rx = d == 0 ? lb : la;
    c.rcv[d] = field(rx, "rcv_pkts");
    c.fault_dropped[d] = field(rx, "fault_dropped");
    c.rcv_errors[d] = field(rx, "rcv_errors");
    c.symbol_errors[d] = field(rx, "symbol_errors");
  }
  for (std::uint32_t h = 0; h < 4; ++h) {
    const std::string line = hca_line(st, h);
    c.path_lost += field(line, "path_lost");
    c.to_client_dropped += field(line, "to_client_dropped");
    c.cma_dropped += field(line, "cma_dropped");
  }
  return c;
}

// WRITE, SEND and READ both ways between x and y, every byte checked.
void ber_workload(Endpoint& x, Endpoint& y) {
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    byte_exact(x, y, WrOpcode::kRdmaWrite, kBytes, seed);
    if (::testing::Test::HasFatalFailure()) return;
    byte_exact(x, y, WrOpcode::kSend, kBytes / 4, seed + 10);
    if (::testing::Test::HasFatalFailure()) return;
    byte_exact(y, x, WrOpcode::kRdmaWrite, kBytes / 2, seed + 20);
    if (::testing::Test::HasFatalFailure()) return;
    byte_exact(x, y, WrOpcode::kRdmaRead, kBytes / 2, seed + 30);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Bit errors on a link data crosses (IBA 7.8.2): a receiving port checks the VCRC its sender
// computes for that link, so only a packet whose bits FEC could not repair is dropped there, and
// counted (rcv_errors, the PMA's PortRcvErrors); the rest are delivered and RC repairs the loss.
// Processes write no VCRC (CrcMode::kModel), and before the fabric computed it per hop every one
// of their packets failed that check: a dead link instead of a lossy one. Exact counters: on
// each direction of the link, what one end sent the other received or dropped with errors; the
// packets dropped with errors are the numbers the destinations' relays never saw (path_lost).
// BER 2e-5 before FEC 8+2 loses ~4 % of the 4 KiB packets (3 of the 10 shards of ~4300 bits hit).

void expect_lossy_not_dead(const BerCounters& before, const BerCounters& after) {
  std::uint64_t errors = 0;
  for (int d = 0; d < 2; ++d) {
    SCOPED_TRACE("direction " + std::to_string(d));
    EXPECT_EQ(after.xmit[d], after.rcv[d] + after.fault_dropped[d] + after.rcv_errors[d]);
    EXPECT_EQ(after.fault_dropped[d], 0u);
    const std::uint64_t e = after.rcv_errors[d] - before.rcv_errors[d];
    const std::uint64_t got = after.rcv[d] - before.rcv[d];
    std::printf("direction %d: %llu received, %llu dropped with errors, %llu symbol errors\n", d,
                static_cast<unsigned long long>(got), static_cast<unsigned long long>(e),
                static_cast<unsigned long long>(after.symbol_errors[d] - before.symbol_errors[d]));
    EXPECT_GT(after.symbol_errors[d], before.symbol_errors[d]);
    EXPECT_LT(e * 10, got);  // a few percent, not everything
    errors += e;
  }
  EXPECT_GT(errors, 0u);
  EXPECT_EQ(errors, after.path_lost - before.path_lost);
  EXPECT_EQ(after.to_client_dropped + after.cma_dropped, 0u);
}

// On h3's link (both directions, from the start: --faults; forwarding is off from the start).
TEST(FabricdBitErrors, OnAnHcaLinkOnlyThePacketsHitAreDroppedAndCounted) {
  const std::string name = unique_name("t10");
  Daemon d(name, with_faults("[[fault]]\nlink = \"h3/p1\"\nber = 2e-5\n"));
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 3);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  const BerCounters before = ber_counters(name, "s2", 2, "h3", 1);
  ber_workload(x, y);
  if (HasFatalFailure()) return;
  const BerCounters after = ber_counters(name, "s2", 2, "h3", 1);
  expect_lossy_not_dead(before, after);
  EXPECT_GT(x.a->device().counters().retransmit_packets, 0u);
}

// On the inter-switch link, injected on the live link (`inject s1/3 ber`, both directions) while
// forwarding by reference is on: from then on payloads are pulled into the images (none is
// forwarded), and the images already in flight are still delivered.
TEST(FabricdBitErrors, OnASwitchLinkInjectedLiveForwardingGoesOffAndOnlyHitPacketsDrop) {
  const std::string name = unique_name("t11");
  Daemon d(name);
  ASSERT_TRUE(d.d);
  Endpoint x(name, 0), y(name, 3);
  ASSERT_TRUE(x.a && y.a);
  connect(x, y);
  byte_exact(x, y, WrOpcode::kRdmaWrite, kBytes, 99);  // forwarded
  std::string st, ans;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  EXPECT_NE(st.find(" forward_by_ref 1\n"), std::string::npos) << st;
  const std::uint64_t forwarded_x = field(hca_line(st, 0), "to_fabric_forwarded");
  const std::uint64_t forwarded_y = field(hca_line(st, 3), "to_fabric_forwarded");
  EXPECT_GE(forwarded_x, kBytes / 4096);
  ASSERT_TRUE(fabricd::control(name, "inject s1/3 ber 0.01", ans)) << ans;
  EXPECT_EQ(ans.rfind("error: ber wants", 0), 0u) << ans;
  ASSERT_TRUE(fabricd::control(name, "inject s1/3 ber 2e-5", ans)) << ans;
  ASSERT_EQ(ans, "ok\n");
  const BerCounters before = ber_counters(name, "s1", 3, "s2", 3);
  ber_workload(x, y);
  if (HasFatalFailure()) return;
  const BerCounters after = ber_counters(name, "s1", 3, "s2", 3);
  expect_lossy_not_dead(before, after);
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  EXPECT_NE(st.find(" forward_by_ref 0\n"), std::string::npos) << st;
  EXPECT_NE(st.find("faults on s1/p3 (inject): ber=2e-05\n"), std::string::npos) << st;
  EXPECT_NE(st.find("faults on s2/p3 (inject): ber=2e-05\n"), std::string::npos) << st;
  EXPECT_EQ(field(hca_line(st, 0), "to_fabric_forwarded"), forwarded_x) << st;
  EXPECT_EQ(field(hca_line(st, 3), "to_fabric_forwarded"), forwarded_y) << st;
  EXPECT_GE(field(hca_line(st, 0), "to_fabric_by_ref"), 3 * kBytes / 4096) << st;
  EXPECT_GE(field(hca_line(st, 3), "to_fabric_by_ref"), 3 * kBytes / 4096) << st;
  EXPECT_GT(
      x.a->device().counters().retransmit_packets + y.a->device().counters().retransmit_packets,
      0u);
}

// A receiver that may not read the sender (another user: process_vm_readv says EPERM) gets
// forwarded records at first: it drops them unread (they never reach its Device), says so in its
// segment (forwarded_refused), and from then on the daemon pulls for it (at the sender's HCA, or
// at its own for packets already past that point). The sender's retries resend what was dropped;
// every byte arrives. Needs root (to run the receiver as nobody).
TEST(Fabricd, AReceiverThatCannotReadTheSenderGetsThePayloadsPulledByTheDaemon) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the receiver as another user";
  struct Info {
    std::uint16_t lid;
    std::uint32_t qpn;
    std::uint64_t addr;
    std::uint32_t rkey;
  };
  const std::string name = unique_name("t9");
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The receiver: nobody, on h3. Exit 0: every byte of the WRITE arrived and it dropped at
    // least one forwarded record it could not pull.
    char c;
    if (read(to_child[0], &c, 1) != 1 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    Endpoint y(name, 3);
    if (!y.a) _exit(4);
    Info mine{y.a->lid(), y.qp->qp_num(), reinterpret_cast<std::uint64_t>(y.buf), y.mr->rkey()};
    Info peer{};
    if (write(to_parent[1], &mine, sizeof mine) != sizeof mine ||
        read(to_child[0], &peer, sizeof peer) != sizeof peer)
      _exit(5);
    if (io::connect_rc(y.qp, {peer.lid, peer.qpn, 100}, 200) != Errc::kOk) _exit(6);
    if (write(to_parent[1], &c, 1) != 1) _exit(7);
    pollfd done{to_child[0], POLLIN, 0};
    while (poll(&done, 1, 0) == 0)
      if (!y.a->driver().progress()) usleep(20);
    std::vector<std::uint8_t> want(kBytes);
    fill(want.data(), kBytes, 77);
    const bool exact = std::memcmp(want.data(), y.buf, kBytes) == 0;
    const bool dropped = y.a->medium().counters().forwarded_dropped > 0;
    _exit(exact ? (dropped ? 0 : 9) : 8);
  }
  Daemon d(name);
  ASSERT_TRUE(d.d);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  Info peer{};
  ASSERT_EQ(read(to_parent[0], &peer, sizeof peer), static_cast<ssize_t>(sizeof peer));
  Endpoint x(name, 0);
  ASSERT_TRUE(x.a);
  ASSERT_EQ(io::connect_rc(x.qp, {peer.lid, peer.qpn, 200}, 100), Errc::kOk);
  Info mine{x.a->lid(), x.qp->qp_num(), 0, 0};
  ASSERT_EQ(write(to_child[1], &mine, sizeof mine), static_cast<ssize_t>(sizeof mine));
  char c;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);  // its QP is ready
  fill(x.buf, kBytes, 77);
  post_write(x, x.buf, kBytes, peer.addr, peer.rkey, 1);
  if (HasFatalFailure()) return;
  WorkCompletion wc{};
  const TimeNs end = io::monotonic_ns() + 20'000'000'000;
  while (x.cq->poll(std::span<WorkCompletion>(&wc, 1)) == 0 && io::monotonic_ns() < end)
    if (!x.a->driver().progress()) usleep(20);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.wr_id, 1u);
  std::string st;
  ASSERT_TRUE(fabricd::control(name, "status", st)) << st;
  ASSERT_EQ(write(to_child[1], "d", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "receiver status " << status;
  const std::string line = hca_line(st, 0), rline = hca_line(st, 3);
  EXPECT_NE(rline.find(" forwarded_rx 0"), std::string::npos) << rline;  // it refused
  EXPECT_GE(field(rline, "to_client_forwarded"), 1u) << rline;
  // What it could not pull was pulled by the daemon: at the sender's HCA once it knew, or at
  // the receiver's for packets already past it.
  EXPECT_GE(field(line, "to_fabric_by_ref") + field(rline, "forward_pulls"), kBytes / 4096) << st;
  EXPECT_GT(x.a->device().counters().retransmit_packets, 0u);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

// The end of an attached process's link to the daemon, with nothing arriving: the daemon's
// heartbeat is always older than any age the Driver asks about (the daemon runs on another CPU
// but was preempted by the process it woke), so a look that judges it by age finds it stalled.
class AgedDaemonMedium final : public io::Medium {
 public:
  std::size_t rx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  std::size_t tx_burst(Device&, TimeNs, std::size_t) override { return 0; }
  PeerState peer_state(TimeNs seen_after, int) const override {
    ++looks;
    if (seen_after == 0) return PeerState::kRunning;
    ++judged_by_age;
    return PeerState::kStalled;
  }
  mutable std::uint64_t looks = 0, judged_by_age = 0;
};

// An attached process waiting for an answer keeps polling while the daemon runs on another CPU,
// however old its heartbeat, until its spin ends (io::fabric_driver_config): with the direct
// mode's 20 us age limit a ~22 us round trip through the daemon slept in most rounds.
TEST(FabricAttach, AnIdleProcessDoesNotTakeTheDaemonForStalledByItsHeartbeatsAge) {
  const io::DriverConfig c = io::FabricAttachOptions{}.driver;
  EXPECT_GE(c.peer_stall_ns, c.spin_ns);
  EXPECT_GT(c.peer_check_ns, 0u);  // the peer is still looked at (a daemon on this CPU: block)
  io::Driver drv(c);
  fabricd::StubDevice dev(DeviceConfig{});
  AgedDaemonMedium m;
  drv.attach(dev, m);
  // Spins spin_ns (50 us) after the start, looking at the peer every 2 us, then sleeps to the end.
  EXPECT_FALSE(drv.run_until([] { return false; }, 5 * c.spin_ns));
  drv.detach(dev);
  EXPECT_EQ(m.judged_by_age, 0u) << m.looks << " looks";
  EXPECT_EQ(drv.counters().stalled_peers, 0u);
}

}  // namespace
}  // namespace weft
