// Pieces every metadata engine shares (KvMeta, RedisMeta): argument checks
// that need no stored state, the client-local reference table that keeps
// unlinked-but-open inodes alive, batched id allocation, and session helpers.
// Internal to src/meta.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meta/meta.h"

namespace tessera::meta {

constexpr uint64_t kInodeBatch = 64;
constexpr uint64_t kSliceBatch = 256;
// Meta::EndBackup: dumps that began longer ago than this died.
constexpr int64_t kBackupGiveUpSec = 86400;

inline uint64_t Align4K(uint64_t n) { return (n + 4095) & ~uint64_t(4095); }

// CleanupDeleted's object deletions: calls deleter for every slice, up to
// `parallel` at once; after a failure no new one starts. Returns the
// indexes of the slices whose objects are gone, in order, and the first
// failure.
std::vector<size_t> DeleteSlices(const SliceDeleter& deleter, const std::vector<std::pair<uint64_t, uint32_t>>& slices,
                                 size_t parallel, Status* failed);

// A committed namespace change's report to ctx.effects (Context::Effects),
// when the caller asked for one.
inline void ReportEffects(const Context& ctx, std::vector<std::pair<Ino, Attr>> parents, std::vector<Ino> others = {}) {
  if (ctx.effects == nullptr) return;
  ctx.effects->parents = std::move(parents);
  ctx.effects->others = std::move(others);
  ctx.effects->reported = true;
}
// Unlink, Rmdir (after ReportEffects): what the removal removed.
inline void ReportRemoved(const Context& ctx, Ino ino, const Attr& before) {
  if (ctx.effects == nullptr) return;
  ctx.effects->removed = ino;
  ctx.effects->removed_attr = before;
}

// Coherent caches: decodes change payloads (EncodeChanges) and passes those
// of other clients than `self` to fn; an undecodable payload or an
// "everything" record ("*") makes it a lost call.
void DeliverChanges(const ChangeFn& fn, const std::vector<std::string>& payloads, std::string_view self, bool lost);

// ENOENT (empty), ENAMETOOLONG, EINVAL ('/' or NUL).
Status ValidName(const std::string& name);
// "." and ".." exist in every directory without being stored, so they can be
// neither created (EEXIST) nor unlinked (EISDIR), as in Linux.
bool IsDotName(const std::string& name);
// Checks Mknod's arguments; *type receives the S_IFMT type (S_IFREG for 0).
// Meta::Clone's checks before any engine work (both engines).
Status CheckCloneArgs(const Context& ctx, Ino src, Ino parent, const std::string& name, bool preserve);
Status CheckMknodArgs(const std::string& name, uint32_t mode, const std::string& target, uint32_t* type);
Status CheckRenameArgs(const std::string& nsrc, const std::string& ndst, uint32_t flags);
// Only root removes or renames /.trash itself (EPERM).
inline bool TouchesTrashRoot(const Context& ctx, Ino parent, const std::string& name) {
  return !ctx.IsRoot() && parent == kRootIno && name == kTrashName;
}
// Argument checks before the engine looks at the file. The engine then
// checks, in this order: space for the growth (ENOSPC against
// FallocateSpace), then kMaxFileSize (EFBIG), before changing anything.
Status CheckFallocateArgs(int mode, uint64_t off, uint64_t len);
// The space fallocate may reserve: the capacity, or what df shows as the
// size of a volume without one (a request for more than the free space is
// ENOSPC, as on any file system).
uint64_t FallocateSpace(uint64_t capacity);
Status CheckXattrName(const std::string& name);
// The open flag the kernel adds when it opens a file to execute it
// (__FMODE_EXEC, the fmode bit FMODE_EXEC = 0x20; no O_* flag uses it).
constexpr int kOpenForExec = 040;
// R_OK/W_OK/X_OK mask an open with these flags needs.
int OpenMask(int flags);
// Open's checks on the attributes of the inode being opened.
Status CheckOpen(const Context& ctx, const Attr& attr, int flags);

// The volume's limits (0 = none), which `tessera config` may change while
// clients run: each engine keeps them apart from the rest of the settings,
// loaded with them and refreshed at every heartbeat.
struct VolumeLimits {
  std::atomic<uint64_t> capacity{0};
  std::atomic<uint64_t> inodes{0};
  void Set(const Format& f) {
    capacity.store(f.capacity, std::memory_order_relaxed);
    inodes.store(f.inodes, std::memory_order_relaxed);
    trash_days.store(f.trash_days, std::memory_order_relaxed);
  }
  std::atomic<int> trash_days{0};
  uint64_t Capacity() const { return capacity.load(std::memory_order_relaxed); }
  int TrashDays() const { return trash_days.load(std::memory_order_relaxed); }
  uint64_t Inodes() const { return inodes.load(std::memory_order_relaxed); }
};

// ---- directory statistics (meta.h, DirStat) ----
// A directory's share of one entry naming `child`.
inline DirStat EntryUsage(const Attr& child) {
  if (!child.IsFile()) return DirStat{0, 0, 1};
  return DirStat{int64_t(child.length), int64_t(Align4K(child.length)), 1};
}
inline DirStat Negated(const DirStat& d) { return DirStat{-d.length, -d.space, -d.inodes}; }
// What a file's length change from old_len to new_len adds to each of its parents' statistics.
inline DirStat LengthDelta(uint64_t old_len, uint64_t new_len) {
  return DirStat{int64_t(new_len) - int64_t(old_len), int64_t(Align4K(new_len)) - int64_t(Align4K(old_len)), 0};
}
// Changes to directory statistics made by one operation: (directory, delta).
// The key kVolumeUsage carries the volume's own counters instead (usedSpace
// in .space, totalInodes in .inodes): batched with the directories'.
using StatDeltas = std::vector<std::pair<Ino, DirStat>>;
inline constexpr Ino kVolumeUsage = 0;

// A random 64-bit id for a client instance (not 0).
uint64_t NewClientId();

// The changes this client made to directory statistics and has not written
// to the engine yet (KvMeta and RedisMeta batch them). Self-synchronised.
class DirStatBuffer {
 public:
  void Merge(const StatDeltas& deltas);
  // Everything pending, which the caller now writes; Restore puts it back
  // when that fails, Done says everything taken is in the engine. A flush
  // of unknown outcome calls neither: its changes stay counted until a
  // later flush settles them.
  std::unordered_map<Ino, DirStat> Take();
  void Restore(const std::unordered_map<Ino, DirStat>& taken);
  void Done();
  // What this client changed and the engine may not hold yet: pending, and
  // taken by a flush not yet Done (between its commit and Done, counted
  // twice by a reader that adds this to the engine's value: never under).
  DirStat Pending(Ino dir) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<Ino, DirStat> pending_;   // guarded by mu_
  std::unordered_map<Ino, DirStat> inflight_;  // guarded by mu_: taken, flush not done
};

// After a flush of `taken` (the buffer's Take, sequence number seq) ended
// with st: done on success; on an unknown outcome the changes join
// *doubtful (the next flush applies them only if seq's mark is not in the
// engine: never lost, never twice); otherwise they go back to the buffer.
void SettleFlush(const Status& st, const std::unordered_map<Ino, DirStat>& taken, uint64_t seq, DirStatBuffer* buffer,
                 std::unordered_map<Ino, DirStat>* doubtful, uint64_t* doubtful_seq);

// Fills StatFs from the used-space and inode counters and the limits.
void FillStatFs(uint64_t capacity, uint64_t inode_limit, int64_t used, int64_t inodes, StatFs* out);

// fsck: checks the tree's invariants from every inode's attributes and every
// directory entry (parent, name, child), appending problems as text.
using EntryTriple = std::tuple<Ino, std::string, Ino>;
void CheckTree(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
               std::vector<std::string>* problems);

// fsck: one slice as the engine holds it. `lists`: the chunk lists that
// hold it (a list counts once however many of its records name it);
// `extra`: what its reference record says (docs/format.md, "Clones": held
// by 1 + extra lists; 0 without a record); `queued`: the not-before times
// (0: at once) under which its objects are queued for deletion.
struct SliceHold {
  uint32_t lists = 0;
  int64_t extra = 0;
  std::vector<int64_t> queued;
};
using SliceHolds = std::map<std::pair<uint64_t, uint32_t>, SliceHold>;  // (id, size)
// Counts one chunk list's slices in *holds.
void HoldSlices(std::string_view chunk_list, SliceHolds* holds);

// The usage records an engine holds: directory statistics (flushed), the
// parent records of files with several names, and the slices' holders.
struct UsageRecords {
  std::unordered_map<Ino, DirStat> dirstats;
  std::unordered_map<Ino, ParentCounts> parents;  // each sorted by directory
  SliceHolds slices;                              // filled by Check and Repair, not ExpectedUsage
};
// fsck: the used-space and inode counters (as stored) against the tree.
void CheckCounters(const std::unordered_map<Ino, Attr>& attrs, int64_t used_space, int64_t inodes,
                   std::vector<std::string>* problems);
// fsck: a slice queued for deletion while a chunk list holds it (its
// objects would go from under a file), held by more lists than its
// reference record says (removing one holder would delete the others'
// data) or fewer (its objects would never be reclaimed).
void CheckSlices(const SliceHolds& holds, std::vector<std::string>* problems);
// fsck --repair: takes held slices out of the deletion queue and sets each
// reference record to what the chunk lists say (appends the writes to *ops).
void RepairSlices(const SliceHolds& holds, std::vector<std::function<Status(TreeWriter&)>>* ops,
                  std::vector<std::string>* changes);
// What the usage records must be for this tree.
UsageRecords ExpectedUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries);
// fsck: compares the stored usage records (and each singly-linked file's
// parent) with the tree, appending differences as problems.
void CheckUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                const UsageRecords& stored, std::vector<std::string>* problems);

