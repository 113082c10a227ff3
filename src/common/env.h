// The environment: local disk I/O and the clock behind one narrow interface
// (LevelDB's Env, RocksDB's FileSystem). The layers that keep data on the
// local disk — the writeback staging area and the disk block cache — make
// every file system call through it, so that tests reach their failure paths
// with a twin that injects errors, short writes, lost unsynced data and clock
// jumps (FaultEnv, fault_env.h). SQLite's own I/O goes through a VFS shim
// that asks the same FaultEnv (kv/sqlite_fault_vfs.h).
//
// Calls mirror the POSIX calls they wrap, on file descriptors; errors carry
// the errno of the failing call. Thread-safe.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

struct DiskSpace {
  uint64_t avail_bytes = 0;  // for unprivileged writers
  uint64_t total_bytes = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The real file system and clocks (one for the process).
  static Env* Posix();

  virtual Result<int> Open(const std::string& path, int flags, mode_t mode) = 0;
  virtual Status Close(int fd) = 0;
  // One call each: may transfer fewer bytes than asked (see the helpers).
  virtual Result<size_t> Pread(int fd, char* buf, size_t n, uint64_t off) = 0;
  virtual Result<size_t> Pwritev(int fd, const iovec* iov, int count, uint64_t off) = 0;
  virtual Status Fdatasync(int fd) = 0;
  virtual Status Fsync(int fd) = 0;
  virtual Status Ftruncate(int fd, uint64_t size) = 0;
  virtual Result<uint64_t> FileSize(int fd) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  // Creates the directory and its missing parents; *created (if given) tells
  // whether the directory itself is new.
  virtual Status MakeDirs(const std::string& path, bool* created) = 0;
  virtual Result<DiskSpace> Space(const std::string& dir) = 0;
  // Steady clock (deadlines, delays).
  virtual std::chrono::steady_clock::time_point Now() = 0;
};

// A descriptor of an Env, closed with it when it goes.
class EnvFile {
 public:
  EnvFile(Env* env, int fd) : env_(env), fd_(fd) {}
  EnvFile(const EnvFile&) = delete;
  EnvFile& operator=(const EnvFile&) = delete;
  ~EnvFile() {
    if (fd_ >= 0) (void)env_->Close(fd_);  // for files only read: a failed close loses nothing
  }
  int get() const { return fd_; }
  // Closes now and reports the error (for files written).
  Status Close() {
    const int fd = fd_;
    fd_ = -1;
    return fd >= 0 ? env_->Close(fd) : Status::OK();
  }

 private:
  Env* const env_;
  int fd_;
};

// Reads exactly n bytes at off (retrying EINTR and short reads); EIO at end
// of file, errno otherwise.
Status PreadFull(Env* env, int fd, char* buf, size_t n, uint64_t off);
// Writes every iovec at off, in as many calls as it takes (short writes are
// continued); the error of the call that failed.
Status PwriteFull(Env* env, int fd, std::vector<iovec> iov, uint64_t off);

}  // namespace tessera
