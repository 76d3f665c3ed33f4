// wire/packet.hpp — InfiniBand packet headers as IBA chapter 9 lays them out: LRH (7.7), GRH
// (8.3), BTH (9.2), and the extended transport headers RDETH-less RC/UD set (9.3): RETH, AETH,
// AtomicETH, AtomicAckETH, DETH, ImmDt, IETH. Plus the opcode table (9.2.1, Table 35).
//
// Header structs are host-order values; encode/parse convert to and from big-endian wire bytes.
// Parsing is bounds-checked and returns a typed error; it never reads outside its input.
// See FORMAT.md beside this file for the field-to-section map. Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include <weft/types.hpp>

namespace weft::wire {

// ---- Opcodes (IBA 9.2.1, Table 35): the top 3 bits are the transport, the low 5 the operation.
enum class Opcode : std::uint8_t {
  // Reliable Connection (000)
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0A,
  kRcWriteOnlyImm = 0x0B,
  kRcReadRequest = 0x0C,
  kRcReadResponseFirst = 0x0D,
  kRcReadResponseMiddle = 0x0E,
  kRcReadResponseLast = 0x0F,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  // Unreliable Datagram (011)
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
};
std::string_view to_string(Opcode op);

// Which extension headers follow the BTH, as bits (rxe's "header mask" idea).
enum HeaderMask : std::uint16_t {
  kHasReth = 1u << 0,
  kHasAeth = 1u << 1,
  kHasAtomicEth = 1u << 2,
  kHasAtomicAckEth = 1u << 3,
  kHasDeth = 1u << 4,
  kHasImm = 1u << 5,
  kHasIeth = 1u << 6,
  kHasPayload = 1u << 7,  // may carry payload (0 bytes allowed only where IBA allows)
  kIsRequest = 1u << 8,   // requester -> responder
  kIsResponse = 1u << 9,  // responder -> requester (ACK, read response, atomic ACK)
  kIsFirst = 1u << 10,
  kIsMiddle = 1u << 11,
  kIsLast = 1u << 12,  // "last" or "only"
  kIsOnly = 1u << 13,
  kIsSend = 1u << 14,
  kIsWrite = 1u << 15,
};

struct OpcodeInfo {
  Opcode opcode;
  std::string_view name;   // "RC SEND_FIRST" ...
  std::uint16_t mask;      // HeaderMask bits
  std::uint8_t ext_bytes;  // bytes of extension headers after the BTH
  bool valid;              // false for reserved opcodes
};
// The table entry for any byte value; reserved values have valid == false. Inline: every packet
// looks its opcode up several times on the hot paths.
namespace detail {
extern const std::array<OpcodeInfo, 256> kOpcodeTable;  // opcode_table.cpp
}
inline const OpcodeInfo& opcode_info(std::uint8_t opcode) {
  return detail::kOpcodeTable[opcode];
}
inline const OpcodeInfo& opcode_info(Opcode op) {
  return opcode_info(static_cast<std::uint8_t>(op));
}

// ---- Headers (host order) ------------------------------------------------------------------
inline constexpr std::size_t kLrhBytes = 8, kGrhBytes = 40, kBthBytes = 12, kRethBytes = 16,
                             kAethBytes = 4, kAtomicEthBytes = 28, kAtomicAckEthBytes = 8,
                             kDethBytes = 8, kImmBytes = 4, kIethBytes = 4, kIcrcBytes = 4,
                             kVcrcBytes = 2;

// LRH.LNH (IBA 7.7.2): what follows the LRH.
enum class Lnh : std::uint8_t { kRaw = 0, kIpNonIba = 1, kIbaLocal = 2, kIbaGlobal = 3 };

struct Lrh {                 // IBA 7.7
  std::uint8_t vl = 0;       // 4 bits
  std::uint8_t lver = 0;     // 4 bits, must be 0
  std::uint8_t sl = 0;       // 4 bits
  Lnh lnh = Lnh::kIbaLocal;  // 2 bits
  std::uint16_t dlid = 0;
  std::uint16_t pkt_len = 0;  // 11 bits, in 4-byte words, LRH..ICRC inclusive (not VCRC)
  std::uint16_t slid = 0;
};

struct Grh {               // IBA 8.3
  std::uint8_t ipver = 6;  // 4 bits
  std::uint8_t tclass = 0;
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint16_t pay_len = 0;     // bytes after the GRH up to and including the ICRC
  std::uint8_t next_hdr = 0x1B;  // IBA transport
  std::uint8_t hop_limit = 64;
  std::uint8_t sgid[16]{};
  std::uint8_t dgid[16]{};
};

struct Bth {  // IBA 9.2
  Opcode opcode = Opcode::kRcSendOnly;
  bool se = false;  // solicited event
  bool mig_req = false;
  std::uint8_t pad_cnt = 0;  // 2 bits
  std::uint8_t tver = 0;     // 4 bits, must be 0
  std::uint16_t pkey = 0xFFFF;
  bool fecn = false, becn = false;
  std::uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;
  std::uint32_t psn = 0;  // 24 bits
};

struct Reth {
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint32_t dma_len = 0;
};  // 9.3.3
struct Aeth {
  std::uint8_t syndrome = 0;
  std::uint32_t msn = 0;
};                  // 9.3.5, msn 24 bits
struct AtomicEth {  // 9.3.4
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint64_t swap_add = 0;
  std::uint64_t compare = 0;
};
struct AtomicAckEth {
  std::uint64_t orig = 0;
};  // 9.3.6
struct Deth {
  std::uint32_t qkey = 0;
  std::uint32_t src_qp = 0;
};  // 9.3.2, src_qp 24 bits
struct Ieth {
  std::uint32_t rkey = 0;
};  // 9.3.7

// AETH syndrome (IBA 9.7.5.2.1, Table 42): bits 6:5 say ACK / RNR NAK / NAK, bits 4:0 the value.
enum class AethKind : std::uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };
enum class NakCode : std::uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};
inline constexpr std::uint8_t kCreditsInvalid = 31;  // AETH credit code "invalid" (9.7.7.2.6)
constexpr std::uint8_t aeth_syndrome(AethKind kind, std::uint8_t value) {
  return static_cast<std::uint8_t>((static_cast<unsigned>(kind) << 5) | (value & 0x1F));
}
constexpr AethKind aeth_kind(std::uint8_t syndrome) {
  return static_cast<AethKind>((syndrome >> 5) & 3);
}
constexpr std::uint8_t aeth_value(std::uint8_t syndrome) {
  return syndrome & 0x1F;
}

