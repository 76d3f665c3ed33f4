// tests/io/udp_test.cpp — the UDP medium (RoCEv2 over UDP sockets) between two processes on
// loopback: this test forks and execs udp_peer, drives every verb at it and has the peer check its
// memory byte for byte, on the io_uring and the sendmmsg/recvmmsg back ends. Also: a pcap of the
// traffic decodes in tshark as RoCE with no malformed packet and with the ICRCs the frames must
// carry; a taken port is reported clearly; WEFT_UDP_BACKEND forces the back end. A DISABLED_
// benchmark compares 1 KiB SEND rates of the two back ends (run it with
// --gtest_also_run_disabled_tests --gtest_filter='*Bench*').
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/io/clock.hpp"
#include "src/io/direct_node.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"
#include "tests/io/medium_peer.hpp"
#include "tests/io/peer_protocol.hpp"
#include "tests/io/udp_end.hpp"

namespace weft::io::udp {
namespace {

using test::PeerCmd;

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

// A loopback address of our own (127.x.y.1/2), so concurrent runs never share a port.
std::uint32_t loop_ip(int which) {
  const std::uint32_t p = static_cast<std::uint32_t>(getpid());
  return 0x7F000000u | ((p & 0xFFFF) << 8) | static_cast<std::uint32_t>(which);
}

struct Opts {
  UdpBackend backend = UdpBackend::kMmsg;
  std::string pcap;
  std::uint32_t ip = 0x7F000001, peer_ip = 0x7F000001;
  std::uint16_t port = 0, peer_port = 0;
  std::string netns;          // run the child in this network namespace (ip netns exec)
  std::string ip6, peer_ip6;  // IPv6 instead (e.g. "::1")
};

// One udp_peer child and our side of the link (inline Driver mode).
class Peer : public test::MediumPeer<test::UdpEnd> {
 public:
  Peer(std::size_t bytes, const Opts& o)
      : MediumPeer(bytes,
                   {UDP_PEER_PATH, "{fd}", std::to_string(bytes),
                    o.backend == UdpBackend::kUring ? "uring" : "mmsg",
                    o.peer_ip6.empty() ? std::to_string(o.peer_ip) : o.peer_ip6,
                    std::to_string(o.peer_port)},
                   config(o), o.netns) {}
  static UdpConfig config(const Opts& o) {
    UdpConfig cfg;
    cfg.backend = o.backend;
    cfg.pcap_path = o.pcap;
    cfg.local_ip = o.ip;
    cfg.port = o.port;
    if (!o.ip6.empty()) {
      cfg.ipv6 = true;
      inet_pton(AF_INET6, o.ip6.c_str(), cfg.local_ip6.data());
    }
    return cfg;
  }
};

using test::check_atomics;
using test::check_rc_verbs;
using test::check_ud;

// io_uring may be blocked (seccomp in containers): then the uring case has nothing to test.
bool uring_available() {
  UdpConfig c;
  c.port = 0;
  c.backend = UdpBackend::kUring;
  UdpMedium m(c);
  return m.ok() && m.backend() == UdpBackend::kUring;
}

class UdpPaths : public ::testing::TestWithParam<UdpBackend> {};

TEST_P(UdpPaths, EveryVerbByteExactFromOneByteToThreeMiB) {
  if (GetParam() == UdpBackend::kUring && !uring_available())
    GTEST_SKIP() << "io_uring is not available here (the medium falls back to sendmmsg)";
  Opts o;
  o.backend = GetParam();
  Peer p(4 << 20, o);
  ASSERT_TRUE(p.ready());
  EXPECT_EQ(p.end().medium().backend(), GetParam());
  std::uint64_t seed = 100;
  for (std::uint32_t size :
       {1u, 8u, 1000u, 1023u, 1024u, 1025u, 4096u, 4097u, 65539u, (1u << 20) + 5, 3u << 20}) {
    check_rc_verbs(p, size, seed += 10);
    if (HasFatalFailure()) {
      const auto& m = p.end().medium().counters();
      const auto& d = p.end().device().counters();
      ADD_FAILURE() << "medium tx " << m.tx_packets << " rx " << m.rx_packets << " bad_icrc "
                    << m.rx_bad_icrc << " malformed " << m.rx_malformed << " no_route "
                    << m.tx_no_route << " tx_errors " << m.tx_errors << "; device rx "
                    << d.rx_packets << " malformed " << d.rx_malformed << " bad_dlid "
                    << d.rx_bad_dlid << " no_qp " << d.rx_no_qp << " ooo " << d.rx_dropped_ooo;
      return;
    }
  }
  check_atomics(p);
  for (std::uint32_t size : {1u, 1000u, 1024u, 4096u}) check_ud(p, size, seed += 10);
  const auto& c = p.end().medium().counters();
  EXPECT_GT(c.tx_packets, 1500u);
  EXPECT_GT(c.rx_packets, 1000u);
  EXPECT_EQ(c.rx_bad_icrc, 0u);
  EXPECT_EQ(c.rx_malformed, 0u);
  EXPECT_EQ(c.tx_no_route, 0u);
  EXPECT_EQ(c.tx_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Io, UdpPaths, ::testing::Values(UdpBackend::kUring, UdpBackend::kMmsg),
                         [](const auto& info) {
                           return info.param == UdpBackend::kUring ? "IoUring" : "Sendmmsg";
                         });

// Both ends on port 4791 (RoCEv2's) of their own loopback addresses; every datagram either way is
// captured. tshark decodes all of it as RoCE with nothing malformed, and the ICRC it shows in each
// frame (it prints the four bytes as a big-endian number) is the RoCEv2 ICRC of the frame.
// IPv6 (::1): ours on port 4791, the peer's ephemeral; the frames carry IPv6 headers (and the
// UDP checksum IPv6 requires), and a wider set of sizes is checked byte for byte.
void pcap_check(bool v6) {
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) GTEST_SKIP() << "tshark not installed";
  const auto dir =
      std::filesystem::temp_directory_path() / ("weft_udp_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "udp.pcap").string();
  {
    Opts o;
    o.pcap = file;
    o.ip = loop_ip(1);
    o.peer_ip = loop_ip(2);
    o.port = o.peer_port = wire::kRoceV2UdpPort;
    if (v6) {
      o.ip6 = o.peer_ip6 = "::1";
      o.peer_port = 0;
    }
    Peer p(4 << 20, o);
    ASSERT_TRUE(p.ready());
    if (v6) {
      std::uint64_t seed = 700;
      for (std::uint32_t size : {1u, 1024u, 4097u, (1u << 20) + 5}) {
        check_rc_verbs(p, size, seed += 10);
        if (::testing::Test::HasFatalFailure()) return;
      }
    } else {
      check_rc_verbs(p, 5000, 7);
    }
    check_atomics(p);
    check_ud(p, 100, 9);
    const auto& c = p.end().medium().counters();
    EXPECT_EQ(c.rx_bad_icrc, 0u);
    EXPECT_EQ(c.rx_malformed, 0u);
    EXPECT_EQ(c.tx_errors, 0u);
  }
  struct RemoveDir {
    std::filesystem::path d;
    ~RemoveDir() { std::filesystem::remove_all(d); }
  } remove_dir{dir};
  // Our own reading: every frame parses as RoCEv2 with a correct ICRC.
  std::vector<std::uint32_t> icrcs;
  bool saw_v6 = false;
  {
    wire::PcapReader r;
    ASSERT_TRUE(r.open(file));
    EXPECT_EQ(r.linktype(), wire::kLinktypeEthernet);
    while (auto rec = r.next()) {
      // The peer's ephemeral port is not RoCEv2's: parse a copy that says 4791, and check the
      // ICRC over the frame as it is (the ICRC covers the ports).
      std::vector<std::uint8_t> f(rec->data.begin(), rec->data.end());
      const std::size_t dport = f[12] == 0x86 ? 14 + 40 + 2 : 14 + 20 + 2;
      ASSERT_GT(f.size(), dport + 2);
      f[dport] = wire::kRoceV2UdpPort >> 8;
      f[dport + 1] = wire::kRoceV2UdpPort & 0xFF;
      auto pk = wire::parse_roce_v2(f, false);
      ASSERT_TRUE(pk.ok()) << "frame " << icrcs.size() + 1;
      EXPECT_EQ(wire::icrc_roce_v2({rec->data.data() + pk->ip_offset,
                                    rec->data.size() - pk->ip_offset - wire::kIcrcBytes}),
                pk->icrc)
          << "frame " << icrcs.size() + 1;
      saw_v6 = saw_v6 || pk->ipv6;
      icrcs.push_back(pk->icrc);
    }
  }
  ASSERT_GT(icrcs.size(), 20u);
  EXPECT_EQ(saw_v6, v6);
  // The payloads are test patterns: the dissectors of protocols over IB payloads (RPC-over-RDMA,
  // SMB Direct, ...) would misread short ones as broken upper-layer messages.
  std::string ts = "tshark -n -r '" + file + "'";
  for (const char* h : {"rpcordma", "iser", "smb_direct", "nvme-rdma", "lnet", "smc",
                        "infiniband_sdp", "fcoib", "eoib"})
    ts += std::string(" --disable-protocol ") + h;
  const std::string out =
      run(ts + " -T fields -E separator=/t -e udp.dstport -e udp.srcport -e infiniband.bth.opcode" +
          " -e infiniband.invariant.crc -e _ws.malformed 2>/dev/null");
  std::vector<std::string> lines;
  for (std::size_t a = 0, b; a < out.size(); a = b + 1) {
    b = out.find('\n', a);
    if (b == std::string::npos) b = out.size();
    if (b > a) lines.push_back(out.substr(a, b - a));
  }
  ASSERT_EQ(lines.size(), icrcs.size()) << out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    unsigned port = 0, sport = 0, op = 0, crc = 0;
    ASSERT_EQ(std::sscanf(lines[i].c_str(), "%u\t%u\t%u\t%x", &port, &sport, &op, &crc), 4)
        << lines[i];
    EXPECT_TRUE(port == wire::kRoceV2UdpPort || (v6 && sport == wire::kRoceV2UdpPort)) << lines[i];
    EXPECT_EQ(__builtin_bswap32(crc), icrcs[i]) << "frame " << i + 1 << ": " << lines[i];
    EXPECT_EQ(lines[i].back(), '\t') << "malformed: " << lines[i];
  }
  EXPECT_EQ(run(ts + " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null"), "");
}

TEST(Udp, PcapDecodesInTsharkAsRoceWithCorrectIcrcs) {
  pcap_check(false);
}
TEST(Udp, Ipv6EveryVerbByteExactAndTsharkDecodesTheFrames) {
  pcap_check(true);
}

TEST(Udp, ATakenPortIsReportedWithAWayOut) {
  UdpConfig c;
  c.local_ip = loop_ip(3);
  c.port = wire::kRoceV2UdpPort;
  UdpMedium a(c);
  ASSERT_TRUE(a.ok()) << a.error();
  UdpMedium b(c);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.error().find("Address already in use"), std::string::npos) << b.error();
  EXPECT_NE(b.error().find("rdma_rxe"), std::string::npos) << b.error();
  EXPECT_NE(b.error().find("choose another port"), std::string::npos) << b.error();
}

TEST(Udp, TheDefaultIsMmsgAndTheEnvironmentForcesIoUring) {
  UdpConfig c;
  c.port = 0;
  {
    UdpMedium m(c);  // kAuto: sendmmsg/recvmmsg, the faster one by measurement
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m.backend(), UdpBackend::kMmsg);
  }
  setenv("WEFT_UDP_BACKEND", "uring", 1);
  {
    UdpMedium m(c);
    ASSERT_TRUE(m.ok());
    // io_uring when the kernel allows it; otherwise the logged fall-back.
    EXPECT_EQ(m.backend(), uring_available() ? UdpBackend::kUring : UdpBackend::kMmsg);
  }
  unsetenv("WEFT_UDP_BACKEND");
  c.backend = UdpBackend::kMmsg;  // the option too
  UdpMedium m(c);
  EXPECT_EQ(m.backend(), UdpBackend::kMmsg);
}

