// cm/rmpp.cpp — RMPP sender and receiver (IBA 13.6.3). See rmpp.hpp.
// Thread-safety: none; one owner.
#include "src/cm/rmpp.hpp"

#include <algorithm>

#include "src/base/assert.hpp"

namespace weft::cm {

RmppSender::RmppSender(const std::array<std::uint8_t, wire::kMadBytes>& tmpl,
                       std::vector<std::uint8_t> data, RmppConfig cfg, TimeNs now)
    : tmpl_(tmpl), data_(std::move(data)), cfg_(cfg) {
  seg_count_ = static_cast<std::uint32_t>(
      std::max<std::size_t>(1, (data_.size() + kRmppSegmentDataBytes - 1) / kRmppSegmentDataBytes));
  WEFT_ASSERT(seg_count_ <= kRmppSegmentsMax);
  deadline_ = now;  // the first segment goes out at once
}

void RmppSender::build(std::uint32_t seg, std::array<std::uint8_t, wire::kMadBytes>& out) const {
  std::fill(out.begin(), out.end(), 0);
  std::copy_n(tmpl_.begin(), kRmppSegmentHeaderBytes, out.begin());
  wire::RmppHeader r;
  r.version = wire::kRmppVersion;
  r.type = wire::RmppType::kData;
  r.flags = wire::kRmppActive;
  r.data1 = seg;
  const std::size_t pad = seg_count_ * kRmppSegmentDataBytes - data_.size();
  if (seg == 1) {
    r.flags |= wire::kRmppFirst;
    r.data2 = static_cast<std::uint32_t>(seg_count_ * kRmppSegmentPayloadBytes - pad);
  }
  if (seg == seg_count_) {
    r.flags |= wire::kRmppLast;
    r.data2 = static_cast<std::uint32_t>(kRmppSegmentPayloadBytes - pad);
  }
  wire::encode_rmpp(r, out);
  const std::size_t off = (seg - 1) * kRmppSegmentDataBytes;
  if (off < data_.size()) {
    const std::size_t n = std::min(kRmppSegmentDataBytes, data_.size() - off);
    std::copy_n(data_.begin() + static_cast<std::ptrdiff_t>(off), n,
                out.begin() + kRmppSegmentHeaderBytes);
  }
}

bool RmppSender::poll(TimeNs now, std::array<std::uint8_t, wire::kMadBytes>& out) {
  if (send_abort_) {
    send_abort_ = false;
    std::fill(out.begin(), out.end(), 0);
    std::copy_n(tmpl_.begin(), kRmppSegmentHeaderBytes, out.begin());
    wire::RmppHeader r;
    r.version = wire::kRmppVersion;
    r.type = wire::RmppType::kAbort;
    r.flags = wire::kRmppActive;
    r.status = static_cast<std::uint8_t>(wire::RmppStatus::kTooManyRetries);
    wire::encode_rmpp(r, out);
    return true;
  }
  if (outcome_ != RmppOutcome::kInProgress) return false;
  if (next_seg_ > window_last_ || next_seg_ > seg_count_) return false;
  build(next_seg_++, out);
  segments_sent_++;
  deadline_ = now + cfg_.timeout_ns;
  return true;
}

void RmppSender::on_rmpp(const wire::RmppHeader& r, TimeNs now) {
  if (outcome_ != RmppOutcome::kInProgress) return;
  if (r.type == wire::RmppType::kStop || r.type == wire::RmppType::kAbort) {
    outcome_ = RmppOutcome::kFailed;
    return;
  }
  if (r.type != wire::RmppType::kAck) return;
  if (r.data1 > seg_count_ || r.data1 < last_ack_) return;  // stale or bogus
  if (r.data1 > last_ack_) retries_ = 0;
  last_ack_ = r.data1;
  window_last_ = std::clamp<std::uint32_t>(r.data2, last_ack_, seg_count_);
  if (last_ack_ == seg_count_) {
    outcome_ = RmppOutcome::kDone;
    return;
  }
  if (window_last_ <= last_ack_) window_last_ = last_ack_ + 1;  // 13.6.3.2: at least one
  next_seg_ = std::max(next_seg_, last_ack_ + 1);
  deadline_ = now + cfg_.timeout_ns;
}

void RmppSender::on_deadline(TimeNs now) {
  if (outcome_ != RmppOutcome::kInProgress || now < deadline_) return;
  if (segments_sent_ == 0) {  // nothing sent yet: poll() sends the first segment
    deadline_ = now + cfg_.timeout_ns;
    return;
  }
  if (++retries_ > cfg_.retries_max) {
    outcome_ = RmppOutcome::kFailed;
    send_abort_ = true;
    return;
  }
  next_seg_ = last_ack_ + 1;  // resend the window
  deadline_ = now + cfg_.timeout_ns;
}

bool RmppReceiver::on_segment(std::span<const std::uint8_t> mad, const wire::RmppHeader& r) {
  if (mad.size() < wire::kMadBytes || r.type != wire::RmppType::kData) return false;
  if (outcome_ != RmppOutcome::kInProgress) return outcome_ == RmppOutcome::kDone;  // re-ACK
  if (window_last_ == 0) window_last_ = 1;
  if (r.data1 != expected_) return r.data1 != 0;  // duplicate or gap: ACK what we have
  if (r.data1 == 1) {
    if (!(r.flags & wire::kRmppFirst)) {
      outcome_ = RmppOutcome::kFailed;
      return false;
    }
    std::copy_n(mad.begin(), wire::kMadBytes, first_.begin());
  }
  const bool last = (r.flags & wire::kRmppLast) != 0;
  std::size_t n = kRmppSegmentDataBytes;
  if (last) {
    if (r.data2 < kRmppSegmentPayloadBytes - kRmppSegmentDataBytes ||
        r.data2 > kRmppSegmentPayloadBytes) {
      outcome_ = RmppOutcome::kFailed;
      return false;
    }
    n = r.data2 - (kRmppSegmentPayloadBytes - kRmppSegmentDataBytes);
  }
  if (expected_ > kRmppSegmentsMax) {
    outcome_ = RmppOutcome::kFailed;
    return false;
  }
  data_.insert(data_.end(), mad.begin() + kRmppSegmentHeaderBytes,
               mad.begin() + static_cast<std::ptrdiff_t>(kRmppSegmentHeaderBytes + n));
  ++expected_;
  if (last) {
    outcome_ = RmppOutcome::kDone;
    return true;
  }
  if (r.data1 >= window_last_) {
    window_last_ = r.data1 + cfg_.window_segments;
    return true;
  }
  return false;
}

void RmppReceiver::ack(std::span<const std::uint8_t> seg_mad,
                       std::array<std::uint8_t, wire::kMadBytes>& out) const {
  std::fill(out.begin(), out.end(), 0);
  std::copy_n(seg_mad.begin(), kRmppSegmentHeaderBytes, out.begin());
  out[3] ^= wire::kMethodResponseBit;  // as Linux's ib_mad does: the ACK flips R
  wire::RmppHeader r;
  r.version = wire::kRmppVersion;
  r.type = wire::RmppType::kAck;
  r.flags = wire::kRmppActive;
  r.data1 = expected_ - 1;
  r.data2 = outcome_ == RmppOutcome::kDone ? expected_ - 1 : std::max(window_last_, expected_);
  wire::encode_rmpp(r, out);
}

}  // namespace weft::cm
