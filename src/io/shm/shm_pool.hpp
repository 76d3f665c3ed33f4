// io/shm/shm_pool.hpp — Weft's shared-memory allocator: buffers carved from a memfd segment that
// the peer of a direct link maps too, so a WRITE, READ response or SEND between two such buffers
// is one plain memcpy by the receiving process, with no system call (no process_vm_readv).
//
// Use (weft perf --shm-buffers does this): each side creates a ShmPool, allocates its buffers
// from it and registers them (Device::reg_mr) as any memory; then DirectNode::share_pool(pool)
// hands the segment to the peer, whose DirectNode::accept_pool() maps it and answers. From then
// on a packet whose payload lies in a shared pool travels by reference (only its headers on the
// ring, as zero copy), and the receiver copies the payload out of its own mapping of the pool.
// This works also where cross-memory attach is denied (seccomp, Yama): no ptrace check applies
// to a mapping both processes hold.
//
// The segment is a memfd (memfd_create(2)), never a /dev/shm name: nothing is left in the file
// system, and the memory goes when the last process holding the fd or a mapping exits.
// Both sides map the pool populated (MAP_POPULATE): its memory is allocated and faulted in when
// it is created or mapped, not on a transfer's first touch.
// The allocator is first fit over page-granular blocks (kPoolAlignBytes), coalescing on free.
// Thread-safety: none; one owner thread (the Driver's, in inline mode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace weft::io::shm {

inline constexpr std::size_t kPoolAlignBytes = 4096;  // every block starts and ends on a page
inline constexpr std::size_t kPoolBytesMax = std::size_t{1} << 36;

class ShmPool {
 public:
  ~ShmPool();
  ShmPool(const ShmPool&) = delete;
  ShmPool& operator=(const ShmPool&) = delete;

  // A fresh pool of `bytes` (rounded up to kPoolAlignBytes); nullptr when memfd_create, ftruncate
  // or mmap fails (errno says why) or bytes is 0 or above kPoolBytesMax.
  static std::unique_ptr<ShmPool> create(std::size_t bytes);
  // Maps a pool the peer created (fd owned by the pool from here on); nullptr on failure.
  static std::unique_ptr<ShmPool> map(int fd, std::size_t bytes);

  // A block of at least `bytes` (rounded up to kPoolAlignBytes), page aligned (a fresh pool reads
  // zero; a block given back and taken again keeps its bytes); nullptr when no free block is large
  // enough. Only for pools made by create().
  void* alloc(std::size_t bytes);
  // Returns a block alloc() gave (nullptr: nothing).
  void free(void* p);

  int fd() const { return fd_; }
  std::uint8_t* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t free_bytes() const;
  bool contains(const void* p, std::size_t len) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(base_);
    return a >= b && len <= bytes_ && a - b <= bytes_ - len;
  }

 private:
  ShmPool() = default;
  int fd_ = -1;
  std::uint8_t* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes of each free block
  std::map<std::size_t, std::size_t> used_;  // offset -> bytes of each allocated block
};

}  // namespace weft::io::shm
