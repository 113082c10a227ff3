// In-memory cache of whole, uncompressed blocks, keyed by object key
// (BlockKey), least recently used evicted first, bounded by the total bytes
// of the cached blocks.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tessera::chunk {

// Blocks are immutable and shared: a lookup hands out a reference, so callers
// copy out of it without holding the cache lock.
using BlockRef = std::shared_ptr<const std::string>;

// Thread-safe (one mutex, never held while copying block contents).
class MemBlockCache {
 public:
  // capacity_bytes 0 disables the cache (Put keeps nothing).
  explicit MemBlockCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  MemBlockCache(const MemBlockCache&) = delete;
  MemBlockCache& operator=(const MemBlockCache&) = delete;

  // The block, marked most recently used; nullptr on a miss.
  BlockRef Get(const std::string& key);
  // Inserts or replaces the block, then evicts least recently used blocks
  // until the total fits. A block larger than the capacity is not kept.
  void Put(const std::string& key, BlockRef block);
  void Erase(const std::string& key);

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes() const;
  uint64_t blocks() const;

 private:
  struct Entry {
    BlockRef block;
    std::list<std::string>::iterator pos;  // in lru_
  };
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it);

  const uint64_t capacity_;  // immutable

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;  // guarded by mu_
  std::list<std::string> lru_;                  // guarded by mu_; front = most recently used
  uint64_t bytes_ = 0;                          // guarded by mu_; sum of the cached blocks' sizes
};

}  // namespace tessera::chunk
