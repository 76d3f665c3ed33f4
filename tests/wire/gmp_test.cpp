// tests/wire/gmp_test.cpp — the GMP/RMPP, SA and CM codecs: round trips of every message with
// every field set, bytes at the offsets the IBA tables give, decode errors, Weft's CM header,
// and Wireshark as an independent decoder (SA queries with RMPP answers, PathRecord, NodeRecord,
// PortInfoRecord, and every CM message decode with no malformed packet and the fields we wrote).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "src/wire/cm.hpp"
#include "src/wire/gmp.hpp"
#include "src/wire/packet.hpp"
#include "src/wire/pcap.hpp"
#include "src/wire/sa.hpp"
#include "tests/wire/wire_test_util.hpp"

namespace weft::wire {
namespace {

namespace fs = std::filesystem;
using Mad = std::array<std::uint8_t, kMadBytes>;

std::array<std::uint8_t, 16> gid(std::uint8_t seed) {
  std::array<std::uint8_t, 16> g{};
  g[0] = 0xFE;
  g[1] = 0x80;
  for (int i = 8; i < 16; ++i) g[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(seed + i);
  return g;
}

template <std::size_t N>
std::array<std::uint8_t, N> pattern(std::uint8_t seed) {
  std::array<std::uint8_t, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::uint8_t>(seed + i * 3);
  return a;
}

CmPath path(std::uint8_t s) {
  CmPath p;
  p.local_lid = static_cast<std::uint16_t>(0x100 + s);
  p.remote_lid = static_cast<std::uint16_t>(0x200 + s);
  p.local_gid = gid(s);
  p.remote_gid = gid(static_cast<std::uint8_t>(s + 50));
  p.flow_label = 0xABCDE;
  p.packet_rate = 16;
  p.traffic_class = 0x42;
  p.hop_limit = 7;
  p.sl = 9;
  p.subnet_local = true;
  p.local_ack_timeout = 17;
  return p;
}

CmReq full_req() {
  CmReq r;
  r.local_comm_id = 0x11223344;
  r.service_id = 0x0106000000001234ull;
  r.local_ca_guid = 0x0002C90300AA0000ull;
  r.local_qkey = 0x1BADCAFE;
  r.local_qpn = 0xABCDEF;
  r.responder_resources = 4;
  r.local_eecn = 0x123456;
  r.initiator_depth = 3;
  r.remote_eecn = 0x654321;
  r.remote_cm_response_timeout = 21;
  r.transport = CmTransport::kRc;
  r.end_to_end_flow_control = true;
  r.starting_psn = 0xFEDCBA;
  r.local_cm_response_timeout = 19;
  r.retry_count = 6;
  r.pkey = 0xFFFF;
  r.path_mtu = 5;
  r.rdc_exists = false;
  r.rnr_retry_count = 5;
  r.max_cm_retries = 15;
  r.srq = true;
  r.extended_transport = 0;
  r.primary = path(1);
  r.alternate = path(2);
  r.private_data = pattern<kReqPrivateBytes>(7);
  return r;
}

std::vector<CmMessage> every_cm_message() {
  CmRep rep;
  rep.local_comm_id = 0x55667788;
  rep.remote_comm_id = 0x11223344;
  rep.local_qkey = 0x12345678;
  rep.local_qpn = 0x000A0B;
  rep.local_eecn = 0x0C0D0E;
  rep.starting_psn = 0x777777;
  rep.responder_resources = 2;
  rep.initiator_depth = 1;
  rep.target_ack_delay = 13;
  rep.failover_accepted = 1;
  rep.end_to_end_flow_control = true;
  rep.rnr_retry_count = 6;
  rep.srq = true;
  rep.local_ca_guid = 0x0002C90300BB0000ull;
  rep.private_data = pattern<kRepPrivateBytes>(9);
  CmRtu rtu{0x11223344, 0x55667788, pattern<kRtuPrivateBytes>(11)};
  CmRej rej;
  rej.local_comm_id = 0;
  rej.remote_comm_id = 0x11223344;
  rej.msg_rejected = CmMsgKind::kReq;
  rej.ari_length = 8;
  rej.reason = static_cast<std::uint16_t>(RejReason::kConsumerReject);
  rej.ari = pattern<kRejAriBytes>(13);
  rej.private_data = pattern<kRejPrivateBytes>(15);
  CmMra mra{0x55667788, 0x11223344, CmMsgKind::kRep, 20, pattern<kMraPrivateBytes>(17)};
  CmDreq dreq{0x11223344, 0x55667788, 0x000A0B, pattern<kDreqPrivateBytes>(19)};
  CmDrep drep{0x55667788, 0x11223344, pattern<kDrepPrivateBytes>(21)};
  return {full_req(), rep, rtu, rej, mra, dreq, drep};
}

TEST(Cm, EveryMessageRoundTrips) {
  std::uint64_t tid = 0x434D000000000001ull;
  for (const CmMessage& m : every_cm_message()) {
    SCOPED_TRACE(std::string(to_string(attr_of(m))));
    Mad mad{};
    encode_cm(tid, m, mad);
    auto d = decode_cm(mad);
    ASSERT_TRUE(d.ok()) << to_string(d.error());
    EXPECT_EQ(d.value().hdr.mgmt_class, kMgmtClassCm);
    EXPECT_EQ(d.value().hdr.class_version, kCmClassVersion);
    EXPECT_EQ(d.value().hdr.method, static_cast<std::uint8_t>(GmpMethod::kSend));
    EXPECT_EQ(d.value().hdr.tid, tid);
    EXPECT_EQ(d.value().hdr.attr_id, static_cast<std::uint16_t>(attr_of(m)));
    EXPECT_TRUE(d.value().msg == m);
    ++tid;
  }
}

TEST(Cm, ReqBytesAtIbaOffsets) {
  Mad mad{};
  encode_cm(1, full_req(), mad);
  // Expect: IBA 12.6.5 Table 98, message data from MAD byte 24.
  const auto at = [&](std::size_t off) { return mad[kCmDataOffset + off]; };
  EXPECT_EQ(at(0), 0x11);   // Local Communication ID
  EXPECT_EQ(at(8), 0x01);   // ServiceID
  EXPECT_EQ(at(32), 0xAB);  // Local QPN
  EXPECT_EQ(at(34), 0xEF);
  EXPECT_EQ(at(35), 4);                     // Responder Resources
  EXPECT_EQ(at(39), 3);                     // Initiator Depth
  EXPECT_EQ(at(43), 21 << 3 | 0 << 1 | 1);  // RemoteCMRespTO, TST, E2E
  EXPECT_EQ(at(44), 0xFE);                  // Starting PSN
  EXPECT_EQ(at(47), 19 << 3 | 6);           // LocalCMRespTO, Retry Count
  EXPECT_EQ(at(50), 5 << 4 | 5);            // Path MTU, RNR Retry
  EXPECT_EQ(at(51), 15 << 4 | 0x8);         // Max CM Retries, SRQ
  EXPECT_EQ(at(52), 0x01);                  // Primary Local LID 0x0101
  EXPECT_EQ(at(53), 0x01);
  EXPECT_EQ(at(94), 9 << 4 | 0x8);  // Primary SL, SubnetLocal
  EXPECT_EQ(at(95), 17 << 3);       // Primary Local ACK Timeout
  EXPECT_EQ(at(140), 7);            // Private data
}

TEST(Cm, SidrBytesAtIbaOffsets) {
  CmSidrReq q;
  q.request_id = 0x01020304;
  q.pkey = 0xFFFF;
  q.service_id = 0x1122334455667788ull;
  q.private_data[215] = 0x77;
  std::array<std::uint8_t, kMadBytes> m{};
  encode_sidr(0xABCD, q, m);
  EXPECT_EQ(m[1], kMgmtClassCm);
  EXPECT_EQ(m[2], kCmClassVersion);
  EXPECT_EQ(m[3], 0x03);  // Send
  EXPECT_EQ(m[17], 0x17);
  EXPECT_EQ(m[24], 0x01);  // CM data from byte 24
  EXPECT_EQ(m[27], 0x04);
  EXPECT_EQ(m[28], 0xFF);
  EXPECT_EQ(m[32], 0x11);
  EXPECT_EQ(m[255], 0x77);
  EXPECT_EQ(decode_sidr_req(m).value(), q);
  EXPECT_EQ(decode_sidr_rep(m).error(), GmpError::kBadAttribute);
  EXPECT_EQ(decode_cm(m).error(), GmpError::kBadAttribute);  // not a CmMessage
  CmSidrRep r;
  r.request_id = 0x01020304;
  r.status = SidrStatus::kNoQp;
  r.qpn = 0xABCDEF;
  r.service_id = 0x1122334455667788ull;
  r.qkey = 0x80010000;
  r.info[0] = 0x42;
  r.private_data[135] = 0x99;
  encode_sidr(0xABCD, r, m);
  EXPECT_EQ(m[17], 0x18);
  EXPECT_EQ(m[28], 3);
  EXPECT_EQ(m[32], 0xAB);
  EXPECT_EQ(m[34], 0xEF);
  EXPECT_EQ(m[35], 0);
  EXPECT_EQ(m[36], 0x11);
  EXPECT_EQ(m[44], 0x80);
  EXPECT_EQ(m[48], 0x42);
  EXPECT_EQ(m[255], 0x99);
  EXPECT_EQ(decode_sidr_rep(m).value(), r);
  m[28] = 6;  // a reserved status
  EXPECT_EQ(decode_sidr_rep(m).error(), GmpError::kBadField);
}

TEST(Cm, DecodeErrors) {
  Mad mad{};
  encode_cm(1, full_req(), mad);
  EXPECT_EQ(decode_cm(std::span<const std::uint8_t>(mad).first(255)).error(), GmpError::kTruncated);
  Mad bad = mad;
  bad[0] = 2;
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadBaseVersion);
  bad = mad;
  bad[1] = kMgmtClassSa;
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadClass);
  bad = mad;
  bad[2] = 1;
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadClassVersion);
  bad = mad;
  bad[17] = static_cast<std::uint8_t>(CmAttr::kLap);
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadAttribute);
  bad = mad;
  bad[kCmDataOffset + 43] |= 3 << 1;  // transport service type 3 is reserved
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadField);
  CmRej rej;
  encode_cm(1, rej, bad);
  bad[kCmDataOffset + 9] = 73 << 1;  // RejectInfoLength above the 72-byte ARI
  EXPECT_EQ(decode_cm(bad).error(), GmpError::kBadField);
}

