// A Meta that times every call into the one it wraps: per operation, a
// latency histogram (whose count is the number of calls) and an error
// counter (tessera_meta_op_duration_seconds{op}, tessera_meta_op_errors_total{op}).
// The mount wraps its engine in one; the cost is two clock reads and two
// relaxed atomic adds per call.
#pragma once

#include <array>
#include <memory>

#include "common/metrics.h"
#include "meta/meta.h"

namespace tessera::meta {

class MetricsMeta final : public Meta {
 public:
  explicit MetricsMeta(std::unique_ptr<Meta> inner);

  std::string Name() const override { return inner_->Name(); }
  Status Init(const Format& format, bool force) override { return inner_->Init(format, force); }
  Result<Format> Load() override { return inner_->Load(); }
  Status Reset() override { return inner_->Reset(); }
  Status StatFS(const Context& ctx, StatFs* out) override {
    return Timed(kStatFS, [&] { return inner_->StatFS(ctx, out); });
  }
  Status EnsureTrash() override { return inner_->EnsureTrash(); }
  int TrashDays() const override { return inner_->TrashDays(); }

  Status NewSession(const SessionInfo& info) override { return inner_->NewSession(info); }
  Status Heartbeat(const SessionLoad& load) override {
    return Timed(kSession, [&] { return inner_->Heartbeat(load); });
  }
  Status CloseSession() override { return inner_->CloseSession(); }
  Result<std::vector<SessionInfo>> ListSessions() override { return inner_->ListSessions(); }
  Result<int> CleanStaleSessions(int64_t timeout_sec) override {
    return TimedResult(kSession, [&] { return inner_->CleanStaleSessions(timeout_sec); });
  }
  Status BeginBackup() override { return Timed(kSession, [&] { return inner_->BeginBackup(); }); }
  Status EndBackup() override { return Timed(kSession, [&] { return inner_->EndBackup(); }); }
  Result<bool> ClaimJob(const std::string& name, int64_t interval_sec) override {
    return TimedResult(kSession, [&] { return inner_->ClaimJob(name, interval_sec); });
  }
  Status WatchChanges(ChangeFn fn) override { return inner_->WatchChanges(std::move(fn)); }
  void StopWatching() override { inner_->StopWatching(); }
  int WatchGraceMs() const override { return inner_->WatchGraceMs(); }
  Result<int> CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel = 1) override {
    return TimedResult(kCleanup, [&] { return inner_->CleanupDeleted(deleter, max_items, parallel); });
  }

  Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) override {
    return Timed(kLookup, [&] { return inner_->Lookup(ctx, parent, name, ino, attr); });
  }
  Status GetAttr(const Context& ctx, Ino ino, Attr* attr) override {
    return Timed(kGetAttr, [&] { return inner_->GetAttr(ctx, ino, attr); });
  }
  bool CachedAttr(Ino ino, Attr* attr) override { return inner_->CachedAttr(ino, attr); }  // no engine request
  Status SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) override {
    return Timed(kSetAttr, [&] { return inner_->SetAttr(ctx, ino, mask, in, out); });
  }
  Status Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) override {
    return Timed(kTruncate, [&] { return inner_->Truncate(ctx, ino, length, check_perm, out); });
  }
  Status Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) override {
    return Timed(kFallocate, [&] { return inner_->Fallocate(ctx, ino, mode, off, len, out); });
  }
  Status Access(const Context& ctx, Ino ino, int mask) override {
    return Timed(kAccess, [&] { return inner_->Access(ctx, ino, mask); });
  }
  Status Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t cumask, uint32_t rdev,
               const std::string& target, Ino* ino, Attr* attr) override {
    return Timed(kMknod, [&] { return inner_->Mknod(ctx, parent, name, mode, cumask, rdev, target, ino, attr); });
  }
  Status Unlink(const Context& ctx, Ino parent, const std::string& name) override {
    return Timed(kUnlink, [&] { return inner_->Unlink(ctx, parent, name); });
  }
  Status Rmdir(const Context& ctx, Ino parent, const std::string& name) override {
    return Timed(kRmdir, [&] { return inner_->Rmdir(ctx, parent, name); });
  }
  Status Rename(const Context& ctx, Ino psrc, const std::string& nsrc, Ino pdst, const std::string& ndst,
                uint32_t flags, Ino* ino, Attr* attr) override {
    return Timed(kRename, [&] { return inner_->Rename(ctx, psrc, nsrc, pdst, ndst, flags, ino, attr); });
  }
  Status Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* attr) override {
    return Timed(kLink, [&] { return inner_->Link(ctx, ino, parent, name, attr); });
  }
  Status ReadLink(const Context& ctx, Ino ino, std::string* target) override {
    return Timed(kReadLink, [&] { return inner_->ReadLink(ctx, ino, target); });
  }
  Status ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                     std::vector<Entry>* entries, bool* more) override {
    return Timed(kReaddir, [&] { return inner_->ReaddirPage(ctx, ino, plus, after, limit, entries, more); });
  }

  Status Open(const Context& ctx, Ino ino, int flags, Attr* attr) override {
    return Timed(kOpen, [&] { return inner_->Open(ctx, ino, flags, attr); });
  }
  Status Close(const Context& ctx, Ino ino) override { return Timed(kClose, [&] { return inner_->Close(ctx, ino); }); }
  void AddRef(Ino ino) override { inner_->AddRef(ino); }
  Status Forget(Ino ino, uint64_t n) override { return inner_->Forget(ino, n); }

  Status Read(Ino ino, uint32_t chunk_index, std::vector<chunk::Slice>* slices) override {
    return Timed(kRead, [&] { return inner_->Read(ino, chunk_index, slices); });
  }
  Status ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) override {
    return Timed(kRead, [&] { return inner_->ListChunks(ino, from, limit, out); });
  }
  Status WriteSlices(const Context& ctx, Ino ino, const std::vector<SliceWrite>& slices, const Timespec& mtime,
                     Attr* attr, std::vector<uint32_t>* slice_counts) override {
    return Timed(kWrite, [&] { return inner_->WriteSlices(ctx, ino, slices, mtime, attr, slice_counts); });
  }
  Status CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<chunk::Slice>& expected,
                      const std::vector<chunk::Slice>& replacement) override {
    return Timed(kCompact, [&] { return inner_->CompactChunk(ino, chunk_index, expected, replacement); });
  }
  Result<uint64_t> NewSliceId() override { return TimedResult(kNewSlice, [&] { return inner_->NewSliceId(); }); }
  Status ScanAllSlices(const SliceVisitor& visit) override { return inner_->ScanAllSlices(visit); }

  Status GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) override {
    return Timed(kXattr, [&] { return inner_->GetXattr(ctx, ino, name, value); });
  }
  Status SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) override {
    return Timed(kXattr, [&] { return inner_->SetXattr(ctx, ino, name, value, flags); });
  }
  Status ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) override {
    return Timed(kXattr, [&] { return inner_->ListXattr(ctx, ino, names); });
  }
  Status RemoveXattr(const Context& ctx, Ino ino, const std::string& name) override {
    return Timed(kXattr, [&] { return inner_->RemoveXattr(ctx, ino, name); });
  }

  Status Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) override {
    return Timed(kLock, [&] { return inner_->Flock(ctx, ino, owner, type); });
  }
  Status GetLk(const Context& ctx, Ino ino, uint64_t owner, PosixLock* lock) override {
    return Timed(kLock, [&] { return inner_->GetLk(ctx, ino, owner, lock); });
  }
  Status SetLk(const Context& ctx, Ino ino, uint64_t owner, const PosixLock& lock) override {
    return Timed(kLock, [&] { return inner_->SetLk(ctx, ino, owner, lock); });
  }

  Status ReadTree(const std::function<Status(TreeReader&)>& fn) override { return inner_->ReadTree(fn); }
  Status WriteTree(const std::function<Status(TreeWriter&)>& fn) override { return inner_->WriteTree(fn); }
  Result<bool> IsEmpty() override { return inner_->IsEmpty(); }
  Status GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) override {
    return Timed(kDirStats, [&] { return inner_->GetDirStats(dirs, out); });
  }
  Status FlushDirStats() override { return Timed(kDirStats, [&] { return inner_->FlushDirStats(); }); }
  Status CommitPending() override { return inner_->CommitPending(); }
  uint64_t LostChanges() const override { return inner_->LostChanges(); }
  Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask, bool preserve,
               Ino* ino, Attr* attr, uint64_t* entries) override {
    return Timed(kClone, [&] { return inner_->Clone(ctx, src, parent, name, cumask, preserve, ino, attr, entries); });
  }
  Status ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) override {
    return Timed(kQuota, [&] { return inner_->ListQuotas(out); });
  }
  Status SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) override {
    return Timed(kQuota, [&] { return inner_->SetQuota(key, quota, with_usage); });
  }
  Status DeleteQuota(const QuotaKey& key) override { return Timed(kQuota, [&] { return inner_->DeleteQuota(key); }); }
  Status AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) override {
    return Timed(kQuota, [&] { return inner_->AddQuotaUsage(deltas); });
  }

  std::vector<std::pair<std::string, uint64_t>> RequestStats() const override { return inner_->RequestStats(); }
  Status Check(std::vector<std::string>* problems) override { return inner_->Check(problems); }
  Status Repair(std::vector<std::string>* changes) override { return inner_->Repair(changes); }

 private:
  enum Op : size_t {
    kLookup, kGetAttr, kSetAttr, kTruncate, kFallocate, kAccess, kMknod, kUnlink, kRmdir, kRename, kLink,
    kReadLink, kReaddir, kOpen, kClose, kRead, kWrite, kCompact, kNewSlice, kXattr, kLock, kStatFS, kSession,
    kCleanup, kDirStats, kClone, kQuota, kOpCount
  };
  struct OpMetrics {
    metrics::Histogram* duration = nullptr;
    metrics::Counter* errors = nullptr;
  };

  template <typename Fn>
  Status Timed(Op op, Fn&& call) {
    const auto start = std::chrono::steady_clock::now();
    Status st = call();
    Record(op, start, st);
    return st;
  }
  template <typename Fn>
  auto TimedResult(Op op, Fn&& call) -> decltype(call()) {
    const auto start = std::chrono::steady_clock::now();
    auto r = call();
    Record(op, start, r.status());
    return r;
  }
  void Record(Op op, std::chrono::steady_clock::time_point start, const Status& st) {
    ops_[op].duration->Observe(std::chrono::steady_clock::now() - start);
    // ENOENT, EEXIST and the like are answers, not failures of the engine.
    if (!st.ok() && (st.code() == EIO || st.transient() || st.outcome_unknown())) ops_[op].errors->Inc();
  }

  const std::unique_ptr<Meta> inner_;
  std::array<OpMetrics, kOpCount> ops_;
};

}  // namespace tessera::meta
