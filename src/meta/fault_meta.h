// FaultMeta: a Meta wrapper that injects seeded faults into state-changing
// operations (STYLE.md principle 6), so that the layers above can be tested
// against an engine that fails the way a remote one does: a request refused
// before it ran, or a reply lost after it ran (outcome unknown).
//
// Spec: comma-separated key=value pairs, e.g. "seed=7,lost_reply=0.02,ops=write+compact"
//   seed=N        decisions are a pure function of (seed, request number)
//   error=P       the operation fails with EIO before reaching the engine
//   lost_reply=P  the operation is performed, then an outcome-unknown EIO is
//                 returned ("it may or may not have been applied")
//   ops=LIST      the operations faults apply to, '+'-separated, of:
//                 write (WriteSlices), compact (CompactChunk), namespace
//                 (Mknod, Unlink, Rmdir, Rename, Link), attr (SetAttr,
//                 Truncate, Fallocate), xattr, lock; default: write+compact
// meta::Open wraps the engine in a FaultMeta when the environment variable
// TESSERA_META_FAULTS holds a spec. Tests may also force the next faults of
// an operation kind (FailNext).
//
// Thread-safe: the spec is immutable, the counters atomic; the inner engine
// must be thread-safe itself.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "meta/meta.h"

namespace tessera::meta {

class FaultMeta final : public Meta {
 public:
  enum Op : unsigned { kWrite = 1, kCompact = 2, kNamespace = 4, kAttrs = 8, kXattr = 16, kLock = 32, kIds = 64 };
  enum class Fault { kNone, kError, kLostReply };

  struct Spec {
    uint64_t seed = 0;
    double error = 0;
    double lost_reply = 0;
    unsigned ops = kWrite | kCompact;
    // EINVAL naming the bad field.
    static Result<Spec> Parse(const std::string& text);
    std::string ToString() const;
  };

  FaultMeta(std::unique_ptr<Meta> inner, Spec spec);

  // The next n operations of kind op get `fault`, whatever the spec says.
  void FailNext(Op op, Fault fault, int n = 1);
  // The replies of Lookup and GetAttr arrive `delay` late (a slow network):
  // the engine has answered, the caller has not heard yet.
  void DelayReads(std::chrono::milliseconds delay) { read_delay_ms_.store(delay.count()); }
  struct Stats {
    uint64_t errors = 0;
    uint64_t lost_replies = 0;
  };
  Stats stats() const;
  Meta* inner() const { return inner_.get(); }