TEST(Cm, WeftHeader) {
  std::array<std::uint8_t, kReqPrivateBytes> pd{};
  encode(WeftCmHeader{WeftRecovery::kSelectiveRepeat, WeftReject::kRecoveryModeMismatch}, pd);
  EXPECT_EQ(pd[0], 'W');
  EXPECT_EQ(pd[1], 'F');
  EXPECT_EQ(pd[2], 1);
  EXPECT_EQ(pd[3], 1);
  EXPECT_EQ(pd[4], 1);
  auto h = decode_weft_cm_header(pd);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->recovery, WeftRecovery::kSelectiveRepeat);
  EXPECT_EQ(h->reject, WeftReject::kRecoveryModeMismatch);
  pd[3] = 2;  // reserved mode
  EXPECT_FALSE(decode_weft_cm_header(pd));
  pd.fill(0);  // a foreign peer's private data
  EXPECT_FALSE(decode_weft_cm_header(pd));
  EXPECT_FALSE(decode_weft_cm_header(std::span<const std::uint8_t>(pd).first(7)));
}

TEST(Rmpp, HeaderRoundTripAndChecks) {
  Mad mad{};
  RmppHeader r;
  r.version = 1;
  r.type = RmppType::kData;
  r.resp_time = 0x1F;
  r.flags = kRmppActive | kRmppFirst;
  r.data1 = 1;
  r.data2 = 0x1234;
  encode_rmpp(r, mad);
  EXPECT_EQ(mad[24], 1);
  EXPECT_EQ(mad[25], 1);
  EXPECT_EQ(mad[26], 0x1F << 3 | 3);
  EXPECT_EQ(mad[35], 0x34);
  auto d = decode_rmpp(mad);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().data2, 0x1234u);
  EXPECT_EQ(d.value().flags, kRmppActive | kRmppFirst);
  mad[25] = 9;
  EXPECT_EQ(decode_rmpp(mad).error(), GmpError::kBadRmpp);
  mad[25] = 1;
  mad[24] = 2;
  EXPECT_EQ(decode_rmpp(mad).error(), GmpError::kBadRmpp);
}

