// Bit errors, the Reed-Solomon FEC codec, its timing-only twin, and the PHY channel's verdicts
// and PMA counters.
#include "src/link/fec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <isa-l/crc.h>

#include "src/link/bit_error_model.hpp"
#include "src/link/phy_channel.hpp"
#include "src/wire/packet.hpp"
#include "tests/common/xinuse.hpp"
#include <weft/types.hpp>

namespace weft::link {
namespace {

constexpr std::uint32_t kGoldenFnv = 41536924;  // frozen: change only with the format

std::vector<std::uint8_t> random_bytes(Rng& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng.next_u64());
  return v;
}

// A real IBA packet (LRH BTH payload ICRC VCRC) with a random payload.
std::vector<std::uint8_t> ib_packet(Rng& rng, std::size_t payload_bytes) {
  wire::Headers h;
  h.lrh.dlid = 2;
  h.lrh.slid = 1;
  h.bth.opcode = wire::Opcode::kRcSendOnly;
  h.bth.dest_qp = 0x11;
  auto payload = random_bytes(rng, payload_bytes);
  std::vector<std::uint8_t> out(wire::wire_bytes(h, payload_bytes));
  out.resize(wire::encode_packet(h, payload, out));
  return out;
}

bool vcrc_ok(const std::vector<std::uint8_t>& p) {
  auto s = std::span<const std::uint8_t>(p);
  return wire::get_vcrc(s.last<2>()) == wire::vcrc(s.first(s.size() - 2));
}

TEST(BitErrorModel, MeanMatchesBer) {
  SeededRng rng(3);
  BitErrorModel m(1e-4);
  std::vector<std::uint64_t> pos;
  std::uint64_t total = 0;
  for (int i = 0; i < 2000; ++i) {
    m.draw(100000, rng, pos);
    for (std::size_t j = 1; j < pos.size(); ++j) ASSERT_LT(pos[j - 1], pos[j]);
    if (!pos.empty()) {
      ASSERT_LT(pos.back(), 100000u);
    }
    total += pos.size();
  }
  EXPECT_NEAR(static_cast<double>(total) / 2000.0, 10.0, 0.3);
  BitErrorModel none(0.0);
  none.draw(1 << 20, rng, pos);
  EXPECT_TRUE(pos.empty());
}

TEST(BitErrorModel, FlipAndSymbols) {
  std::vector<std::uint8_t> b(4, 0);
  std::vector<std::uint64_t> pos = {0, 7, 9, 31};
  flip_bits(b, pos);
  EXPECT_EQ(b, (std::vector<std::uint8_t>{0x81, 0x40, 0x00, 0x01}));
  EXPECT_EQ(symbols_hit(pos), 3u);
}

TEST(Fec, LayoutSizes) {
  FecCodec c;                                // 8 + 2
  EXPECT_EQ(c.shard_bytes(4096), 528u);      // ceil(4100 / 8) = 513, to 16
  EXPECT_EQ(c.codeword_bytes(4096), 5320u);  // 10 * (528 + 4)
  EXPECT_EQ(c.shard_bytes(0), 16u);
}

TEST(Fec, RoundTripAllSizes) {
  SeededRng rng(5);
  FecCodec c;
  std::vector<std::uint8_t> out;
  for (std::size_t n : {0ul, 1ul, 15ul, 64ul, 1000ul, 4096ul, 4222ul, 9000ul}) {
    auto p = random_bytes(rng, n);
    auto cw = c.encode(p);
    auto r = c.decode(cw, out);
    EXPECT_FALSE(r.uncorrectable);
    EXPECT_EQ(r.corrected_blocks, 0u);
    EXPECT_EQ(out, p) << n;
  }
}

TEST(Fec, GoldenCodeword) {
  // Regression guard on the codeword format (shard layout, Cauchy parity, CRC32C, length).
  std::vector<std::uint8_t> p(4096);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(i * 7 + 3);
  auto cw = FecCodec().encode(p);
  ASSERT_EQ(cw.size(), 5320u);
  std::uint32_t h = 2166136261u;  // FNV-1a over the codeword
  for (auto b : cw) h = (h ^ b) * 16777619u;
  EXPECT_EQ(h, kGoldenFnv);
  // The first data shard is the packet's first 528 bytes, then its CRC32C, little endian.
  EXPECT_TRUE(std::equal(p.begin(), p.begin() + 528, cw.begin()));
}

TEST(Fec, ForgedLengthIsUncorrectableNotACrash) {
  FecCodec c;
  std::vector<std::uint8_t> p(100, 0x5A);
  auto cw = c.encode(p);
  const std::size_t s = c.shard_bytes(100), stride = s + kFecShardCrcBytes;
  // Rewrite the length to 1 GiB and re-seal the last data shard's CRC32C: every CRC passes.
  std::vector<std::uint8_t> forged = cw;
  std::uint8_t* last = forged.data() + 7 * stride;
  last[s - 1] = 0x40;
  std::uint32_t crc = crc32_iscsi(last, static_cast<int>(s), 0xFFFFFFFFu);
  for (int i = 0; i < 4; ++i) last[s + i] = static_cast<std::uint8_t>(crc >> (8 * i));
  std::vector<std::uint8_t> out;
  auto r = c.decode(forged, out);
  EXPECT_TRUE(r.uncorrectable);
  EXPECT_EQ(out.size(), 8 * s - kFecLengthBytes);
}

TEST(Fec, RebuildsUpToParityShardsAndNoMore) {
  SeededRng rng(9);
  FecConfig cfg{8, 2};
  FecCodec c(cfg);
  std::vector<std::uint8_t> out;
  const std::size_t stride = c.shard_bytes(4096) + kFecShardCrcBytes;
  for (int trial = 0; trial < 300; ++trial) {
    auto p = random_bytes(rng, 4096);
    auto cw = c.encode(p);
    const std::size_t lost = 1 + rng.below(3);  // 1..3 shards
    std::vector<bool> hit(10, false);
    for (std::size_t i = 0; i < lost;) {
      std::size_t shard = rng.below(10);
      if (hit[shard]) continue;
      hit[shard] = true;
      ++i;
      cw[shard * stride + rng.below(stride)] ^= static_cast<std::uint8_t>(1 + rng.below(255));
    }
    auto r = c.decode(cw, out);
    if (lost <= cfg.parity_shards) {
      ASSERT_FALSE(r.uncorrectable) << trial;
      EXPECT_EQ(r.corrected_blocks, lost);
      EXPECT_EQ(out, p);
    } else {
      EXPECT_TRUE(r.uncorrectable);
      EXPECT_EQ(r.corrected_blocks, 0u);
    }
  }
  EXPECT_GT(c.stats().corrected_blocks, 0u);
  EXPECT_GT(c.stats().uncorrectable_codewords, 0u);
}

// ISA-L's AVX-512 kernels (ec_encode_data, crc32_iscsi) may return with the upper halves of
// zmm0-15 dirty, which slows every legacy-SSE instruction after them until a vzeroupper
// (src/wire/crc_isal.hpp): the codec must leave them clean after an encode, a clean decode and
// a decode that rebuilds shards.
TEST(Fec, LeavesNoDirtyUpperVectorState) {
  SeededRng rng(11);
  FecCodec c;
  std::vector<std::uint8_t> out;
  auto p = random_bytes(rng, 4096);
  auto cw = c.encode(p);
  auto in_use = test_util::xinuse();
  if (!in_use) GTEST_SKIP() << "no XGETBV1";
  EXPECT_EQ(*in_use & test_util::kXinuseUpperHalves, 0u)
      << "after encode, XINUSE " << std::hex << *in_use;
  ASSERT_FALSE(c.decode(cw, out).uncorrectable);
  in_use = test_util::xinuse();
  EXPECT_EQ(*in_use & test_util::kXinuseUpperHalves, 0u)
      << "after a clean decode, XINUSE " << std::hex << *in_use;
  cw[3] ^= 0x5a;  // shard 0 fails its CRC and is rebuilt from the others
  const auto r = c.decode(cw, out);
  ASSERT_FALSE(r.uncorrectable);
  EXPECT_EQ(r.corrected_blocks, 1u);
  EXPECT_EQ(out, p);
  in_use = test_util::xinuse();
  EXPECT_EQ(*in_use & test_util::kXinuseUpperHalves, 0u)
      << "after a decode that rebuilt a shard, XINUSE " << std::hex << *in_use;
}

TEST(Fec, ModelledVerdictMatchesCodecOnSameErrorPattern) {
  FecCodec real, model;
  std::vector<std::uint64_t> pos;
  std::vector<std::uint8_t> out;
  int correctable = 0, uncorrectable = 0;
  for (std::uint64_t seed = 1; seed <= 3000; ++seed) {
    SeededRng rng(seed);
    std::size_t n = 64 + rng.below(4200);
    auto p = random_bytes(rng, n);
    auto cw = real.encode(p);
    BitErrorModel(3e-5 * static_cast<double>(1 + seed % 4)).draw(cw.size() * 8, rng, pos);
    FecVerdict v = model.judge(n, pos);
    flip_bits(cw, pos);
    auto r = real.decode(cw, out);
    ASSERT_EQ(v.uncorrectable, r.uncorrectable) << "seed=" << seed;
    if (!r.uncorrectable) {
      ASSERT_EQ(v.corrupted_blocks, r.corrected_blocks) << "seed=" << seed;
      ASSERT_EQ(out, p) << "seed=" << seed;
      ++correctable;
    } else {
      ++uncorrectable;
    }
  }
  EXPECT_GT(correctable, 100);
  EXPECT_GT(uncorrectable, 10);
}

TEST(PhyChannel, CorrectableBerDropsNothing) {
  SeededRng rng(21);
  PhyChannel ch({.ber = 1e-6, .fec = FecMode::kOn});
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 3000; ++i) {
    auto p = ib_packet(rng, 4096);
    PhyOutcome o = ch.carry(p, rng, out);
    ASSERT_FALSE(o.dropped) << i;
    ASSERT_EQ(out, p);
  }
  EXPECT_GT(ch.counters().fec_corrected_blocks, 0u);
  EXPECT_GT(ch.counters().symbol_error_counter, 0u);
  EXPECT_EQ(ch.counters().fec_uncorrectable_codewords, 0u);
  EXPECT_EQ(ch.counters().port_rcv_errors, 0u);
  EXPECT_EQ(ch.counters().packets, 3000u);
}

