// wire/packet.cpp — encode and parse of LRH [GRH] BTH ext-headers payload pad ICRC VCRC.
// Layouts: LRH IBA 7.7, GRH 8.3, BTH 9.2, extension headers 9.3 (see FORMAT.md). Every field is
// written and read with explicit big-endian shifts; parsing never reads outside its span.
// Thread-safety: pure functions.
#include <algorithm>
#include <cstring>
#include <optional>

#include "src/base/assert.hpp"
#include "src/wire/bytes.hpp"
#include "src/wire/packet.hpp"

namespace weft::wire {
namespace {

using detail::get16;
using detail::get24;
using detail::get32;
using detail::get64;
using detail::get8;
using detail::put16;
using detail::put24;
using detail::put32;
using detail::put64;
using detail::put8;

constexpr std::uint8_t kGrhIpVer = 6;           // IBA 8.3.1
constexpr std::uint8_t kGrhNextIba = 0x1B;      // IBA 8.3.1, Table 28: IBA transport
constexpr std::size_t kPktLenWordsMax = 0x7FF;  // 11-bit field (7.7.8)
constexpr std::uint32_t k24Bits = 0xFFFFFF;
constexpr std::uint32_t k20Bits = 0xFFFFF;
static_assert(kLrhBytes == 8 && kGrhBytes == 40 && kBthBytes == 12);
static_assert(kRethBytes == 16 && kAethBytes == 4 && kAtomicEthBytes == 28);
static_assert(kAtomicAckEthBytes == 8 && kDethBytes == 8 && kImmBytes == 4 && kIethBytes == 4);

std::size_t routing_bytes(bool has_grh) {
  return kLrhBytes + (has_grh ? kGrhBytes : 0);
}

// Unchecked big-endian loads and stores for the hot paths: each caller checks its whole span
// once up front instead of per field (bytes.hpp's accessors assert on every field).
inline std::uint16_t ld16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}
inline std::uint32_t ld32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline std::uint32_t ld24(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 16) | (std::uint32_t{p[1]} << 8) | p[2];
}
inline std::uint64_t ld64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}
inline void st16(std::uint8_t* p, unsigned v) {
  const auto w = __builtin_bswap16(static_cast<std::uint16_t>(v));
  std::memcpy(p, &w, 2);
}
inline void st32(std::uint8_t* p, std::uint32_t v) {
  const auto w = __builtin_bswap32(v);
  std::memcpy(p, &w, 4);
}
inline void st64(std::uint8_t* p, std::uint64_t v) {
  const auto w = __builtin_bswap64(v);
  std::memcpy(p, &w, 8);
}

void encode_lrh(const Lrh& l, bool has_grh, std::span<std::uint8_t> b) {
  WEFT_ASSERT(b.size() >= kLrhBytes);
  std::uint8_t* o = b.data();
  o[0] = static_cast<std::uint8_t>(((l.vl & 0xFu) << 4) | (l.lver & 0xFu));
  // LNH follows has_grh so the header can never claim a GRH that is not there.
  const auto lnh = has_grh ? Lnh::kIbaGlobal : Lnh::kIbaLocal;
  o[1] = static_cast<std::uint8_t>(((l.sl & 0xFu) << 4) | static_cast<unsigned>(lnh));
  st16(o + 2, l.dlid);
  st16(o + 4, l.pkt_len & kPktLenWordsMax);
  st16(o + 6, l.slid);
}

void encode_grh(const Grh& g, std::span<std::uint8_t> b) {
  put32(b, 0,
        (std::uint32_t{g.ipver & 0xFu} << 28) | (std::uint32_t{g.tclass} << 20) |
            (g.flow_label & k20Bits));
  put16(b, 4, g.pay_len);
  put8(b, 6, g.next_hdr);
  put8(b, 7, g.hop_limit);
  std::memcpy(b.data() + 8, g.sgid, 16);
  std::memcpy(b.data() + 24, g.dgid, 16);
}