PathRecord full_path() {
  PathRecord p;
  p.service_id = 0x1234;
  p.dgid = gid(1);
  p.sgid = gid(2);
  p.dlid = 0x0007;
  p.slid = 0x0003;
  p.raw_traffic = false;
  p.flow_label = 0x12345;
  p.hop_limit = 0x40;
  p.tclass = 0x11;
  p.reversible = true;
  p.numb_path = 1;
  p.pkey = 0xFFFF;
  p.qos_class = 0x123;
  p.sl = 3;
  p.mtu_selector = Selector::kExactly;
  p.mtu = 5;
  p.rate_selector = Selector::kExactly;
  p.rate = 7;
  p.packet_life_time_selector = Selector::kExactly;
  p.packet_life_time = 8;
  p.preference = 0;
  return p;
}

TEST(Sa, RecordsRoundTripAtIbaOffsets) {
  std::array<std::uint8_t, kPathRecordBytes> pb{};
  encode(full_path(), pb);
  EXPECT_EQ(decode_path_record(pb), full_path());
  EXPECT_EQ(pb[41], 0x07);            // DLID (15.2.5.16)
  EXPECT_EQ(pb[43], 0x03);            // SLID
  EXPECT_EQ(pb[49], 0x81);            // Reversible, NumbPath
  EXPECT_EQ(pb[53], 0x3 | 0x3 << 4);  // QosClass low nibble, SL
  EXPECT_EQ(pb[54], 2 << 6 | 5);      // MTUSelector, MTU
  EXPECT_EQ(pb[55], 2 << 6 | 7);
  EXPECT_EQ(pb[56], 2 << 6 | 8);

  NodeRecord nr;
  nr.lid = 5;
  nr.node_info.node_type = NodeType::kSwitch;
  nr.node_info.num_ports = 36;
  nr.node_info.node_guid = 0x0002C90300001000ull;
  nr.node_info.port_guid = 0x0002C90300001000ull;
  nr.node_info.vendor_id = 0x02C9;
  nr.description.set("leaf-0");
  std::array<std::uint8_t, kNodeRecordBytes> nb{};
  encode(nr, nb);
  EXPECT_EQ(nb[1], 5);
  EXPECT_EQ(nb[4 + 2], 2);  // NodeInfo.NodeType
  EXPECT_EQ(nb[44], 'l');   // NodeDescription
  const NodeRecord nd = decode_node_record(nb);
  EXPECT_EQ(nd.lid, 5);
  EXPECT_EQ(nd.node_info.node_guid, nr.node_info.node_guid);
  EXPECT_EQ(nd.description.view(), "leaf-0");

  PortInfoRecord pr;
  pr.endport_lid = 9;
  pr.port_num = 1;
  pr.port_info.lid = 9;
  pr.port_info.port_state = PortState::kActive;
  pr.port_info.neighbor_mtu = 5;
  std::array<std::uint8_t, kPortInfoRecordBytes> ib{};
  encode(pr, ib);
  EXPECT_EQ(ib[1], 9);
  EXPECT_EQ(ib[2], 1);
  const PortInfoRecord pd = decode_port_info_record(ib);
  EXPECT_EQ(pd.port_info.lid, 9);
  EXPECT_EQ(pd.port_info.port_state, PortState::kActive);
  EXPECT_EQ(pd.port_info.neighbor_mtu, 5);
  EXPECT_EQ(attr_offset_for(kPathRecordBytes), 8);
  EXPECT_EQ(attr_offset_for(kNodeRecordBytes), 14);
  EXPECT_EQ(attr_offset_for(kPortInfoRecordBytes), 9);
}

