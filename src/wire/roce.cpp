// wire/roce.cpp — RoCEv2 framing and its ICRC (IBA Annex A17). Thread-safety: pure functions.
#include "src/wire/roce.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "src/base/assert.hpp"
#include "src/wire/bytes.hpp"
#include "src/wire/crc_isal.hpp"

namespace weft::wire {
namespace {

using detail::get16;
using detail::get8;
using detail::put16;
using detail::put32;
using detail::put8;

constexpr std::uint8_t kIpProtoUdp = 17;

using detail::crc32_refl;

std::uint16_t ipv4_checksum(std::span<const std::uint8_t> hdr) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < hdr.size(); i += 2) sum += get16(hdr, i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

#if defined(__x86_64__)
// ---- The short-packet ICRC (icrc_roce_v2_frame4) ----
// The ICRC is CRC-32 (IEEE 802.3 generator, reflected, register starting all ones, result
// complemented: IBA 7.8.1) over 8 bytes of ones (the LRH's place), the IP header, UDP header and
// BTH with their variant fields set to ones, the rest of the datagram. A register of all ones
// XORed into the first four bytes of ones makes them zeros, and zeros leave a zero register
// alone: so the ICRC is the complement of the zero-register CRC of
//   kZ zero bytes | 4 bytes of ones | the masked datagram without its ICRC,
// with kZ (0, 4, 8 or 12: datagrams are whole words) making the stream whole 16-byte blocks.
// The 4 bytes of ones are the frame's bytes 10..13 (set to ones), so every block but the first
// is a plain load from the frame, ORed with ones where a field is masked.
//
// Representation (as in Gopal et al., "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", Intel 2009): a 16-byte block stands for a polynomial whose first bit on the wire
// (bit 0 of byte 0) is its highest term, a 64-bit lane v for sum v_i x^(63-i), so a block is
// lane0 x^64 + lane1. A carry-less product of two such lanes reads as their product times x,
// which each constant absorbs (x^(e-1) in place of x^e).
constexpr std::uint64_t kCrc32Poly = 0x104C11DB7;  // x^32 + ... + 1, IBA 7.8.1
constexpr std::uint64_t xpow_mod_p(unsigned n) {   // x^n mod P, bit e: the term x^e
  std::uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if ((r >> 32) & 1) r ^= kCrc32Poly;
  }
  return r;
}
constexpr std::uint64_t x64_div_p() {  // floor(x^64 / P): Barrett's constant (degree 32)
  using u128 = unsigned __int128;
  u128 r = u128{1} << 64;
  std::uint64_t q = 0;
  for (int i = 32; i >= 0; --i)
    if ((r >> (i + 32)) & 1) {
      q |= std::uint64_t{1} << i;
      r ^= u128{kCrc32Poly} << i;
    }
  return q;
}
constexpr long long lane(std::uint64_t c) {  // x^e -> bit 63 - e
  std::uint64_t v = 0;
  for (unsigned e = 0; e < 64; ++e)
    if ((c >> e) & 1) v |= std::uint64_t{1} << (63 - e);
  return static_cast<long long>(v);
}
// block * x^128 = lane0 x^192 + lane1 x^128; the products' extra x is in the exponents.
constexpr long long kFold0 = lane(xpow_mod_p(191)), kFold1 = lane(xpow_mod_p(127));
// The same for a block 32, 48 and 64 bytes ahead of the end (x^256, x^384, x^512): four lanes.
constexpr long long kFold32Lo = lane(xpow_mod_p(319)), kFold32Hi = lane(xpow_mod_p(255));
constexpr long long kFold48Lo = lane(xpow_mod_p(447)), kFold48Hi = lane(xpow_mod_p(383));
constexpr long long kFold64Lo = lane(xpow_mod_p(575)), kFold64Hi = lane(xpow_mod_p(511));
constexpr std::size_t kLanes = 4;  // blocks folded side by side, 64 bytes apart
// The last block B (lane0 x^64 + lane1) times x^32 (the CRC register is stream * x^32 mod P):
// lane0 x^96 -> lane0 (x^96 mod P), then the 32 bits still above x^64 -> (x^64 mod P).
constexpr long long kReduce96 = lane(xpow_mod_p(95)), kReduce64 = lane(xpow_mod_p(63));
constexpr long long kBarrettMu = lane(x64_div_p()), kPolyLane = lane(kCrc32Poly);

// Where the stream has a byte set to ones: the 4 bytes standing for the LRH, IPv4 TOS (1),
// TTL (8) and header checksum (10, 11), UDP checksum (6, 7), BTH resv8a (4) (Annex A17).
constexpr std::size_t kOnesAt[] = {0,      1,      2,      3,      4 + 1, 4 + 8,
                                   4 + 10, 4 + 11, 24 + 6, 24 + 7, 32 + 4};
constexpr std::size_t kMaskedBlocks = 4;  // kZ + 36 < 64 for every kZ < 16
using StreamMasks = std::array<std::array<std::uint8_t, 16>, kMaskedBlocks>;
constexpr StreamMasks stream_masks(std::size_t z) {
  StreamMasks m{};
  for (std::size_t at : kOnesAt) m[(z + at) / 16][(z + at) % 16] = 0xFF;
  return m;
}
// Per kZ (0..15): the masks, and the shuffle that moves frame[10, 26) up by kZ bytes (index
// 0x80: a zero byte) for block 0.
struct alignas(16) StreamHead {
  StreamMasks masks;
  std::array<std::uint8_t, 16> shift;
};
constexpr std::array<StreamHead, 16> stream_heads() {
  std::array<StreamHead, 16> h{};
  for (std::size_t z = 0; z < 16; ++z) {
    h[z].masks = stream_masks(z);
    for (std::size_t i = 0; i < 16; ++i)
      h[z].shift[i] = i < z ? 0x80 : static_cast<std::uint8_t>(i - z);
  }
  return h;
}
alignas(64) constexpr std::array<StreamHead, 16> kStreamHeads = stream_heads();

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold16(__m128i acc, __m128i k,
                                                               __m128i next) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00), _mm_clmulepi64_si128(acc, k, 0x11)), next);
}

