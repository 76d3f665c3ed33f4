// tests/dpdk/dpdk_test.cpp — the DPDK medium between two processes, each with its own EAL
// (--no-huge --no-pci, no NIC needed): net_af_packet on the two ends of a veth pair whose second
// end lives in a network namespace the test creates and removes (root; MTU 9000 for the 4 KiB RoCE
// MTU). Every verb is checked byte for byte in the peer's memory (the udp test's suite), with
// zero-copy transmit on and off, and a capture of the frames decodes in tshark as RoCE with no
// malformed packet and correct ICRCs. In one process: net_ring loops a Device's zero-copy frames
// back to itself (the payload stays referenced until the receiver frees the chain, and no WR
// completes before), net_tap offloads the IPv4 and UDP checksums (checked on the kernel side of
// the tap), and the checksum flag-setting is checked on an mbuf.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "src/io/direct_node.hpp"
#include "src/io/clock.hpp"
#include "src/io/driver.hpp"
#include "src/io/dpdk/dpdk_medium.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"
#include "tests/io/medium_peer.hpp"
#include "tests/io/udp_end.hpp"

#ifdef WEFT_MEMIF_STOP_HOOK
// A test hook for AMemifServerStopsOnlyAfterTheInterruptThreadsDisconnectReturned (this file
// built as dpdk_stop_test): close(2) on EAL's interrupt thread naps first, which widens a window
// inside DPDK 22.11's memif_disconnect (it closes the queues' eventfds between marking the link
// down and freeing the shared regions) from microseconds to the nap; a close of the same
// descriptor from another thread meanwhile is a second memif_disconnect running into the first
// (the race that crashed CI). This executable's close() is the one librte_net_memif calls (the
// executable comes first in the lookup scope); it makes the system call itself.
namespace {
std::atomic<useconds_t> g_intr_close_nap_us{0};  // 0: the hook is off
std::atomic<int> g_intr_closing_fd{-1};          // what the interrupt thread is closing now
std::atomic<int> g_intr_closes_napped{0}, g_closes_into_intr_close{0};

bool on_eal_intr_thread() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return std::strcmp(name, "eal-intr-thread") == 0;
}
}  // namespace

extern "C" int close(int fd) {
  if (const useconds_t nap = g_intr_close_nap_us.load(); nap != 0 && fd >= 0) {
    if (on_eal_intr_thread()) {
      g_intr_closing_fd.store(fd);
      ++g_intr_closes_napped;
      usleep(nap);
      g_intr_closing_fd.store(-1);
    } else if (fd == g_intr_closing_fd.load()) {
      ++g_closes_into_intr_close;
    }
  }
  return static_cast<int>(syscall(SYS_close, fd));
}
#endif

namespace weft::io::dpdk {
namespace {

using End = test::MediumEnd<DpdkMedium, DpdkConfig>;

std::string run(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    std::array<char, 4096> b;
    std::size_t n;
    while ((n = std::fread(b.data(), 1, b.size(), p)) > 0) out.append(b.data(), n);
    ::pclose(p);
  }
  return out;
}
bool sh(const std::string& c) {
  return std::system(c.c_str()) == 0;
}

// A veth pair: end A in our namespace, end B in a new one; no IP addresses on either (the
// kernel must not answer the RoCE frames), IPv6 off (no neighbour discovery noise).
class VethNetns {
 public:
  VethNetns() {
    const unsigned p = static_cast<unsigned>(getpid());
    ns_ = "weft-dpdk-" + std::to_string(p);
    a_ = "wd" + std::to_string(p % 1000000) + "a";
    b_ = "wd" + std::to_string(p % 1000000) + "b";
    ok_ = sh("ip netns add " + ns_) && sh("ip link add " + a_ + " type veth peer name " + b_) &&
          sh("ip link set " + b_ + " netns " + ns_) &&
          sh("sysctl -qw net.ipv6.conf." + a_ + ".disable_ipv6=1") &&
          sh("ip netns exec " + ns_ + " sysctl -qw net.ipv6.conf." + b_ + ".disable_ipv6=1") &&
          sh("ip link set " + a_ + " mtu 9000 up") &&
          sh("ip -n " + ns_ + " link set " + b_ + " mtu 9000 up");
  }
  ~VethNetns() {
    sh("ip link del " + a_ + " 2>/dev/null");
    sh("ip netns del " + ns_ + " 2>/dev/null");
  }
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  // net_af_packet frames large enough for a 4 KiB RoCE MTU (the default framesz is 2048).
  std::string vdev(bool b) const {
    return "net_af_packet0,iface=" + (b ? b_ : a_) + ",blocksz=16384,framesz=8192,framecnt=512";
  }

 private:
  std::string ns_, a_, b_;
  bool ok_ = false;
};

constexpr std::uint32_t kIpA = 0x0AD60001, kIpB = 0x0AD60002;  // 10.214.0.1 / .2

// A directory of the test's own (stem + pid) under the temporary directory, removed on the way
// out unless kept.
struct TempDir {
  std::filesystem::path path;
  bool keep;
  explicit TempDir(const std::string& stem, bool keep_it = false)
      : path(std::filesystem::temp_directory_path() / (stem + std::to_string(getpid()))),
        keep(keep_it) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    if (!keep) std::filesystem::remove_all(path);
  }
};

// net_memif's arguments past its name and role: a socket file in dir (no abstract socket), and
// the ring Weft's own memif devices use (memif_ring_args: buffers that hold a 4 KiB-MTU frame in
// one descriptor, 128 of them), or `ring` instead.
// The MTU of a memif port with memif_ring_args(): its buffer less the Ethernet header.
constexpr std::uint32_t kMemifMtu = kMemifBufferBytes - wire::kEthHeaderBytes;
std::string memif_args(const std::filesystem::path& dir,
                       const std::string& ring = memif_ring_args()) {
  return ",socket=" + (dir / "memif.sock").string() + ",socket-abstract=no" + ring;
}

class Dpdk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 &&
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())
                .find("AfPacket") != std::string::npos)
      GTEST_SKIP() << "needs root to create a network namespace and a veth pair (ip netns add)";
    if (!sh("command -v ip >/dev/null 2>&1")) GTEST_SKIP() << "iproute2 not installed";
  }
};

