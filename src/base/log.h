// Minimal leveled logging to stderr; the level is passed in, not global per thread.
#pragma once

#include <fmt/format.h>

namespace sy {

enum class LogLevel : int { debug = 0, info = 1, warn = 2, error = 3 };

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::info)) log_line(LogLevel::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::warn)) log_line(LogLevel::warn, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sy