TEST(Sa, PKeyTableRecordAtIbaOffsets) {
  PKeyTableRecord r;
  r.lid = 0x0102;
  r.block_num = 0x0304;
  r.port_num = 5;
  r.pkeys[0] = 0xFFFF;
  r.pkeys[31] = 0x8001;
  std::array<std::uint8_t, kPKeyTableRecordBytes> b{};
  b.fill(0xEE);
  encode(r, b);
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[1], 0x02);
  EXPECT_EQ(b[2], 0x03);
  EXPECT_EQ(b[3], 0x04);
  EXPECT_EQ(b[4], 5);
  EXPECT_EQ(b[5], 0);  // reserved
  EXPECT_EQ(b[7], 0);
  EXPECT_EQ(b[8], 0xFF);
  EXPECT_EQ(b[9], 0xFF);
  EXPECT_EQ(b[10], 0);
  EXPECT_EQ(b[70], 0x80);
  EXPECT_EQ(b[71], 0x01);
  EXPECT_EQ(decode_pkey_table_record(b), r);
  EXPECT_EQ(attr_offset_for(kPKeyTableRecordBytes), 9);
  EXPECT_EQ(static_cast<std::uint16_t>(SaAttr::kPKeyTableRecord), 0x0033);
}

TEST(Sa, ServiceRecordAtIbaOffsets) {
  ServiceRecord r;
  r.service_id = 0x1122334455667788ull;
  r.gid[0] = 0xFE;
  r.gid[15] = 0x01;
  r.pkey = 0x8001;
  r.lease = 0x0A0B0C0D;
  r.key[0] = 0x99;
  r.name[0] = 'w';
  r.data8[15] = 0x42;
  r.data16[7] = 0xBEEF;
  r.data32[3] = 0xCAFEF00D;
  r.data64[1] = 0x0102030405060708ull;
  std::array<std::uint8_t, kServiceRecordBytes> b{};
  encode(r, b);
  EXPECT_EQ(b[0], 0x11);
  EXPECT_EQ(b[7], 0x88);
  EXPECT_EQ(b[8], 0xFE);
  EXPECT_EQ(b[23], 0x01);
  EXPECT_EQ(b[24], 0x80);
  EXPECT_EQ(b[25], 0x01);
  EXPECT_EQ(b[28], 0x0A);
  EXPECT_EQ(b[31], 0x0D);
  EXPECT_EQ(b[32], 0x99);
  EXPECT_EQ(b[48], 'w');
  EXPECT_EQ(b[127], 0x42);
  EXPECT_EQ(b[142], 0xBE);
  EXPECT_EQ(b[143], 0xEF);
  EXPECT_EQ(b[156], 0xCA);
  EXPECT_EQ(b[159], 0x0D);
  EXPECT_EQ(b[168], 0x01);
  EXPECT_EQ(b[175], 0x08);
  EXPECT_EQ(decode_service_record(b), r);
  EXPECT_EQ(attr_offset_for(kServiceRecordBytes), 22);
}

