// Coherent caches on the key-value engines (docs/consistency.md, "Coherent
// kernel caches"): every write transaction's changes to inode attributes
// ("A" ino "I") and directory entries ("A" ino "D" name) are read off the
// keys it writes, so no operation can forget to report one. While another
// client watches (the "watchers" counter, read in the same transaction),
// they go out through kv::Txn::Notify, committed with the change itself:
// the sqlite3 engine's log table, PostgreSQL's NOTIFY, the memory engine's
// log. A client alone on its volume writes nothing more. The same wrapper
// keeps the client's attribute cache (attr_cache.h) in step with every
// record its transactions read and write.
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <unordered_set>

#include "common/log.h"
#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"

namespace tessera::meta {

using namespace keys;

namespace {

// PostgreSQL: how long a client trusts what it read of the watchers
// counter, and how long a new watcher keeps its kernel caches short (other
// clients notice it within the TTL; a commit decided just before may land
// a few seconds later).
constexpr int64_t kWatchersTtlMs = 1000;
constexpr int kWatchGraceMs = 5000;

// Bigger change sets (a whole tree cloned in one transaction) go out as
// "everything changed": PostgreSQL's NOTIFY takes 8,000 bytes at most, and
// its payload travels hex-encoded.
constexpr size_t kMaxPayload = 3900;

// After changes may have been missed, the attribute cache stays empty this
// long (as the kernel's caches stay short: fuse/coherence.h).
constexpr int kAttrsLostBriefMs = 1000;

// The inode of an attribute record's key ("A" ino "I"), or 0.
Ino AttrKeyIno(std::string_view key) {
  if (key.size() != 10 || key[0] != 'A' || key[9] != 'I') return 0;
  return kv::ReadU64BE(key.substr(1, 8));
}

// The attribute records a transaction reads or writes, for the cache: the
// last value of each inode (a few per transaction: a scan beats a map);
// without `decode` only which inodes (present = false).
class AttrValues {
 public:
  explicit AttrValues(bool decode) : decode_(decode) {}
  void Note(Ino ino, const std::string_view* value) {
    AttrCache::Value* slot = nullptr;
    for (AttrCache::Value& v : values_)
      if (v.ino == ino) slot = &v;
    if (slot == nullptr) slot = &values_.emplace_back();
    slot->ino = ino;
    slot->present = decode_ && value != nullptr && DecodeAttr(*value, &slot->attr).ok();
  }
  std::vector<AttrCache::Value> Take() {
    std::vector<AttrCache::Value> out;
    out.swap(values_);
    return out;
  }

 private:
  const bool decode_;
  std::vector<AttrCache::Value> values_;
};

// Passes everything to the transaction below and notes the changes its
// writes make, and the attribute records it writes into `values`.
class RecordingTxn final : public kv::Txn {
 public:
  RecordingTxn(kv::Txn& inner, AttrValues* values) : inner_(inner), values_(values) {}

  Result<std::string> Get(std::string_view key) override { return inner_.Get(key); }
  Status Put(std::string_view key, std::string_view value) override {
    Note(key, &value);
    return inner_.Put(key, value);
  }
  Status Delete(std::string_view key) override {
    Note(key, nullptr);
    return inner_.Delete(key);
  }
  Status Scan(std::string_view begin, std::string_view end, size_t limit, const ScanFn& fn) override {
    return inner_.Scan(begin, end, limit, fn);
  }
  Status PutMany(const KeyValues& kvs) override {
    for (const auto& kv : kvs) {
      const std::string_view value = kv.second;
      Note(kv.first, &value);
    }
    return inner_.PutMany(kvs);
  }
  Result<int64_t> Incr(std::string_view key, int64_t delta) override { return inner_.Incr(key, delta); }
  Status Notify(std::string_view payload) override { return inner_.Notify(payload); }

  const std::vector<Change>& changes() const { return changes_; }

 private:
  void Note(std::string_view key, const std::string_view* value) {
    if (key.size() < 10 || key[0] != 'A') return;
    const Ino ino = kv::ReadU64BE(key.substr(1, 8));
    if (key[9] == 'I') {
      if (key.size() == 10) values_->Note(ino, value);
      // Transactions write a few inodes, often twice: a scan beats a set
      // (no allocation) until there are many.
      if (changes_.size() < kScanLimit) {
        for (const Change& c : changes_)
          if (c.parent == 0 && c.ino == ino) return;
      } else {
        if (inodes_.empty())
          for (const Change& c : changes_)
            if (c.parent == 0) inodes_.insert(c.ino);
        if (!inodes_.insert(ino).second) return;
      }
      changes_.push_back(Change{0, {}, ino});
    } else if (key[9] == 'D' && key.size() > 10) {
      changes_.push_back(Change{ino, std::string(key.substr(10)), 0});
    }
  }