TEST(PhyChannel, AboveTheLimitUncorrectablePacketsFailVcrcAndAreCounted) {
  SeededRng rng(22);
  PhyChannel ch({.ber = 2e-4, .fec = FecMode::kOn});
  std::vector<std::uint8_t> out;
  std::uint64_t uncorrectable = 0, failed_vcrc = 0;
  for (int i = 0; i < 500; ++i) {
    auto p = ib_packet(rng, 4096);
    PhyOutcome o = ch.carry(p, rng, out);
    EXPECT_EQ(o.dropped, !vcrc_ok(out)) << i;
    if (o.uncorrectable) {
      ++uncorrectable;
      if (out != p) {
        EXPECT_FALSE(vcrc_ok(out)) << i;  // the damage reaches the VCRC check downstream
        auto parsed = wire::parse_packet(out);
        EXPECT_FALSE(parsed.ok()) << i;
      }
    } else {
      EXPECT_EQ(out, p) << i;
    }
    if (!vcrc_ok(out)) ++failed_vcrc;
  }
  EXPECT_GT(uncorrectable, 0u);
  EXPECT_GT(failed_vcrc, 0u);
  EXPECT_EQ(ch.counters().fec_uncorrectable_codewords, uncorrectable);
  EXPECT_EQ(ch.counters().port_rcv_errors, failed_vcrc);
  EXPECT_GT(ch.counters().fec_corrected_blocks, 0u);
}

