// tests/io/perf_cli_test.cpp — `weft perf` end to end: runs the binary with --local (both sides
// forked from one command) and checks its --json output and its table, plus argument errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
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

}  // namespace
