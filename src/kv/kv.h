// Transactional key-value engine: the narrow backend interface under the
// metadata layer (like 3FS IKVEngine / JuiceFS tkv). Keys and values are byte
// strings, ordered bytewise. A transaction sees its own writes, and either all
// of its writes become visible atomically or none do.
//
// Backends: memory (unit tests), sqlite3 (embedded default), postgres (a
// shared server; sqlite3 and postgres share their SQL core, sql_kv.h). One
// conformance suite (tests/kv/kv_conformance_test.cc) runs on every backend.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::kv {

class Txn {
 public:
  virtual ~Txn() = default;
  // Returns ENOENT when the key does not exist.
  virtual Result<std::string> Get(std::string_view key) = 0;
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // Deleting a missing key is not an error.
  virtual Status Delete(std::string_view key) = 0;
  // Visits keys in [begin, end) in ascending order (end empty = no upper
  // bound), at most `limit` of them (0 = unlimited), until fn returns false.
  // Sees the transaction's own uncommitted writes. The views passed to fn are
  // valid only during the call. fn may write through this transaction (e.g.
  // delete the visited key); whether the scan then visits keys written after
  // it started is unspecified.
  using ScanFn = std::function<bool(std::string_view key, std::string_view value)>;
  virtual Status Scan(std::string_view begin, std::string_view end, size_t limit, const ScanFn& fn) = 0;

  // Puts many keys (distinct, in any order) as one request where the
  // backend can (postgres: one statement); by default one Put each. For bulk
  // writes such as `tessera load`.
  using KeyValues = std::vector<std::pair<std::string, std::string>>;
  virtual Status PutMany(const KeyValues& kvs);

  // Atomically adds delta to a little-endian int64 counter stored at key
  // (missing = 0) and returns the new value.
  virtual Result<int64_t> Incr(std::string_view key, int64_t delta);

  // Hands payload to the engine's listeners (Engine::Listen) if, and only
  // if, this transaction commits. Listeners receive payloads in commit
  // order. ENOTSUP where the backend cannot (the default).
  virtual Status Notify(std::string_view payload);
};

// A running Engine::Listen; destroying it stops the listening (and waits
// for a callback in progress).
class Listener {
 public:
  virtual ~Listener() = default;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Runs fn in a transaction. If fn returns an error the transaction is rolled
  // back and that error returned. A conflict with another writer (another
  // thread or process) retries fn from the start, so fn must have no side
  // effects outside the transaction. read_only transactions must not write
  // (Put and Delete fail with EINVAL). fn must not call Run on the same engine
  // (it may deadlock). An engine opened with a commit delay returns from a
  // write Run before committing it (Flush): its later transactions see the
  // change at once, other connections once it is committed.
  using TxnFn = std::function<Status(Txn&)>;
  virtual Status Run(const TxnFn& fn, bool read_only = false) = 0;
  // Makes every transaction committed so far survive a power loss or an OS
  // crash where commits survive only a crash of the process (SQLite with
  // synchronous=NORMAL); nothing where commits are durable already. Costs an
  // fsync: for the rare commits a power loss must not undo, such as a
  // reservation of ids that objects and caches are named by.
  virtual Status Sync() { return Status::OK(); }
  // Engines that answer write transactions before committing them
  // (SqliteOptions::commit_delay): commits every write transaction Run has
  // returned from, and returns an error if that commit failed (those
  // changes are gone; LostWrites counts them). Nothing elsewhere.
  virtual Status Flush() { return Status::OK(); }
  // How many write transactions Run returned success for were then lost:
  // their delayed commit failed. Only grows.
  virtual uint64_t LostWrites() const { return 0; }
  // fn is called, on a thread of the engine, after each such loss (to drop
  // caches that may hold the lost changes). Set once, before use.
  virtual void OnLostWrites(std::function<void()> fn) { (void)fn; }
  // Removes every key (format --force).
  virtual Status DropAll() = 0;
  // e.g. "sqlite3", "memory", "postgres" (never a URL or password)
  virtual std::string Name() const = 0;
  // Whether each read in a transaction is a round trip to a server (worth
  // caching across transactions where staleness is tolerable).
  virtual bool RemoteReads() const { return false; }
  // Calls fn, on a thread of its own, with the payloads of transactions
  // committed after Listen returned (by any process), in commit order,
  // a few at a time. lost = true: payloads may have been missed (the
  // connection broke, the log was pruned past this reader); the listener
  // goes on after it. ENOTSUP where the backend cannot (the default).
  using NotifyFn = std::function<void(const std::vector<std::string>& payloads, bool lost)>;
  virtual Result<std::unique_ptr<Listener>> Listen(NotifyFn fn);
};

struct OpenOptions {
  // sqlite3: SqliteOptions::commit_delay (a mount's default; tools commit
  // each transaction).
  std::chrono::microseconds commit_delay{0};
};

// Opens an engine from a URL: "memory://[name]", "sqlite3://PATH" (creates the
// file if missing), "postgres://..." or "postgresql://..." (a libpq URI, see
// postgres_kv.h). Returns EINVAL with a clear message for a malformed URL.
// Messages never include a password from the URL.
// Memory engines opened with the same non-empty name share their data while
// any of them is open; "memory://" is always a new private store.
Result<std::unique_ptr<Engine>> Open(const std::string& url, const OpenOptions& options = {});

// Helpers for ordered binary keys.
void AppendU64BE(std::string* s, uint64_t v);
void AppendU32BE(std::string* s, uint32_t v);
uint64_t ReadU64BE(std::string_view s);
uint32_t ReadU32BE(std::string_view s);
// Smallest key greater than every key with this prefix ("" if none).
std::string PrefixEnd(std::string_view prefix);

}  // namespace tessera::kv