void encode_bth(const Bth& t, std::span<std::uint8_t> b) {
  WEFT_ASSERT(b.size() >= kBthBytes);
  std::uint8_t* o = b.data();
  o[0] = static_cast<std::uint8_t>(t.opcode);
  o[1] = static_cast<std::uint8_t>((t.se ? 0x80u : 0u) | (t.mig_req ? 0x40u : 0u) |
                                   ((t.pad_cnt & 3u) << 4) | (t.tver & 0xFu));
  st16(o + 2, t.pkey);
  // Byte 4 (FECN, BECN, resv6a) and the 24-bit QPN share one 32-bit store; so do byte 8
  // (AckReq, resv7) and the 24-bit PSN.
  st32(o + 4,
       ((t.fecn ? 0x80u : 0u) << 24) | ((t.becn ? 0x40u : 0u) << 24) | (t.dest_qp & k24Bits));
  st32(o + 8, ((t.ack_req ? 0x80u : 0u) << 24) | (t.psn & k24Bits));
}

// Extension headers in IBA 9.3 order; `b` starts right after the BTH.
void encode_ext(const Headers& h, std::uint16_t mask, std::span<std::uint8_t> b) {
  WEFT_ASSERT(b.size() >= opcode_info(h.bth.opcode).ext_bytes);
  std::uint8_t* o = b.data();
  if (mask & kHasDeth) {
    st32(o, h.deth.qkey);
    st32(o + 4, h.deth.src_qp & k24Bits);  // the top byte is reserved (9.3.2)
    o += kDethBytes;
  }
  if (mask & kHasReth) {
    st64(o, h.reth.va);
    st32(o + 8, h.reth.rkey);
    st32(o + 12, h.reth.dma_len);
    o += kRethBytes;
  }
  if (mask & kHasAtomicEth) {
    st64(o, h.atomic_eth.va);
    st32(o + 8, h.atomic_eth.rkey);
    st64(o + 12, h.atomic_eth.swap_add);
    st64(o + 20, h.atomic_eth.compare);
    o += kAtomicEthBytes;
  }
  if (mask & kHasAeth) {
    st32(o, (std::uint32_t{h.aeth.syndrome} << 24) | (h.aeth.msn & k24Bits));
    o += kAethBytes;
  }
  if (mask & kHasAtomicAckEth) {
    st64(o, h.atomic_ack_eth.orig);
    o += kAtomicAckEthBytes;
  }
  if (mask & kHasImm) {
    st32(o, h.imm);
    o += kImmBytes;
  }
  if (mask & kHasIeth) st32(o, h.ieth.rkey);
}

// `b` holds at least the opcode's ext_bytes (the caller checked).
void decode_ext(const std::uint8_t* b, std::uint16_t mask, Headers& h) {
  if (mask & kHasDeth) {
    h.deth.qkey = ld32(b);
    h.deth.src_qp = ld24(b + 5);
    b += kDethBytes;
  }
  if (mask & kHasReth) {
    h.reth.va = ld64(b);
    h.reth.rkey = ld32(b + 8);
    h.reth.dma_len = ld32(b + 12);
    b += kRethBytes;
  }
  if (mask & kHasAtomicEth) {
    h.atomic_eth.va = ld64(b);
    h.atomic_eth.rkey = ld32(b + 8);
    h.atomic_eth.swap_add = ld64(b + 12);
    h.atomic_eth.compare = ld64(b + 20);
    b += kAtomicEthBytes;
  }
  if (mask & kHasAeth) {
    h.aeth.syndrome = b[0];
    h.aeth.msn = ld24(b + 1);
    b += kAethBytes;
  }
  if (mask & kHasAtomicAckEth) {
    h.atomic_ack_eth.orig = ld64(b);
    b += kAtomicAckEthBytes;
  }
  if (mask & kHasImm) {
    h.imm = ld32(b);
    b += kImmBytes;
  }
  if (mask & kHasIeth) h.ieth.rkey = ld32(b);
}

// The BTH from 12 bytes the caller has checked are there.
inline void decode_bth(const std::uint8_t* b, Bth& t) {
  const std::uint8_t flags = b[1], fb = b[4];
  t.opcode = static_cast<Opcode>(b[0]);
  t.se = flags & 0x80;
  t.mig_req = flags & 0x40;
  t.pad_cnt = (flags >> 4) & 3;
  t.tver = flags & 0xF;
  t.pkey = ld16(b + 2);
  t.fecn = fb & 0x80;
  t.becn = fb & 0x40;
  t.dest_qp = ld32(b + 4) & k24Bits;
  t.ack_req = b[8] & 0x80;
  t.psn = ld32(b + 8) & k24Bits;
}

