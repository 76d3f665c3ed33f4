// `weft run` end to end: 4 ranks of tests/fabricd/alltoall through a fabric it starts, and a
// crashed rank named with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

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
  FILE* up = popen(
      (weft + " fabric up --name " + name + " --topology leaf-spine:leaves=2,spines=1,hosts=2 2>&1")
          .c_str(),
      "r");
  ASSERT_TRUE(up);
  char line[256];
  ASSERT_TRUE(fgets(line, sizeof line, up));  // "fabric NAME up: 4 HCAs"
  EXPECT_EQ(std::string(line), "fabric " + name + " up: 4 HCAs\n");
  std::string out;
  EXPECT_EQ(run(weft + " fabric status " + name, out), 0) << out;
  EXPECT_NE(out.find("hcas 4 attached 0"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link 0/1 --drop 0.05", out), 0) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric inject " + name + " --link nosuch/1 --down", out), 1) << out;
  out.clear();
  EXPECT_EQ(run(weft + " fabric down " + name, out), 0) << out;
  EXPECT_EQ(pclose(up), 0);
  out.clear();
  EXPECT_EQ(run(weft + " fabric status " + name, out), 1) << out;
}

}  // namespace