// The CRC-32 in ISA-L's convention (crc32_gzip_refl(0, ...): the complement of the register) of
// the first `blocks` 16-byte blocks (at least 3, and 4 when z >= 12) of the stream
//   z zero bytes | 4 bytes of ones | the masked datagram from the IP header on,
// which is the ICRC when the blocks end where the datagram's ICRC starts, and otherwise what
// ISA-L continues from the stream's next byte, frame + 10 - z + 16 * blocks.
__attribute__((target("pclmul,sse4.1"))) std::uint32_t icrc_stream_clmul(const std::uint8_t* frame,
                                                                         std::size_t z,
                                                                         std::size_t blocks) {
  const StreamHead& head = kStreamHeads[z];
  const auto load = [](const void* p) __attribute__((target("sse4.1"))) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
  };
  const std::uint8_t* base = frame + 10 - z;  // stream byte i is base[i] for i >= z
  const __m128i k = _mm_set_epi64x(kFold1, kFold0);
  // Block 0 from frame + 10 shifted up by z (base itself may lie before the frame).
  __m128i acc = _mm_or_si128(_mm_shuffle_epi8(load(frame + 10), load(head.shift.data())),
                             load(head.masks[0].data()));
  const __m128i b1 = _mm_or_si128(load(base + 16), load(head.masks[1].data()));
  const __m128i b2 = _mm_or_si128(load(base + 32), load(head.masks[2].data()));
  std::size_t j = kMaskedBlocks;
  if (blocks >= 2 * kLanes) {
    // Four lanes 64 bytes apart, each folded by x^512, then joined: the chain of dependent
    // multiplies a quarter as long as one block after another (a long datagram's head, below).
    const __m128i k64 = _mm_set_epi64x(kFold64Hi, kFold64Lo);
    __m128i a0 = acc, a1 = b1, a2 = b2;
    __m128i a3 = _mm_or_si128(load(base + 48), load(head.masks[3].data()));
    for (; j + kLanes <= blocks; j += kLanes) {
      a0 = fold16(a0, k64, load(base + 16 * j));
      a1 = fold16(a1, k64, load(base + 16 * (j + 1)));
      a2 = fold16(a2, k64, load(base + 16 * (j + 2)));
      a3 = fold16(a3, k64, load(base + 16 * (j + 3)));
    }
    acc = fold16(a0, _mm_set_epi64x(kFold48Hi, kFold48Lo),
                 fold16(a1, _mm_set_epi64x(kFold32Hi, kFold32Lo), fold16(a2, k, a3)));
  } else {
    acc = fold16(fold16(acc, k, b1), k, b2);
    // Block 3 has a masked byte only when z >= 12, and then it is in the stream (z + ip_total
    // bytes, ip_total >= 44: more than 48).
    if (blocks > 3) acc = fold16(acc, k, _mm_or_si128(load(base + 48), load(head.masks[3].data())));
  }
  for (; j < blocks; ++j) acc = fold16(acc, k, load(base + 16 * j));
  // acc * x^32 mod P. First to below x^96: lane0 * (x^96 mod P) + lane1 * x^32 (lane1 moved
  // down 4 bytes), then the part still at x^64..x^95 (lane0's upper half) * (x^64 mod P): the
  // rest U, below x^64, is in lane 1.
  const __m128i t = _mm_xor_si128(_mm_clmulepi64_si128(acc, _mm_cvtsi64_si128(kReduce96), 0x00),
                                  _mm_slli_si128(_mm_srli_si128(acc, 8), 4));
  const __m128i u = _mm_xor_si128(_mm_clmulepi64_si128(t, _mm_cvtsi64_si128(kReduce64), 0x00), t);
  const auto uv = static_cast<std::uint64_t>(_mm_extract_epi64(u, 1));
  // Barrett: q = floor(U_hi * mu / x^32) with U_hi the upper 32 terms of U (bits 0..31 of the
  // lane); the register is U_lo + (q P mod x^32). The product leaves q at bits 31..62; it goes
  // in one bit up from its lane's bottom so that (q P) mod x^32 lands in lane 1's low word.
  const __m128i qm =
      _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<long long>(uv & 0xFFFFFFFF)),
                           _mm_cvtsi64_si128(kBarrettMu), 0x00);
  const std::uint64_t q =
      (static_cast<std::uint64_t>(_mm_cvtsi128_si64(qm)) >> 30) & 0x1'FFFF'FFFEULL;
  const __m128i qp = _mm_clmulepi64_si128(_mm_cvtsi64_si128(static_cast<long long>(q)),
                                          _mm_cvtsi64_si128(kPolyLane), 0x00);
  const auto reg =
      static_cast<std::uint32_t>(uv >> 32) ^ static_cast<std::uint32_t>(_mm_extract_epi64(qp, 1));
  return ~reg;
}

