#include "meta/attr_cache.h"

#include <algorithm>
#include <chrono>

namespace tessera::meta {

int64_t AttrCache::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void AttrCache::Start(int grace_ms) {
  std::lock_guard lock(mu_);
  ClearLocked();
  usable_from_ms_.store(NowMs() + std::max(grace_ms, 0), std::memory_order_relaxed);
  active_.store(false, std::memory_order_release);
  started_.store(true, std::memory_order_release);
}

void AttrCache::Stop() {
  std::lock_guard lock(mu_);
  started_.store(false, std::memory_order_release);
  active_.store(false, std::memory_order_release);
  ClearLocked();
}

void AttrCache::Lost(int brief_ms) {
  std::lock_guard lock(mu_);
  active_.store(false, std::memory_order_release);
  usable_from_ms_.store(std::max(usable_from_ms_.load(std::memory_order_relaxed), NowMs() + std::max(brief_ms, 0)),
                        std::memory_order_relaxed);
  ClearLocked();
}

bool AttrCache::Active() {
  if (active_.load(std::memory_order_acquire)) return true;
  if (!started_.load(std::memory_order_acquire) || NowMs() < usable_from_ms_.load(std::memory_order_relaxed))
    return false;
  std::lock_guard lock(mu_);
  if (!started_.load(std::memory_order_relaxed) || NowMs() < usable_from_ms_.load(std::memory_order_relaxed))
    return false;
  if (!active_.load(std::memory_order_relaxed)) {
    // Whatever began before now was not recorded: it must not be kept.
    ClearLocked();
    active_.store(true, std::memory_order_release);
  }
  return true;
}

uint64_t AttrCache::Now() const {
  std::lock_guard lock(mu_);
  return clock_;
}

bool AttrCache::Get(Ino ino, Attr* out) const {
  if (!active_.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(mu_);
  auto it = slots_.find(ino);
  if (it == slots_.end() || !it->second.valid) return false;
  *out = it->second.attr;
  return true;
}

void AttrCache::Filled(uint64_t since, const std::vector<Value>& read) {
  if (read.empty() || !active_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  if (since < floor_ || !active_.load(std::memory_order_relaxed)) return;
  for (const Value& v : read) {
    if (!v.present) continue;
    auto it = slots_.find(v.ino);
    if (it != slots_.end() && it->second.stamp > since) continue;  // changed while it was read
    Slot& s = SlotLocked(v.ino);
    if (since < floor_) return;  // SlotLocked dropped everything
    s.attr = v.attr;
    s.valid = true;
  }
}

void AttrCache::Committed(uint64_t since, bool ok, const std::vector<Value>& written) {
  if (written.empty() || !started_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  const uint64_t stamp = ++clock_;
  const bool keep = ok && active_.load(std::memory_order_relaxed);
  for (const Value& v : written) {
    auto it = slots_.find(v.ino);
    const bool raced = it != slots_.end() && it->second.stamp > since;
    Slot& s = SlotLocked(v.ino);
    // floor_ read after SlotLocked, which may have dropped everything.
    s.valid = keep && !raced && v.present && since >= floor_;
    if (s.valid) s.attr = v.attr;
    s.stamp = stamp;
  }
}

void AttrCache::Invalidate(const std::vector<Ino>& inodes) {
  if (inodes.empty() || !started_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  const uint64_t stamp = ++clock_;
  for (Ino ino : inodes) {
    Slot& s = SlotLocked(ino);
    s.valid = false;
    s.stamp = stamp;
  }
}

void AttrCache::Clear() {
  std::lock_guard lock(mu_);
  ClearLocked();
}

size_t AttrCache::size() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

void AttrCache::ClearLocked() {
  slots_.clear();
  floor_ = ++clock_;
}

AttrCache::Slot& AttrCache::SlotLocked(Ino ino) {
  if (slots_.size() >= max_slots_ && slots_.find(ino) == slots_.end()) ClearLocked();
  return slots_[ino];
}

}  // namespace tessera::meta
