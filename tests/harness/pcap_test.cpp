// tests/harness/pcap_test.cpp — a campaign seed written as a capture holds every opcode the
// engine emits, and the real Wireshark dissector (tshark) finds nothing malformed in it.
// Skipped only when tshark is not installed.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "emu/harness/campaign.hpp"
#include "src/wire/packet.hpp"

namespace weft::harness {
namespace {

using wire::Opcode;
constexpr Opcode kEveryOpcode[] = {
    Opcode::kRcSendFirst,         Opcode::kRcSendMiddle,        Opcode::kRcSendLast,
    Opcode::kRcSendLastImm,       Opcode::kRcSendOnly,          Opcode::kRcSendOnlyImm,
    Opcode::kRcWriteFirst,        Opcode::kRcWriteMiddle,       Opcode::kRcWriteLast,
    Opcode::kRcWriteLastImm,      Opcode::kRcWriteOnly,         Opcode::kRcWriteOnlyImm,
    Opcode::kRcReadRequest,       Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle,
    Opcode::kRcReadResponseLast,  Opcode::kRcReadResponseOnly,  Opcode::kRcAcknowledge,
    Opcode::kRcAtomicAcknowledge, Opcode::kRcCompareSwap,       Opcode::kRcFetchAdd,
    Opcode::kUdSendOnly,          Opcode::kUdSendOnlyImm,
};
// AETH kinds: ACK, RNR NAK, PSN sequence NAK, remote access NAK (index into aeth_kinds).
constexpr int kEveryAeth[] = {0, 1, 2, 4};

bool has_everything(const SeedResult& r) {
  for (Opcode op : kEveryOpcode) {
    if (!r.opcodes_sent[static_cast<std::uint8_t>(op)]) return false;
  }
  for (int k : kEveryAeth) {
    if (!r.aeth_kinds[static_cast<std::size_t>(k)]) return false;
  }
  return true;
}

std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  status = pclose(p);
  return out;
}

TEST(PcapTest, CampaignCaptureHoldsEveryOpcodeAndTsharkFindsNoError) {
  if (std::system("command -v tshark >/dev/null 2>&1") != 0) GTEST_SKIP() << "tshark not installed";
  // The first seed whose traffic covers every opcode and every ACK/NAK kind.
  std::uint64_t seed = 0;
  for (std::uint64_t s = 1; s <= 3000 && seed == 0; ++s) {
    if (has_everything(run_seed(s))) seed = s;
  }
  ASSERT_NE(seed, 0u) << "no seed in 1..3000 emits every opcode";
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("weft_harness_" + std::to_string(seed) + "_" + std::to_string(::getpid()) + ".pcap"))
          .string();
  CampaignOptions opt;
  opt.pcap_path = path;
  const SeedResult r = run_seed(seed, opt);
  ASSERT_TRUE(has_everything(r));
  ASSERT_TRUE(std::filesystem::exists(path));
  std::printf("seed %llu -> %s (%s)\n", static_cast<unsigned long long>(seed), path.c_str(),
              r.config.c_str());

  int status = 0;
  // The payloads are random bytes; Wireshark's upper-layer heuristics on IB payloads (RPC over
  // RDMA, SMB Direct, an EtherType guess...) would try to decode them as their protocols and call
  // them malformed. Only the InfiniBand transport is under test, so those heuristics are off.
  std::string heur =
      run("tshark -G heuristic-decodes 2>/dev/null | awk '$1 == \"infiniband.payload\" "
          "{ printf \" --disable-protocol %s\", $2 }'",
          status);
  ASSERT_EQ(status, 0);
  const std::string tshark = "tshark -n" + heur + " -r '" + path + "'";
  // Every frame dissected; count frames, malformed ones and error-level expert infos.
  const std::string total = run(tshark + " -T fields -e frame.number 2>/dev/null | wc -l", status);
  ASSERT_EQ(status, 0);
  EXPECT_GT(std::stoul(total), 100u);
  const std::string bad = run(tshark +
                                  " -Y '_ws.malformed || _ws.expert.severity >= error' "
                                  "-T fields -e frame.number -e _ws.col.Info 2>/dev/null",
                              status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(bad, "") << "tshark reports malformed packets or errors in " << path;
  const std::string expert = run(tshark + " -q -z expert,error 2>/dev/null", status);
  EXPECT_EQ(expert.find("Errors ("), std::string::npos) << expert;
  EXPECT_EQ(expert.find("Malformed"), std::string::npos) << expert;
  // tshark sees every opcode too (IBA Table 35 values, as decimal).
  const std::string ops =
      run(tshark + " -T fields -e infiniband.bth.opcode 2>/dev/null | sort -u", status);
  EXPECT_EQ(status, 0);
  std::set<int> seen;
  std::size_t pos = 0;
  while (pos < ops.size()) {
    const std::size_t nl = ops.find('\n', pos);
    const std::string line =
        ops.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty()) seen.insert(std::stoi(line, nullptr, 0));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  for (Opcode op : kEveryOpcode) {
    EXPECT_TRUE(seen.count(static_cast<int>(op)))
        << "tshark did not see opcode " << static_cast<int>(op);
  }
  if (!HasFailure()) std::filesystem::remove(path);
}

}  // namespace
}  // namespace weft::harness