bool detect_clmul() {
  __builtin_cpu_init();  // may run before the library's own constructors
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
// Decided once at load time (a function-local static would test its guard on every packet).
const bool kHaveClmul = detect_clmul();
#endif

}  // namespace

std::uint32_t icrc_roce_v2_frame4(const std::uint8_t* frame, std::size_t ip_total) {
  WEFT_ASSERT(ip_total >= kIpv4HeaderBytes + kUdpHeaderBytes + kBthBytes + kIcrcBytes);
#if defined(__x86_64__)
  if (kHaveClmul && ip_total <= kIcrcShortMaxBytes) {
    // Whole words (RoCE's are): kZ leading zeros make the stream whole blocks.
    if (ip_total % 4 == 0)
      return icrc_stream_clmul(frame, (16 - ip_total % 16) % 16, (ip_total + 15) / 16);
  } else if (kHaveClmul) {
    // A long datagram: the head folded here up to a 64-byte boundary of the frame's memory, the
    // rest by ISA-L from there, so that each of its 64-byte loads reads one cache line. From an
    // mbuf (the frame at a 64-byte boundary, the datagram's unmasked bytes from frame + 54 on)
    // every one of them otherwise straddled two lines.
    const auto at = reinterpret_cast<std::uintptr_t>(frame) + 10;
    const std::size_t z = at % 16;  // base = frame + 10 - z: 16-byte aligned
    std::size_t blocks = kMaskedBlocks + (4 - (at / 16 + kMaskedBlocks) % 4) % 4;
    const std::uint8_t* rest = frame + 10 - z + 16 * blocks;
    const std::uint8_t* end = frame + kEthHeaderBytes + ip_total - kIcrcBytes;
    // And ISA-L's part under 64 bytes past a whole number of its 256-byte steps: what it folds
    // after its main loop it folds one 16-byte block after another (246 bytes of a 4 KiB WRITE
    // MIDDLE from an mbuf: 15 dependent multiplies); the head's lanes take the rest.
    constexpr std::size_t kIsalStepBytes = 256, kLineBytes = 64;
    while (static_cast<std::size_t>(end - rest) % kIsalStepBytes >= kLineBytes &&
           static_cast<std::size_t>(end - rest) > kIsalStepBytes + kLineBytes) {
      rest += kLineBytes;
      blocks += kLineBytes / 16;
    }
    return crc32_refl(icrc_stream_clmul(frame, z, blocks), rest,
                      static_cast<std::size_t>(end - rest));
  }
#endif
  return icrc_roce_v2({frame + kEthHeaderBytes, ip_total - kIcrcBytes});
}

