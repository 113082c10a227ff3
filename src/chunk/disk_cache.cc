#include "common/file_lock.h"
#include "common/endian.h"
#include "chunk/disk_cache.h"
#include "common/buffer_pool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "common/thread_name.h"

namespace tessera::chunk {
namespace {

namespace fs = std::filesystem;

// Header of a cache file, all integers little-endian (docs/format.md):
//   0  magic    4 bytes "TSBC"
//   4  version  u32 = 1
//   8  length   u64, bytes of the block that follows
//   16 checksum u64, XXH64(block, seed 0)
constexpr char kMagic[4] = {'T', 'S', 'B', 'C'};
constexpr uint32_t kVersion = 1;
constexpr std::string_view kTempInfix = ".tmp.";

// Block length encoded in a cache file name ("{id}_{index}_{len}"), or -1 if
// the name is not one of ours.
int64_t BlockLenOfName(std::string_view name) {
  int fields = 0;
  uint64_t value = 0;
  bool digits = false;
  for (char c : name) {
    if (c == '_') {
      if (!digits) return -1;
      ++fields;
      value = 0;
      digits = false;
    } else if (c >= '0' && c <= '9') {
      value = value * 10 + uint64_t(c - '0');
      if (value > UINT32_MAX) return -1;
      digits = true;
    } else {
      return -1;
    }
  }
  return fields == 2 && digits ? int64_t(value) : -1;
}

Status WriteCacheFile(Env* env, const std::string& path, const std::string& block) {
  char header[kDiskCacheHeaderSize];
  std::memcpy(header, kMagic, 4);
  PutLE(header + 4, kVersion, 4);
  PutLE(header + 8, block.size(), 8);
  PutLE(header + 16, XXH64(block.data(), block.size(), 0), 8);

  auto raw = env->Open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (!raw.ok() && raw.status().not_found()) {
    RETURN_IF_ERROR(env->MakeDirs(path.substr(0, path.rfind('/')), nullptr));
    raw = env->Open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  }
  if (!raw.ok()) return raw.status();
  EnvFile fd(env, *raw);
  RETURN_IF_ERROR(PwriteFull(env, fd.get(), {{header, sizeof(header)}, {const_cast<char*>(block.data()), block.size()}}, 0)
                      .With("write " + path));
  return fd.Close().With("close " + path);
}

}  // namespace

Result<CacheEviction> ParseCacheEviction(std::string_view name) {
  if (name == "lru") return CacheEviction::kLru;
  if (name == "2-random") return CacheEviction::kTwoRandom;
  return Status::Err(EINVAL, "unknown cache eviction policy '" + std::string(name) + "' (lru, 2-random)");
}

std::string_view CacheEvictionName(CacheEviction e) {
  switch (e) {
    case CacheEviction::kLru:
      return "lru";
    case CacheEviction::kTwoRandom:
      return "2-random";
  }
  return "unknown";
}

Result<std::unique_ptr<DiskBlockCache>> DiskBlockCache::Open(DiskCacheOptions opts) {
  if (opts.dir.empty()) return Status::Err(EINVAL, "disk cache: empty directory");
  if (!(opts.free_space_ratio >= 0 && opts.free_space_ratio < 1)) {
    return Status::Err(EINVAL, "disk cache: free space ratio must be in [0, 1)");
  }
  if (!opts.env) opts.env = Env::Posix();
  if (!opts.disk_space) opts.disk_space = [env = opts.env](const std::string& dir) { return env->Space(dir); };
  while (opts.dir.size() > 1 && opts.dir.back() == '/') opts.dir.pop_back();
  RETURN_IF_ERROR(opts.env->MakeDirs(opts.dir + "/raw", nullptr).With("disk cache"));

  const std::string lock_path = opts.dir + "/.lock";
  ASSIGN_OR_RETURN(int fd, LockFile(lock_path, "disk cache", opts.dir, 0644));
  std::unique_ptr<DiskBlockCache> cache(new DiskBlockCache(std::move(opts), fd));
  RETURN_IF_ERROR(cache->Scan());
  if (cache->opts_.async_writes) cache->writer_ = std::thread(&DiskBlockCache::WriterLoop, cache.get());
  return cache;
}

DiskBlockCache::DiskBlockCache(DiskCacheOptions opts, int lock_fd)
    : opts_(std::move(opts)),
      raw_(opts_.dir + "/raw"),
      lock_fd_(lock_fd),
      rng_(opts_.seed != 0 ? opts_.seed : std::random_device{}()) {}

DiskBlockCache::~DiskBlockCache() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  ::close(lock_fd_);
}

std::string DiskBlockCache::PathOf(const std::string& key) const { return raw_ + "/" + key; }