// The LRH from 8 bytes the caller has checked are there.
inline void decode_lrh(const std::uint8_t* b, Lrh& l) {
  const std::uint8_t b0 = b[0], b1 = b[1];
  l.vl = b0 >> 4;
  l.lver = b0 & 0xF;
  l.sl = b1 >> 4;
  l.lnh = static_cast<Lnh>(b1 & 3);
  l.dlid = ld16(b + 2);
  l.pkt_len = ld16(b + 4) & kPktLenWordsMax;
  l.slid = ld16(b + 6);
}

// The internal decoders return the byte count, or 0 with `err` set (a header is never 0 bytes):
// a Result is built in memory and read back, which stalls store forwarding on every packet.

// BTH + extension headers, as parse_transport_headers.
std::size_t decode_transport(std::span<const std::uint8_t> b, Headers& h, WireError& err) {
  if (b.size() < kBthBytes) return err = WireError::kTruncated, 0;
  decode_bth(b.data(), h.bth);
  if (h.bth.tver != 0) return err = WireError::kBadTransportVersion, 0;  // IBA 9.2.4
  const OpcodeInfo& info = opcode_info(b[0]);
  if (!info.valid) return err = WireError::kUnknownOpcode, 0;
  if (b.size() < kBthBytes + info.ext_bytes) return err = WireError::kTruncated, 0;
  decode_ext(b.data() + kBthBytes, info.mask, h);
  return kBthBytes + info.ext_bytes;
}

// Decodes LRH [GRH] BTH ext from the front of `b` and checks the version and type fields.
// Returns the header byte count, or 0 with `err` set; fills h.
std::size_t decode_headers(std::span<const std::uint8_t> b, Headers& h, WireError& err) {
  if (b.size() < kLrhBytes) return err = WireError::kTruncated, 0;
  decode_lrh(b.data(), h.lrh);
  if (h.lrh.lver != 0) return err = WireError::kBadLinkVersion, 0;  // IBA 7.7.3
  // Raw packets (LNH 0/1) carry no BTH; this transport neither sends nor accepts them.
  if (h.lrh.lnh != Lnh::kIbaLocal && h.lrh.lnh != Lnh::kIbaGlobal)
    return err = WireError::kBadLnh, 0;
  h.has_grh = h.lrh.lnh == Lnh::kIbaGlobal;

  std::size_t o = kLrhBytes;
  if (h.has_grh) {
    if (b.size() < o + kGrhBytes) return err = WireError::kTruncated, 0;
    const std::uint32_t w = get32(b, o);
    h.grh.ipver = static_cast<std::uint8_t>(w >> 28);
    h.grh.tclass = static_cast<std::uint8_t>(w >> 20);
    h.grh.flow_label = w & k20Bits;
    h.grh.pay_len = get16(b, o + 4);
    h.grh.next_hdr = get8(b, o + 6);
    h.grh.hop_limit = get8(b, o + 7);
    std::memcpy(h.grh.sgid, b.data() + o + 8, 16);
    std::memcpy(h.grh.dgid, b.data() + o + 24, 16);
    if (h.grh.ipver != kGrhIpVer || h.grh.next_hdr != kGrhNextIba)
      return err = WireError::kBadGrh, 0;
    o += kGrhBytes;
  }

  const std::size_t tb = decode_transport(b.subspan(o), h, err);
  return tb == 0 ? 0 : o + tb;
}

// Length rules shared by both parsers. `after_headers` is payload + pad (LRH.PktLen already
// agrees with it).
std::optional<WireError> check_payload(const Headers& h, std::size_t after_headers) {
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  if (h.bth.pad_cnt > after_headers) return WireError::kBadLength;
  const std::size_t payload = after_headers - h.bth.pad_cnt;
  // No payload and no pad on ACKs, read requests and atomics (IBA 9.4.3, 9.4.5, 9.7.5).
  if (!(info.mask & kHasPayload) && after_headers != 0) return WireError::kBadLength;
  // FIRST and MIDDLE packets carry exactly a PMTU of data (IBA 9.7.2), so never 0
  // and never padded; ONLY and LAST may be empty.
  if ((info.mask & (kIsFirst | kIsMiddle)) && !(info.mask & kIsOnly) &&
      (payload == 0 || h.bth.pad_cnt != 0))
    return WireError::kBadLength;
  if (h.has_grh && h.grh.pay_len != h.lrh.pkt_len * 4u - kLrhBytes - kGrhBytes)
    return WireError::kBadLength;  // IBA 8.3.3: PayLen counts BTH..ICRC
  return std::nullopt;
}

}  // namespace

