// wire/roce.hpp — RoCEv2 framing (IBA Vol 1 Annex A17): Ethernet / IPv4 or IPv6 / UDP (port
// 4791) / BTH ext payload pad / ICRC. No LRH, no GRH and no VCRC: IP takes the GRH's role and
// the Ethernet FCS the VCRC's. Used by the Ethernet media and by tests that feed Wireshark.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "src/wire/packet.hpp"

namespace weft::wire {

inline constexpr std::uint16_t kRoceV2UdpPort = 4791;  // IANA-assigned, Annex A17
inline constexpr std::size_t kEthHeaderBytes = 14, kIpv4HeaderBytes = 20, kIpv6HeaderBytes = 40,
                             kUdpHeaderBytes = 8;
inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800, kEtherTypeIpv6 = 0x86DD;

// RoCEv2 ICRC (Annex A17): the IBA ICRC with 8 bytes of ones in place of the LRH, then the
// IP header with its variant fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic
// class, flow label, hop limit), the UDP header with its checksum set to ones, and the BTH with
// resv8a set to ones. `ip_through_ext` starts at the IP header (version nibble says 4 or 6) and
// ends after the last extension header; the payload follows with `pad_bytes` zeros not
// materialized. A native global packet's ICRC masks the LRH and GRH the same way, which is why
// the two agree on everything from the BTH on (see tests/wire/roce_test.cpp).
std::uint32_t icrc_roce_v2(std::span<const std::uint8_t> ip_through_ext,
                           std::span<const std::uint8_t> payload, std::uint8_t pad_bytes);
// Same over one contiguous span from the IP header through the pad (the ICRC excluded).
std::uint32_t icrc_roce_v2(std::span<const std::uint8_t> ip_through_pad);
// The same for a whole Ethernet frame carrying IPv4 without options (the IP header at byte 14),
// `ip_total` being its IPv4 Total Length (at least 44: IP, UDP, BTH, ICRC): the ICRC of
// frame[14, 14 + ip_total - 4). Short packets (an ACK, an 8-byte WRITE; up to
// kIcrcShortMaxBytes) are folded with carry-less multiplication straight from the frame, every
// constant in registers: no table, no call through a dispatch pointer, no copy of the masked
// header. That is why it exists: a receive hop runs it once per packet with its caches cold
// (the other process and other work ran in between), where the general path's four ISA-L calls
// measured 4-7x what they cost in a hot loop. It reads frame[10, 14) (the Ethernet header's
// tail, masked like the LRH), so the frame must start at least there. Longer ones: the head
// folded the same way (in four lanes) up to a 64-byte boundary of the frame's memory, and on
// until what is left is under 64 bytes past whole 256-byte steps, the rest by ISA-L: its 64-byte
// loads each read one cache line (an mbuf's frame starts at a boundary, its unmasked bytes 54
// bytes later: every load straddled two lines), and its block-by-block tail stays short.
inline constexpr std::size_t kIcrcShortMaxBytes = 512;
std::uint32_t icrc_roce_v2_frame4(const std::uint8_t* frame, std::size_t ip_total);
// The same with the payload elsewhere (a gather list, or the source of a copy): the frame holds
// the headers, IP through the extension headers (`ip_head` bytes from byte 14); the payload's
// `pad_bytes` zeros are not materialized. The headers are folded as above, the payload by ISA-L
// from where it is: a sender reads back only the few header bytes it has just stored, not 4 KiB
// of a copy still draining from its store buffer.
std::uint32_t icrc_roce_v2_frame4(const std::uint8_t* frame, std::size_t ip_head,
                                  std::span<const std::uint8_t> payload, std::uint8_t pad_bytes);

struct RoceV2Addr {
  std::array<std::uint8_t, 6> dst_mac{};
  std::array<std::uint8_t, 6> src_mac{};
  std::uint32_t src_ip = 0;  // IPv4, host order
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0xC000;  // UDP source port carries flow entropy (Annex A17)
  std::uint8_t dscp = 0;
  std::uint8_t ecn = 0;  // 2 bits; CE (3) is how RoCEv2 marks congestion (Annex A17)
  std::uint8_t ttl = 64;
};

// Bytes of the whole Ethernet frame (without FCS) for this opcode and payload over IPv4.
std::size_t roce_v2_frame_bytes(const Headers& h, std::size_t payload_bytes);
// Writes Ethernet / IPv4 / UDP / BTH ext payload pad ICRC into out (which must hold
// roce_v2_frame_bytes) and returns the count. h.lrh and h.grh are ignored; bth.pad_cnt is set
// from the payload size. The UDP checksum is 0 (allowed for IPv4, Annex A17).
std::size_t encode_roce_v2(const RoceV2Addr& addr, const Headers& h,
                           std::span<const std::uint8_t> payload, std::span<std::uint8_t> out);

struct RoceV2Packet {
  Headers h{};  // bth and extension headers; has_grh false
  bool ipv6 = false;
  std::size_t ip_offset = 0;  // where the IP header starts in the frame
  std::size_t bth_offset = 0;
  std::span<const std::uint8_t> payload{};  // without pad
  std::uint32_t icrc = 0;                   // as received
};

// Parses an Ethernet frame (no FCS) carrying RoCEv2. kBadLnh means "not RoCEv2" (wrong
// EtherType, IP protocol or UDP port: nothing IBA follows); kBadLength covers IP/UDP lengths
// that disagree with the frame and payload illegal for the opcode; kBadIcrc if check_icrc.
Result<RoceV2Packet, WireError> parse_roce_v2(std::span<const std::uint8_t> frame,
                                              bool check_icrc = true);

}  // namespace weft::wire
