// wire/crc.cpp — the two packet CRCs of IBA 7.8: ICRC (CRC-32 over the end-to-end invariant
// fields) and VCRC (CRC-16 over everything, recomputed on every link).
// Thread-safety: pure functions; the VCRC table is a constant built at compile time.
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

#include <isa-l/crc.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "src/base/assert.hpp"
#include "src/wire/crc_isal.hpp"
#include "src/wire/packet.hpp"

namespace weft::wire {
namespace {

constexpr std::size_t kLnhOffset = 1;
constexpr std::size_t kBthResv8aOffset = 4;  // FECN, BECN, resv6a (IBA 9.2, 9.2.7)

using detail::crc32_refl;

// IBA 7.8.2: generator x^16 + x^12 + x^3 + x + 1 (0x100B), processed least significant bit
// first like the ICRC, so the table holds the bit-reversed polynomial 0xD008.
constexpr std::uint16_t kVcrcPolyReflected = 0xD008;
static_assert(kVcrcPolyReflected == 0xD008);

// Slicing-by-16 (Kounavis and Berry, "A Systematic Approach to Building High Performance
// Software-based CRC Generators"): table k gives the effect of a byte followed by k zero bytes,
// so 16 input bytes cost 16 independent lookups instead of a 16-step dependency chain. A
// byte-at-a-time table runs at ~0.4 GB/s here; the VCRC is on every packet of every hop.
constexpr std::size_t kVcrcSlices = 16;
using VcrcTables = std::array<std::array<std::uint16_t, 256>, kVcrcSlices>;

constexpr VcrcTables build_vcrc_tables() {
  VcrcTables t{};
  for (unsigned n = 0; n < 256; ++n) {
    unsigned c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (kVcrcPolyReflected ^ (c >> 1)) : (c >> 1);
    t[0][n] = static_cast<std::uint16_t>(c);
  }
  for (std::size_t k = 1; k < kVcrcSlices; ++k)
    for (unsigned n = 0; n < 256; ++n)
      t[k][n] = static_cast<std::uint16_t>((t[k - 1][n] >> 8) ^ t[0][t[k - 1][n] & 0xFF]);
  return t;
}
constexpr VcrcTables kVcrcTables = build_vcrc_tables();

std::uint16_t vcrc_tables(std::uint16_t crc, const std::uint8_t* p, std::size_t n) {
  const auto& t = kVcrcTables;
  unsigned c = crc;
  for (; n >= kVcrcSlices; n -= kVcrcSlices, p += kVcrcSlices) {
    // The register is 16 bits wide, so it folds into the first two bytes of the block only.
    const unsigned b0 = (c ^ p[0]) & 0xFF, b1 = ((c >> 8) ^ p[1]) & 0xFF;
    c = t[15][b0] ^ t[14][b1] ^ t[13][p[2]] ^ t[12][p[3]] ^ t[11][p[4]] ^ t[10][p[5]] ^ t[9][p[6]] ^
        t[8][p[7]] ^ t[7][p[8]] ^ t[6][p[9]] ^ t[5][p[10]] ^ t[4][p[11]] ^ t[3][p[12]] ^
        t[2][p[13]] ^ t[1][p[14]] ^ t[0][p[15]];
  }
  // Tails by 8 and 4 the same way (headers are 20..60 bytes, the ICRC 4): fewer dependent steps.
  if (n >= 8) {
    const unsigned b0 = (c ^ p[0]) & 0xFF, b1 = ((c >> 8) ^ p[1]) & 0xFF;
    c = t[7][b0] ^ t[6][b1] ^ t[5][p[2]] ^ t[4][p[3]] ^ t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^
        t[0][p[7]];
    n -= 8;
    p += 8;
  }
  if (n >= 4) {
    const unsigned b0 = (c ^ p[0]) & 0xFF, b1 = ((c >> 8) ^ p[1]) & 0xFF;
    c = t[3][b0] ^ t[2][b1] ^ t[1][p[2]] ^ t[0][p[3]];
    n -= 4;
    p += 4;
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return static_cast<std::uint16_t>(c);
}

// The two CRC registers between pieces of a packet: the ICRC's in ISA-L's convention (the
// complement of the raw register: pass it on to crc32_gzip_refl), the VCRC's raw.
struct CrcRegisters {
  std::uint32_t icrc_gz;
  std::uint16_t vcrc;
};

#if defined(__x86_64__)
// Carry-less-multiply folding (Gopal et al., "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ", Intel 2009) for any generator of degree <= 64: even slicing-by-16 runs at
// ~4 GB/s, a tenth of memcpy, and the VCRC covers every byte of every packet on every hop.
//
// Representation: a 16-byte block is a polynomial of degree < 128 whose first bit on the wire
// (bit 0 of byte 0) is the highest term, so a 64-bit lane v stands for R(v) = sum v_b x^(63-b)
// and the block is R(lo) x^64 + R(hi). Folding a block forward by D bits multiplies it by x^D
// mod P: clmul(lo, R(x^(D+63) mod P)) ^ clmul(hi, R(x^(D-1) mod P)); the "-1" absorbs the
// one-bit shift a carry-less product of two reflected operands has. The folded value is
// congruent to the prefix mod P, so the byte-wise CRC of its 16 bytes (from a zero register)
// equals the CRC register of the prefix; the tables finish the job. Folding modulo a product of
// generators keeps the residue modulo each of them: that is the fused pass below.
constexpr std::uint64_t kVcrcPolyFull = 0x1100B;      // x^16 + x^12 + x^3 + x + 1
constexpr std::uint64_t kIcrcPolyFull = 0x104C11DB7;  // CRC-32 (IEEE 802.3), IBA 7.8.1
constexpr std::uint64_t clmul_low(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  for (unsigned i = 0; i < 64; ++i)
    if ((b >> i) & 1) r ^= a << i;
  return r;
}
// The product of the two generators (degree 48).
constexpr std::uint64_t kFusedPolyFull = clmul_low(kIcrcPolyFull, kVcrcPolyFull);
static_assert(kFusedPolyFull >> 48 == 1);

constexpr std::uint64_t xpow_mod(std::uint64_t poly, unsigned n) {
  const int degree = 63 - std::countl_zero(poly);
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if ((r >> degree) & 1) r ^= poly;
  }
  return r;
}
constexpr std::uint64_t xpow_mod_step(std::uint64_t r) {  // r x mod the fused generator
  static_assert(kFusedPolyFull >> 48 == 1);
  r <<= 1;
  return (r >> 48) & 1 ? r ^ kFusedPolyFull : r;
}
constexpr std::uint64_t reflect_const(std::uint64_t c) {  // R^-1: x^e -> bit (63 - e)
  std::uint64_t v = 0;
  for (unsigned e = 0; e < 64; ++e)
    if ((c >> e) & 1) v |= std::uint64_t{1} << (63 - e);
  return v;
}
// The pair of constants that folds a block forward by `bytes` modulo `poly`.
struct FoldKey {
  long long lo, hi;
};
constexpr FoldKey fold_key(std::uint64_t poly, std::size_t bytes) {
  return {static_cast<long long>(reflect_const(xpow_mod(poly, bytes * 8 + 63))),
          static_cast<long long>(reflect_const(xpow_mod(poly, bytes * 8 - 1)))};
}

constexpr std::size_t kFoldLanes = 4;  // independent accumulators hide clmul latency
constexpr std::size_t kFoldBlockBytes = 16;
constexpr std::size_t kFoldStrideBytes = kFoldLanes * kFoldBlockBytes;
constexpr std::size_t kFoldMinBytes = 2 * kFoldStrideBytes;  // below this the tables win

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i acc, __m128i k) {
  // k: lane 0 multiplies acc's low qword, lane 1 the high qword.
  return _mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00), _mm_clmulepi64_si128(acc, k, 0x11));
}

