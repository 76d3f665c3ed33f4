// tests/dpdk/dpdk_test.cpp — the DPDK medium between two processes, each with its own EAL
// (--no-huge --no-pci, no NIC needed): net_af_packet on the two ends of a veth pair whose second
// end lives in a network namespace the test creates and removes (root; MTU 9000 for the 4 KiB RoCE
// MTU). Every verb is checked byte for byte in the peer's memory (the udp test's suite), and a
// capture of the frames decodes in tshark as RoCE with no malformed packet and correct ICRCs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "src/io/dpdk/dpdk_medium.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"
#include "tests/io/medium_peer.hpp"
#include "tests/io/udp_end.hpp"

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

// Our end on vdev_a, a dpdk_peer on vdev_b (in netns unless empty): every verb byte for byte.
// if_mtu: the MTU the port must report (the veth's; memif's buffers).
void check_verbs(const std::string& vdev_a, const std::string& vdev_b, const std::string& netns,
                 const std::string& pcap, std::uint32_t if_mtu) {
  DpdkConfig cfg;
  cfg.vdev = vdev_a;
  cfg.local_ip = kIpA;
  cfg.pcap_path = pcap;
  test::MediumPeer<End> p(4 << 20,
                          {DPDK_PEER_PATH, "{fd}", std::to_string(4 << 20), vdev_b,
                           std::to_string(kIpB), std::to_string(wire::kRoceV2UdpPort)},
                          cfg, netns);
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
}

TEST_F(Dpdk, EveryVerbByteExactOverAfPacketOnVethAndTsharkDecodesTheFrames) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("weft_dpdk_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path d;
    ~RemoveDir() { std::filesystem::remove_all(d); }
  } remove_dir{std::getenv("WEFT_KEEP_PCAP") ? std::filesystem::path() : dir};
  const std::string file = (dir / "dpdk.pcap").string();
  std::string ns_name;
  {
    VethNetns ns;
    ns_name = ns.ns();
    ASSERT_TRUE(ns.ok()) << "could not set up namespace " << ns.ns();
    check_verbs(ns.vdev(false), ns.vdev(true), ns.ns(), file, 9000);
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
// directory of the test's own; buffers of 8 KiB so a 4 KiB-MTU frame is one descriptor).
TEST_F(Dpdk, EveryVerbByteExactOverMemifBetweenTwoProcesses) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("weft_memif_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path d;
    ~RemoveDir() { std::filesystem::remove_all(d); }
  } remove_dir{dir};
  const std::string sock = (dir / "memif.sock").string();
  const std::string args = ",socket=" + sock + ",socket-abstract=no,bsize=8192";
  check_verbs("net_memif0,role=server" + args, "net_memif0,role=client" + args, "", "",
              8192 - 14);  // no MTU setting in net_memif: its bsize bounds the frames
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

// rte_eal_init runs once per process: the EAL is released (and its run-time directory removed)
// after every test.
class EalEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { eal_cleanup(); }
};
[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

}  // namespace
}  // namespace weft::io::dpdk
