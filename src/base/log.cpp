// base/log.cpp — logger registry. WEFT_LOG=trace|debug|info|warn|error|off sets the level.
#include "src/base/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace weft::base {

std::shared_ptr<spdlog::logger> get_logger(const char* name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_color_mt(name);
  const char* env = std::getenv("WEFT_LOG");
  logger->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
  return logger;
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "weft: assertion failed: %s at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace weft::base
