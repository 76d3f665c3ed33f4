// tests/io/perf_cli_test.cpp — `weft perf` end to end: runs the binary with --local (both sides
// forked from one command) and checks its --json output and its table, plus argument errors, and
// its --pcap captures (read back by our parser and by tshark).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include "src/wire/packet.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/roce.hpp"
#include "tests/common/cli_run.hpp"

namespace {

using weft::test_util::CliRun;

CliRun weft(const std::string& args) {
  return weft::test_util::run_command(std::string(WEFT_PATH) + " " + args);
}

std::vector<nlohmann::json> json_lines(const std::string& s) {
  std::vector<nlohmann::json> v;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(PerfCli, EveryVerbBandwidthGivesOneJsonObjectPerSize) {
  for (const char* verb : {"write", "read", "send", "atomic"}) {
    SCOPED_TRACE(verb);
    const CliRun r = weft(std::string("perf ") + verb + " --bw -s 4K -n 200 --local --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto v = json_lines(r.out);
    ASSERT_EQ(v.size(), 1u) << r.out;
    EXPECT_EQ(v[0]["verb"], verb);
    EXPECT_EQ(v[0]["bytes"], std::string(verb) == "atomic" ? 8 : 4096);
    EXPECT_EQ(v[0]["iterations"], 200);
    EXPECT_GT(v[0]["bw_avg_gbps"].get<double>(), 0.0);
    EXPECT_GE(v[0]["bw_peak_gbps"].get<double>(), v[0]["bw_avg_gbps"].get<double>());
  }
}

// --shm-buffers: both sides' buffers from Weft's shared-memory allocator (every verb; the data
// itself is checked byte for byte in shm_test). Direct mode only.
TEST(PerfCli, SharedMemoryBuffersForEveryVerb) {
  for (const char* verb : {"write", "read", "send", "atomic"}) {
    SCOPED_TRACE(verb);
    const CliRun r =
        weft(std::string("perf ") + verb + " --bw -s 64K -n 100 --local --shm-buffers --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto v = json_lines(r.out);
    ASSERT_EQ(v.size(), 1u) << r.out;
    EXPECT_EQ(v[0]["shm_buffers"], true);
    EXPECT_GT(v[0]["bw_avg_gbps"].get<double>(), 0.0);
  }
  EXPECT_NE(weft("perf write --bw -s 4K -n 10 --local --shm-buffers --medium udp").status, 0);
}

TEST(PerfCli, LatencyOverSeveralSizesOnTheCopyPath) {
  const CliRun r = weft("perf write --lat -s 2K -n 50 --local --copy --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto v = json_lines(r.out);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0]["zero_copy"], false);
  EXPECT_EQ(v[0]["bytes"], 2048);
  const double typ = v[0]["lat_typical_us"].get<double>();
  EXPECT_GT(typ, 0.0);
  EXPECT_LE(v[0]["lat_min_us"].get<double>(), typ);
  EXPECT_LE(typ, v[0]["lat_max_us"].get<double>());
  for (const char* verb : {"send", "read", "atomic"}) {
    const CliRun s = weft(std::string("perf ") + verb + " --lat -s 64 -n 50 --local --json");
    ASSERT_EQ(s.status, 0) << s.out;
    v = json_lines(s.out);
    ASSERT_EQ(v.size(), 1u) << s.out;
    EXPECT_GT(v[0]["lat_typical_us"].get<double>(), 0.0);
  }
}

TEST(PerfCli, AllSizesTableIsShapedLikePerftest) {
  const CliRun r = weft("perf write --bw -a -n 20 --local");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("#bytes"), std::string::npos);
  EXPECT_NE(r.out.find("BW peak[Gb/sec]"), std::string::npos);
  EXPECT_NE(r.out.find("MsgRate[Mpps]"), std::string::npos);
  int rows = 0;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long bytes = 0, iters = 0;
    if (std::sscanf(line.c_str(), " %lu %lu", &bytes, &iters) == 2) {
      ++rows;
      EXPECT_EQ(iters, 20u);
    }
  }
  EXPECT_EQ(rows, 23) << "2 B .. 8 MiB\n" << r.out;
}

TEST(PerfCli, SeparateServerAndClient) {
  const std::string name = "perf-cli-test-" + std::to_string(getpid());
  FILE* server =
      popen((std::string(WEFT_PATH) + " perf send --server --name " + name).c_str(), "r");
  ASSERT_NE(server, nullptr);
  const CliRun r = weft("perf send --bw -s 1M -n 50 --client " + name + " --json");
  const int st = pclose(server);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const auto v = json_lines(r.out);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0]["bytes"], 1 << 20);
}

TEST(PerfCli, BadArgumentsFail) {
  EXPECT_NE(weft("perf write --bw -s 1K").status, 0) << "no side given";
  EXPECT_NE(weft("perf fly --local").status, 0);
  EXPECT_NE(weft("perf write -s 9M --local").status, 0) << "above 8 MiB";
  const CliRun r = weft("perf write -s 1K --local --medium carrier-pigeon");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--medium must be shm, udp or dpdk"), std::string::npos) << r.out;
}

// --medium udp / dpdk (and WEFT_MEDIUM): the same runner over RoCEv2 datagrams or frames.
// Each run of the DPDK medium starts two EALs (about a second): it runs fewer verbs.
void check_medium(const std::string& medium, bool via_env = false,
                  std::vector<const char*> verbs = {"write", "read", "send", "atomic"}) {
  SCOPED_TRACE(medium);
  const std::string opt = via_env ? "" : " --medium " + medium;
  if (via_env) setenv("WEFT_MEDIUM", medium.c_str(), 1);
  for (const char* verb : verbs) {
    SCOPED_TRACE(verb);
    const CliRun r = weft(std::string("perf ") + verb + " --bw -s 16K -n 300 --local --json" + opt);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto v = json_lines(r.out);
    ASSERT_EQ(v.size(), 1u) << r.out;
    EXPECT_EQ(v[0]["iterations"], 300);
    EXPECT_EQ(v[0]["zero_copy"], false);
    EXPECT_GT(v[0]["bw_avg_gbps"].get<double>(), 0.0);
  }
  const CliRun r = weft("perf write --lat -s 8 -n 200 --local --json" + opt);
  if (via_env) unsetenv("WEFT_MEDIUM");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto v = json_lines(r.out);
  ASSERT_EQ(v.size(), 1u) << r.out;
  EXPECT_GT(v[0]["lat_typical_us"].get<double>(), 0.0);
}

TEST(PerfCli, OverTheUdpMedium) {
  check_medium("udp");
}
TEST(PerfCli, WeftMediumChoosesTheMedium) {
  check_medium("udp", true);
  unsetenv("WEFT_MEDIUM");
}

TEST(PerfCli, OverTheUdpMediumOnIpv6) {
  for (const char* mode : {"--bw -s 64K -n 200", "--lat -s 8 -n 200"}) {
    SCOPED_TRACE(mode);
    const CliRun r =
        weft(std::string("perf write ") + mode + " --local --json --medium udp --udp-ip ::1");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto v = json_lines(r.out);
    ASSERT_EQ(v.size(), 1u) << r.out;
    EXPECT_EQ(v[0]["iterations"], 200);
  }
  const CliRun bad = weft("perf write -s 1K --local --medium udp --udp-ip 127.0.0.300");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("bad --udp-ip 127.0.0.300 (an IPv4 or IPv6 address)"), std::string::npos)
      << bad.out;
}