// Folds the whole 16-byte blocks of [p, p + n) (n >= 16), the first XORed with `first`, into one
// block congruent to them modulo kPoly; advances p and n past them (n < 16 is left).
template <std::uint64_t kPoly>
__attribute__((target("pclmul,sse4.1"))) __m128i fold_blocks(__m128i first, const std::uint8_t*& p,
                                                             std::size_t& n) {
  static constexpr FoldKey kStride = fold_key(kPoly, kFoldStrideBytes);
  static constexpr FoldKey kBlock = fold_key(kPoly, kFoldBlockBytes);
  const __m128i k_stride = _mm_set_epi64x(kStride.hi, kStride.lo);
  const __m128i k_block = _mm_set_epi64x(kBlock.hi, kBlock.lo);
  auto load = [](const std::uint8_t* q) __attribute__((target("sse4.1"))) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  };
  __m128i x;
  if (n >= kFoldStrideBytes) {
    static_assert(kFoldLanes == 4, "the loop below is unrolled for four lanes");
    __m128i a0 = _mm_xor_si128(load(p), first);
    __m128i a1 = load(p + 16), a2 = load(p + 32), a3 = load(p + 48);
    p += kFoldStrideBytes;
    n -= kFoldStrideBytes;
    for (; n >= kFoldStrideBytes; n -= kFoldStrideBytes, p += kFoldStrideBytes) {
      a0 = _mm_xor_si128(fold(a0, k_stride), load(p));
      a1 = _mm_xor_si128(fold(a1, k_stride), load(p + 16));
      a2 = _mm_xor_si128(fold(a2, k_stride), load(p + 32));
      a3 = _mm_xor_si128(fold(a3, k_stride), load(p + 48));
    }
    x = _mm_xor_si128(fold(a0, k_block), a1);
    x = _mm_xor_si128(fold(x, k_block), a2);
    x = _mm_xor_si128(fold(x, k_block), a3);
  } else {
    x = _mm_xor_si128(load(p), first);
    p += kFoldBlockBytes;
    n -= kFoldBlockBytes;
  }
  for (; n >= kFoldBlockBytes; n -= kFoldBlockBytes, p += kFoldBlockBytes)
    x = _mm_xor_si128(fold(x, k_block), load(p));
  return x;
}

__attribute__((target("pclmul,sse4.1"))) std::uint16_t vcrc_clmul(std::uint16_t crc,
                                                                  const std::uint8_t* p,
                                                                  std::size_t n) {
  // The running register enters as an XOR into the first two message bytes.
  const __m128i x = fold_blocks<kVcrcPolyFull>(_mm_cvtsi32_si128(crc), p, n);
  alignas(16) std::uint8_t folded[kFoldBlockBytes];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), x);
  return vcrc_tables(vcrc_tables(0, folded, kFoldBlockBytes), p, n);
}

// The same folding four 128-bit blocks per instruction (VPCLMULQDQ on 512-bit registers, Intel
// Ice Lake / AMD Zen 4 and later): four 64-byte accumulators stride 256 bytes, are merged into
// one by 64-byte folds, and its four 16-byte lanes are folded into one block as above.
constexpr std::size_t kWideBytes = 64;
constexpr std::size_t kWideLanes = 4;
constexpr std::size_t kWideStrideBytes = kWideLanes * kWideBytes;
constexpr std::size_t kWideMinBytes = 2 * kWideStrideBytes;  // below this the SSE folds win
static_assert(kWideBytes == 4 * kFoldBlockBytes);

#define WEFT_VPCLMUL_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))

// acc folded forward by the distance k encodes, XORed with data (vpternlog 0x96: three-way XOR).
WEFT_VPCLMUL_TARGET __attribute__((always_inline)) inline __m512i fold_wide_xor(__m512i acc,
                                                                                __m512i k,
                                                                                __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00),
                                   _mm512_clmulepi64_epi128(acc, k, 0x11), data, 0x96);
}

// fold_blocks on 512-bit registers: n >= kWideStrideBytes.
template <std::uint64_t kPoly>
WEFT_VPCLMUL_TARGET __m128i fold_blocks_wide(__m128i first, const std::uint8_t*& p,
                                             std::size_t& n) {
  static constexpr FoldKey kStride = fold_key(kPoly, kWideStrideBytes);
  static constexpr FoldKey kWide = fold_key(kPoly, kWideBytes);
  static constexpr FoldKey kBlock = fold_key(kPoly, kFoldBlockBytes);
  // The same pair of constants in each 128-bit lane.
  const __m512i k_stride = _mm512_set_epi64(kStride.hi, kStride.lo, kStride.hi, kStride.lo,
                                            kStride.hi, kStride.lo, kStride.hi, kStride.lo);
  const __m512i k_wide = _mm512_set_epi64(kWide.hi, kWide.lo, kWide.hi, kWide.lo, kWide.hi,
                                          kWide.lo, kWide.hi, kWide.lo);
  const __m128i k_block = _mm_set_epi64x(kBlock.hi, kBlock.lo);
#define load(q) _mm512_loadu_si512(q)
  static_assert(kWideLanes == 4, "the loop below is unrolled for four lanes");
  __m512i a0 = _mm512_xor_si512(load(p), _mm512_inserti32x4(_mm512_setzero_si512(), first, 0));
  __m512i a1 = load(p + 64), a2 = load(p + 128), a3 = load(p + 192);
  p += kWideStrideBytes;
  n -= kWideStrideBytes;
  for (; n >= kWideStrideBytes; n -= kWideStrideBytes, p += kWideStrideBytes) {
    a0 = fold_wide_xor(a0, k_stride, load(p));
    a1 = fold_wide_xor(a1, k_stride, load(p + 64));
    a2 = fold_wide_xor(a2, k_stride, load(p + 128));
    a3 = fold_wide_xor(a3, k_stride, load(p + 192));
  }
  __m512i x = fold_wide_xor(a0, k_wide, a1);
  x = fold_wide_xor(x, k_wide, a2);
  x = fold_wide_xor(x, k_wide, a3);
  for (; n >= kWideBytes; n -= kWideBytes, p += kWideBytes) x = fold_wide_xor(x, k_wide, load(p));
#undef load
  alignas(64) __m128i lanes[kWideLanes];
  _mm512_store_si512(lanes, x);
  __m128i y = lanes[0];
  for (std::size_t i = 1; i < kWideLanes; ++i) y = _mm_xor_si128(fold(y, k_block), lanes[i]);
  for (; n >= kFoldBlockBytes; n -= kFoldBlockBytes, p += kFoldBlockBytes)
    y = _mm_xor_si128(fold(y, k_block), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return y;
}

WEFT_VPCLMUL_TARGET std::uint16_t vcrc_vpclmul(std::uint16_t crc, const std::uint8_t* p,
                                               std::size_t n) {
  // The running register enters as an XOR into the first two message bytes.
  const __m128i y = fold_blocks_wide<kVcrcPolyFull>(_mm_cvtsi32_si128(crc), p, n);
  alignas(16) std::uint8_t folded[kFoldBlockBytes];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), y);
  return vcrc_tables(vcrc_tables(0, folded, kFoldBlockBytes), p, n);
}

bool have_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
bool have_vpclmul() {
  static const bool yes = have_clmul() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq");
  return yes;
}

// ---- One pass for both CRCs -----------------------------------------------------------------
// A packet's bytes are folded once modulo P = P32 * P16, the product of the ICRC's and the
// VCRC's generators (degree 48, so the folding above applies unchanged): the folded block is
// congruent to the stream modulo each of them, and each CRC's register is that block reduced by
// its own generator (Barrett reduction, below).
//
// The two CRCs see different bytes at the start: different initial registers (all ones, 32 and
// 16 bits), and the ICRC sees the headers with their variant fields masked to ones (IBA 7.8.1)
// where the VCRC sees them as sent. Both differences sit in the first bytes of the stream, and a
// CRC is linear, so one 6-byte value E XORed into the stream's first bytes can stand for all of
// them at once: E is chosen so that, after the first n stream bytes, the zero-register CRC-32 and
// CRC-16 of (stream ^ E) equal the registers each CRC has there (its initial value, its masking).
// Past that point both CRCs see the same bytes, so they agree at the end. E exists and is unique:
// E -> (CRC-32, CRC-16 of E and n - 6 zero bytes) is E mod P32 and E mod P16 up to invertible
// factors, a bijection on 48 bits (Chinese remainder theorem: the generators are coprime). It is
// linear, so E is a few table lookups: for a local packet (masking at bytes 0 and 12: LRH VL, BTH
// resv8a) of the VL nibble and byte 12; for a global one (more masked bytes) the headers' two
// registers are computed apart and injected at the payload's start from 12 nibble tables.
constexpr std::uint32_t kIcrcPolyReflected = 0xEDB88320;

// Both registers after n bytes, bit at a time from the definitions (IBA 7.8.1, 7.8.2). regs: the
// CRC-32 register in bits 0..31, the CRC-16 register in bits 32..47; b32 and b16: the bytes each
// CRC sees.
constexpr std::uint64_t regs_after(std::uint64_t regs, const std::uint8_t* b32,
                                   const std::uint8_t* b16, std::size_t n) {
  auto c32 = static_cast<std::uint32_t>(regs);
  auto c16 = static_cast<std::uint32_t>((regs >> 32) & 0xFFFF);
  for (std::size_t i = 0; i < n; ++i) {
    c32 ^= b32[i];
    c16 ^= b16[i];
    for (int k = 0; k < 8; ++k) {
      c32 = (c32 & 1) ? (kIcrcPolyReflected ^ (c32 >> 1)) : (c32 >> 1);
      c16 = (c16 & 1) ? (kVcrcPolyReflected ^ (c16 >> 1)) : (c16 >> 1);
    }
  }
  return c32 | (std::uint64_t{c16} << 32);
}