TEST(Sa, McMemberRecordAtIbaOffsets) {
  McMemberRecord r;
  r.mgid[0] = 0xFF;
  r.port_gid[15] = 0x07;
  r.qkey = 0x80010000;
  r.mlid = 0xC001;
  r.mtu_selector = Selector::kExactly;
  r.mtu = 4;
  r.tclass = 0x11;
  r.pkey = 0xFFFF;
  r.rate_selector = Selector::kExactly;
  r.rate = 7;
  r.packet_life_time_selector = Selector::kLess;
  r.packet_life_time = 8;
  r.sl = 3;
  r.flow_label = 0xABCDE;
  r.hop_limit = 0x40;
  r.scope = 2;
  r.join_state = 1;
  r.proxy_join = true;
  std::array<std::uint8_t, kMcMemberRecordBytes> b{};
  encode(r, b);
  EXPECT_EQ(b[0], 0xFF);
  EXPECT_EQ(b[31], 0x07);
  EXPECT_EQ(b[32], 0x80);
  EXPECT_EQ(b[36], 0xC0);
  EXPECT_EQ(b[37], 0x01);
  EXPECT_EQ(b[38], 0x84);  // selector 2 << 6 | MTU 4
  EXPECT_EQ(b[39], 0x11);
  EXPECT_EQ(b[42], 0x87);
  EXPECT_EQ(b[43], 0x48);
  EXPECT_EQ(b[44], 0x3A);  // SL 3, FlowLabel 0xA....
  EXPECT_EQ(b[45], 0xBC);
  EXPECT_EQ(b[46], 0xDE);
  EXPECT_EQ(b[47], 0x40);
  EXPECT_EQ(b[48], 0x21);
  EXPECT_EQ(b[49], 0x80);
  EXPECT_EQ(decode_mcmember_record(b), r);
  EXPECT_EQ(attr_offset_for(kMcMemberRecordBytes), 7);
}

