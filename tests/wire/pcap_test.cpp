// tests/wire/pcap_test.cpp — the pcap writer/reader, and Wireshark as an independent decoder: a
// capture holding every opcode (local and global) and SMP/PMA MADs must decode in tshark with no
// malformed packets, no error expert infos, and every field equal to what was encoded.
#include "src/wire/pcap.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "src/wire/mad.hpp"
#include "src/wire/roce.hpp"
#include "tests/wire/wire_test_util.hpp"

namespace weft::wire {
namespace {

namespace fs = std::filesystem;
using test::all_opcodes;
using test::make_headers;
using test::payload_size_for;

// A scratch directory removed when the test ends, so nothing is left behind.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("weft_wire_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(Pcap, WriteThenReadBack) {
  TempDir dir;
  const std::string file = (dir.path / "a.pcap").string();
  PcapWriter w;
  EXPECT_FALSE(w.is_open());
  ASSERT_TRUE(w.open(file));
  EXPECT_TRUE(w.is_open());
  const std::vector<std::uint8_t> a = {1, 2, 3}, b(3000, 0xEE);
  w.write(1'500'000'123, a);
  w.write(2'000'000'000'000ULL + 7, b);
  w.close();
  EXPECT_FALSE(w.is_open());
  w.write(5, a);  // ignored once closed

  PcapReader r;
  ASSERT_TRUE(r.open(file));
  EXPECT_EQ(r.linktype(), kLinktypeInfiniband);
  EXPECT_TRUE(r.nanosecond());
  auto x = r.next();
  ASSERT_TRUE(x);
  EXPECT_EQ(x->ts_ns, 1'500'000'123u);
  EXPECT_EQ(x->data, a);
  auto y = r.next();
  ASSERT_TRUE(y);
  EXPECT_EQ(y->ts_ns, 2'000'000'000'007ULL);
  EXPECT_EQ(y->data, b);
  EXPECT_FALSE(r.next());
  EXPECT_EQ(fs::file_size(file), 24u + 16 + 3 + 16 + 3000);
}

TEST(Pcap, OpenFailures) {
  PcapWriter w;
  EXPECT_FALSE(w.open("/nonexistent-dir/x.pcap"));
  PcapReader r;
  EXPECT_FALSE(r.open("/nonexistent-dir/x.pcap"));
}

// ---- tshark --------------------------------------------------------------------------------

struct Expect {
  std::map<std::string, std::uint64_t> fields;
};

std::vector<std::uint8_t> mad_packet(std::uint32_t qp, std::span<const std::uint8_t> mad,
                                     std::uint32_t psn) {
  Headers h;
  h.lrh.vl = qp == 0 ? 15 : 0;  // SMPs travel on VL15 (IBA 7.6)
  h.lrh.sl = 0;
  h.lrh.dlid = 0x0005;
  h.lrh.slid = 0x0001;
  h.bth.opcode = Opcode::kUdSendOnly;
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = qp;
  h.bth.psn = psn;
  h.deth.qkey = qp == 0 ? 0 : kQp1Qkey;
  h.deth.src_qp = qp;
  std::vector<std::uint8_t> out(wire_bytes(h, mad.size()));
  out.resize(encode_packet(h, mad, out));
  return out;
}

std::vector<std::vector<std::uint8_t>> mads() {
  std::vector<std::vector<std::uint8_t>> out;
  std::array<std::uint8_t, kMadBytes> m{};

  SmpLid ni;
  ni.hdr.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
  ni.hdr.tid = 0x1001;
  ni.hdr.attr_id = static_cast<std::uint16_t>(SmpAttr::kNodeInfo);
  NodeInfo info{1,
                1,
                NodeType::kChannelAdapter,
                1,
                0x0002c90300aa0000ULL,
                0x0002c90300aa0000ULL,
                0x0002c90300aa0001ULL,
                128,
                0x1017,
                0,
                1,
                0x0002C9};
  encode(info, ni.data);
  encode_smp(ni, m);
  out.push_back(mad_packet(0, m, 1));

  SmpDr pi;
  pi.hdr.method = static_cast<std::uint8_t>(MadMethod::kGet);
  pi.hdr.tid = 0x1002;
  pi.hdr.attr_id = static_cast<std::uint16_t>(SmpAttr::kPortInfo);
  pi.hdr.attr_mod = 1;
  pi.hop_cnt = 2;
  pi.initial_path[1] = 1;
  pi.initial_path[2] = 7;
  dr_send(pi);
  encode_smp(pi, m);
  out.push_back(mad_packet(0, m, 2));

  PmaMad pc;
  pc.hdr.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
  pc.hdr.tid = 0x1003;
  pc.hdr.attr_id = static_cast<std::uint16_t>(PmaAttr::kPortCounters);
  PortCounters c;
  c.port_select = 1;
  c.port_xmit_data = 1000;
  c.port_rcv_data = 2000;
  c.port_xmit_pkts = 10;
  c.port_rcv_pkts = 20;
  encode(c, pc.data);
  encode_pma(pc, m);
  out.push_back(mad_packet(1, m, 3));

  PmaMad pe;
  pe.hdr.method = static_cast<std::uint8_t>(MadMethod::kGetResp);
  pe.hdr.tid = 0x1004;
  pe.hdr.attr_id = static_cast<std::uint16_t>(PmaAttr::kPortCountersExtended);
  PortCountersExtended e;
  e.port_select = 1;
  e.port_xmit_data = 1ULL << 40;
  encode(e, pe.data);
  encode_pma(pe, m);
  out.push_back(mad_packet(1, m, 4));
  return out;
}

const char* const kFields[] = {
    "infiniband.lrh.vl",
    "infiniband.lrh.sl",
    "infiniband.lrh.lnh",
    "infiniband.lrh.dlid",
    "infiniband.lrh.slid",
    "infiniband.lrh.pktlen",
    "infiniband.grh.tclass",
    "infiniband.grh.flowlabel",
    "infiniband.grh.paylen",
    "infiniband.grh.hoplmt",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.invariant.crc",
    "infiniband.variant.crc",
    "_ws.malformed",
};

Expect expect_for(const Headers& h_in, std::size_t len) {
  Headers h = h_in;
  fill_lengths(h, len);
  Expect e;
  auto& f = e.fields;
  f["infiniband.lrh.vl"] = h.lrh.vl;
  f["infiniband.lrh.sl"] = h.lrh.sl;
  f["infiniband.lrh.lnh"] = static_cast<unsigned>(h.lrh.lnh);
  f["infiniband.lrh.dlid"] = h.lrh.dlid;
  f["infiniband.lrh.slid"] = h.lrh.slid;
  f["infiniband.lrh.pktlen"] = h.lrh.pkt_len;
  if (h.has_grh) {
    f["infiniband.grh.tclass"] = h.grh.tclass;
    f["infiniband.grh.flowlabel"] = h.grh.flow_label;
    f["infiniband.grh.paylen"] = h.grh.pay_len;
    f["infiniband.grh.hoplmt"] = h.grh.hop_limit;
  }
  f["infiniband.bth.opcode"] = static_cast<unsigned>(h.bth.opcode);
  f["infiniband.bth.se"] = h.bth.se;
  f["infiniband.bth.padcnt"] = h.bth.pad_cnt;
  f["infiniband.bth.p_key"] = h.bth.pkey;
  f["infiniband.bth.destqp"] = h.bth.dest_qp;
  f["infiniband.bth.a"] = h.bth.ack_req;
  f["infiniband.bth.psn"] = h.bth.psn;
  const auto m = opcode_info(h.bth.opcode).mask;
  if (m & kHasReth) {
    f["infiniband.reth.va"] = h.reth.va;
    f["infiniband.reth.r_key"] = h.reth.rkey;
    f["infiniband.reth.dmalen"] = h.reth.dma_len;
  }
  if (m & kHasAtomicEth) {
    // Wireshark shows the AtomicETH's VA and R_Key under the RETH field names.
    f["infiniband.reth.va"] = h.atomic_eth.va;
    f["infiniband.reth.r_key"] = h.atomic_eth.rkey;
    f["infiniband.atomiceth.swapdt"] = h.atomic_eth.swap_add;
    f["infiniband.atomiceth.cmpdt"] = h.atomic_eth.compare;
  }
  if (m & kHasAeth) {
    f["infiniband.aeth.syndrome"] = h.aeth.syndrome;
    f["infiniband.aeth.msn"] = h.aeth.msn;
  }
  if (m & kHasAtomicAckEth) f["infiniband.atomicacketh.origremdt"] = h.atomic_ack_eth.orig;
  if (m & kHasDeth) {
    f["infiniband.deth.q_key"] = h.deth.qkey;
    f["infiniband.deth.srcqp"] = h.deth.src_qp;
  }
  if (m & kHasImm) f["infiniband.immdt"] = h.imm;
  if (m & kHasIeth) f["infiniband.ieth"] = h.ieth.rkey;
  return e;
}

std::uint64_t to_u64(const std::string& s) {
  return std::stoull(s, nullptr, 0);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

TEST(Tshark, EveryOpcodeAndMadsDecodeCleanly) {
  if (!test::have_tool("tshark")) GTEST_SKIP() << "tshark not installed";
  TempDir dir;
  const std::string file = (dir.path / "all.pcap").string();
  PcapWriter w;
  // Wireshark 4.0 has no mapping for linktype 247; ERF type INFINIBAND reaches the same dissector.
  ASSERT_TRUE(w.open(file, kLinktypeErf));
  std::vector<Expect> expects;
  std::vector<std::vector<std::uint8_t>> frames;
  TimeNs t = 1'000'000'000;
  std::uint64_t seed = 100;
  for (bool grh : {false, true}) {
    for (Opcode op : all_opcodes()) {
      Headers h = make_headers(op, grh, ++seed);
      // An AETH that means something: NAK "PSN sequence error" on ACKs, credits elsewhere.
      if (op == Opcode::kRcAcknowledge) h.aeth.syndrome = aeth_syndrome(AethKind::kNak, 0);
      const std::size_t len = payload_size_for(op, seed);
      frames.push_back(test::build(h, len));
      w.write(t += 1000, frames.back());
      expects.push_back(expect_for(h, len));
    }
  }
  const auto mad_frames = mads();
  for (const auto& f : mad_frames) {
    w.write(t += 1000, f);
    frames.push_back(f);
    expects.push_back({});
  }
  w.close();
  // Set WEFT_WIRE_PCAP_OUT=path to keep a copy of the capture for Wireshark.
  if (const char* keep = std::getenv("WEFT_WIRE_PCAP_OUT"))
    fs::copy_file(file, keep, fs::copy_options::overwrite_existing);

  std::string cmd = "tshark -n -r " + file + " -T fields -E separator=/t -E occurrence=f";
  for (const char* f : kFields) cmd += std::string(" -e ") + f;
  const auto r = test::run(cmd + " 2>/dev/null");
  ASSERT_EQ(r.status, 0) << test::run(cmd + " 2>&1").out;
  const auto lines = split(r.out, '\n');
  ASSERT_GE(lines.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i + 1));
    const auto cols = split(lines[i], '\t');
    ASSERT_EQ(cols.size(), std::size(kFields)) << lines[i];
    std::map<std::string, std::string> got;
    for (std::size_t k = 0; k < cols.size(); ++k) got[kFields[k]] = cols[k];
    EXPECT_EQ(got["_ws.malformed"], "");
    for (const auto& [name, value] : expects[i].fields) {
      ASSERT_FALSE(got[name].empty()) << name << " missing: " << lines[i];
      // ImmDt and IETH are byte fields: tshark prints them as bare hex.
      const bool bytes_field = name == "infiniband.immdt" || name == "infiniband.ieth";
      EXPECT_EQ(bytes_field ? std::stoull(got[name], nullptr, 16) : to_u64(got[name]), value)
          << name;
    }
    // Wireshark shows the CRCs as big-endian numbers of the wire bytes. (For PerfMgt MADs it
    // shows no CRC fields at all: its PMA dissector consumes the rest of the frame.)
    const bool is_mad = expects[i].fields.empty();
    if (is_mad && got["infiniband.invariant.crc"].empty()) continue;
    const auto& fr = frames[i];
    const std::size_t n = fr.size();
    EXPECT_EQ(to_u64(got["infiniband.invariant.crc"]),
              (std::uint64_t{fr[n - 6]} << 24) | (fr[n - 5] << 16) | (fr[n - 4] << 8) | fr[n - 3]);
    EXPECT_EQ(to_u64(got["infiniband.variant.crc"]), (fr[n - 2] << 8) | fr[n - 1]);
  }

  // MAD decoding: class, attribute and a field from each attribute.
  const auto m = test::run(
      "tshark -n -r " + file + " -Y infiniband.mad -T fields -E separator=/t " +
      "-e infiniband.mad.mgmtclass -e infiniband.mad.attributeid " +
      "-e infiniband.mad.transactionid -e infiniband.nodeinfo.nodeguid " +
      "-e infiniband.smpdirected.hopcount -e infiniband.portcounters.portselect" + " 2>/dev/null");
  const auto mlines = split(m.out, '\n');
  ASSERT_GE(mlines.size(), 4u) << m.out;
  EXPECT_EQ(to_u64(split(mlines[0], '\t')[0]), 0x01u);
  EXPECT_EQ(to_u64(split(mlines[0], '\t')[1]), 0x0011u);
  EXPECT_EQ(to_u64(split(mlines[0], '\t')[2]), 0x1001u);
  EXPECT_EQ(to_u64(split(mlines[0], '\t')[3]), 0x0002c90300aa0000ULL);
  EXPECT_EQ(to_u64(split(mlines[1], '\t')[0]), 0x81u);
  EXPECT_EQ(to_u64(split(mlines[1], '\t')[4]), 2u);
  EXPECT_EQ(to_u64(split(mlines[2], '\t')[0]), 0x04u);
  EXPECT_EQ(to_u64(split(mlines[2], '\t')[1]), 0x0012u);
  EXPECT_EQ(to_u64(split(mlines[3], '\t')[1]), 0x001Du);

  // No malformed packets and no error-level expert infos anywhere in the capture.
  const auto bad = test::run("tshark -n -r " + file +
                             " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null");
  EXPECT_EQ(bad.status, 0);
  EXPECT_EQ(bad.out, "");
  const auto expert = test::run("tshark -n -q -r " + file + " -z expert,error 2>/dev/null");
  EXPECT_EQ(expert.out.find("Errors ("), std::string::npos) << expert.out;
  EXPECT_EQ(expert.out.find("Malformed"), std::string::npos) << expert.out;
}

TEST(Tshark, RoceV2FramesDecodeCleanly) {
  if (!test::have_tool("tshark")) GTEST_SKIP() << "tshark not installed";
  TempDir dir;
  const std::string file = (dir.path / "roce.pcap").string();
  PcapWriter w;
  ASSERT_TRUE(w.open(file, kLinktypeEthernet));
  std::vector<Headers> sent;
  RoceV2Addr a;
  a.src_mac = {0x02, 0, 0, 0, 0, 1};
  a.dst_mac = {0x02, 0, 0, 0, 0, 2};
  a.src_ip = 0x0A000001;
  a.dst_ip = 0x0A000002;
  TimeNs t = 0;
  std::uint64_t seed = 500;
  for (Opcode op : all_opcodes()) {
    const Headers h = make_headers(op, false, ++seed);
    std::vector<std::uint8_t> payload(payload_size_for(op, seed), 0x33);
    std::vector<std::uint8_t> f(roce_v2_frame_bytes(h, payload.size()));
    f.resize(encode_roce_v2(a, h, payload, f));
    w.write(t += 1000, f);
    sent.push_back(h);
  }
  w.close();
  const auto r = test::run("tshark -n -r " + file +
                           " -T fields -E separator=/t -e udp.dstport -e infiniband.bth.opcode" +
                           " -e infiniband.bth.psn -e infiniband.bth.destqp -e _ws.malformed" +
                           " -e infiniband.reth.va 2>/dev/null");
  const auto lines = split(r.out, '\n');
  ASSERT_GE(lines.size(), sent.size()) << r.out;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    SCOPED_TRACE(to_string(sent[i].bth.opcode));
    const auto c = split(lines[i], '\t');
    ASSERT_EQ(c.size(), 6u) << lines[i];
    EXPECT_EQ(to_u64(c[0]), kRoceV2UdpPort);
    EXPECT_EQ(to_u64(c[1]), static_cast<unsigned>(sent[i].bth.opcode));
    EXPECT_EQ(to_u64(c[2]), sent[i].bth.psn);
    EXPECT_EQ(to_u64(c[3]), sent[i].bth.dest_qp);
    EXPECT_EQ(c[4], "");
    if (opcode_info(sent[i].bth.opcode).mask & kHasReth) {
      EXPECT_EQ(to_u64(c[5]), sent[i].reth.va);
    }
  }
  const auto bad = test::run("tshark -n -r " + file +
                             " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null");
  EXPECT_EQ(bad.out, "");
}

}  // namespace
}  // namespace weft::wire
