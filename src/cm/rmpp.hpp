// cm/rmpp.hpp — the Reliable Multi-Packet Protocol (IBA 13.6): the two ends of one multi-segment
// transfer, as sans-IO engines. Used for SA GetTableResp (emu/sa sends, SaClient receives).
//
// A transfer carries `data` split into 200-byte segments; every segment repeats the MAD bytes
// 0-55 of a template (common header, and for the SA its 20-byte class header at 36-55) with its
// own RMPP header (24-35). PayloadLength counts, as IBA 13.6.2.3 and Linux do, the bytes after
// the RMPP header: 220 per segment, minus the last segment's padding.
//
// RmppSender (13.6.3.2, simplified): sends segments up to the receiver's window (1 until the
// first ACK), resends from the last acknowledged segment on time-out, gives up with ABORT
// (TooManyRetries) after retries_max time-outs in a row, stops on STOP/ABORT.
// RmppReceiver (13.6.3.3): accepts segments in order, ACKs the last in-order segment at the
// end of each window, on the last segment and on every duplicate or out-of-order segment.
// Thread-safety: none; one owner.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <weft/types.hpp>

#include "src/wire/gmp.hpp"
#include "src/wire/mad.hpp"

namespace weft::cm {

inline constexpr std::size_t kRmppSegmentHeaderBytes = 56;  // template bytes repeated per segment
inline constexpr std::size_t kRmppSegmentDataBytes = wire::kMadBytes - kRmppSegmentHeaderBytes;
inline constexpr std::size_t kRmppSegmentPayloadBytes = 220;  // what PayloadLength counts
inline constexpr std::uint32_t kRmppSegmentsMax = 4096;       // ~800 KiB of records
static_assert(kRmppSegmentDataBytes == 200);

struct RmppConfig {
  TimeNs timeout_ns = 1'000'000;  // per window without an ACK
  int retries_max = 8;
  std::uint32_t window_segments = 16;  // the receiver's window (NewWindowLast - last ACKed)
};

enum class RmppOutcome : std::uint8_t { kInProgress, kDone, kFailed };

class RmppSender {
 public:
  // `tmpl`: bytes 0-55 are copied into each segment (RMPP header overwritten).
  RmppSender(const std::array<std::uint8_t, wire::kMadBytes>& tmpl, std::vector<std::uint8_t> data,
             RmppConfig cfg, TimeNs now);
  std::uint32_t segments() const { return seg_count_; }
  // Segments or an ABORT to send now. Returns false when there is nothing.
  bool poll(TimeNs now, std::array<std::uint8_t, wire::kMadBytes>& out);
  // An ACK/STOP/ABORT from the receiver for this transfer.
  void on_rmpp(const wire::RmppHeader& r, TimeNs now);
  TimeNs next_deadline() const {
    return outcome_ == RmppOutcome::kInProgress ? deadline_ : kNoDeadline;
  }
  void on_deadline(TimeNs now);
  RmppOutcome outcome() const { return outcome_; }
  std::uint64_t segments_sent() const { return segments_sent_; }  // retransmissions included

 private:
  void build(std::uint32_t seg, std::array<std::uint8_t, wire::kMadBytes>& out) const;
  std::array<std::uint8_t, wire::kMadBytes> tmpl_;
  std::vector<std::uint8_t> data_;
  RmppConfig cfg_;
  std::uint32_t seg_count_ = 1;
  std::uint32_t last_ack_ = 0;     // segments 1..last_ack_ acknowledged
  std::uint32_t next_seg_ = 1;     // next to send
  std::uint32_t window_last_ = 1;  // may send up to this segment
  int retries_ = 0;
  bool send_abort_ = false;
  TimeNs deadline_ = kNoDeadline;
  RmppOutcome outcome_ = RmppOutcome::kInProgress;
  std::uint64_t segments_sent_ = 0;
};

class RmppReceiver {
 public:
  explicit RmppReceiver(RmppConfig cfg) : cfg_(cfg) {}
  // A DATA segment of this transfer. Returns true when an ACK should be sent now (ack() builds
  // it from the segment's own bytes, so it carries the same header and TID).
  bool on_segment(std::span<const std::uint8_t> mad, const wire::RmppHeader& r);
  // The ACK answering `seg_mad` (the segment just received): method and TID kept.
  void ack(std::span<const std::uint8_t> seg_mad,
           std::array<std::uint8_t, wire::kMadBytes>& out) const;
  RmppOutcome outcome() const { return outcome_; }
  // The reassembled data (valid when kDone), and the first segment's bytes 0-55.
  const std::vector<std::uint8_t>& data() const { return data_; }
  const std::array<std::uint8_t, wire::kMadBytes>& first() const { return first_; }

 private:
  RmppConfig cfg_;
  std::uint32_t expected_ = 1;
  std::uint32_t window_last_ = 0;
  std::vector<std::uint8_t> data_;
  std::array<std::uint8_t, wire::kMadBytes> first_{};
  RmppOutcome outcome_ = RmppOutcome::kInProgress;
};

}  // namespace weft::cm
