#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tessera {

namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
std::mutex g_mu;
FILE* g_out = nullptr;  // guarded by g_mu; nullptr = stderr
const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = int(level); }
bool LogEnabled(LogLevel level) { return int(level) >= g_level.load(std::memory_order_relaxed); }

bool SetLogFile(const std::string& path) {
  FILE* f = nullptr;
  if (!path.empty() && !(f = std::fopen(path.c_str(), "a"))) return false;
  std::lock_guard<std::mutex> g(g_mu);
  if (g_out) std::fclose(g_out);
  g_out = f;
  return true;
}

void LogLine(LogLevel level, std::string_view msg) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
  std::lock_guard<std::mutex> g(g_mu);
  FILE* out = g_out ? g_out : stderr;
  std::fprintf(out, "%s.%03d tessera[%d] <%s>: %.*s\n", ts, int(tv.tv_usec / 1000), int(getpid()),
               kNames[int(level)], int(msg.size()), msg.data());
  std::fflush(out);
}

}  // namespace tessera