// An interface whose MTU cannot carry perf's 4 KiB RoCE MTU is refused with the way out (the
// loopback of a network namespace of the test's own, at MTU 1500).
TEST(PerfCli, TheUdpMediumRefusesAnInterfaceMtuBelow4KiBRoce) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a network namespace";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 not installed";
  const std::string ns = "weft-mtu-" + std::to_string(getpid());
  ASSERT_EQ(
      std::system(("ip netns add " + ns + " && ip -n " + ns + " link set lo mtu 1500 up").c_str()),
      0);
  CliRun r;
  {
    const std::string cmd = "ip netns exec " + ns + " " + WEFT_PATH +
                            " perf write -s 1K -n 10 --local --medium udp 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
    r.status = pclose(f);
  }
  std::system(("ip netns del " + ns).c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("lo has MTU 1500, which carries RoCE MTU 1024 at most; weft perf uses 4096: "
                       "raise it to at least 4160"),
            std::string::npos)
      << r.out;
}

TEST(PerfCli, OverTheDpdkMedium) {
#ifdef WEFT_HAVE_DPDK
  check_medium("dpdk", false, {"write"});
#else
  const CliRun r = weft("perf write -s 1K --local --medium dpdk");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("built without DPDK"), std::string::npos) << r.out;
#endif
}

// ---- --pcap ----------------------------------------------------------------------------------

// The standard output of a shell command (its standard error dropped: tshark warns on it when run
// as root).
std::string out_of(const std::string& cmd) {
  std::string out;
  FILE* f = popen(("{ " + cmd + "; } 2>/dev/null").c_str(), "r");
  if (!f) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  pclose(f);
  return out;
}

// A capture file of the test's own, removed on the way out.
struct Capture {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("weft_perf_cap_" + std::to_string(getpid()) + ".pcap"))
                         .string();
  ~Capture() { std::filesystem::remove(path); }
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(l);
  return v;
}