std::uint32_t icrc_roce_v2_frame4(const std::uint8_t* frame, std::size_t ip_head,
                                  std::span<const std::uint8_t> payload, std::uint8_t pad_bytes) {
  WEFT_ASSERT(ip_head >= kIpv4HeaderBytes + kUdpHeaderBytes + kBthBytes);
  WEFT_ASSERT(pad_bytes <= 3);
#if defined(__x86_64__)
  if (kHaveClmul && ip_head % 4 == 0) {
    // The stream (kZ zeros, 4 ones, the headers) ends with the headers: whole blocks.
    const std::size_t z = (16 - (4 + ip_head) % 16) % 16;
    std::uint32_t crc = icrc_stream_clmul(frame, z, (z + 4 + ip_head) / 16);
    crc = crc32_refl(crc, payload.data(), payload.size());
    static constexpr std::uint8_t kZeros[3] = {0, 0, 0};
    return crc32_refl(crc, kZeros, pad_bytes);
  }
#endif
  return icrc_roce_v2({frame + kEthHeaderBytes, ip_head}, payload, pad_bytes);
}

std::uint32_t icrc_roce_v2(std::span<const std::uint8_t> ip, std::span<const std::uint8_t> payload,
                           std::uint8_t pad_bytes) {
  WEFT_ASSERT(pad_bytes <= 3);
  WEFT_ASSERT(!ip.empty());
  const bool v6 = (ip[0] >> 4) == 6;
  const std::size_t ip_bytes = v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  const std::size_t masked = ip_bytes + kUdpHeaderBytes + kBthBytes;
  WEFT_ASSERT(ip.size() >= masked);
  alignas(16) std::uint8_t buf[kLrhBytes + kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes];
  std::uint32_t crc;
#if defined(__x86_64__)
  if (!v6) {
    // IPv4: the 48 masked bytes (8 ones, IP, UDP, BTH) built in registers and stored as the
    // three 16-byte blocks ISA-L's short path then loads (crc32_gzip_refl's loop under 256
    // bytes: one 16-byte load per block). Built byte by byte (memset, memcpy, single-byte masks)
    // no load matched a store, so none could be forwarded: each waited for the store buffer to
    // drain -- behind it a memif copy's 4 KiB of stores. That one load held 40 % of the ISA-L
    // kernel's samples of a 4 KiB stream (perf annotate, both sides; dpdk17, README.md).
    static_assert(kLrhBytes + kIpv4HeaderBytes + kUdpHeaderBytes + kBthBytes == 48);
    const auto* q = ip.data();
    const __m128i ones = _mm_set1_epi64x(-1);
    // Masked with ones: TOS (IP byte 1), TTL (8), header checksum (10, 11), UDP checksum (26, 27),
    // BTH resv8a (32); at buf offsets 9, 16, 18, 19, 34, 35 and 40.
    const __m128i b0 =
        _mm_or_si128(_mm_unpacklo_epi64(ones, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                     _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0));
    const __m128i b1 =
        _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8)),
                     _mm_setr_epi8(-1, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m128i b2 =
        _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 24)),
                     _mm_setr_epi8(0, 0, -1, -1, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0));
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), b0);
    _mm_store_si128(reinterpret_cast<__m128i*>(buf + 16), b1);
    _mm_store_si128(reinterpret_cast<__m128i*>(buf + 32), b2);
    crc = crc32_refl(0, buf, 48);
  } else
