// `tessera stats MOUNTPOINT`: a live, dstat-like view of a mount from its
// .stats file (the Prometheus text format, common/metrics_export.h).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/observe_util.h"

namespace tessera::cli {

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// One column: a header and a value from two snapshots `secs` apart.
struct Column {
  const char* name;
  int width;
  std::function<std::string(const MetricSnapshot& prev, const MetricSnapshot& cur, double secs)> value;
};
struct Group {
  char letter;
  const char* title;
  std::vector<Column> columns;
};

double Delta(const MetricSnapshot& a, const MetricSnapshot& b, const std::string& key) {
  return std::max(0.0, b.Get(key) - a.Get(key));
}

std::string Count(double v) {
  if (v < 0.5) return "0";
  if (v < 10000) return fmt::format("{:.0f}", v);
  if (v < 1e7) return fmt::format("{:.0f}K", v / 1e3);
  return fmt::format("{:.0f}M", v / 1e6);
}

std::string Size(double bytes) {
  if (bytes < 0.5) return "0";
  if (bytes < 1024) return fmt::format("{:.0f}B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.0f}K", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024 * 10) return fmt::format("{:.0f}M", bytes / 1024 / 1024);
  return fmt::format("{:.1f}G", bytes / 1024 / 1024 / 1024);
}

// Average latency over the interval from a histogram's _sum and _count.
std::string Latency(const MetricSnapshot& a, const MetricSnapshot& b, const std::string& family) {
  const double n = Delta(a, b, family + "_count");
  if (n < 1) return "0";
  const double ms = Delta(a, b, family + "_sum") / n * 1000;
  return ms < 10 ? fmt::format("{:.2f}", ms) : ms < 1000 ? fmt::format("{:.0f}", ms) : fmt::format("{:.0f}s", ms / 1000);
}

std::string Ratio(const MetricSnapshot& a, const MetricSnapshot& b, const std::string& cache) {
  const double hits = Delta(a, b, "tessera_blockcache_hits_total{" + cache + "}");
  const double misses = Delta(a, b, "tessera_blockcache_misses_total{" + cache + "}");
  if (hits + misses < 1) return "-";
  return fmt::format("{:.0f}", 100 * hits / (hits + misses));
}

std::vector<Group> AllGroups() {
  const std::string fuse = "tessera_fuse_op_duration_seconds", meta = "tessera_meta_op_duration_seconds",
                    obj = "tessera_object_request_duration_seconds";
  return {
      {'u', "usage",
       {{"cpu%", 5,
         [](auto& a, auto& b, double s) {
           return fmt::format("{:.0f}", 100 * Delta(a, b, "tessera_process_cpu_seconds_total") / s);
         }},
        {"mem", 5, [](auto&, auto& b, double) { return Size(b.Get("tessera_process_resident_memory_bytes")); }},
        {"buf", 5, [](auto&, auto& b, double) { return Size(b.Get("tessera_buffer_used_bytes")); }}}},
      {'f', "fuse",
       {{"ops", 6, [=](auto& a, auto& b, double s) { return Count(Delta(a, b, fuse + "_count") / s); }},
        {"lat", 5, [=](auto& a, auto& b, double) { return Latency(a, b, fuse); }},
        {"read", 5, [](auto& a, auto& b, double s) { return Size(Delta(a, b, "tessera_fuse_read_bytes_total") / s); }},
        {"write", 5,
         [](auto& a, auto& b, double s) { return Size(Delta(a, b, "tessera_fuse_written_bytes_total") / s); }}}},
      {'m', "meta",
       {{"ops", 6, [=](auto& a, auto& b, double s) { return Count(Delta(a, b, meta + "_count") / s); }},
        {"lat", 5, [=](auto& a, auto& b, double) { return Latency(a, b, meta); }},
        {"retry", 5,
         [](auto& a, auto& b, double s) { return Count(Delta(a, b, "tessera_meta_tx_retries_total") / s); }}}},
      {'c', "blockcache",
       {{"mem%", 4, [](auto& a, auto& b, double) { return Ratio(a, b, "memory"); }},
        {"disk%", 5, [](auto& a, auto& b, double) { return Ratio(a, b, "disk"); }},
        {"size", 5,
         [](auto&, auto& b, double) {
           return Size(b.Get("tessera_blockcache_bytes{memory}") + b.Get("tessera_blockcache_bytes{disk}"));
         }}}},
      {'o', "object",
       {{"get", 5, [=](auto& a, auto& b, double s) { return Count(Delta(a, b, obj + "_count{get}") / s); }},
        {"get_B", 5,
         [](auto& a, auto& b, double s) { return Size(Delta(a, b, "tessera_object_request_bytes_total{get}") / s); }},
        {"put", 5, [=](auto& a, auto& b, double s) { return Count(Delta(a, b, obj + "_count{put}") / s); }},
        {"put_B", 5,
         [](auto& a, auto& b, double s) { return Size(Delta(a, b, "tessera_object_request_bytes_total{put}") / s); }},
        {"lat", 5, [=](auto& a, auto& b, double) { return Latency(a, b, obj); }},
        {"err", 4,
         [](auto& a, auto& b, double s) { return Count(Delta(a, b, "tessera_object_request_errors_total") / s); }}}},
      {'s', "staging",
       {{"blocks", 6, [](auto&, auto& b, double) { return Count(b.Get("tessera_staging_blocks")); }},
        {"bytes", 5, [](auto&, auto& b, double) { return Size(b.Get("tessera_staging_bytes")); }},
        {"wait", 5,
         [](auto&, auto& b, double) {
           const double s = b.Get("tessera_staging_oldest_wait_seconds");
           return s < 0.5 ? std::string("0") : fmt::format("{:.0f}s", s);
         }}}},
  };
}

}  // namespace

