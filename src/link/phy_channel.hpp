// link/phy_channel.hpp — one direction of a link's physical layer: bit errors, FEC, and the
// receive-side checks that drop what arrives corrupted, with the PMA PortCounters they feed.
//
// Two modes over the same error draws (so the same seed gives the same verdicts in both):
//   carry()          verified mode: the packet bytes (LRH..VCRC) are FEC-encoded (if FEC is on),
//                    the drawn bits flipped in the codeword, decoded, and the VCRC (IBA 7.8.2)
//                    checked. A packet that fails is dropped and counted in PortRcvErrors.
//   carry_modelled() timing-only mode: no bytes; FecCodec::judge decides, and a packet whose own
//                    bytes are hit by an error that FEC does not repair counts as a VCRC failure
//                    (the VCRC's 1-in-65536 miss on multi-bit damage is not modelled).
// Counter names follow PMA PortCounters (IBA 16.1.3): SymbolErrorCounter counts the 8-bit
// symbols hit by errors before FEC; PortRcvErrors the packets dropped as received with errors.
// Here they are 64-bit; saturating to the PMA's 16-bit fields is the PMA codec's job.
//
// Randomness only from the injected Rng. Thread-safety: single-owner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "src/link/bit_error_model.hpp"
#include "src/link/fec.hpp"
#include <weft/types.hpp>

namespace weft::link {

enum class FecMode : std::uint8_t { kOff, kOn };

struct PhyConfig {
  double ber = 0.0;
  FecMode fec = FecMode::kOn;
  FecConfig fec_config{};
};

struct PortErrorCounters {
  std::uint64_t symbol_error_counter = 0;  // PMA SymbolErrorCounter
  std::uint64_t port_rcv_errors = 0;       // PMA PortRcvErrors
  std::uint64_t fec_corrected_blocks = 0;
  std::uint64_t fec_uncorrectable_codewords = 0;
  std::uint64_t packets = 0;
};

struct PhyOutcome {
  bool dropped = false;                // failed the VCRC: the receiver discards it
  std::uint32_t bit_errors = 0;        // drawn on the wire
  std::uint32_t corrected_blocks = 0;  // FEC shards repaired
  bool uncorrectable = false;          // FEC could not repair (FEC on only)
};

class PhyChannel {
 public:
  explicit PhyChannel(const PhyConfig& config);

  // Verified mode. `packet` is a whole wire packet (LRH..VCRC); `out` receives the bytes as the
  // receiver sees them (possibly corrupted, whether or not dropped).
  PhyOutcome carry(std::span<const std::uint8_t> packet, Rng& rng, std::vector<std::uint8_t>& out);
  // Timing-only mode, for a packet of `packet_bytes` wire bytes.
  PhyOutcome carry_modelled(std::size_t packet_bytes, Rng& rng);

  // Bytes on the wire for a packet of this size (the FEC codeword when FEC is on).
  std::size_t line_bytes(std::size_t packet_bytes) const;
  const PortErrorCounters& counters() const { return counters_; }
  // A new bit error rate from the next packet on (a fault injected on a live link); the counters
  // go on counting (they are the port's, not the rate's).
  void set_ber(double ber) {
    config_.ber = ber;
    errors_ = BitErrorModel(ber);
  }
  const PhyConfig& config() const { return config_; }

 private:
  void count(PhyOutcome& o);

  PhyConfig config_;
  BitErrorModel errors_;
  FecCodec codec_;
  std::vector<std::uint64_t> positions_;
  std::vector<std::uint8_t> codeword_;
  PortErrorCounters counters_;
};

}  // namespace weft::link
