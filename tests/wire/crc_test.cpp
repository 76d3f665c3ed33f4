// tests/wire/crc_test.cpp — known answers for the VCRC and ICRC (IBA 7.8) and the properties
// the link relies on. Reference values come from tests/wire/icrc_ref.py's bit-by-bit CRC-16 and
// from zlib's CRC-32, not from this code.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "src/wire/packet.hpp"
#include "tests/wire/wire_test_util.hpp"

namespace weft::wire {
namespace {

std::span<const std::uint8_t> bytes_of(const char* s) {
  return {reinterpret_cast<const std::uint8_t*>(s), std::strlen(s)};
}

TEST(Vcrc, KnownAnswers) {
  // CRC-16/0x100B, init 0xFFFF, reflected in and out, final XOR 0xFFFF.
  EXPECT_EQ(vcrc(bytes_of("123456789")), 0x0A3D);
  EXPECT_EQ(vcrc({}), 0x0000);
  const std::uint8_t zeros[4] = {};
  EXPECT_EQ(vcrc(zeros), 0x62B3);
  std::vector<std::uint8_t> ramp(256);
  std::iota(ramp.begin(), ramp.end(), 0);
  EXPECT_EQ(vcrc(ramp), 0xA799);
}

TEST(Vcrc, IncrementalEqualsOneShot) {
  std::vector<std::uint8_t> ramp(1000);
  std::iota(ramp.begin(), ramp.end(), 7);
  for (std::size_t cut : {0u, 1u, 17u, 500u, 999u, 1000u}) {
    const std::span<const std::uint8_t> all(ramp);
    const auto r = vcrc_update(vcrc_update(kVcrcInit, all.first(cut)), all.subspan(cut));
    EXPECT_EQ(vcrc_finish(r), vcrc(all)) << cut;
  }
}

// Bit-at-a-time CRC-16/0x100B straight from the definition (IBA 7.8.2), to check the sliced
// tables at every length and alignment.
std::uint16_t vcrc_bitwise(std::span<const std::uint8_t> d) {
  unsigned c = 0xFFFF;
  for (std::uint8_t b : d) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? ((c >> 1) ^ 0xD008) : (c >> 1);
  }
  return static_cast<std::uint16_t>(c ^ 0xFFFF);
}

TEST(Vcrc, SlicedEqualsBitwiseAtEveryLength) {
  SeededRng rng(5);
  std::vector<std::uint8_t> d(300);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next_u64());
  for (std::size_t off = 0; off < 3; ++off)
    for (std::size_t len = 0; len + off <= d.size(); ++len)
      ASSERT_EQ(vcrc(std::span(d).subspan(off, len)), vcrc_bitwise(std::span(d).subspan(off, len)))
          << off << " " << len;
}

TEST(Vcrc, FoldingEqualsTablesOnLongInputs) {
  // vcrc_update switches to carry-less-multiply folding from 128 bytes on; it must agree with
  // the tables for every length, alignment and incoming register.
  SeededRng rng(11);
  std::vector<std::uint8_t> d(9000);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next_u64());
  for (std::size_t len = 100; len <= 600; ++len)
    for (std::size_t off = 0; off < 2; ++off)
      for (std::uint16_t reg : {std::uint16_t{0}, kVcrcInit, std::uint16_t{0x1234}})
        ASSERT_EQ(vcrc_update(reg, std::span(d).subspan(off, len)),
                  vcrc_update_tables(reg, std::span(d).subspan(off, len)))
            << "len=" << len << " off=" << off << " reg=" << reg;
  for (std::size_t len : {1024u, 4096u, 4099u, 8192u, 8999u})
    ASSERT_EQ(vcrc(std::span(d).first(len)), vcrc_bitwise(std::span(d).first(len))) << len;
}

