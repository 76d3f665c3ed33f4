// link/link_rate.hpp — InfiniBand link rates, serialization time and propagation delay.
//
// A link is a width (1x, 4x, 8x, 12x lanes; IBA vol 2, 5.2) times a lane speed. Every rate here is
// the DATA rate per lane after line coding, kept as an exact fraction of bits per ns so that long
// runs never drift:
//
//   speed  signalling (per lane)          coding                       data Gb/s per lane
//   SDR    2.5 GBd NRZ                    8b/10b                        2
//   DDR    5 GBd NRZ                      8b/10b                        4
//   QDR    10 GBd NRZ                     8b/10b                        8
//   FDR10  10.3125 GBd NRZ                64b/66b                       10
//   FDR    14.0625 GBd NRZ                64b/66b                       14.0625*64/66 = 150/11
//   EDR    25.78125 GBd NRZ               64b/66b                       25
//   HDR    53.125 Gb/s PAM4 (26.5625 GBd) 256b/257b + RS(544,514) FEC   50
//   NDR    106.25 Gb/s PAM4 (53.125 GBd)  256b/257b + RS(544,514) FEC   100
//   XDR    212.5 Gb/s PAM4 (106.25 GBd)   256b/257b + RS(544,514) FEC   200
//
// So 4x NDR (the default) carries 400 Gb/s of packet bytes. The PAM4 rows fold the physical
// layer's own FEC into the rate; the packet-level FEC of fec.hpp is Weft's model on top.
//
// Thread-safety: plain values; SerialClock is single-owner. No clock is read anywhere here.
#pragma once

#include <cstdint>
#include <string_view>

#include <weft/types.hpp>

namespace weft::link {

enum class LinkWidth : std::uint8_t { k1x = 1, k4x = 4, k8x = 8, k12x = 12 };
enum class LaneSpeed : std::uint8_t { kSdr, kDdr, kQdr, kFdr10, kFdr, kEdr, kHdr, kNdr, kXdr };
std::string_view to_string(LaneSpeed s);
std::string_view to_string(LinkWidth w);

// An exact rate: bits_num / bits_den bits per nanosecond.
struct BitRate {
  std::uint64_t bits_num = 0;
  std::uint64_t bits_den = 1;
  double gbps() const { return static_cast<double>(bits_num) / static_cast<double>(bits_den); }
};

// Data rate of one lane (table above).
BitRate lane_data_rate(LaneSpeed s);

struct LinkRate {
  LinkWidth width = LinkWidth::k4x;
  LaneSpeed speed = LaneSpeed::kNdr;
  BitRate data_rate() const;  // whole link, all lanes
  // One symbol time (IBA 7.9.4: the FC update period is counted in symbol times) is the time to
  // move one byte on one lane: 8 bits at the lane's data rate. Returned in picoseconds, rounded
  // up (symbol times are fractional ns at EDR and above).
  std::uint64_t symbol_time_ps() const;
};

inline constexpr LinkRate kDefaultLinkRate{LinkWidth::k4x, LaneSpeed::kNdr};

// Time to serialize `bytes` at `rate`, rounded down (a single packet, no carried remainder).
std::uint64_t serialization_ns(const LinkRate& rate, std::uint64_t bytes);

// Serialization with the remainder carried from packet to packet: after any sequence of calls
// the sum of the returned times equals floor(total_bits / rate) exactly, so a link that sends
// 10^12 packets does not drift by a nanosecond. One per link direction.
class SerialClock {
 public:
  explicit SerialClock(LinkRate rate = kDefaultLinkRate);
  // Nanoseconds the next `bytes` occupy the wire.
  std::uint64_t next_ns(std::uint64_t bytes);
  const LinkRate& rate() const { return rate_; }

 private:
  LinkRate rate_;
  BitRate r_;
  std::uint64_t rem_ = 0;  // carried (bits * bits_den) not yet turned into a whole ns, < bits_num
};

// Propagation delay in a cable (~5 ns per metre, light at about 2/3 c in copper and fibre),
// from the length in millimetres, rounded to the nearest ns.
inline constexpr std::uint64_t kPropagationPsPerM = 5000;
constexpr std::uint64_t propagation_ns(std::uint64_t cable_length_mm) {
  return (cable_length_mm * kPropagationPsPerM / 1000 + 500) / 1000;
}

}  // namespace weft::link
