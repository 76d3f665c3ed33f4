// `weft run` end to end: 4 ranks of tests/fabricd/alltoall through a fabric it starts, and a
// crashed rank named with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

namespace {

int run(const std::string& cmd, std::string& out) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Ends a `weft fabric up` started with popen after `weft fabric down`: reads what it still
// prints up to its exit, then reaps it. Reading first matters: pclose closes the pipe at once,
// and a daemon that prints its "down" line after that dies of SIGPIPE (seen twice under load).
// Returns its exit status (-1: killed by a signal) and its last output in *rest.
int reap_daemon(FILE* up, std::string* rest) {
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, up)) > 0) rest->append(buf, n);
  const int st = pclose(up);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(WeftRun, AllToAllFourRanks) {
  std::string out;
  EXPECT_EQ(run(std::string(WEFT_PATH) + " run -n 4 -- " + ALLTOALL_PATH, out), 0) << out;
}

TEST(WeftRun, CrashedRankIsNamed) {
  std::string out;
  const int rc = run(std::string(WEFT_PATH) + " run -n 3 -- " + ALLTOALL_PATH + " --crash 2", out);
  EXPECT_EQ(rc, 128 + 6) << out;
  EXPECT_NE(out.find("weft run: rank 2 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("killed by signal 6"), std::string::npos) << out;
}

TEST(WeftRun, FabricCommands) {
  const std::string name = "clitest-" + std::to_string(getpid());
  const std::string weft = WEFT_PATH;
  const std::string topology = " --topology leaf-spine:leaves=2,spines=1,hosts=2";
  // The SM's flags are checked before anything starts (tools/weft/sm_flags.hpp).
  const std::pair<const char*, const char*> bad[] = {
      {" --engine bogus", "--engine: unknown routing engine \"bogus\""},
      {" --lmc 8", "--lmc must be 0..7, not 8"},
      {" --engine updn --root 0x99", "--root 0x99: no switch has this node GUID"},
      {" --sm-sweep soon", "--sm-sweep must be a time such as 10s"},
      {" --sm-node leaf000", "--sm-node leaf000 is a switch; the SM runs on an HCA"},
  };
  for (const auto& [flags, message] : bad) {
    std::string out;
    EXPECT_EQ(run(weft + " fabric up --name " + name + topology + flags, out), 2) << flags;
    EXPECT_NE(out.find(std::string("weft fabric up: ") + message), std::string::npos) << out;
  }
  // The hold flags are checked too.
  for (const auto& [flags, message] : {
           std::pair<const char*, const char*>{" --hold-life soon",
                                               "--hold-life must be a time above zero such as "
                                               "500ms, not \"soon\""},
           {" --hold-life 0", "--hold-life must be a time above zero such as 500ms, not \"0\""},
           {" --client-queue 1", "--client-queue must be 2..1048576 packets, not 1"},
       }) {
    std::string out;
    EXPECT_EQ(run(weft + " fabric up --name " + name + topology + flags, out), 2) << flags;
    EXPECT_NE(out.find(std::string("weft fabric up: ") + message), std::string::npos) << out;
  }
  // updn with light sweeps every 10 ms, the SM on the last HCA, a 100 ms hold life and a queue
  // of 256 packets: the status says so.
  FILE* up = popen((weft + " fabric up --name " + name + topology +
                    " --engine updn --sm-sweep 10ms --sm-node hca00003 --hold-life 100ms "
                    "--client-queue 256 2>&1")
                       .c_str(),
                   "r");
  ASSERT_TRUE(up);
  char line[256];
  ASSERT_TRUE(fgets(line, sizeof line, up));  // "fabric NAME up: 4 HCAs"
  EXPECT_EQ(std::string(line), "fabric " + name + " up: 4 HCAs\n");
  std::string out;
  for (int i = 0; i < 200; ++i) {  // the first light sweep, within 2 s
    out.clear();
    EXPECT_EQ(run(weft + " fabric status " + name, out), 0) << out;
    if (out.find(" light_sweeps 0 ") == std::string::npos) break;
    usleep(10000);
  }
  EXPECT_NE(out.find("hcas 4 attached 0"), std::string::npos) << out;
  EXPECT_NE(out.find("\nsm node 3 lid "), std::string::npos) << out;
  EXPECT_NE(out.find(" engine updn lmc 0 phase "), std::string::npos) << out;
  EXPECT_NE(out.find(" client_queue 256 hold_life_us 100000 "), std::string::npos) << out;
  EXPECT_EQ(out.find(" light_sweeps 0 "), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link 0/1 --drop 0.05", out), 0) << out;
  out.clear();
  // Bit errors on the same link: the drop stays, forwarding by reference goes off, and a rate
  // below 1e-6 reaches the daemon as written.
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link 0/1 --ber 2e-7", out), 0) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric status " + name, out), 0) << out;
  EXPECT_NE(out.find(" forward_by_ref 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" (inject): drop=0.05 ber=2e-07\n"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link 0/1 --ber 0.5", out), 1) << out;
  EXPECT_NE(out.find("error: ber wants a bit error rate in [0, 0.001]"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link nosuch/1 --down", out), 1) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric down " + name, out), 0) << out;
  std::string rest;
  EXPECT_EQ(reap_daemon(up, &rest), 0) << rest;
  EXPECT_NE(rest.find("fabric " + name + " down\n"), std::string::npos) << rest;
  out.clear();
  EXPECT_EQ(run(weft + " fabric status " + name, out), 1) << out;
}

// A daemon whose standard output is closed by its reader (`| head -1`) still ends cleanly at
// `weft fabric down`: its "down" line fails with EPIPE instead of killing it with SIGPIPE
// (status 141 before, and no destructor run).
TEST(WeftRun, FabricDaemonOutlivesItsOutputReader) {
  const std::string name = "clipipe-" + std::to_string(getpid());
  const std::string weft = WEFT_PATH;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    close(p[0]);
    close(p[1]);
    execl(weft.c_str(), weft.c_str(), "fabric", "up", "--name", name.c_str(), "--topology",
          "leaf-spine:leaves=1,spines=1,hosts=2", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(p[1]);
  std::string first;
  char c;
  while (read(p[0], &c, 1) == 1 && c != '\n') first += c;
  close(p[0]);  // the reader goes, as `head -1` would
  EXPECT_EQ(first, "fabric " + name + " up: 2 HCAs");
  std::string out;
  EXPECT_EQ(run(weft + " fabric down " + name, out), 0) << out;
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st)) << "killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0);
}