// Our end on vdev_a, a dpdk_peer on vdev_b (in netns unless empty): every verb byte for byte,
// both ends sending payloads of 1 KiB and more by reference (zero_copy) or copying everything.
// if_mtu: the MTU the port must report (the veth's; memif's buffers).
// peer_delay_s: the peer process starts its medium that much later (a shell sleeps first).
void check_verbs(const std::string& vdev_a, const std::string& vdev_b, const std::string& netns,
                 const std::string& pcap, std::uint32_t if_mtu, bool zero_copy,
                 const char* peer_delay_s = nullptr) {
  DpdkConfig cfg;
  cfg.vdev = vdev_a;
  cfg.local_ip = kIpA;
  cfg.pcap_path = pcap;
  cfg.zero_copy = zero_copy;
  std::vector<std::string> argv{DPDK_PEER_PATH,          "{fd}",
                                std::to_string(4 << 20), vdev_b,
                                std::to_string(kIpB),    std::to_string(wire::kRoceV2UdpPort)};
  if (!zero_copy) argv.push_back("copy");
  if (peer_delay_s)
    argv.insert(argv.begin(),
                {"/bin/sh", "-c", std::string("sleep ") + peer_delay_s + "; exec \"$0\" \"$@\""});
  test::MediumPeer<End> p(4 << 20, argv, cfg, netns);
  ASSERT_TRUE(p.ready());
  EXPECT_EQ(p.end().medium().if_mtu(), if_mtu);
  EXPECT_EQ(p.end().medium().roce_mtu(), 4096u);
  std::uint64_t seed = 500;
  for (std::uint32_t size : {1u, 8u, 1024u, 4096u, 4097u, 65539u, (1u << 20) + 5, 3u << 20}) {
    test::check_rc_verbs(p, size, seed += 10);
    if (::testing::Test::HasFatalFailure()) {
      const auto& m = p.end().medium().counters();
      ADD_FAILURE() << "medium tx " << m.tx_packets << " rx " << m.rx_packets << " bad_icrc "
                    << m.rx_bad_icrc << " malformed " << m.rx_malformed << " other " << m.rx_other
                    << " no_route " << m.tx_no_route;
      return;
    }
  }
  test::check_atomics(p);
  for (std::uint32_t size : {1u, 1000u, 4096u}) test::check_ud(p, size, seed += 10);
  const auto& c = p.end().medium().counters();
  EXPECT_GT(c.tx_packets, 1000u);
  EXPECT_GT(c.rx_packets, 1000u);
  EXPECT_EQ(c.rx_bad_icrc, 0u);
  EXPECT_EQ(c.rx_malformed, 0u);
  EXPECT_EQ(c.tx_no_route, 0u);
  // Every frame in one mbuf (one memif descriptor), and none too long for the port.
  EXPECT_EQ(c.rx_chained, 0u);
  EXPECT_EQ(c.tx_oversize, 0u);
  // WRITEs of 1 KiB and more (and READ requests' responses on the peer's side) went by reference;
  // the PMD released every chain inside rte_eth_tx_burst (it copies).
  if (zero_copy)
    EXPECT_GT(c.tx_zero_copy, 1000u);
  else
    EXPECT_EQ(c.tx_zero_copy, 0u);
  EXPECT_EQ(p.end().medium().zero_copy_in_flight(), 0u);
}

