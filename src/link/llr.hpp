// link/llr.hpp — optional link-level retransmission (LLR): go-back-N over one link direction,
// with the link's own 12-bit sequence numbers.
//
// The IBA has no link-level retransmission: a packet that fails its VCRC is dropped (IBA 7.8.2)
// and the transport retransmits end to end. Vendors add LLR for long or noisy links; this is
// Weft's small model of it, shaped like the PCIe data link layer: a replay buffer at the
// sender, cumulative ACKs, a NAK naming the first missing sequence number, and a replay timer
// for when the NAK itself is lost. It sits below credits (credit.hpp): a replayed packet is not
// sent again as far as FCTBS is concerned, and the receiver counts a packet in ABR only when
// LlrReceiver says kDeliver (never a corrupt copy or a duplicate, which would inflate FCCL).
//
// The caller keeps each packet's bytes until LlrSender releases its id. Sans-IO: calls take
// `now`; next_deadline()/on_deadline(now) drive the replay timer. Thread-safety: single-owner.
#pragma once

#include <cstdint>
#include <deque>
#include <string_view>

#include <weft/types.hpp>

namespace weft::link {

inline constexpr std::uint16_t kLlrSeqModulus = 4096;      // 12-bit sequence numbers
inline constexpr std::size_t kLlrWindowPacketsMax = 2047;  // < half the sequence space

struct LlrConfig {
  std::size_t window_packets = 64;       // replay buffer, <= kLlrWindowPacketsMax
  TimeNs replay_timeout_ns = 20'000;     // no ACK progress for this long: replay from the oldest
  std::uint32_t replay_rounds_max = 16;  // replays without progress before the link is failed
};

struct LlrStats {
  std::uint64_t sent = 0;
  std::uint64_t replayed = 0;  // packets sent again
  std::uint64_t naks = 0;
  std::uint64_t timeouts = 0;
};

// One packet to put on the wire: the caller's id and the LLR sequence number to carry.
struct LlrSend {
  std::uint64_t id = 0;
  std::uint16_t seq = 0;
};

class LlrSender {
 public:
  explicit LlrSender(const LlrConfig& config = {});

  // A new packet may be accepted (the replay buffer has room).
  bool can_send() const { return buffer_.size() < config_.window_packets; }
  // Takes a new packet into the replay buffer; it goes out through poll_send. Requires can_send.
  void push(std::uint64_t id, TimeNs now);
  // The next packet to put on the wire, new or replayed, or false.
  bool poll_send(TimeNs now, LlrSend& out);
  // Cumulative ACK of `seq` and everything before it.
  void on_ack(std::uint16_t seq, TimeNs now);
  // NAK: the receiver is missing `seq`; everything from it on is sent again (go-back-N).
  void on_nak(std::uint16_t seq, TimeNs now);
  // Ids the receiver has acknowledged, oldest first: the caller may free their bytes.
  bool poll_released(std::uint64_t& id);

  TimeNs next_deadline() const;
  void on_deadline(TimeNs now);
  // Too many replay rounds without progress: the link should be retrained (its state is kept).
  bool failed() const { return failed_; }
  std::size_t in_flight() const { return buffer_.size(); }
  const LlrStats& stats() const { return stats_; }

 private:
  // Index of `seq` counted from the oldest unacknowledged packet (buffer_.size() is the next
  // seq to be pushed), or SIZE_MAX outside that window (a stale or garbled ACK/NAK).
  std::size_t index_of(std::uint16_t seq) const;
  void release_before(std::size_t index, TimeNs now);
  void rewind(std::size_t index);

  LlrConfig config_;
  std::deque<LlrSend> buffer_;  // unacknowledged, oldest first; seqs consecutive
  std::size_t cursor_ = 0;      // next index of buffer_ to put on the wire
  std::size_t high_sent_ = 0;   // indexes below this went out at least once
  std::uint16_t next_seq_ = 0;
  std::deque<std::uint64_t> released_;
  TimeNs progress_ns_ = 0;  // last ACK progress (or first send after idle)
  std::uint32_t rounds_without_progress_ = 0;
  bool failed_ = false;
  LlrStats stats_;
};

enum class LlrVerdict : std::uint8_t {
  kDeliver,     // in order and intact: pass it up (and count it in ABR)
  kDuplicate,   // already delivered: drop, re-ACK
  kOutOfOrder,  // a packet before it is missing: drop, NAK once
  kCorrupt,     // failed its CRC: drop, NAK once
};
std::string_view to_string(LlrVerdict v);

struct LlrControl {
  bool nak = false;
  std::uint16_t seq = 0;  // ACK: last delivered; NAK: first missing
  friend bool operator==(const LlrControl&, const LlrControl&) = default;
};

class LlrReceiver {
 public:
  // A packet carrying `seq` arrived; `intact` is the outcome of its CRC checks (when false,
  // `seq` is not trusted).
  LlrVerdict on_packet(std::uint16_t seq, bool intact);
  // The ACK or NAK to send now, if any (ACKs coalesce: one covers all delivered so far).
  bool poll_control(LlrControl& out);
  std::uint16_t expected_seq() const { return expected_; }

 private:
  std::uint16_t expected_ = 0;
  bool ack_pending_ = false;
  bool nak_pending_ = false;
  bool nak_sent_ = false;  // a NAK for expected_ is out: do not repeat it for each later packet
};

}  // namespace weft::link
