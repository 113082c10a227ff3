// The FUSE low-level adapter: a thin shim from kernel requests to vfs::Vfs.
// One short function per operation; Status is turned into errno here and
// nowhere else. No business logic lives in this layer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "vfs/vfs.h"

namespace tessera::fuse {

struct MountOptions {
  std::string mount_point;
  std::string fs_name = "tessera";   // shown in /proc/mounts
  bool allow_other = true;           // other users may use the mount (needs root or user_allow_other)
  // The kernel checks permissions from cached attributes before sending a
  // request (the engine checks again). Without it, a path walk through cached
  // dentries would skip search permission checks.
  bool default_permissions = true;
  bool debug = false;                // libfuse request tracing
  int max_threads = 32;
  bool writeback_cache = false;      // kernel writeback cache: see docs/consistency.md
  bool io_uring = false;             // requests over FUSE io_uring (uring_loop.h)
  // Extended attributes. Off (as JuiceFS without --enable-xattr), the xattr
  // requests are answered ENOSYS, after which the kernel stops sending them,
  // including the security.capability lookup it makes before every write.
  bool xattrs = false;
  std::vector<std::string> extra;    // raw -o options passed to the kernel/libfuse
  // The internal files (internal_files.h): their names' prefix, whether
  // every user may read them, and the .config file's content.
  std::string internal_prefix = ".";
  bool internal_files_public = false;
  std::string config_json = "{}";
  // Coherent kernel caches (coherence.h): > 0 watches the engine for other
  // clients' changes and, while that works, lets the kernel cache entries
  // and attributes this long (seconds) — or as long as the vfs::Config
  // timeouts say when timeouts_given (--attr-cache etc. on the command
  // line). 0: the vfs::Config timeouts, no watching.
  double coherent_timeout = 0;
  bool timeouts_given = false;
  // Labels every metric of .stats carries (volume, mount point, the user's).
  std::vector<std::pair<std::string, std::string>> metrics_labels;
};

// Mounts and serves until unmounted or signalled. `on_mounted` runs once the
// kernel mount exists (with OK) or failed (with the error), before serving.
Status Serve(vfs::Vfs* vfs, const MountOptions& opts, const std::function<void(const Status&)>& on_mounted);

// Checks `-o` options before mounting and returns those to pass to libfuse.
// Tessera uses libfuse's low-level API, whose sessions accept the low-level
// and mount(8) options (ro, noatime, nodev, max_read=N, fsname=, ...) but not
// those of the high-level API (kernel_cache, entry_timeout=, use_ino, umask=,
// ...), which other FUSE file systems take: those get EINVAL naming the
// option and Tessera's equivalent. Options meant for mount(8) or systemd in
// an fstab line (_netdev, nofail, noauto, user, x-systemd.*, ...) are dropped.
Result<std::vector<std::string>> CheckOptions(const std::vector<std::string>& options);

}  // namespace tessera::fuse
