// RedisMeta: the file system metadata in Redis (>= 7.0), for many clients on
// many hosts. Every operation is one request: either a plain command (GET of
// an inode, MGET of a chunk list) or one FCALL of a function in
// src/meta/redis_functions.lua, which checks and changes everything
// atomically inside Redis. No WATCH/MULTI retry loops. The key layout is in
// that file's header and in docs/format.md.
#pragma once

#include <array>
#include <initializer_list>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

#include "meta/meta.h"
#include "meta/meta_util.h"
#include "meta/redis_client.h"

namespace tessera::meta {

class RedisMeta final : public Meta {
 public:
  // Connects and loads the functions (FUNCTION LOAD REPLACE).
  static Result<std::unique_ptr<Meta>> Open(const std::string& url);
  ~RedisMeta() override;

  std::string Name() const override { return "redis"; }
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

  Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) override;
  Status GetAttr(const Context& ctx, Ino ino, Attr* attr) override;
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

  std::vector<std::pair<std::string, uint64_t>> RequestStats() const override;
  Status Check(std::vector<std::string>* problems) override;
  Status Repair(std::vector<std::string>* changes) override;
  Status Reset() override;
  Status ReadTree(const std::function<Status(TreeReader&)>& fn) override;
  Status WriteTree(const std::function<Status(TreeWriter&)>& fn) override;
  Result<bool> IsEmpty() override;
  Status GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) override;
  Status FlushDirStats() override;
  Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask, bool preserve,
               Ino* ino, Attr* attr, uint64_t* entries) override;
  Status ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) override;
  Status SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) override;
  Status DeleteQuota(const QuotaKey& key) override;
  Status AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) override;

 private:
  // Operations counted in RequestStats.
  enum Op : size_t {
    kOpLookup, kOpGetAttr, kOpSetAttr, kOpTruncate, kOpFallocate, kOpMknod, kOpUnlink, kOpRmdir, kOpRename,
    kOpLink, kOpReadLink, kOpReaddir, kOpOpen, kOpRelease, kOpRead, kOpWrite, kOpCompact, kOpXattr, kOpLock,
    kOpSession, kOpCleanup, kOpOther, kOpCount
  };
  static const char* OpName(Op op);

  explicit RedisMeta(std::unique_ptr<redis::Client> client);
  // A plain command / an FCALL of function tessera_<fn> with args; a
  // function's errno reply becomes a Status. Both count one request for op.
  Result<redis::Reply> Cmd(Op op, const std::vector<std::string_view>& argv);
  Result<redis::Reply> Fcall(Op op, const char* fn, const std::vector<std::string_view>& args);
  Status LoadFunctions();
  // Every inode's attributes and every directory entry (fsck; not a snapshot).
  // Calls fn with every chunk list's value (gc, fsck).
  Status ForEachChunkList(const std::function<void(std::string_view list)>& fn);
  // fsck: every slice's chunk lists, reference record and queued deletions.
  Status CollectSlices(SliceHolds* holds);
  Status CollectTree(std::unordered_map<Ino, Attr>* attrs, std::vector<EntryTriple>* entries, UsageRecords* usage,
                     std::vector<std::string>* problems);
  // After an operation took an inode's last name: keep it while this client
  // references it, else release it now.
  Status Released(int64_t ino);
  // Reports a namespace function's reply to ctx.effects (meta.h): the
  // parents' attribute records from element `at` on (one per parent; ""
  // for none), and the inodes `other` and, when other_at != 0, the one at
  // element other_at (0: none).
  void ReportReply(const Context& ctx, const redis::Reply& r, size_t at, std::initializer_list<Ino> parents,
                   size_t other_at = 0, Ino other = 0);
  // Unlink, Rmdir: the removed inode (element at) and its attributes before
  // (element at + 1), to ctx.effects after ReportReply.
  void ReportRemovedReply(const Context& ctx, const redis::Reply& r, size_t at);
  Status ReleaseNow(Ino ino);
  Result<int64_t> Incr(const char* counter, int64_t delta);
  // The trash hour directory's name for a removal at `now`, "" when the
  // trash is off for it (meta.h, kTrashIno).
  std::string TrashArg(const Context& ctx, const Timespec& now) const;

  const std::unique_ptr<redis::Client> client_;
  // Coherent caches: the volume's change channel, subscribed while watching.
  std::mutex watch_mu_;
  std::unique_ptr<redis::Subscriber> subscriber_;  // guarded by watch_mu_
  ChangeFn watch_fn_;                               // set before subscriber_ starts
  std::atomic<bool> watching_{false};
  std::array<std::atomic<uint64_t>, kOpCount> requests_{};
  IdPool inode_ids_;
  IdPool slice_ids_;
  RefTable refs_;
  // This client's session (0: none); set by NewSession, again if the
  // session expired and the client starts a new one.
  std::atomic<uint64_t> sid_{0};
  std::mutex session_mu_;
  SessionInfo session_;  // as stored by NewSession and Heartbeat; guarded by session_mu_
  // Directory statistics the functions' replies reported (redis_functions.lua,
  // stat_add), written by FlushDirStats.
  DirStatBuffer dirstats_;
  std::mutex flush_mu_;  // held from taking dirstats_ until its flush is settled
  // A flush of unknown outcome: its changes and sequence number (flush_stats
  // applies them only if its mark is not there). Guarded by flush_mu_.
  std::unordered_map<Ino, DirStat> doubtful_;
  uint64_t doubtful_seq_ = 0;
  uint64_t flush_seq_ = 0;
  const uint64_t client_id_ = NewClientId();
  Format format_;          // set by Init/Load before use
  VolumeLimits limits_;    // set by Load, refreshed by Heartbeat
};

}  // namespace tessera::meta