TEST(Sa, MadRoundTripAndErrors) {
  SaMad m;
  m.hdr.class_version = kSaClassVersion;
  m.hdr.method = static_cast<std::uint8_t>(GmpMethod::kGetTable);
  m.hdr.tid = 77;
  m.hdr.attr_id = static_cast<std::uint16_t>(SaAttr::kPathRecord);
  m.sm_key = 0x1122334455667788ull;
  m.attr_offset = 8;
  m.comp_mask = path_comp::kDlid | path_comp::kSlid;
  encode(full_path(), std::span<std::uint8_t, kPathRecordBytes>(m.data.data(), kPathRecordBytes));
  Mad mad{};
  encode_sa(m, mad);
  EXPECT_EQ(mad[1], kMgmtClassSa);
  EXPECT_EQ(mad[36], 0x11);  // SM_Key
  EXPECT_EQ(mad[45], 8);     // AttributeOffset
  EXPECT_EQ(mad[55], 0x30);  // ComponentMask bits 4, 5
  auto d = decode_sa(mad);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().comp_mask, m.comp_mask);
  EXPECT_EQ(d.value().data, m.data);
  Mad bad = mad;
  bad[2] = 1;
  EXPECT_EQ(decode_sa(bad).error(), GmpError::kBadClassVersion);
  bad = mad;
  bad[1] = kMgmtClassCm;
  EXPECT_EQ(decode_sa(bad).error(), GmpError::kBadClass);
  EXPECT_EQ(decode_sa(std::span<const std::uint8_t>(mad).first(100)).error(), GmpError::kTruncated);
}

TEST(Sa, RateCodes) {
  EXPECT_EQ(rate_code_of_gbps(40), 7);
  EXPECT_EQ(rate_code_of_gbps(100), 16);
  EXPECT_EQ(rate_code_of_gbps(400), 21);
  EXPECT_EQ(rate_code_of_gbps(45), 7);  // the largest rate not above
  EXPECT_EQ(rate_code_of_gbps(1), 0);
  EXPECT_DOUBLE_EQ(gbps_of_rate_code(3), 10.0);
}

