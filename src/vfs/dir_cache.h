// What this client knows of directories from its own namespace changes
// (issue 14), so that the kernel's follow-up requests cost no round trip:
//  - attributes: the kernel asks for a directory's attributes again after
//    every create, unlink or rename in it (GETATTR); they are answered from
//    what the change's engine call returned (meta::Context::Effects).
//  - names: a directory this client made is known to be empty, and while
//    every change of it is its own, it knows every name in it; the kernel's
//    LOOKUP of a new name before each create or rename onto it is answered
//    "no such name" without asking.
//
// It is only as good as its invalidations, so it works only while the
// engine reports other clients' changes (the coherent caches of
// fuse/coherence.h): Enable() once watching works, Changed() for each
// reported change (before the kernel is told), Lost() when changes may have
// been missed. A directory another client changes is forgotten whole. Own
// changes that write a directory's attributes without reporting them
// (setattr, xattrs) go through Begin/End with no effects, which forgets it.
// Trash directories are never kept (unlinks into the trash change them
// unreported). A change of another client shows here within the engine's
// report delay, as it does in the kernel's caches (docs/consistency.md).
//
// Ordering: a change's report is applied only if nothing else touched the
// directory between Begin and End — no other own change, no reported
// change, no loss. Each of those bumps a per-slot generation, and End
// compares. Two overlapping changes of one directory both forget it: either
// may have committed last. (The kernel serialises changes in one directory;
// overlaps come from `tessera rmr`/`clone` running beside it.)
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/metrics.h"
#include "meta/meta.h"

namespace tessera::vfs {

class DirCache {
 public:
  // Watching works; entries may be used `grace_ms` from now on (the
  // engine's grace: Meta::WatchGraceMs).
  void Enable(int grace_ms);
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }

  // A kept directory's attributes.
  bool Get(meta::Ino ino, meta::Attr* out);
  // Whether `name` is known to be absent from directory `dir` (whose
  // attributes go to *dir_attr, for the caller's search permission check).
  bool Absent(meta::Ino dir, const std::string& name, meta::Attr* dir_attr);

  struct Ticket {
    std::array<meta::Ino, 2> dirs{};  // 0: unused
    std::array<uint64_t, 2> gens{};
    uint64_t epoch = 0;
    uint64_t changes = 0;  // reported changes before Begin
    bool armed = false;    // the cache was on at Begin
  };
  // A change of directories a and b (0: none) is about to be sent.
  Ticket Begin(meta::Ino a, meta::Ino b = 0);
  // What a successful change did to names, applied with its report.
  struct Names {
    meta::Ino removed_from = 0;  // unlink, rmdir, a rename's source
    std::string removed;
    meta::Ino added_to = 0;  // creates, link, clone, a rename's target
    std::string added;
    meta::Ino made_dir = 0;  // mkdir: a new, empty directory, with its attributes
    meta::Attr made_attr;
    static Names Added(meta::Ino dir, const std::string& name) {
      Names n;
      n.added_to = dir;
      n.added = name;
      return n;
    }
    static Names Removed(meta::Ino dir, const std::string& name) {
      Names n;
      n.removed_from = dir;
      n.removed = name;
      return n;
    }
  };
  // The change ended: with what it reported (nullptr: failed or unknown).
  void End(const Ticket& t, const meta::Context::Effects* effects, const Names& names);
  void End(const Ticket& t, const meta::Context::Effects* effects);

  // Another client changed these (meta::ChangeFn).
  void Changed(const std::vector<meta::Change>& changes);
  // Changes may have been missed: drop everything; entries wait `brief_ms`
  // before they may be used again.
  void Lost(int brief_ms);

 private:
  static constexpr size_t kSlots = 256;
  static constexpr size_t kMaxDirs = 1 << 16;
  static constexpr size_t kMaxNamesPerDir = 1 << 16;
  static constexpr size_t kMaxNames = 1 << 20;  // all directories together
  static size_t Slot(meta::Ino ino) { return size_t(ino % kSlots); }
  bool Usable() const;

  struct Dir {
    meta::Attr attr;
    bool complete = false;  // names holds every name in it
    std::unordered_set<std::string> names;
  };
  // Hold mu_.
  void DropLocked(meta::Ino ino);  // forget + bump
  void ClearLocked();
  Dir& PutLocked(meta::Ino ino, const meta::Attr& attr);
  void ForgetNamesLocked(Dir& d);
  void AddNameLocked(Dir& d, const std::string& name);

  std::atomic<bool> enabled_{false};
  std::atomic<int64_t> usable_from_ms_{0};  // steady clock
  std::shared_mutex mu_;  // shared: Get and Absent (every getattr and lookup)
  std::unordered_map<meta::Ino, Dir> dirs_;  // guarded by mu_
  size_t names_ = 0;                         // guarded by mu_: in all complete dirs
  std::array<uint64_t, kSlots> gens_{};      // guarded by mu_
  uint64_t epoch_ = 0;                       // guarded by mu_: bumped by Lost
  uint64_t changes_ = 0;                     // guarded by mu_: bumped by Changed
  metrics::Counter* const attr_hits_ = metrics::NewCounter(
      "tessera_dir_attr_cache_hits_total",
      "Directory attribute requests answered from this client's own namespace changes (no engine request)");
  metrics::Counter* const absent_hits_ = metrics::NewCounter(
      "tessera_dir_absent_hits_total",
      "Lookups of a missing name answered from this client's knowledge of a directory it made (no engine request)");
};

}  // namespace tessera::vfs
