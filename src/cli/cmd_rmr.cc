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

}  // namespace

int Rmr(const std::vector<std::string>& paths) {
  int rc = 0;
  for (const auto& path : paths) {
    std::string mount_point, rel;
    Status st = LocateInMount(path, &mount_point, &rel);
    const std::string last = rel.substr(rel.rfind('/') + 1);
    if (st.ok() && rel.empty()) st = Status::Err(EINVAL, path + " is the root of a mount: remove what is inside it");
    else if (st.ok() && (last == "." || last == "..")) st = Status::Err(EINVAL, path + ": refusing to remove '.' or '..'");
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
