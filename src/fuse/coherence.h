// Coherent kernel caches (docs/consistency.md, "Coherent kernel caches").
//
// While the metadata engine reports other clients' changes (Meta::
// WatchChanges), the kernel may cache entries and attributes for minutes:
// each change reported invalidates exactly the entry or inode it names.
// Two races are closed here:
//   * a reply built from what the engine said before a change, sent after
//     that change's invalidation, would plant the old state for minutes:
//     every invalidation bumps a sequence number, and a reply whose request
//     began before an invalidation of one of its inodes (or of one sharing
//     a slot with it) gets the short timeout. Replies are sent under a
//     shared lock the bump takes exclusively, so a reply is either in the
//     kernel before the invalidation or sees the bump.
//   * changes missed (engine connection lost, log pruned): every entry and
//     inode the kernel holds is invalidated — the client tracks the names it
//     handed to the kernel until the kernel forgets them, and the "no such
//     name" answers it let the kernel cache — and replies get the short
//     timeout until the watch has worked for a while again.
#pragma once

#include <atomic>
#include <array>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/metrics.h"
#include "meta/meta.h"

struct fuse_session;

namespace tessera::fuse {

using meta::Ino;

class Coherence {
 public:
  struct Timeouts {
    double attr = 1;
    double entry = 1;
    double dir_entry = 1;
  };
  // on: watching works for this mount. lasting: the timeouts while it
  // works; brief: otherwise (and for replies racing an invalidation).
  // grace_ms: after the watch starts or changes were lost, replies stay
  // brief this long at least (Meta::WatchGraceMs).
  void Configure(bool on, Timeouts lasting, Timeouts brief, int grace_ms = 0);
  bool on() const { return on_; }

  // Request threads: the sequence number before the engine was asked.
  uint64_t Begin() const { return seq_.load(std::memory_order_acquire); }
  // The timeouts for a reply about inode ino (and entry parent/name when
  // parent != 0) to a request that began at `seq`: brief if anything about
  // them may have been invalidated since. Call and send the reply while
  // holding ReplyLock().
  const Timeouts& For(uint64_t seq, Ino ino, Ino parent = 0) const;
  std::shared_lock<std::shared_mutex> ReplyLock() {
    return on_ ? std::shared_lock<std::shared_mutex>(reply_mu_) : std::shared_lock<std::shared_mutex>();
  }
  // The kernel got entry parent/name -> ino (a lookup reference) / dropped n
  // references to ino.
  void Noted(Ino parent, const std::string& name, Ino ino);
  void Forgot(Ino ino, uint64_t n);
  // A "no such name" for parent/name may be cached by the kernel (a
  // negative entry) for the returned seconds (0: not at all). Call while
  // holding ReplyLock() and reply before releasing it. The names are kept
  // for DropAll (the kernel does not say when it drops a negative entry);
  // past kMaxNegatives no more are cached until the watcher thread has
  // invalidated and forgotten them (at the next reported change: a request
  // thread must not, the kernel holds the directory it would invalidate).
  double NegativeTimeout(uint64_t seq, Ino parent, const std::string& name);

  // The engine's watcher thread: invalidates what changed, or everything.
  void Apply(fuse_session* se, const std::vector<meta::Change>& changes, bool lost);
  // How long replies stay brief after a loss (also for vfs::DirCache).
  int64_t BriefAfterLossMs() const;

 private:
  // Numbers the next invalidation, marking the slots of these inodes (all
  // when lost); replies in flight reach the kernel first.
  void Bump(const std::vector<meta::Change>& changes, bool lost);
  void DropAll(fuse_session* se);

  bool on_ = false;
  Timeouts lasting_, brief_;
  // Invalidations are numbered; marks_ holds, per slot of inodes (ino %
  // size), the number of the last one that touched an inode there (an
  // entry change touches its parent), and lost_mark_ the last "everything".
  // Written under reply_mu_ held exclusively.
  std::atomic<uint64_t> seq_{0};
  std::array<std::atomic<uint64_t>, 512> marks_{};
  std::atomic<uint64_t> lost_mark_{0};
  std::atomic<int64_t> brief_until_ms_{0};  // steady clock
  std::atomic<int64_t> grace_ms_{0};
  std::shared_mutex reply_mu_;

  struct Node {
    uint64_t refs = 0;
    std::vector<std::pair<Ino, std::string>> names;  // a few at most
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<Ino, Node> nodes;  // guarded by mu
  };
  std::array<Shard, 16> shards_;
  static constexpr size_t kMaxNegatives = 1 << 18;
  std::mutex negatives_mu_;
  std::vector<std::pair<Ino, std::string>> negatives_;  // guarded by negatives_mu_
  void DropNegatives(fuse_session* se);
  metrics::Counter* const invalidations_ = metrics::NewCounter(
      "tessera_kernel_invalidations_total",
      "Kernel cache entries and inodes invalidated because another client changed them (coherent caches)");
  metrics::Counter* const drops_ = metrics::NewCounter(
      "tessera_kernel_cache_drops_total",
      "Times every cached kernel entry and inode was invalidated because other clients' changes may have been missed");
};

}  // namespace tessera::fuse