Status DiskBlockCache::Scan() {
  struct Found {
    std::string key;
    uint64_t size;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::vector<fs::path> garbage;
  std::error_code ec;
  const fs::path root(raw_);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const std::string name = it->path().filename().string();
    if (name.find(kTempInfix) != std::string::npos) {  // a write cut short by a crash
      garbage.push_back(it->path());
      continue;
    }
    const int64_t len = BlockLenOfName(name);
    if (len < 0) continue;  // not ours: leave it alone
    const uint64_t size = it->file_size(fec);
    const fs::file_time_type mtime = it->last_write_time(fec);
    if (fec) continue;
    if (size != kDiskCacheHeaderSize + uint64_t(len)) {
      LOG_WARN("disk cache: {} has {} bytes, want {}; deleted", it->path().string(), size,
               kDiskCacheHeaderSize + uint64_t(len));
      garbage.push_back(it->path());
      continue;
    }
    found.push_back(Found{it->path().lexically_relative(root).generic_string(), size, mtime});
  }
  if (ec) return Status::Err(ec.value(), "disk cache: scan " + raw_ + ": " + ec.message());
  for (const fs::path& p : garbage) fs::remove(p, ec);

  // Oldest first, so the most recently written blocks end up most recently used.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  Result<uint64_t> to_free = BytesToFree(0);
  std::lock_guard lock(mu_);
  for (const Found& f : found) {
    InsertLocked(f.key, f.size);
    used_ += f.size;
  }
  MakeRoomLocked(0, to_free.ok() ? *to_free : 0);
  LOG_INFO("disk cache {}: {} blocks, {} bytes (capacity {}, {} evicted at start)", opts_.dir, index_.size(), used_,
           opts_.capacity_bytes, counters_.evictions);
  return Status::OK();
}

BlockRef DiskBlockCache::Get(const std::string& key, uint32_t len) {
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    it->second.atime = ++clock_;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  const std::string path = PathOf(key);
  Env* env = opts_.env;
  auto opened = env->Open(path, O_RDONLY, 0);
  if (!opened.ok()) {
    if (!opened.status().not_found()) {
      Corrupt(key, "cannot open: " + opened.status().ToString());
      return nullptr;
    }
    // Evicted since the lookup (fine), or deleted behind our back: forget it.
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      LOG_WARN("disk cache: block file {} vanished", path);
      RemoveLocked(it);
    }
    return nullptr;
  }
  EnvFile fd(env, *opened);
  auto size = env->FileSize(fd.get());
  if (!size.ok()) {
    Corrupt(key, "cannot stat: " + size.status().ToString());
    return nullptr;
  }
  const uint64_t want = kDiskCacheHeaderSize + uint64_t(len);
  if (*size != want) {
    Corrupt(key, "has " + std::to_string(*size) + " bytes, want " + std::to_string(want));
    return nullptr;
  }
  char header[kDiskCacheHeaderSize];
  std::string data = BufferPool::Default().Sized(len);
  Status rs = PreadFull(env, fd.get(), header, sizeof(header), 0);
  if (rs.ok()) rs = PreadFull(env, fd.get(), data.data(), len, sizeof(header));
  if (!rs.ok()) {
    Corrupt(key, rs.ToString());
    return nullptr;
  }
  if (std::memcmp(header, kMagic, 4) != 0) {
    Corrupt(key, "bad magic");
    return nullptr;
  }
  if (GetLE(header + 4, 4) != kVersion) {
    Corrupt(key, "unknown version " + std::to_string(GetLE(header + 4, 4)));
    return nullptr;
  }
  if (GetLE(header + 8, 8) != len) {
    Corrupt(key, "header length " + std::to_string(GetLE(header + 8, 8)) + ", want " + std::to_string(len));
    return nullptr;
  }
  if (GetLE(header + 16, 8) != XXH64(data.data(), data.size(), 0)) {
    Corrupt(key, "checksum mismatch");
    return nullptr;
  }
  return BufferPool::Default().Share(std::move(data));
}

void DiskBlockCache::Corrupt(const std::string& key, const std::string& why) {
  LOG_WARN("disk cache: block file {} is corrupt ({}); deleted, the block will be refetched", PathOf(key), why);
  std::lock_guard lock(mu_);
  ++counters_.corrupt;
  auto it = index_.find(key);
  if (it != index_.end()) RemoveLocked(it);
}

void DiskBlockCache::Put(const std::string& key, BlockRef block) {
  if (!block) return;
  {
    std::lock_guard lock(mu_);
    if (stop_ || index_.count(key) != 0 || pending_.count(key) != 0) return;
    if (opts_.async_writes && pending_bytes_ + block->size() > opts_.max_pending_bytes) {
      ++counters_.dropped_writes;
      return;
    }
    pending_.emplace(key, Pending{block, false});
    pending_bytes_ += block->size();
    if (opts_.async_writes) queue_.push_back(key);
  }
  if (opts_.async_writes) {
    work_cv_.notify_one();
  } else {
    Write(key, block);
  }
}

void DiskBlockCache::Erase(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) RemoveLocked(it);
  auto p = pending_.find(key);
  if (p != pending_.end()) p->second.cancelled = true;
}

bool DiskBlockCache::Contains(const std::string& key) const {
  std::lock_guard lock(mu_);
  return index_.count(key) != 0 || pending_.count(key) != 0;
}

