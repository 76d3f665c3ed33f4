// tests/sma/pcap_smp_test.cpp — what the SMA and PMA put on the wire decodes in Wireshark: every
// attribute's GetResp (directed-route and LID-routed), trap 128 and a PMA reply, each wrapped in
// LRH/BTH/DETH for QP0 on VL15 (QP1 on VL0 for the PMA), written with PcapWriter and read back
// with `tshark -r`: the right class/method/attribute, a field from each, and nothing malformed.
// Skipped when tshark is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "src/wire/packet.hpp"
#include "src/wire/pcap.hpp"
#include "tests/sma/sma_test_util.hpp"

namespace weft::sma::test {
namespace {

namespace fs = std::filesystem;
using wire::SmpAttr;
using wire::SmpAttrExt;

std::string run(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  if (status) *status = st;
  return out;
}
bool have_tshark() {
  return run("command -v tshark 2>/dev/null").size() > 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}
std::uint64_t num(const std::string& s) {
  return s.empty() ? ~0ull : std::stoull(s, nullptr, 0);
}

std::vector<std::uint8_t> frame(std::uint32_t qp, std::span<const std::uint8_t> mad,
                                std::uint16_t dlid, std::uint16_t slid) {
  wire::Headers h;
  h.lrh.vl = qp == 0 ? kVl15 : 0;  // SMPs travel on VL15 (IBA 7.6.1)
  h.lrh.dlid = dlid;
  h.lrh.slid = slid;
  h.bth.opcode = wire::Opcode::kUdSendOnly;
  h.bth.dest_qp = qp;
  h.deth.qkey = qp == 0 ? 0 : wire::kQp1Qkey;
  h.deth.src_qp = qp;
  std::vector<std::uint8_t> out(wire::wire_bytes(h, mad.size()));
  out.resize(wire::encode_packet(h, mad, out));
  return out;
}

struct Frame {
  std::vector<std::uint8_t> bytes;
  std::uint8_t mgmt_class;
  std::uint8_t method;
  std::uint16_t attr;
  const char* field;  // a tshark field to check ("" for none)
  std::uint64_t value;
};

TEST(SmaTshark, RepliesDecodeCleanly) {
  if (!have_tshark()) GTEST_SKIP() << "tshark not installed";
  NodeState sw = test_switch();
  NodeState ca = test_ca();
  sw.ports[0].lid = 2;
  sw.ports[0].master_sm_lid = 1;
  ca.ports[1].lid = 5;
  Data lft{};
  for (std::size_t k = 0; k < 64; ++k) lft[k] = static_cast<std::uint8_t>(1 + k % 8);
  ASSERT_EQ(
      handle_smp(sw, 1, dr_smp_1hop(kSet, attr(SmpAttr::kLinearForwardingTable), 0, lft)).status,
      0);
  std::vector<Frame> frames;
  auto dr = [&](NodeState& n, std::uint16_t a, std::uint32_t mod, const char* field,
                std::uint64_t value) {
    MadReply r = handle_smp(n, 1, dr_smp_1hop(kGet, a, mod));
    ASSERT_EQ(r.status, 0) << a;
    frames.push_back({frame(0, r.mad, 0xFFFF, 0xFFFF), 0x81, kGetResp, a, field, value});
  };
  auto lid = [&](NodeState& n, std::uint16_t a, std::uint32_t mod, const char* field,
                 std::uint64_t value) {
    MadReply r = handle_smp(n, 1, lid_smp(kGet, a, mod), {.lrh_slid = 1});
    ASSERT_EQ(r.status, 0) << a;
    frames.push_back({frame(0, r.mad, 1, n.lid_port(1).lid), 0x01, kGetResp, a, field, value});
  };
  dr(sw, attr(SmpAttr::kNodeInfo), 0, "infiniband.nodeinfo.nodeguid", kSwitchGuid);
  dr(sw, attr(SmpAttr::kSwitchInfo), 0, "infiniband.switchinfo.linearfdbcap", 49152);
  dr(sw, attr(SmpAttr::kPortInfo), 0, "infiniband.portinfo.lid", 2);
  dr(sw, attr(SmpAttr::kLinearForwardingTable), 0, "infiniband.linearforwardingtable.port", 1);
  dr(sw, attr(SmpAttrExt::kMulticastForwardingTable), 0, "", 0);
  dr(sw, attr(SmpAttrExt::kSlToVlMappingTable), 0x0102, "", 0);
  dr(sw, attr(SmpAttrExt::kVlArbitrationTable), 0x10001, "", 0);
  lid(ca, attr(SmpAttr::kNodeInfo), 0, "infiniband.nodeinfo.portguid", kCaGuid + 1);
  lid(ca, attr(SmpAttr::kNodeDescription), 0, "", 0);
  lid(ca, attr(SmpAttr::kPortInfo), 1, "infiniband.portinfo.localportnum", 1);
  lid(ca, attr(SmpAttr::kPKeyTable), 0, "", 0);
  lid(ca, attr(SmpAttrExt::kGuidInfo), 0, "", 0);
  const auto trap = make_trap_128(sw, 0x77);
  ASSERT_TRUE(trap.has_value());
  frames.push_back({frame(0, trap->mad, trap->dlid, trap->slid), 0x01, 0x05,
                    attr(SmpAttrExt::kNotice), "infiniband.notice.trapnumberdeviceid", 128});
  {
    wire::PmaMad pm;
    pm.hdr.method = kGet;
    pm.hdr.attr_id = static_cast<std::uint16_t>(wire::PmaAttr::kPortCounters);
    pm.data[1] = 1;
    ca.ports[1].counters.count_xmit(4000);
    Mad m{};
    wire::encode_pma(pm, m);
    MadReply r = handle_pma(ca, 1, m, {.lrh_slid = 1});
    ASSERT_EQ(r.status, 0);
    frames.push_back({frame(1, r.mad, 1, 5), 0x04, kGetResp, 0x0012,
                      "infiniband.portcounters.portxmitdata", 1000});
  }

  const fs::path dir = fs::temp_directory_path() / ("weft_sma_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "smp.pcap").string();
  wire::PcapWriter w;
  ASSERT_TRUE(w.open(file, wire::kLinktypeErf));
  TimeNs t = 1'000'000'000;
  for (const Frame& f : frames) w.write(t += 1000, f.bytes);
  w.close();
  if (const char* keep = std::getenv("WEFT_SMA_PCAP_OUT"))
    fs::copy_file(file, keep, fs::copy_options::overwrite_existing);

  std::string cmd = "tshark -n -r " + file +
                    " -T fields -E separator=/t -E occurrence=f -e infiniband.mad.mgmtclass"
                    " -e infiniband.mad.method -e infiniband.mad.attributeid -e _ws.malformed";
  for (const Frame& f : frames)
    if (*f.field) cmd += std::string(" -e ") + f.field;
  int status = 0;
  const std::string out = run(cmd + " 2>/dev/null", &status);
  ASSERT_EQ(status, 0) << run(cmd + " 2>&1");
  const auto lines = split(out, '\n');
  ASSERT_EQ(lines.size(), frames.size()) << out;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i + 1) + ": " + lines[i]);
    const auto cols = split(lines[i] + "\t", '\t');
    ASSERT_GE(cols.size(), 4u);
    EXPECT_EQ(num(cols[0]), frames[i].mgmt_class);
    EXPECT_EQ(num(cols[1]), frames[i].method);
    EXPECT_EQ(num(cols[2]), frames[i].attr);
    EXPECT_EQ(cols[3], "");
    std::size_t col = 4;
    for (const Frame& f : frames) {
      if (!*f.field) continue;
      if (&f == &frames[i]) {
        ASSERT_LT(col, cols.size());
        EXPECT_EQ(num(cols[col]), f.value) << f.field;
      }
      ++col;
    }
  }
  const std::string bad = run("tshark -n -r " + file +
                              " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null");
  EXPECT_EQ(bad, "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft::sma::test
