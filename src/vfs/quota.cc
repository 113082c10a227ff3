#include "vfs/quota.h"

#include <cerrno>
#include <chrono>

namespace tessera::vfs {

using meta::Ino;
using meta::Quota;
using meta::QuotaKey;
using meta::QuotaKind;
using meta::QuotaUsage;

namespace {
// Without reports of other clients' changes, directory parents learnt from
// the engine are forgotten this often (syncs), so that a directory another
// client moved is charged to its new ancestors after at most this many sync
// periods.
constexpr int kParentCacheSyncs = 5;
// A bound on the parents kept (a tree of millions of directories).
constexpr size_t kMaxParents = 1 << 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Deeper than this, a parent chain is taken as broken (a loop).
constexpr int kMaxDepth = 4096;

void Add(std::map<QuotaKey, QuotaUsage>* m, const QuotaKey& k, int64_t space, int64_t inodes) {
  auto& u = (*m)[k];
  u.space += space;
  u.inodes += inodes;
}
}  // namespace

Status QuotaTracker::Sync() {
  std::lock_guard<std::mutex> one(sync_mu_);
  std::vector<std::pair<QuotaKey, QuotaUsage>> send;
  {
    std::lock_guard<std::mutex> g(mu_);
    inflight_.swap(pending_);
    for (const auto& [k, u] : inflight_)
      if (u.space != 0 || u.inodes != 0) send.emplace_back(k, u);
  }
  Status st = meta_->AddQuotaUsage(send);
  std::vector<std::pair<QuotaKey, Quota>> loaded;
  Status lst = st.ok() ? meta_->ListQuotas(&loaded) : Status::OK();
  std::lock_guard<std::mutex> g(mu_);
  if (!st.ok()) {  // kept for the next sync (an unknown outcome may count twice; quota check --repair)
    for (const auto& [k, u] : inflight_) Add(&pending_, k, u.space, u.inodes);
    inflight_.clear();
    return st;
  }
  inflight_.clear();
  if (!lst.ok()) return lst;  // the old values stay, with what was sent missing until the next load
  quotas_.clear();
  bool dir = false, owner = false;
  for (const auto& [k, q] : loaded) {
    quotas_[k] = q;
    dir = dir || k.kind == QuotaKind::kDir;
    owner = owner || k.kind != QuotaKind::kDir;
  }
  active_.store(!quotas_.empty(), std::memory_order_relaxed);
  has_dir_.store(dir, std::memory_order_relaxed);
  has_owner_.store(owner, std::memory_order_relaxed);
  ++syncs_;
  if (!dir || parents_.size() > kMaxParents) {
    parents_.clear();
  } else if (!parents_trusted_) {
    // Once reports are trusted, one last drop forgets what was learnt
    // before; from then on reports keep the cache (OthersChanged).
    const bool watched = watched_from_ms_ != 0 && NowMs() >= watched_from_ms_;
    if (watched || syncs_ % kParentCacheSyncs == 0) parents_.clear();
    parents_trusted_ = watched;
  }
  return Status::OK();
}

void QuotaTracker::WatchStarted(int grace_ms) {
  std::lock_guard<std::mutex> g(mu_);
  watched_from_ms_ = NowMs() + std::max(grace_ms, 0);
  // Reported at once (no grace): what was learnt before goes now, before
  // the mount serves; else at the first sync after the grace.
  parents_trusted_ = grace_ms <= 0;
  if (parents_trusted_) parents_.clear();
}

void QuotaTracker::OthersChanged(const std::vector<meta::Change>& changes, bool lost, int64_t brief_ms) {
  std::lock_guard<std::mutex> g(mu_);
  if (lost) {
    parents_.clear();
    if (watched_from_ms_ != 0) watched_from_ms_ = std::max(watched_from_ms_, NowMs() + std::max<int64_t>(brief_ms, 0));
    parents_trusted_ = false;
    return;
  }
  if (parents_.empty()) return;
  for (const meta::Change& c : changes)
    if (c.ino != 0) parents_.erase(c.ino);
}

Status QuotaTracker::ParentOf(Ino dir, Ino* parent) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = parents_.find(dir); it != parents_.end()) {
      *parent = it->second;
      return Status::OK();
    }
  }
  meta::Attr attr;
  RETURN_IF_ERROR(meta_->GetAttr(meta::Context::Root(), dir, &attr));
  *parent = attr.IsDir() ? attr.parent : 0;
  std::lock_guard<std::mutex> g(mu_);
  parents_[dir] = *parent;
  return Status::OK();
}

void QuotaTracker::DirectoryMade(Ino dir, Ino parent) {
  if (!HasDirQuotas()) return;
  std::lock_guard<std::mutex> g(mu_);
  parents_[dir] = parent;
}

void QuotaTracker::DirectoryMoved(Ino dir) {
  std::lock_guard<std::mutex> g(mu_);
  parents_.erase(dir);
}

Status QuotaTracker::QuotaDirs(Ino dir, std::vector<Ino>* out) {
  out->clear();
  if (!HasDirQuotas()) return Status::OK();
  for (int depth = 0; dir != 0 && depth < kMaxDepth; ++depth) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (quotas_.count(QuotaKey{QuotaKind::kDir, dir})) out->push_back(dir);
    }
    if (dir == meta::kRootIno) return Status::OK();
    Ino parent = 0;
    Status st = ParentOf(dir, &parent);
    if (st.code() == ENOENT) return Status::OK();  // removed meanwhile: nothing to charge
    RETURN_IF_ERROR(st);
    if (parent == dir) return Status::OK();
    dir = parent;
  }
  return Status::OK();
}