// Every implementation the CPU offers (tables, 128-bit folds, 512-bit folds), each forced,
// against the bit-at-a-time definition: every length up to 1300 bytes (the folding paths' loop
// tails and lane reductions at each residue), three alignments, three incoming registers.
TEST(Vcrc, EveryPathEqualsBitwise) {
  SeededRng rng(13);
  std::vector<std::uint8_t> d(9000);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next_u64());
  const VcrcPath paths[] = {VcrcPath::kTables, VcrcPath::kClmul, VcrcPath::kVpclmul};
  for (VcrcPath p : paths) {
    if (!vcrc_path_available(p)) {
      std::printf("VCRC path %d not available on this CPU: skipped\n", static_cast<int>(p));
      continue;
    }
    for (std::size_t off = 0; off < 3; ++off)
      for (std::size_t len = 0; len <= 1300; ++len) {
        const auto s = std::span(d).subspan(off, len);
        ASSERT_EQ(vcrc_finish(vcrc_update_path(p, kVcrcInit, s)), vcrc_bitwise(s))
            << "path=" << static_cast<int>(p) << " off=" << off << " len=" << len;
      }
    for (std::size_t len : {4096u, 4099u, 4160u, 8192u, 8999u})
      for (std::uint16_t reg : {std::uint16_t{0}, std::uint16_t{0x1234}})
        ASSERT_EQ(vcrc_update_path(p, reg, std::span(d).first(len)),
                  vcrc_update_tables(reg, std::span(d).first(len)))
            << "path=" << static_cast<int>(p) << " len=" << len;
  }
}

TEST(Vcrc, ResidueAfterAppendingTheCrcIsConstant) {
  // Stored least significant byte first, a reflected CRC leaves a fixed residue when the
  // receiver runs it over data+CRC: this is how hardware checks it, and it pins the byte order.
  for (const char* s : {"abc", "InfiniBand", "x"}) {
    std::vector<std::uint8_t> d(bytes_of(s).begin(), bytes_of(s).end());
    d.resize(d.size() + 2);
    put_vcrc(std::span(d).last<2>(), vcrc(std::span(d).first(d.size() - 2)));
    EXPECT_EQ(vcrc(d), 0xAA90) << s;
  }
}

TEST(Icrc, EightOnesIsTheRxeSeed) {
  // rxe seeds its ICRC with 0xdebb20e3: the CRC-32 register after 8 bytes of 0xFF, i.e. after
  // a fully masked LRH. Here: a masked global packet's LRH contributes exactly that.
  const std::uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  // icrc() needs a whole header; check the constant through the public CRC on a global packet
  // whose LRH is already all ones: the result must not depend on the LRH bytes at all.
  auto h = test::make_headers(Opcode::kRcSendOnly, true);
  auto w = test::build(h, 4);
  auto p = parse_packet(w);
  ASSERT_TRUE(p.ok());
  std::vector<std::uint8_t> hdr(w.begin(), w.begin() + static_cast<long>(p->header_bytes));
  const std::uint32_t a = icrc(hdr, p->payload);
  std::memcpy(hdr.data(), ones, 8);
  EXPECT_EQ(icrc(hdr, p->payload), a);
}

TEST(Icrc, KnownAnswerLocalPacket) {
  // The golden RDMA WRITE ONLY of packet_test with a 4-byte payload; ICRC from zlib.crc32 over
  // the masked bytes (VL and resv8a set to ones), see icrc_ref.py.
  const std::uint8_t hdr[36] = {0x10, 0x52, 0x12, 0x34, 0x00, 0x0B, 0x00, 0xAB, 0x0A,
                                0xC0, 0x80, 0x01, 0x80, 0xAB, 0xCD, 0xEF, 0x80, 0x12,
                                0x34, 0x56, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                0x08, 0xA1, 0xA2, 0xA3, 0xA4, 0x00, 0x00, 0x00, 0x04};
  const std::uint8_t payload[4] = {0xDE, 0xAD, 0xBE, 0xEF};
  EXPECT_EQ(icrc(hdr, payload), 0x4AFC4B35u);
  std::uint8_t changed[36];
  std::memcpy(changed, hdr, 36);
  changed[0] = 0x70;   // VL 7: variant
  changed[12] = 0x40;  // BECN: variant
  EXPECT_EQ(icrc(changed, payload), 0x4AFC4B35u);
  changed[3] = 0x35;  // DLID: invariant in a local packet
  EXPECT_NE(icrc(changed, payload), 0x4AFC4B35u);
}

