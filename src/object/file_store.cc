#include "object/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>

#include "common/buffer_pool.h"

namespace tessera::object {
namespace {

constexpr std::string_view kTempPrefix = ".tmp.";

Status NotFound(const std::string& key) { return Status::Err(ENOENT, "object " + key + " not found"); }

// ENOTDIR means a path component is a regular file, so the object cannot exist.
bool IsMissing(int err) { return err == ENOENT || err == ENOTDIR; }

Status CheckKey(const std::string& key) {
  if (key.empty()) return Status::Err(EINVAL, "empty object key");
  if (key.find('\0') != std::string::npos) return Status::Err(EINVAL, "object key contains NUL");
  size_t begin = 0;
  while (true) {
    size_t end = key.find('/', begin);
    std::string_view part = std::string_view(key).substr(begin, end - begin);
    if (part.empty() || part == "." || part == ".." || part.starts_with(kTempPrefix)) {
      return Status::Err(EINVAL, "invalid object key '" + key + "' for a file store");
    }
    if (end == std::string::npos) return Status::OK();
    begin = end + 1;
  }
}

// mkdir -p. An existing non-directory is left for the caller's next syscall
// to report (ENOTDIR).
Status MakeDirs(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return Status::OK();
  int err = errno;
  size_t slash = dir.rfind('/');
  if (err != ENOENT || slash == 0 || slash == std::string::npos) {
    return Status::Err(err, "mkdir " + dir);
  }
  RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash)));
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return Status::OK();
  err = errno;
  return Status::Err(err, "mkdir " + dir);
}

Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    int err = errno;
    return Status::Err(err, "fsync directory " + dir);
  }
  return Status::OK();
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Err(errno);
    }
    data.remove_prefix(size_t(n));
  }
  return Status::OK();
}

std::string RandomSuffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// How many files ranged reads keep open: a quarter of the process's file
// descriptor limit, at most 1,024 (a 4 GiB working set of 4 MiB blocks).
size_t KeptFiles() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1024;
  return std::min<size_t>(1024, size_t(rl.rlim_cur / 4));
}

int64_t NowSec() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

FileStore::FileStore(std::string root, bool fsync) : root_(std::move(root)), fsync_(fsync), fds_(KeptFiles()) {
  // Network and FUSE file systems (their f_type in statfs(2)): a ranged read
  // is a round trip there, so whole blocks are worth prefetching.
  static constexpr int64_t kRemote[] = {
      0x65735546,  // FUSE
      0x6969,      // NFS
      0x517B,      // SMB
      0xFF534D42,  // CIFS
      0xFE534D42,  // SMB2
      0x00C36400,  // Ceph
      0x01021997,  // 9p
      0x0BD00BD0,  // Lustre
      0x5346414F,  // AFS
      0x01161970,  // GFS2
  };
  struct statfs fs;
  if (::statfs(root_.c_str(), &fs) != 0) return;  // not there yet (Create makes it): assume local
  for (int64_t magic : kRemote)
    if (int64_t(uint32_t(fs.f_type)) == magic) local_ = false;
}

size_t FileStore::Slot(const std::string& key) const { return std::hash<std::string>{}(key) % fds_.size(); }

std::shared_ptr<UniqueFd> FileStore::CachedFd(const std::string& key) {
  if (fds_.empty()) return nullptr;
  const int64_t now = NowSec();
  std::lock_guard<std::mutex> g(fds_mu_);
  DropIdleLocked(now);
  OpenFile& f = fds_[Slot(key)];
  if (!f.fd || f.key != key) return nullptr;
  f.used_sec = now;
  return f.fd;
}

void FileStore::KeepFd(const std::string& key, std::shared_ptr<UniqueFd> fd) {
  if (fds_.empty()) return;
  std::shared_ptr<UniqueFd> old;  // closed outside the lock
  std::lock_guard<std::mutex> g(fds_mu_);
  OpenFile& f = fds_[Slot(key)];
  old = std::move(f.fd);
  f.key = key;
  f.fd = std::move(fd);
  f.used_sec = NowSec();
}

