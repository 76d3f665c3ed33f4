// link/credit.cpp — see credit.hpp. Section numbers are IBA vol 1 release 1.2.1.
#include "src/link/credit.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::link {

std::string_view to_string(Arrival a) {
  switch (a) {
    case Arrival::kAccepted:
      return "accepted";
    case Arrival::kOverflow:
      return "overflow";
    case Arrival::kVl15Dropped:
      return "vl15-dropped";
  }
  return "?";
}

// ---- transmitter (IBA 7.9.4.2) ---------------------------------------------------------------

bool CreditSender::can_send(std::uint8_t vl, std::uint32_t wire_bytes) const {
  WEFT_ASSERT(vl < kVlCount);
  if (vl == kVl15) return true;  // VL15 is not flow controlled
  std::uint32_t nb = credit_blocks(wire_bytes);
  return fc_mod(fccl_[vl] + kFcModulus - fc_mod(fctbs_[vl] + nb)) <= kCreditWindowBlocksMax;
}

void CreditSender::on_sent(std::uint8_t vl, std::uint32_t wire_bytes) {
  if (vl == kVl15) return;
  WEFT_ASSERT_MSG(can_send(vl, wire_bytes), "data packet sent without link credit");
  fctbs_[vl] = fc_mod(fctbs_[vl] + credit_blocks(wire_bytes));
}

void CreditSender::on_fc_packet(const FcPacket& p) {
  if (p.vl >= kVl15) return;  // decode_fc_packet already refuses VL15
  fccl_[p.vl] = fc_mod(p.fccl);
}

std::uint32_t CreditSender::available_blocks(std::uint8_t vl) const {
  if (vl == kVl15) return UINT32_MAX;
  std::uint16_t d = fc_mod(fccl_[vl] + kFcModulus - fctbs_[vl]);
  return d <= kCreditWindowBlocksMax ? d : 0;
}

// ---- receiver (IBA 7.9.4.3) -------------------------------------------------------------------

CreditReceiver::CreditReceiver(const std::array<std::uint32_t, kVlCount>& buffer_bytes) {
  for (std::size_t i = 0; i < kVlCount; ++i)
    capacity_blocks_[i] = buffer_bytes[i] / kCreditBlockBytes;
}

Arrival CreditReceiver::on_packet_arrived(std::uint8_t vl, std::uint32_t wire_bytes) {
  WEFT_ASSERT(vl < kVlCount);
  std::uint32_t nb = credit_blocks(wire_bytes);
  if (used_blocks_[vl] + nb > capacity_blocks_[vl]) {
    // Discarded for lack of buffer: ABR is not advanced (IBA 7.9.4.3).
    if (vl == kVl15) {
      ++stats_.vl15_dropped;
      return Arrival::kVl15Dropped;
    }
    ++stats_.overflows;
    return Arrival::kOverflow;
  }
  used_blocks_[vl] += nb;
  if (vl != kVl15) abr_[vl] = fc_mod(abr_[vl] + nb);
  ++stats_.packets_accepted;
  return Arrival::kAccepted;
}

void CreditReceiver::on_packet_discarded(std::uint8_t vl, std::uint32_t wire_bytes) {
  WEFT_ASSERT(vl < kVlCount);
  if (vl != kVl15) abr_[vl] = fc_mod(abr_[vl] + credit_blocks(wire_bytes));
}

void CreditReceiver::on_packet_drained(std::uint8_t vl, std::uint32_t wire_bytes) {
  WEFT_ASSERT(vl < kVlCount);
  std::uint32_t nb = credit_blocks(wire_bytes);
  WEFT_ASSERT_MSG(used_blocks_[vl] >= nb, "drained more than was buffered");
  used_blocks_[vl] -= nb;
}

void CreditReceiver::on_fc_packet(const FcPacket& p) {
  if (p.vl >= kVl15 || !abr_resync_) return;
  abr_[p.vl] = fc_mod(p.fctbs);
}

std::uint16_t CreditReceiver::fccl(std::uint8_t vl) const {
  WEFT_ASSERT(vl < kVl15);
  std::uint32_t free_blocks = capacity_blocks_[vl] - used_blocks_[vl];
  return fc_mod(abr_[vl] + std::min<std::uint32_t>(free_blocks, kCreditWindowBlocksMax));
}

FcPacket CreditReceiver::make_fc_packet(std::uint8_t vl, std::uint16_t fctbs) const {
  return FcPacket{FcOp::kNormal, fc_mod(fctbs), vl, fccl(vl)};
}

// ---- port -------------------------------------------------------------------------------------

CreditPort::CreditPort(const CreditPortConfig& config, TimeNs now)
    : config_(config), receiver_(config.buffer_bytes) {
  WEFT_ASSERT(config.data_vls >= 1 && config.data_vls <= 15);
  period_ns_ = config.fc_update_period_symbols * config.rate.symbol_time_ps() / 1000;
  WEFT_ASSERT(period_ns_ > 0);
  // Every VL owes its first FC packet at once (it grants the partner its initial credit).
  for (std::size_t i = 0; i < kVlCount; ++i) {
    last_fc_ns_[i] = now;
    freed_[i] = true;
  }
}

void CreditPort::on_packet_drained(std::uint8_t vl, std::uint32_t wire_bytes) {
  receiver_.on_packet_drained(vl, wire_bytes);
  if (vl != kVl15) freed_[vl] = true;
}

void CreditPort::on_packet_discarded(std::uint8_t vl, std::uint32_t wire_bytes) {
  receiver_.on_packet_discarded(vl, wire_bytes);
  if (vl != kVl15) freed_[vl] = true;
}

void CreditPort::on_fc_packet(const FcPacket& p) {
  sender_.on_fc_packet(p);
  receiver_.on_fc_packet(p);
}

bool CreditPort::poll_fc_packet(TimeNs now, FcPacket& out) {
  for (std::uint8_t i = 0; i < config_.data_vls; ++i) {
    std::uint8_t vl = static_cast<std::uint8_t>((next_vl_ + i) % config_.data_vls);
    if (freed_[vl] || now >= last_fc_ns_[vl] + period_ns_) {
      out = receiver_.make_fc_packet(vl, sender_.fctbs(vl));
      freed_[vl] = false;
      last_fc_ns_[vl] = now;
      next_vl_ = static_cast<std::uint8_t>((vl + 1) % config_.data_vls);
      return true;
    }
  }
  return false;
}

TimeNs CreditPort::next_deadline() const {
  TimeNs t = kNoDeadline;
  for (std::uint8_t vl = 0; vl < config_.data_vls; ++vl) {
    TimeNs due = freed_[vl] ? last_fc_ns_[vl] : last_fc_ns_[vl] + period_ns_;
    t = std::min(t, due);
  }
  return t;
}

}  // namespace weft::link
