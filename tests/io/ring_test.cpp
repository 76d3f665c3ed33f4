// tests/io/ring_test.cpp — the shared-memory SPSC record ring (src/io/shm/ring.hpp): records,
// wrap-around with skip records, back-pressure, the sleep handshake, and a two-thread stress run.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include <weft/types.hpp>

#include "src/io/shm/ring.hpp"

namespace weft::io::shm {
namespace {

struct Ring {
  explicit Ring(std::size_t cap) : data(cap), cap_bytes(cap) {
    shared.tail.store(0);
    shared.head.store(0);
    shared.consumer_sleeping.store(0);
    shared.producer_waiting.store(0);
    prod = RingProducer(&shared, data.data(), cap);
    cons = RingConsumer(&shared, data.data(), cap);
  }
  RingShared shared;
  std::vector<std::uint8_t> data;
  std::size_t cap_bytes;
  RingProducer prod;
  RingConsumer cons;
};

bool push(RingProducer& p, std::uint8_t fill, std::size_t n, RecordKind kind = RecordKind::kWire) {
  std::uint8_t* b = p.reserve(n);
  if (!b) return false;
  std::memset(b, fill, n);
  p.commit(n, kind, fill);
  return true;
}

TEST(Ring, RecordsComeOutInOrderWithTheirBytesKindAndFlags) {
  Ring r(4096);
  ASSERT_TRUE(push(r.prod, 1, 10));
  ASSERT_TRUE(push(r.prod, 2, 100, RecordKind::kByRef));
  EXPECT_EQ(r.cons.peek(), nullptr) << "nothing is visible before publish";
  EXPECT_FALSE(r.prod.publish());
  for (std::uint8_t k : {1, 2}) {
    const RecordHeader* h = r.cons.peek();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->bytes, k == 1 ? 10u : 100u);
    EXPECT_EQ(h->kind, k == 1 ? RecordKind::kWire : RecordKind::kByRef);
    // Expect: the caller's flags, and the ring's kFlagBatchEnd on the batch's last record only.
    EXPECT_EQ(h->flags, k == 2 ? k | kFlagBatchEnd : k);
    for (std::uint32_t i = 0; i < h->bytes; ++i) ASSERT_EQ(RingConsumer::body(h)[i], k);
    r.cons.pop();
  }
  EXPECT_EQ(r.cons.peek(), nullptr);
}

// Each publish marks its batch's last record (kFlagBatchEnd), whether the batch is one record
// (its header is the one publish releases), several, or starts with a kSkip at the wrap; a
// consumer that stops at the mark has taken exactly one batch.
TEST(Ring, EachBatchMarksItsLastRecordOnly) {
  Ring r(4096);
  std::size_t seen = 0;
  for (int round = 0; round < 60; ++round) {
    const int batch = 1 + round % 4;
    for (int k = 0; k < batch; ++k) ASSERT_TRUE(push(r.prod, static_cast<std::uint8_t>(k), 200));
    r.prod.publish();
    for (int k = 0; k < batch; ++k) {
      const RecordHeader* h = r.cons.peek();
      ASSERT_NE(h, nullptr) << "round " << round;
      EXPECT_EQ((h->flags & kFlagBatchEnd) != 0, k + 1 == batch) << "round " << round << " k " << k;
      EXPECT_EQ(h->flags & ~kFlagBatchEnd, k);
      r.cons.pop();
      ++seen;
    }
    EXPECT_EQ(r.cons.peek(), nullptr);
    r.cons.release();
  }
  EXPECT_EQ(seen, 150u);  // 15 rounds of 1+2+3+4, past several wraps of the 4 KiB ring
}

TEST(Ring, FullRingRefusesUntilTheConsumerReleases) {
  Ring r(4096);
  int pushed = 0;
  while (push(r.prod, 7, 952)) ++pushed;
  EXPECT_EQ(pushed, 4);  // 4 x (8 + 952) + 8 (the zero header) fits in 4096, a fifth does not
  r.prod.publish();
  r.cons.peek();
  r.cons.pop();
  r.cons.release();
  // The fifth needs a 256-byte skip at the end, its 960 bytes and the 8-byte zero header after
  // it: 8 more than one freed record (960-byte records: whole cache lines, kRecordAlign).
  EXPECT_FALSE(push(r.prod, 7, 952)) << "one record freed: 8 bytes short";
  r.cons.peek();
  r.cons.pop();
  EXPECT_FALSE(push(r.prod, 7, 952)) << "popped but not released: the bytes are not free yet";
  EXPECT_FALSE(r.cons.release()) << "nobody waits: no doorbell";
  EXPECT_TRUE(push(r.prod, 7, 952));
}

TEST(Ring, ProducerWaitingForSpaceIsWokenOnceByTheRelease) {
  Ring r(4096);
  while (push(r.prod, 7, 952)) {
  }
  r.prod.publish();
  const std::uint64_t head = r.prod.wait_for_consumer();
  EXPECT_EQ(head, 0u);
  EXPECT_FALSE(push(r.prod, 7, 952)) << "still full after the announcement";
  EXPECT_FALSE(r.cons.release()) << "nothing popped: head unchanged, no doorbell";
  for (int k = 0; k < 2; ++k) {  // two records make room for a wrapped one (see above)
    r.cons.peek();
    r.cons.pop();
  }
  EXPECT_TRUE(r.cons.release()) << "the waiting producer must be rung";
  EXPECT_EQ(r.shared.producer_waiting.load(), 0u) << "the flag is consumed by the wake-up";
  EXPECT_EQ(r.prod.consumed(), 1920u);
  EXPECT_TRUE(push(r.prod, 7, 952));
  r.prod.publish();
  r.cons.peek();
  r.cons.pop();
  EXPECT_FALSE(r.cons.release()) << "a second release wakes no one";
}

TEST(Ring, RecordsNeverWrapASkipRecordFillsTheEnd) {
  Ring r(4096);
  for (int round = 0; round < 50; ++round) {
    const std::size_t n = 300 + static_cast<std::size_t>(round) * 37 % 700;
    ASSERT_TRUE(push(r.prod, static_cast<std::uint8_t>(round), n)) << round;
    r.prod.publish();
    const RecordHeader* h = r.cons.peek();
    ASSERT_NE(h, nullptr);
    ASSERT_EQ(h->bytes, n);
    const auto* body = RingConsumer::body(h);
    ASSERT_LE(body + n, r.data.data() + r.data.size()) << "a record ran past the end";
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(body[i], round);
    r.cons.pop();
    r.cons.release();
  }
}

TEST(Ring, StaleBytesThatLookLikeHeadersAreNeverRead) {
  // Bodies full of valid-looking header words (what a previous lap leaves behind): the consumer
  // must see exactly the records published, in every alignment the sizes produce, lap after lap.
  Ring r(4096);
  const RecordHeader fake{8, RecordKind::kWire, 0x55};
  std::uint64_t word;
  std::memcpy(&word, &fake, sizeof word);
  for (int round = 0; round < 400; ++round) {
    const int batch = 1 + round % 3;
    for (int k = 0; k < batch; ++k) {
      const std::size_t n = 8 + static_cast<std::size_t>(round * 7 + k * 13) % 120 * 8;
      std::uint8_t* b = r.prod.reserve(n);
      ASSERT_NE(b, nullptr) << round;
      for (std::size_t i = 0; i < n; i += 8) std::memcpy(b + i, &word, 8);
      r.prod.commit(n, RecordKind::kByRef, static_cast<std::uint16_t>(k));
    }
    EXPECT_EQ(r.cons.peek(), nullptr) << "round " << round << ": nothing before publish";
    r.prod.publish();
    for (int k = 0; k < batch; ++k) {
      const RecordHeader* h = r.cons.peek();
      ASSERT_NE(h, nullptr) << "round " << round;
      ASSERT_EQ(h->kind, RecordKind::kByRef) << "round " << round;
      ASSERT_EQ(h->flags, k + 1 == batch ? k | kFlagBatchEnd : k) << "round " << round;
      r.cons.pop();
    }
    ASSERT_EQ(r.cons.peek(), nullptr) << "round " << round << ": a stale record appeared";
    ASSERT_TRUE(r.cons.empty());
    r.cons.release();
  }
}

TEST(Ring, HeadersAreZeroedAheadOnlyOverFreeSpace) {
  // The producer zeroes header words past its tail after each publish (kZeroAheadBytes), so a
  // later batch needs no zero store of its own. Expect, after every publish, lap after lap with
  // the consumer lagging by a random amount: every line start in [tail, zeroed_until) reads
  // zero, zeroed_until never reaches past the space the consumer has freed, and every record
  // not consumed yet keeps its bytes (the zeroing never lands on one).
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("SEED=" + std::to_string(seed));
    Ring r(8192);
    SeededRng rng(seed);
    std::vector<std::pair<std::uint8_t, std::size_t>> queued;  // (fill, bytes) not consumed yet
    std::uint64_t released = 0;
    std::uint8_t fill = 1;
    for (int round = 0; round < 2000; ++round) {
      const int batch = 1 + static_cast<int>(rng.below(4));
      for (int k = 0; k < batch; ++k) {
        const std::size_t n = 8 + rng.below(rng.below(4) == 0 ? 1500 : 60);
        if (!push(r.prod, fill, n)) break;
        queued.emplace_back(fill, n);
        fill = static_cast<std::uint8_t>(fill % 250 + 1);
      }
      r.prod.publish();
      const std::uint64_t tail = r.prod.tail();
      ASSERT_LE(r.prod.zeroed_until(), released + r.cap_bytes) << "round " << round;
      for (std::uint64_t i = tail; i < r.prod.zeroed_until(); i += kRecordAlign) {
        std::uint64_t w;
        std::memcpy(&w, r.data.data() + (i & (r.cap_bytes - 1)), sizeof w);
        ASSERT_EQ(w, 0u) << "round " << round << " line " << i;
      }
      // Consume some (or none) of what is queued, checking every byte; release now and then.
      std::size_t take = rng.below(queued.size() + 1);
      for (std::size_t q = 0; q < take; ++q) {
        const RecordHeader* h = r.cons.peek();
        ASSERT_NE(h, nullptr) << "round " << round;
        ASSERT_EQ(h->bytes, queued[q].second) << "round " << round;
        for (std::uint32_t i = 0; i < h->bytes; ++i)
          ASSERT_EQ(RingConsumer::body(h)[i], queued[q].first)
              << "round " << round << " byte " << i;
        r.cons.pop();
      }
      queued.erase(queued.begin(), queued.begin() + static_cast<std::ptrdiff_t>(take));
      if (rng.below(3) != 0) {
        r.cons.release();
        released = r.shared.head.load();
      }
      if (queued.empty()) {
        ASSERT_EQ(r.cons.peek(), nullptr) << "round " << round;
      }
    }
  }
}

