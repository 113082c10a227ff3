// Local-disk cache of whole, uncompressed blocks (docs/format.md, "Local
// block cache files"). Each block is one file DIR/raw/<BlockKey> holding a
// 24-byte header (magic, version, length, xxhash64) and the block, written to
// a temporary name and renamed into place. Every read verifies the header and
// checksum; a corrupt or truncated file is deleted, logged, and reported as a
// miss so the caller refetches the block from the object store.
//
// Space: the sum of the cache files' sizes (header included) never exceeds
// capacity_bytes; a write reserves its bytes (evicting first) before the file
// is created. Writes also evict, or are skipped, so that the file system
// holding DIR keeps at least free_space_ratio of its space free.
//
// The index lives in memory and is rebuilt by scanning DIR/raw at Open, so
// the cache survives restarts. One process owns DIR at a time (flock on
// DIR/.lock); a second Open of the same DIR fails with EBUSY.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chunk/mem_cache.h"
#include "common/env.h"
#include "common/status.h"

namespace tessera::chunk {

enum class CacheEviction : uint8_t {
  kLru,        // evict the least recently used block
  kTwoRandom,  // sample two distinct blocks, evict the less recently used one
};

// "lru" | "2-random"; EINVAL otherwise.
Result<CacheEviction> ParseCacheEviction(std::string_view name);
std::string_view CacheEvictionName(CacheEviction e);

using tessera::DiskSpace;

struct DiskCacheOptions {
  // This volume's cache directory; blocks live under dir/raw/. Created if needed.
  std::string dir;
  uint64_t capacity_bytes = 100ull << 30;
  // Keep at least this fraction of the file system free (0 = no check).
  double free_space_ratio = 0.1;
  CacheEviction eviction = CacheEviction::kLru;
  // Put queues blocks for a background writer thread; blocks queued beyond
  // this many bytes are dropped (the cache is best effort, a miss is never
  // slowed down by it). false: Put writes the file before returning.
  bool async_writes = true;
  uint64_t max_pending_bytes = 64ull << 20;
  // Every file system call (tests give a FaultEnv); null = Env::Posix().
  Env* env = nullptr;
  // Injectable for tests; default env->Space.
  std::function<Result<DiskSpace>(const std::string& dir)> disk_space;
  // Seeds the 2-random sampling (0 = random).
  uint64_t seed = 0;
};

// Bytes of the header in front of each cached block.
constexpr size_t kDiskCacheHeaderSize = 24;

// Thread-safe. Lock order: mu_ only; file reads and writes happen outside it,
// evictions' unlinks and the final rename inside it (so the index and the
// files agree whenever mu_ is free).
class DiskBlockCache {
 public:
  struct Stats {
    uint64_t bytes = 0;           // file bytes, including writes in progress
    uint64_t blocks = 0;          // files in the index
    uint64_t corrupt = 0;         // corrupt or truncated files found and deleted
    uint64_t evictions = 0;
    uint64_t dropped_writes = 0;  // Puts not cached: queue full, no room, or a write error
  };

  // Creates dir, takes its lock, rebuilds the index from dir/raw (deleting
  // leftover temporary files and files of the wrong size), then evicts down
  // to the capacity and free-space limits.
  static Result<std::unique_ptr<DiskBlockCache>> Open(DiskCacheOptions opts);
  // Finishes the queued writes, then releases the directory.
  ~DiskBlockCache();
  DiskBlockCache(const DiskBlockCache&) = delete;
  DiskBlockCache& operator=(const DiskBlockCache&) = delete;

  // The block of key if it is cached and intact; it must be `len` bytes (the
  // key's length). nullptr on a miss (or a corrupt file, now deleted).
  BlockRef Get(const std::string& key, uint32_t len);
  // Caches the block unless it is cached or queued already (best effort).
  void Put(const std::string& key, BlockRef block);
  // Removes the block's file and cancels a queued write of it.
  void Erase(const std::string& key);
  // Is the block in the cache (written, or being written)?
  bool Contains(const std::string& key) const;
  // Waits until a Put of `bytes` more would not be dropped for a full
  // write queue (warmup: every block must land).
  void WaitForRoom(uint64_t bytes);
  // Waits until every write queued so far has finished.
  void Drain();

  Stats stats() const;
  const std::string& dir() const { return opts_.dir; }
  // Path of the cache file of key (tests inspect and damage it).
  std::string PathOf(const std::string& key) const;

 private:
  struct Entry {
    uint64_t size = 0;                            // file bytes
    uint64_t atime = 0;                           // access clock at last use
    std::list<const std::string*>::iterator lru;  // in lru_
    size_t slot = 0;                              // in slots_
  };
  struct Pending {
    BlockRef block;
    bool cancelled = false;  // erased while queued or being written
  };
  using Index = std::unordered_map<std::string, Entry>;

  DiskBlockCache(DiskCacheOptions opts, int lock_fd);
  Status Scan();
  void WriterLoop();
  // Writes a block taken from pending_, then retires its pending_ entry.
  void Write(const std::string& key, const BlockRef& block);

  void InsertLocked(const std::string& key, uint64_t size);
  void RemoveLocked(Index::iterator it);  // unlinks the file
  Index::iterator VictimLocked();
  // Evicts until `incoming` more bytes fit the capacity and at least
  // `to_free` bytes were released; false if that is impossible.
  bool MakeRoomLocked(uint64_t incoming, uint64_t to_free);
  // Bytes to release before writing `incoming` bytes so that the free-space
  // ratio holds afterwards (0 when there is room). Calls opts_.disk_space.
  Result<uint64_t> BytesToFree(uint64_t incoming);
  void Corrupt(const std::string& key, const std::string& why);

  const DiskCacheOptions opts_;  // immutable
  const std::string raw_;        // immutable; opts_.dir + "/raw"
  const int lock_fd_;            // immutable; holds flock on dir/.lock

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // signalled when queue_ grows or stop_ is set
  std::condition_variable idle_cv_;   // signalled when a pending write retires
  Index index_;                       // guarded by mu_
  std::list<const std::string*> lru_; // guarded by mu_; keys of index_, front = most recent
  std::vector<const std::string*> slots_;  // guarded by mu_; keys of index_ for sampling
  uint64_t clock_ = 0;                // guarded by mu_
  uint64_t used_ = 0;                 // guarded by mu_; index_ sizes + reserved in-progress writes
  std::unordered_map<std::string, Pending> pending_;  // guarded by mu_; queued or being written
  std::deque<std::string> queue_;     // guarded by mu_; keys of pending_ not yet started
  uint64_t pending_bytes_ = 0;        // guarded by mu_; block bytes in pending_
  bool stop_ = false;                 // guarded by mu_
  std::mt19937_64 rng_;               // guarded by mu_
  Stats counters_;                    // guarded by mu_; corrupt, evictions, dropped_writes
  uint64_t temp_seq_ = 0;             // guarded by mu_

  std::thread writer_;  // runs WriterLoop when opts_.async_writes
};

}  // namespace tessera::chunk
