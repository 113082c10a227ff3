// What `tessera stats`, `profile` and `debug` share: finding a mount's
// internal files and reading its metrics.
#pragma once

#include <functional>
#include <map>
#include <string_view>
#include <string>

#include "common/status.h"

namespace tessera::cli {

// The mount point of `path` if it is a Tessera mount (fuse.tessera in
// /proc/self/mounts), else EINVAL saying what it is.
Result<std::string> TesseraMountOf(const std::string& path);
// MP/PREFIXname (internal_files.h).
std::string InternalFile(const std::string& mount_point, const std::string& prefix, const std::string& name);

// Metrics in the Prometheus text format, summed by name ("name", and for
// histograms "name_count", "name_sum") and by name and the metric's own
// label (op, method, cache or job): "name{value}".
struct MetricSnapshot {
  std::map<std::string, double> values;
  double Get(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? 0 : it->second;
  }
};
MetricSnapshot ParseMetrics(const std::string& text);

// Opens / reads an internal file; errors say what to do (root only, the
// mount's --internal-prefix).
Result<int> OpenInternalFile(const std::string& path);
Result<std::string> ReadInternalFile(const std::string& path);
// Feeds what reads of fd return to on_data, then calls on_end, on a
// detached thread: a read of .accesslog blocks while the mount is idle, so
// the caller exits without waiting for it (the kernel interrupts the read).
void FollowInBackground(int fd, std::function<void(std::string_view)> on_data, std::function<void()> on_end);
// Reads and parses a .stats file; errors say what to do (root only, ...).
Result<MetricSnapshot> ReadMetrics(const std::string& path);

}  // namespace tessera::cli
