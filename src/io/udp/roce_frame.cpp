// io/udp/roce_frame.cpp — RoCEv2 framing shared by the Ethernet media (see roce_frame.hpp).
#include "src/io/udp/roce_frame.hpp"

#include <algorithm>
#include <cstring>

#include "src/transport/objects.hpp"

namespace weft::io::roce {
namespace {

constexpr std::uint8_t kIpProtoUdp = 17;

void put16(std::uint8_t* p, unsigned v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
void put32(std::uint8_t* p, std::uint32_t v) {
  put16(p, v >> 16);
  put16(p + 2, v & 0xFFFF);
}
std::uint16_t get16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}
std::uint32_t get32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

std::uint16_t ipv4_checksum(const std::uint8_t* h) {
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += std::uint32_t{h[i]} << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// The UDP checksum over IPv6 (RFC 8200 8.1): pseudo-header, UDP header, datagram.
std::uint16_t udp6_checksum(const std::uint8_t* ip6, const std::uint8_t* udp, std::size_t len) {
  std::uint64_t sum = 0;
  for (int i = 8; i < 40; i += 2) sum += std::uint32_t{ip6[i]} << 8 | ip6[i + 1];
  sum += len + 17;
  for (std::size_t i = 0; i + 1 < len; i += 2) sum += std::uint32_t{udp[i]} << 8 | udp[i + 1];
  if (len & 1) sum += std::uint32_t{udp[len - 1]} << 8;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  const auto c = static_cast<std::uint16_t>(~sum);
  return c ? c : 0xFFFF;
}

// Copies a packet's transport headers, n bytes (BTH and its extension headers: 12 to 40), with
// fixed-size moves that overlap: a memcpy of a size known only at run time became `rep movsq`
// here, whose start-up held 65 % of deliver_frame's samples in a 4 KiB stream (perf annotate,
// dpdk17), and whose stores the Device's parse of the same bytes cannot have forwarded.
void copy_transport_headers(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
  static_assert(wire::kBthBytes + 28 <= 48);
  if (n < 16) {  // the BTH alone (12)
    std::memcpy(d, s, 8);
    std::memcpy(d + n - 8, s + n - 8, 8);
    return;
  }
  std::memcpy(d, s, 16);
  if (n > 32) std::memcpy(d + 16, s + 16, 16);
  std::memcpy(d + n - 16, s + n - 16, 16);
}

}  // namespace

void write_frame_head(std::uint8_t* f, const FrameAddr& a, std::size_t bytes) {
  std::memcpy(f, a.dst_mac.data(), 6);
  std::memcpy(f + 6, a.src_mac.data(), 6);
  if (a.ipv6) {
    put16(f + 12, wire::kEtherTypeIpv6);
    std::uint8_t* ip = f + wire::kEthHeaderBytes;
    put32(ip, 0x60000000);  // version 6, traffic class 0, flow label 0
    put16(ip + 4, static_cast<unsigned>(8 + bytes));
    ip[6] = 17;
    ip[7] = 64;
    std::memcpy(ip + 8, a.src_ip6.data(), 16);
    std::memcpy(ip + 24, a.dst_ip6.data(), 16);
    std::uint8_t* u = ip + wire::kIpv6HeaderBytes;
    put16(u, a.src_port);
    put16(u + 2, a.dst_port);
    put16(u + 4, static_cast<unsigned>(8 + bytes));
    put16(u + 6, 0);
    if (a.udp6_checksum) put16(u + 6, udp6_checksum(ip, u, 8 + bytes));
    return;
  }
  put16(f + 12, wire::kEtherTypeIpv4);
  std::uint8_t* ip = f + wire::kEthHeaderBytes;
  ip[0] = 0x45;
  ip[1] = 0;
  put16(ip + 2, static_cast<unsigned>(20 + 8 + bytes));
  put16(ip + 4, 0);       // identification: what Linux sends with DF on an unconnected socket
  put16(ip + 6, 0x4000);  // DF: RoCEv2 is never fragmented
  ip[8] = 64;
  ip[9] = 17;
  put16(ip + 10, 0);
  put32(ip + 12, a.src_ip);
  put32(ip + 16, a.dst_ip);
  put16(ip + 10, ipv4_checksum(ip));
  std::uint8_t* u = ip + wire::kIpv4HeaderBytes;
  put16(u, a.src_port);
  put16(u + 2, a.dst_port);
  put16(u + 4, static_cast<unsigned>(8 + bytes));
  put16(u + 6, 0);
}

std::size_t build_frame(const TxPacket& pkt, const FrameAddr& a, std::uint8_t* f) {
  const std::uint8_t* h = pkt.headers.data();
  const std::size_t bth = (h[1] & 3) == 3 ? 48 : 8;  // LNH 3: a GRH follows the LRH
  const std::size_t t = pkt.header_bytes - bth;
  const std::size_t head = a.head();
  std::uint8_t* d = f + head;
  std::memcpy(d, h + bth, t);
  if (pkt.payload_bytes) transport::copy_payload(d + t, pkt.payload, pkt.payload_bytes);
  std::memset(d + t + pkt.payload_bytes, 0, pkt.pad_bytes);
  const std::size_t bytes = t + pkt.payload_bytes + pkt.pad_bytes + wire::kIcrcBytes;
  write_frame_head(f, a, bytes);
  // The frame is whole and contiguous here: IPv4 takes the short-packet fold from it.
  const std::uint32_t ic =
      a.ipv6 ? wire::icrc_roce_v2({f + wire::kEthHeaderBytes, head - 14 + t},
                                  {d + t, pkt.payload_bytes}, pkt.pad_bytes)
             : wire::icrc_roce_v2_frame4(f, wire::kIpv4HeaderBytes + wire::kUdpHeaderBytes + bytes);
  wire::put_icrc(std::span<std::uint8_t, wire::kIcrcBytes>(d + bytes - 4, 4), ic);
  if (a.ipv6 && a.udp6_checksum)
    write_frame_head(f, a, bytes);  // IPv6's UDP checksum covers the ICRC too
  return head + bytes;
}

FrameHead4 frame_head4(const FrameAddr& a) {
  FrameHead4 h;
  write_frame_head(h.bytes.data(), a, 0);
  const std::uint8_t* ip = h.bytes.data() + wire::kEthHeaderBytes;
  for (int i = 0; i < 20; i += 2)
    if (i != 2 && i != 10) h.sum += std::uint32_t{ip[i]} << 8 | ip[i + 1];  // not length, checksum
  return h;
}

std::size_t build_frame(const TxPacket& pkt, const FrameHead4& h, std::uint8_t* f) {
  const std::uint8_t* hd = pkt.headers.data();
  const std::size_t bth = (hd[1] & 3) == 3 ? 48 : 8;  // LNH 3: a GRH follows the LRH
  const std::size_t t = pkt.header_bytes - bth;
  std::memcpy(f, h.bytes.data(), kFrameHead);
  std::uint8_t* d = f + kFrameHead;
  // Copies of a fixed size (a few vector moves, no memcpy call and its size dispatch, which
  // cost more than the bytes of a short packet): the transport headers as the largest set
  // (BTH + 28), which the payload then overwrites, and the pad as 4 zeros, which the ICRC does.
  constexpr std::size_t kTransportMax = wire::kBthBytes + 28;
  static_assert(48 + kTransportMax <= TxPacket::kHeaderBytesMax);
  std::memcpy(d, hd + bth, kTransportMax);
  std::uint8_t* p = d + t;
  const std::size_t n = pkt.payload_bytes;
  const std::size_t bytes = t + n + pkt.pad_bytes + wire::kIcrcBytes;
  const std::size_t ip_total = wire::kIpv4HeaderBytes + wire::kUdpHeaderBytes + bytes;
  std::uint8_t* ip = f + wire::kEthHeaderBytes;
  put16(ip + 2, static_cast<unsigned>(ip_total));
  std::uint32_t sum = h.sum + static_cast<std::uint32_t>(ip_total);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  put16(ip + 10, ~sum & 0xFFFF);
  put16(ip + wire::kIpv4HeaderBytes + 4, static_cast<unsigned>(wire::kUdpHeaderBytes + bytes));
  if (ip_total <= wire::kIcrcShortMaxBytes) {  // the whole frame in one fold, no call
    if (n - 8 <= 8) {  // unsigned: 8 to 16 bytes (a latency test's 8-byte WRITE), two 8-byte moves
      std::uint64_t head, tail;
      std::memcpy(&head, pkt.payload, 8);
      std::memcpy(&tail, pkt.payload + n - 8, 8);
      std::memcpy(p, &head, 8);
      std::memcpy(p + n - 8, &tail, 8);
    } else if (n != 0) {
      std::memcpy(p, pkt.payload, n);
    }
    std::memset(p + n, 0, 4);
    wire::put_icrc(std::span<std::uint8_t, wire::kIcrcBytes>(d + bytes - 4, 4),
                   wire::icrc_roce_v2_frame4(f, ip_total));
  } else {
    // The headers' ICRC first (it reads back only their stores), the payload's from its source
    // (not from the copy, whose 4 KiB of stores may still be draining); the copy by Weft's
    // vector loop, not memcpy: glibc's takes `rep movsb` for 4 KiB, ~170 ns into an mbuf's
    // payload 54 bytes into the frame against ~40 ns (src/io/dpdk/README.md, dpdk19).
    const std::size_t ip_head = wire::kIpv4HeaderBytes + wire::kUdpHeaderBytes + t;
    const std::uint32_t ic = wire::icrc_roce_v2_frame4(f, ip_head, {pkt.payload, n}, pkt.pad_bytes);
    transport::copy_payload(p, pkt.payload, n);
    std::memset(p + n, 0, 4);
    wire::put_icrc(std::span<std::uint8_t, wire::kIcrcBytes>(d + bytes - 4, 4), ic);
  }
  return kFrameHead + bytes;
}

std::size_t build_frame_gather(const TxPacket& pkt, const FrameAddr& a, std::uint8_t* f,
                               std::uint8_t* trailer, std::size_t& header_out,
                               std::size_t& trailer_out) {
  const std::uint8_t* h = pkt.headers.data();
  const std::size_t bth = (h[1] & 3) == 3 ? 48 : 8;  // LNH 3: a GRH follows the LRH
  const std::size_t t = pkt.header_bytes - bth;
  const std::size_t head = a.head();
  std::memcpy(f + head, h + bth, t);
  std::memset(trailer, 0, pkt.pad_bytes);
  const std::size_t bytes = t + pkt.payload_bytes + pkt.pad_bytes + wire::kIcrcBytes;
  write_frame_head(f, a, bytes);
  // IPv4: the headers folded from the frame, the payload by ISA-L (one call, not three).
  const std::uint32_t ic =
      a.ipv6 ? wire::icrc_roce_v2({f + wire::kEthHeaderBytes, head - 14 + t},
                                  {pkt.payload, pkt.payload_bytes}, pkt.pad_bytes)
             : wire::icrc_roce_v2_frame4(f, head - 14 + t, {pkt.payload, pkt.payload_bytes},
                                         pkt.pad_bytes);
  wire::put_icrc(std::span<std::uint8_t, wire::kIcrcBytes>(trailer + pkt.pad_bytes, 4), ic);
  header_out = t;
  trailer_out = pkt.pad_bytes + wire::kIcrcBytes;
  return bytes;
}

RxStatus deliver_frame(Device& dev, const std::uint8_t* f, std::size_t frame_bytes,
                       std::uint16_t slid, TimeNs now) {
  // One parse, in place, with the checks of wire::parse_roce_v2 (which fills a whole Headers
  // the Device would only parse again): Ethernet/IP/UDP framing, the BTH's TVer and opcode, room
  // for its extension headers and the ICRC, pad and payload the opcode allows. The Device checks
  // the rest of the transport (IBA 9.6) on its own parse. Any UDP port: ours may not be 4791,
  // and the ICRC covers it.
  if (frame_bytes < kFrameHead) return RxStatus::kMalformed;
  std::size_t ip_bytes, ip_total;
  const std::uint8_t* ip = f + wire::kEthHeaderBytes;
  const unsigned ethertype = get16(f + 12);
  if (ethertype == wire::kEtherTypeIpv4) {
    // Options would move the UDP header; RoCEv2 senders never use them.
    if (ip[0] != 0x45 || ip[9] != kIpProtoUdp) return RxStatus::kMalformed;
    ip_bytes = wire::kIpv4HeaderBytes;
    ip_total = get16(ip + 2);
  } else if (ethertype == wire::kEtherTypeIpv6) {
    if (frame_bytes < kFrameHead6 || (ip[0] >> 4) != 6 || ip[6] != kIpProtoUdp)
      return RxStatus::kMalformed;
    ip_bytes = wire::kIpv6HeaderBytes;
    ip_total = ip_bytes + get16(ip + 4);
  } else {
    return RxStatus::kMalformed;
  }
  // Ethernet pads short frames, so the IP length, not the frame, says where the packet ends.
  const std::uint8_t* udp = ip + ip_bytes;
  if (wire::kEthHeaderBytes + ip_total > frame_bytes ||
      ip_total < ip_bytes + wire::kUdpHeaderBytes || get16(udp + 4) != ip_total - ip_bytes)
    return RxStatus::kMalformed;
  const std::uint8_t* bth = f + wire::kEthHeaderBytes + ip_bytes + wire::kUdpHeaderBytes;
  const std::size_t datagram = ip_total - ip_bytes - wire::kUdpHeaderBytes;  // BTH..ICRC
  if (datagram < wire::kBthBytes + wire::kIcrcBytes || (bth[1] & 0xF) != 0)  // TVer 0 (9.2.4)
    return RxStatus::kMalformed;
  const wire::OpcodeInfo& info = wire::opcode_info(bth[0]);
  const std::size_t t = wire::kBthBytes + info.ext_bytes;
  if (!info.valid || datagram < t + wire::kIcrcBytes) return RxStatus::kMalformed;
  const std::size_t after = datagram - t - wire::kIcrcBytes;  // payload + pad
  const std::uint8_t pad = (bth[1] >> 4) & 3;
  // No payload and no pad on ACKs, read requests and atomics (IBA 9.4.3, 9.4.5, 9.7.5).
  if (pad > after || (!(info.mask & wire::kHasPayload) && after != 0)) return RxStatus::kMalformed;
  const std::uint32_t ic = ip_bytes == wire::kIpv4HeaderBytes
                               ? wire::icrc_roce_v2_frame4(f, ip_total)
                               : wire::icrc_roce_v2({ip, ip_total - wire::kIcrcBytes});
  if (ic != wire::get_icrc(std::span<const std::uint8_t, wire::kIcrcBytes>(
                bth + datagram - wire::kIcrcBytes, wire::kIcrcBytes)))
    return RxStatus::kBadIcrc;
  TxPacket pkt;
  std::uint8_t* lrh = pkt.headers.data();
  lrh[0] = 0;     // VL 0, LVer 0
  lrh[1] = 0x02;  // SL 0, LNH 2: IBA local (the IP header played the GRH's part)
  put16(lrh + 2, dev.lid());
  put16(lrh + 4, static_cast<unsigned>((wire::kLrhBytes + datagram) / 4));
  put16(lrh + 6, slid);
  copy_transport_headers(lrh + wire::kLrhBytes, bth, t);
  pkt.header_bytes = static_cast<std::uint16_t>(wire::kLrhBytes + t);
  pkt.payload = bth + t;
  pkt.payload_bytes = static_cast<std::uint32_t>(after - pad);
  pkt.pad_bytes = pad;
  pkt.dlid = dev.lid();
  dev.on_packet(pkt, now);
  return RxStatus::kDelivered;
}

std::uint32_t roce_mtu_for(std::uint32_t if_mtu, bool ipv6) {
  const auto over = static_cast<std::uint32_t>(
      kRoceOverIp + (ipv6 ? wire::kIpv6HeaderBytes : wire::kIpv4HeaderBytes));
  for (std::uint32_t m = 4096; m >= 256; m /= 2)
    if (m + over <= if_mtu) return m;
  return 0;
}

std::array<std::uint8_t, 16> gid_of(std::uint32_t ip) {
  std::array<std::uint8_t, 16> g{};
  g[10] = g[11] = 0xFF;
  put32(g.data() + 12, ip);
  return g;
}

void PeerTable::add(const Peer& p) {
  for (auto& q : peers_)
    if (q.lid == p.lid) {
      q = p;
      return;
    }
  peers_.push_back(p);
}

const Peer* PeerTable::route(const TxPacket& pkt) const {
  const std::uint8_t* h = pkt.headers.data();
  if ((h[1] & 3) == 3) {  // GRH: DGID at GRH bytes 24..39
    const std::uint8_t* dgid = h + 8 + 24;
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    if (!std::memcmp(dgid, kMapped, 12)) {
      const std::uint32_t ip = get32(dgid + 12);
      for (const auto& p : peers_)
        if (p.ip == ip) return &p;
    } else {
      for (const auto& p : peers_)
        if (!std::memcmp(p.ip6.data(), dgid, 16)) return &p;
    }
  }
  for (const auto& p : peers_)
    if (p.lid == pkt.dlid) return &p;
  return nullptr;
}

std::uint16_t PeerTable::lid_of(std::uint32_t ip, std::uint16_t port) const {
  for (const auto& p : peers_)
    if (p.ip == ip && p.port == port) return p.lid;
  return 0;
}

std::uint16_t PeerTable::lid_of(const Ip6& ip, std::uint16_t port) const {
  for (const auto& p : peers_)
    if (p.ip6 == ip && p.port == port) return p.lid;
  return 0;
}

}  // namespace weft::io::roce