TEST(Icrc, PadBytesAreZerosNotMaterialized) {
  auto h = test::make_headers(Opcode::kRcSendOnly, false);
  fill_lengths(h, 5);
  std::vector<std::uint8_t> hdr(header_bytes(h));
  encode_headers(h, hdr);
  const std::uint8_t with_pad[8] = {1, 2, 3, 4, 5, 0, 0, 0};
  EXPECT_EQ(icrc(hdr, std::span(with_pad).first(5), 3), icrc(hdr, with_pad));
  EXPECT_NE(icrc(hdr, std::span(with_pad).first(5), 2), icrc(hdr, with_pad));
}

// ---- The fused pass (packet_crcs) against the separate functions and the definitions -------

// Bit-at-a-time CRC-32 (reflected 0xEDB88320, init and final XOR all ones) and the IBA 7.8.1
// masking written out again here: an ICRC reference independent of crc.cpp.
std::uint32_t icrc_bitwise(std::span<const std::uint8_t> hdr, std::span<const std::uint8_t> payload,
                           std::uint8_t pad) {
  std::vector<std::uint8_t> m(hdr.begin(), hdr.end());
  std::size_t bth = 8;
  if ((m[1] & 3) == 3) {  // global: LRH all ones; GRH TClass, FlowLabel, HopLmt ones
    std::fill_n(m.begin(), 8, 0xFF);
    m[8] |= 0x0F;
    m[9] = m[10] = m[11] = m[15] = 0xFF;
    bth += 40;
  } else {
    m[0] |= 0xF0;  // VL
  }
  m[bth + 4] = 0xFF;  // FECN, BECN, resv6a
  m.insert(m.end(), payload.begin(), payload.end());
  m.insert(m.end(), pad, 0);
  std::uint32_t c = 0xFFFFFFFF;
  for (std::uint8_t b : m) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? ((c >> 1) ^ 0xEDB88320u) : (c >> 1);
  }
  return ~c;
}

// The VCRC as the separate functions give it: over the materialized packet up to its ICRC.
std::uint16_t vcrc_of_packet(std::span<const std::uint8_t> hdr,
                             std::span<const std::uint8_t> payload, std::uint8_t pad,
                             std::uint32_t icrc_value, bool bitwise) {
  std::vector<std::uint8_t> m(hdr.begin(), hdr.end());
  m.insert(m.end(), payload.begin(), payload.end());
  m.insert(m.end(), pad, 0);
  m.resize(m.size() + kIcrcBytes);
  put_icrc(std::span(m).last<kIcrcBytes>(), icrc_value);
  return bitwise ? vcrc_bitwise(m) : vcrc(m);
}

constexpr VcrcPath kAllPaths[] = {VcrcPath::kTables, VcrcPath::kClmul, VcrcPath::kVpclmul,
                                  VcrcPath::kVpclmulGfni};

TEST(PacketCrcs, KnownAnswers) {
  // The golden RDMA WRITE ONLY of Icrc.KnownAnswerLocalPacket, and a 4 KiB WRITE FIRST whose
  // payload takes the fused fold; references from the bit-at-a-time definitions.
  const std::uint8_t hdr[36] = {0x10, 0x52, 0x12, 0x34, 0x00, 0x0B, 0x00, 0xAB, 0x0A,
                                0xC0, 0x80, 0x01, 0x80, 0xAB, 0xCD, 0xEF, 0x80, 0x12,
                                0x34, 0x56, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                0x08, 0xA1, 0xA2, 0xA3, 0xA4, 0x00, 0x00, 0x00, 0x04};
  const std::uint8_t payload[4] = {0xDE, 0xAD, 0xBE, 0xEF};
  const PacketCrcs c = packet_crcs(hdr, payload, 0);
  EXPECT_EQ(c.icrc, 0x4AFC4B35u);
  EXPECT_EQ(c.vcrc, vcrc_of_packet(hdr, payload, 0, 0x4AFC4B35u, true));
  std::vector<std::uint8_t> big(4096);
  std::iota(big.begin(), big.end(), 0);
  for (VcrcPath p : kAllPaths) {
    if (!vcrc_path_available(p)) continue;
    const PacketCrcs b = packet_crcs_path(p, hdr, big, 0);
    EXPECT_EQ(b.icrc, icrc_bitwise(hdr, big, 0)) << static_cast<int>(p);
    EXPECT_EQ(b.vcrc, vcrc_of_packet(hdr, big, 0, b.icrc, true)) << static_cast<int>(p);
  }
}