void DiskBlockCache::WaitForRoom(uint64_t bytes) {
  if (!opts_.async_writes) return;
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return stop_ || pending_bytes_ + bytes <= opts_.max_pending_bytes; });
}

void DiskBlockCache::Drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return pending_.empty(); });
}

DiskBlockCache::Stats DiskBlockCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = counters_;
  s.bytes = used_;
  s.blocks = index_.size();
  return s;
}

void DiskBlockCache::WriterLoop() {
  NameThisThread("ts-cache-write");
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every queued write is done
    const std::string key = std::move(queue_.front());
    queue_.pop_front();
    const BlockRef block = pending_.at(key).block;
    lock.unlock();
    Write(key, block);
    lock.lock();
  }
}

void DiskBlockCache::Write(const std::string& key, const BlockRef& block) {
  const uint64_t size = kDiskCacheHeaderSize + block->size();
  Result<uint64_t> to_free = BytesToFree(size);
  std::string tmp;
  bool reserved = false;
  {
    std::lock_guard lock(mu_);
    if (!pending_.at(key).cancelled && to_free.ok() && MakeRoomLocked(size, *to_free)) {
      used_ += size;
      reserved = true;
      tmp = PathOf(key) + std::string(kTempInfix) + std::to_string(++temp_seq_);
    }
  }
  Status st = reserved ? WriteCacheFile(opts_.env, tmp, *block) : Status::OK();
  bool committed = false;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(key);
    const bool cancelled = it->second.cancelled;
    if (reserved && st.ok() && !cancelled) {
      // Under mu_, so an Erase or eviction never races with the file appearing.
      st = opts_.env->Rename(tmp, PathOf(key));
      if (st.ok()) {
        InsertLocked(key, size);
        committed = true;
      }
    }
    if (!committed) {
      if (reserved) {
        used_ -= size;
        (void)opts_.env->Unlink(tmp);  // a leftover temporary file is removed at the next Open
      }
      if (!cancelled) ++counters_.dropped_writes;
    }
    pending_bytes_ -= block->size();
    pending_.erase(it);
  }
  idle_cv_.notify_all();
  if (!to_free.ok()) LOG_WARN("disk cache: not caching {}: {}", key, to_free.status().ToString());
  if (!st.ok()) LOG_WARN("disk cache: cannot cache {}: {}", key, st.ToString());
}

Result<uint64_t> DiskBlockCache::BytesToFree(uint64_t incoming) {
  if (opts_.free_space_ratio <= 0) return uint64_t(0);
  ASSIGN_OR_RETURN(DiskSpace space, opts_.disk_space(opts_.dir));
  const uint64_t keep = uint64_t(std::ceil(opts_.free_space_ratio * double(space.total_bytes)));
  const uint64_t need = keep + incoming;
  return space.avail_bytes >= need ? 0 : need - space.avail_bytes;
}

bool DiskBlockCache::MakeRoomLocked(uint64_t incoming, uint64_t to_free) {
  if (incoming > opts_.capacity_bytes) return false;  // would never fit: evict nothing for it
  uint64_t freed = 0;
  while (!index_.empty() && (used_ + incoming > opts_.capacity_bytes || freed < to_free)) {
    auto victim = VictimLocked();
    freed += victim->second.size;
    RemoveLocked(victim);
    ++counters_.evictions;
  }
  return used_ + incoming <= opts_.capacity_bytes && freed >= to_free;
}

DiskBlockCache::Index::iterator DiskBlockCache::VictimLocked() {
  if (opts_.eviction == CacheEviction::kLru || slots_.size() == 1) return index_.find(*lru_.back());
  const size_t n = slots_.size();
  const size_t i = size_t(rng_() % n);
  size_t j = size_t(rng_() % (n - 1));
  if (j >= i) ++j;  // two distinct samples
  auto a = index_.find(*slots_[i]), b = index_.find(*slots_[j]);
  return a->second.atime <= b->second.atime ? a : b;
}

void DiskBlockCache::InsertLocked(const std::string& key, uint64_t size) {
  auto [it, inserted] = index_.try_emplace(key);
  if (!inserted) {  // never happens: writers skip keys already indexed
    used_ -= it->second.size;
    lru_.erase(it->second.lru);
  } else {
    it->second.slot = slots_.size();
    slots_.push_back(&it->first);
  }
  it->second.size = size;
  it->second.atime = ++clock_;
  lru_.push_front(&it->first);
  it->second.lru = lru_.begin();
}

void DiskBlockCache::RemoveLocked(Index::iterator it) {
  // A file that cannot be removed is found again by the next Open's scan.
  if (Status st = opts_.env->Unlink(PathOf(it->first)); !st.ok() && !st.not_found())
    LOG_WARN("disk cache: cannot delete {}: {}", PathOf(it->first), st.ToString());
  used_ -= it->second.size;
  lru_.erase(it->second.lru);
  const size_t slot = it->second.slot;
  const std::string* last = slots_.back();
  slots_[slot] = last;
  index_.find(*last)->second.slot = slot;
  slots_.pop_back();
  index_.erase(it);
}

}  // namespace tessera::chunk
