// tests/harness/cli_test.cpp — the built `weft` binary: `weft check --seeds 20` ends with
// "20 passed, 0 failed" and exits 0; `weft demo` exits 0; a replay with --pcap writes a file;
// `weft topo` / `weft route` summaries, net-file round trip, and bad input (exit 2, named).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

// ---- weft topo / weft route -------------------------------------------------------------

std::filesystem::path temp_path(const char* name) {
  return std::filesystem::temp_directory_path() /
         (std::string("weft_cli_") + std::to_string(getpid()) + "_" + name);
}

TEST(CliTest, TopoSummaryAsJson) {
  int code = 0;
  const std::string out = run(std::string(WEFT_EXE) + " topo fat-tree:k=4 --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["hcas"], 16);
  EXPECT_EQ(j["switches"], 20);
  EXPECT_EQ(j["links"], 48);
  EXPECT_EQ(j["switch_levels"], 3);
}

TEST(CliTest, NetFileRoundTripThroughRoute) {
  const auto net = temp_path("k4.net");
  int code = 0;
  std::string out =
      run(std::string(WEFT_EXE) + " topo fat-tree:k=4 --netfile " + net.string(), code);
  ASSERT_EQ(code, 0) << out;
  out = run(std::string(WEFT_EXE) + " route " + net.string() + " --engine ftree --json", code);
  std::filesystem::remove(net);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["engines"].size(), 1u);
  const auto& e = j["engines"][0];
  EXPECT_EQ(e["engine"], "ftree");
  EXPECT_EQ(e["valid"], true);
  EXPECT_EQ(e["hca_pairs"], 240);
  EXPECT_EQ(e["unreachable_pairs"], 0);
  EXPECT_EQ(e["credit_loop"], false);
}

TEST(CliTest, RouteAllEnginesOnTorus) {
  int code = 0;
  const std::string out = run(std::string(WEFT_EXE) + " route torus:dims=3x3,hosts=1 --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["engines"].size(), 4u);
  for (const auto& e : j["engines"]) {
    if (e["engine"] == "ftree") {
      EXPECT_EQ(e["routed"], false);
      EXPECT_FALSE(e["refusal"].get<std::string>().empty());
    } else {
      EXPECT_EQ(e["valid"], true) << e.dump();
    }
    if (e["engine"] == "dor") {
      EXPECT_EQ(e["vls"], 2);
    }
  }
}

TEST(CliTest, BadTopologyInputNamesTheProblem) {
  int code = 0;
  std::string out = run(std::string(WEFT_EXE) + " route fat-tree:k=5", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("fat-tree:k=5"), std::string::npos) << out;
  out = run(std::string(WEFT_EXE) + " route fat-tree:k=4 --engine fastest", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("unknown engine 'fastest'"), std::string::npos) << out;
  const auto bad = temp_path("bad.net");
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    std::fputs("vendid=0x2c9\n\nSwitch 4 \"S-0000000000000001\"\n[1] this is not a port line\n", f);
    std::fclose(f);
  }
  out = run(std::string(WEFT_EXE) + " topo " + bad.string(), code);
  std::filesystem::remove(bad);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("line 4"), std::string::npos) << out;
  out = run(std::string(WEFT_EXE) + " topo /nonexistent/x.net", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("no such file"), std::string::npos) << out;
}

TEST(CliTest, SubnetManagerBringsUpAndVerifies) {
  int code = 0;
  std::string out = run(std::string(WEFT_EXE) + " sm fat-tree:k=4 --engine ftree --json", code);
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["hcas"], 16);
  EXPECT_EQ(j["switches"], 20);
  EXPECT_EQ(j["verify_pairs"], 240);
  EXPECT_EQ(j["verify_unreachable"], 0);
  EXPECT_EQ(j["mads_retried"], 0);
  EXPECT_GT(j["phases"]["discovery"]["mads"].get<int>(), 0);
  EXPECT_EQ(j["medium"], "fabric");  // the default: the SM over the emulated fabric
  // The same over emu/sm's DirectFabric: the same subnet, the same JSON keys.
  out = run(std::string(WEFT_EXE) + " sm fat-tree:k=4 --engine ftree --medium direct --json", code);
  ASSERT_EQ(code, 0) << out;
  const auto d = nlohmann::json::parse(out);
  EXPECT_EQ(d["ok"], true);
  EXPECT_EQ(d["medium"], "direct");
  EXPECT_EQ(d["verify_pairs"], 240);
  for (const auto& [k, v] : j.items()) EXPECT_TRUE(d.contains(k)) << k;
  // Lost SMPs are retried and the subnet still comes up (DirectFabric's loss model).
  out = run(std::string(WEFT_EXE) + " sm fat-tree:k=4 --medium direct --loss 0.02 --seed 3 --json",
            code);
  ASSERT_EQ(code, 0) << out;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_GT(j["mads_retried"].get<int>(), 0);
  out = run(std::string(WEFT_EXE) + " sm fat-tree:k=4 --loss 1.5", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--loss must be in [0, 1)"), std::string::npos) << out;
  out = run(std::string(WEFT_EXE) + " sm fat-tree:k=4 --loss 0.02", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--loss needs --medium direct"), std::string::npos) << out;
}