// Every payload length up to 1300 bytes and from 4 KiB - 100 to 4 KiB + 200 (each fold's stride
// tails and lane reductions at every residue, the 512-bit pass's 256-byte stride around an MTU),
// with every pad (the last fold's shift: every pad at every residue), on every path, for a local
// and a global packet, with the payload apart from the headers and right behind them (a received
// packet), against icrc() and vcrc().
TEST(PacketCrcs, EveryPathEqualsTheSeparateFunctionsAtEveryLength) {
  SeededRng rng(17);
  std::vector<std::size_t> lengths;
  for (std::size_t len = 0; len <= 1300; ++len) lengths.push_back(len);
  for (std::size_t len = 4096 - 100; len <= 4096 + 200; ++len) lengths.push_back(len);
  std::vector<std::uint8_t> d(4400), wire(4500);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next_u64());
  for (bool global : {false, true}) {
    auto h = test::make_headers(Opcode::kRcWriteFirst, global);
    fill_lengths(h, 256);
    std::vector<std::uint8_t> hdr(header_bytes(h));
    encode_headers(h, hdr);
    std::copy(hdr.begin(), hdr.end(), wire.begin());
    for (VcrcPath p : kAllPaths) {
      if (!vcrc_path_available(p)) continue;
      for (const std::size_t len : lengths)
        for (std::uint8_t pad = 0; pad <= 3; ++pad) {
          const auto pl = std::span(d).subspan(len % 3, len);
          const std::uint32_t ic = icrc(hdr, pl, pad);
          const std::uint16_t vc = vcrc_of_packet(hdr, pl, pad, ic, false);
          const PacketCrcs c = packet_crcs_path(p, hdr, pl, pad);
          ASSERT_EQ(c.icrc, ic) << "global=" << global << " path=" << static_cast<int>(p)
                                << " len=" << len << " pad=" << int{pad};
          ASSERT_EQ(c.vcrc, vc) << "global=" << global << " path=" << static_cast<int>(p)
                                << " len=" << len << " pad=" << int{pad};
          std::copy(pl.begin(), pl.end(), wire.begin() + static_cast<long>(hdr.size()));
          const auto w = std::span<const std::uint8_t>(wire);
          const PacketCrcs cw =
              packet_crcs_path(p, w.first(hdr.size()), w.subspan(hdr.size(), len), pad);
          ASSERT_EQ(cw.icrc, ic) << "contiguous global=" << global
                                 << " path=" << static_cast<int>(p) << " len=" << len
                                 << " pad=" << int{pad};
          ASSERT_EQ(cw.vcrc, vc) << "contiguous global=" << global
                                 << " path=" << static_cast<int>(p) << " len=" << len
                                 << " pad=" << int{pad};
        }
    }
  }
}