TEST(Ring, SleepHandshakeNeverLosesAWakeup) {
  Ring r(4096);
  ASSERT_TRUE(r.cons.prepare_sleep()) << "empty ring: the consumer may sleep";
  ASSERT_TRUE(push(r.prod, 1, 8));
  EXPECT_TRUE(r.prod.publish()) << "the consumer sleeps: the producer must ring it";
  EXPECT_EQ(r.shared.consumer_sleeping.load(), 0u) << "one ring per sleep";
  ASSERT_TRUE(push(r.prod, 1, 8));
  EXPECT_FALSE(r.prod.publish()) << "nobody sleeps any more: no doorbell";
  EXPECT_FALSE(r.cons.prepare_sleep()) << "records are waiting: do not sleep";
}

struct StressCase {
  std::size_t cap, body_max;
};
class RingStress : public ::testing::TestWithParam<StressCase> {};

TEST_P(RingStress, TwoThreadsKeepEveryByte) {
  const StressCase c = GetParam();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("SEED=" + std::to_string(seed));
    Ring r(c.cap);
    constexpr int kRecords = 30000;
    std::thread producer([&] {
      SeededRng rng(seed);
      for (int i = 0; i < kRecords; ++i) {
        const std::size_t n = 1 + rng.below(c.body_max);
        std::uint8_t* b;
        while (!(b = r.prod.reserve(n))) {
          r.prod.publish();
          std::this_thread::yield();
        }
        for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::uint8_t>(i + k);
        r.prod.commit(n, RecordKind::kWire);
        if (i % 7 == 0) r.prod.publish();
      }
      r.prod.publish();
    });
    SeededRng rng(seed);
    for (int i = 0; i < kRecords; ++i) {
      const std::size_t n = 1 + rng.below(c.body_max);
      const RecordHeader* h;
      while (!(h = r.cons.peek())) {
        r.cons.release();  // a producer may be waiting for the space of what we popped
        std::this_thread::yield();
      }
      ASSERT_EQ(h->bytes, n) << "record " << i;
      const auto* b = RingConsumer::body(h);
      for (std::size_t k = 0; k < n; ++k)
        ASSERT_EQ(b[k], static_cast<std::uint8_t>(i + k)) << "record " << i << " byte " << k;
      r.cons.pop();
      if (i % 5 == 0) r.cons.release();
    }
    r.cons.release();
    producer.join();
  }
}
// A roomy ring, and a small one that is full and wraps all the time.
INSTANTIATE_TEST_SUITE_P(Sizes, RingStress,
                         ::testing::Values(StressCase{1 << 16, 2000}, StressCase{4096, 1000}));

}  // namespace
}  // namespace weft::io::shm
