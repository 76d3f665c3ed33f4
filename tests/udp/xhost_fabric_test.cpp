// tests/udp/xhost_fabric_test.cpp — one fabric over two daemons (issue 7, section 5;
// emu/fabricd/cross_host): two network namespaces joined by a veth pair the test creates and
// removes, `weft fabric up --part ... --bind ... --peer ...` in each, on a 2-leaf 2-spine
// leaf-spine split so that each daemon runs one leaf and one spine (two crossing links, one
// each way between a leaf and the other host's spine). The SM on the first daemon brings every
// port of both to Active with LIDs and LFTs; then four ranks of tests/fabricd/alltoall, two
// attached to each daemon, write 64 KiB to each other byte-exact through switches of both
// daemons. Then the second daemon stops: the first takes its crossing links down (a silent
// peer); a new second daemon trains them again, the SM re-sweeps, and a second all-to-all
// passes. Needs root (skipped otherwise).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu/fabricd/cross_host.hpp"
#include "emu/topo/spec.hpp"
#include "tests/common/cli_run.hpp"

namespace {

using weft::test_util::run_command;

bool sh(const std::string& c) {
  return std::system((c + " >/dev/null 2>&1").c_str()) == 0;
}

// Two namespaces of their own, joined by veth: a at 10.216.x.1, b at .2.
class NetnsPair {
 public:
  NetnsPair() {
    const std::string id = std::to_string(getpid() % 100000);
    ns_[0] = "weft-xa-" + id;
    ns_[1] = "weft-xb-" + id;
    const std::string va = "wxha" + id, vb = "wxhb" + id;
    net_ = "10.216." + std::to_string(static_cast<unsigned>(getpid()) % 250 + 1) + ".";
    ok_ = sh("ip netns add " + ns_[0]) && sh("ip netns add " + ns_[1]) &&
          sh("ip link add " + va + " type veth peer name " + vb) &&
          sh("ip link set " + va + " netns " + ns_[0]) &&
          sh("ip link set " + vb + " netns " + ns_[1]);
    for (int i = 0; i < 2 && ok_; ++i) {
      const std::string n = "ip -n " + ns_[i] + " ", dev = i == 0 ? va : vb;
      ok_ = sh(n + "addr add " + ip(i) + "/24 dev " + dev) &&
            sh(n + "link set " + dev + " mtu 9000 up") && sh(n + "link set lo up");
    }
  }
  ~NetnsPair() {
    for (const auto& n : ns_) sh("ip netns del " + n);  // takes the veth pair with it
  }
  bool ok() const { return ok_; }
  const std::string& ns(int i) const { return ns_[i]; }
  std::string ip(int i) const { return net_ + std::to_string(i + 1); }

 private:
  std::string ns_[2], net_;
  bool ok_ = false;
};

// Runs argv in network namespace `ns` (setns in the child, as link_tunnel_test does; no mount
// namespace needed), its stdout and stderr to `out_fd`.
pid_t spawn_fd(const std::string& ns, const std::vector<std::string>& argv, int out_fd) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int nsfd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) _exit(126);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    std::vector<char*> a;
    for (const auto& x : argv) a.push_back(const_cast<char*>(x.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  return pid;
}

pid_t spawn(const std::string& ns, const std::vector<std::string>& argv, const std::string& log) {
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = spawn_fd(ns, argv, fd);
  close(fd);
  return pid;
}

// Runs argv in `ns` to completion; its output.
std::string run_in(const std::string& ns, const std::vector<std::string>& argv) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return {};
  const pid_t pid = spawn_fd(ns, argv, p[1]);
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

// Waits up to timeout for `pid`; its exit status, or -1 (killed when it did not end).
int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Every port Active, every node with a LID, every crossing link up.
bool ready(const std::string& status) {
  return status.find("cross link") != std::string::npos &&
         status.find("state Active") != std::string::npos &&
         !std::regex_search(status, std::regex("state (Down|Init|Armed)|lid 0\\s| down epoch"));
}

std::uint64_t counter(const std::string& status, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(status, m, std::regex(" " + name + " ([0-9]+)"))) return UINT64_MAX;
  return std::stoull(m[1]);
}