// Random packets: any opcode, local or global, random header bytes in the masked fields,
// payloads 0..4200 bytes at random alignments, on every path and through packet_crcs, against
// the separate functions and (every 8th seed) the bit-at-a-time definitions; check_packet_crcs
// against the separate functions' verdict on a randomly corrupted copy.
TEST(PacketCrcs, PropertyFusedEqualsSeparate) {
  constexpr std::uint64_t kSeeds = 1500;
  std::vector<std::uint8_t> buf(4200 + 64);
  const auto& ops = test::all_opcodes();
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    SeededRng rng(seed * 0x9E3779B97F4A7C15ULL);
    const Opcode op = ops[rng.below(ops.size())];
    auto h = test::make_headers(op, rng.below(2) == 1, seed);
    h.lrh.vl = static_cast<std::uint8_t>(rng.below(16));
    h.bth.fecn = rng.below(2) == 1;
    h.bth.becn = rng.below(2) == 1;
    std::size_t len;
    switch (rng.below(4)) {
      case 0:
        len = rng.below(80);
        break;
      case 1:
        len = 240 + rng.below(300);
        break;
      case 2:
        len = 4090 + rng.below(12);
        break;
      default:
        len = rng.below(4201);
        break;
    }
    fill_lengths(h, len);
    std::vector<std::uint8_t> hdr(header_bytes(h));
    encode_headers(h, hdr);
    if (rng.below(2)) {  // any bits in the masked bytes, reserved ones included
      hdr[0] = static_cast<std::uint8_t>(rng.next_u64());
      hdr[(hdr[1] & 3) == 3 ? 52 : 12] = static_cast<std::uint8_t>(rng.next_u64());
    }
    const std::size_t off = rng.below(64);
    for (std::size_t i = 0; i < len; ++i) buf[off + i] = static_cast<std::uint8_t>(rng.next_u64());
    const std::span<const std::uint8_t> pl(buf.data() + off, len);
    const std::uint8_t pad = h.bth.pad_cnt;
    const std::uint32_t ic = icrc(hdr, pl, pad);
    const std::uint16_t vc = vcrc_of_packet(hdr, pl, pad, ic, false);
    if (seed % 8 == 0) {
      ASSERT_EQ(ic, icrc_bitwise(hdr, pl, pad)) << "seed=" << seed;
      ASSERT_EQ(vc, vcrc_of_packet(hdr, pl, pad, ic, true)) << "seed=" << seed;
    }
    const PacketCrcs c = packet_crcs(hdr, pl, pad);
    ASSERT_EQ(c.icrc, ic) << "seed=" << seed << " len=" << len << " off=" << off;
    ASSERT_EQ(c.vcrc, vc) << "seed=" << seed << " len=" << len << " off=" << off;
    for (VcrcPath p : kAllPaths) {
      if (!vcrc_path_available(p)) continue;
      const PacketCrcs cp = packet_crcs_path(p, hdr, pl, pad);
      ASSERT_EQ(cp.icrc, ic) << "seed=" << seed << " path=" << static_cast<int>(p);
      ASSERT_EQ(cp.vcrc, vc) << "seed=" << seed << " path=" << static_cast<int>(p);
    }
    // The same packet in one buffer, pad materialized (as received).
    std::vector<std::uint8_t> whole(hdr);
    whole.insert(whole.end(), pl.begin(), pl.end());
    whole.insert(whole.end(), pad, 0);
    const auto ws = std::span<const std::uint8_t>(whole);
    const PacketCrcs cw = packet_crcs(ws.first(hdr.size()), ws.subspan(hdr.size()), 0);
    ASSERT_EQ(cw.icrc, ic) << "seed=" << seed << " contiguous";
    ASSERT_EQ(cw.vcrc, vc) << "seed=" << seed << " contiguous";
    ASSERT_EQ(check_packet_crcs(ws.first(hdr.size()), ws.subspan(hdr.size()), 0, ic, vc),
              std::nullopt)
        << "seed=" << seed << " contiguous";
    // The receiver's check: intact, then one corruption (a payload bit, the ICRC, the VCRC, or
    // the ICRC with a VCRC that matches it), each against the separate functions' verdict.
    ASSERT_EQ(check_packet_crcs(hdr, pl, pad, ic, vc), std::nullopt) << "seed=" << seed;
    std::vector<std::uint8_t> bad(pl.begin(), pl.end());
    std::uint32_t ic_rx = ic;
    std::uint16_t vc_rx = vc;
    switch (rng.below(len ? 4 : 3)) {
      case 0:
        ic_rx ^= 1u << rng.below(32);
        break;
      case 1:
        vc_rx ^= static_cast<std::uint16_t>(1u << rng.below(16));
        break;
      case 2:
        ic_rx ^= 1u << rng.below(32);
        vc_rx = vcrc_of_packet(hdr, pl, pad, ic_rx, false);
        break;
      default:
        bad[rng.below(len)] ^= static_cast<std::uint8_t>(1u << rng.below(8));
        break;
    }
    std::optional<WireError> want;
    if (vcrc_of_packet(hdr, bad, pad, ic_rx, false) != vc_rx)
      want = WireError::kBadVcrc;
    else if (icrc(hdr, bad, pad) != ic_rx)
      want = WireError::kBadIcrc;
    ASSERT_EQ(check_packet_crcs(hdr, bad, pad, ic_rx, vc_rx), want) << "seed=" << seed;
  }
}

