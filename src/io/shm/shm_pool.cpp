// io/shm/shm_pool.cpp — the shared-memory allocator (see shm_pool.hpp).
#include "src/io/shm/shm_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <iterator>

namespace weft::io::shm {
namespace {

std::size_t round_up(std::size_t bytes) {
  return (bytes + kPoolAlignBytes - 1) & ~(kPoolAlignBytes - 1);
}

}  // namespace

std::unique_ptr<ShmPool> ShmPool::create(std::size_t bytes) {
  if (bytes == 0 || bytes > kPoolBytesMax) return nullptr;
  bytes = round_up(bytes);
  const int fd = memfd_create("weft-pool", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return nullptr;
  }
  auto pool = map(fd, bytes);
  if (pool) pool->free_.emplace(0, bytes);
  return pool;
}

std::unique_ptr<ShmPool> ShmPool::map(int fd, std::size_t bytes) {
  if (fd < 0) return nullptr;
  if (bytes == 0 || bytes > kPoolBytesMax || bytes != round_up(bytes)) {
    close(fd);
    return nullptr;
  }
  // MAP_POPULATE: every page allocated and mapped now (mmap(2)), for the creator and for the peer
  // that maps it, so no transfer takes first-touch page faults: the peer's first memcpy out of
  // an unpopulated window took a fault per 4 KiB page, ~0.5-1 us each here, 256 per MiB.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  auto pool = std::unique_ptr<ShmPool>(new ShmPool());
  pool->fd_ = fd;
  pool->base_ = static_cast<std::uint8_t*>(p);
  pool->bytes_ = bytes;
  return pool;
}

ShmPool::~ShmPool() {
  if (base_) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

void* ShmPool::alloc(std::size_t bytes) {
  if (bytes == 0 || bytes > bytes_) return nullptr;
  bytes = round_up(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::size_t off = it->first, left = it->second - bytes;
    free_.erase(it);
    if (left) free_.emplace(off + bytes, left);
    used_.emplace(off, bytes);
    return base_ + off;
  }
  return nullptr;
}

void ShmPool::free(void* p) {
  if (!p) return;
  const auto u = used_.find(static_cast<std::size_t>(static_cast<std::uint8_t*>(p) - base_));
  if (u == used_.end()) return;
  std::size_t off = u->first, len = u->second;
  used_.erase(u);
  // Merge with the free neighbours on either side.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(off, len);
}

std::size_t ShmPool::free_bytes() const {
  std::size_t n = 0;
  for (const auto& [off, len] : free_) n += len;
  return n;
}

}  // namespace weft::io::shm