#endif
  {
    std::memset(buf, 0xFF, kLrhBytes);
    std::uint8_t* p = buf + kLrhBytes;
    std::memcpy(p, ip.data(), masked);
    if (v6) {
      p[0] |= 0x0F;               // traffic class [7:4]
      p[1] = p[2] = p[3] = 0xFF;  // traffic class [3:0], flow label
      p[7] = 0xFF;                // hop limit
    } else {
      p[1] = 0xFF;           // TOS (DSCP, ECN: a switch marks CE here)
      p[8] = 0xFF;           // TTL
      p[10] = p[11] = 0xFF;  // header checksum
    }
    std::uint8_t* udp = p + ip_bytes;
    udp[6] = udp[7] = 0xFF;           // UDP checksum
    udp[kUdpHeaderBytes + 4] = 0xFF;  // BTH resv8a
    crc = crc32_refl(0, buf, kLrhBytes + masked);
  }
  crc = crc32_refl(crc, ip.data() + masked, ip.size() - masked);
  crc = crc32_refl(crc, payload.data(), payload.size());
  static constexpr std::uint8_t kZeros[3] = {0, 0, 0};
  return crc32_refl(crc, kZeros, pad_bytes);
}

std::uint32_t icrc_roce_v2(std::span<const std::uint8_t> ip_through_pad) {
  return icrc_roce_v2(ip_through_pad, {}, 0);
}

std::size_t roce_v2_frame_bytes(const Headers& h, std::size_t payload_bytes) {
  return kEthHeaderBytes + kIpv4HeaderBytes + kUdpHeaderBytes + transport_header_bytes(h) +
         payload_bytes + (4 - payload_bytes % 4) % 4 + kIcrcBytes;
}

std::size_t encode_roce_v2(const RoceV2Addr& a, const Headers& h_in,
                           std::span<const std::uint8_t> payload, std::span<std::uint8_t> out) {
  const std::size_t total = roce_v2_frame_bytes(h_in, payload.size());
  WEFT_ASSERT(out.size() >= total);
  Headers h = h_in;
  h.bth.pad_cnt = static_cast<std::uint8_t>((4 - payload.size() % 4) % 4);

  std::memcpy(out.data(), a.dst_mac.data(), 6);
  std::memcpy(out.data() + 6, a.src_mac.data(), 6);
  put16(out, 12, kEtherTypeIpv4);

  const std::size_t ip = kEthHeaderBytes;
  const std::size_t ip_len = total - kEthHeaderBytes;
  put8(out, ip + 0, 0x45);
  put8(out, ip + 1, (a.dscp << 2) | (a.ecn & 3u));
  put16(out, ip + 2, static_cast<unsigned>(ip_len));
  put16(out, ip + 4, 0);       // identification: unused with DF set
  put16(out, ip + 6, 0x4000);  // DF: RoCEv2 packets are never fragmented (Annex A17)
  put8(out, ip + 8, a.ttl);
  put8(out, ip + 9, kIpProtoUdp);
  put16(out, ip + 10, 0);
  put32(out, ip + 12, a.src_ip);
  put32(out, ip + 16, a.dst_ip);
  put16(out, ip + 10, ipv4_checksum(out.subspan(ip, kIpv4HeaderBytes)));

  const std::size_t udp = ip + kIpv4HeaderBytes;
  put16(out, udp + 0, a.src_port);
  put16(out, udp + 2, kRoceV2UdpPort);
  put16(out, udp + 4, static_cast<unsigned>(ip_len - kIpv4HeaderBytes));
  put16(out, udp + 6, 0);

  const std::size_t bth = udp + kUdpHeaderBytes;
  const std::size_t tb = encode_transport_headers(h, out.subspan(bth));
  std::size_t o = bth + tb;
  if (!payload.empty()) std::memcpy(out.data() + o, payload.data(), payload.size());
  o += payload.size();
  std::fill_n(out.data() + o, h.bth.pad_cnt, std::uint8_t{0});
  const std::uint32_t ic = icrc_roce_v2(out.subspan(ip, bth + tb - ip), payload, h.bth.pad_cnt);
  o += h.bth.pad_cnt;
  put_icrc(out.subspan(o).first<kIcrcBytes>(), ic);
  return o + kIcrcBytes;
}