// All headers of one packet. `mask` says which optional headers are present.
struct Headers {
  Lrh lrh{};
  bool has_grh = false;
  Grh grh{};
  Bth bth{};
  Reth reth{};
  Aeth aeth{};
  AtomicEth atomic_eth{};
  AtomicAckEth atomic_ack_eth{};
  Deth deth{};
  std::uint32_t imm = 0;  // ImmDt, host order
  Ieth ieth{};
};

// Bytes of LRH [+GRH] + BTH + extension headers for these headers' opcode.
std::size_t header_bytes(const Headers& h);

// Writes LRH..last extension header into out (which must hold header_bytes(h)) and returns the
// count. Fields are written as given: the caller sets lrh.pkt_len, grh.pay_len and bth.pad_cnt
// (fill_lengths does it). LRH.LNH is the exception: it is written from has_grh (IBA 7.7.2), so
// the bytes always say whether a GRH follows.
std::size_t encode_headers(const Headers& h, std::span<std::uint8_t> out);

// Sets lrh.pkt_len, grh.pay_len (if a GRH), bth.pad_cnt and lrh.lnh for a payload of this size.
void fill_lengths(Headers& h, std::size_t payload_bytes);

// The transport headers alone (BTH + extension headers), for framings without an LRH such as
// RoCEv2 (roce.hpp). Same byte layout as inside a native packet.
std::size_t transport_header_bytes(const Headers& h);
std::size_t encode_transport_headers(const Headers& h, std::span<std::uint8_t> out);

