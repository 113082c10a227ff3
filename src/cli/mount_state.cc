#include "cli/mount_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include <fmt/format.h>

namespace tessera::cli {

namespace {
std::string StateDir() {
  if (geteuid() == 0) return "/run/tessera";
  return fmt::format("/tmp/tessera-{}", geteuid());
}
std::string StatePath(const std::string& mount_point, const char* ext = "mount") {
  return fmt::format("{}/{:016x}.{}", StateDir(), std::hash<std::string>{}(mount_point), ext);
}

// Writes body to path atomically (temporary file, rename), mode 0600.
Status WriteStateFile(const std::string& path, const std::string& body) {
  std::string dir = StateDir();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Status::Err(errno, "cannot create " + dir);
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::Err(errno, "cannot write " + tmp);
  bool ok = write(fd, body.data(), body.size()) == ssize_t(body.size());
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) return Status::Err(EIO, "cannot write " + path);
  return Status::OK();
}
}  // namespace

Status WriteMountState(const MountState& s) {
  return WriteStateFile(StatePath(s.mount_point), fmt::format("{}\n{}\n{}\n", s.mount_point, s.pid, s.meta_url));
}

Result<MountState> ReadMountState(const std::string& mount_point) {
  std::ifstream in(StatePath(mount_point));
  if (!in) return Status::Err(ENOENT, "no Tessera client state for " + mount_point);
  MountState s;
  std::string pid;
  std::getline(in, s.mount_point);
  std::getline(in, pid);
  std::getline(in, s.meta_url);
  s.pid = std::atoi(pid.c_str());
  if (s.mount_point != mount_point || s.meta_url.empty()) return Status::Err(ENOENT, "stale client state for " + mount_point);
  return s;
}

void RemoveMountState(const std::string& mount_point) { unlink(StatePath(mount_point).c_str()); }

Result<std::string> ControlSocketPath(const std::string& mount_point) {
  const std::string dir = StateDir();
  if (mkdir(dir.c_str(), 0711) != 0 && errno != EEXIST) return Status::Err(errno, "cannot create " + dir);
  // Others reach the socket (0666; the mount checks who they are) but list
  // nothing: the state files in it are 0600.
  if (geteuid() == 0 && chmod(dir.c_str(), 0711) != 0) return Status::Err(errno, "cannot chmod " + dir);
  return StatePath(mount_point, "sock");
}

std::vector<std::string> ControlSocketCandidates(const std::string& mount_point) {
  const std::string name = fmt::format("{:016x}.sock", std::hash<std::string>{}(mount_point));
  std::vector<std::string> out = {"/run/tessera/" + name};
  if (geteuid() != 0) out.push_back(fmt::format("/tmp/tessera-{}/{}", geteuid(), name));
  return out;
}

Status WriteWritebackState(const std::string& mount_point, const WritebackState& s) {
  return WriteStateFile(StatePath(mount_point, "writeback"),
                        fmt::format("{} {} {} {}\n", s.staged_blocks, s.staged_bytes, s.uploaded, s.draining ? 1 : 0));
}

Result<WritebackState> ReadWritebackState(const std::string& mount_point) {
  std::ifstream in(StatePath(mount_point, "writeback"));
  WritebackState s;
  int draining = 0;
  if (!(in >> s.staged_blocks >> s.staged_bytes >> s.uploaded >> draining))
    return Status::Err(ENOENT, "no writeback state for " + mount_point);
  s.draining = draining != 0;
  return s;
}

Status RequestFlush(const std::string& mount_point) {
  return WriteStateFile(StatePath(mount_point, "flush"), "flush\n");
}

bool FlushRequested(const std::string& mount_point) {
  return access(StatePath(mount_point, "flush").c_str(), F_OK) == 0;
}

void RemoveWritebackState(const std::string& mount_point) {
  unlink(StatePath(mount_point, "writeback").c_str());
  unlink(StatePath(mount_point, "flush").c_str());
}

Result<MountState> MountStateOf(const std::string& path) {
  auto mp = FindMountPoint(path);
  if (!mp.ok()) return mp.status();
  auto state = ReadMountState(*mp);
  if (!state.ok()) return Status::Err(ENOENT, fmt::format("{} is not inside a Tessera mount of this host", path));
  return state;
}

bool IsMountPoint(const std::string& path) {
  struct stat self, parent;
  if (stat(path.c_str(), &self) != 0) return false;
  if (stat((path + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev || self.st_ino == parent.st_ino;
}

Result<std::string> FindMountPoint(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (!real) return Status::Err(errno, path);
  std::string cur = real;
  free(real);
  struct stat st;
  if (stat(cur.c_str(), &st) != 0) return Status::Err(errno, path);
  for (;;) {
    if (cur == "/") return cur;
    std::string parent = cur.substr(0, cur.rfind('/'));
    if (parent.empty()) parent = "/";
    struct stat pst;
    if (stat(parent.c_str(), &pst) != 0) return Status::Err(errno, parent);
    if (pst.st_dev != st.st_dev) return cur;
    cur = parent;
  }
}

Status LocateInMount(const std::string& path, std::string* mount_point, std::string* rel) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  const std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Err(errno, path);
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return Status::Err(errno, dir);
  std::string full = real;
  free(real);
  ASSIGN_OR_RETURN(*mount_point, FindMountPoint(full));
  if (IsMountPoint(path) && S_ISDIR(st.st_mode)) {
    rel->clear();
    return Status::OK();
  }
  std::string inside = full.substr(mount_point->size());
  while (!inside.empty() && inside.front() == '/') inside.erase(0, 1);
  *rel = inside.empty() ? base : inside + "/" + base;
  return Status::OK();
}

}  // namespace tessera::cli
