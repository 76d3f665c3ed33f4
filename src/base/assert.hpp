// base/assert.hpp — WEFT_ASSERT: checks for bugs (not for expected failures, which are values).
// Stays on in every build type: the emulator and tests rely on it to stop at the first broken
// invariant rather than run on with corrupt state.
#pragma once

namespace weft::base {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg);
}  // namespace weft::base

#define WEFT_ASSERT(expr)                                            \
  do {                                                               \
    if (!(expr)) [[unlikely]]                                        \
      ::weft::base::assert_fail(#expr, __FILE__, __LINE__, nullptr); \
  } while (0)

#define WEFT_ASSERT_MSG(expr, msg)                                 \
  do {                                                             \
    if (!(expr)) [[unlikely]]                                      \
      ::weft::base::assert_fail(#expr, __FILE__, __LINE__, (msg)); \
  } while (0)
