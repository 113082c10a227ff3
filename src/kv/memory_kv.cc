#include "kv/memory_kv.h"

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include "kv/listen.h"

namespace tessera::kv {
namespace {

using Map = std::map<std::string, std::string, std::less<>>;

// The data of one memory engine (or of several sharing a name).
struct MemoryStore {
  // Held shared by read-only transactions and exclusively by write
  // transactions for their whole run, so transactions are serializable
  // without conflict detection (and are never retried).
  std::shared_mutex mu;
  Map data;  // guarded by mu
  // Notified payloads (Txn::Notify) of the last kLogKeep transactions,
  // numbered from 1: log.back() is number log_seq.
  static constexpr size_t kLogKeep = 4096;
  std::deque<std::string> log;  // guarded by mu
  uint64_t log_seq = 0;         // guarded by mu
};

bool BeforeEnd(std::string_view key, std::string_view end) { return end.empty() || key < end; }

// Reads the store through a buffer of its own writes; the buffer is applied by
// Commit, so a transaction whose fn fails leaves no trace. The caller holds
// the store lock (shared for read-only, exclusive otherwise) for the Txn's
// whole life. Not thread-safe: used by the thread running fn.
class MemoryTxn final : public Txn {
 public:
  MemoryTxn(const Map& data, bool read_only) : data_(data), read_only_(read_only) {}

  Result<std::string> Get(std::string_view key) override {
    if (auto w = writes_.find(key); w != writes_.end()) {
      if (!w->second) return Status::Err(ENOENT);
      return *w->second;
    }
    auto d = data_.find(key);
    if (d == data_.end()) return Status::Err(ENOENT);
    return d->second;
  }

  Status Put(std::string_view key, std::string_view value) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Put in a read-only transaction");
    Buffer(key) = std::string(value);
    return Status::OK();
  }

  Status Delete(std::string_view key) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Delete in a read-only transaction");
    Buffer(key) = std::nullopt;
    return Status::OK();
  }

  // Merges the store with the buffered writes. Iterators stay valid if fn
  // writes (std::map insertion invalidates none), and both cursors move past
  // the visited key before fn runs, so fn may delete or overwrite it.
  Status Scan(std::string_view begin, std::string_view end, size_t limit, const ScanFn& fn) override {
    auto d = data_.lower_bound(begin);
    auto w = writes_.lower_bound(begin);
    size_t visited = 0;
    for (;;) {
      const bool have_d = d != data_.end() && BeforeEnd(d->first, end);
      const bool have_w = w != writes_.end() && BeforeEnd(w->first, end);
      if (!have_d && !have_w) return Status::OK();
      std::string_view key;
      std::string_view value;
      if (have_w && (!have_d || w->first <= d->first)) {
        if (have_d && d->first == w->first) ++d;  // the buffered write shadows it
        const auto& [wkey, wvalue] = *w++;
        if (!wvalue) continue;  // buffered delete
        key = wkey;
        value = *wvalue;
      } else {
        key = d->first;
        value = d->second;
        ++d;
      }
      if (!fn(key, value)) return Status::OK();
      if (limit != 0 && ++visited == limit) return Status::OK();
    }
  }

  Status Notify(std::string_view payload) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Notify in a read-only transaction");
    notes_.emplace_back(payload);
    return Status::OK();
  }

  // Applies the buffered writes and notes; the caller holds the store lock
  // exclusively.
  void Commit(MemoryStore* store) {
    for (std::string& note : notes_) {
      store->log.push_back(std::move(note));
      ++store->log_seq;
      if (store->log.size() > MemoryStore::kLogKeep) store->log.pop_front();
    }
    Map* data = &store->data;
    for (auto& [key, value] : writes_) {
      if (value) {
        data->insert_or_assign(key, std::move(*value));
      } else if (auto it = data->find(key); it != data->end()) {
        data->erase(it);
      }
    }
  }

 private:
  std::optional<std::string>& Buffer(std::string_view key) {
    auto it = writes_.find(key);
    if (it == writes_.end()) it = writes_.emplace(std::string(key), std::nullopt).first;
    return it->second;
  }

  const Map& data_;
  const bool read_only_;
  std::map<std::string, std::optional<std::string>, std::less<>> writes_;  // nullopt = delete
  std::vector<std::string> notes_;
};

// Thread-safe: all state is in the store, guarded by its lock. fn must not
// call Run on an engine sharing the store (it would deadlock).
class MemoryEngine final : public Engine {
 public:
  explicit MemoryEngine(std::shared_ptr<MemoryStore> store) : store_(std::move(store)) {}

  Status Run(const TxnFn& fn, bool read_only) override {
    if (read_only) {
      std::shared_lock lock(store_->mu);
      MemoryTxn txn(store_->data, true);
      return fn(txn);
    }
    std::unique_lock lock(store_->mu);
    MemoryTxn txn(store_->data, false);
    RETURN_IF_ERROR(fn(txn));
    txn.Commit(store_.get());
    return Status::OK();
  }

  Status DropAll() override {
    std::unique_lock lock(store_->mu);
    store_->data.clear();
    return Status::OK();
  }

  std::string Name() const override { return "memory"; }

  // Polls the store's log every 10 ms.
  Result<std::unique_ptr<Listener>> Listen(NotifyFn fn) override {
    uint64_t next = 0;
    {
      std::shared_lock lock(store_->mu);
      next = store_->log_seq + 1;
    }
    auto poll = [store = store_, next](std::vector<std::string>* out, bool* lost) mutable {
      std::shared_lock lock(store->mu);
      const uint64_t first = store->log_seq + 1 - store->log.size();
      if (next < first) {
        *lost = true;
        next = first;
      }
      for (uint64_t i = next; i <= store->log_seq; ++i) out->push_back(store->log[i - first]);
      next = store->log_seq + 1;
      return Status::OK();
    };
    return std::unique_ptr<Listener>(
        std::make_unique<PollingListener>(std::move(poll), std::move(fn), std::chrono::milliseconds(10)));
  }

 private:
  const std::shared_ptr<MemoryStore> store_;
};

std::shared_ptr<MemoryStore> StoreNamed(const std::string& name) {
  if (name.empty()) return std::make_shared<MemoryStore>();
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<MemoryStore>> named;  // guarded by mu
  std::lock_guard lock(mu);
  std::erase_if(named, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<MemoryStore>& slot = named[name];
  std::shared_ptr<MemoryStore> store = slot.lock();
  if (!store) {
    store = std::make_shared<MemoryStore>();
    slot = store;
  }
  return store;
}

}  // namespace

std::unique_ptr<Engine> OpenMemory(const std::string& name) { return std::make_unique<MemoryEngine>(StoreNamed(name)); }

}  // namespace tessera::kv