TEST(Udp, TheMtuComesFromTheInterface) {
  UdpConfig c;
  c.port = 0;
  UdpMedium lo(c);  // 127.0.0.1: lo, MTU 65536
  ASSERT_TRUE(lo.ok()) << lo.error();
  EXPECT_EQ(lo.if_name(), "lo");
  EXPECT_EQ(lo.if_mtu(), 65536u);
  EXPECT_EQ(lo.roce_mtu(), 4096u);
  c.local_ip = 0;  // the wildcard address: no one interface; assume 4 KiB
  UdpMedium any(c);
  ASSERT_TRUE(any.ok()) << any.error();
  EXPECT_EQ(any.if_mtu(), 0u);
  EXPECT_EQ(any.roce_mtu(), 4096u);
  EXPECT_EQ(roce::roce_mtu_for(4160, false), 4096u);
  EXPECT_EQ(roce::roce_mtu_for(4159, false), 2048u);
  EXPECT_EQ(roce::roce_mtu_for(4180, true), 4096u);
  EXPECT_EQ(roce::roce_mtu_for(4179, true), 2048u);
  EXPECT_EQ(roce::roce_mtu_for(300, false), 0u);
}

TEST(Udp, GidsAreIpv4Mapped) {
  const auto g = UdpMedium::gid_of(0x0A000102);
  const std::array<std::uint8_t, 16> want{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 1, 2};
  EXPECT_EQ(g, want);
}

