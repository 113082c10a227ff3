#include "chunk/mem_cache.h"

namespace tessera::chunk {

BlockRef MemBlockCache::Get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return it->second.block;
}

void MemBlockCache::Put(const std::string& key, BlockRef block) {
  if (!block || block->size() > capacity_) return;
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) EraseLocked(it);
  while (!lru_.empty() && bytes_ + block->size() > capacity_) EraseLocked(map_.find(lru_.back()));
  bytes_ += block->size();
  lru_.push_front(key);
  map_.emplace(key, Entry{std::move(block), lru_.begin()});
}

void MemBlockCache::Erase(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) EraseLocked(it);
}

void MemBlockCache::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.block->size();
  lru_.erase(it->second.pos);
  map_.erase(it);
}

uint64_t MemBlockCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

uint64_t MemBlockCache::blocks() const {
  std::lock_guard lock(mu_);
  return map_.size();
}

}  // namespace tessera::chunk
