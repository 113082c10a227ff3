#include "fuse/coherence.h"

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace tessera::fuse {

namespace {

// After changes were missed, replies stay brief this long (or the
// engine's grace, if longer): the watcher reports again at least every
// second while it fails.
constexpr int64_t kBriefAfterLossMs = 2000;
constexpr size_t kNamesPerInode = 4;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Coherence::Configure(bool on, Timeouts lasting, Timeouts brief, int grace_ms) {
  grace_ms_ = grace_ms;
  if (on && grace_ms > 0) brief_until_ms_ = NowMs() + grace_ms;
  on_ = on;
  lasting_ = lasting;
  brief_ = brief;
}

const Coherence::Timeouts& Coherence::For(uint64_t seq, Ino ino, Ino parent) const {
  if (!on_) return brief_;
  auto since = [&](const std::atomic<uint64_t>& mark) { return mark.load(std::memory_order_acquire) > seq; };
  if (since(lost_mark_) || since(marks_[ino % marks_.size()]) || (parent != 0 && since(marks_[parent % marks_.size()])) ||
      NowMs() < brief_until_ms_.load(std::memory_order_relaxed))
    return brief_;
  return lasting_;
}

int64_t Coherence::BriefAfterLossMs() const { return std::max(kBriefAfterLossMs, grace_ms_.load()); }

void Coherence::Noted(Ino parent, const std::string& name, Ino ino) {
  if (!on_) return;
  Shard& s = shards_[ino % shards_.size()];
  std::lock_guard lock(s.mu);
  Node& n = s.nodes[ino];
  ++n.refs;
  for (const auto& [p, nm] : n.names)
    if (p == parent && nm == name) return;
  if (n.names.size() >= kNamesPerInode) n.names.erase(n.names.begin());
  n.names.emplace_back(parent, name);
}

void Coherence::Forgot(Ino ino, uint64_t count) {
  if (!on_) return;
  Shard& s = shards_[ino % shards_.size()];
  std::lock_guard lock(s.mu);
  auto it = s.nodes.find(ino);
  if (it == s.nodes.end()) return;
  if (it->second.refs <= count) s.nodes.erase(it);
  else it->second.refs -= count;
}

double Coherence::NegativeTimeout(uint64_t seq, Ino parent, const std::string& name) {
  const Timeouts& t = For(seq, parent);
  if (&t != &lasting_) return 0;
  std::lock_guard lock(negatives_mu_);
  if (negatives_.size() >= kMaxNegatives) return 0;
  negatives_.emplace_back(parent, name);
  return t.entry;
}

// Not while holding negatives_mu_: an invalidation waits for the lookups in
// progress in its directory, and one of them may be waiting for that mutex
// (NegativeTimeout) before it can answer: a deadlock (seen in CI as a copy
// stuck in a lookup while the Redis watcher reconnected).
void Coherence::DropNegatives(fuse_session* se) {
  std::vector<std::pair<Ino, std::string>> names;
  {
    std::lock_guard lock(negatives_mu_);
    names.swap(negatives_);
  }
  for (const auto& [parent, name] : names) (void)fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
  invalidations_->Inc(names.size());
}

void Coherence::Bump(const std::vector<meta::Change>& changes, bool lost) {
  std::unique_lock lock(reply_mu_);  // replies in flight reach the kernel first
  const uint64_t n = seq_.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (lost) lost_mark_.store(n, std::memory_order_release);
  for (const meta::Change& c : changes)
    marks_[(c.parent != 0 ? c.parent : c.ino) % marks_.size()].store(n, std::memory_order_release);
}

void Coherence::Apply(fuse_session* se, const std::vector<meta::Change>& changes, bool lost) {
  if (lost) {
    brief_until_ms_ = NowMs() + BriefAfterLossMs();
    Bump({}, true);
    DropAll(se);
    return;
  }
  Bump(changes, false);
  bool full = false;
  {
    std::lock_guard lock(negatives_mu_);
    full = negatives_.size() >= kMaxNegatives;
  }
  if (full) DropNegatives(se);
  for (const meta::Change& c : changes) {
    if (c.parent != 0) {
      (void)fuse_lowlevel_notify_inval_entry(se, c.parent, c.name.data(), c.name.size());
    } else {
      (void)fuse_lowlevel_notify_inval_inode(se, c.ino, 0, 0);
    }
    invalidations_->Inc();
  }
}

// Every name and inode the kernel may hold, including the root's attributes.
void Coherence::DropAll(fuse_session* se) {
  drops_->Inc();
  std::vector<std::pair<Ino, std::string>> names;
  std::vector<Ino> inodes = {meta::kRootIno};
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    for (const auto& [ino, n] : s.nodes) {
      inodes.push_back(ino);
      names.insert(names.end(), n.names.begin(), n.names.end());
    }
  }
  for (const auto& [parent, name] : names) (void)fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
  for (Ino ino : inodes) (void)fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
  invalidations_->Inc(names.size() + inodes.size());
  DropNegatives(se);
}

}  // namespace tessera::fuse