// fsck --repair: from the same inputs as CheckTree, fixes what can be fixed
// without deleting data, through meta's raw writer (meta.h, WriteTree):
// entries pointing to missing inodes are removed; inodes that have a link
// count but no name move into /lost+found (created if missing) as
// "#<ino>"; link counts of files and directories, directories' parents and
// the used-space and inode counters, the directory statistics and parent
// records (from `stored`) are set to what the tree says. Each change is
// appended to *changes as a line of text.
Status RepairTree(Meta* meta, std::unordered_map<Ino, Attr> attrs, std::vector<EntryTriple> entries,
                  UsageRecords stored, std::vector<std::string>* changes);
// The usage part of RepairTree: appends to *ops the writes that make the
// stored records match the tree, sets the parent of each singly-linked file
// in *fixed (the attributes RepairTree writes), and describes the changes.
void RepairUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                 const UsageRecords& stored, std::map<Ino, Attr>* fixed,
                 std::vector<std::function<Status(TreeWriter&)>>* ops, std::vector<std::string>* changes);

// A process on this host is alive unless it is gone or a zombie.
bool ProcessAlive(uint32_t pid);
std::string HostName();
// This process's SessionInfo::pid_scope: its boot id and PID namespace, ""
// if /proc does not tell.
std::string PidScope();
// Host, pid and its scope filled in when missing.
SessionInfo CompleteSession(const SessionInfo& in);
// The record a heartbeat of session sid carrying `load` stores: the stored
// record with the new load, or "" when the stored one has it already.
std::string HeartbeatRecord(const SessionInfo& stored, uint64_t sid, const SessionLoad& load);


