// base/log.hpp — named spdlog loggers ("weft.transport", "weft.wire", ...).
// Only this header's declarations are needed by hot code; spdlog itself is included by the
// .cpp files that log, to keep compile times down (spdlog costs ~4.6 s per translation unit).
// Thread-safety: get_logger is safe from any thread (spdlog's registry is locked).
#pragma once

#include <memory>
#include <spdlog/fwd.h>

namespace weft::base {
// Returns the logger of that name, creating it (stderr sink, level from WEFT_LOG or "warn").
std::shared_ptr<spdlog::logger> get_logger(const char* name);
}  // namespace weft::base
