// link/phy_channel.cpp — see phy_channel.hpp.
#include "src/link/phy_channel.hpp"

#include "src/base/assert.hpp"
#include "src/wire/packet.hpp"

namespace weft::link {
namespace {

bool vcrc_ok(std::span<const std::uint8_t> p) {
  if (p.size() < wire::kVcrcBytes) return false;
  auto body = p.first(p.size() - wire::kVcrcBytes);
  return wire::get_vcrc(p.last<wire::kVcrcBytes>()) == wire::vcrc(body);
}

}  // namespace

PhyChannel::PhyChannel(const PhyConfig& config)
    : config_(config), errors_(config.ber), codec_(config.fec_config) {}

std::size_t PhyChannel::line_bytes(std::size_t packet_bytes) const {
  return config_.fec == FecMode::kOn ? codec_.codeword_bytes(packet_bytes) : packet_bytes;
}

void PhyChannel::count(PhyOutcome& o) {
  ++counters_.packets;
  counters_.symbol_error_counter += symbols_hit(positions_);
  counters_.fec_corrected_blocks += o.corrected_blocks;
  if (o.uncorrectable) ++counters_.fec_uncorrectable_codewords;
  if (o.dropped) ++counters_.port_rcv_errors;
}

PhyOutcome PhyChannel::carry(std::span<const std::uint8_t> packet, Rng& rng,
                             std::vector<std::uint8_t>& out) {
  PhyOutcome o;
  if (config_.fec == FecMode::kOn) {
    codeword_.resize(codec_.codeword_bytes(packet.size()));
    codec_.encode(packet, codeword_);
    errors_.draw(codeword_.size() * 8, rng, positions_);
    flip_bits(codeword_, positions_);
    FecDecodeResult r = codec_.decode(codeword_, out);
    o.corrected_blocks = r.corrected_blocks;
    o.uncorrectable = r.uncorrectable;
  } else {
    out.assign(packet.begin(), packet.end());
    errors_.draw(out.size() * 8, rng, positions_);
    flip_bits(out, positions_);
  }
  o.bit_errors = static_cast<std::uint32_t>(positions_.size());
  o.dropped = !vcrc_ok(out);
  count(o);
  return o;
}

PhyOutcome PhyChannel::carry_modelled(std::size_t packet_bytes, Rng& rng) {
  PhyOutcome o;
  errors_.draw(line_bytes(packet_bytes) * 8, rng, positions_);
  o.bit_errors = static_cast<std::uint32_t>(positions_.size());
  if (config_.fec == FecMode::kOn) {
    FecVerdict v = codec_.judge(packet_bytes, positions_);
    o.uncorrectable = v.uncorrectable;
    o.corrected_blocks = v.uncorrectable ? 0 : v.corrupted_blocks;
    o.dropped = v.uncorrectable && v.packet_damaged;  // as the VCRC check would find
  } else {
    o.dropped = !positions_.empty();
  }
  count(o);
  return o;
}

}  // namespace weft::link