// Two network namespaces (ours and a new one) joined by a veth pair the test creates (MTU 9000:
// a 4 KiB RoCE MTU does not fit 1500) and always removes: the same byte checks across it.
class Netns {
 public:
  Netns() {
    const unsigned p = static_cast<unsigned>(getpid());
    ns_ = "weft-udp-" + std::to_string(p);
    a_ = "wu" + std::to_string(p % 1000000) + "a";
    b_ = "wu" + std::to_string(p % 1000000) + "b";
    net_ = "10.213." + std::to_string(p % 250) + ".";
    ip_a = 0x0AD50001u | (p % 250) << 8;
    ip_b = ip_a + 1;
    ok_ = sh("ip netns add " + ns_) && sh("ip link add " + a_ + " type veth peer name " + b_) &&
          sh("ip link set " + b_ + " netns " + ns_) &&
          sh("ip addr add " + net_ + "1/24 dev " + a_) &&
          sh("ip link set " + a_ + " mtu 9000 up") &&
          sh("ip -n " + ns_ + " addr add " + net_ + "2/24 dev " + b_) &&
          sh("ip -n " + ns_ + " link set " + b_ + " mtu 9000 up") &&
          sh("ip -n " + ns_ + " link set lo up");
  }
  ~Netns() {
    sh("ip link del " + a_ + " 2>/dev/null");
    sh("ip netns del " + ns_ + " 2>/dev/null");
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return ns_; }
  bool set_mtu_a(int mtu) const { return sh("ip link set " + a_ + " mtu " + std::to_string(mtu)); }
  std::uint32_t ip_a = 0, ip_b = 0;

