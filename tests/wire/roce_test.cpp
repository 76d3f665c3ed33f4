// tests/wire/roce_test.cpp — RoCEv2 framing and both ICRC forms checked against independent
// references: scapy.contrib.roce for RoCEv2 and icrc_ref.py's zlib construction for native IB
// (run through python3). How the two relate: RoCEv2's ICRC is the native global-packet ICRC
// with the IP/UDP headers in the GRH's place — the LRH is replaced by 8 bytes of ones in both
// (a global packet's LRH is wholly variant, IBA 7.8.1), the IP header's TOS/TTL/checksum (v4) or
// TClass/FlowLabel/HopLimit (v6, byte for byte the GRH masks) are masked, and from the BTH on
// the computation is identical. NativeAndRoceShareTheTransportPart checks that last claim.
#include "src/wire/roce.hpp"

#include <gtest/gtest.h>

#if defined(__x86_64__)
#endif

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <isa-l/crc.h>
#include <optional>
#include <sstream>

#include "tests/common/xinuse.hpp"
#include "tests/wire/wire_test_util.hpp"

#ifndef WEFT_WIRE_TEST_DIR
#error "meson passes the source directory of the tests"
#endif

namespace weft::wire {
namespace {

using test::all_opcodes;
using test::make_headers;
using test::payload_size_for;

RoceV2Addr addr(std::uint8_t ecn = 0) {
  RoceV2Addr a;
  a.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  a.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  a.src_ip = 0xC0A80001;
  a.dst_ip = 0xC0A80002;
  a.src_port = 0xC123;
  a.dscp = 26;
  a.ecn = ecn;
  a.ttl = 64;
  return a;
}

std::vector<std::uint8_t> roce_frame(Opcode op, std::size_t len, std::uint8_t ecn = 0) {
  const Headers h = make_headers(op, false, 3);
  std::vector<std::uint8_t> payload(len);
  for (std::size_t i = 0; i < len; ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<std::uint8_t> f(roce_v2_frame_bytes(h, len));
  f.resize(encode_roce_v2(addr(ecn), h, payload, f));
  return f;
}

// Runs icrc_ref.py over the lines and returns its output lines; fails the test if no python3
// with scapy is available (Debian: python3-scapy).
std::vector<std::string> reference(const std::string& lines) {
  std::string py;
  for (const char* cand : {"/usr/bin/python3", "python3"}) {
    if (test::run(std::string(cand) + " -c 'import scapy.contrib.roce' >/dev/null 2>&1").status ==
        0) {
      py = cand;
      break;
    }
  }
  if (py.empty()) {
    ADD_FAILURE() << "needs python3 with scapy (apt-get install python3-scapy)";
    return {};
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("weft_icrc_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "in.txt";
  std::ofstream(in) << lines;
  auto r = test::run(py + " " + WEFT_WIRE_TEST_DIR "/icrc_ref.py < " + in.string() + " 2>&1");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.status, 0) << r.out;
  std::vector<std::string> out;
  std::istringstream is(r.out);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

TEST(RoceV2, IcrcMatchesScapyForEveryOpcode) {
  std::vector<std::vector<std::uint8_t>> frames;
  std::string lines;
  for (Opcode op : all_opcodes()) {
    for (std::uint8_t ecn : {0, 3}) {
      frames.push_back(roce_frame(op, payload_size_for(op, ecn), ecn));
      lines += "roce " + test::hex(frames.back()) + "\n";
    }
  }
  const auto ref = reference(lines);
  ASSERT_EQ(ref.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto& f = frames[i];
    EXPECT_EQ(test::hex(std::span(f).last(4)), ref[i]) << "frame " << i;
  }
}

TEST(NativeIb, IcrcAndVcrcMatchTheReferenceForEveryOpcode) {
  std::vector<std::vector<std::uint8_t>> pkts;
  std::string lines;
  for (Opcode op : all_opcodes()) {
    for (bool grh : {false, true}) {
      pkts.push_back(test::build(make_headers(op, grh, 11), payload_size_for(op, 1)));
      lines += "ib " + test::hex(pkts.back()) + "\n";
    }
  }
  const auto ref = reference(lines);
  ASSERT_EQ(ref.size(), pkts.size());
  for (std::size_t i = 0; i < pkts.size(); ++i) {
    const auto& p = pkts[i];
    const std::string got =
        test::hex(std::span(p).last(6).first(4)) + " " + test::hex(std::span(p).last(2));
    EXPECT_EQ(got, ref[i]) << "packet " << i;
  }
}

TEST(RoceV2, ParseRoundTripAndVariantFields) {
  for (Opcode op : all_opcodes()) {
    const std::size_t len = payload_size_for(op, 5);
    auto f = roce_frame(op, len);
    auto r = parse_roce_v2(f);
    ASSERT_TRUE(r.ok()) << to_string(op) << " " << to_string(r.error());
    EXPECT_EQ(r->h.bth.opcode, op);
    EXPECT_EQ(r->h.bth.psn, make_headers(op, false, 3).bth.psn);
    EXPECT_EQ(r->payload.size(), len);
    EXPECT_EQ(r->bth_offset, 14u + 20 + 8);
    // A switch marking CE, lowering the TTL and fixing the IP checksum keeps the ICRC valid.
    f[14 + 1] |= 3;
    f[14 + 8] -= 1;
    f[14 + 10] ^= 0x55;
    EXPECT_TRUE(parse_roce_v2(f).ok());
    f[14 + 12] ^= 1;  // source address: invariant
    auto e = parse_roce_v2(f);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error(), WireError::kBadIcrc);
  }
}

TEST(RoceV2, Errors) {
  auto f = roce_frame(Opcode::kRcSendOnly, 8);
  auto g = f;
  g[12] = 0x88;  // not IP
  EXPECT_EQ(parse_roce_v2(g).error(), WireError::kBadLnh);
  g = f;
  g[14 + 20 + 3] ^= 1;  // UDP port 4790
  EXPECT_EQ(parse_roce_v2(g).error(), WireError::kBadLnh);
  g = f;
  g.pop_back();
  EXPECT_EQ(parse_roce_v2(g).error(), WireError::kTruncated);
  g = f;
  g[14 + 20 + 5] ^= 4;  // UDP length
  EXPECT_EQ(parse_roce_v2(g).error(), WireError::kBadLength);
  g = f;
  g[14 + 28 + 1] |= 1;  // TVer
  EXPECT_EQ(parse_roce_v2(g).error(), WireError::kBadTransportVersion);
  // Ethernet padding after the IP packet is ignored (short frames are padded to 60 bytes).
  g = roce_frame(Opcode::kRcAcknowledge, 0);
  g.resize(g.size() + 6, 0);
  EXPECT_TRUE(parse_roce_v2(g).ok());
}

TEST(RoceV2, ShortFrameIcrcAgreesWithTheGeneralOneAtEveryLengthAndField) {
  // icrc_roce_v2_frame4 folds from the frame itself with its own masks and padding: every
  // datagram length up to past its short-packet bound (the longer ones, and lengths that are not
  // whole words, take the general path), pseudo-random bytes, and the frame at the very start of
  // its buffer (it reads from byte 10 on). Every byte changes the result, but the masked ones.
  std::uint32_t x = 12345;
  const auto next = [&x] { return x = x * 1103515245 + 12345, static_cast<std::uint8_t>(x >> 16); };
  for (std::size_t ip_total = 44; ip_total <= kIcrcShortMaxBytes + 64; ++ip_total) {
    std::vector<std::uint8_t> f(14 + ip_total);
    for (auto& b : f) b = next();
    f[14] = 0x45;
    const std::uint32_t want = icrc_roce_v2({f.data() + 14, ip_total - 4});
    ASSERT_EQ(icrc_roce_v2_frame4(f.data(), ip_total), want) << ip_total;
    if (ip_total % 4 != 0 || ip_total > 96) continue;
    for (std::size_t i = 10; i < 14 + ip_total - 4; ++i) {
      auto g = f;
      g[i] ^= 0x10;
      const bool masked = i < 14 || i == 14 + 1 || i == 14 + 8 || i == 14 + 10 || i == 14 + 11 ||
                          i == 34 + 6 || i == 34 + 7 || i == 42 + 4;
      if (i == 14) continue;  // the version nibble says which IP the general one masks
      EXPECT_EQ(icrc_roce_v2_frame4(g.data(), ip_total) == want, masked) << ip_total << " " << i;
      EXPECT_EQ(icrc_roce_v2_frame4(g.data(), ip_total),
                icrc_roce_v2({g.data() + 14, ip_total - 4}));
    }
  }
}

TEST(RoceV2, LongFrameIcrcAgreesWithTheGeneralOneAtEveryAlignment) {
  // Past the short-packet bound icrc_roce_v2_frame4 folds the head itself up to a 64-byte
  // boundary of the frame's memory and has ISA-L continue from there: the split moves with the
  // frame's address (every offset from 0 to 63), and with the length (RoCE's whole words and
  // others, up to a 4 KiB MTU's frame). Every byte of one frame at two offsets then changes the
  // result, but the masked ones: a head or a tail summed twice or skipped would show here.
  std::uint32_t x = 777;
  const auto next = [&x] { return x = x * 1103515245 + 12345, static_cast<std::uint8_t>(x >> 16); };
  alignas(64) static std::uint8_t buf[64 + 14 + 4200];
  for (auto& b : buf) b = next();
  for (std::size_t off = 0; off < 64; ++off) {
    std::uint8_t* f = buf + off;
    f[14] = 0x45;
    for (std::size_t ip_total = kIcrcShortMaxBytes + 1; ip_total <= 4200;
         ip_total += ip_total < 700 ? 1 : 97) {
      ASSERT_EQ(icrc_roce_v2_frame4(f, ip_total), icrc_roce_v2({f + 14, ip_total - 4}))
          << off << " " << ip_total;
    }
  }
  for (std::size_t off : {0, 37}) {
    std::uint8_t* f = buf + off;
    f[14] = 0x45;
    const std::size_t ip_total = 4136;  // a 4 KiB WRITE MIDDLE: IP, UDP, BTH, payload, ICRC
    const std::uint32_t want = icrc_roce_v2({f + 14, ip_total - 4});
    for (std::size_t i = 10; i < 14 + ip_total - 4; ++i) {
      if (i == 14) continue;  // the version nibble says which IP the general one masks
      f[i] ^= 0x10;
      const bool masked = i < 14 || i == 14 + 1 || i == 14 + 8 || i == 14 + 10 || i == 14 + 11 ||
                          i == 34 + 6 || i == 34 + 7 || i == 42 + 4;
      EXPECT_EQ(icrc_roce_v2_frame4(f, ip_total) == want, masked) << off << " " << i;
      f[i] ^= 0x10;
    }
  }
}

TEST(RoceV2, GatherFrameIcrcAgreesWithTheGeneralOne) {
  // icrc_roce_v2_frame4 with the payload elsewhere (a sender's gather list or copy source): the
  // headers folded from the frame (every transport header length a RoCE opcode has, and one not
  // whole words), the payload and its pad by ISA-L; the frame at every 16-byte offset, payloads
  // from none to a 4 KiB MTU's. Every header byte then changes the result, but the masked ones.
  std::uint32_t x = 4242;
  const auto next = [&x] { return x = x * 1103515245 + 12345, static_cast<std::uint8_t>(x >> 16); };
  alignas(64) static std::uint8_t frame[16 + 14 + 96];
  alignas(64) static std::uint8_t payload[4096 + 64];
  for (auto& b : frame) b = next();
  for (auto& b : payload) b = next();
  for (std::size_t off = 0; off < 16; ++off) {
    std::uint8_t* f = frame + off;
    f[14] = 0x45;
    for (std::size_t t : {12, 16, 20, 24, 28, 32, 40, 13}) {
      const std::size_t ip_head = 28 + t;
      for (std::size_t n : {0, 1, 7, 8, 255, 256, 1000, 4093, 4096}) {
        for (std::uint8_t pad = 0; pad < 4; ++pad) {
          const std::span<const std::uint8_t> pl(payload + off % 8, n);
          ASSERT_EQ(icrc_roce_v2_frame4(f, ip_head, pl, pad),
                    icrc_roce_v2({f + 14, ip_head}, pl, pad))
              << off << " " << t << " " << n << " " << int{pad};
        }
      }
      if (off % 5 != 0) continue;
      const std::span<const std::uint8_t> pl(payload, 4096);
      const std::uint32_t want = icrc_roce_v2({f + 14, ip_head}, pl, 0);
      for (std::size_t i = 10; i < 14 + ip_head; ++i) {
        if (i == 14) continue;  // the version nibble says which IP the general one masks
        f[i] ^= 0x04;
        const bool masked = i < 14 || i == 14 + 1 || i == 14 + 8 || i == 14 + 10 || i == 14 + 11 ||
                            i == 34 + 6 || i == 34 + 7 || i == 42 + 4;
        EXPECT_EQ(icrc_roce_v2_frame4(f, ip_head, pl, 0) == want, masked) << off << " " << i;
        f[i] ^= 0x04;
      }
    }
  }
}

TEST(RoceV2, IcrcLeavesNoDirtyUpperVectorState) {
  // ISA-L's AVX-512 CRC returns with zmm0-15 dirty above bit 127, which then slows every
  // legacy-SSE instruction (Weft's own, net_memif's copies) until a vzeroupper: the ICRC must
  // clear them (src/wire/crc_isal.hpp). Long enough for ISA-L's 512-bit loop (>= 256 bytes),
  // through every entry point that reaches ISA-L.
#if defined(__x86_64__)
  constexpr std::uint64_t kUpperHalves = test_util::kXinuseUpperHalves;
  std::vector<std::uint8_t> f(14 + 4096 + 64, 0x5A);
  f[14] = 0x45;
  const std::span<const std::uint8_t> ip(f.data() + 14, f.size() - 14 - 4);
  volatile std::uint32_t sink = icrc_roce_v2(ip);
  auto in_use = test_util::xinuse();
  if (!in_use) GTEST_SKIP() << "no XGETBV1";
  EXPECT_EQ(*in_use & kUpperHalves, 0u) << "after icrc_roce_v2, XINUSE " << std::hex << *in_use;
  sink = sink + icrc_roce_v2(ip.first(40), ip.subspan(40), 2);
  in_use = test_util::xinuse();
  EXPECT_EQ(*in_use & kUpperHalves, 0u)
      << "after icrc_roce_v2 (payload), XINUSE " << std::hex << *in_use;
  const Headers h = make_headers(Opcode::kRcWriteOnly, false, 5);
  const auto native = test::build(h, 4096);
  sink = sink + icrc(std::span<const std::uint8_t>(native).first(8 + 12 + 16),
                     std::span<const std::uint8_t>(native).subspan(8 + 12 + 16, 4096));
  in_use = test_util::xinuse();
  EXPECT_EQ(*in_use & kUpperHalves, 0u) << "after icrc, XINUSE " << std::hex << *in_use;
  (void)sink;
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

TEST(RoceV2, NativeAndRoceShareTheTransportPart) {
  // Build a native global packet and an IPv6 RoCEv2 packet with the same GRH/IPv6 header bytes
  // (but NxtHdr 0x1B vs 17) and the same BTH, ext and payload. Each ICRC is
  // crc32(ones8 || masked network header || masked BTH || rest); strip the common prefix state
  // by checking both against that formula with zlib-compatible ISA-L calls.
  const Headers h = make_headers(Opcode::kRcWriteOnly, true, 5);
  auto native = test::build(h, 20);
  auto np = parse_packet(native);
  ASSERT_TRUE(np.ok());
  std::vector<std::uint8_t> masked(native.begin(), native.begin() + 48 + 12);
  std::memset(masked.data(), 0xFF, 8);
  masked[8] |= 0x0F;
  masked[9] = masked[10] = masked[11] = masked[15] = 0xFF;
  masked[48 + 4] = 0xFF;
  std::uint32_t c = crc32_gzip_refl(0, masked.data(), masked.size());
  c = crc32_gzip_refl(c, native.data() + 60, native.size() - 60 - 6);
  EXPECT_EQ(c, np->icrc);

  // IPv6 RoCEv2: IPv6 header = the GRH with NxtHdr UDP; UDP; then the same transport bytes.
  const std::size_t transport = native.size() - 48 - 6;  // BTH..pad
  const std::size_t udp_len = 8 + transport + kIcrcBytes;
  std::vector<std::uint8_t> ip(40 + 8 + transport);
  std::copy(native.begin() + 8, native.begin() + 48, ip.begin());
  ip[4] = static_cast<std::uint8_t>(udp_len >> 8);
  ip[5] = static_cast<std::uint8_t>(udp_len);
  ip[6] = 17;
  const std::uint8_t udp[8] = {0xC0,
                               0x00,
                               0x12,
                               0xB7,
                               static_cast<std::uint8_t>(udp_len >> 8),
                               static_cast<std::uint8_t>(udp_len),
                               0x12,
                               0x34};
  std::copy(udp, udp + 8, ip.begin() + 40);
  std::copy(native.begin() + 48, native.end() - 6, ip.begin() + 48);
  const std::uint32_t roce = icrc_roce_v2(ip);
  std::vector<std::uint8_t> rm(8 + 60, 0xFF);
  std::copy(ip.begin(), ip.begin() + 60, rm.begin() + 8);
  rm[8] |= 0x0F;
  rm[9] = rm[10] = rm[11] = rm[15] = 0xFF;
  rm[8 + 40 + 6] = rm[8 + 40 + 7] = 0xFF;
  rm[8 + 48 + 4] = 0xFF;
  std::uint32_t r = crc32_gzip_refl(0, rm.data(), rm.size());
  r = crc32_gzip_refl(r, ip.data() + 60, ip.size() - 60);
  EXPECT_EQ(roce, r);
  // And as a frame it parses, ICRC included.
  std::vector<std::uint8_t> frame(14 + ip.size() + 4);
  const std::uint8_t eth[14] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xDD};
  std::copy(eth, eth + 14, frame.begin());
  std::copy(ip.begin(), ip.end(), frame.begin() + 14);
  put_icrc(std::span(frame).last<4>(), roce);
  auto pr = parse_roce_v2(frame);
  ASSERT_TRUE(pr.ok()) << to_string(pr.error());
  EXPECT_TRUE(pr->ipv6);
  EXPECT_EQ(pr->h.reth.va, h.reth.va);
}

}  // namespace
}  // namespace weft::wire
