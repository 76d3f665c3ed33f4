// tests/udp/roce_frame_test.cpp — roce::deliver_frame, the receive check the UDP and DPDK media
// share: a frame built by roce::build_frame reaches the Device byte-exact; every framing fault
// parse_roce_v2 knows is kMalformed (the medium's rx_malformed) and reaches no Device, even with
// its ICRC made right again; a changed invariant byte is kBadIcrc (rx_bad_icrc), a changed
// variant one (TOS, TTL, checksums, resv8a: Annex A17) is delivered. IPv4 and IPv6.
#include "src/io/udp/roce_frame.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/wire/roce.hpp"
#include "tests/transport/pump.hpp"

namespace weft::io::roce {
namespace {

using test::connect_rc;
using test::make_side;
using test::PairOptions;
using test::Side;

using Frame = std::vector<std::uint8_t>;
constexpr std::size_t kIp = wire::kEthHeaderBytes, kUdp = kIp + wire::kIpv4HeaderBytes,
                      kBth = kUdp + wire::kUdpHeaderBytes;

PairOptions with_mtu(Mtu mtu) {
  PairOptions o;
  o.mtu = mtu;
  return o;
}

struct Fixture {
  SeededRng rng{3};
  PairOptions o;
  Side a = make_side(1, 1, o, rng), b = make_side(2, 2, o, rng);
  explicit Fixture(Mtu mtu = Mtu::k1024) : o(with_mtu(mtu)) {
    connect_rc(a.qp, 2, b.qp->qp_num(), o.psn_a, o.psn_b, o);
    connect_rc(b.qp, 1, a.qp->qp_num(), o.psn_b, o.psn_a, o);
  }
  // The frame of A's next packet: an RDMA WRITE of `len` bytes (pattern `seed`) to B at `off`.
  std::vector<std::uint8_t> write_frame(std::uint32_t len, std::uint8_t seed, std::size_t off,
                                        bool ipv6 = false) {
    for (std::uint32_t i = 0; i < len; ++i) a.data()[i] = static_cast<std::uint8_t>(seed + i * 3);
    EXPECT_EQ(a.post_send(WrOpcode::kRdmaWrite, 0, len, seed, b.va(off), b.mr->rkey()), Errc::kOk);
    TxPacket pkt;
    EXPECT_TRUE(a.dev->poll_transmit(0, pkt));
    FrameAddr fa;
    fa.src_ip = 0x0A000001;
    fa.dst_ip = 0x0A000002;
    fa.src_port = 0xC000;
    fa.ipv6 = ipv6;
    fa.src_ip6[15] = 1;
    fa.dst_ip6[15] = 2;
    std::vector<std::uint8_t> f(kFrameMax6);
    f.resize(build_frame(pkt, fa, f.data()));
    return f;
  }
  RxStatus deliver(const std::vector<std::uint8_t>& f) {
    return deliver_frame(*b.dev, f.data(), f.size(), 1, 0);
  }
};

// The ICRC made right again for the bytes as they now are (IPv4, the IP length as it says).
void reseal(std::vector<std::uint8_t>& f) {
  const std::size_t ip_total = std::size_t{f[kIp + 2]} << 8 | f[kIp + 3];
  if (kIp + ip_total > f.size() || ip_total < 48) return;
  wire::put_icrc(std::span<std::uint8_t, 4>(f.data() + kIp + ip_total - 4, 4),
                 wire::icrc_roce_v2({f.data() + kIp, ip_total - 4}));
}

TEST(DeliverFrame, AWriteArrivesByteExactThroughTheFrame) {
  for (bool ipv6 : {false, true}) {
    Fixture x;
    for (std::uint32_t len : {8u, 1u, 0u, 13u, 1024u}) {
      const auto f = x.write_frame(len, static_cast<std::uint8_t>(len + 1), 4096 + len, ipv6);
      ASSERT_EQ(x.deliver(f), RxStatus::kDelivered) << len << (ipv6 ? " ipv6" : " ipv4");
      for (std::uint32_t i = 0; i < len; ++i)
        ASSERT_EQ(x.b.data()[4096 + len + i], static_cast<std::uint8_t>(len + 1 + i * 3)) << i;
    }
    EXPECT_EQ(x.b.dev->counters().rx_packets, 5u);
    EXPECT_EQ(x.b.dev->counters().rx_malformed, 0u);
    EXPECT_EQ(x.b.dev->counters().rx_dropped_ooo, 0u);
    EXPECT_TRUE(x.b.guards_intact());
  }
}

TEST(BuildFrame, FromAPeersPreparedHeadItIsTheSameFrame) {
  Fixture x;
  FrameAddr fa;
  fa.src_mac = {2, 1, 2, 3, 4, 5};
  fa.dst_mac = {2, 6, 7, 8, 9, 10};
  fa.src_ip = 0xC0A80A01;
  fa.dst_ip = 0xC0A80AFE;
  fa.src_port = 0xC123;
  fa.dst_port = 4792;
  const FrameHead4 h = frame_head4(fa);
  for (std::uint32_t len : {0u, 1u, 8u, 13u, 1000u, 4096u}) {
    ASSERT_EQ(x.a.post_send(WrOpcode::kRdmaWrite, 0, len, len, x.b.va(0), x.b.mr->rkey()),
              Errc::kOk);
    for (TxPacket pkt; x.a.dev->poll_transmit(0, pkt);) {
      Frame want(kFrameMax), got(kFrameMax, 0xEE);
      want.resize(build_frame(pkt, fa, want.data()));
      got.resize(build_frame(pkt, h, got.data()));
      ASSERT_EQ(got, want) << len;
      EXPECT_EQ(deliver_frame(*x.b.dev, got.data(), got.size(), 1, 0), RxStatus::kDelivered);
    }
  }
}

TEST(DeliverFrame, FramingFaultsAreMalformedAndReachNoDevice) {
  Fixture x;
  const auto good = x.write_frame(8, 7, 0);
  ASSERT_EQ(good.size(), kBth + 12 + 16 + 8 + 4u);  // BTH RETH payload ICRC
  struct Case {
    const char* what;
    void (*change)(Frame&);
  };
  const Case cases[] = {
      {"shorter than its headers", [](Frame& f) { f.resize(kBth - 1); }},
      {"not IP (ARP)",
       [](Frame& f) {
         f[12] = 0x08;
         f[13] = 0x06;
       }},
      {"IPv4 options", [](Frame& f) { f[kIp] = 0x46; }},
      {"IPv6 EtherType on an IPv4 header",
       [](Frame& f) {
         f[12] = 0x86;
         f[13] = 0xDD;
       }},
      {"not UDP", [](Frame& f) { f[kIp + 9] = 6; }},
      {"IP length past the frame", [](Frame& f) { f[kIp + 3] += 4; }},
      {"UDP length disagrees", [](Frame& f) { f[kUdp + 5] -= 4; }},
      {"IP length below its own header",
       [](Frame& f) {
         f[kIp + 2] = 0;
         f[kIp + 3] = 16;
       }},
      {"no room for the BTH and ICRC",
       [](Frame& f) {
         f[kIp + 3] = 20 + 8 + 12;  // a BTH, nothing after
         f[kUdp + 5] = 8 + 12;
       }},
      {"TVer 1", [](Frame& f) { f[kBth + 1] |= 1; }},
      {"a reserved opcode", [](Frame& f) { f[kBth] = 0x15; }},
      {"no room for the RETH",
       [](Frame& f) {
         f[kIp + 3] = 20 + 8 + 12 + 12;  // 12 of RETH's 16 bytes, or RETH and no ICRC
         f[kUdp + 5] = 8 + 12 + 12;
       }},
      {"a pad longer than the payload",
       [](Frame& f) {
         f[kIp + 3] -= 8;  // the WRITE without its 8 bytes (a padded frame), PadCnt 3
         f[kUdp + 5] -= 8;
         f[kBth + 1] |= 3 << 4;
       }},
      {"payload on an ACKNOWLEDGE", [](Frame& f) { f[kBth] = 0x11; }},
  };
  for (const Case& c : cases) {
    auto f = good;
    c.change(f);
    EXPECT_EQ(x.deliver(f), RxStatus::kMalformed) << c.what;
    reseal(f);  // not an ICRC failure: the framing is wrong whatever the ICRC says
    EXPECT_EQ(x.deliver(f), RxStatus::kMalformed) << c.what << " (resealed)";
  }
  EXPECT_EQ(x.b.dev->counters().rx_packets, 0u);
  // And the frame itself is fine, also with Ethernet's padding behind the IP packet.
  auto padded = good;
  padded.resize(padded.size() + 10, 0);
  EXPECT_EQ(x.deliver(padded), RxStatus::kDelivered);
  EXPECT_EQ(x.b.dev->counters().rx_packets, 1u);
}

TEST(DeliverFrame, AnInvariantByteChangedIsABadIcrcAndAVariantOneIsNot) {
  for (bool ipv6 : {false, true}) {
    Fixture x;
    const auto good = x.write_frame(8, 9, 64, ipv6);
    const std::size_t ip_bytes = ipv6 ? wire::kIpv6HeaderBytes : wire::kIpv4HeaderBytes;
    const std::size_t udp = kIp + ip_bytes, bth = udp + wire::kUdpHeaderBytes;
    // Variant fields (Annex A17): IPv4 TOS, TTL, header checksum / IPv6 traffic class, flow
    // label, hop limit; the UDP checksum; BTH resv8a. The UDP ports are covered.
    std::vector<std::size_t> variant = {udp + 6, udp + 7, bth + 4};
    if (ipv6)
      variant.insert(variant.end(), {kIp + 1, kIp + 2, kIp + 3, kIp + 7});
    else
      variant.insert(variant.end(), {kIp + 1, kIp + 8, kIp + 10, kIp + 11});
    std::size_t bad = 0;
    for (std::size_t i = kIp; i < good.size(); ++i) {
      // Bytes the framing checks read (version, lengths, protocol, opcode, TVer/pad) would be
      // malformed first: each is covered above.
      const bool framing = i == kIp ||
                           (ipv6 ? i == kIp + 4 || i == kIp + 5 || i == kIp + 6
                                 : i == kIp + 2 || i == kIp + 3 || i == kIp + 9) ||
                           i == udp + 4 || i == udp + 5 || i == bth || i == bth + 1;
      if (framing) continue;
      auto f = good;
      f[i] ^= 0x01;
      const bool is_variant = std::find(variant.begin(), variant.end(), i) != variant.end();
      EXPECT_EQ(x.deliver(f), is_variant ? RxStatus::kDelivered : RxStatus::kBadIcrc)
          << i << (ipv6 ? " ipv6" : " ipv4");
      bad += !is_variant;
    }
    EXPECT_GT(bad, 40u);
    // Only the variant changes reached the Device (the same WRITE again: a duplicate, dropped).
    EXPECT_EQ(x.b.dev->counters().rx_packets, variant.size());
  }
}

// The rule the receive path keeps (IBA Vol 1 7.8.1: the ICRC is checked end to end, and a packet
// that fails it is dropped; RoCEv2's ICRC, Annex A17): a packet reaches the Device, which places
// its payload, only once its whole ICRC has been checked. RoCEv2 has no check of the headers
// alone, so a RETH VA or R_Key, or a PSN, changed on the way is known only at the packet's end,
// and a payload placed (or copied while summed) before that could land where the flipped VA
// points, in memory the application owns. Every bit of a 4 KiB WRITE's headers (the ICRC's ISA-L
// path) but the variant fields' (delivered: the test above), of its payload's ends and of its
// ICRC flipped, each as the next packet B expects: B's region and its guards stay zero byte for
// byte; then the frame as sent is delivered, to where it belongs (so B still expected it: no
// corrupted copy was taken). Fails when the ICRC is checked after on_packet.
TEST(DeliverFrame, NoCorruptedBitOfA4KiBWriteChangesMemory) {
  for (bool ipv6 : {false, true}) {
    Fixture x(Mtu::k4096);
    constexpr std::uint32_t kLen = 4096;
    constexpr std::size_t kOff = 8192;
    const auto good = x.write_frame(kLen, 7, kOff, ipv6);
    const std::size_t ip_bytes = ipv6 ? wire::kIpv6HeaderBytes : wire::kIpv4HeaderBytes;
    const std::size_t udp = kIp + ip_bytes, bth = udp + wire::kUdpHeaderBytes;
    const std::size_t payload = bth + wire::kBthBytes + 16;  // RETH: 16 bytes
    ASSERT_EQ(good.size(), payload + kLen + wire::kIcrcBytes);
    std::vector<std::size_t> variant = {udp + 6, udp + 7, bth + 4};
    if (ipv6)
      variant.insert(variant.end(), {kIp, kIp + 1, kIp + 2, kIp + 3, kIp + 7});
    else
      variant.insert(variant.end(), {kIp + 1, kIp + 8, kIp + 10, kIp + 11});
    std::vector<std::size_t> at;
    for (std::size_t i = kIp; i < payload; ++i)
      if (std::find(variant.begin(), variant.end(), i) == variant.end()) at.push_back(i);
    for (std::size_t i : {payload, payload + 1, payload + kLen - 1}) at.push_back(i);
    for (std::size_t i = good.size() - wire::kIcrcBytes; i < good.size(); ++i) at.push_back(i);
    const std::vector<std::uint8_t> before = x.b.buf;
    for (std::size_t i : at)
      for (int bit = 0; bit < 8; ++bit) {
        auto f = good;
        f[i] ^= static_cast<std::uint8_t>(1u << bit);
        EXPECT_NE(x.deliver(f), RxStatus::kDelivered) << "byte " << i << " bit " << bit;
        ASSERT_TRUE(x.b.buf == before) << "byte " << i << " bit " << bit << (ipv6 ? " ipv6" : "");
      }
    EXPECT_EQ(x.b.dev->counters().rx_packets, 0u);
    ASSERT_EQ(x.deliver(good), RxStatus::kDelivered);
    for (std::uint32_t k = 0; k < kLen; ++k)
      ASSERT_EQ(x.b.data()[kOff + k], static_cast<std::uint8_t>(7 + k * 3)) << k;
    EXPECT_TRUE(x.b.guards_intact());
  }
}

}  // namespace
}  // namespace weft::io::roce