TEST_F(Dpdk, EveryVerbByteExactOverAfPacketOnVethAndTsharkDecodesTheFrames) {
  const TempDir tmp("weft_dpdk_", std::getenv("WEFT_KEEP_PCAP") != nullptr);
  const std::filesystem::path& dir = tmp.path;
  const std::string file = (dir / "dpdk.pcap").string();
  std::string ns_name;
  {
    VethNetns ns;
    ns_name = ns.ns();
    ASSERT_TRUE(ns.ok()) << "could not set up namespace " << ns.ns();
    check_verbs(ns.vdev(false), ns.vdev(true), ns.ns(), file, 9000, true);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(run("ip netns list | grep -c '^" + ns_name + "\\b' || true"), "0\n");

  // Our own reading of the capture: every frame is RoCEv2 with a correct ICRC, and carries the
  // veth's real MACs.
  std::vector<std::uint32_t> icrcs;
  {
    wire::PcapReader r;
    ASSERT_TRUE(r.open(file));
    EXPECT_EQ(r.linktype(), wire::kLinktypeEthernet);
    while (auto rec = r.next()) {
      auto pk = wire::parse_roce_v2(rec->data, true);
      ASSERT_TRUE(pk.ok()) << "frame " << icrcs.size() + 1;
      EXPECT_NE(rec->data[0] | rec->data[6], 0) << "frame " << icrcs.size() + 1;
      icrcs.push_back(pk->icrc);
    }
  }
  ASSERT_GT(icrcs.size(), 2000u);
  if (!sh("command -v tshark >/dev/null 2>&1")) GTEST_SKIP() << "tshark not installed";
  // The payloads are test patterns: the heuristic dissectors for protocols over IB payloads
  // (RPC-over-RDMA, SMB Direct, ...) would misread short ones as broken upper-layer messages.
  std::string ts = "tshark -n -r '" + file + "'";
  for (const char* h : {"rpcordma", "iser", "smb_direct", "nvme-rdma", "lnet", "smc",
                        "infiniband_sdp", "fcoib", "eoib"})
    ts += std::string(" --disable-protocol ") + h;
  const std::string out =
      run(ts + " -T fields -E separator=/t -e udp.dstport -e infiniband.bth.opcode" +
          " -e infiniband.invariant.crc -e _ws.malformed 2>/dev/null");
  std::vector<std::string> lines;
  for (std::size_t a = 0, b; a < out.size(); a = b + 1) {
    b = out.find('\n', a);
    if (b == std::string::npos) b = out.size();
    if (b > a) lines.push_back(out.substr(a, b - a));
  }
  ASSERT_EQ(lines.size(), icrcs.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    unsigned port = 0, op = 0, crc = 0;
    const bool ok = std::sscanf(lines[i].c_str(), "%u\t%u\t%x", &port, &op, &crc) == 3 &&
                    port == wire::kRoceV2UdpPort && __builtin_bswap32(crc) == icrcs[i] &&
                    lines[i].back() == '\t';
    if (!ok && ++bad < 5) ADD_FAILURE() << "frame " << i + 1 << ": " << lines[i];
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(run(ts + " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null"), "");
}

// net_memif between the two processes (server here, client in the peer; a socket file in a
// directory of the test's own; memif_ring_args: a 4 KiB-MTU frame is one descriptor).
TEST_F(Dpdk, EveryVerbByteExactOverMemifBetweenTwoProcesses) {
  const TempDir tmp("weft_memif_");
  const std::string args = memif_args(tmp.path);
  // No MTU setting in net_memif: its bsize bounds the frames (port_mtu).
  for (bool zero_copy : {true, false}) {
    SCOPED_TRACE(zero_copy ? "zero copy" : "copy");
    check_verbs("net_memif0,role=server" + args, "net_memif0,role=client" + args, "", "", kMemifMtu,
                zero_copy);
    if (HasFatalFailure()) return;
  }
}

// DPDK's default memif buffers (2048 bytes): the port's MTU is the buffer less the Ethernet
// header, so its RoCE MTU is 1024, and a longer frame is dropped (tx_oversize) rather than
// chained over several descriptors, which DPDK 22.11's memif loses frames with (port_mtu: seen
// with bsize 2048 and 4096 in check_verbs). Without the bound the 4 KiB frame went out chained and
// took the receive posted for the next send.
TEST_F(Dpdk, AMemifWithDefaultBuffersCarriesRoceMtu1024AndDropsLongerFrames) {
  const TempDir tmp("weft_memif_small_");
  const std::string args = memif_args(tmp.path, "");
  DpdkConfig cfg;
  cfg.vdev = "net_memif0,role=server" + args;
  cfg.local_ip = kIpA;
  test::MediumPeer<End> p(
      4 << 20,
      {DPDK_PEER_PATH, "{fd}", std::to_string(4 << 20), "net_memif0,role=client" + args,
       std::to_string(kIpB), std::to_string(wire::kRoceV2UdpPort)},
      cfg);
  ASSERT_TRUE(p.ready());
  const DpdkMedium& m = p.end().medium();
  EXPECT_EQ(m.if_mtu(), 2048u - 14);
  EXPECT_EQ(m.roce_mtu(), 1024u);
  test::check_rc_verbs(p, 1024, 600);  // one packet each, well within a buffer
  test::check_ud(p, 1000, 610);
  EXPECT_EQ(m.counters().tx_oversize, 0u);
  // Our QPs' path MTU is 4096, above the port's: a 4000-byte UD send is one 4.1 KB frame.
  test::fill_pattern(p.buf(), 4000, 615);
  ASSERT_EQ(p.post_ud(4000, 7), Errc::kOk);
  EXPECT_ONE_OK(p);  // a UD send completes when it leaves (IBA 9.8.3.1)
  EXPECT_EQ(m.counters().tx_oversize, 1u);
  for (std::uint64_t i = 0; i < 4; ++i) test::check_ud(p, 1000, 620 + i);
  EXPECT_EQ(m.counters().rx_chained, 0u);
}

// The same with memif's own zero copy on the peer's end (`zero-copy=yes`: a client whose mbufs
// are the rings' buffers; EAL's default --single-file-segments lets it start). memif's zero-copy
// transmit describes every segment by its offset in the client's mempool memory, so the peer's
// medium must not attach payloads where they lie in its memory regions (our end, memif's server,
// copies and may). Without that guard (dpdk17) 2 runs of 3 ended without a test result (the
// process died) and the third failed: no frame of the peer's arrived.
TEST_F(Dpdk, EveryVerbByteExactOverMemifWithAZeroCopyClient) {
  const TempDir tmp("weft_memif_zc_");
  const std::string args = memif_args(tmp.path);
  check_verbs("net_memif0,role=server" + args, "net_memif0,role=client" + args + ",zero-copy=yes",
              "", "", kMemifMtu, true);
}

// Our end the memif client, started while the peer process (the server) sleeps 0.5 s before it
// starts: a client's start fails while nothing listens on the socket ("Failed to connect
// socket"), and the medium tries again (kMemifClientStartNs).
TEST_F(Dpdk, AMemifClientStartedBeforeItsServerListensConnects) {
  const TempDir tmp("weft_memif_first_");
  const std::string args = memif_args(tmp.path);
  check_verbs("net_memif0,role=client" + args, "net_memif0,role=server" + args, "", "", kMemifMtu,
              true, "0.5");
}

// Starts dpdk_peer as a memif client ("net_memif0,role=client" + args) that sends `count` UD
// messages of last words and leaves (dpdk_peer.cpp); sv[0] is our end of its control socket.
pid_t start_last_words_peer(const std::string& args, std::size_t count, int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    const std::string fd = std::to_string(dup(sv[1]));
    const std::string vdev = "net_memif0,role=client" + args, ip = std::to_string(kIpB),
                      port = std::to_string(wire::kRoceV2UdpPort), n = std::to_string(count);
    execl(DPDK_PEER_PATH, DPDK_PEER_PATH, fd.c_str(), n.c_str(), vdev.c_str(), ip.c_str(),
          port.c_str(), "last-words", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  return child;
}

// Our side of a last-words session: on end's Device a UD QP with `count` receives of `each`
// bytes posted in buf (sized here), its QPN told to the peer. Returns the QP's CQ, or nullptr.
CompletionQueue* post_ud_receives(End& end, std::vector<std::uint8_t>& buf, std::size_t count,
                                  std::uint32_t each) {
  Device& dev = end.device();
  buf.assign(count * each, 0);
  ProtectionDomain* pd = *dev.alloc_pd();
  CompletionQueue* cq = *dev.create_cq(1024);
  MemoryRegion* mr = *dev.reg_mr(pd, buf.data(), buf.size(), kAccessLocalWrite);
  QpInitAttr qa;
  qa.pd = pd;
  qa.send_cq = qa.recv_cq = cq;
  qa.type = QpType::kUd;
  QueuePair* ud = *dev.create_qp(qa);
  if (connect_ud(ud, test::kPeerQkey) != Errc::kOk) return nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    Sge sge{reinterpret_cast<std::uint64_t>(buf.data() + i * each), each, mr->lkey()};
    if (ud->post_recv(RecvWr{i, {&sge, 1}}) != Errc::kOk) return nullptr;
  }
  const test::PeerInfo mine{0, ud->qp_num(), 0, 0, 0, 0};
  return end.send(&mine, sizeof mine) ? cq : nullptr;
}

// The end of a session over net_memif (src/io/dpdk/README.md, "Ending a session"): memif drops
// what the other side has not read yet when either side leaves. The peer (memif client) sends 32
// UD messages and leaves at once; we (the server) start reading only after it has said so and a
// pause in which it would have gone. Every message arrives, byte for byte, because the peer's
// medium waits for our answer to its BYE, which we give only after taking every frame before it.
// (Before, this server received nothing: the client's disconnect took its ring.)
TEST_F(Dpdk, AMemifClientsLastFramesArriveThoughItsServerReadsThemAfterItLeft) {
  const TempDir tmp("weft_memif_end_");
  const std::string args = memif_args(tmp.path);
  constexpr std::size_t kCount = 32;
  constexpr std::uint32_t kBytes = 1000;   // dpdk_peer's kLastWordsBytes
  constexpr std::uint32_t kGrhBytes = 40;  // a UD receive buffer starts with the GRH (IBA 11.4.1.2)
  int sv[2];
  const pid_t child = start_last_words_peer(args, kCount, sv);
  ASSERT_GT(child, 0);
  {
    DpdkConfig cfg;
    cfg.vdev = "net_memif0,role=server" + args;
    cfg.local_ip = kIpA;
    End end(sv[0], 1, cfg);
    ASSERT_TRUE(end.ok()) << end.medium().error();
    ASSERT_TRUE(end.introduce(1));
    std::vector<std::uint8_t> buf;
    CompletionQueue* cq = post_ud_receives(end, buf, kCount, kGrhBytes + kBytes);
    ASSERT_NE(cq, nullptr);
    auto said = end.recv(60);  // the peer's last words have left its Device
    ASSERT_TRUE(said && said->size() == 1);
    usleep(200'000);  // not reading: the peer goes on leaving meanwhile
    std::vector<WorkCompletion> got;
    end.driver().run_until(
        [&] {
          WorkCompletion wc[16];
          for (std::size_t k; (k = cq->poll(wc)) > 0;) got.insert(got.end(), wc, wc + k);
          return got.size() >= kCount;
        },
        30'000'000'000);
    ASSERT_EQ(got.size(), kCount) << "medium rx " << end.medium().counters().rx_packets;
    for (std::size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(got[i].status, WcStatus::kSuccess);
      EXPECT_EQ(got[i].wr_id, i);
      EXPECT_EQ(got[i].byte_len, kGrhBytes + kBytes);
      EXPECT_EQ(test::check_pattern(buf.data() + i * (kGrhBytes + kBytes) + kGrhBytes, kBytes, i),
                kBytes)
          << "message " << i;
    }
    EXPECT_EQ(end.medium().counters().byes_answered, 1u);
    EXPECT_EQ(end.medium().counters().rx_packets, kCount);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer status " << st;
}

#ifdef WEFT_MEMIF_STOP_HOOK
// Ending a memif session while EAL's interrupt thread is still inside the disconnect that the
// client's departure started (src/io/dpdk/README.md, "Ending a session"): the close() hook at
// the top makes that disconnect last ~1 s (a nap per descriptor it closes). Our server's medium
// sees the link go down at the disconnect's start; it must stop its port only after the
// interrupt thread's disconnect has returned (~DpdkMedium's barrier). Without the barrier it
// stopped at once: its own memif_disconnect closed a descriptor the interrupt thread was closing
// (counted here) and freed the shared regions under it (CI: SEGV in rte_free). Only in
// dpdk_stop_test: the hook slows every close on the interrupt thread, which other tests mind.
TEST_F(Dpdk, AMemifServerStopsOnlyAfterTheInterruptThreadsDisconnectReturned) {
  const TempDir tmp("weft_memif_stop_");
  struct HookOff {
    ~HookOff() { g_intr_close_nap_us.store(0); }
  } hook_off;
  const std::string args = memif_args(tmp.path);
  constexpr std::size_t kCount = 4;
  constexpr useconds_t kNapUs = 300'000;
  int sv[2];
  const pid_t child = start_last_words_peer(args, kCount, sv);
  ASSERT_GT(child, 0);
  {
    DpdkConfig cfg;
    cfg.vdev = "net_memif0,role=server" + args;
    cfg.local_ip = kIpA;
    End end(sv[0], 1, cfg);
    ASSERT_TRUE(end.ok()) << end.medium().error();
    ASSERT_TRUE(end.introduce(1));
    std::vector<std::uint8_t> buf;
    CompletionQueue* cq = post_ud_receives(end, buf, kCount, 2048);
    ASSERT_NE(cq, nullptr);
    auto said = end.recv(60);  // the peer's last words have left its Device
    ASSERT_TRUE(said && said->size() == 1);
    g_intr_close_nap_us.store(kNapUs);  // from here the client's leaving is slow on our side
    std::size_t got = 0;
    end.driver().run_until(
        [&] {
          WorkCompletion wc[16];
          got += cq->poll(wc);
          return got >= kCount;
        },
        30'000'000'000);
    ASSERT_EQ(got, kCount);
    // The medium goes here, while the client leaves (it does once we answered its BYE).
  }
  EXPECT_GE(g_intr_closes_napped.load(), 1) << "the interrupt thread closed nothing: the client's "
                                               "departure did not reach it (the hook did not act)";
  EXPECT_EQ(g_closes_into_intr_close.load(), 0)
      << "the port was stopped while the interrupt thread was inside memif_disconnect";
  g_intr_close_nap_us.store(0);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer status " << st;
}
#endif

// The copying path over af_packet (the capture test above sends by reference).
TEST_F(Dpdk, EveryVerbByteExactOverAfPacketOnVethWithoutZeroCopy) {
  VethNetns ns;
  ASSERT_TRUE(ns.ok()) << "could not set up namespace " << ns.ns();
  check_verbs(ns.vdev(false), ns.vdev(true), ns.ns(), "", 9000, false);
}

TEST_F(Dpdk, AnUnknownDeviceIsReported) {
  DpdkConfig cfg;
  cfg.vdev = "net_af_packet9,iface=weft-no-such-if";
  DpdkMedium m(cfg);
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.error().find("cannot probe 'net_af_packet9,iface=weft-no-such-if'"),
            std::string::npos)
      << m.error();
}

// Starts `dpdk_peer FD eal` (the EAL with the default arguments, WEFT_DPDK_ARGS cleared) and
// returns its PID, *dir the run-time directory it reported once eal_init had returned (empty when
// it said nothing within 30 s).
pid_t start_eal_peer(std::string* dir) {
  dir->clear();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    unsetenv("WEFT_DPDK_ARGS");
    const std::string fd = std::to_string(dup(sv[1]));
    execl(DPDK_PEER_PATH, DPDK_PEER_PATH, fd.c_str(), "eal", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  pollfd p{sv[0], POLLIN, 0};
  char path[4096];
  if (poll(&p, 1, 30'000) == 1) {
    const ssize_t n = read(sv[0], path, sizeof path);
    if (n > 0) dir->assign(path, static_cast<std::size_t>(n));
  }
  close(sv[0]);
  return child;
}

// A process that a signal ends never reaches eal_cleanup(), and such processes left empty
// /var/run/dpdk/weft-PID directories behind. With the default EAL arguments the directory is gone
// once eal_init has returned (nothing in it is needed after rte_eal_init), so a process killed
// after it leaves none; one killed inside rte_eal_init leaves an empty directory, which the next
// process's eal_init removes (its PID is gone; a live process's is kept).
TEST_F(Dpdk, AProcessKilledAfterEalInitLeavesNoRuntimeDirectory) {
  std::string dir;
  pid_t child = start_eal_peer(&dir);
  ASSERT_GT(child, 0);
  const std::filesystem::path got = dir;
  EXPECT_EQ(got.filename().string(), "weft-" + std::to_string(child)) << dir;
  EXPECT_FALSE(std::filesystem::exists(got)) << dir << " is still there after eal_init";
  kill(child, SIGKILL);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << st;
  EXPECT_FALSE(std::filesystem::exists(got)) << dir << " left behind by a killed process";
  ASSERT_FALSE(dir.empty());

  // A process killed inside rte_eal_init, as its directory looks: empty, named after a PID
  // that has gone (a child that has exited); and one of a live process (ours), to be kept.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, &st, 0), gone);
  const std::filesystem::path base = got.parent_path();
  const std::filesystem::path stale = base / ("weft-" + std::to_string(gone));
  const std::filesystem::path live = base / ("weft-" + std::to_string(getpid()));
  const bool live_was_there = std::filesystem::exists(live);
  std::filesystem::create_directories(stale);
  std::filesystem::create_directories(live);
  child = start_eal_peer(&dir);
  ASSERT_GT(child, 0);
  EXPECT_FALSE(dir.empty());
  EXPECT_FALSE(std::filesystem::exists(stale)) << stale << " (its process gone) was not removed";
  EXPECT_TRUE(std::filesystem::exists(live)) << live << " (its process alive) was removed";
  kill(child, SIGKILL);
  waitpid(child, &st, 0);
  std::error_code ec;
  std::filesystem::remove(stale, ec);
  if (!live_was_there) std::filesystem::remove(live, ec);
}

// One Device (LID 1) on a medium in this process, with a PD, a CQ, a source and a destination
// buffer and two RC QPs: `a` sends, `b` (on the same Device, or none) receives.
struct LocalDevice {
  static constexpr std::size_t kBytes = 64 << 10;
  explicit LocalDevice(DpdkMedium& m) : medium(m), rng(7) {
    DeviceConfig dc;
    dc.ports[0].lid = 1;
    dc.crc = CrcMode::kModel;  // the medium computes and checks the ICRC
    dev = Device::create(dc, rng);
    src.assign(kBytes, 0);
    dst.assign(kBytes, 0);
    pd = *dev->alloc_pd();
    cq = *dev->create_cq(64);
    src_mr = *dev->reg_mr(pd, src.data(), kBytes, kAccessLocalWrite);
    dst_mr = *dev->reg_mr(pd, dst.data(), kBytes, kAccessLocalWrite | kAccessRemoteWrite);
    QpInitAttr qa;
    qa.pd = pd;
    qa.send_cq = qa.recv_cq = cq;
    a = *dev->create_qp(qa);
    b = *dev->create_qp(qa);
  }
  Errc write(std::uint32_t len, std::uint64_t wr_id) {
    Sge sge{reinterpret_cast<std::uint64_t>(src.data()), len, src_mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSignaled;
    wr.sg_list = {&sge, 1};
    wr.remote_addr = reinterpret_cast<std::uint64_t>(dst.data());
    wr.rkey = dst_mr->rkey();
    return a->post_send(wr);
  }
  DpdkMedium& medium;
  SeededRng rng;
  std::unique_ptr<Device> dev;
  std::vector<std::uint8_t> src, dst;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* cq = nullptr;
  MemoryRegion *src_mr = nullptr, *dst_mr = nullptr;
  QueuePair *a = nullptr, *b = nullptr;
};

// net_ring loops a port's frames back to itself and hands the receiver the very mbufs that were
// sent, so a zero-copy chain stays alive (its payload referenced) until our own rx_burst has
// consumed it: the one vdev here where the PMD holds a payload past rte_eth_tx_burst, as a NIC
// does until it reclaims its ring.
TEST_F(Dpdk, AZeroCopyPayloadStaysReferencedUntilThePortFreesItAndNoWrCompletesBefore) {
  DpdkConfig cfg;
  cfg.vdev = "net_ring_weft0";
  cfg.local_ip = kIpA;
  DpdkMedium m(cfg);
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_FALSE(m.physical());
  LocalDevice d(m);
  m.add_peer(1, kIpA, cfg.port, m.mac());  // LID 1 is ourselves
  ASSERT_EQ(io::connect_rc(d.a, {1, d.b->qp_num(), 0x200}, 0x100), Errc::kOk);
  ASSERT_EQ(io::connect_rc(d.b, {1, d.a->qp_num(), 0x100}, 0x200), Errc::kOk);
  std::string err;
  ASSERT_TRUE(m.register_memory(d.src.data(), d.src.size(), &err)) << err;
  test::fill_pattern(d.src.data(), 16 << 10, 77);

  // Four 4 KiB packets (RoCE MTU 4096), each payload attached where it lies in d.src.
  ASSERT_EQ(d.write(16 << 10, 1), Errc::kOk);
  TimeNs now = 1'000'000;
  EXPECT_EQ(m.tx_burst(*d.dev, now, 32), 4u);
  EXPECT_EQ(m.counters().tx_zero_copy, 4u);
  EXPECT_EQ(m.zero_copy_in_flight(), 4u);
  // Still referenced by the port: the region may not go.
  EXPECT_FALSE(m.unregister_memory(d.src.data()));

  // Until the WR completes, at every step: a completion is never visible while a payload of it is
  // still referenced.
  std::vector<WorkCompletion> wcs;
  for (int pass = 0; pass < 1000 && wcs.empty(); ++pass) {
    now += 1000;
    m.rx_burst(*d.dev, now, 32);
    WorkCompletion wc[4];
    const std::size_t k = d.cq->poll(wc);
    if (k) {
      EXPECT_EQ(m.zero_copy_in_flight(), 0u) << "a completion came before its payload was freed";
    }
    wcs.insert(wcs.end(), wc, wc + k);
    m.tx_burst(*d.dev, now, 32);
    if (d.dev->next_deadline() <= now) d.dev->on_deadline(now);
  }
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << to_string(wcs[0].status);
  EXPECT_EQ(m.zero_copy_in_flight(), 0u);
  EXPECT_EQ(std::memcmp(d.dst.data(), d.src.data(), 16 << 10), 0);
  EXPECT_EQ(m.counters().rx_bad_icrc, 0u);
  EXPECT_TRUE(m.unregister_memory(d.src.data()));

  // Below the threshold (and with zero copy off) the payload is copied: nothing stays referenced.
  ASSERT_EQ(d.write(1000, 2), Errc::kOk);
  EXPECT_EQ(m.tx_burst(*d.dev, now, 32), 1u);
  EXPECT_EQ(m.counters().tx_zero_copy, 4u);
  EXPECT_EQ(m.zero_copy_in_flight(), 0u);
}

// The checksum offload logic, table-driven on capabilities, and the fields it sets on an mbuf
// (rte_mbuf_core.h: RTE_MBUF_F_TX_IPV4 | IP_CKSUM | UDP_CKSUM, l2_len, l3_len, IPv4 checksum 0,
// UDP checksum = the pseudo-header sum).
TEST_F(Dpdk, ChecksumOffloadFlagsFollowTheCapabilitiesAndDpdkRules) {
  struct Case {
    std::uint64_t capa;
    bool allow, ip, udp;
  } cases[] = {
      {0, true, false, false},
      {RTE_ETH_TX_OFFLOAD_IPV4_CKSUM, true, true, false},
      {RTE_ETH_TX_OFFLOAD_UDP_CKSUM, true, false, true},
      {RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM | RTE_ETH_TX_OFFLOAD_MULTI_SEGS,
       true, true, true},
      {RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM, false, false, false},
      {RTE_ETH_TX_OFFLOAD_TCP_CKSUM, true, false, false},
  };
  for (const Case& c : cases) {
    const TxChecksum t = choose_tx_checksum(c.capa, c.allow);
    EXPECT_EQ(t.ip, c.ip) << std::hex << c.capa << " " << c.allow;
    EXPECT_EQ(t.udp, c.udp) << std::hex << c.capa << " " << c.allow;
    EXPECT_EQ(tx_checksum_offloads(t), (c.ip ? RTE_ETH_TX_OFFLOAD_IPV4_CKSUM : 0u) |
                                           (c.udp ? RTE_ETH_TX_OFFLOAD_UDP_CKSUM : 0u));
  }

  std::string err;
  ASSERT_TRUE(eal_init({}, &err)) << err;
  rte_mempool* pool =
      rte_pktmbuf_pool_create("weft_csum_test", 63, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);
  roce::FrameAddr a;
  a.src_ip = kIpA;
  a.dst_ip = kIpB;
  a.src_port = 49152;
  constexpr std::size_t kDatagram = 1000;
  for (const TxChecksum t : {TxChecksum{false, false}, TxChecksum{true, false},
                             TxChecksum{false, true}, TxChecksum{true, true}}) {
    SCOPED_TRACE(std::to_string(t.ip) + std::to_string(t.udp));
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    ASSERT_NE(m, nullptr);
    auto* f = rte_pktmbuf_mtod(m, std::uint8_t*);
    roce::write_frame_head(f, a, kDatagram);
    m->data_len = static_cast<std::uint16_t>(roce::kFrameHead + kDatagram);
    m->pkt_len = m->data_len;
    std::vector<std::uint8_t> before(f, f + roce::kFrameHead);
    prepare_tx_checksum(m, t);
    std::uint8_t* ip = f + 14;
    std::uint8_t* udp = ip + 20;
    if (!t.ip && !t.udp) {
      EXPECT_EQ(m->ol_flags, 0u);
      EXPECT_EQ(std::memcmp(before.data(), f, before.size()), 0);
      rte_pktmbuf_free(m);
      continue;
    }
    EXPECT_EQ(m->ol_flags, RTE_MBUF_F_TX_IPV4 | (t.ip ? RTE_MBUF_F_TX_IP_CKSUM : 0) |
                               (t.udp ? RTE_MBUF_F_TX_UDP_CKSUM : 0));
    EXPECT_EQ(m->l2_len, 14u);
    EXPECT_EQ(m->l3_len, 20u);
    // IPv4 checksum: 0 for the port to fill in, else the software one (unchanged).
    EXPECT_EQ(ip[10] << 8 | ip[11], t.ip ? 0 : before[24] << 8 | before[25]);
    // UDP: the one's-complement sum, not complemented, of source and destination address,
    // protocol 17 and the UDP length (RFC 768's pseudo-header), in network order.
    std::uint32_t sum = (kIpA >> 16) + (kIpA & 0xFFFF) + (kIpB >> 16) + (kIpB & 0xFFFF) + 17 +
                        static_cast<std::uint32_t>(kDatagram + 8);  // UDP header + datagram
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    EXPECT_EQ(udp[6] << 8 | udp[7], t.udp ? static_cast<int>(sum) : 0);
    rte_pktmbuf_free(m);
  }
  rte_mempool_free(pool);
}

// One's-complement sum of 16-bit big-endian words (RFC 1071), not complemented.
std::uint32_t ones_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
  for (std::size_t i = 0; i + 1 < n; i += 2)
    sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return sum;
}

// net_tap offers IPv4 and UDP checksum offload (it computes them itself, as a NIC would): frames
// a Device sends through it, copied and by reference, arrive on the kernel's side of the tap with
// both checksums right; with the offload turned off the IPv4 checksum is ours and UDP's is 0.
TEST_F(Dpdk, ChecksumsAreRightOnTheWireWithOffloadOnNetTapAndInSoftware) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for net_tap (/dev/net/tun)";
  for (bool offload : {true, false}) {
    SCOPED_TRACE(offload ? "offload" : "software");
    const std::string ifname = "wdtap" + std::to_string(getpid() % 100000);
    DpdkConfig cfg;
    cfg.vdev = "net_tap_weft0,iface=" + ifname;
    cfg.local_ip = kIpA;
    cfg.checksum_offload = offload;
    cfg.link_wait_ns = 0;
    DpdkMedium m(cfg);
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_EQ(m.tx_checksum().ip, offload);
    EXPECT_EQ(m.tx_checksum().udp, offload);
    sh("sysctl -qw net.ipv6.conf." + ifname + ".disable_ipv6=1");

    // The frames the port sends are what the kernel receives on the tap.
    const int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
    ASSERT_GE(s, 0);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_IP);
    sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    ASSERT_NE(sll.sll_ifindex, 0);
    ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&sll), sizeof sll), 0);
    timeval tv{2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    LocalDevice d(m);
    m.add_peer(2, kIpB, wire::kRoceV2UdpPort, roce::kPcapDstMac);  // nobody answers
    // net_tap carries frames of at most 1522 bytes (no jumbo frames): RoCE MTU 1024.
    io::RcOptions o;
    o.mtu = Mtu::k1024;
    ASSERT_EQ(io::connect_rc(d.a, {2, 0x55, 0x200}, 0x100, o), Errc::kOk);
    test::fill_pattern(d.src.data(), 1024 + 33, 9);
    ASSERT_EQ(d.write(33, 1), Errc::kOk);         // copied (odd: a pad byte)
    ASSERT_EQ(d.write(1024 + 33, 2), Errc::kOk);  // 1 KiB by reference, then 33 copied
    EXPECT_EQ(m.tx_burst(*d.dev, 1000, 32), 3u);
    EXPECT_EQ(m.counters().tx_zero_copy, 1u);
    std::size_t seen = 0;
    std::vector<std::uint8_t> f(16384);
    while (seen < 3) {
      const ssize_t n = recv(s, f.data(), f.size(), 0);
      ASSERT_GT(n, 0) << "only " << seen << " of 3 frames arrived";
      const std::uint8_t* ip = f.data() + 14;
      const std::uint8_t* udp = ip + 20;
      if (ip[9] != 17 || (udp[2] << 8 | udp[3]) != wire::kRoceV2UdpPort) continue;
      ++seen;
      EXPECT_EQ(ones_sum(ip, 20), 0xFFFFu) << "IPv4 header checksum, frame " << seen;
      const std::size_t udp_len = static_cast<std::size_t>(udp[4] << 8 | udp[5]);
      ASSERT_EQ(static_cast<std::size_t>(n), 14 + 20 + udp_len);
      if (offload) {
        std::uint32_t ph = ones_sum(ip + 12, 8, 17 + static_cast<std::uint32_t>(udp_len));
        EXPECT_NE(udp[6] << 8 | udp[7], 0) << "frame " << seen;
        EXPECT_EQ(ones_sum(udp, udp_len, ph), 0xFFFFu) << "UDP checksum, frame " << seen;
      } else {
        EXPECT_EQ(udp[6] << 8 | udp[7], 0) << "frame " << seen;
      }
      // The ICRC masks both checksums: still right.
      EXPECT_TRUE(wire::parse_roce_v2({f.data(), static_cast<std::size_t>(n)}, true).ok())
          << "frame " << seen;
    }
    close(s);
  }
}

TimeNs thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<TimeNs>(t.tv_sec) * 1'000'000'000 + static_cast<TimeNs>(t.tv_nsec);
}

// What an idle Driver cost over kIdleNs: its sleeps, this thread's CPU time, its timer wake-ups.
constexpr TimeNs kIdleNs = 300'000'000;
struct Idle {
  std::uint64_t sleeps = 0, wakeups_timer = 0;
  TimeNs cpu_ns = 0;
};
Idle run_idle(Driver& drv) {
  const DriverCounters c0 = drv.counters();
  const TimeNs cpu0 = thread_cpu_ns();
  drv.run_until([] { return false; }, kIdleNs);
  return {drv.counters().sleeps - c0.sleeps, drv.counters().wakeups_timer - c0.wakeups_timer,
          thread_cpu_ns() - cpu0};
}

// A sleeping Driver wakes on the port's receive interrupt, not on a timer: net_tap gives its rx
// queue a descriptor (the tap queue's, readable while frames wait). Idle for 300 ms, the Driver
// sleeps a few times at most (on the backing-off timer it slept ~300 times: once per 1 ms); a
// frame the kernel then sends into the tap wakes it (wakeups_rx) well within the bound, and no
// timer fired. The bound is generous for a loaded machine (a wake-up takes tens of
// microseconds here); the sleep count is what tells the two designs apart.
TEST_F(Dpdk, ASleepingDriverWakesOnTheReceiveInterruptNotATimer) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for net_tap (/dev/net/tun)";
  const std::string ifname = "wdtapi" + std::to_string(getpid() % 100000);
  DpdkConfig cfg;
  cfg.vdev = "net_tap_weft1,iface=" + ifname;
  cfg.local_ip = kIpA;
  cfg.link_wait_ns = 0;
  DpdkMedium m(cfg);
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_TRUE(m.rx_interrupt()) << "net_tap gave its rx queue no interrupt descriptor";
  sh("sysctl -qw net.ipv6.conf." + ifname + ".disable_ipv6=1");  // no neighbour discovery
  const int s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  sll.sll_halen = 6;
  ASSERT_NE(sll.sll_ifindex, 0);

  LocalDevice d(m);
  Driver drv;
  drv.attach(*d.dev, m);
  // Whatever the kernel sent when the tap came up is read first.
  drv.run_until([] { return false; }, 20'000'000);
  const Idle idle = run_idle(drv);
  EXPECT_LE(idle.sleeps, 20u) << "the Driver woke on a tick while nothing arrived";
  EXPECT_LE(idle.wakeups_timer, 1u);  // its one timer: run_until's end

  // A frame from the kernel's side after 50 ms (not RoCE: the port counts it as rx_other).
  std::array<std::uint8_t, 60> f{};
  std::memset(f.data(), 0xFF, 6);
  f[12] = 0x88;
  f[13] = 0xB6;  // IEEE 802's local experimental EtherType 2
  const DriverCounters c0 = drv.counters();
  const std::uint64_t other0 = m.counters().rx_other;
  std::atomic<TimeNs> sent_at{0};
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sent_at.store(monotonic_ns());
    ASSERT_EQ(sendto(s, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&sll), sizeof sll),
              static_cast<ssize_t>(f.size()));
  });
  // (A frame of the kernel's own before ours ends no wait early: sent_at is set first.)
  const bool got = drv.run_until(
      [&] { return sent_at.load() != 0 && m.counters().rx_other > other0; }, 5'000'000'000);
  const TimeNs woke_at = monotonic_ns();
  sender.join();
  close(s);
  ASSERT_TRUE(got) << "the frame never reached the port";
  constexpr TimeNs kWakeBoundNs = 100'000'000;
  EXPECT_LT(woke_at - sent_at.load(), kWakeBoundNs);
  EXPECT_GE(drv.counters().wakeups_rx, c0.wakeups_rx + 1) << "not woken by the descriptor";
  EXPECT_EQ(drv.counters().wakeups_timer, c0.wakeups_timer);
  EXPECT_LE(drv.counters().sleeps - c0.sleeps, 10u);
  std::printf("idle 300 ms: %llu sleeps, %lld us of CPU; woke %lld us after the frame was sent\n",
              static_cast<unsigned long long>(idle.sleeps),
              static_cast<long long>(idle.cpu_ns / 1000),
              static_cast<long long>((woke_at - sent_at.load()) / 1000));
}