  static constexpr size_t kScanLimit = 16;
  kv::Txn& inner_;
  AttrValues* const values_;
  std::unordered_set<Ino> inodes_;  // once changes_ holds kScanLimit
  std::vector<Change> changes_;
};

// A read-only transaction whose attribute records go to the cache.
class ReadingTxn final : public kv::Txn {
 public:
  ReadingTxn(kv::Txn& inner, AttrValues* values) : inner_(inner), values_(values) {}

  Result<std::string> Get(std::string_view key) override {
    Result<std::string> v = inner_.Get(key);
    if (v.ok()) {
      if (const Ino ino = AttrKeyIno(key); ino != 0) {
        const std::string_view value = *v;
        values_->Note(ino, &value);
      }
    }
    return v;
  }
  Status Put(std::string_view key, std::string_view value) override { return inner_.Put(key, value); }
  Status Delete(std::string_view key) override { return inner_.Delete(key); }
  Status Scan(std::string_view begin, std::string_view end, size_t limit, const ScanFn& fn) override {
    return inner_.Scan(begin, end, limit, fn);
  }
  Status PutMany(const KeyValues& kvs) override { return inner_.PutMany(kvs); }
  Result<int64_t> Incr(std::string_view key, int64_t delta) override { return inner_.Incr(key, delta); }
  Status Notify(std::string_view payload) override { return inner_.Notify(payload); }

 private:
  kv::Txn& inner_;
  AttrValues* const values_;
};

class WatchedEngine final : public kv::Engine {
 public:
  WatchedEngine(std::unique_ptr<kv::Engine> inner, const std::string& origin, const std::atomic<bool>& watching,
                AttrCache* attrs)
      : inner_(std::move(inner)), origin_(origin), watching_(watching), attrs_(attrs) {}

  Status Run(const TxnFn& fn, bool read_only) override {
    // The cache's clock before the transaction starts: what it reads or
    // writes is kept only if nothing changed those inodes meanwhile. A
    // write always reports the inodes it touched (a watch may start while
    // it runs); their values only while the cache is in use.
    // A cache never started has no clock to read (0: older than anything).
    const bool record = attrs_->Active();
    if (read_only && !record) return inner_->Run(fn, true);
    const uint64_t since = attrs_->started() ? attrs_->Now() : 0;
    AttrValues values(record);
    if (read_only) {
      Status st = inner_->Run([&](kv::Txn& tx) {
        values.Take();  // a retried attempt reads again
        ReadingTxn rd(tx, &values);
        return fn(rd);
      }, true);
      if (st.ok()) attrs_->Filled(since, values.Take());
      return st;
    }
    std::vector<AttrCache::Value> written;
    Status st = inner_->Run([&](kv::Txn& tx) {
      RecordingTxn rec(tx, &values);
      Status fst = fn(rec);
      written = values.Take();  // this attempt's (an earlier one rolled back)
      RETURN_IF_ERROR(fst);
      if (rec.changes().empty()) return Status::OK();
      ASSIGN_OR_RETURN(bool others, OthersWatch(tx));
      if (!others) return Status::OK();
      std::string payload = EncodeChanges(origin_, rec.changes());
      if (payload.size() > kMaxPayload) payload = origin_ + std::string("\0*", 2);
      return tx.Notify(payload);
    }, false);
    // Whatever the outcome: a failed or unknown one forgets what it touched.
    attrs_->Committed(since, st.ok(), written);
    return st;
  }
  Status DropAll() override {
    Status st = inner_->DropAll();
    attrs_->Clear();
    return st;
  }
  Status Sync() override { return inner_->Sync(); }
  Status Flush() override { return inner_->Flush(); }
  uint64_t LostWrites() const override { return inner_->LostWrites(); }
  void OnLostWrites(std::function<void()> fn) override { inner_->OnLostWrites(std::move(fn)); }