Result<std::size_t, WireError> parse_transport_headers(std::span<const std::uint8_t> b,
                                                       Headers& h) {
  WireError err{};
  const std::size_t n = decode_transport(b, h, err);
  if (n == 0) return err;
  return n;
}

std::size_t transport_header_bytes(const Headers& h) {
  return kBthBytes + opcode_info(h.bth.opcode).ext_bytes;
}

std::size_t encode_transport_headers(const Headers& h, std::span<std::uint8_t> out) {
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  WEFT_ASSERT_MSG(info.valid, "encode: reserved opcode");
  WEFT_ASSERT(out.size() >= kBthBytes + info.ext_bytes);
  encode_bth(h.bth, out.first(kBthBytes));
  encode_ext(h, info.mask, out.subspan(kBthBytes, info.ext_bytes));
  return kBthBytes + info.ext_bytes;
}

std::size_t header_bytes(const Headers& h) {
  return routing_bytes(h.has_grh) + kBthBytes + opcode_info(h.bth.opcode).ext_bytes;
}

std::size_t encode_headers(const Headers& h, std::span<std::uint8_t> out) {
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  WEFT_ASSERT_MSG(info.valid, "encode_headers: reserved opcode");
  const std::size_t n = header_bytes(h);
  WEFT_ASSERT(out.size() >= n);
  encode_lrh(h.lrh, h.has_grh, out);
  std::size_t o = kLrhBytes;
  if (h.has_grh) {
    encode_grh(h.grh, out.subspan(o, kGrhBytes));
    o += kGrhBytes;
  }
  encode_transport_headers(h, out.subspan(o));
  return n;
}

void fill_lengths(Headers& h, std::size_t payload_bytes) {
  const std::size_t pad = (4 - payload_bytes % 4) % 4;
  const std::size_t through_icrc = header_bytes(h) + payload_bytes + pad + kIcrcBytes;
  WEFT_ASSERT_MSG(through_icrc / 4 <= kPktLenWordsMax, "packet longer than LRH.PktLen allows");
  h.lrh.lnh = h.has_grh ? Lnh::kIbaGlobal : Lnh::kIbaLocal;
  h.lrh.pkt_len = static_cast<std::uint16_t>(through_icrc / 4);
  if (h.has_grh) h.grh.pay_len = static_cast<std::uint16_t>(through_icrc - kLrhBytes - kGrhBytes);
  h.bth.pad_cnt = static_cast<std::uint8_t>(pad);
}

std::size_t wire_bytes(const Headers& h, std::size_t payload_bytes) {
  return header_bytes(h) + payload_bytes + (4 - payload_bytes % 4) % 4 + kIcrcBytes + kVcrcBytes;
}

std::size_t encode_packet(const Headers& h_in, std::span<const std::uint8_t> payload,
                          std::span<std::uint8_t> out) {
  Headers h = h_in;
  fill_lengths(h, payload.size());
  const std::size_t total = wire_bytes(h, payload.size());
  WEFT_ASSERT(out.size() >= total);
  const std::size_t hb = encode_headers(h, out);
  if (!payload.empty()) std::memcpy(out.data() + hb, payload.data(), payload.size());
  std::size_t o = hb + payload.size();
  std::fill_n(out.data() + o, h.bth.pad_cnt, std::uint8_t{0});
  o += h.bth.pad_cnt;
  const PacketCrcs c = packet_crcs(out.first(hb), out.subspan(hb, payload.size()), h.bth.pad_cnt);
  put_icrc(out.subspan(o).first<kIcrcBytes>(), c.icrc);
  o += kIcrcBytes;
  put_vcrc(out.subspan(o).first<kVcrcBytes>(), c.vcrc);
  return o + kVcrcBytes;
}

