// tests/common/fd_io.hpp — whole reads and writes on a pipe or socket between a test's processes
// (the multi-process provider tests hand addresses and go/done bytes through them).
#pragma once

#include <unistd.h>

#include <cstddef>

namespace weft::test_util {

// Writes all n bytes (a pipe or stream socket takes small messages whole); false otherwise.
inline bool full_write(int fd, const void* p, std::size_t n) {
  return write(fd, p, n) == static_cast<ssize_t>(n);
}

// Reads exactly n bytes; false on end of file or an error first.
inline bool full_read(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n) {
    const ssize_t r = read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace weft::test_util