  // Whether a client other than this one watches: the watchers counter,
  // read in the transaction — on PostgreSQL, where each read is a round
  // trip, at most once per kWatchersTtlMs (a new watcher then waits
  // kWatchGraceMs before it trusts its long timeouts, Meta::WatchGraceMs).
  Result<bool> OthersWatch(kv::Txn& tx) {
    const int64_t now = NowMs();
    if (!exact_ && now - checked_ms_.load(std::memory_order_acquire) < kWatchersTtlMs)
      return others_.load(std::memory_order_relaxed);
    ASSIGN_OR_RETURN(int64_t watchers, CounterTx(tx, kWatchers));
    const bool others = watchers - (watching_.load(std::memory_order_relaxed) ? 1 : 0) > 0;
    others_.store(others, std::memory_order_relaxed);
    checked_ms_.store(now, std::memory_order_release);
    return others;
  }
  std::string Name() const override { return inner_->Name(); }
  bool RemoteReads() const override { return inner_->RemoteReads(); }
  Result<std::unique_ptr<kv::Listener>> Listen(NotifyFn fn) override { return inner_->Listen(std::move(fn)); }

 private:
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  const std::unique_ptr<kv::Engine> inner_;
  const std::string& origin_;
  const std::atomic<bool>& watching_;
  AttrCache* const attrs_;
  const bool exact_ = !inner_->RemoteReads();  // reads the counter in every transaction
  std::atomic<int64_t> checked_ms_{INT64_MIN / 2};  // steady clock: when others_ was read
  std::atomic<bool> others_{false};
};

}  // namespace

std::unique_ptr<kv::Engine> WatchEngine(std::unique_ptr<kv::Engine> inner, const std::string& origin,
                                        const std::atomic<bool>& watching, AttrCache* attrs) {
  return std::make_unique<WatchedEngine>(std::move(inner), origin, watching, attrs);
}

Status KvMeta::RegisterWatcherTx(kv::Txn& tx, uint64_t sid) {
  const std::string key = WatcherKey(origin_);
  auto had = tx.Get(key);
  if (!had.ok() && !had.status().not_found()) return had.status();
  if (!had.ok()) RETURN_IF_ERROR(IncrTx(tx, kWatchers, 1));
  return tx.Put(key, EncodeI64(int64_t(sid)));
}

Status KvMeta::DropWatchersTx(kv::Txn& tx, uint64_t sid, std::string_view origin) {
  std::vector<std::string> gone;
  const std::string prefix = WatcherPrefix();
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
    if (k.substr(prefix.size()) == origin || (sid != 0 && uint64_t(DecodeI64(v)) == sid)) gone.emplace_back(k);
    return true;
  }));
  for (const std::string& k : gone) {
    RETURN_IF_ERROR(tx.Delete(k));
    RETURN_IF_ERROR(IncrTx(tx, kWatchers, -1));
  }
  return Status::OK();
}

void KvMeta::OnPayloads(const std::vector<std::string>& payloads, bool lost) {
  // The attribute cache forgets first: the kernel, told next, asks again.
  DeliverChanges(
      [this](const std::vector<Change>& changes, bool all) {
        if (all) {
          attrs_.Lost(kAttrsLostBriefMs);
        } else {
          std::vector<Ino> inodes;
          for (const Change& c : changes)
            if (c.parent == 0) inodes.push_back(c.ino);
          attrs_.Invalidate(inodes);
        }
        if (watch_fn_) watch_fn_(changes, all);
      },
      payloads, origin_, lost);
}

bool KvMeta::CachedAttr(Ino ino, Attr* attr) {
  if (!attrs_.Active() || releases_.Pending(ino) || !attrs_.Get(ino, attr)) return false;
  attr_hits_->Inc();
  return true;
}

Status KvMeta::WatchChanges(ChangeFn fn) {
  std::lock_guard lock(watch_mu_);
  if (listener_) return Status::Err(EBUSY, "already watching for changes");
  watch_fn_ = std::move(fn);
  // Listening starts first: nothing committed after the registration is missed.
  ASSIGN_OR_RETURN(listener_, engine_->Listen([this](const std::vector<std::string>& p, bool lost) { OnPayloads(p, lost); }));
  Status st = engine_->Run([&](kv::Txn& tx) { return RegisterWatcherTx(tx, sid_.load()); });
  if (!st.ok()) {
    listener_.reset();
    return st;
  }
  watching_ = true;
  attrs_.Start(WatchGraceMs());
  return Status::OK();
}

int KvMeta::WatchGraceMs() const { return engine_->RemoteReads() ? kWatchGraceMs : 0; }

void KvMeta::StopWatching() {
  std::lock_guard lock(watch_mu_);
  if (!listener_) return;
  listener_.reset();
  watching_ = false;
  attrs_.Stop();
  Status st = engine_->Run([&](kv::Txn& tx) { return DropWatchersTx(tx, 0, origin_); });
  // Others then notify this client for nothing until its session is cleaned.
  if (!st.ok()) LOG_WARN("leaving the watchers of changes: {}", st.ToString());
}

}  // namespace tessera::meta