int Stats(const StatsArgs& a) {
  if (!(a.interval > 0) || a.interval > 3600) return Fail("--interval must be between 0 and 3600 seconds");
  auto mp = TesseraMountOf(a.mount_point);
  if (!mp.ok()) return Fail(mp.status().message());
  std::vector<Group> groups;
  for (char c : a.schema) {
    bool found = false;
    for (auto& g : AllGroups())
      if (g.letter == c) groups.push_back(g), found = true;
    if (!found)
      return Fail(fmt::format("--schema: unknown letter '{}' (u usage, f fuse, m meta, c blockcache, o object, "
                              "s staging)",
                              c));
  }
  if (groups.empty()) return Fail("--schema: nothing to show");
  const std::string path = InternalFile(*mp, a.internal_prefix, "stats");
  auto prev = ReadMetrics(path);
  if (!prev.ok()) return Fail(prev.status().message());

  const bool tty = isatty(STDOUT_FILENO);
  auto color = [&](const char* code, const std::string& s) {
    return tty ? fmt::format("\033[{}m{}\033[0m", code, s) : s;
  };
  auto header = [&] {
    std::string top, cols;
    for (size_t i = 0; i < groups.size(); ++i) {
      int width = -1;
      for (auto& c : groups[i].columns) width += c.width + 1;
      std::string t = groups[i].title;
      const int pad = std::max(0, width - int(t.size()));
      top += (i ? "|" : "") + std::string(size_t(pad / 2), '-') + t + std::string(size_t(pad - pad / 2), '-');
      for (size_t j = 0; j < groups[i].columns.size(); ++j)
        cols += fmt::format("{}{:>{}}", i || j ? (j ? " " : "|") : "", groups[i].columns[j].name,
                            groups[i].columns[j].width);
    }
    std::printf("%s\n%s\n", color("1;34", top).c_str(), color("1", cols).c_str());
  };
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  header();
  auto last = std::chrono::steady_clock::now();
  for (uint64_t line = 0; !g_stop && (a.count == 0 || line < a.count); ++line) {
    const auto next = last + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(a.interval));
    while (!g_stop && std::chrono::steady_clock::now() < next)
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(next - std::chrono::steady_clock::now(),
                                                                                std::chrono::milliseconds(100)));
    if (g_stop) break;
    auto cur = ReadMetrics(path);
    if (!cur.ok()) return Fail(cur.status().message());
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - last).count();
    last = now;
    if (tty && line > 0 && line % 20 == 0) header();
    std::string out;
    for (size_t i = 0; i < groups.size(); ++i) {
      for (size_t j = 0; j < groups[i].columns.size(); ++j) {
        const Column& c = groups[i].columns[j];
        const std::string v = c.value(*prev, *cur, secs);
        std::string cell = fmt::format("{:>{}}", v, c.width);
        if (v != "0" && v != "-") cell = color("33", cell);
        out += (i || j ? (j ? " " : "|") : "") + cell;
      }
    }
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
    prev = std::move(cur);
  }
  return 0;
}

}  // namespace tessera::cli
