// Tessera as a system file system: mount(8) and umount(8) helpers
// (mount.tessera, umount.tessera), /etc/fstab lines, libmount's utab, and
// environment files for secrets. docs/operations.md, "Mounting at boot".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

// What `tessera mount` knows of a long option name (without the dashes).
enum class OptionKind { kUnknown, kFlag, kValue };
using OptionLookup = std::function<OptionKind(const std::string& name)>;

// `mount.tessera SPEC DIR [-sfnv] [-o OPTIONS]`, as mount(8) calls it: the
// arguments of the equivalent `tessera mount SPEC DIR -d ...`. Each option of
// -o that names a `tessera mount` option becomes it (cache-size=1024 ->
// --cache-size=1024; a flag given alone or =true); env-file=PATH loads
// secrets into the environment (LoadEnvFile); mount(8)'s own options
// (_netdev, nofail, x-*, ...) are recorded in utab; the rest go to FUSE (-o).
struct HelperArgs {
  std::vector<std::string> args;  // without the program name
  bool fake = false;              // -f: only say what would be done
  bool verbose = false;           // -v
};
Result<HelperArgs> TranslateMountHelper(int argc, char** argv, const OptionLookup& lookup);

// `umount.tessera DIR [-flnrv] [-t TYPE]`, as umount(8) calls it for a
// mount whose utab entry has helper=tessera: `tessera umount DIR` (-l or
// -f: lazy).
int UmountHelper(int argc, char** argv);

// KEY=VALUE lines (blank lines, # comments and "export " allowed; values
// may be quoted) into the environment: META_PASSWORD, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, ... Warns when others can read the file.
Status LoadEnvFile(const std::string& path);

// Records the mount in libmount's utab (/run/mount/utab) with helper=tessera
// and user_options, so that umount(8) runs umount.tessera for it. source must
// be the fsname the kernel shows for the mount. Root only; a no-op otherwise.
Status RegisterUtab(const std::string& source, const std::string& target, const std::string& user_options);
// Drops the utab entry of target, if any.
void UnregisterUtab(const std::string& target);

// Puts `line` in the fstab file at path, replacing the line of the same
// mount point (second field) or appending it; written atomically.
Status UpdateFstab(const std::string& path, const std::string& mount_point, const std::string& line);

// Makes /sbin/mount.tessera and /sbin/umount.tessera (links to this
// program) where they are missing; returns the paths it made.
Result<std::vector<std::string>> EnsureMountHelpers();

}  // namespace tessera::cli
