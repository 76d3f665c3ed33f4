// Link-level retransmission (go-back-N): exact exchanges, then a seeded property run over a link
// that corrupts and loses packets, with credits on top.
#include "src/link/llr.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "src/link/credit.hpp"
#include <weft/types.hpp>

namespace weft::link {
namespace {

std::vector<std::uint16_t> send_all(LlrSender& s, TimeNs now) {
  std::vector<std::uint16_t> seqs;
  LlrSend out;
  while (s.poll_send(now, out)) seqs.push_back(out.seq);
  return seqs;
}

std::vector<std::uint64_t> released(LlrSender& s) {
  std::vector<std::uint64_t> ids;
  std::uint64_t id;
  while (s.poll_released(id)) ids.push_back(id);
  return ids;
}

TEST(Llr, NakRewindsToTheFirstMissingPacket) {
  LlrSender s;
  LlrReceiver r;
  for (std::uint64_t id = 100; id < 105; ++id) s.push(id, 0);
  EXPECT_EQ(send_all(s, 0), (std::vector<std::uint16_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.on_packet(0, true), LlrVerdict::kDeliver);
  EXPECT_EQ(r.on_packet(1, true), LlrVerdict::kDeliver);
  LlrControl c;
  ASSERT_TRUE(r.poll_control(c));
  EXPECT_EQ(c, (LlrControl{false, 1}));  // Expect: ACK 1
  EXPECT_EQ(r.on_packet(2, false), LlrVerdict::kCorrupt);
  EXPECT_EQ(r.on_packet(3, true), LlrVerdict::kOutOfOrder);
  EXPECT_EQ(r.on_packet(4, true), LlrVerdict::kOutOfOrder);
  ASSERT_TRUE(r.poll_control(c));
  EXPECT_EQ(c, (LlrControl{true, 2}));  // Expect: one NAK 2, no more
  EXPECT_FALSE(r.poll_control(c));

  s.on_ack(1, 10);
  EXPECT_EQ(released(s), (std::vector<std::uint64_t>{100, 101}));
  s.on_nak(2, 20);
  EXPECT_EQ(send_all(s, 20), (std::vector<std::uint16_t>{2, 3, 4}));
  EXPECT_EQ(s.stats().replayed, 3u);
  EXPECT_EQ(s.stats().sent, 5u);
  for (std::uint16_t q = 2; q < 5; ++q) EXPECT_EQ(r.on_packet(q, true), LlrVerdict::kDeliver);
  ASSERT_TRUE(r.poll_control(c));
  EXPECT_EQ(c, (LlrControl{false, 4}));
  s.on_ack(4, 30);
  EXPECT_EQ(released(s), (std::vector<std::uint64_t>{102, 103, 104}));
  EXPECT_EQ(s.in_flight(), 0u);
  EXPECT_EQ(s.next_deadline(), kNoDeadline);
}

TEST(Llr, DuplicateIsReAcked) {
  LlrReceiver r;
  EXPECT_EQ(r.on_packet(0, true), LlrVerdict::kDeliver);
  LlrControl c;
  ASSERT_TRUE(r.poll_control(c));
  EXPECT_EQ(r.on_packet(0, true), LlrVerdict::kDuplicate);
  ASSERT_TRUE(r.poll_control(c));
  EXPECT_EQ(c, (LlrControl{false, 0}));
}

TEST(Llr, TimeoutReplaysAndFailsAfterTooManyRounds) {
  LlrConfig cfg;
  cfg.replay_timeout_ns = 1000;
  cfg.replay_rounds_max = 3;
  LlrSender s(cfg);
  s.push(7, 500);
  EXPECT_EQ(s.next_deadline(), kNoDeadline);  // nothing on the wire yet
  EXPECT_EQ(send_all(s, 500), (std::vector<std::uint16_t>{0}));
  EXPECT_EQ(s.next_deadline(), 1500u);
  s.on_deadline(1499);
  EXPECT_EQ(s.stats().timeouts, 0u);
  TimeNs now = 1500;
  for (int round = 1; round <= 4; ++round) {
    s.on_deadline(now);
    EXPECT_EQ(send_all(s, now), (std::vector<std::uint16_t>{0}));
    EXPECT_EQ(s.failed(), round > 3) << round;
    now = s.next_deadline();
  }
  s.on_ack(0, now);
  EXPECT_EQ(released(s), (std::vector<std::uint64_t>{7}));
}

TEST(Llr, StaleAckAndNakAreIgnored) {
  LlrSender s;
  for (int i = 0; i < 3; ++i) s.push(static_cast<std::uint64_t>(i), 0);
  send_all(s, 0);
  s.on_ack(2, 1);
  EXPECT_EQ(released(s).size(), 3u);
  s.push(3, 2);
  send_all(s, 2);
  s.on_nak(1, 3);  // delayed NAK from before the ACK
  s.on_ack(0, 3);  // delayed ACK
  EXPECT_TRUE(released(s).empty());
  EXPECT_EQ(s.in_flight(), 1u);
  LlrSend out;
  EXPECT_FALSE(s.poll_send(3, out));  // no rewind happened
}

TEST(Llr, WindowBoundsTheReplayBuffer) {
  LlrConfig cfg;
  cfg.window_packets = 4;
  LlrSender s(cfg);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(s.can_send());
    s.push(static_cast<std::uint64_t>(i), 0);
  }
  EXPECT_FALSE(s.can_send());
}

// ---- property run ---------------------------------------------------------------------------
enum class Kind : std::uint8_t { kData, kLlrControl, kFc };
struct Frame {
  TimeNs arrive_ns;
  Kind kind;
  LlrSend data;
  bool intact;
  std::uint32_t bytes;
  LlrControl ctl;
  FcPacket fc;
};

void run_seed(std::uint64_t seed, LlrStats& total) {
  SCOPED_TRACE("seed=" + std::to_string(seed));
  SeededRng rng(seed);
  constexpr std::uint64_t kPackets = 12000;  // wraps the 12-bit sequence space twice
  constexpr TimeNs kTickNs = 20, kLatencyNs = 500, kRunNsMax = 200'000'000;
  const double corrupt_p = rng.unit() * 0.05, lost_p = rng.unit() * 0.02,
               ctl_loss_p = rng.unit() * 0.2, drain_p = 0.05 + rng.unit() * 0.5;

  LlrConfig cfg;
  cfg.window_packets = 16 + rng.below(100);
  cfg.replay_timeout_ns = 5'000;
  cfg.replay_rounds_max = 1000;
  LlrSender tx(cfg);
  LlrReceiver rx;
  std::array<std::uint32_t, kVlCount> buf{};
  buf[0] = 8192 + static_cast<std::uint32_t>(rng.below(32768));
  CreditSender credit_tx;
  CreditReceiver credit_rx(buf);
  credit_rx.set_abr_resync(false);
  credit_tx.on_fc_packet(credit_rx.make_fc_packet(0));

  std::vector<std::uint32_t> size_of;  // by id
  std::deque<Frame> fwd, back;
  std::deque<std::uint32_t> rx_buffer;
  std::uint64_t next_id = 0, delivered = 0;
  TimeNs busy_until = 0, now = 0;
  for (; now < kRunNsMax && delivered < kPackets; now += kTickNs) {
    if (next_id < kPackets && tx.can_send()) {
      std::uint32_t bytes = static_cast<std::uint32_t>(26 + rng.below(4200));
      if (credit_tx.can_send(0, bytes)) {
        credit_tx.on_sent(0, bytes);  // counted once, when first committed to the link
        size_of.push_back(bytes);
        tx.push(next_id++, now);
      }
    }
    tx.on_deadline(now);
    LlrSend s;
    if (now >= busy_until && tx.poll_send(now, s)) {
      busy_until = now + 10 + size_of[s.id] / 50;
      if (!rng.chance(lost_p))
        fwd.push_back({busy_until + kLatencyNs,
                       Kind::kData,
                       s,
                       !rng.chance(corrupt_p),
                       size_of[s.id],
                       {},
                       {}});
    }
    while (!fwd.empty() && fwd.front().arrive_ns <= now) {
      Frame f = fwd.front();
      fwd.pop_front();
      LlrVerdict v = rx.on_packet(f.data.seq, f.intact);
      if (v == LlrVerdict::kDeliver) {
        ASSERT_EQ(f.data.id, delivered) << "out of order or duplicate delivery";
        ++delivered;
        ASSERT_EQ(credit_rx.on_packet_arrived(0, f.bytes), Arrival::kAccepted) << "overflow";
        rx_buffer.push_back(f.bytes);
      }
    }
    if (!rx_buffer.empty() && rng.chance(drain_p)) {
      credit_rx.on_packet_drained(0, rx_buffer.front());
      rx_buffer.pop_front();
      if (!rng.chance(ctl_loss_p))
        back.push_back({now + kLatencyNs, Kind::kFc, {}, true, 0, {}, credit_rx.make_fc_packet(0)});
    }
    LlrControl c;
    while (rx.poll_control(c))
      if (!rng.chance(ctl_loss_p))
        back.push_back({now + kLatencyNs, Kind::kLlrControl, {}, true, 0, c, {}});
    // A periodic FC packet, as CreditPort would send, so lost ones are made good.
    if (now % 5000 == 0)
      back.push_back({now + kLatencyNs, Kind::kFc, {}, true, 0, {}, credit_rx.make_fc_packet(0)});
    while (!back.empty() && back.front().arrive_ns <= now) {
      Frame f = back.front();
      back.pop_front();
      if (f.kind == Kind::kFc)
        credit_tx.on_fc_packet(f.fc);
      else if (f.ctl.nak)
        tx.on_nak(f.ctl.seq, now);
      else
        tx.on_ack(f.ctl.seq, now);
    }
    std::uint64_t id;
    while (tx.poll_released(id)) {
    }
  }
  EXPECT_EQ(delivered, kPackets) << "stalled at " << now << " ns";
  EXPECT_FALSE(tx.failed());
  EXPECT_EQ(credit_rx.stats().overflows, 0u);
  total.sent += tx.stats().sent;
  total.replayed += tx.stats().replayed;
  total.naks += tx.stats().naks;
  total.timeouts += tx.stats().timeouts;
}

TEST(LlrProperty, LossyLinkDeliversEverythingOnceInOrder) {
  LlrStats total;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    run_seed(seed, total);
    if (HasFatalFailure()) return;
  }
  // The run must have exercised every recovery path.
  EXPECT_EQ(total.sent, 8 * 12000u);
  EXPECT_GT(total.replayed, 1000u);
  EXPECT_GT(total.naks, 100u);
  EXPECT_GT(total.timeouts, 10u);
  std::printf("sent %lu replayed %lu naks %lu timeouts %lu\n", (unsigned long)total.sent,
              (unsigned long)total.replayed, (unsigned long)total.naks,
              (unsigned long)total.timeouts);
}

}  // namespace
}  // namespace weft::link
