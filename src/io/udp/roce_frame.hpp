// io/udp/roce_frame.hpp — the RoCEv2 framing both Ethernet media share (the UDP medium and the
// DPDK medium): turning a Device's TxPacket (LRH [GRH] BTH ext payload pad) into an
// Ethernet/IPv4/UDP frame carrying BTH ext payload pad ICRC (IBA Vol 1 Annex A17), routing it by
// GRH DGID (IPv4-mapped) or DLID, and the reverse: checking a received frame's ICRC, rebuilding
// an LRH in front of its BTH and handing it to the Device.
//
// The IPv4 header is the one Linux sends for a DF datagram of an unconnected socket:
// identification 0, DF, TTL 64 — so the ICRC the UDP medium computes before the kernel builds the
// real header is still right on the wire. The header checksum is filled in (the DPDK medium puts
// these bytes on the wire itself); the UDP checksum is 0 (allowed for IPv4). TOS, TTL and both
// checksums are masked in the ICRC, so whatever a router changes there does not matter.
//
// Thread-safety: pure functions; PeerTable is owned by one medium.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <weft/device.hpp>

#include "src/wire/roce.hpp"

namespace weft::io::roce {

using Mac = std::array<std::uint8_t, 6>;
// The locally administered MACs the UDP medium's captures show (the kernel hides the real ones).
inline constexpr Mac kPcapSrcMac{2, 0, 0, 0, 0, 1}, kPcapDstMac{2, 0, 0, 0, 0, 2};

// Ethernet + IPv4 + UDP: where the datagram (BTH onwards) starts in a frame (kFrameHead6: IPv6).
inline constexpr std::size_t kFrameHead =
    wire::kEthHeaderBytes + wire::kIpv4HeaderBytes + wire::kUdpHeaderBytes;
inline constexpr std::size_t kFrameHead6 =
    wire::kEthHeaderBytes + wire::kIpv6HeaderBytes + wire::kUdpHeaderBytes;
// The largest datagram: headers without LRH, a 4 KiB payload, pad and ICRC.
inline constexpr std::size_t kDatagramMax = TxPacket::kHeaderBytesMax + 4096 + 3 + 4;
inline constexpr std::size_t kFrameMax = kFrameHead + kDatagramMax;
inline constexpr std::size_t kFrameMax6 = kFrameHead6 + kDatagramMax;

using Ip6 = std::array<std::uint8_t, 16>;

// What a RoCEv2 packet adds to its payload inside the IP packet: UDP (8), BTH (12), the largest
// extension headers that come with a payload (RETH + ImmDt: 20) and the ICRC (4).
inline constexpr std::uint32_t kRoceOverIp = 8 + 12 + 20 + 4;
// The largest IBA MTU (256..4096) whose packets fit an interface MTU (the IP packet's largest
// size) with IPv4 (ipv6: IPv6) headers; 0 when not even 256 fits.
std::uint32_t roce_mtu_for(std::uint32_t if_mtu, bool ipv6);

struct FrameAddr {
  Mac src_mac = kPcapSrcMac, dst_mac = kPcapDstMac;
  std::uint32_t src_ip = 0, dst_ip = 0;  // IPv4, host order
  std::uint16_t src_port = 0, dst_port = wire::kRoceV2UdpPort;
  bool ipv6 = false;  // then src_ip6 / dst_ip6 instead
  Ip6 src_ip6{}, dst_ip6{};
  bool udp6_checksum =
      true;  // false: leave it 0 (the kernel fills it in; it is masked in the ICRC)
  std::size_t head() const { return ipv6 ? kFrameHead6 : kFrameHead; }
};

// Writes Ethernet/IP/UDP headers for a datagram of `datagram_bytes` at f (a.head() bytes). IPv6:
// traffic class and flow label 0, hop limit 64, and the UDP checksum IPv6 requires (over the
// datagram, which must be in place).
void write_frame_head(std::uint8_t* f, const FrameAddr& a, std::size_t datagram_bytes);

// Builds the whole frame for pkt at f (room for a.head() + kDatagramMax): headers, BTH..pad,
// ICRC. Returns the frame's bytes (the datagram is the part from f + a.head()).
std::size_t build_frame(const TxPacket& pkt, const FrameAddr& a, std::uint8_t* f);

// A peer's Ethernet/IPv4/UDP header as write_frame_head writes it, made once (per peer, not per
// packet): build_frame below copies it and sets the IP and UDP lengths and the IPv4 header
// checksum, from `sum` (the one's-complement sum of the header's other words, RFC 1071) plus the
// total length. IPv4 only.
struct FrameHead4 {
  std::array<std::uint8_t, kFrameHead> bytes{};
  std::uint32_t sum = 0;
};
FrameHead4 frame_head4(const FrameAddr& a);
// build_frame(pkt, a, f) for the `a` that `h` was made from, byte for byte.
std::size_t build_frame(const TxPacket& pkt, const FrameHead4& h, std::uint8_t* f);

// The same without copying the payload: writes the headers (a.head() + BTH..extensions) at f and
// pad + ICRC at trailer (room for 3 + 4 bytes), computing the ICRC over pkt.payload where it is.
// The datagram is then f[a.head(), a.head() + header_out) + pkt.payload + trailer[0, trailer_out)
// (three iovecs). Returns the datagram's bytes. IPv4 only (IPv6's UDP checksum would need the
// whole datagram: use build_frame).
std::size_t build_frame_gather(const TxPacket& pkt, const FrameAddr& a, std::uint8_t* f,
                               std::uint8_t* trailer, std::size_t& header_out,
                               std::size_t& trailer_out);

enum class RxStatus : std::uint8_t { kDelivered, kMalformed, kBadIcrc };
// Checks a received frame (Ethernet/IPv4 or IPv6/UDP, any UDP port) and hands its packet to dev
// as if LRH(DLID = dev's LID, SLID = slid) had carried it. The payload is handed by reference
// into f. One parse: the framing checks of wire::parse_roce_v2 (kMalformed: EtherType, IP
// version and protocol, IPv4 options, IP and UDP lengths against the frame, TVer, a reserved
// opcode, no room for the extension headers or the ICRC, a pad longer than what follows the
// headers, payload on an opcode that has none), then the ICRC (kBadIcrc); the Device checks
// the rest of the transport on its own parse (IBA 9.6: LRH PktLen, FIRST/MIDDLE lengths, QP,
// P_Key) and counts what fails there. IPv4 frames of up to wire::kIcrcShortMaxBytes have their
// ICRC folded straight from f (wire::icrc_roce_v2_frame4).
RxStatus deliver_frame(Device& dev, const std::uint8_t* f, std::size_t frame_bytes,
                       std::uint16_t slid, TimeNs now);

// The receive counters both Ethernet media keep (UdpCounters, DpdkCounters) by those names.
template <class C>
concept RxCounters = requires(C& c) {
  ++c.rx_packets;
  c.rx_bytes += std::size_t{};
  ++c.rx_malformed;
  ++c.rx_bad_icrc;
};
// Counts what deliver_frame said of one frame: a delivered packet and its datagram's bytes (the
// UDP payload: BTH onwards), or why it was dropped.
template <RxCounters C>
void count_rx(C& c, RxStatus s, std::size_t datagram_bytes) {
  switch (s) {
    case RxStatus::kDelivered:
      ++c.rx_packets;
      c.rx_bytes += datagram_bytes;
      return;
    case RxStatus::kMalformed:
      ++c.rx_malformed;
      return;
    case RxStatus::kBadIcrc:
      ++c.rx_bad_icrc;
      return;
  }
}

// The IPv4-mapped GID (::ffff:a.b.c.d) of an address, for AddressVector::grh.dgid.
std::array<std::uint8_t, 16> gid_of(std::uint32_t ip);

struct Peer {
  std::uint16_t lid = 0;
  std::uint32_t ip = 0;
  std::uint16_t port = wire::kRoceV2UdpPort;
  Mac mac = kPcapDstMac;
  Ip6 ip6{};  // IPv6 media
};

// Where packets go: a GRH's DGID names the address (IPv4-mapped ::ffff:a.b.c.d, or an IPv6
// address), otherwise the DLID does.
class PeerTable {
 public:
  void add(const Peer& p);  // replaces the entry of the same LID
  const Peer* route(const TxPacket& pkt) const;
  // The LID of the peer at ip:port (0 when unknown).
  std::uint16_t lid_of(std::uint32_t ip, std::uint16_t port) const;
  std::uint16_t lid_of(const Ip6& ip, std::uint16_t port) const;

 private:
  std::vector<Peer> peers_;
};

}  // namespace weft::io::roce
