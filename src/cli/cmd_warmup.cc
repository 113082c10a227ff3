// `tessera warmup PATH... [--threads N] [--evict] [--check]`: the mount that
// serves PATH loads (or drops, or counts) the blocks of its files in its own
// caches, through its control channel (vfs/control.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/control_client.h"
#include "cli/mount_state.h"

namespace tessera::cli {

namespace {

using Json = nlohmann::json;

std::string Mib(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// The mount of path and path relative to its root (symlinks resolved).
Status Locate(const std::string& path, std::string* mount_point, std::string* rel) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return Status::Err(errno, path);
  std::string full = real;
  free(real);
  ASSIGN_OR_RETURN(*mount_point, FindMountPoint(full));
  *rel = full.substr(mount_point->size());
  while (!rel->empty() && rel->front() == '/') rel->erase(0, 1);
  return Status::OK();
}

}  // namespace

int Warmup(const WarmupArgs& a) {
  const char* mode = a.evict ? "evict" : a.check ? "check" : "load";
  int rc = 0;
  for (const auto& path : a.paths) {
    std::string mount_point, rel;
    Status st = Locate(path, &mount_point, &rel);
    if (!st.ok()) {
      rc = Fail(st.ToString());
      continue;
    }
    Progress progress;
    const char* verb = a.evict ? "evicting" : a.check ? "checking" : "warming up";
    auto show = [&](const Json& p) {
      progress.Show(fmt::format("{} {}: {} files, {} blocks, {}", verb, path, p.value("files", uint64_t(0)),
                                p.value("blocks", uint64_t(0)), Mib(p.value("bytes", uint64_t(0)))));
    };
    auto t0 = std::chrono::steady_clock::now();
    auto done = ControlCall(mount_point, path,
                            Json{{"op", "warmup"}, {"path", rel}, {"mode", mode}, {"threads", a.threads}}, show);
    progress.Done();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done.ok()) {
      rc = Fail(done.status().ToString());
      continue;
    }
    const uint64_t files = done->value("files", uint64_t(0)), blocks = done->value("blocks", uint64_t(0)),
                   bytes = done->value("bytes", uint64_t(0));
    if (a.check) {
      const uint64_t cached = done->value("cached_bytes", uint64_t(0));
      std::printf("%s: %llu files, %llu of %llu blocks cached, %s of %s (%.1f%%)\n", path.c_str(),
                  (unsigned long long)files, (unsigned long long)done->value("cached_blocks", uint64_t(0)),
                  (unsigned long long)blocks, Mib(cached).c_str(), Mib(bytes).c_str(),
                  bytes == 0 ? 100.0 : 100.0 * double(cached) / double(bytes));
    } else {
      std::fprintf(stderr, "%s %s: %llu files, %llu blocks, %s in %.1f s (%.1f MiB/s)%s\n",
                   a.evict ? "evicted" : "warmed up", path.c_str(), (unsigned long long)files,
                   (unsigned long long)blocks, Mib(bytes).c_str(), secs, secs > 0 ? double(bytes) / (1 << 20) / secs : 0.0,
                   !a.evict && !done->value("disk_cache", false)
                       ? "; the mount has no disk cache (--cache-dir): into its memory cache only"
                       : "");
    }
  }
  return rc;
}

}  // namespace tessera::cli