TEST(PhyChannel, WithoutFecAnyErrorDrops) {
  SeededRng rng(23);
  PhyChannel ch({.ber = 1e-5, .fec = FecMode::kOff});
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 1000; ++i) {
    auto p = ib_packet(rng, 4096);
    PhyOutcome o = ch.carry(p, rng, out);
    EXPECT_EQ(o.dropped, o.bit_errors > 0) << i;
  }
  EXPECT_GT(ch.counters().port_rcv_errors, 0u);
  EXPECT_EQ(ch.counters().fec_corrected_blocks, 0u);
}

TEST(PhyChannel, ModelledModeMatchesVerifiedModeForTheSameSeed) {
  for (double ber : {0.0, 1e-6, 3e-5, 2e-4}) {
    for (FecMode fec : {FecMode::kOn, FecMode::kOff}) {
      PhyChannel real({.ber = ber, .fec = fec}), modelled({.ber = ber, .fec = fec});
      SeededRng packets(99);
      SeededRng r1(1234), r2(1234);  // the same error draws in both modes
      std::vector<std::uint8_t> out;
      for (int i = 0; i < 400; ++i) {
        auto p = ib_packet(packets, 64 + packets.below(4096));
        PhyOutcome a = real.carry(p, r1, out);
        PhyOutcome b = modelled.carry_modelled(p.size(), r2);
        ASSERT_EQ(a.bit_errors, b.bit_errors) << "ber=" << ber << " i=" << i;
        ASSERT_EQ(a.uncorrectable, b.uncorrectable) << "ber=" << ber << " i=" << i;
        ASSERT_EQ(a.corrected_blocks, b.corrected_blocks) << "ber=" << ber << " i=" << i;
        ASSERT_EQ(a.dropped, b.dropped) << "ber=" << ber << " i=" << i;
      }
      EXPECT_EQ(real.counters().port_rcv_errors, modelled.counters().port_rcv_errors);
      EXPECT_EQ(real.counters().symbol_error_counter, modelled.counters().symbol_error_counter);
    }
  }
}

}  // namespace
}  // namespace weft::link
