// tests/coll/live_test.cpp — live mode end to end: `weft run -n N -- weft coll-bench ... --json`
// starts N processes that join a mesh of direct shared-memory links and run src/coll over the
// verbs API; every row must report 0 wrong elements (each rank checks its whole output against
// the reference rebuilt from every rank's input) and the algorithm asked for.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fcntl.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include "tests/common/cli_run.hpp"

namespace {

using weft::test_util::CliRun;

CliRun run(const std::string& args) {
  return weft::test_util::run_command(std::string(WEFT_PATH) + " " + args);
}

// Runs coll-bench on n processes; returns its JSON (rank 0 prints one line starting with '{').
nlohmann::json bench(int n, const std::string& args) {
  const std::string weft(WEFT_PATH);
  const CliRun r = run("run -n " + std::to_string(n) + " -- " + weft + " coll-bench " + args +
                       " -n 2 -w 1 --json");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  const auto at = r.out.rfind("\n{", std::string::npos);
  const std::size_t start = r.out.starts_with("{") ? 0 : at == std::string::npos ? at : at + 1;
  if (r.status != 0 || start == std::string::npos) return {};
  return nlohmann::json::parse(r.out.substr(start, r.out.find('\n', start) - start));
}

void expect_exact(const nlohmann::json& j, const std::string& what, std::size_t rows,
                  const std::string& algo = "") {
  ASSERT_TRUE(j.contains("rows")) << what;
  ASSERT_EQ(j["rows"].size(), rows) << what;
  for (const auto& r : j["rows"]) {
    EXPECT_EQ(r["wrong"], 0) << what << " size " << r["size"];
    if (!algo.empty()) {
      EXPECT_EQ(r["algo"], algo) << what << " size " << r["size"];
    }
    EXPECT_GT(r["time_us"].get<double>(), 0) << what;
  }
}

TEST(CollLive, EveryCollectiveOnTwoProcessesIsExact) {
  for (const char* w :
       {"allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall"}) {
    // 0 B, 1 B .. 256 KiB: zero size, sizes below one element per rank, several chunks.
    const auto j =
        bench(2, std::string("--workload ") + w + " -b 0 -e 256K -f 64 --dtype bf16 --chunk 16K");
    expect_exact(j, w, 5);
    EXPECT_EQ(j["ranks"], 2);
  }
}

TEST(CollLive, EveryAllReduceAlgorithmOnFourProcessesIsExact) {
  // 2 emulated nodes x 2 ranks; sizes not divisible by the rank count; types and ops that
  // each algorithm's reduction order must get exactly right.
  const struct {
    const char* algo;
    const char* dtype;
    const char* op;
  } cases[] = {{"ring", "float", "sum"}, {"ring2", "bf16", "avg"}, {"ring2-pipe", "int32", "prod"},
               {"tree", "half", "max"},  {"rhd", "uint8", "min"},  {"auto", "double", "sum"}};
  for (const auto& c : cases) {
    const std::string what = std::string(c.algo) + " " + c.dtype + " " + c.op;
    const auto j =
        bench(4, std::string("--algo ") + c.algo + " --dtype " + c.dtype + " --op " + c.op +
                     " --gpus-per-node 2 --channels 2 --chunk 8K -b 1000 " + "-e 200000 -f 200");
    expect_exact(j, what, 2, std::string(c.algo) == "auto" ? "" : c.algo);
  }
}

TEST(CollLive, BadArgumentsAreRefusedWithStatusTwo) {
  const CliRun r = run("coll-bench --algo nope");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--algo must be"), std::string::npos) << r.out;
  const CliRun s = run("coll-bench --rank 3 --size 2");
  EXPECT_EQ(s.status, 2) << s.out;
}

// Issue 6 section 5 in live mode: a rank whose process dies mid all-reduce makes the others fail
// (exit 1) within seconds, naming it — never a hang.
TEST(CollLive, ARankThatDiesIsNamedAndNobodyHangs) {
  const std::string weft(WEFT_PATH), job = "live-test-" + std::to_string(getpid());
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < 3; ++r) {
    logs.push_back("/tmp/weft-coll-live-test-" + std::to_string(getpid()) + "-" +
                   std::to_string(r) + ".log");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    const std::string out = r == 0 ? logs.back() + ".out" : std::string("/dev/null");
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const std::vector<std::string> args = {
        weft, "coll-bench", "--rank", std::to_string(r), "--size", "3", "--job", job, "-b", "16M",
        "-e", "16M",        "-n",     "100000",          "-c",     "0"};
    std::vector<char*> argv;
    for (const auto& x : args) argv.push_back(const_cast<char*>(x.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, weft.c_str(), &fa, nullptr, argv.data(), nullptr), 0);
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
  }
  // Rank 0 prints the table's header once the mesh is up: the collectives run from there on.
  const auto up = std::chrono::steady_clock::now();
  for (std::string head; head.find("# allreduce") == std::string::npos;) {
    if (std::chrono::steady_clock::now() - up > std::chrono::seconds(60)) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      for (const auto& l : logs) std::remove(l.c_str());
      std::remove((logs[0] + ".out").c_str());
      FAIL() << "the mesh did not come up in 60 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(logs[0] + ".out");
    std::getline(in, head);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pids[2], SIGKILL);
  int st = 0;
  waitpid(pids[2], &st, 0);
  const auto start = std::chrono::steady_clock::now();
  std::string said;
  for (int r = 0; r < 2; ++r) {
    bool exited = false;
    while (!exited && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
      if (waitpid(pids[static_cast<std::size_t>(r)], &st, WNOHANG) > 0) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!exited) {  // a hang: fail, and leave no process behind
      kill(pids[static_cast<std::size_t>(r)], SIGKILL);
      waitpid(pids[static_cast<std::size_t>(r)], &st, 0);
    }
    std::ifstream in(logs[static_cast<std::size_t>(r)]);
    std::stringstream ss;
    ss << in.rdbuf();
    said += ss.str();
    EXPECT_TRUE(exited) << "rank " << r << " still running 30 s after rank 2 died";
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << "rank " << r << ": " << ss.str();
  }
  EXPECT_NE(said.find("rank 2"), std::string::npos) << said;
  for (const auto& l : logs) std::remove(l.c_str());
  std::remove((logs[0] + ".out").c_str());
}

}  // namespace