enum class WireError : std::uint8_t {
  kTruncated,            // shorter than its headers say
  kBadLinkVersion,       // LRH.LVer != 0
  kBadLnh,               // LNH not IBA local/global
  kBadGrh,               // IPVer != 6 or NxtHdr != 0x1B
  kBadTransportVersion,  // BTH.TVer != 0
  kUnknownOpcode,        // reserved opcode
  kBadLength,            // PktLen/PayLen disagree with the bytes, or payload illegal for opcode
  kBadIcrc,
  kBadVcrc,
};
std::string_view to_string(WireError e);

struct ParsedPacket {
  Headers h{};
  std::size_t header_bytes = 0;
  std::span<const std::uint8_t> payload{};  // without pad
  std::uint32_t icrc = 0;  // as received (get_icrc of the wire bytes: compare with icrc())
  std::uint16_t vcrc = 0;  // as received (get_vcrc of the wire bytes)
};

struct ParseOptions {
  bool check_icrc = true;
  bool check_vcrc = true;
};

// Parses a whole packet: LRH [GRH] BTH ext payload pad ICRC VCRC.
Result<ParsedPacket, WireError> parse_packet(std::span<const std::uint8_t> wire,
                                             ParseOptions opts = {});
// Parses headers only (for the by-reference path, where the payload travels separately):
// `headers` holds exactly LRH..last extension header. Lengths are checked against payload_bytes.
Result<ParsedPacket, WireError> parse_headers(std::span<const std::uint8_t> headers,
                                              std::size_t payload_bytes, std::uint8_t pad_bytes);

// parse_headers into caller-owned headers (no ParsedPacket to build and move): fills h exactly as
// parse_headers fills ParsedPacket::h, leaving fields of absent headers as they were. Same
// checks, same errors; no error means the headers are exactly `headers.size()` bytes.
std::optional<WireError> parse_headers_to(std::span<const std::uint8_t> headers,
                                          std::size_t payload_bytes, std::uint8_t pad_bytes,
                                          Headers& h);

// Decodes BTH + extension headers from the front of `bytes` into h.bth and the extension
// fields; returns their byte count. Errors: kTruncated, kBadTransportVersion, kUnknownOpcode.
Result<std::size_t, WireError> parse_transport_headers(std::span<const std::uint8_t> bytes,
                                                       Headers& h);

// ---- CRCs (IBA 7.8) ----------------------------------------------------------------------
// ICRC (IBA 7.8.1): CRC-32 (the reflected Ethernet CRC, ISA-L crc32_gzip_refl) over LRH..pad with
// the variant fields replaced by ones. A local packet (LNH = IBA local) masks LRH.VL and BTH
// resv8a (the FECN/BECN/resv6a byte). A global packet masks the whole LRH (a router rewrites it),
// GRH TClass, FlowLabel and HopLmt, and BTH resv8a. `headers` is LRH..last extension header; in
// the first form `payload` includes the pad bytes. The result goes on the wire least significant
// byte first (as Ethernet's FCS), so put_icrc/get_icrc below convert.
std::uint32_t icrc(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload);
// Same, with `pad_bytes` (0..3) zero pad bytes after the payload, not materialized.
std::uint32_t icrc(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                   std::uint8_t pad_bytes);
// VCRC (IBA 7.8.2): CRC-16, polynomial 0x100B, reflected, initial value 0xFFFF, final value
// inverted, over LRH..ICRC; on the wire least significant byte first like the ICRC.
std::uint16_t vcrc(std::span<const std::uint8_t> bytes_through_icrc);
// Incremental forms, for gathers: start from kVcrcInit, feed each piece through vcrc_update
// (which returns the raw CRC register), and finish with vcrc_finish (the final inversion):
//   vcrc(ab) == vcrc_finish(vcrc_update(vcrc_update(kVcrcInit, a), b)).
std::uint16_t vcrc_update(std::uint16_t crc, std::span<const std::uint8_t> bytes);
// The portable table-driven path alone (vcrc_update picks carry-less multiply folding on long
// inputs where the CPU has it); exposed so tests can check one against the other.
std::uint16_t vcrc_update_tables(std::uint16_t crc, std::span<const std::uint8_t> bytes);
// The implementations behind vcrc_update, each selectable for tests and benchmarks: slicing-by-16
// tables, carry-less multiply folding on 128-bit registers (PCLMULQDQ), and the same on 512-bit
// registers (VPCLMULQDQ + AVX-512). vcrc_update_path runs `path` on any length it can (a folding
// path hands inputs shorter than one fold stride to the tables); the path must be available.
// kVpclmulGfni: for packet_crcs_path, the 512-bit fused pass with its last 2 KiB on GF2P8AFFINEQB
// beside the multiplies (GFNI too); for vcrc_update_path the same as kVpclmul.
enum class VcrcPath : std::uint8_t { kTables, kClmul, kVpclmul, kVpclmulGfni };
bool vcrc_path_available(VcrcPath path);
std::uint16_t vcrc_update_path(VcrcPath path, std::uint16_t crc,
                               std::span<const std::uint8_t> bytes);