// The memif doorbell ("Sleeping" in dpdk_medium.hpp): net_memif has no receive interrupt, so a
// sleeping port tells its peer (a SLEEPING link frame) and the peer rings its socket when it
// sends. Idle, the Driver sleeps a few times (the safety bound) instead of ~250 (the 1 ms
// backoff); and a frame the peer sends while we sleep wakes us by a ring, well before the bound.
TEST_F(Dpdk, ASleepingMemifEndpointWakesOnItsPeersDoorbellNotATimer) {
  const TempDir tmp("weft_memif_bell_");
  const std::string args = memif_args(tmp.path);
  DpdkConfig cfg;
  cfg.vdev = "net_memif0,role=server" + args;
  cfg.local_ip = kIpA;
  constexpr std::uint32_t kLen = 4000;
  std::vector<std::string> argv{DPDK_PEER_PATH,          "{fd}",
                                std::to_string(1 << 20), "net_memif0,role=client" + args,
                                std::to_string(kIpB),    std::to_string(wire::kRoceV2UdpPort)};
  test::MediumPeer<End> p(1 << 20, argv, cfg);
  ASSERT_TRUE(p.ready());
  DpdkMedium& m = p.end().medium();
  Driver& drv = p.end().driver();
  // The first sleeps teach each side that the other rings (a ring on a new name).
  drv.run_until([] { return false; }, 50'000'000);
  EXPECT_TRUE(m.peer_rings()) << "the peer never rang: " << m.counters().sleeping_sent
                              << " SLEEPING sent";
  const Idle idle = run_idle(drv);
  EXPECT_LE(idle.sleeps, 20u) << "the Driver woke on a tick while nothing arrived";

  // An RC SEND to the peer while its driver is held (kPause): the ACK comes when it resumes, 50 ms
  // later, while we sleep.
  test::fill_pattern(p.buf(), kLen, 77);
  ASSERT_EQ(p.cmd(test::PeerCmd::kPostRecvRc, 0, kLen, 0).ok, 1u);
  ASSERT_EQ(p.cmd(test::PeerCmd::kPause, 0, 0, 0).ok, 1u);
  const std::uint64_t rings0 = m.counters().rings_received;
  ASSERT_EQ(p.post(WrOpcode::kSend, kLen, 5), Errc::kOk);
  std::atomic<TimeNs> resumed_at{0};
  std::thread resumer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    resumed_at.store(monotonic_ns());
    EXPECT_EQ(p.cmd(test::PeerCmd::kResume, 0, 0, 0).ok, 1u);
  });
  const auto wc = p.wait(1, 5'000'000'000);
  const TimeNs woke_at = monotonic_ns();
  resumer.join();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wc[0].wr_id, 5u);
  constexpr TimeNs kWakeBoundNs = 50'000'000;  // the safety bound is 100 ms
  EXPECT_LT(woke_at - resumed_at.load(), kWakeBoundNs);
  EXPECT_GE(m.counters().rings_received, rings0 + 1) << "not woken by the doorbell";
  EXPECT_EQ(p.cmd(test::PeerCmd::kWaitRecvRc, 0, kLen, 0).ok, 1u);
  EXPECT_EQ(p.cmd(test::PeerCmd::kCheck, 0, kLen, 77).ok, 1u);
  std::printf(
      "idle 300 ms: %llu sleeps, %lld us of CPU; woke %lld us after the peer resumed; %llu "
      "SLEEPING sent, %llu rings sent, %llu received\n",
      static_cast<unsigned long long>(idle.sleeps), static_cast<long long>(idle.cpu_ns / 1000),
      static_cast<long long>((woke_at - resumed_at.load()) / 1000),
      static_cast<unsigned long long>(m.counters().sleeping_sent),
      static_cast<unsigned long long>(m.counters().rings_sent),
      static_cast<unsigned long long>(m.counters().rings_received));
}

