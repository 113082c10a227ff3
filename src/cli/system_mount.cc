#include "cli/system_mount.h"

#include <libmount/libmount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "common/url.h"

namespace tessera::cli {

namespace {

// Options of mount(8) and systemd that are not the file system's: kept in
// utab (umount -a -O, systemd read them there), never given to the client.
bool IsUserspaceOption(const std::string& key) {
  static const char* const kKeys[] = {"_netdev", "nofail", "noauto", "auto", "user", "users", "nouser",
                                      "owner",   "group",  "defaults", "comment"};
  return key.starts_with("x-") || std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

// Splits "a,b=c\,d" at unescaped commas ("\," is a comma inside a value).
std::vector<std::string> SplitOptions(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == ',') {
      cur += ',';
      ++i;
    } else if (s[i] == ',') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

}  // namespace

Result<HelperArgs> TranslateMountHelper(int argc, char** argv, const OptionLookup& lookup) {
  HelperArgs h;
  std::vector<std::string> positional, options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" || a == "-t" || a == "-N") {
      if (i + 1 >= argc) return Status::Err(EINVAL, a + " needs a value");
      if (a == "-o") options.push_back(argv[i + 1]);
      ++i;
    } else if (a.starts_with("-o")) {
      options.push_back(a.substr(2));
    } else if (a.starts_with("-t") || a.starts_with("-N")) {
      // the type (tessera) and mount(8)'s namespace: nothing to do
    } else if (a.size() > 1 && a[0] == '-') {
      for (char c : a.substr(1)) {
        if (c == 'f') h.fake = true;
        else if (c == 'v') h.verbose = true;
        else if (c != 's' && c != 'n') return Status::Err(EINVAL, fmt::format("unknown flag -{}", c));
      }
    } else {
      positional.push_back(std::move(a));
    }
  }
  if (positional.size() != 2)
    return Status::Err(EINVAL, "usage: mount.tessera META-URL MOUNTPOINT [-o OPTION[=VALUE],...] "
                               "(or: mount -t tessera META-URL MOUNTPOINT -o ...)");
  const std::string& spec = positional[0];
  h.args = {"mount", spec, positional[1], "--background"};
  std::vector<std::string> fuse_opts, user_opts;
  for (const std::string& group : options) {
    for (const std::string& opt : SplitOptions(group)) {
      const size_t eq = opt.find('=');
      const std::string key = opt.substr(0, eq);
      const bool has_value = eq != std::string::npos;
      const std::string value = has_value ? opt.substr(eq + 1) : "";
      if (key == "env-file") {
        if (!has_value || value.empty()) return Status::Err(EINVAL, "env-file needs a path (env-file=PATH)");
        RETURN_IF_ERROR(LoadEnvFile(value));
        continue;
      }
      if (key == "helper" || key == "uhelper" || key == "rw" || key == "background") continue;
      if (IsUserspaceOption(key)) {
        user_opts.push_back(opt);
        continue;
      }
      std::string name = key;
      OptionKind kind = lookup(name);
      if (kind == OptionKind::kUnknown) {
        std::replace(name.begin(), name.end(), '_', '-');
        kind = lookup(name);
      }
      if (kind == OptionKind::kFlag) {
        if (!has_value || value == "1" || value == "true" || value == "yes" || value == "on") {
          h.args.push_back("--" + name);
        } else if (value != "0" && value != "false" && value != "no" && value != "off") {
          return Status::Err(EINVAL, fmt::format("mount option {} is a switch: give it alone, or ={{true,false}}", key));
        }
      } else if (kind == OptionKind::kValue) {
        if (!has_value) return Status::Err(EINVAL, fmt::format("mount option {} needs a value ({}=VALUE)", key, key));
        h.args.push_back(fmt::format("--{}={}", name, value));
      } else {
        fuse_opts.push_back(opt);  // checked by tessera mount: those libfuse and the kernel take
      }
    }
  }
  if (!fuse_opts.empty()) h.args.insert(h.args.end(), {"-o", fmt::format("{}", fmt::join(fuse_opts, ","))});
  // The kernel shows SPEC as the mount's source, so that mount(8)'s utab
  // entry matches it; never a password (it is in /proc/mounts for all to read).
  if (RedactUrl(spec) == spec) h.args.push_back("--fs-name=" + spec);
  if (!user_opts.empty()) h.args.push_back("--utab-options=" + fmt::format("{}", fmt::join(user_opts, ",")));
  return h;
}