using Basis48 = std::array<std::uint64_t, 48>;
// The inverse of the linear map E -> both registers after E and n - 6 zero bytes, as the
// preimages of the unit vectors (Gauss-Jordan elimination over GF(2)).
constexpr Basis48 injection_inverse(std::size_t n) {
  Basis48 g{}, w{};
  for (unsigned i = 0; i < 48; ++i) {
    std::uint8_t b[16] = {};
    b[i / 8] = static_cast<std::uint8_t>(1u << (i % 8));
    g[i] = regs_after(0, b, b, n);
    w[i] = std::uint64_t{1} << i;
  }
  for (unsigned j = 0; j < 48; ++j) {
    unsigned pivot = j;
    while (pivot < 48 && !((g[pivot] >> j) & 1)) ++pivot;
    if (pivot == 48) throw "the two CRC generators are not coprime";
    std::swap(g[j], g[pivot]);
    std::swap(w[j], w[pivot]);
    for (unsigned k = 0; k < 48; ++k)
      if (k != j && ((g[k] >> j) & 1)) {
        g[k] ^= g[j];
        w[k] ^= w[j];
      }
  }
  return w;  // g[j] is now e_j, so the map takes w[j] to e_j
}
constexpr std::uint64_t apply(const Basis48& m, std::uint64_t y) {
  std::uint64_t x = 0;
  for (unsigned j = 0; j < 48; ++j)
    if ((y >> j) & 1) x ^= m[j];
  return x;
}

// Registers (r32, r16) in the middle of a packet, injected at the next 6 bytes: twelve 4-bit
// tables of the linear map.
constexpr unsigned kInjectNibbles = 12;
using InjectTables = std::array<std::array<std::uint64_t, 16>, kInjectNibbles>;
constexpr InjectTables build_inject_tables() {
  const Basis48 inv = injection_inverse(6);
  constexpr std::uint8_t kNone[6] = {};
  InjectTables t{};
  for (unsigned k = 0; k < kInjectNibbles; ++k)
    for (unsigned v = 0; v < 16; ++v)
      t[k][v] = apply(inv, regs_after(std::uint64_t{v} << (4 * k), kNone, kNone, 6));
  return t;
}
constexpr InjectTables kInjectTables = build_inject_tables();
inline std::uint64_t inject_registers(std::uint32_t r32, std::uint16_t r16) {
  const std::uint64_t regs = r32 | (std::uint64_t{r16} << 32);
  std::uint64_t w = 0;
  for (unsigned k = 0; k < kInjectNibbles; ++k) w ^= kInjectTables[k][(regs >> (4 * k)) & 0xF];
  return w;
}

// A local packet from its first byte: E = base ^ vl[LRH byte 0 >> 4] ^ resv8a[BTH byte 4], with
// the map taken after 13 bytes (LRH + BTH through resv8a). The ICRC sees VL and resv8a as ones:
// (ones ^ the byte's bits), so base holds the ones and both initial registers.
constexpr std::size_t kLocalInjectSpan = kLrhBytes + kBthResv8aOffset + 1;
struct LocalInject {
  std::uint64_t base;
  std::array<std::uint64_t, 16> vl;
  std::array<std::uint64_t, 256> resv8a;
};
constexpr LocalInject build_local_inject() {
  const Basis48 inv = injection_inverse(kLocalInjectSpan);
  constexpr std::uint8_t kNone[kLocalInjectSpan] = {};
  LocalInject t{};
  std::uint8_t ones[kLocalInjectSpan] = {};
  ones[0] = 0xF0;
  ones[kLocalInjectSpan - 1] = 0xFF;
  t.base = apply(inv, regs_after(0xFFFF'FFFFFFFFULL, ones, kNone, kLocalInjectSpan));
  for (unsigned v = 0; v < 16; ++v) {
    std::uint8_t b[kLocalInjectSpan] = {};
    b[0] = static_cast<std::uint8_t>(v << 4);
    t.vl[v] = apply(inv, regs_after(0, b, kNone, kLocalInjectSpan));
  }
  for (unsigned v = 0; v < 256; ++v) {
    std::uint8_t b[kLocalInjectSpan] = {};
    b[kLocalInjectSpan - 1] = static_cast<std::uint8_t>(v);
    t.resv8a[v] = apply(inv, regs_after(0, b, kNone, kLocalInjectSpan));
  }
  return t;
}
constexpr LocalInject kLocalInject = build_local_inject();
inline std::uint64_t inject_local(const std::uint8_t* lrh) {
  return kLocalInject.base ^ kLocalInject.vl[lrh[0] >> 4] ^
         kLocalInject.resv8a[lrh[kLocalInjectSpan - 1]];
}

// Barrett reduction of a 16-byte block to the zero-register CRC of those 16 bytes, for a
// generator of degree w <= 32. In the bit order of the folds: the low qword is folded into the
// high one by x^64 mod P twice (64 -> w + 32 -> w bits of overhang), leaving an 8-byte message
// H; then q = floor(H x^w / P) = H + floor(H mu / x^64) with mu = floor(x^(64+w) / P) - x^64,
// and the register is (q P) mod x^w, both products by carry-less multiplication of reflected
// operands (the results read one bit further up, as in the folds).
constexpr std::uint64_t barrett_mu_low(std::uint64_t poly, unsigned w) {
  using u128 = unsigned __int128;
  const int dp = 63 - std::countl_zero(poly);
  u128 r = u128{1} << (64 + w);
  u128 q = 0;
  for (int i = 64 + static_cast<int>(w) - dp; i >= 0; --i)
    if ((r >> (i + dp)) & 1) {
      q |= u128{1} << i;
      r ^= u128{poly} << i;
    }
  return static_cast<std::uint64_t>(q);  // drops the x^64 term
}
template <std::uint64_t kPoly>
struct ReduceKeys {
  static constexpr unsigned kWidth = 63 - std::countl_zero(kPoly);
  static constexpr auto kFold = static_cast<long long>(reflect_const(xpow_mod(kPoly, 63)));
  static constexpr auto kMu = static_cast<long long>(reflect_const(barrett_mu_low(kPoly, kWidth)));
  static constexpr auto kP =
      static_cast<long long>(reflect_const(kPoly & ((std::uint64_t{1} << kWidth) - 1)));
};
template <std::uint64_t kPoly>
__attribute__((target("pclmul,sse4.1"))) inline std::uint32_t crc_of_block(__m128i f) {
  using K = ReduceKeys<kPoly>;
  const __m128i k = _mm_set_epi64x(K::kMu, K::kFold);
  const __m128i hi_only = _mm_set_epi64x(-1, 0);
  __m128i x = _mm_xor_si128(_mm_clmulepi64_si128(f, k, 0x00), _mm_and_si128(f, hi_only));
  x = _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), x);
  const __m128i h = _mm_unpackhi_epi64(x, x);  // H in both qwords
  // q = H ^ (low qword of H * mu) << 1
  const __m128i q = _mm_xor_si128(h, _mm_slli_epi64(_mm_clmulepi64_si128(h, k, 0x10), 1));
  const __m128i r = _mm_clmulepi64_si128(q, _mm_cvtsi64_si128(K::kP), 0x00);
  return static_cast<std::uint32_t>(static_cast<std::uint64_t>(_mm_extract_epi64(r, 1)) >>
                                    (63 - K::kWidth)) &
         static_cast<std::uint32_t>((std::uint64_t{1} << K::kWidth) - 1);
}

// The end of the fused pass: the folded block x, the stream's last t < 16 bytes and pad zero
// bytes, right-aligned behind zeros (a zero register ignores leading zeros) and folded into one
// block, then reduced by each generator.
__attribute__((target("pclmul,sse4.1"))) inline CrcRegisters fused_finish(__m128i x,
                                                                          const std::uint8_t* tail,
                                                                          std::size_t t,
                                                                          std::uint8_t pad_bytes) {
  if (t + pad_bytes != 0) {
    static constexpr FoldKey kBlock = fold_key(kFusedPolyFull, kFoldBlockBytes);
    const __m128i k_block = _mm_set_epi64x(kBlock.hi, kBlock.lo);
    alignas(16) std::uint8_t buf[3 * kFoldBlockBytes] = {};
    const std::size_t len = kFoldBlockBytes + t + pad_bytes;  // <= 34
    std::uint8_t* start = buf + sizeof buf - len;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(start), x);
    std::memcpy(start + kFoldBlockBytes, tail, t);
    const auto* b = reinterpret_cast<const __m128i*>(buf);
    x = _mm_xor_si128(fold(_mm_load_si128(b + 1), k_block), _mm_load_si128(b + 2));
    if (len > 2 * kFoldBlockBytes) {
      const __m128i top = fold(fold(_mm_load_si128(b), k_block), k_block);
      x = _mm_xor_si128(x, top);
    }
  }
  return {~crc_of_block<kIcrcPolyFull>(x),
          static_cast<std::uint16_t>(crc_of_block<kVcrcPolyFull>(x))};
}