void FileStore::ForgetFd(const std::string& key) {
  if (fds_.empty()) return;
  std::shared_ptr<UniqueFd> old;
  const int64_t now = NowSec();
  std::lock_guard<std::mutex> g(fds_mu_);
  OpenFile& f = fds_[Slot(key)];
  if (f.fd && f.key == key) old = std::move(f.fd);
  DropIdleLocked(now);
}

void FileStore::DropIdleLocked(int64_t now_sec) {
  if (now_sec - swept_sec_ < kIdleSec) return;  // a sweep at most every kIdleSec
  swept_sec_ = now_sec;
  for (OpenFile& f : fds_)
    if (f.fd && now_sec - f.used_sec >= kIdleSec) f.fd.reset();
}

Status FileStore::Create() {
  RETURN_IF_ERROR(MakeDirs(root_));
  struct stat st;
  if (::stat(root_.c_str(), &st) != 0) return Status::Err(errno, "bucket " + root_);
  if (!S_ISDIR(st.st_mode)) return Status::Err(ENOTDIR, "bucket " + root_ + " exists and is not a directory");
  return Status::OK();
}

Status FileStore::Put(const std::string& key, std::string_view data) {
  RETURN_IF_ERROR(CheckKey(key));
  const std::string path = Path(key);
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash);
  // Keep the temp name within NAME_MAX however long the key's basename is.
  const std::string base = path.substr(slash + 1, 200);

  std::string tmp;
  int raw_fd;
  bool made_dirs = false;
  while (true) {
    tmp = dir + "/" + std::string(kTempPrefix) + base + "." + RandomSuffix();
    raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (raw_fd >= 0) break;
    int err = errno;
    if (err == EEXIST) continue;  // another writer drew the same name
    if (err != ENOENT || made_dirs) return Status::Err(err, "put " + key + ": create " + tmp);
    RETURN_IF_ERROR(MakeDirs(dir).With("put " + key));
    made_dirs = true;
  }
  UniqueFd fd(raw_fd);
  Status st = WriteAll(fd.get(), data);
  if (st.ok() && fsync_ && ::fsync(fd.get()) != 0) st = Status::Err(errno);
  if (fd.Close() != 0 && st.ok()) st = Status::Err(errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Status::Err(errno);
  if (st.ok()) ForgetFd(key);  // the old object's file, if kept, would be found unlinked; free it now
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st.With("put " + key + ": write " + path);
  }
  if (!fsync_) return Status::OK();
  // Make the new name durable, and the names of directories created for it.
  std::string sync = dir;
  while (true) {
    RETURN_IF_ERROR(SyncDir(sync).With("put " + key));
    if (!made_dirs || sync.size() <= root_.size()) return Status::OK();
    sync.resize(sync.rfind('/'));
  }
}

Result<size_t> FileStore::ReadRange(const std::string& key, int64_t off, int64_t len,
                                    const std::function<char*(size_t)>& room) {
  RETURN_IF_ERROR(CheckKey(key));
  if (off < 0) return Status::Err(EINVAL, "get " + key + ": negative offset");
  const std::string path = Path(key);
  // A kept file is used only while it is still the object's (linked).
  struct stat st;
  std::shared_ptr<UniqueFd> fd = CachedFd(key);
  if (fd && (::fstat(fd->get(), &st) != 0 || st.st_nlink == 0)) {
    ForgetFd(key);
    fd.reset();
  }
  bool opened = false;
  if (!fd) {
    fd = std::make_shared<UniqueFd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd->get() < 0 || ::fstat(fd->get(), &st) != 0) {
      int err = errno;
      return IsMissing(err) ? NotFound(key) : Status::Err(err, "get " + key + ": open " + path);
    }
    if (!S_ISREG(st.st_mode)) return NotFound(key);  // a directory is a key prefix, not an object
    opened = true;
  }

  int64_t size = st.st_size;
  if (off >= size) return size_t(0);
  // A read of part of the object keeps the file for the next one.
  if (opened && !(off == 0 && (len < 0 || len >= size))) KeepFd(key, fd);
  const size_t want = size_t(len < 0 ? size - off : std::min(len, size - off));
  char* dst = room(want);
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd->get(), dst + got, want - got, off_t(off + int64_t(got)));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      return Status::Err(err, "get " + key + ": read " + path);
    }
    if (n == 0) break;  // cannot happen for an object replaced only by rename
    got += size_t(n);
  }
  return got;
}

