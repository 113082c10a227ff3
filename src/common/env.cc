#include "common/env.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace tessera {
namespace {

class PosixEnv final : public Env {
 public:
  Result<int> Open(const std::string& path, int flags, mode_t mode) override {
    int fd;
    do {
      fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return Status::Err(errno, "open " + path);
    return fd;
  }
  Status Close(int fd) override {
    // Linux closes the descriptor even when close fails: never retry.
    return ::close(fd) == 0 ? Status::OK() : Status::Err(errno, "close");
  }
  Result<size_t> Pread(int fd, char* buf, size_t n, uint64_t off) override {
    for (;;) {
      ssize_t got = ::pread(fd, buf, n, off_t(off));
      if (got >= 0) return size_t(got);
      if (errno != EINTR) return Status::Err(errno, "read");
    }
  }
  Result<size_t> Pwritev(int fd, const iovec* iov, int count, uint64_t off) override {
    for (;;) {
      ssize_t put = ::pwritev(fd, iov, count, off_t(off));
      if (put >= 0) return size_t(put);
      if (errno != EINTR) return Status::Err(errno, "write");
    }
  }
  Status Fdatasync(int fd) override { return ::fdatasync(fd) == 0 ? Status::OK() : Status::Err(errno, "fdatasync"); }
  Status Fsync(int fd) override { return ::fsync(fd) == 0 ? Status::OK() : Status::Err(errno, "fsync"); }
  Status Ftruncate(int fd, uint64_t size) override {
    return ::ftruncate(fd, off_t(size)) == 0 ? Status::OK() : Status::Err(errno, "truncate");
  }
  Result<uint64_t> FileSize(int fd) override {
    struct stat st;
    if (::fstat(fd, &st) != 0) return Status::Err(errno, "stat");
    return uint64_t(st.st_size);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return ::rename(from.c_str(), to.c_str()) == 0 ? Status::OK() : Status::Err(errno, "rename " + from);
  }
  Status Unlink(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? Status::OK() : Status::Err(errno, "unlink " + path);
  }
  Status MakeDirs(const std::string& path, bool* created) override {
    std::error_code ec;
    const bool made = std::filesystem::create_directories(path, ec);
    if (ec) return Status::Err(ec.value(), "mkdir " + path + ": " + ec.message());
    if (created) *created = made;
    return Status::OK();
  }
  Result<DiskSpace> Space(const std::string& dir) override {
    struct statvfs st;
    if (::statvfs(dir.c_str(), &st) != 0) return Status::Err(errno, "statvfs " + dir);
    return DiskSpace{uint64_t(st.f_bavail) * st.f_frsize, uint64_t(st.f_blocks) * st.f_frsize};
  }
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }
};

}  // namespace

Env* Env::Posix() {
  static PosixEnv env;
  return &env;
}

Status PreadFull(Env* env, int fd, char* buf, size_t n, uint64_t off) {
  while (n > 0) {
    ASSIGN_OR_RETURN(size_t got, env->Pread(fd, buf, n, off));
    if (got == 0) return Status::Err(EIO, "unexpected end of file");
    buf += got;
    n -= got;
    off += got;
  }
  return Status::OK();
}

Status PwriteFull(Env* env, int fd, std::vector<iovec> iov, uint64_t off) {
  size_t i = 0;
  while (i < iov.size()) {
    if (iov[i].iov_len == 0) {
      ++i;
      continue;
    }
    const int n = int(std::min<size_t>(iov.size() - i, IOV_MAX));
    ASSIGN_OR_RETURN(size_t put, env->Pwritev(fd, &iov[i], n, off));
    if (put == 0) return Status::Err(EIO, "write made no progress");
    off += put;
    for (size_t left = put; left > 0;) {
      if (left >= iov[i].iov_len) {
        left -= iov[i].iov_len;
        ++i;
      } else {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
        left = 0;
      }
    }
  }
  return Status::OK();
}

}  // namespace tessera