inline constexpr std::uint16_t kVcrcInit = 0xFFFF;
constexpr std::uint16_t vcrc_finish(std::uint16_t crc) {
  return static_cast<std::uint16_t>(crc ^ 0xFFFF);
}

// Both CRCs of a packet with the payload read once (crc.cpp: one fold modulo the product of the
// two generators): icrc == icrc(headers, payload, pad_bytes) and vcrc == vcrc() of headers,
// payload, pad and that ICRC as sent, bit for bit. What a sender writes after the pad.
struct PacketCrcs {
  std::uint32_t icrc = 0;
  std::uint16_t vcrc = 0;
};
PacketCrcs packet_crcs(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                       std::uint8_t pad_bytes);
// The receiver's check in the same single pass, against the values received (get_icrc and
// get_vcrc of the wire bytes): the VCRC, which covers the received ICRC bytes, first (IBA 7.8.2),
// then the ICRC (7.8.1). Returns kBadVcrc, kBadIcrc, or nothing when both match.
std::optional<WireError> check_packet_crcs(std::span<const std::uint8_t> headers,
                                           std::span<const std::uint8_t> payload,
                                           std::uint8_t pad_bytes, std::uint32_t icrc_received,
                                           std::uint16_t vcrc_received);
// packet_crcs on a chosen path, for tests and benchmarks: kTables runs each CRC's own code
// (ISA-L for the ICRC, the VCRC's tables, two passes); kClmul the fused fold on 128-bit
// registers (from 16 payload bytes on for a global packet); kVpclmul the fused fold on 512-bit
// registers with AVX-512BW masked loads, at every length (packet_crcs' choice where the CPU has
// it). The path must be available (vcrc_path_available; kVpclmul needs AVX-512BW too).
PacketCrcs packet_crcs_path(VcrcPath path, std::span<const std::uint8_t> headers,
                            std::span<const std::uint8_t> payload, std::uint8_t pad_bytes);
// The path packet_crcs and check_packet_crcs take on this CPU (for benchmarks' printouts): the
// fastest available, except that kVpclmulGfni is taken only where it was measured faster than
// kVpclmul (AMD Zen 5; on an Intel Xeon it is slower, crc.cpp's gfni_half_pays).
VcrcPath packet_crcs_chosen_path();

// Writes/reads the ICRC (4 bytes) and VCRC (2 bytes) in their wire byte order.
void put_icrc(std::span<std::uint8_t, kIcrcBytes> out, std::uint32_t icrc_value);
std::uint32_t get_icrc(std::span<const std::uint8_t, kIcrcBytes> in);
void put_vcrc(std::span<std::uint8_t, kVcrcBytes> out, std::uint16_t vcrc_value);
std::uint16_t get_vcrc(std::span<const std::uint8_t, kVcrcBytes> in);

// Total bytes on the wire for these headers and a payload of this size:
// header_bytes + payload + pad + ICRC + VCRC.
std::size_t wire_bytes(const Headers& h, std::size_t payload_bytes);
// Builds a whole packet into `out` (which must hold wire_bytes(h, payload.size())): calls
// fill_lengths on a copy of h, encodes, copies the payload, zeroes the pad, appends ICRC and
// VCRC. Returns the byte count.
std::size_t encode_packet(const Headers& h, std::span<const std::uint8_t> payload,
                          std::span<std::uint8_t> out);

}  // namespace weft::wire
