// `tessera rmr PATH...`: removes trees inside the mount's own process,
// through its control channel (vfs/control.h), without a kernel round trip
// per entry.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/control_client.h"
#include "cli/mount_state.h"

namespace tessera::cli {

namespace {

using Json = nlohmann::json;

// The mount containing path's parent directory, and path relative to its
// root (symlinks on the way resolved; the last component kept as is, so a
// symlink is removed itself, not its target).
Status Locate(const std::string& path, std::string* mount_point, std::string* rel) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  if (base == "." || base == "..") return Status::Err(EINVAL, path + ": refusing to remove '.' or '..'");
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Err(errno, path);
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return Status::Err(errno, dir);
  std::string full = real;
  free(real);
  ASSIGN_OR_RETURN(*mount_point, FindMountPoint(full));
  if (IsMountPoint(path) && S_ISDIR(st.st_mode))
    return Status::Err(EINVAL, path + " is the root of a mount: remove what is inside it");
  std::string inside = full.substr(mount_point->size());
  while (!inside.empty() && inside.front() == '/') inside.erase(0, 1);
  *rel = inside.empty() ? base : inside + "/" + base;
  return Status::OK();
}

}  // namespace

int Rmr(const std::vector<std::string>& paths) {
  int rc = 0;
  for (const auto& path : paths) {
    std::string mount_point, rel;
    Status st = Locate(path, &mount_point, &rel);
    if (!st.ok()) {
      rc = Fail(st.ToString());
      continue;
    }
    Progress progress;
    auto t0 = std::chrono::steady_clock::now();
    uint64_t files = 0, dirs = 0, failed = 0;
    auto show = [&](const Json& p) {
      files = p.value("files", uint64_t(0));
      dirs = p.value("dirs", uint64_t(0));
      failed = p.value("failed", uint64_t(0));
      progress.Show(fmt::format("removing {}: {} files, {} directories", path, files, dirs));
    };
    auto done = ControlCall(mount_point, path, Json{{"op", "rmr"}, {"path", rel}}, show);
    progress.Done();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done.ok()) {
      rc = Fail(fmt::format("{}{}", done.status().ToString(),
                            files + dirs + failed > 0
                                ? fmt::format(" ({} files and {} directories removed, {} entries left)", files, dirs,
                                              failed)
                                : ""));
      continue;
    }
    std::fprintf(stderr, "removed %s: %llu files, %llu directories in %.1f s\n", path.c_str(),
                 (unsigned long long)done->value("files", uint64_t(0)), (unsigned long long)done->value("dirs", uint64_t(0)),
                 secs);
  }
  return rc;
}

}  // namespace tessera::cli