// tshark over the capture with the heuristic dissectors for protocols over IB payloads off (the
// payloads are test patterns they would misread), as tests/harness/pcap_test.cpp does.
std::string tshark(const std::string& path) {
  std::string ts = "tshark -n -r '" + path + "'";
  return ts + out_of(
                  "tshark -G heuristic-decodes | awk '$1 == \"infiniband.payload\" "
                  "{ printf \" --disable-protocol %s\", $2 }'");
}

// Every frame of a RoCEv2 capture parses with a correct ICRC (ours), and tshark decodes each as
// UDP 4791 / InfiniBand with the same ICRC and nothing malformed. Returns the frame count.
std::size_t check_roce_capture(const std::string& path) {
  std::vector<std::uint32_t> icrcs;
  {
    weft::wire::PcapReader r;
    EXPECT_TRUE(r.open(path)) << path;
    EXPECT_EQ(r.linktype(), weft::wire::kLinktypeEthernet);
    while (auto rec = r.next()) {
      // A udp run has RoCEv2's port at one end of each datagram, an ephemeral one at the other:
      // parse a copy that says 4791 and check the ICRC over the frame as it is (udp_test.cpp).
      std::vector<std::uint8_t> f(rec->data.begin(), rec->data.end());
      const std::size_t dport = 14 + 20 + 2;
      if (f.size() <= dport + 2) return 0;
      f[dport] = weft::wire::kRoceV2UdpPort >> 8;
      f[dport + 1] = weft::wire::kRoceV2UdpPort & 0xFF;
      auto pk = weft::wire::parse_roce_v2(f, false);
      EXPECT_TRUE(pk.ok()) << "frame " << icrcs.size() + 1;
      if (!pk.ok()) return 0;
      EXPECT_EQ(
          weft::wire::icrc_roce_v2({rec->data.data() + pk->ip_offset,
                                    rec->data.size() - pk->ip_offset - weft::wire::kIcrcBytes}),
          pk->icrc)
          << "frame " << icrcs.size() + 1;
      icrcs.push_back(pk->icrc);
    }
  }
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) {
    std::printf("tshark not installed: only our own reading of %s\n", path.c_str());
    return icrcs.size();
  }
  const std::string ts = tshark(path);
  const auto rows = lines_of(
      out_of(ts + " -T fields -E separator=/t -e udp.dstport -e udp.srcport "
                  "-e infiniband.bth.opcode -e infiniband.invariant.crc -e _ws.malformed"));
  EXPECT_EQ(rows.size(), icrcs.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < rows.size() && i < icrcs.size(); ++i) {
    unsigned port = 0, sport = 0, op = 0, crc = 0;
    const bool ok = std::sscanf(rows[i].c_str(), "%u\t%u\t%u\t%x", &port, &sport, &op, &crc) == 4 &&
                    (port == weft::wire::kRoceV2UdpPort || sport == weft::wire::kRoceV2UdpPort) &&
                    __builtin_bswap32(crc) == icrcs[i] && rows[i].back() == '\t';
    if (!ok && ++bad < 5) ADD_FAILURE() << "frame " << i + 1 << ": " << rows[i];
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(out_of(ts + " -Y '_ws.malformed || _ws.expert.severity >= error'"), "");
  return icrcs.size();
}

// A loopback address of this test's own: the capturing side binds UDP 4791 there (RoCEv2's
// port, which Wireshark decodes as RoCE), free of other tests using 127.0.0.1.
std::string own_loopback() {
  const unsigned p = static_cast<unsigned>(getpid());
  return "127." + std::to_string(1 + p % 250) + "." + std::to_string(1 + p / 250 % 250) + ".9";
}

// Writes through the medium's capture, then checks it.
void check_capture(const std::string& medium) {
  SCOPED_TRACE(medium);
  Capture cap;
  const std::string ip = medium == "udp" ? " --udp-ip " + own_loopback() : "";
  const CliRun r = weft("perf write --bw -s 16K -n 100 --local --json --medium " + medium + ip +
                        " --pcap " + cap.path);
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(json_lines(r.out).size(), 1u) << r.out;
  // 100 WRITEs of 16 KiB at a 4 KiB MTU: 400 request packets and some ACKs, both ways in the
  // client's capture.
  EXPECT_GE(check_roce_capture(cap.path), 400u);
}

TEST(PerfCli, PcapOfTheUdpMediumDecodesAsRoceWithCorrectIcrc) {
  check_capture("udp");
}

TEST(PerfCli, PcapOfTheDpdkMediumDecodesAsRoceWithCorrectIcrc) {
#ifdef WEFT_HAVE_DPDK
  check_capture("dpdk");
#else
  GTEST_SKIP() << "DPDK medium not built (libdpdk not found or -Ddpdk=disabled)";
#endif
}