// The 512-bit passes, with and without the GFNI half (which splits the stream in two from 2.5 KiB
// on, with 8x8 bit matrices for the last chunks), at every payload length from 0 to 4200 bytes
// (every split point, every partial last chunk, every chunk count up to the matrix table's
// bound), every pad, for a local packet (20- and 28-byte headers apart from the payload, and the
// received form in one buffer) and a global one (registers injected at the payload), against
// icrc() and the VCRC tables; every payload misalignment 0..63 at the lengths around the first
// split and an MTU. The packet_crcs dispatch (GFNI where the CPU has it) at every length too.
TEST(PacketCrcs, WidePathsEqualTheSeparateFunctionsAtEveryLengthAndAlignment) {
  SeededRng rng(29);
  std::vector<std::uint8_t> d(4200 + 64 + 3), wire(4400);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next_u64());
  const VcrcPath wide[] = {VcrcPath::kVpclmul, VcrcPath::kVpclmulGfni};
  for (const auto& [op, global] :
       {std::pair{Opcode::kRcWriteMiddle, false}, std::pair{Opcode::kRcWriteFirst, false},
        std::pair{Opcode::kRcWriteFirst, true}}) {
    auto h = test::make_headers(op, global);
    fill_lengths(h, 256);
    std::vector<std::uint8_t> hdr(header_bytes(h));
    encode_headers(h, hdr);
    std::copy(hdr.begin(), hdr.end(), wire.begin());
    const auto check = [&](std::size_t len, std::size_t off, std::uint8_t pad) {
      const auto pl = std::span<const std::uint8_t>(d).subspan(off, len);
      const std::uint32_t ic = icrc(hdr, pl, pad);
      const std::uint16_t vc = vcrc_of_packet(hdr, pl, pad, ic, false);
      const auto where = [&] {
        return "op=" + std::to_string(static_cast<int>(op)) + " global=" + std::to_string(global) +
               " len=" + std::to_string(len) + " off=" + std::to_string(off) +
               " pad=" + std::to_string(pad);
      };
      const PacketCrcs c = packet_crcs(hdr, pl, pad);
      ASSERT_EQ(c.icrc, ic) << where();
      ASSERT_EQ(c.vcrc, vc) << where();
      for (VcrcPath p : wide) {
        if (!vcrc_path_available(p)) continue;
        const PacketCrcs cp = packet_crcs_path(p, hdr, pl, pad);
        ASSERT_EQ(cp.icrc, ic) << where() << " path=" << static_cast<int>(p);
        ASSERT_EQ(cp.vcrc, vc) << where() << " path=" << static_cast<int>(p);
      }
      std::copy(pl.begin(), pl.end(), wire.begin() + static_cast<long>(hdr.size()));
      const auto w = std::span<const std::uint8_t>(wire);
      const PacketCrcs cw = packet_crcs(w.first(hdr.size()), w.subspan(hdr.size(), len), pad);
      ASSERT_EQ(cw.icrc, ic) << where() << " contiguous";
      ASSERT_EQ(cw.vcrc, vc) << where() << " contiguous";
    };
    for (std::size_t len = 0; len <= 4200; ++len) {
      check(len, len % 64, static_cast<std::uint8_t>(len % 4));
      if (len % 7 == 0) check(len, (len / 7) % 64, static_cast<std::uint8_t>((len / 4) % 4));
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (std::size_t len : {2400u, 2460u, 2476u, 2477u, 2500u, 2560u, 4000u, 4095u, 4096u, 4097u})
      for (std::size_t off = 0; off < 64; ++off) {
        check(len, off, static_cast<std::uint8_t>(off % 4));
        if (::testing::Test::HasFatalFailure()) return;
      }
  }
}

