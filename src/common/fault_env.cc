#include "common/fault_env.h"

#include <fcntl.h>

#include <algorithm>

namespace tessera {

void FaultEnv::FailNext(unsigned ops, int err, int n, int skip) {
  std::lock_guard<std::mutex> g(mu_);
  forced_.push_back({ops, err, n, skip});
}

void FaultEnv::FailRandomly(unsigned ops, int err, double p, uint64_t seed) {
  std::lock_guard<std::mutex> g(mu_);
  random_ops_ = ops;
  random_err_ = err;
  random_p_ = p;
  seed_ = seed;
  draws_ = 0;
}

void FaultEnv::ShortWrites(int n) {
  std::lock_guard<std::mutex> g(mu_);
  short_writes_ = n;
}

void FaultEnv::AdvanceClock(std::chrono::steady_clock::duration d) {
  std::lock_guard<std::mutex> g(mu_);
  clock_offset_ += d;
}

std::chrono::steady_clock::time_point FaultEnv::Now() {
  std::lock_guard<std::mutex> g(mu_);
  return base_->Now() + clock_offset_;
}

uint64_t FaultEnv::calls(unsigned ops) const {
  uint64_t n = 0;
  for (int bit = 0; bit < 8; ++bit)
    if (ops & (1u << bit)) n += calls_[bit].load();
  return n;
}

int FaultEnv::Decide(Op op) {
  for (int bit = 0; bit < 8; ++bit)
    if (op & (1u << bit)) calls_[bit].fetch_add(1);
  std::lock_guard<std::mutex> g(mu_);
  int err = 0;
  for (auto it = forced_.begin(); it != forced_.end(); ++it) {
    if ((it->ops & op) == 0) continue;
    if (it->skip > 0) {
      --it->skip;
      break;
    }
    err = it->err;
    if (--it->count <= 0) forced_.erase(it);
    break;
  }
  if (err == 0 && (random_ops_ & op) != 0 && random_p_ > 0) {
    // splitmix64 of (seed, draw): repeatable for a seed.
    uint64_t x = seed_ * 0x9E3779B97F4A7C15ull + (++draws_) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    if (double(x >> 11) / double(1ull << 53) < random_p_) err = random_err_;
  }
  if (err != 0) injected_.fetch_add(1);
  return err;
}

bool FaultEnv::TakeShortWrite() {
  std::lock_guard<std::mutex> g(mu_);
  if (short_writes_ <= 0) return false;
  --short_writes_;
  injected_.fetch_add(1);
  return true;
}

Result<int> FaultEnv::Open(const std::string& path, int flags, mode_t mode) {
  if (int err = Decide(kOpen)) return Status::Err(err, "injected: open " + path);
  ASSIGN_OR_RETURN(int fd, base_->Open(path, flags, mode));
  std::lock_guard<std::mutex> g(mu_);
  fds_[fd] = FileState{path, 0, false};
  return fd;
}

Status FaultEnv::Close(int fd) {
  {
    std::lock_guard<std::mutex> g(mu_);
    fds_.erase(fd);
  }
  return base_->Close(fd);
}

Result<size_t> FaultEnv::Pread(int fd, char* buf, size_t n, uint64_t off) {
  if (int err = Decide(kRead)) return Status::Err(err, "injected: read");
  return base_->Pread(fd, buf, n, off);
}

Result<size_t> FaultEnv::Pwritev(int fd, const iovec* iov, int count, uint64_t off) {
  if (int err = Decide(kWrite)) return Status::Err(err, "injected: write");
  std::string path;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = fds_.find(fd);
    if (it != fds_.end()) path = it->second.path;
  }
  if (!path.empty()) {
    // The first write since the last sync: what is on disk now is the
    // synced state a crash goes back to (files created here start empty).
    std::lock_guard<std::mutex> g(mu_);
    auto [f, fresh] = files_.try_emplace(path, FileState{path, 0, false});
    if (fresh) {
      auto size = base_->FileSize(fd);
      f->second.synced_size = size.ok() ? *size : 0;
    }
    f->second.dirty = true;
  }
  std::vector<iovec> parts(iov, iov + count);
  if (TakeShortWrite()) {
    size_t total = 0;
    for (const iovec& v : parts) total += v.iov_len;
    size_t keep = std::max<size_t>(1, total / 2);
    std::vector<iovec> cut;
    for (const iovec& v : parts) {
      if (keep == 0) break;
      cut.push_back({v.iov_base, std::min(keep, v.iov_len)});
      keep -= cut.back().iov_len;
    }
    parts.swap(cut);
  }
  return base_->Pwritev(fd, parts.data(), int(parts.size()), off);
}

void FaultEnv::Synced(int fd) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  auto f = files_.find(it->second.path);
  if (f == files_.end()) return;
  auto size = base_->FileSize(fd);
  if (size.ok()) f->second.synced_size = *size;
  f->second.dirty = false;
}

Status FaultEnv::Fdatasync(int fd) {
  if (int err = Decide(kSync)) return Status::Err(err, "injected: fdatasync");
  RETURN_IF_ERROR(base_->Fdatasync(fd));
  Synced(fd);
  return Status::OK();
}

Status FaultEnv::Fsync(int fd) {
  if (int err = Decide(kSync)) return Status::Err(err, "injected: fsync");
  RETURN_IF_ERROR(base_->Fsync(fd));
  Synced(fd);
  return Status::OK();
}

Status FaultEnv::Ftruncate(int fd, uint64_t size) {
  if (int err = Decide(kTruncate)) return Status::Err(err, "injected: truncate");
  return base_->Ftruncate(fd, size);
}

Status FaultEnv::Rename(const std::string& from, const std::string& to) {
  if (int err = Decide(kRename)) return Status::Err(err, "injected: rename " + from);
  RETURN_IF_ERROR(base_->Rename(from, to));
  std::lock_guard<std::mutex> g(mu_);
  auto f = files_.find(from);
  if (f != files_.end()) {
    FileState moved = f->second;
    moved.path = to;
    files_.erase(f);
    files_[to] = moved;
  }
  for (auto& [fd, state] : fds_)
    if (state.path == from) state.path = to;
  return Status::OK();
}

Status FaultEnv::Unlink(const std::string& path) {
  if (int err = Decide(kUnlink)) return Status::Err(err, "injected: unlink " + path);
  RETURN_IF_ERROR(base_->Unlink(path));
  std::lock_guard<std::mutex> g(mu_);
  files_.erase(path);
  return Status::OK();
}

Result<DiskSpace> FaultEnv::Space(const std::string& dir) {
  if (int err = Decide(kSpace)) return Status::Err(err, "injected: statvfs " + dir);
  return base_->Space(dir);
}

Status FaultEnv::DropUnsyncedData() {
  std::vector<std::pair<std::string, uint64_t>> cuts;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [path, f] : files_) {
      if (f.dirty) cuts.emplace_back(path, f.synced_size);
      f.dirty = false;
    }
  }
  for (const auto& [path, size] : cuts) {
    auto fd = base_->Open(path, O_WRONLY, 0);
    if (!fd.ok()) {
      if (fd.status().not_found()) continue;
      return fd.status();
    }
    Status st = base_->Ftruncate(*fd, size);
    (void)base_->Close(*fd);
    RETURN_IF_ERROR(st);
  }
  return Status::OK();
}

}  // namespace tessera
