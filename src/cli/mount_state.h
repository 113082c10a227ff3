// Per-mount state file, written by the mount process and read by `umount`
// (to wait for the client to exit) and `info` (to find the volume). Lives in
// /run/tessera (root) or /tmp/tessera-UID, mode 0600: it holds the META-URL.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::cli {

struct MountState {
  std::string mount_point;  // absolute
  int pid = 0;
  std::string meta_url;
};

Status WriteMountState(const MountState& s);
Result<MountState> ReadMountState(const std::string& mount_point);
void RemoveMountState(const std::string& mount_point);

// Writeback progress of a mount (--writeback), refreshed about once a second
// by its client in a file next to the state file; read by `info` and by
// `umount --flush`.
struct WritebackState {
  uint64_t staged_blocks = 0;  // staged on the local disk, not uploaded yet
  uint64_t staged_bytes = 0;
  uint64_t uploaded = 0;       // staged blocks uploaded since the mount started
  bool draining = false;       // unmounted; uploading the rest before exiting
};
Status WriteWritebackState(const std::string& mount_point, const WritebackState& s);
Result<WritebackState> ReadWritebackState(const std::string& mount_point);
// `umount --flush` leaves a flag file that asks the client of mount_point to
// upload every staged block before it exits.
Status RequestFlush(const std::string& mount_point);
bool FlushRequested(const std::string& mount_point);
// Removes the writeback state file and the flush flag.
void RemoveWritebackState(const std::string& mount_point);

// The control socket of the mount at mount_point (vfs/control.h): where
// this process, running the mount, listens (its directory made traversable
// by others), and where a client looks for it (a root mount's first).
Result<std::string> ControlSocketPath(const std::string& mount_point);
std::vector<std::string> ControlSocketCandidates(const std::string& mount_point);

// The mount point containing path (walks up until the device changes).
Result<std::string> FindMountPoint(const std::string& path);
// The state of the Tessera mount that contains path; ENOENT with a clear
// message when path is not inside one on this host.
Result<MountState> MountStateOf(const std::string& path);
// True when path is the root of a mount (its device differs from its parent's).
bool IsMountPoint(const std::string& path);
// The Tessera mount holding `path` and the path relative to its root
// ("" for the root itself): the directories on the way are resolved
// (symlinks followed), the last component is kept as it is (a symlink names
// itself). The path must exist.
Status LocateInMount(const std::string& path, std::string* mount_point, std::string* rel);

}  // namespace tessera::cli
