// cm::GsiDevice: QP1 beside a transport Device. A query leaves as a UD SEND from QP1 to QP1 with
// the GSI Q_Key; a packet to QP1 reaches the SA client, not the transport; other packets and
// every verb reach the wrapped Device.
#include <gtest/gtest.h>

#include <vector>

#include "src/cm/gsi_device.hpp"
#include "src/wire/gmp.hpp"
#include "src/wire/packet.hpp"

namespace weft {
namespace {

struct Fixture {
  Fixture() {
    DeviceConfig dc;
    dc.node_guid = 0x1234;
    dc.ports[0].lid = 7;
    cm::SaClientConfig sa;
    sa.sm_lid = 1;
    gsi = std::make_unique<cm::GsiDevice>(Device::create(dc, rng), cm::CmConfig{}, sa);
  }
  SeededRng rng{1};
  std::unique_ptr<cm::GsiDevice> gsi;
};

std::vector<std::uint8_t> image(const TxPacket& p) {
  std::vector<std::uint8_t> b(p.wire_bytes());
  p.write_to(b);
  return b;
}

TEST(GsiDevice, AQueryLeavesAsAUdSendFromQp1ToQp1) {
  Fixture f;
  ASSERT_TRUE(f.gsi->sa_client().query(cm::path_query(7, 9, false), 0).ok());
  TxPacket out;
  ASSERT_TRUE(f.gsi->poll_transmit(0, out));
  // Expect: LRH 7 -> 1, UD SEND only to QP1 from QP1, Q_Key 0x80010000, a 256-byte SA MAD.
  const std::vector<std::uint8_t> b = image(out);
  auto r = wire::parse_packet(b, wire::ParseOptions{false, false});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->h.lrh.slid, 7);
  EXPECT_EQ(r->h.lrh.dlid, 1);
  EXPECT_EQ(r->h.bth.opcode, wire::Opcode::kUdSendOnly);
  EXPECT_EQ(r->h.bth.dest_qp, 1u);
  EXPECT_EQ(r->h.deth.src_qp, 1u);
  EXPECT_EQ(r->h.deth.qkey, cm::kGsiQkey);
  ASSERT_EQ(r->payload.size(), wire::kMadBytes);
  EXPECT_EQ(r->payload[1], wire::kMgmtClassSa);
  EXPECT_EQ(cm::dest_qp_of(b), 1u);
  EXPECT_FALSE(f.gsi->payload_stable(out));  // never by reference
  EXPECT_FALSE(f.gsi->poll_transmit(0, out));
  EXPECT_EQ(f.gsi->gsi_stats().mads_out, 1u);
  EXPECT_EQ(f.gsi->counters().tx_packets, 0u);  // the transport sent nothing
}

TEST(GsiDevice, Qp1PacketsGoToTheAgentsOthersToTheTransport) {
  Fixture f;
  // An SA answer (GetResp) for a query nobody made: the SA client counts it as ignored.
  std::array<std::uint8_t, wire::kMadBytes> mad{};
  mad[0] = 1;
  mad[1] = wire::kMgmtClassSa;
  mad[2] = 2;
  mad[3] = 0x81;
  TxPacket p;
  cm::gsi_packet(1, 7, mad, p);
  f.gsi->on_packet(std::span<const std::uint8_t>(image(p)), 0);
  EXPECT_EQ(f.gsi->gsi_stats().mads_in, 1u);
  EXPECT_EQ(f.gsi->sa_client().stats().ignored_mads, 1u);
  EXPECT_EQ(f.gsi->counters().rx_packets, 0u);
  // A class nobody serves here (PerfMgt): ignored, not given to the transport.
  mad[1] = 0x04;
  cm::gsi_packet(1, 7, mad, p);
  f.gsi->on_packet(std::span<const std::uint8_t>(image(p)), 0);
  EXPECT_EQ(f.gsi->gsi_stats().mads_ignored, 1u);
  // The same bytes to QP 5 go to the transport.
  std::vector<std::uint8_t> b = image(p);
  b[8 + 7] = 5;  // BTH DestQP
  f.gsi->on_packet(std::span<const std::uint8_t>(b), 0);
  EXPECT_EQ(f.gsi->gsi_stats().mads_in, 1u);
  EXPECT_EQ(f.gsi->counters().rx_packets, 1u);  // the transport took it (and drops it)
  // Verbs reach the wrapped Device.
  EXPECT_TRUE(f.gsi->alloc_pd().ok());
  EXPECT_EQ(f.gsi->lid(1), 7);
}

}  // namespace
}  // namespace weft
