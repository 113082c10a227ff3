// Inode attributes as this client last knew them from the engine, for the
// kernel's GETATTR (Meta::CachedAttr): after writing a file the kernel marks
// its attributes stale and asks again, and an engine read for that answer
// was a fifth of the request's cost on SQLite.
//
// It is only as good as its invalidations, so KvMeta keeps it only while
// the engine reports other clients' changes (WatchChanges): Start() once
// watching works, Invalidate() for each reported change before the kernel
// is told, Lost() when changes may have been missed, Stop() with the watch.
// Every transaction of this client goes through KvMeta's engine wrapper
// (kv_meta_watch.cc), which sees the attribute records each one reads and
// writes: a read fills the cache (Filled), a write transaction's end
// updates or forgets every inode it wrote (Committed), whatever its outcome.
// No operation can forget to report one.
//
// Ordering: every change bumps a clock and stamps its inode's slot. A read
// or a write transaction notes the clock before it starts (Now()) and its
// values are kept only if their slot was not stamped after that, nor
// everything dropped (Lost, Stop, a full cache): what it read or wrote may
// be older than that change. Two overlapping writers of one inode leave it
// forgotten, as either may have committed last. A change of another client
// shows here within the engine's report delay, as in the kernel's caches
// (docs/consistency.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meta/meta.h"

namespace tessera::meta {

class AttrCache {
 public:
  static constexpr size_t kDefaultSlots = 1 << 16;
  explicit AttrCache(size_t max_slots = kDefaultSlots) : max_slots_(max_slots) {}

  // Watching works: the cache may be used `grace_ms` from now on.
  void Start(int grace_ms);
  // Not watching any more: everything is dropped, nothing kept.
  void Stop();
  // Changes may have been missed: everything is dropped, and nothing kept
  // for `brief_ms`.
  void Lost(int brief_ms);
  // Whether the cache is in use now (started, past its grace). Transactions
  // that begin while it is not record nothing; their writes still forget
  // the inodes they touch (Committed) once it was ever started.
  bool Active();
  bool started() const { return started_.load(std::memory_order_acquire); }

  // The clock, to note before a transaction reads or writes.
  uint64_t Now() const;
  bool Get(Ino ino, Attr* out) const;

  // Records values of a transaction that began at `since`; `attr` null: the
  // inode's record was deleted (write) or is unknown (never for reads).
  struct Value {
    Ino ino = 0;
    bool present = false;
    Attr attr;
  };
  // A read-only transaction begun at `since` read these committed records.
  void Filled(uint64_t since, const std::vector<Value>& read);
  // A write transaction begun at `since` ended. ok: it committed `written`
  // (the last value of each inode it wrote); else its outcome is unknown or
  // it failed, and `written` (the inodes it touched) are forgotten.
  void Committed(uint64_t since, bool ok, const std::vector<Value>& written);
  // Another client changed these inodes.
  void Invalidate(const std::vector<Ino>& inodes);
  // Drops everything (the engine's records were reset).
  void Clear();

  size_t size() const;

 private:
  struct Slot {
    Attr attr;
    bool valid = false;   // attr holds the inode's attributes
    uint64_t stamp = 0;   // clock of the last change seen to it
  };
  void ClearLocked();
  // A slot for ino, dropping everything first when the cache is full.
  Slot& SlotLocked(Ino ino);
  static int64_t NowMs();

  const size_t max_slots_;
  std::atomic<bool> started_{false};
  std::atomic<bool> active_{false};          // started, past the grace, not lost since
  std::atomic<int64_t> usable_from_ms_{0};
  mutable std::mutex mu_;
  std::unordered_map<Ino, Slot> slots_;  // guarded by mu_
  uint64_t clock_ = 1;                   // guarded by mu_
  uint64_t floor_ = 1;                   // guarded by mu_: values noted before it are not kept
};

}  // namespace tessera::meta