Result<RoceV2Packet, WireError> parse_roce_v2(std::span<const std::uint8_t> f, bool check_icrc) {
  RoceV2Packet r;
  if (f.size() < kEthHeaderBytes) return WireError::kTruncated;
  const std::uint16_t ethertype = get16(f, 12);
  std::size_t o = kEthHeaderBytes;
  std::size_t ip_total = 0;
  if (ethertype == kEtherTypeIpv4) {
    if (f.size() < o + kIpv4HeaderBytes) return WireError::kTruncated;
    // Options would move the UDP header; RoCEv2 senders never use them.
    if (get8(f, o) != 0x45 || get8(f, o + 9) != kIpProtoUdp) return WireError::kBadLnh;
    ip_total = get16(f, o + 2);
    r.ipv6 = false;
    r.ip_offset = o;
    o += kIpv4HeaderBytes;
  } else if (ethertype == kEtherTypeIpv6) {
    if (f.size() < o + kIpv6HeaderBytes) return WireError::kTruncated;
    if ((get8(f, o) >> 4) != 6 || get8(f, o + 6) != kIpProtoUdp) return WireError::kBadLnh;
    ip_total = std::size_t{get16(f, o + 4)} + kIpv6HeaderBytes;
    r.ipv6 = true;
    r.ip_offset = o;
    o += kIpv6HeaderBytes;
  } else {
    return WireError::kBadLnh;
  }
  if (f.size() < o + kUdpHeaderBytes) return WireError::kTruncated;
  if (get16(f, o + 2) != kRoceV2UdpPort) return WireError::kBadLnh;
  const std::size_t udp_len = get16(f, o + 4);
  // Ethernet may pad short frames, so the IP length, not the frame, says where the packet ends.
  if (f.size() < r.ip_offset + ip_total) return WireError::kTruncated;
  if (udp_len != ip_total - (o - r.ip_offset)) return WireError::kBadLength;
  const std::size_t end = r.ip_offset + ip_total;
  o += kUdpHeaderBytes;
  r.bth_offset = o;
  if (end < o) return WireError::kBadLength;
  auto tb = parse_transport_headers(f.subspan(o, end - o), r.h);
  if (!tb) return tb.error();
  o += *tb;
  if (end < o + kIcrcBytes) return WireError::kTruncated;
  const std::size_t after = end - kIcrcBytes - o;
  const OpcodeInfo& info = opcode_info(r.h.bth.opcode);
  if (r.h.bth.pad_cnt > after) return WireError::kBadLength;
  if (!(info.mask & kHasPayload) && after != 0) return WireError::kBadLength;
  r.payload = f.subspan(o, after - r.h.bth.pad_cnt);
  r.icrc = get_icrc(f.subspan(end - kIcrcBytes).first<kIcrcBytes>());
  if (check_icrc &&
      icrc_roce_v2(f.subspan(r.ip_offset, o - r.ip_offset), f.subspan(o, after), 0) != r.icrc)
    return WireError::kBadIcrc;
  return r;
}

}  // namespace weft::wire