 private:
  static bool sh(const std::string& c) { return std::system(c.c_str()) == 0; }
  std::string ns_, a_, b_, net_;
  bool ok_ = false;
};

TEST(Udp, AcrossTwoNetworkNamespacesJoinedByVeth) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to create a network namespace and a veth pair (ip netns add)";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 not installed";
  std::string name;
  {
    Netns ns;
    name = ns.name();
    ASSERT_TRUE(ns.ok()) << "could not set up namespace " << ns.name();
    Opts o;
    o.backend = uring_available() ? UdpBackend::kUring : UdpBackend::kMmsg;
    o.netns = ns.name();
    o.ip = ns.ip_a;
    o.peer_ip = ns.ip_b;
    o.port = o.peer_port = wire::kRoceV2UdpPort;
    Peer p(2 << 20, o);
    ASSERT_TRUE(p.ready());
    std::uint64_t seed = 300;
    for (std::uint32_t size : {1u, 4097u, (1u << 20) + 5}) {
      check_rc_verbs(p, size, seed += 10);
      if (HasFatalFailure()) return;
    }
    check_atomics(p);
    const auto& c = p.end().medium().counters();
    EXPECT_EQ(c.rx_bad_icrc, 0u);
    EXPECT_EQ(c.tx_errors, 0u);
    // The MTU comes from the interface that holds the address: 9000 carries 4 KiB RoCE MTU,
    // 1500 only 1 KiB (1024 + 20 + 8 + 12 + 20 + 4 <= 1500 < 2048 + 64).
    EXPECT_EQ(p.end().medium().if_mtu(), 9000u);
    EXPECT_EQ(p.end().medium().roce_mtu(), 4096u);
    ASSERT_TRUE(ns.set_mtu_a(1500));
    UdpConfig small;
    small.local_ip = ns.ip_a;
    small.port = 0;
    UdpMedium m(small);
    ASSERT_TRUE(m.ok()) << m.error();
    EXPECT_EQ(m.if_mtu(), 1500u);
    EXPECT_EQ(m.roce_mtu(), 1024u);
  }
  EXPECT_EQ(run("ip netns list | grep -c '^" + name + "\\b' || true"), "0\n");
}

