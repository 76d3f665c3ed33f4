// emu/fabric/fifo.hpp — a compact FIFO for the fabric's per-port queues.
//
// Why: a fabric of 11,664 HCAs holds hundreds of thousands of per-port per-VL queues that are
// almost always empty. std::deque allocates its map and a 512-byte chunk as soon as it exists
// (libstdc++), ~600 bytes per empty queue; this ring allocates nothing until the first push and
// is 16 bytes when empty. Capacity doubles as needed and never shrinks (queues of a busy port
// stay warm). Elements must be trivially copyable (packet indices, small records).
// Thread-safety: none.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

namespace weft::fabric {

template <typename T>
class Fifo {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  Fifo() = default;
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
  Fifo(Fifo&& o) noexcept : buf_(std::move(o.buf_)), cap_(o.cap_), head_(o.head_), size_(o.size_) {
    o.cap_ = o.head_ = o.size_ = 0;
  }
  Fifo& operator=(Fifo&& o) noexcept {
    buf_ = std::move(o.buf_);
    cap_ = o.cap_;
    head_ = o.head_;
    size_ = o.size_;
    o.cap_ = o.head_ = o.size_ = 0;
    return *this;
  }

  bool empty() const { return size_ == 0; }
  std::uint32_t size() const { return size_; }
  std::uint32_t capacity() const { return cap_; }
  // i-th element from the front.
  T& operator[](std::uint32_t i) { return buf_[(head_ + i) & (cap_ - 1)]; }
  const T& operator[](std::uint32_t i) const { return buf_[(head_ + i) & (cap_ - 1)]; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(const T& v) {
    if (size_ == cap_) grow();
    buf_[(head_ + size_) & (cap_ - 1)] = v;
    size_++;
  }
  void pop_front() {
    assert(size_ > 0);
    head_ = (head_ + 1) & (cap_ - 1);
    size_--;
  }
  void pop_back() {
    assert(size_ > 0);
    size_--;
  }
  // Removes the i-th element, keeping the order of the others.
  void erase_at(std::uint32_t i) {
    assert(i < size_);
    for (std::uint32_t k = i; k + 1 < size_; ++k) (*this)[k] = (*this)[k + 1];
    size_--;
  }
  void clear() { head_ = size_ = 0; }
  std::size_t memory_bytes() const { return cap_ * sizeof(T); }

 private:
  void grow() {
    const std::uint32_t cap = cap_ == 0 ? 4 : cap_ * 2;
    std::unique_ptr<T[]> b(new T[cap]);
    for (std::uint32_t k = 0; k < size_; ++k) b[k] = (*this)[k];
    buf_ = std::move(b);
    cap_ = cap;
    head_ = 0;
  }

  std::unique_ptr<T[]> buf_;
  std::uint32_t cap_ = 0, head_ = 0, size_ = 0;
};

}  // namespace weft::fabric
