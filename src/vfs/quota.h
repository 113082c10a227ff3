// Quota enforcement in a client (docs/consistency.md, "Quotas"). The engine
// keeps each quota's limits and usage (meta.h, Meta::ListQuotas); every
// client keeps a copy, adds its own usage changes to it at once and to the
// engine every sync (0.4 s), and reloads the engine's values at the same
// time. A change that would take a quota past its limit fails with EDQUOT
// in the client that makes it at once, and in every other client once its
// next sync has seen the first client's: within two sync periods (< 1 s).
//
// Directory quotas cover everything below the directory, nested quotas all
// apply; the directories above a file are found from its parent and the
// directories' parent attributes, cached: while the engine reports other
// clients' changes (coherent caches) an entry stays until a report names
// the directory (a move changes its attributes), and without reports the
// cache is dropped every kParentCacheSyncs syncs (2 s), so that a directory
// another client moved is charged to its new ancestors within that time. User and group
// quotas cover what a uid or gid owns. Usage counts regular files' lengths
// rounded up to 4 KiB, and inodes.
//
// A volume with no quota costs one engine read per sync and nothing per
// operation.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "meta/meta.h"

namespace tessera::vfs {

class QuotaTracker {
 public:
  explicit QuotaTracker(meta::Meta* meta) : meta_(meta) {}

  // Writes this client's usage changes to the engine and reloads every
  // quota (the VFS calls it every kSyncMs, and at Stop).
  static constexpr int kSyncMs = 400;
  Status Sync();

  // Does any quota exist (as of the last sync)?
  bool Active() const { return active_.load(std::memory_order_relaxed); }
  bool HasDirQuotas() const { return has_dir_.load(std::memory_order_relaxed); }
  bool HasOwnerQuotas() const { return has_owner_.load(std::memory_order_relaxed); }

  // A change of (space, inodes) under directory `dir`, to something owned
  // by uid/gid. kDirs: charges the directory quotas above dir; kUser,
  // kGroup: the owner's user and group quotas.
  enum Scope : unsigned { kDirs = 1, kUser = 2, kGroup = 4, kOwner = 6, kBoth = 7 };
  struct Change {
    meta::Ino dir = 0;
    uint32_t uid = 0;
    uint32_t gid = 0;
    int64_t space = 0;
    int64_t inodes = 0;
    unsigned scope = kBoth;
  };
  static Change Negated(Change c) {
    c.space = -c.space;
    c.inodes = -c.inodes;
    return c;
  }
  // EDQUOT if the change's growth would pass a limit (shrinking always
  // passes). Errors of the engine while finding the directories above dir
  // are returned.
  Status Check(const Change& c);
  // Records a change that happened (negative to release).
  void Charge(const Change& c);
  // Check, then Charge: the caller makes the change and calls Charge with
  // the opposite values if it fails.
  Status Reserve(const Change& c);

  // The same for an explicit set of directory quotas (renames: those above
  // the destination and not above the source).
  Status ReserveDirs(const std::vector<meta::Ino>& quota_dirs, int64_t space, int64_t inodes);
  void ChargeDirs(const std::vector<meta::Ino>& quota_dirs, int64_t space, int64_t inodes);

  // The directory quotas of `dir` and the directories above it, nearest
  // first.
  Status QuotaDirs(meta::Ino dir, std::vector<meta::Ino>* out);
  // For statfs inside a quota'd tree: the nearest directory quota above
  // `dir` with a limit replaces the volume's size (space and inodes each).
  Status Limit(meta::Ino dir, meta::StatFs* fs);
  // A directory moved: its cached parent is wrong.
  void DirectoryMoved(meta::Ino dir);
  // A directory was just made in `parent`: its parent is known without
  // asking the engine when something is created in it (mkdir in a deep
  // tree would otherwise cost a lookup per new directory).
  void DirectoryMade(meta::Ino dir, meta::Ino parent);

  // Coherent caches (Vfs::WatchStarted, Vfs::OthersChanged): other
  // clients' changes are reported from grace_ms on; what they changed, or
  // that changes were missed (lost: everything is forgotten, and reports
  // are trusted again after brief_ms).
  void WatchStarted(int grace_ms);
  void OthersChanged(const std::vector<meta::Change>& changes, bool lost, int64_t brief_ms);

 private:
  // Parent of directory `dir` (cached).
  Status ParentOf(meta::Ino dir, meta::Ino* parent);
  // quotas_ + pending_ + inflight_ for key. Requires mu_.
  meta::Quota CurrentLocked(const meta::QuotaKey& key) const;
  // EDQUOT if growing keys by (space, inodes) passes a limit. Requires mu_.
  Status FitsLocked(const std::vector<meta::QuotaKey>& keys, int64_t space, int64_t inodes) const;
  std::vector<meta::QuotaKey> KeysLocked(const Change& c, const std::vector<meta::Ino>& dirs) const;

  meta::Meta* const meta_;
  std::atomic<bool> active_{false};
  std::atomic<bool> has_dir_{false};
  std::atomic<bool> has_owner_{false};
  std::mutex sync_mu_;  // one Sync at a time
  mutable std::mutex mu_;
  std::map<meta::QuotaKey, meta::Quota> quotas_;         // guarded by mu_: as the engine had them
  std::map<meta::QuotaKey, meta::QuotaUsage> pending_;   // guarded by mu_: not sent yet
  std::map<meta::QuotaKey, meta::QuotaUsage> inflight_;  // guarded by mu_: being sent
  std::unordered_map<meta::Ino, meta::Ino> parents_;    // guarded by mu_: directory -> parent
  uint64_t syncs_ = 0;                                   // guarded by mu_
  // Reports of other clients' changes keep parents_ honest from this time
  // on (steady clock, ms); 0: not watching. Guarded by mu_.
  int64_t watched_from_ms_ = 0;
  // parents_ holds nothing learnt before watched_from_ms_. Guarded by mu_.
  bool parents_trusted_ = false;
};

}  // namespace tessera::vfs
