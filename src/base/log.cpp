// Logging sink: one process-wide threshold set once by the app at start-up.
#include "base/log.h"

#include <atomic>
#include <cstdio>

namespace sy {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }
void log_line(LogLevel level, const std::string& message) {
  std::fprintf(stderr, "[switchyard %s] %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace sy