  std::string Name() const override { return inner_->Name(); }
  Status Init(const Format& format, bool force) override { return inner_->Init(format, force); }
  Result<Format> Load() override { return inner_->Load(); }
  Status Reset() override { return inner_->Reset(); }
  Status EnsureTrash() override { return inner_->EnsureTrash(); }
  int TrashDays() const override { return inner_->TrashDays(); }
  Status ReadTree(const std::function<Status(TreeReader&)>& fn) override { return inner_->ReadTree(fn); }
  Status WriteTree(const std::function<Status(TreeWriter&)>& fn) override { return inner_->WriteTree(fn); }
  Result<bool> IsEmpty() override { return inner_->IsEmpty(); }
  Status GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) override {
    return inner_->GetDirStats(dirs, out);
  }
  Status FlushDirStats() override { return inner_->FlushDirStats(); }
  Status CommitPending() override { return inner_->CommitPending(); }
  uint64_t LostChanges() const override { return inner_->LostChanges(); }
  Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask, bool preserve,
               Ino* ino, Attr* attr, uint64_t* entries) override {
    return inner_->Clone(ctx, src, parent, name, cumask, preserve, ino, attr, entries);
  }
  Status ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) override { return inner_->ListQuotas(out); }
  Status SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) override {
    return inner_->SetQuota(key, quota, with_usage);
  }
  Status DeleteQuota(const QuotaKey& key) override { return inner_->DeleteQuota(key); }
  Status AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) override {
    return inner_->AddQuotaUsage(deltas);
  }
  Status BeginBackup() override { return inner_->BeginBackup(); }
  Status EndBackup() override { return inner_->EndBackup(); }
  Result<bool> ClaimJob(const std::string& name, int64_t interval_sec) override {
    return inner_->ClaimJob(name, interval_sec);
  }
  Status StatFS(const Context& ctx, StatFs* out) override { return inner_->StatFS(ctx, out); }

  Status NewSession(const SessionInfo& info) override { return inner_->NewSession(info); }
  Status Heartbeat(const SessionLoad& load) override { return inner_->Heartbeat(load); }
  Status CloseSession() override { return inner_->CloseSession(); }
  Result<std::vector<SessionInfo>> ListSessions() override { return inner_->ListSessions(); }
  Result<int> CleanStaleSessions(int64_t timeout_sec) override { return inner_->CleanStaleSessions(timeout_sec); }
  Status WatchChanges(ChangeFn fn) override { return inner_->WatchChanges(std::move(fn)); }
  void StopWatching() override { inner_->StopWatching(); }
  int WatchGraceMs() const override { return inner_->WatchGraceMs(); }
  Result<int> CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel = 1) override {
    return inner_->CleanupDeleted(deleter, max_items, parallel);
  }

  Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) override {
    return Delayed(inner_->Lookup(ctx, parent, name, ino, attr));
  }
  Status GetAttr(const Context& ctx, Ino ino, Attr* attr) override { return Delayed(inner_->GetAttr(ctx, ino, attr)); }
  bool CachedAttr(Ino ino, Attr* attr) override { return inner_->CachedAttr(ino, attr); }
  Status SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) override {
    return Run(kAttrs, "setattr", [&] { return inner_->SetAttr(ctx, ino, mask, in, out); });
  }
  Status Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) override {
    return Run(kAttrs, "truncate", [&] { return inner_->Truncate(ctx, ino, length, check_perm, out); });
  }
  Status Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) override {
    return Run(kAttrs, "fallocate", [&] { return inner_->Fallocate(ctx, ino, mode, off, len, out); });
  }
  Status Access(const Context& ctx, Ino ino, int mask) override { return inner_->Access(ctx, ino, mask); }
  Status Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t cumask, uint32_t rdev,
               const std::string& target, Ino* ino, Attr* attr) override {
    return Run(kNamespace, "mknod",
               [&] { return inner_->Mknod(ctx, parent, name, mode, cumask, rdev, target, ino, attr); });
  }
  Status Unlink(const Context& ctx, Ino parent, const std::string& name) override {
    return Run(kNamespace, "unlink", [&] { return inner_->Unlink(ctx, parent, name); });
  }
  Status Rmdir(const Context& ctx, Ino parent, const std::string& name) override {
    return Run(kNamespace, "rmdir", [&] { return inner_->Rmdir(ctx, parent, name); });
  }
  Status Rename(const Context& ctx, Ino psrc, const std::string& nsrc, Ino pdst, const std::string& ndst,
                uint32_t flags, Ino* ino, Attr* attr) override {
    return Run(kNamespace, "rename", [&] { return inner_->Rename(ctx, psrc, nsrc, pdst, ndst, flags, ino, attr); });
  }
  Status Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* attr) override {
    return Run(kNamespace, "link", [&] { return inner_->Link(ctx, ino, parent, name, attr); });
  }
  Status ReadLink(const Context& ctx, Ino ino, std::string* target) override {
    return inner_->ReadLink(ctx, ino, target);
  }
  Status ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                     std::vector<Entry>* entries, bool* more) override {
    return inner_->ReaddirPage(ctx, ino, plus, after, limit, entries, more);
  }

  Status Open(const Context& ctx, Ino ino, int flags, Attr* attr) override { return inner_->Open(ctx, ino, flags, attr); }
  Status Close(const Context& ctx, Ino ino) override { return inner_->Close(ctx, ino); }
  void AddRef(Ino ino) override { inner_->AddRef(ino); }
  Status Forget(Ino ino, uint64_t n) override { return inner_->Forget(ino, n); }

  Status Read(Ino ino, uint32_t chunk_index, std::vector<chunk::Slice>* slices) override {
    return inner_->Read(ino, chunk_index, slices);
  }
  Status ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) override {
    return inner_->ListChunks(ino, from, limit, out);
  }
  Status WriteSlices(const Context& ctx, Ino ino, const std::vector<SliceWrite>& slices, const Timespec& mtime,
                     Attr* attr, std::vector<uint32_t>* slice_counts) override {
    return Run(kWrite, "write", [&] { return inner_->WriteSlices(ctx, ino, slices, mtime, attr, slice_counts); });
  }
  Status CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<chunk::Slice>& expected,
                      const std::vector<chunk::Slice>& replacement) override {
    return Run(kCompact, "compact", [&] { return inner_->CompactChunk(ino, chunk_index, expected, replacement); });
  }
  Result<uint64_t> NewSliceId() override {
    Result<uint64_t> id = Status::Err(EIO);
    Status st = Run(kIds, "slice id", [&] {
      id = inner_->NewSliceId();
      return id.status();
    });
    if (!st.ok()) return st;
    return id;
  }
  Status ScanAllSlices(const SliceVisitor& visit) override { return inner_->ScanAllSlices(visit); }

  Status GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) override {
    return inner_->GetXattr(ctx, ino, name, value);
  }
  Status SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) override {
    return Run(kXattr, "setxattr", [&] { return inner_->SetXattr(ctx, ino, name, value, flags); });
  }
  Status ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) override {
    return inner_->ListXattr(ctx, ino, names);
  }
  Status RemoveXattr(const Context& ctx, Ino ino, const std::string& name) override {
    return Run(kXattr, "removexattr", [&] { return inner_->RemoveXattr(ctx, ino, name); });
  }

  Status Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) override {
    return Run(kLock, "flock", [&] { return inner_->Flock(ctx, ino, owner, type); });
  }
  Status GetLk(const Context& ctx, Ino ino, uint64_t owner, PosixLock* lock) override {
    return inner_->GetLk(ctx, ino, owner, lock);
  }
  Status SetLk(const Context& ctx, Ino ino, uint64_t owner, const PosixLock& lock) override {
    return Run(kLock, "setlk", [&] { return inner_->SetLk(ctx, ino, owner, lock); });
  }

  std::vector<std::pair<std::string, uint64_t>> RequestStats() const override { return inner_->RequestStats(); }
  Status Check(std::vector<std::string>* problems) override { return inner_->Check(problems); }
  Status Repair(std::vector<std::string>* changes) override { return inner_->Repair(changes); }

 private:
  Fault Next(Op op);
  template <typename Fn>
  Status Run(Op op, const char* what, Fn&& call) {
    switch (Next(op)) {
      case Fault::kNone:
        return call();
      case Fault::kError:
        return Status::Err(EIO, std::string("injected engine error: ") + what);
      case Fault::kLostReply: {
        Status st = call();
        if (!st.ok()) return st;  // it failed anyway: nothing in doubt
        return Status::Unknown(EIO, std::string("injected lost reply: ") + what);
      }
    }
    return call();
  }

  const std::unique_ptr<Meta> inner_;
  const Spec spec_;
  std::atomic<uint64_t> draws_{0};
  std::atomic<uint64_t> errors_{0}, lost_{0};
  Status Delayed(Status st) const {
    if (const int64_t ms = read_delay_ms_.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return st;
  }

  std::atomic<int64_t> read_delay_ms_{0};
  std::mutex forced_mu_;
  std::vector<std::pair<unsigned, std::pair<Fault, int>>> forced_;  // guarded by forced_mu_
};

}  // namespace tessera::meta