Result<std::string> FileStore::Get(const std::string& key, int64_t off, int64_t len) {
  std::string out;
  ASSIGN_OR_RETURN(size_t got, ReadRange(key, off, len, [&](size_t want) {
                     out = BufferPool::Default().Sized(want);  // a whole block: a kept buffer
                     return out.data();
                   }));
  out.resize(got);
  return out;
}

Result<size_t> FileStore::GetInto(const std::string& key, int64_t off, size_t len, char* dst) {
  return ReadRange(key, off, int64_t(len), [dst](size_t) { return dst; });
}

Status FileStore::Delete(const std::string& key) {
  RETURN_IF_ERROR(CheckKey(key));
  const std::string path = Path(key);
  const int err = ::unlink(path.c_str()) == 0 ? 0 : errno;
  ForgetFd(key);  // its space is freed once no read uses it
  if (err == 0) return Status::OK();
  if (IsMissing(err) || err == EISDIR) return Status::OK();
  return Status::Err(err, "delete " + key + ": unlink " + path);
}

Result<ObjectInfo> FileStore::Head(const std::string& key) {
  RETURN_IF_ERROR(CheckKey(key));
  const std::string path = Path(key);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    return IsMissing(err) ? NotFound(key) : Status::Err(err, "head " + key + ": stat " + path);
  }
  if (!S_ISREG(st.st_mode)) return NotFound(key);
  return ObjectInfo{key, int64_t(st.st_size), int64_t(st.st_mtim.tv_sec)};
}

Status FileStore::Walk(const std::string& rel_dir, const std::string& prefix,
                       const std::string& start_after, std::vector<std::string>* keys) const {
  const std::string dir = root_ + "/" + rel_dir;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
  if (!d) {
    int err = errno;
    return IsMissing(err) ? Status::OK() : Status::Err(err, "list " + prefix + ": opendir " + dir);
  }
  while (true) {
    errno = 0;
    const dirent* ent = ::readdir(d.get());
    if (ent == nullptr) break;
    std::string_view name = ent->d_name;
    if (name == "." || name == ".." || name.starts_with(kTempPrefix)) continue;
    unsigned char type = ent->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(::dirfd(d.get()), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
    }
    std::string key = rel_dir + std::string(name);
    if (type == DT_DIR) {
      std::string sub = key + "/";
      if (sub.starts_with(prefix) || prefix.starts_with(sub)) {
        RETURN_IF_ERROR(Walk(sub, prefix, start_after, keys));
      }
    } else if (type == DT_REG && key.starts_with(prefix) && key > start_after) {
      keys->push_back(std::move(key));
    }
  }
  if (errno != 0) {
    int err = errno;
    return Status::Err(err, "list " + prefix + ": readdir " + dir);
  }
  return Status::OK();
}

Status FileStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                       std::vector<ObjectInfo>* out, bool* more) {
  out->clear();
  // Start at the deepest directory that contains every match.
  size_t slash = prefix.rfind('/');
  std::vector<std::string> keys;
  RETURN_IF_ERROR(Walk(slash == std::string::npos ? "" : prefix.substr(0, slash + 1), prefix,
                       start_after, &keys));
  std::sort(keys.begin(), keys.end());
  bool has_more = false;
  for (const std::string& key : keys) {
    if (out->size() == limit) {
      has_more = true;
      break;
    }
    Result<ObjectInfo> info = Head(key);
    if (info.ok()) {
      out->push_back(std::move(*info));
    } else if (!info.status().not_found()) {  // deleted since the walk: skip it
      return info.status();
    }
  }
  if (more) *more = has_more;
  return Status::OK();
}

}  // namespace tessera::object