// Inode references held by this client: kernel lookups plus opens. An inode
// whose last name goes while it is referenced is "sustained" (kept) until the
// last reference drops. Self-synchronised.
class RefTable {
 public:
  void Add(Ino ino, uint64_t n = 1);
  // Drops n references; true when that was the last one of a sustained
  // inode, which the caller must now release.
  bool Drop(Ino ino, uint64_t n);
  // The inode lost its last name: true (and it is now sustained) if it is
  // referenced here, false if nobody here holds it.
  bool Sustain(Ino ino);
  void Clear();

 private:
  std::mutex mu_;
  std::unordered_map<Ino, uint64_t> refs_;  // guarded by mu_
  std::unordered_set<Ino> sustained_;       // guarded by mu_
};

// Sustained inodes whose last local reference went (the kernel's FORGET after
// an unlink, or the last close of an unlinked file), released in batches by a
// background thread: one transaction for many instead of one per FORGET.
// Until its batch has run an inode is Pending(), and engines answer ENOENT
// for it. If the process dies first, the inode is still recorded as sustained
// by its session, so session cleanup releases it. Self-synchronised.
class ReleaseQueue {
 public:
  // release(batch) releases those inodes (one transaction); its failure is
  // logged and leaves them to session cleanup.
  using ReleaseFn = std::function<Status(const std::vector<Ino>&)>;
  explicit ReleaseQueue(ReleaseFn release);
  ~ReleaseQueue();  // releases what is queued
  ReleaseQueue(const ReleaseQueue&) = delete;
  ReleaseQueue& operator=(const ReleaseQueue&) = delete;

  static constexpr size_t kBatch = 256;  // a batch goes at once when this full

  void Push(Ino ino);
  bool Pending(Ino ino) const;
  // Releases everything pushed before the call (waiting for a batch in
  // flight) in the caller's thread; the first error, if any.
  Status Flush();

 private:
  void Loop();
  Status RunBatch(std::unique_lock<std::mutex>& run);

  const ReleaseFn release_;
  std::mutex run_mu_;  // one batch at a time; taken before mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Ino> queue_;            // guarded by mu_
  std::unordered_set<Ino> pending_;   // queued or in a running batch; guarded by mu_
  std::atomic<size_t> npending_{0};   // pending_.size(), read without mu_
  bool stop_ = false;                 // guarded by mu_
  std::thread thread_;                // started by the first Push
};

// Hands out ids from a counter reserved in batches. Self-synchronised.
class IdPool {
 public:
  // reserve(batch) atomically adds batch to the counter and returns its new
  // value (the last id of the reserved range).
  using Reserve = std::function<Result<int64_t>(uint64_t batch)>;
  IdPool(uint64_t batch, Reserve reserve) : batch_(batch), reserve_(std::move(reserve)) {}
  Result<uint64_t> Next();

 private:
  const uint64_t batch_;
  const Reserve reserve_;
  std::mutex mu_;
  uint64_t next_ = 0;  // guarded by mu_
  uint64_t end_ = 0;   // guarded by mu_
};

}  // namespace tessera::meta