// `weft fabric up --faults FILE` and `weft perf` through the fabric (--fabric and WEFT_FABRIC).
TEST(WeftRun, FabricFaultsFileAndPerfThroughTheFabric) {
  const std::string name = "cliperf-" + std::to_string(getpid());
  const std::string weft = WEFT_PATH;
  char path[] = "/tmp/weft-faults-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string toml =
      "[[fault]]\nlink = \"leaf000/p3\"\ndrop = 0.01\n"
      "[[event]]\nat = \"1ms\"\naction = \"flap\"\nlink = \"leaf001/p3\"\nperiod = \"2ms\"\n";
  ASSERT_EQ(write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
  close(fd);
  std::string out;
  // A scenario naming a port that does not exist is refused with its line.
  char bad[] = "/tmp/weft-faults-XXXXXX";
  const int bfd = mkstemp(bad);
  ASSERT_GE(bfd, 0);
  const std::string btoml = "[[fault]]\nlink = \"nosuch/p1\"\ndrop = 0.1\n";
  ASSERT_EQ(write(bfd, btoml.data(), btoml.size()), static_cast<ssize_t>(btoml.size()));
  close(bfd);
  EXPECT_EQ(run(weft + " fabric up --name " + name +
                    " --topology leaf-spine:leaves=2,spines=1,hosts=2 --faults " + bad,
                out),
            2)
      << out;
  EXPECT_NE(out.find(std::string(bad) + ":"), std::string::npos) << out;
  unlink(bad);
  FILE* up = popen((weft + " fabric up --name " + name +
                    " --topology leaf-spine:leaves=2,spines=1,hosts=2 --faults " + path + " 2>&1")
                       .c_str(),
                   "r");
  ASSERT_TRUE(up);
  char line[256];
  ASSERT_TRUE(fgets(line, sizeof line, up));
  EXPECT_EQ(std::string(line), "fabric " + name + " up: 4 HCAs\n");
  out.clear();
  EXPECT_EQ(run(weft + " perf write --bw -s 64K -n 300 --local --fabric " + name + " --json", out),
            0)
      << out;
  EXPECT_NE(out.find("\"bw_avg_gbps\":"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run("WEFT_FABRIC=" + name + " " + weft + " perf send --lat -s 8 -n 200 --local", out),
            0)
      << out;
  EXPECT_NE(out.find("RDMA_send Latency (weft, fabric " + name), std::string::npos) << out;
  // Both perf sides left (the daemon notices their sockets closing soon after).
  for (int i = 0; i < 200; ++i) {
    out.clear();
    EXPECT_EQ(run(weft + " fabric status " + name, out), 0) << out;
    if (out.find("attached 0") != std::string::npos) break;
    usleep(10000);
  }
  EXPECT_NE(out.find("faults on leaf000/p3 (receive): "), std::string::npos) << out;
  EXPECT_NE(out.find("link down: leaf001/p3"), std::string::npos) << out;
  EXPECT_NE(out.find("link up: leaf001/p3"), std::string::npos) << out;
  EXPECT_NE(out.find("attached 0"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric down " + name, out), 0) << out;
  std::string rest;
  EXPECT_EQ(reap_daemon(up, &rest), 0) << rest;
  EXPECT_NE(rest.find("fabric " + name + " down\n"), std::string::npos) << rest;
  unlink(path);
}

// bench/io's bare relay (`io_fabric_bench relay`, run-io-bench's baseline for the daemon): weft
// perf's bandwidth and latency runs through it deliver, and it exits cleanly on SIGTERM (in
// session 21 it asserted on every record of the new segment format and nothing caught it).
TEST(WeftRun, BenchRelayDelivers) {
  const std::string name = "clirelay-" + std::to_string(getpid());
  int out_pipe[2];
  ASSERT_EQ(pipe(out_pipe), 0);
  const pid_t relay = fork();
  ASSERT_GE(relay, 0);
  if (relay == 0) {
    dup2(out_pipe[1], 1);
    close(out_pipe[0]);
    close(out_pipe[1]);
    execl(RELAY_PATH, RELAY_PATH, "relay", name.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out_pipe[1]);
  FILE* up = fdopen(out_pipe[0], "r");
  ASSERT_TRUE(up);
  char line[256] = {};
  ASSERT_TRUE(fgets(line, sizeof line, up));
  EXPECT_EQ(std::string(line), "relay " + name + " up\n");
  const std::string weft = WEFT_PATH;
  std::string out;
  EXPECT_EQ(run(weft + " perf write --bw -s 1M -n 100 --local --fabric " + name + " --json", out),
            0)
      << out;
  EXPECT_NE(out.find("\"bw_avg_gbps\":"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " perf write --lat -s 8 -n 500 --local --fabric " + name + " --json", out),
            0)
      << out;
  EXPECT_NE(out.find("\"lat_typical_us\":"), std::string::npos) << out;
  kill(relay, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(relay, &st, 0), relay);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "relay status " << st;
  fclose(up);
}

}  // namespace
