// `tessera clone SRC DST [--preserve]`: a metadata-only copy of a file or
// tree, made by the mount serving both paths through its control channel
// (vfs/control.h; meta::Meta::Clone): no data is read or written, the copy
// shares the source's blocks and appears whole or not at all.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/control_client.h"
#include "cli/mount_state.h"

namespace tessera::cli {

int Clone(const CloneOptions& o) {
  std::string src_mount, src_rel;
  if (Status st = LocateInMount(o.src, &src_mount, &src_rel); !st.ok()) return Fail(st.ToString());
  // DST must not exist; its directory must, in the same mount.
  std::string dst = o.dst;
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  struct stat st;
  if (lstat(dst.c_str(), &st) == 0) return Fail(dst + ": already exists (clone makes a new name)");
  const size_t slash = dst.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dst.substr(0, slash));
  const std::string name = slash == std::string::npos ? dst : dst.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return Fail(o.dst + ": not a name for the copy");
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return Fail(Status::Err(errno, dir).ToString());
  const std::string dst_dir = real;
  free(real);
  auto dst_mount = FindMountPoint(dst_dir);
  if (!dst_mount.ok()) return Fail(dst_mount.status().ToString());
  std::string dst_rel = dst_dir.substr(dst_mount->size());
  while (!dst_rel.empty() && dst_rel.front() == '/') dst_rel.erase(0, 1);
  if (*dst_mount != src_mount)
    return Fail(Status::Err(EXDEV, fmt::format("{} and {} are not in the same mount: clone copies within one volume",
                                               o.src, o.dst)).ToString());
  const mode_t mask = umask(0);
  umask(mask);
  auto t0 = std::chrono::steady_clock::now();
  auto done = ControlCall(src_mount, o.src,
                          nlohmann::json{{"op", "clone"}, {"src", src_rel}, {"dst_dir", dst_rel}, {"name", name},
                                         {"preserve", o.preserve}, {"umask", unsigned(mask)}},
                          [](const nlohmann::json&) {});
  if (!done.ok()) return Fail(done.status().ToString());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "cloned %s to %s: %llu entries in %.2f s\n", o.src.c_str(), o.dst.c_str(),
               (unsigned long long)done->value("entries", uint64_t(0)), secs);
  return 0;
}

}  // namespace tessera::cli