Quota QuotaTracker::CurrentLocked(const QuotaKey& key) const {
  Quota q;
  if (auto it = quotas_.find(key); it != quotas_.end()) q = it->second;
  for (const auto* m : {&pending_, &inflight_})
    if (auto it = m->find(key); it != m->end()) {
      q.used_space += it->second.space;
      q.used_inodes += it->second.inodes;
    }
  return q;
}

std::vector<QuotaKey> QuotaTracker::KeysLocked(const Change& c, const std::vector<Ino>& dirs) const {
  std::vector<QuotaKey> keys;
  if (c.scope & kDirs)
    for (Ino d : dirs) keys.push_back(QuotaKey{QuotaKind::kDir, d});
  if ((c.scope & kUser) && quotas_.count(QuotaKey{QuotaKind::kUser, c.uid}))
    keys.push_back(QuotaKey{QuotaKind::kUser, c.uid});
  if ((c.scope & kGroup) && quotas_.count(QuotaKey{QuotaKind::kGroup, c.gid}))
    keys.push_back(QuotaKey{QuotaKind::kGroup, c.gid});
  return keys;
}

Status QuotaTracker::FitsLocked(const std::vector<QuotaKey>& keys, int64_t space, int64_t inodes) const {
  for (const auto& k : keys) {
    Quota q = CurrentLocked(k);
    if (space > 0 && q.max_space > 0 && q.used_space + space > q.max_space) return Status::Err(EDQUOT);
    if (inodes > 0 && q.max_inodes > 0 && q.used_inodes + inodes > q.max_inodes) return Status::Err(EDQUOT);
  }
  return Status::OK();
}

Status QuotaTracker::Reserve(const Change& c) {
  if (!Active()) return Status::OK();
  std::vector<Ino> dirs;
  if (c.scope & kDirs) RETURN_IF_ERROR(QuotaDirs(c.dir, &dirs));
  std::lock_guard<std::mutex> g(mu_);
  const auto keys = KeysLocked(c, dirs);
  RETURN_IF_ERROR(FitsLocked(keys, c.space, c.inodes));
  for (const auto& k : keys) Add(&pending_, k, c.space, c.inodes);
  return Status::OK();
}

Status QuotaTracker::Check(const Change& c) {
  if (!Active()) return Status::OK();
  std::vector<Ino> dirs;
  if (c.scope & kDirs) RETURN_IF_ERROR(QuotaDirs(c.dir, &dirs));
  std::lock_guard<std::mutex> g(mu_);
  return FitsLocked(KeysLocked(c, dirs), c.space, c.inodes);
}

Status QuotaTracker::ReserveDirs(const std::vector<Ino>& quota_dirs, int64_t space, int64_t inodes) {
  std::vector<QuotaKey> keys;
  for (Ino d : quota_dirs) keys.push_back(QuotaKey{QuotaKind::kDir, d});
  std::lock_guard<std::mutex> g(mu_);
  RETURN_IF_ERROR(FitsLocked(keys, space, inodes));
  for (const auto& k : keys) Add(&pending_, k, space, inodes);
  return Status::OK();
}

void QuotaTracker::ChargeDirs(const std::vector<Ino>& quota_dirs, int64_t space, int64_t inodes) {
  std::lock_guard<std::mutex> g(mu_);
  for (Ino d : quota_dirs) Add(&pending_, QuotaKey{QuotaKind::kDir, d}, space, inodes);
}

void QuotaTracker::Charge(const Change& c) {
  if (!Active() || (c.space == 0 && c.inodes == 0)) return;
  std::vector<Ino> dirs;
  if ((c.scope & kDirs) && !QuotaDirs(c.dir, &dirs).ok()) dirs.clear();  // repaired by quota check
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& k : KeysLocked(c, dirs)) Add(&pending_, k, c.space, c.inodes);
}

Status QuotaTracker::Limit(Ino dir, meta::StatFs* fs) {
  if (!HasDirQuotas()) return Status::OK();
  std::vector<Ino> dirs;
  RETURN_IF_ERROR(QuotaDirs(dir, &dirs));
  bool space = false, inodes = false;
  std::lock_guard<std::mutex> g(mu_);
  for (Ino d : dirs) {
    Quota q = CurrentLocked(QuotaKey{QuotaKind::kDir, d});
    if (!space && q.max_space > 0) {
      space = true;
      const int64_t used = std::max<int64_t>(0, q.used_space);
      fs->total_space = uint64_t(q.max_space);
      fs->avail_space = std::min(fs->avail_space, uint64_t(std::max<int64_t>(0, q.max_space - used)));
    }
    if (!inodes && q.max_inodes > 0) {
      inodes = true;
      const int64_t used = std::max<int64_t>(0, q.used_inodes);
      fs->used_inodes = uint64_t(used);
      fs->avail_inodes = std::min(fs->avail_inodes, uint64_t(std::max<int64_t>(0, q.max_inodes - used)));
    }
  }
  return Status::OK();
}

}  // namespace tessera::vfs
