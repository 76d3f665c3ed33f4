// tests/harness/cli_test.cpp — the built `weft` binary: `weft check --seeds 20` ends with
// "20 passed, 0 failed" and exits 0; `weft demo` exits 0; a replay with --pcap writes a file.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace {

std::string run(const std::string& cmd, int& exit_code) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    exit_code = -1;
    return out;
  }
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

TEST(CliTest, CheckTwentySeedsPasses) {
  int code = 0;
  const std::string out = run(std::string(WEFT_EXE) + " check --seeds 20", code);
  EXPECT_EQ(last_line(out), "20 passed, 0 failed") << out;
  EXPECT_EQ(code, 0) << out;
}

TEST(CliTest, DemoSucceeds) {
  int code = 0;
  const std::string out = run(std::string(WEFT_EXE) + " demo", code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("All operations completed and verified."), std::string::npos) << out;
}

TEST(CliTest, ReplayOneSeedWithPcap) {
  const auto path =
      std::filesystem::temp_directory_path() / ("weft_cli_" + std::to_string(::getpid()) + ".pcap");
  int code = 0;
  const std::string out =
      run(std::string(WEFT_EXE) + " check --seed 3 --pcap " + path.string(), code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("PASSED seed=3"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_GT(std::filesystem::file_size(path), 24u);
  std::filesystem::remove(path);
}

TEST(CliTest, ReplayHasTheSameTraceHashInAnotherProcess) {
  int code = 0;
  auto hash_line = [&](const std::string& out) {
    const auto at = out.find("trace hash ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  const std::string a = run(std::string(WEFT_EXE) + " check --seed 11", code);
  const std::string b = run(std::string(WEFT_EXE) + " check --seed 11", code);
  const std::string c = run(std::string(WEFT_EXE) + " check --seed 12", code);
  ASSERT_NE(hash_line(a), "") << a;
  EXPECT_EQ(hash_line(a), hash_line(b));
  EXPECT_NE(hash_line(a), hash_line(c));
}

}  // namespace