int UmountHelper(int argc, char** argv) {
  std::string target;
  bool lazy = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-t" || a == "-N" || a == "-O") {
      ++i;
    } else if (a.size() > 1 && a[0] == '-') {
      if (a.find_first_of("lf") != std::string::npos) lazy = true;
    } else if (target.empty()) {
      target = a;
    }
  }
  if (target.empty()) {
    std::fprintf(stderr, "usage: umount.tessera MOUNTPOINT [-l]\n");
    return 2;
  }
  return Umount(target, lazy, false);
}

Status LoadEnvFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Err(errno ? errno : ENOENT, fmt::format("env-file {}: {}", path, strerror(errno)));
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    std::fprintf(stderr, "tessera: warning: %s can be read by other users; it holds secrets: chmod 600 it\n",
                 path.c_str());
  auto trim = [](const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r");
    const size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.starts_with("export ")) line = trim(line.substr(7));
    const size_t eq = line.find('=');
    const std::string key = eq == std::string::npos ? line : line.substr(0, eq);
    const bool valid_key = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                           std::all_of(key.begin(), key.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (eq == std::string::npos || !valid_key)
      return Status::Err(EINVAL, fmt::format("env-file {}, line {}: expected NAME=VALUE", path, n));
    std::string value = line.substr(eq + 1);
    if (value.size() >= 2 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0])
      value = value.substr(1, value.size() - 2);
    setenv(key.c_str(), value.c_str(), 1);
  }
  return Status::OK();
}

Status RegisterUtab(const std::string& source, const std::string& target, const std::string& user_options) {
  if (geteuid() != 0) return Status::OK();
  libmnt_fs* fs = mnt_new_fs();
  if (!fs) return Status::Err(ENOMEM, "utab");
  const std::string opts = "helper=tessera" + (user_options.empty() ? "" : "," + user_options);
  mnt_fs_set_source(fs, source.c_str());
  mnt_fs_set_target(fs, target.c_str());
  mnt_fs_set_fstype(fs, "fuse.tessera");
  mnt_fs_set_root(fs, "/");
  mnt_fs_set_options(fs, opts.c_str());
  libmnt_update* upd = mnt_new_update();
  int rc = upd ? mnt_update_set_fs(upd, 0, nullptr, fs) : -ENOMEM;
  if (rc == 0 && mnt_update_is_ready(upd)) rc = mnt_update_table(upd, nullptr);
  if (upd) mnt_free_update(upd);
  mnt_unref_fs(fs);
  if (rc != 0) return Status::Err(-rc > 0 ? -rc : EIO, "cannot record the mount in /run/mount/utab");
  return Status::OK();
}

void UnregisterUtab(const std::string& target) {
  if (geteuid() != 0) return;
  libmnt_update* upd = mnt_new_update();
  if (!upd) return;
  if (mnt_update_set_fs(upd, 0, target.c_str(), nullptr) == 0 && mnt_update_is_ready(upd))
    (void)mnt_update_table(upd, nullptr);  // best effort: umount(8) also drops it; a stale entry matches no mount
  mnt_free_update(upd);
}

Status UpdateFstab(const std::string& path, const std::string& mount_point, const std::string& line) {
  std::ifstream in(path);
  std::string out, l;
  bool replaced = false;
  while (in && std::getline(in, l)) {
    std::istringstream fields(l);
    std::string spec, dir;
    fields >> spec >> dir;
    if (!spec.empty() && spec[0] != '#' && dir == mount_point) {
      if (!replaced) out += line + "\n";
      replaced = true;
      continue;
    }
    out += l + "\n";
  }
  if (!replaced) out += line + "\n";
  const std::string tmp = path + ".tessera.tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out;
    f.flush();
    if (!f) return Status::Err(EIO, "cannot write " + tmp);
  }
  struct stat st;
  chmod(tmp.c_str(), stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status::Err(err, fmt::format("cannot replace {}: {}", path, strerror(err)));
  }
  return Status::OK();
}

Result<std::vector<std::string>> EnsureMountHelpers() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Status::Err(errno, "cannot find this program's path");
  self[n] = '\0';
  std::vector<std::string> made;
  for (const char* name : {"/sbin/mount.tessera", "/sbin/umount.tessera"}) {
    struct stat st;
    if (lstat(name, &st) == 0) continue;
    if (symlink(self, name) != 0) return Status::Err(errno, fmt::format("cannot create {}: {}", name, strerror(errno)));
    made.emplace_back(name);
  }
  return made;
}

}  // namespace tessera::cli
