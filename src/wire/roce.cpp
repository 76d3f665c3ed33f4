// wire/roce.cpp — RoCEv2 framing and its ICRC (IBA Annex A17). Thread-safety: pure functions.
#include "src/wire/roce.hpp"

#include <algorithm>
#include <cstring>

#include <isa-l/crc.h>

#include "src/base/assert.hpp"
#include "src/wire/bytes.hpp"

namespace weft::wire {
namespace {

using detail::get16;
using detail::get8;
using detail::put16;
using detail::put32;
using detail::put8;

constexpr std::uint8_t kIpProtoUdp = 17;

std::uint32_t crc32_refl(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  return n == 0 ? crc : crc32_gzip_refl(crc, p, n);
}

std::uint16_t ipv4_checksum(std::span<const std::uint8_t> hdr) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < hdr.size(); i += 2) sum += get16(hdr, i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

}  // namespace

std::uint32_t icrc_roce_v2(std::span<const std::uint8_t> ip, std::span<const std::uint8_t> payload,
                           std::uint8_t pad_bytes) {
  WEFT_ASSERT(pad_bytes <= 3);
  WEFT_ASSERT(!ip.empty());
  const bool v6 = (ip[0] >> 4) == 6;
  const std::size_t ip_bytes = v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  const std::size_t masked = ip_bytes + kUdpHeaderBytes + kBthBytes;
  WEFT_ASSERT(ip.size() >= masked);
  std::uint8_t buf[kLrhBytes + kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes];
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
  std::uint32_t crc = crc32_refl(0, buf, kLrhBytes + masked);
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