// 1 KiB RDMA WRITEs (every 64th signaled), 128 in flight, per back end, alternating, in one
// run; prints the medians. Not a unit test.
TEST(Udp, DISABLED_Bench1KiBMessageRate) {
  std::vector<double> rate[2];
  for (int round = 0; round < 5; ++round) {
    for (UdpBackend b : {UdpBackend::kUring, UdpBackend::kMmsg}) {
      if (b == UdpBackend::kUring && !uring_available()) continue;
      Opts o;
      o.backend = b;
      Peer p(1 << 20, o);
      ASSERT_TRUE(p.ready());
      constexpr std::uint32_t kMsgs = 100'000, kWindow = 128;
      const TimeNs t0 = monotonic_ns();
      std::uint32_t posted = 0, done = 0;
      while (done < kMsgs) {
        while (posted < kMsgs && posted - done < kWindow) {
          const bool sig = (posted + 1) % 64 == 0 || posted + 1 == kMsgs;
          ASSERT_EQ(p.post(WrOpcode::kRdmaWrite, 1024, posted, 0, 0, 0, 0, sig), Errc::kOk);
          ++posted;
        }
        auto w = p.wait(1);
        ASSERT_FALSE(w.empty());
        for (auto& wc : w) {
          ASSERT_EQ(wc.status, WcStatus::kSuccess);
          done = static_cast<std::uint32_t>(wc.wr_id) + 1;
        }
      }
      const double s = static_cast<double>(monotonic_ns() - t0) / 1e9;
      rate[b == UdpBackend::kMmsg].push_back(kMsgs / s / 1e6);
      std::printf("round %d %-9s %.3f M msg/s, %llu retransmits\n", round,
                  std::string(to_string(b)).c_str(), kMsgs / s / 1e6,
                  static_cast<unsigned long long>(p.end().device().counters().retransmit_packets));
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (rate[i].empty()) continue;
    std::sort(rate[i].begin(), rate[i].end());
    std::printf("median %s: %.3f M msg/s (1 KiB RDMA WRITE)\n", i ? "sendmmsg" : "io_uring",
                rate[i][rate[i].size() / 2]);
  }
}

}  // namespace
}  // namespace weft::io::udp
