// KvMeta: the file system metadata over a transactional key-value engine.
// Key layout (docs/format.md, "Metadata keys"):
//   "setting"                      volume Format (JSON)
//   "C" name                       counters (int64 LE): nextInode, nextSlice, nextSession, usedSpace, totalInodes
//   "A" ino8 "I"                   inode attributes (binary, versioned)
//   "A" ino8 "D" name              directory entry -> type1 ino8
//   "A" ino8 "C" idx4              chunk slice list (24-byte records, appended)
//   "A" ino8 "S"                   symlink target
//   "A" ino8 "X" name              xattr value
//   "A" ino8 "F" / "P"             BSD flock / POSIX lock records
//   "A" ino8 "L" parent8           names of a multiply-linked file in that directory (int64)
//   "U" ino8                       directory statistics (3 x int64 LE: length, space, entries)
//   "V" client8                    the last statistics flush of a client (int64), for flushes of unknown outcome
//   "D" ino8                       deleted inode whose chunks still need reclaiming -> length8
//   "G" id8 size4                  slice whose objects must be deleted
//   "SE" sid8 / "SH" sid8          session info (JSON) / heartbeat (unix seconds)
//   "SS" sid8 ino8                 inode unlinked while open in that session
//   "SL" sid8 ino8                 inode on which that session holds locks
//   "W" origin                     a client watching for changes -> its session (int64 LE)
// All integers in keys are big-endian so scans run in numeric order.
#pragma once

#include <atomic>
#include <memory>
#include <unordered_map>
#include <mutex>

#include "common/metrics.h"
#include "kv/kv.h"
#include "meta/attr_cache.h"
#include "meta/meta.h"
#include "meta/meta_util.h"

namespace tessera::meta {

// The engine KvMeta runs on: notes the changes of each write transaction
// and notifies them while other clients watch (kv_meta_watch.cc).
// It also keeps the attribute cache `attrs` in step with what each
// transaction reads and writes.
std::unique_ptr<kv::Engine> WatchEngine(std::unique_ptr<kv::Engine> inner, const std::string& origin,
                                        const std::atomic<bool>& watching, AttrCache* attrs);

class KvMeta final : public Meta {
 public:
  explicit KvMeta(std::unique_ptr<kv::Engine> engine);
  ~KvMeta() override;

  std::string Name() const override { return engine_->Name(); }
  Status Init(const Format& format, bool force) override;
  Result<Format> Load() override;
  Status StatFS(const Context& ctx, StatFs* out) override;
  Status EnsureTrash() override;
  int TrashDays() const override { return limits_.TrashDays(); }

