#include "cli/observe_util.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <string.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/mount_state.h"

namespace tessera::cli {

Result<std::string> TesseraMountOf(const std::string& path) {
  auto mp = FindMountPoint(path);
  if (!mp.ok()) return Status::Err(mp.status().code(), fmt::format("{}: {}", path, strerror(mp.status().code())));
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  std::string type;
  while (std::getline(mounts, line)) {
    std::istringstream in(line);
    std::string source, target, fstype;
    in >> source >> target >> fstype;
    // /proc/self/mounts escapes spaces and the like as \040.
    std::string unescaped;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == '\\' && i + 3 < target.size()) {
        unescaped += char(std::strtol(target.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        unescaped += target[i];
      }
    }
    if (unescaped == *mp) type = fstype;  // the last mount there is the one in use
  }
  if (type == "fuse.tessera") return *mp;
  return Status::Err(EINVAL, fmt::format("{} is not in a Tessera mount ({} is {})", path, *mp,
                                         type.empty() ? "not a mount point" : "a " + type + " mount"));
}

std::string InternalFile(const std::string& mount_point, const std::string& prefix, const std::string& name) {
  return (mount_point == "/" ? "" : mount_point) + "/" + prefix + name;
}

MetricSnapshot ParseMetrics(const std::string& text) {
  MetricSnapshot s;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    const std::string name = line.substr(0, i);
    std::string own;  // the value of op=, method=, cache= or job=
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value += line[j];
        }
        if (key == "op" || key == "method" || key == "cache" || key == "job") own = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    const double v = std::strtod(line.c_str() + std::min(i, line.size()), nullptr);
    if (!std::isfinite(v)) continue;
    if (name.ends_with("_bucket")) continue;
    s.values[name] += v;
    if (!own.empty()) s.values[name + "{" + own + "}"] += v;
  }
  return s;
}

Result<int> OpenInternalFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd >= 0) return fd;
  const int err = errno;
  return Status::Err(err, fmt::format("cannot read {}: {}{}", path, strerror(err),
                                      err == ENOENT || err == EACCES
                                          ? " (only root reads a mount's internal files, unless it was mounted with "
                                            "--internal-files-public; a mount with another --internal-prefix needs "
                                            "the same option here)"
                                          : ""));
}

Result<std::string> ReadInternalFile(const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, OpenInternalFile(path));
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Status::Err(err, fmt::format("cannot read {}: {}", path, strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

Result<MetricSnapshot> ReadMetrics(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadInternalFile(path));
  return ParseMetrics(text);
}

void FollowInBackground(int fd, std::function<void(std::string_view)> on_data, std::function<void()> on_end) {
  std::thread([fd, on_data = std::move(on_data), on_end = std::move(on_end)] {
    char buf[65536];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      on_data(std::string_view(buf, size_t(n)));
    }
    on_end();
  }).detach();
}

}  // namespace tessera::cli