// The system call a thread of this process named `comm` is blocked in (/proc/self/task/T/syscall
// starts with its number), or -1 when no such thread is found.
long syscall_of_thread(const std::string& comm) {
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::FILE* f = std::fopen((t.path() / "comm").c_str(), "r");
    if (!f) continue;
    char name[32] = {};
    const bool got = std::fgets(name, sizeof name, f) != nullptr;
    std::fclose(f);
    if (!got || std::string(name) != comm + "\n") continue;
    f = std::fopen((t.path() / "syscall").c_str(), "r");
    if (!f) return -1;
    long nr = -1;
    if (std::fscanf(f, "%ld", &nr) != 1) nr = -1;
    std::fclose(f);
    return nr;
  }
  return -1;
}

// rte_eal_init runs once per process: the EAL is released (and its run-time directory removed)
// after every test. Then EAL's interrupt thread must be held in eal_cleanup()'s callback (in
// pause()), not back in epoll_wait: DPDK 22.11 does not stop it, and a walk of its sources after
// rte_eal_cleanup unmapped them faulted (dpdk_mr, CI of session 22).
class EalEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    const bool had_eal = syscall_of_thread("eal-intr-thread") != -1;
    eal_cleanup();
    if (had_eal) {
      EXPECT_EQ(syscall_of_thread("eal-intr-thread"), SYS_pause);
    }
  }
};
[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

}  // namespace
}  // namespace weft::io::dpdk