// Random payloads over many seeds on the GFNI pass (lengths where it splits the stream), each
// failure printing its seed: the matrices must hold for any bytes, not only the fixed ones above.
TEST(PacketCrcs, PropertyGfniPassEqualsSeparate) {
  if (!vcrc_path_available(VcrcPath::kVpclmulGfni)) GTEST_SKIP() << "no AVX-512 GFNI";
  constexpr std::uint64_t kSeeds = 3000;
  std::vector<std::uint8_t> buf(4200 + 64);
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    SeededRng rng(seed * 0xD1B54A32D192ED03ULL);
    auto h = test::make_headers(rng.below(2) ? Opcode::kRcWriteMiddle : Opcode::kRcWriteFirst,
                                rng.below(4) == 0, seed);
    h.lrh.vl = static_cast<std::uint8_t>(rng.below(16));
    const std::size_t len = 2400 + rng.below(1801);
    fill_lengths(h, len);
    std::vector<std::uint8_t> hdr(header_bytes(h));
    encode_headers(h, hdr);
    const std::size_t off = rng.below(64);
    for (std::size_t i = 0; i < len; ++i) buf[off + i] = static_cast<std::uint8_t>(rng.next_u64());
    if (rng.below(2))
      std::memset(buf.data() + off + rng.below(len), 0xFF, rng.below(64) % (len / 2));
    const std::span<const std::uint8_t> pl(buf.data() + off, len);
    const std::uint8_t pad = h.bth.pad_cnt;
    const std::uint32_t ic = icrc(hdr, pl, pad);
    const std::uint16_t vc = vcrc_of_packet(hdr, pl, pad, ic, false);
    const PacketCrcs c = packet_crcs_path(VcrcPath::kVpclmulGfni, hdr, pl, pad);
    ASSERT_EQ(c.icrc, ic) << "seed=" << seed << " len=" << len << " off=" << off;
    ASSERT_EQ(c.vcrc, vc) << "seed=" << seed << " len=" << len << " off=" << off;
    ASSERT_EQ(check_packet_crcs(hdr, pl, pad, ic, vc), std::nullopt) << "seed=" << seed;
    if (seed % 16 == 0) {
      ASSERT_EQ(ic, icrc_bitwise(hdr, pl, pad)) << "seed=" << seed;
    }
  }
}

// The path packet_crcs takes: available, and a 512-bit one wherever the CPU has the 512-bit
// fused pass (the GFNI half only where it pays, which this test cannot time: either is right).
TEST(PacketCrcs, ChosenPathIsAvailableAndWide) {
  const VcrcPath chosen = packet_crcs_chosen_path();
  EXPECT_TRUE(vcrc_path_available(chosen));
  if (vcrc_path_available(VcrcPath::kVpclmul)) {
    EXPECT_TRUE(chosen == VcrcPath::kVpclmul || chosen == VcrcPath::kVpclmulGfni);
  } else if (vcrc_path_available(VcrcPath::kClmul)) {
    EXPECT_EQ(chosen, VcrcPath::kClmul);
  }
}

TEST(Crc, WireByteOrder) {
  std::uint8_t b[4];
  put_icrc(b, 0x11223344);
  EXPECT_EQ(b[0], 0x44);
  EXPECT_EQ(b[3], 0x11);
  EXPECT_EQ(get_icrc(b), 0x11223344u);
  std::uint8_t v[2];
  put_vcrc(v, 0xA1B2);
  EXPECT_EQ(v[0], 0xB2);
  EXPECT_EQ(get_vcrc(v), 0xA1B2);
}

}  // namespace
}  // namespace weft::wire