// shm carries IBA packets: ERF InfiniBand records, LRH..VCRC, both CRCs right (the payloads
// travel by reference and are read from the peer for the capture).
TEST(PerfCli, PcapOfTheShmMediumHoldsIbaPacketsWithCorrectCrcs) {
  for (const char* copy : {"", " --copy"}) {
    SCOPED_TRACE(copy);
    Capture cap;
    const CliRun r = weft(std::string("perf write --bw -s 16K -n 100 --local --json") + copy +
                          " --pcap " + cap.path);
    ASSERT_EQ(r.status, 0) << r.out;
    std::size_t n = 0, writes = 0;
    {
      weft::wire::PcapReader rd;
      ASSERT_TRUE(rd.open(cap.path));
      EXPECT_EQ(rd.linktype(), weft::wire::kLinktypeErf);
      while (auto rec = rd.next()) {
        ASSERT_GT(rec->data.size(), weft::wire::kErfHeaderBytes);
        const std::span<const std::uint8_t> pkt(rec->data.data() + weft::wire::kErfHeaderBytes,
                                                rec->data.size() - weft::wire::kErfHeaderBytes);
        auto p = weft::wire::parse_packet(pkt);
        ASSERT_TRUE(p.ok()) << "packet " << n + 1;
        if (p->payload.size() == 4096) ++writes;
        ++n;
      }
    }
    EXPECT_GE(writes, 400u);
    if (std::system("command -v tshark >/dev/null 2>&1") != 0) continue;
    const std::string ts = tshark(cap.path);
    EXPECT_EQ(lines_of(out_of(ts + " -Y infiniband")).size(), n);
    EXPECT_EQ(out_of(ts + " -Y '_ws.malformed || _ws.expert.severity >= error'"), "");
  }
}

TEST(PerfCli, PcapThatCannotBeWrittenIsRefused) {
  const CliRun r = weft("perf write -s 1K -n 10 --local --pcap /nonexistent-dir/cap.pcap");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--pcap /nonexistent-dir/cap.pcap"), std::string::npos) << r.out;
}

// weft run --medium: combinations that make no sense are refused before anything starts.
TEST(RunCli, MediumCombinationsThatMakeNoSenseAreRefused) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {
           Case{"--medium udp --fabric F", "--medium runs the ranks without a fabric"},
           Case{"--medium udp --topology leaf-spine", "--medium runs the ranks without a fabric"},
           Case{"--medium shm --pace", "--medium runs the ranks without a fabric"},
           Case{"--medium udp --dpdk-args=--no-huge", "--dpdk-args needs --medium dpdk"},
           Case{"--dpdk-args=--no-huge", "--dpdk-args needs --medium dpdk"},
           Case{"--pcap /tmp/x.pcap", "--pcap captures a medium: give --medium"},
           Case{"--medium ethernet", "--medium must be shm, udp or dpdk"},
           Case{"--medium dpdk -n 3", "--medium dpdk pairs two ranks over net_memif"},
       }) {
    SCOPED_TRACE(c.args);
    const CliRun r = weft(std::string("run ") +
                          (std::string(c.args).find("-n ") == std::string::npos ? "-n 2 " : "") +
                          c.args + " -- true");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
  }
}

// weft run --medium udp: the ranks get the medium (and no fabric) in their environment, and
// weft perf's two sides meet over it.
TEST(RunCli, MediumReachesTheRanks) {
  const CliRun env = weft(
      "run -n 2 --medium udp -- sh -c 'echo \"rank=$WEFT_RANK size=$WEFT_SIZE "
      "m=$WEFT_MEDIUM fi=$FI_WEFT_MEDIUM fabric=${WEFT_FABRIC:-none}\"'");
  ASSERT_EQ(env.status, 0) << env.out;
  for (const char* r : {"rank=0", "rank=1"})
    EXPECT_NE(env.out.find(std::string(r) + " size=2 m=udp fi=udp fabric=none"), std::string::npos)
        << env.out;
  Capture cap;
  const std::string name = "run-cli-" + std::to_string(getpid());
  const std::string ip = " --udp-ip " + own_loopback();
  const CliRun r = weft("run -n 2 --medium udp --pcap " + cap.path +
                        " -- sh -c 'if [ $WEFT_RANK = 0 ]; then exec " + WEFT_PATH +
                        " perf write --server --name " + name + ip + "; else exec " + WEFT_PATH +
                        " perf write --bw -s 16K -n 100 --json --client " + name + ip + "; fi'");
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_EQ(json_lines(r.out).size(), 1u) << r.out;
  // Each rank captured its side: cap.0.pcap and cap.1.pcap.
  for (int rank : {0, 1}) {
    const std::string f =
        cap.path.substr(0, cap.path.size() - 5) + "." + std::to_string(rank) + ".pcap";
    SCOPED_TRACE(f);
    EXPECT_GE(check_roce_capture(f), 400u);
    std::filesystem::remove(f);
  }
}

}  // namespace