// How `--part` splits a topology (no root needed).
TEST(CrossHostSplit, SwitchesByNameGlobOrIndexHcasFollowTheirSwitch) {
  using weft::fabricd::split_topology;
  auto t = weft::topo::from_spec("leaf-spine:leaves=2,spines=2,hosts=2,radix=4");
  ASSERT_TRUE(t.ok());
  const weft::topo::Topology& topo = t.value();
  auto names = [&](const std::vector<bool>& local) {
    std::string o;
    for (weft::topo::NodeId n = 0; n < topo.node_count(); ++n)
      if (local[n]) o += topo.node(n).description + " ";
    return o;
  };
  auto crossing = [&](const weft::fabricd::Split& s) {
    std::string o;
    for (const auto l : s.crossing) {
      const auto& k = topo.link(l);
      o += topo.node(k.a.node).description + "-" + topo.node(k.b.node).description + " ";
    }
    return o;
  };
  auto a = split_topology(topo, {"leaf000", "spine000"});
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(names(a.value().local), "hca00000 hca00001 leaf000 spine000 ");
  EXPECT_EQ(crossing(a.value()), "leaf000-spine001 leaf001-spine000 ");
  auto b = split_topology(topo, {"spine*"});
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(names(b.value().local), "spine000 spine001 ");
  EXPECT_EQ(b.value().crossing.size(), 4u);
  auto c = split_topology(topo, {"5"});  // by index: leaf001
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(names(c.value().local), "hca00002 hca00003 leaf001 ");
  auto none = split_topology(topo, {"leaf000", "nosuch"});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error(), "part pattern 'nosuch' matches no switch");
  auto all = split_topology(topo, {"*"});
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.error(), "no link joins this host's part to the other's");
  EXPECT_FALSE(split_topology(topo, {}).ok());
}

