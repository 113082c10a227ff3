// Minimal leveled logging to stderr or a file. Messages never include
// secrets: callers pass URLs through RedactUrl (common/url.h) first.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// Appends to path instead of stderr ("" = back to stderr); returns false if
// it cannot be opened.
bool SetLogFile(const std::string& path);
void LogLine(LogLevel level, std::string_view msg);

}  // namespace tessera

#define TESSERA_LOG(level, ...)                                                 \
  do {                                                                          \
    if (::tessera::LogEnabled(level)) ::tessera::LogLine(level, fmt::format(__VA_ARGS__)); \
  } while (0)
#define LOG_DEBUG(...) TESSERA_LOG(::tessera::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) TESSERA_LOG(::tessera::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARN(...) TESSERA_LOG(::tessera::LogLevel::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) TESSERA_LOG(::tessera::LogLevel::kError, __VA_ARGS__)