  Status NewSession(const SessionInfo& info) override;
  Status Heartbeat(const SessionLoad& load) override;
  Status CloseSession() override;
  Result<std::vector<SessionInfo>> ListSessions() override;
  Result<int> CleanStaleSessions(int64_t timeout_sec) override;
  Result<bool> ClaimJob(const std::string& name, int64_t interval_sec) override;
  Status BeginBackup() override;
  Status EndBackup() override;
  Result<int> CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel = 1) override;
  Status WatchChanges(ChangeFn fn) override;
  void StopWatching() override;
  int WatchGraceMs() const override;

  Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) override;
  Status GetAttr(const Context& ctx, Ino ino, Attr* attr) override;
  bool CachedAttr(Ino ino, Attr* attr) override;
  Status SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) override;
  Status Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) override;
  Status Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) override;
  Status Access(const Context& ctx, Ino ino, int mask) override;
  Status Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t cumask,
               uint32_t rdev, const std::string& target, Ino* ino, Attr* attr) override;
  Status Unlink(const Context& ctx, Ino parent, const std::string& name) override;
  Status Rmdir(const Context& ctx, Ino parent, const std::string& name) override;
  Status Rename(const Context& ctx, Ino parent_src, const std::string& name_src, Ino parent_dst,
                const std::string& name_dst, uint32_t flags, Ino* ino, Attr* attr) override;
  Status Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* attr) override;
  Status ReadLink(const Context& ctx, Ino ino, std::string* target) override;
  Status ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                     std::vector<Entry>* entries, bool* more) override;

  Status Open(const Context& ctx, Ino ino, int flags, Attr* attr) override;
  Status Close(const Context& ctx, Ino ino) override;
  void AddRef(Ino ino) override;
  Status Forget(Ino ino, uint64_t n) override;

  Status Read(Ino ino, uint32_t chunk_index, std::vector<chunk::Slice>* slices) override;
  Status ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) override;
  Status WriteSlices(const Context& ctx, Ino ino, const std::vector<SliceWrite>& slices, const Timespec& mtime,
                     Attr* attr, std::vector<uint32_t>* slice_counts) override;
  Status CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<chunk::Slice>& expected,
                      const std::vector<chunk::Slice>& replacement) override;
  Result<uint64_t> NewSliceId() override;
  Status ScanAllSlices(const SliceVisitor& visit) override;

  Status GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) override;
  Status SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) override;
  Status ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) override;
  Status RemoveXattr(const Context& ctx, Ino ino, const std::string& name) override;

  Status Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) override;
  Status GetLk(const Context& ctx, Ino ino, uint64_t owner, PosixLock* lock) override;
  Status SetLk(const Context& ctx, Ino ino, uint64_t owner, const PosixLock& lock) override;

  Status Check(std::vector<std::string>* problems) override;
  Status Repair(std::vector<std::string>* changes) override;
  Status Reset() override { return engine_->DropAll(); }
  Status ReadTree(const std::function<Status(TreeReader&)>& fn) override;
  Status WriteTree(const std::function<Status(TreeWriter&)>& fn) override;
  Result<bool> IsEmpty() override;
  Status GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) override;
  Status FlushDirStats() override;
  Status CommitPending() override { return engine_->Flush(); }
  uint64_t LostChanges() const override { return engine_->LostWrites(); }
  Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask, bool preserve,
               Ino* ino, Attr* attr, uint64_t* entries) override;
  Status ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) override;
  Status SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) override;
  Status DeleteQuota(const QuotaKey& key) override;
  Status AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) override;

 private:
  // durable: also synced to disk (kv::Engine::Sync). Slice ids name objects,
  // cache files and staged blocks that outlive a power loss: a reservation it
  // undid would hand the same ids out again, and a cached or staged block of
  // the old slice would be served for the new one.
  Result<int64_t> ReserveIds(const char* counter, uint64_t batch, bool durable = false);
  // Drops n local references; the last one queues a sustained inode for
  // release (releases_).
  Status DropRefs(Ino ino, uint64_t n);
  // One transaction releasing sustained inodes whose references are gone.
  Status ReleaseSustained(const std::vector<Ino>& inodes);
  // Drops an inode whose nlink reached 0 inside the transaction: kept as
  // "sustained" if open in this client, else its records go and its data is
  // queued for reclaiming.
  // deltas: where the volume's usage change goes (batched, kVolumeUsage);
  // nullptr: into the counters in this transaction.
  Status ReleaseInodeTx(kv::Txn& tx, Ino ino, const Attr& attr, StatDeltas* deltas);
  Status DeleteInodeTx(kv::Txn& tx, Ino ino, const Attr& attr, StatDeltas* deltas);
  // With the trash on, moves an inode whose last name went (attr: its nlink
  // at 0) into the trash's directory of this hour; false: the caller
  // deletes it (trash off, ctx.no_trash, or removed from the trash).
  Result<bool> TrashTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Ino ino, Attr* attr,
                       const Timespec& now, StatDeltas* deltas);
  // Runs fn(tx, deltas) as one transaction; its directory-statistics
  // changes go to the client's buffer once it commits.
  Status RunCharged(const std::function<Status(kv::Txn&, StatDeltas*)>& fn);
  // A file's length changed: its parents' statistics follow (all of them
  // when it has several names; none while it has no name).
  static Status ChargeLengthTx(kv::Txn& tx, Ino ino, const Attr& attr, uint64_t old_len, StatDeltas* deltas);
  // Parent records of non-directories (encoding.h, ParentKey): a new name
  // in `parent` (attr: before the link); a name gone from `parent` (attr:
  // nlink already lowered, at least 1; with one name left its parent is set
  // to the directory holding it); a name moved between directories.
  static Status AddParentTx(kv::Txn& tx, Ino ino, const Attr& attr, Ino parent);
  static Status DropParentTx(kv::Txn& tx, Ino ino, Attr* attr, Ino parent);
  static Status MoveParentTx(kv::Txn& tx, Ino ino, const Attr& attr, Ino from, Ino to);
  Status CleanSessionTx(kv::Txn& tx, uint64_t sid);
  Status TruncateChunksTx(kv::Txn& tx, Ino ino, uint64_t old_len, uint64_t new_len);
  Status AppendHoleTx(kv::Txn& tx, Ino ino, uint64_t off, uint64_t end);
  // The used-space counter (0 before the first byte is written).
  Result<uint64_t> UsedSpaceTx(kv::Txn& tx);
  // ENOSPC if growing the used space by delta passes the capacity.
  Status CheckSpaceTx(kv::Txn& tx, int64_t delta);

  // Coherent caches (kv_meta_watch.cc): the engine records what each write
  // transaction changed and, while other clients watch, hands it to them
  // (kv::Txn::Notify) in the same transaction.
  const std::string origin_;     // this client in the change records
  std::atomic<bool> watching_{false};
  // Attributes for CachedAttr, kept by engine_ while watching (attr_cache.h).
  AttrCache attrs_;
  metrics::Counter* const attr_hits_;
  const std::unique_ptr<kv::Engine> engine_;
  // Adds this client (session sid) to the watchers.
  Status RegisterWatcherTx(kv::Txn& tx, uint64_t sid);
  // Removes the watchers of session sid (all sessions: sid 0 and origin).
  static Status DropWatchersTx(kv::Txn& tx, uint64_t sid, std::string_view origin);
  void OnPayloads(const std::vector<std::string>& payloads, bool lost);
  std::mutex watch_mu_;
  std::unique_ptr<kv::Listener> listener_;  // guarded by watch_mu_
  ChangeFn watch_fn_;                        // set before listener_ starts

  IdPool inode_ids_;
  IdPool slice_ids_;
  RefTable refs_;  // opens + kernel lookups; unlinked-while-referenced inodes

  // This client's session (0: none); set by NewSession, again if the
  // session expired and the client starts a new one.
  std::atomic<uint64_t> sid_{0};
  std::mutex session_mu_;
  SessionInfo session_;  // as stored by NewSession and Heartbeat; guarded by session_mu_
  Format format_;     // set by Init/Load before use
  VolumeLimits limits_;  // set by Load, refreshed by Heartbeat
  DirStatBuffer dirstats_;  // flushed by FlushDirStats
  std::mutex flush_mu_;     // held from taking dirstats_ until its flush committed
  // A flush whose commit had an unknown outcome: its changes, and the mark
  // (FlushMarkKey) it wrote if it landed. Guarded by flush_mu_.
  std::unordered_map<Ino, DirStat> doubtful_;
  uint64_t doubtful_seq_ = 0;
  uint64_t flush_seq_ = 0;
  const uint64_t client_id_ = NewClientId();

  ReleaseQueue releases_{[this](const std::vector<Ino>& inodes) { return ReleaseSustained(inodes); }};  // last: goes first
};

}  // namespace tessera::meta
