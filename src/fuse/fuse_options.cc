// CheckOptions (fuse_adapter.h): which -o options a mount passes to libfuse.
#define FUSE_USE_VERSION 314
#include "fuse/fuse_adapter.h"

#include <fuse3/fuse_lowlevel.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace tessera::fuse {

Result<std::vector<std::string>> CheckOptions(const std::vector<std::string>& options) {
  // High-level API options (fuse_new), with what to use instead.
  static const std::pair<const char*, const char*> kHighLevel[] = {
      {"entry_timeout", "--entry-cache"},
      {"attr_timeout", "--attr-cache"},
      {"negative_timeout", "--negative-entry-cache"},
      {"ac_attr_timeout", "--attr-cache"},
      {"kernel_cache", "nothing: the kernel keeps a file's pages while it is unchanged (close-to-open)"},
      {"auto_cache", "nothing: the kernel keeps a file's pages while it is unchanged (close-to-open)"},
      {"direct_io", "O_DIRECT in the program"},
      {"use_ino", "nothing: inode numbers are always the volume's"},
      {"readdir_ino", "nothing: inode numbers are always the volume's"},
      {"hard_remove", "nothing: open files stay readable after unlink"},
      {"nonempty", "--nonempty"},
      {"umask", "chmod inside the volume"},
      {"uid", "chown inside the volume"},
      {"gid", "chgrp inside the volume"},
      {"intr", "nothing: requests are always interruptible"},
      {"modules", "nothing"},
  };
  // Obsolete (the kernel always does these) or for mount(8)/systemd only.
  static const char* const kDropped[] = {"big_writes", "large_read", "_netdev", "nofail", "noauto", "auto",
                                         "user", "users", "nouser", "owner", "group", "defaults"};
  std::vector<std::string> pass;
  for (const std::string& opt : options) {
    if (opt.empty()) continue;
    const std::string key = opt.substr(0, opt.find('='));
    if (key.starts_with("x-") || key == "comment" ||
        std::find(std::begin(kDropped), std::end(kDropped), key) != std::end(kDropped))
      continue;
    for (const auto& [name, instead] : kHighLevel) {
      if (key == name)
        return Status::Err(EINVAL, "-o " + opt + " is an option of libfuse's high-level API, which Tessera does not "
                                                 "use; instead: " + instead);
    }
    // Whatever is left must be an option a low-level session takes: try it.
    std::string arg0 = "tessera", dash_o = "-o", value = opt;
    char* argv[] = {arg0.data(), dash_o.data(), value.data()};
    fuse_args args = FUSE_ARGS_INIT(3, argv);
    fuse_lowlevel_ops ops;
    std::memset(&ops, 0, sizeof(ops));
    fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
    fuse_opt_free_args(&args);
    if (!se) return Status::Err(EINVAL, "-o " + opt + ": not a FUSE mount option (see 'tessera mount --help')");
    fuse_session_destroy(se);
    pass.push_back(opt);
  }
  return pass;
}

}  // namespace tessera::fuse
