// base/spsc_ring.hpp — bounded single-producer single-consumer ring of fixed-size slots.
// The producer alone writes head_ (release) and reads tail_ (acquire); the consumer alone writes
// tail_ (release) and reads head_ (acquire). Capacity is a power of two.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace weft::base {

class SpscRing {
 public:
  SpscRing(std::size_t slots_pow2, std::size_t slot_bytes)
      : mask_(slots_pow2 - 1), slot_bytes_(slot_bytes), data_(slots_pow2 * slot_bytes) {}

  bool push(const void* src, std::size_t len) {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) > mask_ || len > slot_bytes_) return false;
    std::memcpy(&data_[(head & mask_) * slot_bytes_], src, len);
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  bool pop(void* dst, std::size_t len) {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_.load(std::memory_order_acquire)) return false;
    std::memcpy(dst, &data_[(tail & mask_) * slot_bytes_], len);
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

 private:
  const std::uint64_t mask_;
  const std::size_t slot_bytes_;
  std::vector<std::uint8_t> data_;
  alignas(64) std::atomic<std::uint64_t> head_{0};
  alignas(64) std::atomic<std::uint64_t> tail_{0};
};

}  // namespace weft::base
