// link/credit.hpp — per-VL credit-based link flow control (IBA 7.9).
//
// Credits are 64-byte blocks (IBA 7.9.4). A packet of B wire bytes (LRH through VCRC) costs
// ceil(B / 64) blocks. State per data VL (0..14), all counters 12-bit modular:
//
//   transmitter (CreditSender, IBA 7.9.4.2)
//     FCTBS  total blocks sent since link init, mod 4096; carried to the receiver in FC packets.
//     FCCL   the last credit limit advertised by the receiver (absolute, not incremental, so a
//            lost FC packet costs only a delay until the next one).
//     rule   a data packet of NB blocks may be sent only if (FCCL - (FCTBS + NB)) mod 4096 <= 2048.
//   receiver (CreditReceiver, IBA 7.9.4.3)
//     ABR    adjusted blocks received: += NB for every data packet received and not discarded
//            for lack of buffer; := FCTBS on every FC packet (this resynchronises after packets
//            lost on the wire).
//     FCCL   ABR + free blocks, but at most ABR + 2048, mod 4096.
//
// FC packets go out for each data VL at least once every 65,536 symbol times (IBA 7.9.4.3) and,
// in Weft, as soon as credits are freed (CreditPort).
// VL15 (subnet management) has no flow control: it is never blocked by credits, and the receiver
// drops a VL15 packet its VL15 buffer cannot hold, and counts it (IBA 7.6.9, 7.9.4).
//
// Section numbers are those of IBA vol 1 release 1.2.1 as the brief cites them; the rules are
// stated here in full so that they can be checked against the text.
// Sans-IO: no clock, no thread; calls that care about time take `now` in ns.
// Thread-safety: each object is single-owner (one port's link engine).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "src/link/fc_packet.hpp"
#include "src/link/link_rate.hpp"
#include <weft/types.hpp>

namespace weft::link {

inline constexpr std::uint32_t kCreditBlockBytes = 64;
inline constexpr std::uint16_t kFcModulus = 4096;              // 12-bit FCTBS/FCCL/ABR
inline constexpr std::uint16_t kCreditWindowBlocksMax = 2048;  // half the modulus
inline constexpr std::uint8_t kVlCount = 16;
inline constexpr std::uint8_t kVl15 = 15;
inline constexpr std::uint64_t kFcUpdatePeriodSymbols = 65536;  // IBA 7.9.4.3

constexpr std::uint32_t credit_blocks(std::uint32_t wire_bytes) {
  return (wire_bytes + kCreditBlockBytes - 1) / kCreditBlockBytes;
}
constexpr std::uint16_t fc_mod(std::uint32_t v) {
  return static_cast<std::uint16_t>(v & 0xFFF);
}

// The transmitter side of one port's flow control, all VLs.
class CreditSender {
 public:
  CreditSender() = default;
  // True if a packet of `wire_bytes` may go out on `vl` now. Always true on VL15.
  bool can_send(std::uint8_t vl, std::uint32_t wire_bytes) const;
  // Records a packet sent on `vl`. Sending without credit is a bug (asserted).
  void on_sent(std::uint8_t vl, std::uint32_t wire_bytes);
  // Takes the FCCL of an FC packet from the link partner.
  void on_fc_packet(const FcPacket& p);

  std::uint16_t fctbs(std::uint8_t vl) const { return fctbs_[vl]; }
  std::uint16_t fccl(std::uint8_t vl) const { return fccl_[vl]; }
  // Blocks that may still be sent on `vl` (0 when the limit is reached).
  std::uint32_t available_blocks(std::uint8_t vl) const;

 private:
  std::array<std::uint16_t, kVlCount> fctbs_{};
  std::array<std::uint16_t, kVlCount> fccl_{};  // 0 until the first FC packet: nothing may go
};

enum class Arrival : std::uint8_t {
  kAccepted,
  kOverflow,     // data VL buffer full: the sender broke the credit rule (a bug, counted)
  kVl15Dropped,  // VL15 buffer full: allowed by the IBA, counted
};
std::string_view to_string(Arrival a);

struct CreditReceiverStats {
  std::uint64_t overflows = 0;  // data-VL packets that did not fit (must stay 0)
  std::uint64_t vl15_dropped = 0;
  std::uint64_t packets_accepted = 0;
};

// The receiver side of one port's flow control: per-VL buffer accounting and the FCCL.
class CreditReceiver {
 public:
  // Receive buffer per VL in bytes (whole 64-byte blocks are used; the rest is ignored).
  explicit CreditReceiver(const std::array<std::uint32_t, kVlCount>& buffer_bytes);