Result<ParsedPacket, WireError> parse_packet(std::span<const std::uint8_t> wire,
                                             ParseOptions opts) {
  ParsedPacket p;
  if (wire.size() < kLrhBytes) return WireError::kTruncated;
  // Read PktLen before the headers so a short frame is "truncated", a long one "bad length".
  const std::size_t through_icrc = std::size_t{get16(wire, 4) & kPktLenWordsMax} * 4;
  WireError err{};
  const std::size_t hb = decode_headers(wire.first(std::min(wire.size(), through_icrc)), p.h, err);
  if (hb == 0) {
    // Headers that run past PktLen inside a long-enough frame: the length field is wrong.
    WireError again{};
    if (err == WireError::kTruncated && wire.size() >= through_icrc + kVcrcBytes &&
        decode_headers(wire, p.h, again) != 0)
      return WireError::kBadLength;
    return err;
  }
  if (wire.size() < through_icrc + kVcrcBytes) return WireError::kTruncated;
  if (wire.size() > through_icrc + kVcrcBytes) return WireError::kBadLength;
  if (through_icrc < hb + kIcrcBytes) return WireError::kBadLength;
  const std::size_t after_headers = through_icrc - kIcrcBytes - hb;
  if (auto e = check_payload(p.h, after_headers)) return *e;

  p.header_bytes = hb;
  p.payload = wire.subspan(hb, after_headers - p.h.bth.pad_cnt);
  p.icrc = get_icrc(wire.subspan(through_icrc - kIcrcBytes).first<kIcrcBytes>());
  p.vcrc = get_vcrc(wire.subspan(through_icrc).first<kVcrcBytes>());
  // The link checks the VCRC before the transport looks at the ICRC (IBA 7.8.2, 7.8.1); both in
  // one pass when both are asked for.
  if (opts.check_vcrc && opts.check_icrc) {
    if (auto e =
            check_packet_crcs(wire.first(hb), wire.subspan(hb, after_headers), 0, p.icrc, p.vcrc))
      return *e;
    return p;
  }
  if (opts.check_vcrc && vcrc(wire.first(through_icrc)) != p.vcrc) return WireError::kBadVcrc;
  if (opts.check_icrc && icrc(wire.first(hb), wire.subspan(hb, after_headers)) != p.icrc)
    return WireError::kBadIcrc;
  return p;
}

std::optional<WireError> parse_headers_to(std::span<const std::uint8_t> headers,
                                          std::size_t payload_bytes, std::uint8_t pad_bytes,
                                          Headers& h) {
  const std::uint8_t* b = headers.data();
  const std::size_t n = headers.size();
  std::size_t hb;
  // Fast path for the common case — a local route (no GRH), link and transport version 0, a
  // defined opcode and exactly its headers — with one bounds check. It decodes what the general
  // decoder would and returns the same result; anything else takes the general path below,
  // which finds the error.
  if (n >= kLrhBytes + kBthBytes && b[0] % 16 == 0 &&
      (b[1] & 3) == static_cast<unsigned>(Lnh::kIbaLocal) && b[kLrhBytes + 1] % 16 == 0 &&
      n == kLrhBytes + kBthBytes + opcode_info(b[kLrhBytes]).ext_bytes &&
      opcode_info(b[kLrhBytes]).valid) {
    decode_lrh(b, h.lrh);
    h.has_grh = false;
    decode_bth(b + kLrhBytes, h.bth);
    decode_ext(b + kLrhBytes + kBthBytes, opcode_info(b[kLrhBytes]).mask, h);
    hb = n;
  } else {
    WireError err{};
    hb = decode_headers(headers, h, err);
    if (hb == 0) return err;
  }
  if (hb != n) return WireError::kBadLength;
  if (pad_bytes != h.bth.pad_cnt) return WireError::kBadLength;
  const std::size_t through_icrc = std::size_t{h.lrh.pkt_len} * 4;
  if (through_icrc != hb + payload_bytes + pad_bytes + kIcrcBytes) return WireError::kBadLength;
  return check_payload(h, payload_bytes + pad_bytes);
}

Result<ParsedPacket, WireError> parse_headers(std::span<const std::uint8_t> headers,
                                              std::size_t payload_bytes, std::uint8_t pad_bytes) {
  ParsedPacket p;
  if (auto e = parse_headers_to(headers, payload_bytes, pad_bytes, p.h)) return *e;
  p.header_bytes = headers.size();
  return p;
}

std::string_view to_string(WireError e) {
  switch (e) {
    case WireError::kTruncated:
      return "truncated";
    case WireError::kBadLinkVersion:
      return "bad LRH link version";
    case WireError::kBadLnh:
      return "bad LRH link next header";
    case WireError::kBadGrh:
      return "bad GRH version or next header";
    case WireError::kBadTransportVersion:
      return "bad BTH transport version";
    case WireError::kUnknownOpcode:
      return "reserved opcode";
    case WireError::kBadLength:
      return "bad length";
    case WireError::kBadIcrc:
      return "bad ICRC";
    case WireError::kBadVcrc:
      return "bad VCRC";
  }
  return "unknown WireError";
}

}  // namespace weft::wire
