// link/llr.cpp — see llr.hpp.
#include "src/link/llr.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::link {
namespace {

std::uint16_t seq_add(std::uint16_t a, std::size_t b) {
  return static_cast<std::uint16_t>((a + b) % kLlrSeqModulus);
}
constexpr std::size_t kNotInWindow = SIZE_MAX;

std::uint16_t seq_diff(std::uint16_t a, std::uint16_t b) {  // a - b mod 4096
  return static_cast<std::uint16_t>((a + kLlrSeqModulus - b) % kLlrSeqModulus);
}

}  // namespace

std::string_view to_string(LlrVerdict v) {
  switch (v) {
    case LlrVerdict::kDeliver:
      return "deliver";
    case LlrVerdict::kDuplicate:
      return "duplicate";
    case LlrVerdict::kOutOfOrder:
      return "out-of-order";
    case LlrVerdict::kCorrupt:
      return "corrupt";
  }
  return "?";
}

// ---- sender ---------------------------------------------------------------------------------

LlrSender::LlrSender(const LlrConfig& config) : config_(config) {
  WEFT_ASSERT(config.window_packets >= 1 && config.window_packets <= kLlrWindowPacketsMax);
  WEFT_ASSERT(config.replay_timeout_ns > 0);
}

void LlrSender::push(std::uint64_t id, TimeNs now) {
  WEFT_ASSERT(can_send());
  if (buffer_.empty()) progress_ns_ = now;  // the timer runs only while something is unacked
  buffer_.push_back({id, next_seq_});
  next_seq_ = seq_add(next_seq_, 1);
}

bool LlrSender::poll_send(TimeNs now, LlrSend& out) {
  (void)now;
  if (cursor_ >= buffer_.size()) return false;
  out = buffer_[cursor_];
  if (cursor_ < high_sent_) {
    ++stats_.replayed;
  } else {
    ++stats_.sent;
    high_sent_ = cursor_ + 1;
  }
  ++cursor_;
  return true;
}

std::size_t LlrSender::index_of(std::uint16_t seq) const {
  if (buffer_.empty()) return kNotInWindow;
  std::size_t i = seq_diff(seq, buffer_.front().seq);
  return i <= buffer_.size() ? i : kNotInWindow;  // size() itself: the next seq to be pushed
}

void LlrSender::release_before(std::size_t index, TimeNs now) {
  if (index == 0) return;
  for (std::size_t i = 0; i < index; ++i) {
    released_.push_back(buffer_.front().id);
    buffer_.pop_front();
  }
  cursor_ -= std::min(cursor_, index);
  high_sent_ -= std::min(high_sent_, index);
  progress_ns_ = now;
  rounds_without_progress_ = 0;
}

void LlrSender::rewind(std::size_t index) {
  cursor_ = std::min(cursor_, index);
}

void LlrSender::on_ack(std::uint16_t seq, TimeNs now) {
  if (buffer_.empty()) return;
  std::size_t i = index_of(seq);
  // Only an ACK of something sent counts; an old or garbled one is ignored.
  if (i == kNotInWindow || i >= high_sent_) return;
  release_before(i + 1, now);
}

void LlrSender::on_nak(std::uint16_t seq, TimeNs now) {
  ++stats_.naks;
  if (buffer_.empty()) return;
  std::size_t i = index_of(seq);
  if (i == kNotInWindow || i > high_sent_) return;  // stale, or names something never sent
  release_before(i, now);                           // everything before the missing one arrived
  rewind(0);
}

bool LlrSender::poll_released(std::uint64_t& id) {
  if (released_.empty()) return false;
  id = released_.front();
  released_.pop_front();
  return true;
}

TimeNs LlrSender::next_deadline() const {
  if (buffer_.empty() || high_sent_ == 0) return kNoDeadline;
  return progress_ns_ + config_.replay_timeout_ns;
}

void LlrSender::on_deadline(TimeNs now) {
  if (now < next_deadline()) return;
  ++stats_.timeouts;
  if (++rounds_without_progress_ > config_.replay_rounds_max) failed_ = true;
  progress_ns_ = now;
  rewind(0);
}

// ---- receiver -------------------------------------------------------------------------------

LlrVerdict LlrReceiver::on_packet(std::uint16_t seq, bool intact) {
  if (!intact) {
    if (!nak_sent_) nak_pending_ = true;
    return LlrVerdict::kCorrupt;
  }
  if (seq == expected_) {
    expected_ = seq_add(expected_, 1);
    ack_pending_ = true;
    nak_sent_ = false;
    nak_pending_ = false;
    return LlrVerdict::kDeliver;
  }
  // Behind expected_ (within half the space): a replay of something delivered.
  if (seq_diff(expected_, seq) <= kLlrWindowPacketsMax) {
    ack_pending_ = true;
    return LlrVerdict::kDuplicate;
  }
  if (!nak_sent_) nak_pending_ = true;
  return LlrVerdict::kOutOfOrder;
}

bool LlrReceiver::poll_control(LlrControl& out) {
  if (nak_pending_) {
    out = {true, expected_};
    nak_pending_ = false;
    nak_sent_ = true;
    ack_pending_ = false;
    return true;
  }
  if (ack_pending_) {
    out = {false, seq_add(expected_, kLlrSeqModulus - 1)};
    ack_pending_ = false;
    return true;
  }
  return false;
}

}  // namespace weft::link