TEST(CrossHostFabric, OneSubnetAndAllToAllThroughBothDaemons) {
  if (getuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  NetnsPair net;
  if (!net.ok()) GTEST_SKIP() << "cannot create network namespaces and a veth pair here";
  const std::string weft = WEFT_PATH, fab = "xh";
  const std::string topo = "leaf-spine:leaves=2,spines=2,hosts=2,radix=4";
  const std::string part[2] = {"leaf000,spine000", "leaf001,spine001"};
  char dir_tmpl[] = "/tmp/weft-xhost-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir_tmpl));
  const std::string dir = dir_tmpl;
  auto status = [&](int i) { return run_in(net.ns(i), {weft, "fabric", "status", fab}); };
  pid_t daemon[2] = {-1, -1};
  auto start = [&](int i) {
    daemon[i] = spawn(net.ns(i),
                      {weft, "fabric", "up", "--name", fab, "--topology", topo, "--part", part[i],
                       "--bind", net.ip(i), "--peer", std::string(i ? "a=" : "b=") + net.ip(1 - i)},
                      dir + "/daemon" + std::to_string(i) + ".log");
  };
  auto stop = [&](int i) {
    run_in(net.ns(i), {weft, "fabric", "down", fab});
    const int rc = wait_exit(daemon[i], std::chrono::seconds(10));
    EXPECT_EQ(rc, 0) << run_command("cat " + dir + "/daemon" + std::to_string(i) + ".log").out;
  };
  std::string st[2];
  auto wait_ready = [&] {
    for (int t = 0; t < 200; ++t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      st[0] = status(0);
      st[1] = status(1);
      if (ready(st[0]) && ready(st[1])) return true;
    }
    return false;
  };
  // Ranks 0, 1 on the first daemon's HCAs, 2, 3 on the second's; a fresh exchange directory.
  auto all_to_all = [&](const std::string& round) {
    const std::string d = dir + "/" + round;
    ASSERT_TRUE(run_command("mkdir " + d).status == 0);
    std::vector<pid_t> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.push_back(spawn(net.ns(r / 2),
                            {"env", "WEFT_FABRIC=" + fab, "WEFT_RANK=" + std::to_string(r),
                             "WEFT_SIZE=4", "WEFT_RANK_DIR=" + d, ALLTOALL_PATH},
                            d + "/rank" + std::to_string(r) + ".log"));
    for (int r = 0; r < 4; ++r) {
      const int rc = wait_exit(ranks[r], std::chrono::seconds(30));
      EXPECT_EQ(rc, 0) << round << " rank " << r << ": "
                       << run_command("cat " + d + "/rank" + std::to_string(r) + ".log").out;
    }
  };
  start(0);
  start(1);
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  };
  auto t0 = Clock::now();
  const bool up = wait_ready();
  std::printf("subnet over both daemons up (status polled every 50 ms) in %lld ms\n",
              static_cast<long long>(ms_since(t0)));
  EXPECT_TRUE(up) << st[0] << "\n" << st[1];
  if (up) {
    // One subnet: the 8 nodes' LIDs (4 HCAs, 4 switches) are distinct across both daemons.
    std::set<std::string> lids;
    const std::regex node_lid("\nnode [0-9]+ \\S+ \\S+ lid ([0-9]+)");
    for (const auto& s : st)
      for (std::sregex_iterator it(s.begin(), s.end(), node_lid), e; it != e; ++it)
        lids.insert((*it)[1]);
    EXPECT_EQ(lids.size(), 8u) << st[0] << "\n" << st[1];
    t0 = Clock::now();
    all_to_all("first");
    std::printf("all-to-all of 4 ranks x 64 KiB in %lld ms\n",
                static_cast<long long>(ms_since(t0)));
    for (int i = 0; i < 2; ++i) {
      const std::string s = status(i);
      // 2 local x 2 remote ranks' 64 KiB blocks each way crossed the tunnel, with their ACKs.
      EXPECT_GE(counter(s, "tx_packets"), 2u * 2 * 16) << s;
      EXPECT_GE(counter(s, "rx_packets"), 2u * 2 * 16) << s;
      EXPECT_GT(counter(s, "tx_fc"), 0u) << s;
      EXPECT_EQ(counter(s, "rx_bad_crc"), 0u) << s;
      EXPECT_EQ(counter(s, "rx_malformed"), 0u) << s;
      EXPECT_EQ(counter(s, "rx_while_down"), 0u) << s;
      EXPECT_EQ(counter(s, "tx_dropped"), 0u) << s;
      EXPECT_EQ(s.find("ups 2"), std::string::npos) << "a link trained twice\n" << s;
    }
    // The second daemon goes away: its silent links go down at the first (after 1 s)...
    stop(1);
    bool down = false;
    for (int t = 0; t < 60 && !down; ++t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      st[0] = status(0);
      down = std::regex_search(st[0], std::regex("leaf000/4 down epoch 2")) &&
             std::regex_search(st[0], std::regex("spine000/2 down epoch 2"));
    }
    EXPECT_TRUE(down) << st[0];
    // ...and a new one (another boot) trains them again; the SM, told by trap 128, brings its
    // half back into the subnet.
    start(1);
    t0 = Clock::now();
    EXPECT_TRUE(wait_ready()) << st[0] << "\n" << st[1];
    std::printf("again up after the restart in %lld ms\n", static_cast<long long>(ms_since(t0)));
    all_to_all("second");
  }
  for (int i = 0; i < 2; ++i)
    if (daemon[i] > 0 && waitpid(daemon[i], nullptr, WNOHANG) == 0) stop(i);
  run_command("rm -rf " + dir);
}