// The fused pass over [p, p + n), n >= 16, `first` XORed into its first block, pad zero bytes
// after it.
__attribute__((target("pclmul,sse4.1"))) CrcRegisters fused_clmul(__m128i first,
                                                                  const std::uint8_t* p,
                                                                  std::size_t n,
                                                                  std::uint8_t pad_bytes) {
  const __m128i x = fold_blocks<kFusedPolyFull>(first, p, n);
  return fused_finish(x, p, n, pad_bytes);
}
// The same on 512-bit registers; n >= kWideStrideBytes.
WEFT_VPCLMUL_TARGET CrcRegisters fused_vpclmul(__m128i first, const std::uint8_t* p, std::size_t n,
                                               std::uint8_t pad_bytes) {
  const __m128i x = fold_blocks_wide<kFusedPolyFull>(first, p, n);
  return fused_finish(x, p, n, pad_bytes);
}
__attribute__((target("pclmul,sse4.1"))) CrcRegisters fused_stream(bool wide, __m128i first,
                                                                   const std::uint8_t* p,
                                                                   std::size_t n,
                                                                   std::uint8_t pad_bytes) {
  if (wide && n >= kWideStrideBytes) return fused_vpclmul(first, p, n, pad_bytes);
  if (n >= kFoldBlockBytes) return fused_clmul(first, p, n, pad_bytes);
  // Shorter than a block: all of it is the tail (first must then be zero).
  return fused_finish(_mm_setzero_si128(), p, n, pad_bytes);
}

constexpr std::size_t kLocalHeaderBytesMax = 64;

// A local packet's headers and payload (not contiguous): the headers and the payload's first
// bytes up to a 16-byte boundary of the stream go through a buffer, the rest is read in place.
__attribute__((target("pclmul,sse4.1"))) CrcRegisters fused_local(
    bool wide, std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
    std::uint8_t pad_bytes) {
  const std::size_t hb = headers.size(), n = payload.size();
  const std::uint64_t e = inject_local(headers.data());
  if (headers.data() + hb == payload.data())  // one stream in memory (a received packet)
    return fused_stream(wide && n >= kWideStrideBytes, _mm_cvtsi64_si128(static_cast<long long>(e)),
                        headers.data(), hb + n, pad_bytes);
  alignas(16) std::uint8_t buf[kLocalHeaderBytesMax + kFoldBlockBytes + 3];
  const std::size_t head = std::min(n, (kFoldBlockBytes - hb % kFoldBlockBytes) % kFoldBlockBytes);
  std::memcpy(buf, headers.data(), hb);
  if (head) std::memcpy(buf + hb, payload.data(), head);
  std::uint64_t first8;
  std::memcpy(&first8, buf, 8);
  first8 ^= e;
  std::memcpy(buf, &first8, 8);
  if (head == n) {  // the whole packet is in buf
    std::memset(buf + hb + n, 0, pad_bytes);
    return fused_stream(false, _mm_setzero_si128(), buf, hb + n + pad_bytes, 0);
  }
  const std::uint8_t* q = buf;
  std::size_t m = hb + head;  // a multiple of 16
  __m128i x = fold_blocks<kFusedPolyFull>(_mm_setzero_si128(), q, m);
  const std::uint8_t* p = payload.data() + head;
  const std::size_t rest = n - head;
  if (rest < kFoldBlockBytes) return fused_finish(x, p, rest, pad_bytes);
  static constexpr FoldKey kBlock = fold_key(kFusedPolyFull, kFoldBlockBytes);
  x = fold(x, _mm_set_epi64x(kBlock.hi, kBlock.lo));  // moved over the next block
  return fused_stream(wide, x, p, rest, pad_bytes);
}

// The fused pass on 512-bit registers with AVX-512BW masked loads, which assemble the headers,
// the payload's first bytes and the last partial chunk in registers (no buffer in memory, whose
// narrow stores would stall the wide loads that follow). The stream is hb header bytes then n
// payload bytes (anywhere in memory, or right behind the headers), e XORed into its first 6
// bytes, then pad zero bytes. Chunks of 64 bytes from the start; the last one is loaded with
// zeros after it, and the `trailing` zeros this appends (less the pad) are taken back at the end
// by folding by a negative distance: x^-1 exists modulo P (both generators have a constant term).
// hb <= 64; hb may be 0 (the headers' registers already in e).
constexpr std::uint64_t xpow_mod_signed(std::uint64_t poly, long n) {
  if (n >= 0) return xpow_mod(poly, static_cast<unsigned>(n));
  std::uint64_t r = 1;
  for (long i = 0; i < -n; ++i) r = ((r & 1) ? (r ^ poly) : r) >> 1;  // r * x^-1
  return r;
}
constexpr long kChunkBytes = 64;
// The last step takes the chunk's four 16-byte lanes straight to each CRC's register, with no
// block in between that the two generators' product would still have to reduce (the chain of
// dependent carry-less multiplies after the loop is the latency every packet pays, twice: one
// pass to send, one to check). Lane i is moved by its distance to the chunk's end (48 - 16 i
// bytes) plus d, the net shift of the end: from -64 (drop 64 trailing zeros) to +3 (a pad); and
// by the CRC's own x^w, so the sum is the register's value before the last reduction:
//   V32 = sum of lane pieces * (x^(8 dist + 32 + 63 | - 1) mod P32): degree < 96, = M x^32 mod P32
//   V16 = sum of lane pieces * (x^(8 dist + 16 + 63 | - 1) mod P16) x^16: degree < 96,
//         = (M x^16 mod P16) x^16 (the extra x^16 puts both at the same bits for one Barrett step)
// Each is H x^32 + L with H of 64 bits and L below x^32, and its register is the Barrett reduction
// of H (the CRC of the 8-byte message H) plus L: three dependent carry-less multiplies from the
// lanes to both registers, where folding to one block, then to 64 + w and w bits, then Barrett
// took five. One pair of 512-bit keys per d and per generator (8.5 KiB), so the shift costs no
// fold of its own.
struct alignas(64) LaneKeys {
  long long q[8];  // lane i: q[2 i] multiplies its low qword, q[2 i + 1] its high one
};
constexpr long kLaneKeyMin = -kChunkBytes, kLaneKeyMax = 3;
// x^n mod poly times x^shift (the product stays below degree 64: deg poly + shift <= 32).
constexpr FoldKey lane_key(std::uint64_t poly, long bytes, unsigned w, unsigned shift) {
  return {static_cast<long long>(reflect_const(xpow_mod_signed(poly, bytes * 8 + w + 63) << shift)),
          static_cast<long long>(reflect_const(xpow_mod_signed(poly, bytes * 8 + w - 1) << shift))};
}
constexpr std::array<LaneKeys, kLaneKeyMax - kLaneKeyMin + 1> lane_keys(std::uint64_t poly,
                                                                        unsigned w,
                                                                        unsigned shift) {
  std::array<LaneKeys, kLaneKeyMax - kLaneKeyMin + 1> k{};
  for (long d = kLaneKeyMin; d <= kLaneKeyMax; ++d)
    for (long i = 0; i < 4; ++i) {
      const FoldKey f = lane_key(poly, 48 - 16 * i + d, w, shift);
      k[d - kLaneKeyMin].q[2 * i] = f.lo;
      k[d - kLaneKeyMin].q[2 * i + 1] = f.hi;
    }
  return k;
}
constexpr unsigned kIcrcWidth = 32, kVcrcWidth = 16;
constexpr auto kLaneKeys32 = lane_keys(kIcrcPolyFull, kIcrcWidth, 0);
constexpr auto kLaneKeys16 = lane_keys(kVcrcPolyFull, kVcrcWidth, kIcrcWidth - kVcrcWidth);

#define WEFT_FUSED512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,sse4.1")))

// Both registers from V32 (low 128-bit lane of v) and V16 (high lane), above: the Barrett step of
// crc_of_block on H = bits x^95..x^32 of each (bytes 4..11 of the lane), then L (x^31..x^0, the
// high qword's top half) added. The same instructions for both generators, one per lane.
WEFT_FUSED512_TARGET inline CrcRegisters crcs_of_lanes(__m256i v) {
  using K32 = ReduceKeys<kIcrcPolyFull>;
  using K16 = ReduceKeys<kVcrcPolyFull>;
  static_assert(K32::kWidth == kIcrcWidth && K16::kWidth == kVcrcWidth);
  const __m256i kmu = _mm256_set_epi64x(K16::kMu, 0, K32::kMu, 0);
  const __m256i kp = _mm256_set_epi64x(0, K16::kP, 0, K32::kP);
  const __m256i h = _mm256_bsrli_epi128(v, 4);  // H in each lane's low qword
  // q = H ^ (low qword of H * mu) << 1; the register is (q P) mod x^w
  const __m256i q =
      _mm256_xor_si256(h, _mm256_slli_epi64(_mm256_clmulepi64_epi128(h, kmu, 0x10), 1));
  const __m256i r = _mm256_clmulepi64_epi128(q, kp, 0x00);
  const auto r32 = static_cast<std::uint64_t>(_mm256_extract_epi64(r, 1)) >> (63 - kIcrcWidth);
  const auto r16 = static_cast<std::uint64_t>(_mm256_extract_epi64(r, 3)) >> (63 - kVcrcWidth);
  const auto l32 = static_cast<std::uint64_t>(_mm256_extract_epi64(v, 1)) >> 32;
  const auto l16 = static_cast<std::uint64_t>(_mm256_extract_epi64(v, 3)) >> 32;
  return {~static_cast<std::uint32_t>(r32 ^ l32), static_cast<std::uint16_t>((r16 ^ l16) & 0xFFFF)};
}