// ---- tshark --------------------------------------------------------------------------------

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("weft_gmp_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::uint8_t> qp1_packet(std::span<const std::uint8_t> mad, std::uint32_t psn) {
  Headers h;
  h.lrh.vl = 0;
  h.lrh.dlid = 0x0005;
  h.lrh.slid = 0x0001;
  h.bth.opcode = Opcode::kUdSendOnly;
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = kQp1;
  h.bth.psn = psn;
  h.deth.qkey = kQp1Qkey;
  h.deth.src_qp = kQp1;
  std::vector<std::uint8_t> out(wire_bytes(h, mad.size()));
  out.resize(encode_packet(h, mad, out));
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) v.push_back(cur);
  return v;
}

std::uint64_t to_u64(const std::string& s) {
  return std::stoull(s, nullptr, 0);
}

TEST(Tshark, SaAndCmMadsDecodeCleanly) {
  if (!test::have_tool("tshark")) GTEST_SKIP() << "tshark not installed";
  // Each frame with the fields tshark must show for it.
  std::vector<std::pair<Mad, std::map<std::string, std::uint64_t>>> frames;
  // SA: a PathRecord GetTable, its one-segment GetTableResp, a NodeRecord and a PortInfoRecord
  // answer, and an RMPP ACK.
  SaMad q;
  q.hdr.class_version = kSaClassVersion;
  q.hdr.method = static_cast<std::uint8_t>(GmpMethod::kGetTable);
  q.hdr.tid = 0x5341000000000001ull;
  q.hdr.attr_id = static_cast<std::uint16_t>(SaAttr::kPathRecord);
  q.comp_mask = path_comp::kDlid | path_comp::kSlid;
  PathRecord pr = full_path();
  encode(pr, std::span<std::uint8_t, kPathRecordBytes>(q.data.data(), kPathRecordBytes));
  Mad m{};
  encode_sa(q, m);
  frames.push_back({m, {{"infiniband.sa.componentmask", q.comp_mask}}});
  SaMad a = q;
  a.hdr.method = static_cast<std::uint8_t>(GmpMethod::kGetTableResp);
  a.attr_offset = 8;
  a.rmpp = RmppHeader{1, RmppType::kData, 0x1F, kRmppActive | kRmppFirst | kRmppLast, 0, 1, 84};
  encode_sa(a, m);
  frames.push_back({m,
                    {{"infiniband.rmpp.rmpptype", 1},
                     {"infiniband.sa.attributeoffset", 8},
                     {"infiniband.pathrecord.dlid", pr.dlid},
                     {"infiniband.pathrecord.slid", pr.slid},
                     {"infiniband.pathrecord.mtu", pr.mtu}}});
  SaMad n = a;
  n.hdr.attr_id = static_cast<std::uint16_t>(SaAttr::kNodeRecord);
  n.attr_offset = attr_offset_for(kNodeRecordBytes);
  n.data.fill(0);
  NodeRecord nr;
  nr.lid = 3;
  nr.node_info.node_guid = 0x0002C90300AA0000ull;
  nr.node_info.port_guid = 0x0002C90300AA0001ull;
  nr.node_info.local_port_num = 1;
  nr.description.set("host-0 mlx5_0");
  encode(nr, std::span<std::uint8_t, kNodeRecordBytes>(n.data.data(), kNodeRecordBytes));
  n.rmpp.data2 = kNodeRecordBytes + 20;
  encode_sa(n, m);
  frames.push_back({m, {{"infiniband.sa.attributeoffset", 14}}});
  SaMad p = a;
  p.hdr.attr_id = static_cast<std::uint16_t>(SaAttr::kPortInfoRecord);
  p.attr_offset = attr_offset_for(kPortInfoRecordBytes);
  p.data.fill(0);
  PortInfoRecord pir;
  pir.endport_lid = 3;
  pir.port_num = 1;
  pir.port_info.lid = 3;
  pir.port_info.port_state = PortState::kActive;
  pir.port_info.local_port_num = 1;
  encode(pir, std::span<std::uint8_t, kPortInfoRecordBytes>(p.data.data(), kPortInfoRecordBytes));
  p.rmpp.data2 = kPortInfoRecordBytes + 20;
  encode_sa(p, m);
  frames.push_back({m, {{"infiniband.sa.attributeoffset", 9}}});
  SaMad ack = q;
  ack.rmpp = RmppHeader{1, RmppType::kAck, 0x1F, kRmppActive, 0, 1, 17};
  ack.data.fill(0);
  encode_sa(ack, m);
  frames.push_back({m, {{"infiniband.rmpp.rmpptype", 2}}});
  // CM: every message.
  std::uint64_t tid = 0x434D000000000001ull;
  for (const CmMessage& msg : every_cm_message()) {
    encode_cm(tid++, msg, m);
    std::map<std::string, std::uint64_t> f;
    if (auto* r = std::get_if<CmReq>(&msg)) {
      f = {{"infiniband.cm.req.localqpn", r->local_qpn},
           {"infiniband.cm.req.startpsn", r->starting_psn},
           {"infiniband.cm.req.prim_locallid", r->primary.local_lid}};
    } else if (auto* r = std::get_if<CmRep>(&msg)) {
      f = {{"infiniband.cm.rep.localqpn", r->local_qpn},
           {"infiniband.cm.rep.startpsn", r->starting_psn}};
    } else if (auto* r = std::get_if<CmRtu>(&msg)) {
      f = {{"infiniband.cm.rtu.localcommid", r->local_comm_id}};
    } else if (auto* r = std::get_if<CmRej>(&msg)) {
      f = {{"infiniband.cm.rej.reason", r->reason}};
    } else if (auto* r = std::get_if<CmDreq>(&msg)) {
      f = {{"infiniband.cm.dreq.remotecommid", r->remote_comm_id}};
    } else if (auto* r = std::get_if<CmDrep>(&msg)) {
      f = {{"infiniband.cm.drsp.localcommid", r->local_comm_id}};
    }
    frames.push_back({m, f});
  }

  TempDir dir;
  const std::string file = (dir.path / "gmp.pcap").string();
  PcapWriter w;
  ASSERT_TRUE(w.open(file, kLinktypeErf));
  TimeNs t = 1'000'000'000;
  std::uint32_t psn = 1;
  for (const auto& [mad, fields] : frames) w.write(t += 1000, qp1_packet(mad, psn++));
  w.close();
  if (const char* keep = std::getenv("WEFT_WIRE_PCAP_OUT"))
    fs::copy_file(file, keep, fs::copy_options::overwrite_existing);

  const auto bad = test::run("tshark -n -r " + file +
                             " -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null");
  EXPECT_EQ(bad.out, "") << "malformed or error packets";
  // One tshark run: every field any frame needs, one column each, one line per frame.
  std::vector<std::string> names;
  for (const auto& fr : frames)
    for (const auto& [name, value] : fr.second)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::string cmd = "tshark -n -r " + file + " -T fields -E separator=/t -E occurrence=f";
  for (const auto& name : names) cmd += " -e " + name;
  const auto r = test::run(cmd + " 2>/dev/null");
  ASSERT_EQ(r.status, 0);
  const auto lines = split(r.out, '\n');
  ASSERT_EQ(lines.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i + 1));
    auto cols = split(lines[i], '\t');
    cols.resize(names.size());
    for (const auto& [name, value] : frames[i].second) {
      const std::size_t k =
          static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
      ASSERT_FALSE(cols[k].empty()) << name << " missing: " << lines[i];
      EXPECT_EQ(to_u64(cols[k]), value) << name;
    }
  }
}

}  // namespace
}  // namespace weft::wire