// Both daemons drop 10 % of the tunnel frames they receive (`--tunnel-drop 0.1`, seeded): hellos,
// SMPs, data and flow-control packets alike. The subnet still comes up (hellos repeat, the SM
// retries its SMPs), and the all-to-all still passes byte-exact (RC retransmits lost data; the
// periodic FC refresh of the crossing links, IBA 7.9.4, replaces lost FC packets so no VL stalls).
TEST(CrossHostFabric, LossyTunnelStillOneSubnetAndAllToAll) {
  if (getuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  NetnsPair net;
  if (!net.ok()) GTEST_SKIP() << "cannot create network namespaces and a veth pair here";
  const std::string weft = WEFT_PATH, fab = "xl";
  const std::string topo = "leaf-spine:leaves=2,spines=2,hosts=2,radix=4";
  const std::string part[2] = {"leaf000,spine000", "leaf001,spine001"};
  char dir_tmpl[] = "/tmp/weft-xloss-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir_tmpl));
  const std::string dir = dir_tmpl;
  auto status = [&](int i) { return run_in(net.ns(i), {weft, "fabric", "status", fab}); };
  pid_t daemon[2] = {-1, -1};
  for (int i = 0; i < 2; ++i)
    daemon[i] = spawn(net.ns(i),
                      {weft, "fabric", "up", "--name", fab, "--topology", topo, "--part", part[i],
                       "--bind", net.ip(i), "--peer", std::string(i ? "a=" : "b=") + net.ip(1 - i),
                       "--tunnel-drop", "0.1", "--tunnel-seed", std::to_string(7 + i)},
                      dir + "/daemon" + std::to_string(i) + ".log");
  std::string st[2];
  bool up = false;
  for (int t = 0; t < 200 && !up; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    st[0] = status(0);
    st[1] = status(1);
    up = ready(st[0]) && ready(st[1]);
  }
  EXPECT_TRUE(up) << st[0] << "\n" << st[1];
  if (up) {
    const std::string d = dir + "/lossy";
    ASSERT_TRUE(run_command("mkdir " + d).status == 0);
    std::vector<pid_t> ranks;
    for (int r = 0; r < 4; ++r)
      ranks.push_back(spawn(net.ns(r / 2),
                            {"env", "WEFT_FABRIC=" + fab, "WEFT_RANK=" + std::to_string(r),
                             "WEFT_SIZE=4", "WEFT_RANK_DIR=" + d, ALLTOALL_PATH},
                            d + "/rank" + std::to_string(r) + ".log"));
    for (int r = 0; r < 4; ++r) {
      const int rc = wait_exit(ranks[r], std::chrono::seconds(30));
      EXPECT_EQ(rc, 0) << "rank " << r << ": "
                       << run_command("cat " + d + "/rank" + std::to_string(r) + ".log").out;
    }
    for (int i = 0; i < 2; ++i) {
      const std::string s = status(i);
      std::printf(
          "daemon %d: rx_packets %llu rx_fc %llu rx_dropped %llu rx_lost %llu "
          "fc_refreshes %llu\n",
          i, static_cast<unsigned long long>(counter(s, "rx_packets")),
          static_cast<unsigned long long>(counter(s, "rx_fc")),
          static_cast<unsigned long long>(counter(s, "rx_dropped")),
          static_cast<unsigned long long>(counter(s, "rx_lost")),
          static_cast<unsigned long long>(counter(s, "fc_refreshes")));
      EXPECT_GT(counter(s, "rx_dropped"), 0u) << s;
      EXPECT_NE(counter(s, "rx_dropped"), UINT64_MAX) << s;
      EXPECT_GT(counter(s, "fc_refreshes"), 0u) << s;
      EXPECT_NE(counter(s, "fc_refreshes"), UINT64_MAX) << s;
      EXPECT_EQ(counter(s, "rx_bad_crc"), 0u) << s;
      EXPECT_EQ(counter(s, "rx_malformed"), 0u) << s;
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (daemon[i] <= 0) continue;
    run_in(net.ns(i), {weft, "fabric", "down", fab});
    EXPECT_EQ(wait_exit(daemon[i], std::chrono::seconds(10)), 0)
        << run_command("cat " + dir + "/daemon" + std::to_string(i) + ".log").out;
  }
  run_command("rm -rf " + dir);
}

}  // namespace
