// FaultEnv: an Env (env.h) over another that fails the way local disks do,
// for tests of the staging area, the disk cache and SQLite (STYLE.md
// principles 5 and 6; LevelDB's fault_injection_test, RocksDB's
// FaultInjectionTestFS):
//   - errors: chosen calls fail with an errno (EIO, ENOSPC, ...), either the
//     next n calls of a kind (FailNext) or with a seeded probability;
//   - short writes: a write transfers only part of what it was given;
//   - lost unsynced data: DropUnsyncedData() cuts every file written through
//     this Env back to its size at its last fsync/fdatasync (files never
//     synced lose everything), as a power loss would;
//   - clock jumps: AdvanceClock moves Now() forward.
// Thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/env.h"

namespace tessera {

class FaultEnv final : public Env {
 public:
  // What an injected fault applies to.
  enum Op : unsigned {
    kOpen = 1,
    kRead = 2,
    kWrite = 4,
    kSync = 8,  // fsync and fdatasync
    kTruncate = 16,
    kRename = 32,
    kUnlink = 64,
    kSpace = 128,
    kAll = 255,
  };

  explicit FaultEnv(Env* base = Env::Posix()) : base_(base) {}

  // The next n calls of the kinds in ops, after the first `skip` of them,
  // fail with err (a write: after writing nothing).
  void FailNext(unsigned ops, int err, int n = 1, int skip = 0);
  // Every call of the kinds in ops fails with err, with probability p
  // (seeded, so a run can be repeated); p = 0 stops it.
  void FailRandomly(unsigned ops, int err, double p, uint64_t seed = 1);
  // The next n writes transfer only half of their bytes (at least one).
  void ShortWrites(int n);
  // Cuts every file written since its last sync back to its synced size.
  Status DropUnsyncedData();
  void AdvanceClock(std::chrono::steady_clock::duration d);
  // Faults injected so far.
  uint64_t injected() const { return injected_.load(); }
  // Calls of the kinds in ops made so far (failed or not).
  uint64_t calls(unsigned ops) const;

  Result<int> Open(const std::string& path, int flags, mode_t mode) override;
  Status Close(int fd) override;
  Result<size_t> Pread(int fd, char* buf, size_t n, uint64_t off) override;
  Result<size_t> Pwritev(int fd, const iovec* iov, int count, uint64_t off) override;
  Status Fdatasync(int fd) override;
  Status Fsync(int fd) override;
  Status Ftruncate(int fd, uint64_t size) override;
  Result<uint64_t> FileSize(int fd) override { return base_->FileSize(fd); }
  Status Rename(const std::string& from, const std::string& to) override;
  Status Unlink(const std::string& path) override;
  Status MakeDirs(const std::string& path, bool* created) override { return base_->MakeDirs(path, created); }
  Result<DiskSpace> Space(const std::string& dir) override;
  std::chrono::steady_clock::time_point Now() override;

  // The fault to inject into a call of kind op (0 = none), counted as
  // injected; for shims outside this Env (SQLite's VFS).
  int Decide(Op op);
  // Consumes a pending short write: true if this write should be short.
  bool TakeShortWrite();

 private:
  struct FileState {
    std::string path;
    uint64_t synced_size = 0;  // at the last sync through this Env
    bool dirty = false;        // written since
  };
  void Synced(int fd);

  Env* const base_;
  std::mutex mu_;
  struct Forced {
    unsigned ops;
    int err;
    int count;
    int skip;
  };
  std::vector<Forced> forced_;  // guarded by mu_
  unsigned random_ops_ = 0;                                      // guarded by mu_
  int random_err_ = 0;                                           // guarded by mu_
  double random_p_ = 0;                                          // guarded by mu_
  uint64_t seed_ = 1, draws_ = 0;                                // guarded by mu_
  int short_writes_ = 0;                                         // guarded by mu_
  std::map<int, FileState> fds_;                                 // guarded by mu_: open descriptors
  std::map<std::string, FileState> files_;                       // guarded by mu_: by path, once written
  std::chrono::steady_clock::duration clock_offset_{};           // guarded by mu_
  std::atomic<uint64_t> injected_{0};
  std::atomic<uint64_t> calls_[8] = {};  // per kind of Op, by its bit
};

}  // namespace tessera