WEFT_FUSED512_TARGET inline __m512i wide_key(FoldKey k) {
  return _mm512_set_epi64(k.hi, k.lo, k.hi, k.lo, k.hi, k.lo, k.hi, k.lo);
}

// The first 64-byte chunk of the stream: headers, then the payload's first bytes (masked lanes
// never fault), e XORed into its first 6 bytes.
WEFT_FUSED512_TARGET inline __mmask64 mask_below(std::size_t bytes) {
  return bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
}
WEFT_FUSED512_TARGET inline __m512i first_chunk(std::uint64_t e, const std::uint8_t* hdr,
                                                std::size_t hb, const std::uint8_t* payload,
                                                std::size_t total) {
  const auto at = [](const std::uint8_t* p, std::size_t back) {  // p - back, never dereferenced
    return reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) - back);
  };
  const __mmask64 hmask = mask_below(hb);
  const __m512i x =
      _mm512_or_si512(_mm512_maskz_loadu_epi8(hmask, hdr),
                      _mm512_maskz_loadu_epi8(mask_below(total) & ~hmask, at(payload, hb)));
  return _mm512_xor_si512(x, _mm512_maskz_set1_epi64(1, static_cast<long long>(e)));
}

// Both registers from the last chunk x, which ends `trailing` zero bytes after the stream; pad
// zero bytes follow the stream.
WEFT_FUSED512_TARGET inline CrcRegisters registers_of_last_chunk(__m512i x, std::size_t trailing,
                                                                 std::uint8_t pad_bytes) {
  // The four lanes to both registers' V32 and V16, each moved by its distance to the stream's end.
  const long d = static_cast<long>(pad_bytes) - static_cast<long>(trailing);
  const auto key = static_cast<std::size_t>(d - kLaneKeyMin);
  const __m512i k32 = _mm512_load_si512(kLaneKeys32[key].q);
  const __m512i k16 = _mm512_load_si512(kLaneKeys16[key].q);
  const __m512i t32 = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k32, 0x00),
                                       _mm512_clmulepi64_epi128(x, k32, 0x11));
  const __m512i t16 = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k16, 0x00),
                                       _mm512_clmulepi64_epi128(x, k16, 0x11));
  // [a0 a1 a2 a3], [b0 b1 b2 b3] -> [a0^a2 a1^a3 b0^b2 b1^b3] -> [a0^a1^a2^a3 b0^b1^b2^b3 ..]
  // (maskz forms: GCC 12's unmasked shuffles and extracts read an "undefined" operand and warn)
  const __m512i u = _mm512_xor_si512(_mm512_maskz_shuffle_i64x2(0xFF, t32, t16, 0x44),
                                     _mm512_maskz_shuffle_i64x2(0xFF, t32, t16, 0xEE));
  const __m512i w = _mm512_xor_si512(_mm512_maskz_shuffle_i64x2(0xFF, u, u, 0x88),
                                     _mm512_maskz_shuffle_i64x2(0xFF, u, u, 0xDD));
  return crcs_of_lanes(_mm512_maskz_extracti64x4_epi64(0xF, w, 0));
}

// Fold keys modulo the fused generator by whole 64-byte chunks.
constexpr FoldKey kFold64 = fold_key(kFusedPolyFull, 64), kFold128 = fold_key(kFusedPolyFull, 128),
                  kFold192 = fold_key(kFusedPolyFull, 192),
                  kFold256 = fold_key(kFusedPolyFull, 256);
// Four consecutive chunk accumulators merged into one, in parallel, each moved by its distance to
// the last.
WEFT_FUSED512_TARGET __attribute__((always_inline)) inline __m512i merge_four(__m512i a0,
                                                                              __m512i a1,
                                                                              __m512i a2,
                                                                              __m512i a3) {
  return fold_wide_xor(
      a0, wide_key(kFold192),
      fold_wide_xor(a1, wide_key(kFold128), fold_wide_xor(a2, wide_key(kFold64), a3)));
}

WEFT_FUSED512_TARGET CrcRegisters fused_avx512(std::uint64_t e, const std::uint8_t* hdr,
                                               std::size_t hb, const std::uint8_t* payload,
                                               std::size_t n, std::uint8_t pad_bytes) {
  const std::size_t total = hb + n;
  __m512i x = first_chunk(e, hdr, hb, payload, total);
  std::size_t trailing = total >= 64 ? 0 : 64 - total;
  if (total > 64) {
    const std::uint8_t* p = payload + (64 - hb);
    std::size_t rest = total - 64;
#define load(q) _mm512_loadu_si512(q)
    if (rest >= 192) {
      __m512i a0 = x, a1 = load(p), a2 = load(p + 64), a3 = load(p + 128);
      p += 192;
      rest -= 192;
      const __m512i k_stride = wide_key(kFold256);
      for (; rest >= 256; rest -= 256, p += 256) {
        a0 = fold_wide_xor(a0, k_stride, load(p));
        a1 = fold_wide_xor(a1, k_stride, load(p + 64));
        a2 = fold_wide_xor(a2, k_stride, load(p + 128));
        a3 = fold_wide_xor(a3, k_stride, load(p + 192));
      }
      x = merge_four(a0, a1, a2, a3);
    }
    const __m512i k_chunk = wide_key(kFold64);
    for (; rest >= 64; rest -= 64, p += 64) x = fold_wide_xor(x, k_chunk, load(p));
#undef load
    if (rest) {
      x = fold_wide_xor(x, k_chunk, _mm512_maskz_loadu_epi8(mask_below(rest), p));
      trailing = 64 - rest;
    }
  }
  return registers_of_last_chunk(x, trailing, pad_bytes);
}

