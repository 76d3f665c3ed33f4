// io/clock.hpp — the monotonic clock, the one place below tools/ where Weft reads real time.
// The engines take `now` as an argument; src/io supplies it from here.
// Thread-safety: stateless.
#pragma once

#include <time.h>

#include <weft/types.hpp>

namespace weft::io {

inline TimeNs monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000u + static_cast<TimeNs>(ts.tv_nsec);
}

}  // namespace weft::io