  // A data packet of `wire_bytes` arrived on `vl` and now occupies buffer.
  Arrival on_packet_arrived(std::uint8_t vl, std::uint32_t wire_bytes);
  // A packet arrived but was discarded at once (bad CRC, ...): it counts in ABR but uses no
  // buffer, so its credit returns with the next FC packet.
  void on_packet_discarded(std::uint8_t vl, std::uint32_t wire_bytes);
  // A buffered packet left the buffer (forwarded or consumed): its blocks are free again.
  void on_packet_drained(std::uint8_t vl, std::uint32_t wire_bytes);
  // Takes the FCTBS of an FC packet from the link partner (ABR := FCTBS, IBA 7.9.4.3), unless
  // resync is off.
  void on_fc_packet(const FcPacket& p);
  // Link-level retransmission (llr.hpp) replays packets the FCTBS already counts, so under LLR
  // the ABR := FCTBS resync would count them twice and overstate FCCL: turn it off there (LLR
  // loses nothing, so ABR never lags for good).
  void set_abr_resync(bool on) { abr_resync_ = on; }
  // An FC packet for `vl` carrying this receiver's FCCL and the given FCTBS (the port's own
  // transmitter's; 0 when there is none).
  FcPacket make_fc_packet(std::uint8_t vl, std::uint16_t fctbs = 0) const;

  std::uint16_t fccl(std::uint8_t vl) const;
  std::uint16_t abr(std::uint8_t vl) const { return abr_[vl]; }
  std::uint32_t used_blocks(std::uint8_t vl) const { return used_blocks_[vl]; }
  std::uint32_t capacity_blocks(std::uint8_t vl) const { return capacity_blocks_[vl]; }
  const CreditReceiverStats& stats() const { return stats_; }

 private:
  std::array<std::uint32_t, kVlCount> capacity_blocks_{};
  std::array<std::uint32_t, kVlCount> used_blocks_{};
  std::array<std::uint16_t, kVlCount> abr_{};
  bool abr_resync_ = true;
  CreditReceiverStats stats_{};
};

struct CreditPortConfig {
  LinkRate rate = kDefaultLinkRate;
  std::uint8_t data_vls = 1;  // operational data VLs 0..data_vls-1 (IBA 7.6: 1, 2, 4, 8 or 15)
  std::array<std::uint32_t, kVlCount> buffer_bytes{};  // per VL, VL15 included
  std::uint64_t fc_update_period_symbols = kFcUpdatePeriodSymbols;
};

// One port's flow control: its transmitter's FCTBS and its receiver's FCCL, and when FC packets
// are due. A VL's FC packet is due when credits were freed since its last FC packet, or when
// the update period has passed since then.
class CreditPort {
 public:
  CreditPort(const CreditPortConfig& config, TimeNs now);

  CreditSender& sender() { return sender_; }
  const CreditSender& sender() const { return sender_; }
  CreditReceiver& receiver() { return receiver_; }
  const CreditReceiver& receiver() const { return receiver_; }

  // Same as the receiver's, and marks the VL's FC packet due.
  void on_packet_drained(std::uint8_t vl, std::uint32_t wire_bytes);
  void on_packet_discarded(std::uint8_t vl, std::uint32_t wire_bytes);
  // An FC packet from the partner: FCCL to the sender, FCTBS to the receiver.
  void on_fc_packet(const FcPacket& p);
  // The next due FC packet (round robin over VLs), or false when none is due at `now`.
  bool poll_fc_packet(TimeNs now, FcPacket& out);
  // When the next FC packet falls due if nothing else happens (kNoDeadline never).
  TimeNs next_deadline() const;
  TimeNs fc_update_period_ns() const { return period_ns_; }

 private:
  CreditPortConfig config_;
  CreditSender sender_;
  CreditReceiver receiver_;
  TimeNs period_ns_;
  std::array<TimeNs, kVlCount> last_fc_ns_{};
  std::array<bool, kVlCount> freed_{};
  std::uint8_t next_vl_ = 0;
};

}  // namespace weft::link