// ---- The same pass with half the stream on the vector ALUs (GFNI) -------------------------------
// Measured on a Zen 5 core (bench/wire/crc_limits_bench): VPCLMULQDQ issues once per 2 cycles at
// any width, so folding (one 64x64 carry-less multiply per 8 bytes, four per zmm instruction)
// cannot pass 16 bytes per cycle: 4 KiB in ~257 cycles, ~72 ns at 3.55 GHz. GF2P8AFFINEQB (an
// 8x8 bit matrix times each byte, Intel SDM) issues twice per cycle and mostly beside the
// multiplies (4 VPCLMULQDQ and 16 GF2P8AFFINEQB: 10 cycles, against 8 for either alone). So the
// stream's last chunks (B, up to kGfniChunksMax) skip the multiplier: B's residue modulo P is a
// linear map of its bytes, evaluated as 8x8 matrix blocks.
//
// GF2P8AFFINEQB applies one matrix per 64-bit lane to all eight bytes of the lane, but the map of
// a byte depends on its position. So B is read as 64 interleaved streams: byte s of every 64-byte
// chunk (s = 0..63), each taken as if it were the chunk's last byte. Stream s's residue
// R_s = sum over chunks c of byte(c, s) x^(8 dist(c)) mod P, dist(c) the bytes from chunk c's end
// to B's end, uses one matrix for all 64 bytes of chunk c (8 bytes per chunk and residue byte,
// broadcast: 1.5 KiB for 2 KiB of B; per-word matrices took 12 KiB, which the engine's working
// set evicted); and the true sum is B = sum_s R_s x^(8 (63 - s)) (byte s of a chunk sits 63 - s
// bytes before the chunk's end). Each R_s has degree < 48, so the sum has degree < 552: it fits
// B's last two chunks with no reduction, as byte moves (VPERMB). Per 64-byte chunk: six
// GF2P8AFFINEQB (one per byte of the 48-bit residue) and three XORs.
//
// Those two chunks are then folded in after the multiplied part (A), moved over the rest of B:
// fused_avx512's end does the rest. GF(2) arithmetic throughout; the derivation is this
// comment's, not a port of any library (compare the "Chorba" idea, Sam Russell 2024, which also
// trades multiplies for XORs, with shifted copies of the data by a sparse multiple of the
// generator).
constexpr std::size_t kGfniChunksMax = 32;  // B's bound: 2 KiB, 1.5 KiB of matrices
// Below 2.5 KiB the plain pass wins: its end is a few ns shorter (bench/wire crcs_fused_path).
constexpr std::size_t kGfniMinChunks = 40;
constexpr std::size_t kResidueBytes = 6;  // deg P = 48
struct alignas(64) GfniKeys {
  std::uint64_t m[kGfniChunksMax][kResidueBytes];  // [chunk from B's end][residue byte]
};
// Residue byte o is bits x^(8 (5 - o) + 7) .. x^(8 (5 - o)), i.e. byte 58 + o of a 64-byte chunk
// in the folds' order (bit k of byte j of a 16-byte lane is x^(127 - 8 j - k)). Output bit i of
// GF2P8AFFINEQB is parity(matrix byte (7 - i) AND input byte) (Intel SDM), and input bit b of a
// byte at distance dist bytes before the end is x^(8 dist + 7 - b).
constexpr GfniKeys build_gfni_keys() {
  GfniKeys k{};
  std::uint64_t r = 1;  // x^t mod P
  for (std::size_t t = 0; t < 8 * 64 * kGfniChunksMax; ++t, r = xpow_mod_step(r)) {
    // t = 8 dist + 7 - b, with dist = 64 c (c chunks from chunk c's last byte to B's end).
    const std::size_t dist = t / 8, b = 7 - t % 8;
    if (dist % 64 != 0) continue;
    const std::size_t chunk = dist / 64;
    for (std::size_t o = 0; o < kResidueBytes; ++o)
      for (unsigned i = 0; i < 8; ++i)
        if ((r >> (8 * (5 - o) + 7 - i)) & 1)
          k.m[chunk][o] |= (std::uint64_t{1} << b) << (8 * (7 - i));
  }
  return k;
}
constexpr GfniKeys kGfniKeys = build_gfni_keys();
// Keys that fold a chunk forward by 64 c bytes, c = 0..kGfniChunksMax.
constexpr std::array<FoldKey, kGfniChunksMax + 1> build_chunk_keys() {
  // fold_key(kFusedPolyFull, 64 c) for every c in one walk over the powers of x.
  std::array<FoldKey, kGfniChunksMax + 1> k{};
  std::uint64_t r = 1;  // x^t mod P
  for (std::size_t t = 0; t <= 512 * kGfniChunksMax + 63; ++t, r = xpow_mod_step(r)) {
    if (t % 512 == 511) k[t / 512 + 1].hi = static_cast<long long>(reflect_const(r));
    if (t >= 512 + 63 && (t - 63) % 512 == 0)
      k[(t - 63) / 512].lo = static_cast<long long>(reflect_const(r));
  }
  return k;
}
constexpr auto kChunkKeys = build_chunk_keys();
static_assert(kChunkKeys[1].lo == fold_key(kFusedPolyFull, 64).lo &&
              kChunkKeys[1].hi == fold_key(kFusedPolyFull, 64).hi &&
              kChunkKeys[4].lo == fold_key(kFusedPolyFull, 256).lo &&
              kChunkKeys[4].hi == fold_key(kFusedPolyFull, 256).hi);

#define WEFT_GFNI512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,vpclmulqdq,pclmul,sse4.1,gfni")))

// Six accumulators, one per residue byte (named: an array of them was kept in memory).
struct ResidueAcc {
  __m512i r0, r1, r2, r3, r4, r5;
};
// acc.r[o] ^= M(j0, o) d0 ^ M(j1, o) d1, for chunks j0 and j1 counted from B's end.
WEFT_GFNI512_TARGET __attribute__((always_inline)) inline __m512i gfni_step(__m512i acc, __m512i d0,
                                                                            std::uint64_t m0,
                                                                            __m512i d1,
                                                                            std::uint64_t m1) {
  // The matrices as broadcast loads (each 8-byte matrix serves all eight lanes).
  const __m512i k0 = _mm512_set1_epi64(static_cast<long long>(m0));
  const __m512i k1 = _mm512_set1_epi64(static_cast<long long>(m1));
  return _mm512_ternarylogic_epi64(acc, _mm512_gf2p8affine_epi64_epi8(d0, k0, 0),
                                   _mm512_gf2p8affine_epi64_epi8(d1, k1, 0), 0x96);
}
WEFT_GFNI512_TARGET __attribute__((always_inline)) inline void gfni_pair(ResidueAcc& a, __m512i d0,
                                                                         std::size_t j0, __m512i d1,
                                                                         std::size_t j1) {
  const auto& m0 = kGfniKeys.m[j0];
  const auto& m1 = kGfniKeys.m[j1];
  a.r0 = gfni_step(a.r0, d0, m0[0], d1, m1[0]);
  a.r1 = gfni_step(a.r1, d0, m0[1], d1, m1[1]);
  a.r2 = gfni_step(a.r2, d0, m0[2], d1, m1[2]);
  a.r3 = gfni_step(a.r3, d0, m0[3], d1, m1[3]);
  a.r4 = gfni_step(a.r4, d0, m0[4], d1, m1[4]);
  a.r5 = gfni_step(a.r5, d0, m0[5], d1, m1[5]);
}
// One chunk alone (B's last, when no chunk is left to pair it with).
WEFT_GFNI512_TARGET __attribute__((always_inline)) inline void gfni_one(ResidueAcc& a, __m512i d,
                                                                        std::size_t j) {
  const auto& m = kGfniKeys.m[j];
  const auto step = [d](__m512i acc, std::uint64_t k) WEFT_GFNI512_TARGET {
    return _mm512_xor_si512(
        acc, _mm512_gf2p8affine_epi64_epi8(d, _mm512_set1_epi64(static_cast<long long>(k)), 0));
  };
  a.r0 = step(a.r0, m[0]);
  a.r1 = step(a.r1, m[1]);
  a.r2 = step(a.r2, m[2]);
  a.r3 = step(a.r3, m[3]);
  a.r4 = step(a.r4, m[4]);
  a.r5 = step(a.r5, m[5]);
}
WEFT_GFNI512_TARGET CrcRegisters fused_avx512_gfni(std::uint64_t e, const std::uint8_t* hdr,
                                                   std::size_t hb, const std::uint8_t* payload,
                                                   std::size_t n, std::uint8_t pad_bytes) {
  const std::size_t total = hb + n;
  const std::size_t chunks = (total + 63) / 64;
  if (chunks < kGfniMinChunks) return fused_avx512(e, hdr, hb, payload, n, pad_bytes);
  // Half and half measured best at 4 KiB (B = 3/8 and 5/8 of the chunks: 4-10 % slower).
  const std::size_t b_chunks = std::min(kGfniChunksMax, chunks / 2);
  const std::size_t a_chunks = chunks - b_chunks;     // >= 8: chunk 0 and three loads, and more
  const std::size_t b_bytes = total - 64 * a_chunks;  // > 64 (b_chunks - 1)
#define load(q) _mm512_loadu_si512(q)
  // A: chunks 0 .. a_chunks - 1, all whole (B holds the stream's last partial chunk).
  const std::uint8_t* p = payload + (64 - hb);
  std::size_t a_rest = a_chunks - 4;  // after chunk 0 and the three loads below
  __m512i a0 = first_chunk(e, hdr, hb, payload, total), a1 = load(p), a2 = load(p + 64),
          a3 = load(p + 128);
  p += 192;
  // B: chunk j counted from B's end (B's last chunk, j = 0, ends `trailing` bytes after it).
  const std::uint8_t* q = payload + (64 * a_chunks - hb);
  std::size_t j = b_chunks;  // chunks of B not yet read: the next is j - 1
  ResidueAcc acc{_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                 _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  const __m512i k_stride = wide_key(kFold256);
  // Both at once while each has four chunks (B's last, maybe partial, is read apart).
  for (; a_rest >= 4 && j >= 5; a_rest -= 4, p += 256, j -= 4, q += 256) {
    a0 = fold_wide_xor(a0, k_stride, load(p));
    gfni_pair(acc, load(q), j - 1, load(q + 64), j - 2);
    a1 = fold_wide_xor(a1, k_stride, load(p + 64));
    a2 = fold_wide_xor(a2, k_stride, load(p + 128));
    gfni_pair(acc, load(q + 128), j - 3, load(q + 192), j - 4);
    a3 = fold_wide_xor(a3, k_stride, load(p + 192));
  }
  for (; a_rest >= 4; a_rest -= 4, p += 256) {
    a0 = fold_wide_xor(a0, k_stride, load(p));
    a1 = fold_wide_xor(a1, k_stride, load(p + 64));
    a2 = fold_wide_xor(a2, k_stride, load(p + 128));
    a3 = fold_wide_xor(a3, k_stride, load(p + 192));
  }
  __m512i x = merge_four(a0, a1, a2, a3);
  for (const __m512i k_chunk = wide_key(kFold64); a_rest > 0; --a_rest, p += 64)
    x = fold_wide_xor(x, k_chunk, load(p));
  for (; j >= 3; j -= 2, q += 128) gfni_pair(acc, load(q), j - 1, load(q + 64), j - 2);
  // B's last chunk, loaded with zeros after the stream, with the one before it if that is left
  // (no product with an all-zero chunk: 6 of 12 GF2P8AFFINEQB per such pair were wasted).
  const std::size_t last = b_bytes - 64 * (b_chunks - 1);  // 1..64
  const __m512i b_last = _mm512_maskz_loadu_epi8(mask_below(last), q + 64 * (j - 1));
  if (j == 2)
    gfni_pair(acc, load(q), 1, b_last, 0);
  else
    gfni_one(acc, b_last, 0);
#undef load
  // acc.r<o>: byte s holds residue byte o of stream s. B = sum_s R_s x^(8 (63 - s)): residue byte
  // o of stream s (byte 58 + o of B's last chunk) moves 63 - s bytes back, to byte 59 + o + s of
  // B's last two chunks (c1, c0): byte s + o - 5 of c0 or, below 0, byte 64 + s + o - 5 of c1.
  const __m512i iota = _mm512_set_epi8(
      63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
      40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
      17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const auto place = [&](__m512i r, int o, __m512i& c1, __m512i& c0)
      __attribute__((always_inline, target("avx512f,avx512bw,avx512vbmi"))) {
    // c0 byte t = r byte t + 5 - o for t <= 58 + o; c1 byte t = r byte t - 59 - o for t >= 59 + o.
    const __mmask64 low = o == 5 ? ~__mmask64{0} : (__mmask64{1} << (59 + o)) - 1;
    c0 = _mm512_xor_si512(
        c0, _mm512_maskz_permutexvar_epi8(
                low, _mm512_add_epi8(iota, _mm512_set1_epi8(static_cast<char>(5 - o))), r));
    if (o < 5)
      c1 = _mm512_xor_si512(
          c1, _mm512_maskz_permutexvar_epi8(
                  ~low, _mm512_sub_epi8(iota, _mm512_set1_epi8(static_cast<char>(59 + o))), r));
  };
  __m512i c1 = _mm512_setzero_si512(), c0 = _mm512_setzero_si512();
  place(acc.r0, 0, c1, c0);
  place(acc.r1, 1, c1, c0);
  place(acc.r2, 2, c1, c0);
  place(acc.r3, 3, c1, c0);
  place(acc.r4, 4, c1, c0);
  place(acc.r5, 5, c1, c0);
  // A's chunk moved over B onto c1, then onto c0. The key chosen at run time is broadcast from
  // memory: _mm512_set_epi64 of it went through four 16-byte stack stores read back by one
  // 64-byte load (a failed store forward).
  static_assert(sizeof(FoldKey) == 16 && offsetof(FoldKey, lo) == 0);
  const __m512i k_over_b = _mm512_maskz_broadcast_i32x4(
      0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kChunkKeys[b_chunks - 1])));
  x = fold_wide_xor(fold_wide_xor(x, k_over_b, c1), wide_key(kFold64), c0);
  return registers_of_last_chunk(x, 64 - last, pad_bytes);
}

bool have_fused512() {
  static const bool yes = have_vpclmul() && __builtin_cpu_supports("avx512bw");
  return yes;
}
bool have_gfni512() {
  static const bool yes =
      have_fused512() && __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512vbmi");
  return yes;
}
// Whether the GFNI half pays: only where GF2P8AFFINEQB issues beside VPCLMULQDQ. On the AMD Zen 5
// core it was built on (family 1Ah) the two together reach ~29 B/cycle against 16 for folding
// alone. On an Intel Xeon with AVX-512 (Sapphire Rapids class, bench/wire/README.md) both share
// one port: VPCLMULQDQ and GF2P8AFFINEQB each ~1 per cycle, ~1.3 per cycle together, so the six
// matrix products per 64 bytes cost three times the two multiplies they replace (4 KiB: 93 ns
// with the GFNI half, 53 ns without). Zen 4 (19h) and other CPUs are unmeasured: the plain pass.
constexpr unsigned kAmdFamilyZen5 = 0x1A;
bool gfni_half_pays() {
  static const bool yes = [] {
    if (!have_gfni512()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    // "AuthenticAMD" in EBX, EDX, ECX (AMD64 APM vol. 3, CPUID Fn0000_0000)
    const bool amd = ebx == 0x68747541 && edx == 0x69746E65 && ecx == 0x444D4163;
    if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    // Family = base family (bits 11:8) + extended family (bits 27:20) when the base is 0Fh.
    const unsigned base = (eax >> 8) & 0xF;
    const unsigned family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    return family >= kAmdFamilyZen5;
  }();
  return yes;
}
#endif

// The ICRC over the masked headers, in ISA-L's convention (pass it on to crc32_gzip_refl).
std::uint32_t icrc_headers(std::span<const std::uint8_t> headers) {
  WEFT_ASSERT(headers.size() >= kLrhBytes + kBthBytes);
  const bool global = (headers[kLnhOffset] & 3) == static_cast<unsigned>(Lnh::kIbaGlobal);
  const std::size_t masked_bytes = kLrhBytes + (global ? kGrhBytes : 0) + kBthBytes;
  WEFT_ASSERT(headers.size() >= masked_bytes);

  // The whole header goes through one CRC call (a call per piece costs more than the copy).
  constexpr std::size_t kHeaderBytesMax = 128;
  std::uint8_t buf[kHeaderBytesMax];
  const bool whole = headers.size() <= kHeaderBytesMax;
  const std::size_t copied = whole ? headers.size() : masked_bytes;
  std::memcpy(buf, headers.data(), copied);
  std::size_t bth = kLrhBytes;
  if (global) {
    // IBA 7.8.1: a router replaces the LRH, so all of it is variant; the GRH's TClass,
    // FlowLabel and HopLmt may change hop by hop (8.3). RoCEv2's 8 bytes of 0xFF in place of
    // the LRH (Annex A17) come from this rule.
    std::memset(buf, 0xFF, kLrhBytes);
    std::uint8_t* grh = buf + kLrhBytes;
    grh[0] |= 0x0F;                   // TClass[7:4]
    grh[1] = grh[2] = grh[3] = 0xFF;  // TClass[3:0], FlowLabel
    grh[7] = 0xFF;                    // HopLmt
    bth += kGrhBytes;
  } else {
    buf[0] |= 0xF0;  // LRH.VL: a switch remaps it per hop (IBA 7.6)
  }
  buf[bth + kBthResv8aOffset] = 0xFF;

  const std::uint32_t crc = crc32_refl(0, buf, copied);
  return crc32_refl(crc, headers.data() + copied, headers.size() - copied);
}

constexpr std::uint8_t kZeros[3] = {0, 0, 0};

// Both registers after headers + payload + pad (ICRC in ISA-L's convention, VCRC raw).
// kTables: each CRC's own code. Otherwise the fused pass: a local packet in one stream from its
// first byte; a global one (or headers too long for the buffer) from the payload on, its headers'
// registers computed apart and injected.
CrcRegisters crc_registers(VcrcPath path, std::span<const std::uint8_t> headers,
                           std::span<const std::uint8_t> payload, std::uint8_t pad_bytes) {
  WEFT_ASSERT(pad_bytes <= 3);
  WEFT_ASSERT(headers.size() >= kLrhBytes + kBthBytes);
  const std::size_t n = payload.size();
#if defined(__x86_64__)
  const bool local = (headers[kLnhOffset] & 3) != static_cast<unsigned>(Lnh::kIbaGlobal) &&
                     headers.size() <= kLocalHeaderBytesMax;
  if (path == VcrcPath::kVpclmulGfni && local)
    return fused_avx512_gfni(inject_local(headers.data()), headers.data(), headers.size(),
                             payload.data(), n, pad_bytes);
  if (path == VcrcPath::kVpclmul && local)
    return fused_avx512(inject_local(headers.data()), headers.data(), headers.size(),
                        payload.data(), n, pad_bytes);
  const bool wide = path == VcrcPath::kVpclmul || path == VcrcPath::kVpclmulGfni;
  if (path != VcrcPath::kTables &&
      (headers[kLnhOffset] & 3) != static_cast<unsigned>(Lnh::kIbaGlobal) &&
      headers.size() <= kLocalHeaderBytesMax)
    return fused_local(wide, headers, payload, pad_bytes);
#endif
  CrcRegisters r{icrc_headers(headers), vcrc_tables(kVcrcInit, headers.data(), headers.size())};
#if defined(__x86_64__)
  if (path == VcrcPath::kVpclmulGfni)
    return fused_avx512_gfni(inject_registers(~r.icrc_gz, r.vcrc), nullptr, 0, payload.data(), n,
                             pad_bytes);
  if (path == VcrcPath::kVpclmul)
    return fused_avx512(inject_registers(~r.icrc_gz, r.vcrc), nullptr, 0, payload.data(), n,
                        pad_bytes);
  if (path != VcrcPath::kTables && n >= kFoldBlockBytes) {
    const auto w = static_cast<long long>(inject_registers(~r.icrc_gz, r.vcrc));
    return fused_stream(wide, _mm_cvtsi64_si128(w), payload.data(), n, pad_bytes);
  }
#endif
  r.icrc_gz = crc32_refl(r.icrc_gz, payload.data(), n);
  r.icrc_gz = crc32_refl(r.icrc_gz, kZeros, pad_bytes);
  r.vcrc = vcrc_tables(r.vcrc, payload.data(), n);
  r.vcrc = vcrc_tables(r.vcrc, kZeros, pad_bytes);
  return r;
}

}  // namespace

// The fastest path on this CPU.
VcrcPath packet_crcs_chosen_path() {
#if defined(__x86_64__)
  if (gfni_half_pays()) return VcrcPath::kVpclmulGfni;
  if (have_fused512()) return VcrcPath::kVpclmul;
  if (have_clmul()) return VcrcPath::kClmul;
#endif
  return VcrcPath::kTables;
}

namespace {

// A local packet's registers on the AVX-512 fused pass when the CPU has it (decided once at load
// time: have_fused512's guards, crc_registers' call and its path tests cost more per packet
// than the few instructions they choose between); crc_registers otherwise.
#if defined(__x86_64__)
const bool kFused512 = [] {
  __builtin_cpu_init();  // may run before the library's own constructors
  return have_fused512();
}();
const bool kGfni512 = [] {
  __builtin_cpu_init();
  return gfni_half_pays();
}();
#endif
inline bool fused512_local(std::span<const std::uint8_t> headers) {
#if defined(__x86_64__)
  return kFused512 && headers.size() >= kLrhBytes + kBthBytes &&
         headers.size() <= kLocalHeaderBytesMax &&
         (headers[kLnhOffset] & 3) != static_cast<unsigned>(Lnh::kIbaGlobal);
#else
  (void)headers;
  return false;
#endif
}
inline CrcRegisters crc_registers_fast(std::span<const std::uint8_t> headers,
                                       std::span<const std::uint8_t> payload,
                                       std::uint8_t pad_bytes) {
#if defined(__x86_64__)
  if (fused512_local(headers) && pad_bytes <= 3) {
    if (kGfni512)  // which itself hands packets under kGfniMinChunks to fused_avx512
      return fused_avx512_gfni(inject_local(headers.data()), headers.data(), headers.size(),
                               payload.data(), payload.size(), pad_bytes);
    return fused_avx512(inject_local(headers.data()), headers.data(), headers.size(),
                        payload.data(), payload.size(), pad_bytes);
  }
#endif
  return crc_registers(packet_crcs_chosen_path(), headers, payload, pad_bytes);
}

// The VCRC register over the ICRC's four bytes (low byte first), finished: one slicing-by-4
// step inline (the table code's call and loop cost more than the step on every packet).
inline std::uint16_t vcrc_over_icrc(std::uint16_t vcrc_reg, std::uint32_t icrc_value) {
  static_assert(kIcrcBytes == 4);
  const auto& t = kVcrcTables;
  const unsigned x = vcrc_reg ^ (icrc_value & 0xFFFF);
  const unsigned c =
      t[3][x & 0xFF] ^ t[2][x >> 8] ^ t[1][(icrc_value >> 16) & 0xFF] ^ t[0][icrc_value >> 24];
  return vcrc_finish(static_cast<std::uint16_t>(c));
}

}  // namespace

std::uint32_t icrc(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                   std::uint8_t pad_bytes) {
  WEFT_ASSERT(pad_bytes <= 3);
  std::uint32_t crc = icrc_headers(headers);
  crc = crc32_refl(crc, payload.data(), payload.size());
  return crc32_refl(crc, kZeros, pad_bytes);
}

std::uint32_t icrc(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload) {
  return icrc(headers, payload, 0);
}

std::uint16_t vcrc_update(std::uint16_t crc, std::span<const std::uint8_t> bytes) {
#if defined(__x86_64__)
  if (bytes.size() >= kWideMinBytes && have_vpclmul())
    return vcrc_vpclmul(crc, bytes.data(), bytes.size());
  if (bytes.size() >= kFoldMinBytes && have_clmul())
    return vcrc_clmul(crc, bytes.data(), bytes.size());
#endif
  return vcrc_tables(crc, bytes.data(), bytes.size());
}

bool vcrc_path_available(VcrcPath path) {
  switch (path) {
    case VcrcPath::kTables:
      return true;
#if defined(__x86_64__)
    case VcrcPath::kClmul:
      return have_clmul();
    case VcrcPath::kVpclmul:
      return have_fused512();  // AVX-512BW too, for the fused pass (every such CPU has it)
    case VcrcPath::kVpclmulGfni:
      return have_gfni512();
#else
    default:
      return false;
#endif
  }
  return false;
}

std::uint16_t vcrc_update_path(VcrcPath path, std::uint16_t crc,
                               std::span<const std::uint8_t> bytes) {
  WEFT_ASSERT(vcrc_path_available(path));
#if defined(__x86_64__)
  if ((path == VcrcPath::kVpclmul || path == VcrcPath::kVpclmulGfni) &&
      bytes.size() >= kWideStrideBytes)
    return vcrc_vpclmul(crc, bytes.data(), bytes.size());
  if (path != VcrcPath::kTables && bytes.size() >= kFoldStrideBytes)
    return vcrc_clmul(crc, bytes.data(), bytes.size());
#endif
  return vcrc_tables(crc, bytes.data(), bytes.size());
}

// For tests and benchmarks: the table-driven path alone, whatever the length.
std::uint16_t vcrc_update_tables(std::uint16_t crc, std::span<const std::uint8_t> bytes) {
  return vcrc_tables(crc, bytes.data(), bytes.size());
}

std::uint16_t vcrc(std::span<const std::uint8_t> bytes_through_icrc) {
  return vcrc_finish(vcrc_update(kVcrcInit, bytes_through_icrc));
}

PacketCrcs packet_crcs_path(VcrcPath path, std::span<const std::uint8_t> headers,
                            std::span<const std::uint8_t> payload, std::uint8_t pad_bytes) {
  WEFT_ASSERT(vcrc_path_available(path));
  const CrcRegisters r = crc_registers(path, headers, payload, pad_bytes);
  return {r.icrc_gz, vcrc_over_icrc(r.vcrc, r.icrc_gz)};
}

PacketCrcs packet_crcs(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                       std::uint8_t pad_bytes) {
  const CrcRegisters r = crc_registers_fast(headers, payload, pad_bytes);
  return {r.icrc_gz, vcrc_over_icrc(r.vcrc, r.icrc_gz)};
}

std::optional<WireError> check_packet_crcs(std::span<const std::uint8_t> headers,
                                           std::span<const std::uint8_t> payload,
                                           std::uint8_t pad_bytes, std::uint32_t icrc_received,
                                           std::uint16_t vcrc_received) {
  const CrcRegisters r = crc_registers_fast(headers, payload, pad_bytes);
  if (vcrc_over_icrc(r.vcrc, icrc_received) != vcrc_received) return WireError::kBadVcrc;
  if (r.icrc_gz != icrc_received) return WireError::kBadIcrc;
  return std::nullopt;
}

// Both CRCs are reflected, so the register's low byte is the first one sent (as Ethernet's FCS;
// rxe and scapy's RoCE layer store the ICRC this way).
void put_icrc(std::span<std::uint8_t, kIcrcBytes> out, std::uint32_t v) {
  for (std::size_t i = 0; i < kIcrcBytes; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get_icrc(std::span<const std::uint8_t, kIcrcBytes> in) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < kIcrcBytes; ++i) v |= std::uint32_t{in[i]} << (8 * i);
  return v;
}
void put_vcrc(std::span<std::uint8_t, kVcrcBytes> out, std::uint16_t v) {
  out[0] = static_cast<std::uint8_t>(v);
  out[1] = static_cast<std::uint8_t>(v >> 8);
}
std::uint16_t get_vcrc(std::span<const std::uint8_t, kVcrcBytes> in) {
  return static_cast<std::uint16_t>(in[0] | (unsigned{in[1]} << 8));
}

namespace detail {

#if defined(__x86_64__)
namespace {
__attribute__((target("avx"))) void clear_upper_vectors() {
  _mm256_zeroupper();
}
// Decided once at load time: vzeroupper is an invalid opcode without AVX (and ISA-L then runs
// no code that dirties the registers).
const bool kHaveAvx = [] {
  __builtin_cpu_init();  // may run before the library's own constructors
  return __builtin_cpu_supports("avx");
}();
}  // namespace
#endif

std::uint32_t crc32_refl(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  // ISA-L takes a 64-bit length; an empty span may have a null data pointer.
  if (n == 0) return crc;
  crc = crc32_gzip_refl(crc, p, n);
  after_isal_kernel();
  return crc;
}

void after_isal_kernel() {
#if defined(__x86_64__)
  if (kHaveAvx) clear_upper_vectors();  // see crc_isal.hpp
#endif
}

}  // namespace detail

}  // namespace weft::wire
