#include "kv/sqlite_kv.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::kv {
namespace {

constexpr const char* kSchema = "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID";

// Statements prepared once per connection.
enum Stmt {
  kBegin,
  kBeginImmediate,
  kCommit,
  kRollback,
  kGet,
  kPut,
  kDelete,
  kScanRange,
  kScanFrom,
  kDeleteAll,
  kNumStmts
};
constexpr const char* kSql[kNumStmts] = {
    "BEGIN",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SELECT v FROM kv WHERE k = ?1",
    "INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)",
    "DELETE FROM kv WHERE k = ?1",
    "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT ?3",
    "SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2",
    "DELETE FROM kv",
};

// Scan fetches rows in batches that grow from the first to the last size, so
// a scan stopped early reads little and a long one needs few queries.
constexpr int64_t kFirstScanBatch = 32;
constexpr int64_t kMaxScanBatch = 1024;

using Rows = std::vector<std::pair<std::string, std::string>>;

bool IsBusy(int rc) {
  rc &= 0xff;
  return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

int ErrnoFor(int rc, sqlite3* db) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return EBUSY;
    case SQLITE_FULL:
      return ENOSPC;
    case SQLITE_CANTOPEN: {
      const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
      return sys == EACCES || sys == EPERM || sys == EROFS ? EACCES : ENOENT;
    }
    case SQLITE_READONLY:
      return EROFS;
    case SQLITE_NOMEM:
      return ENOMEM;
    default:  // SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_IOERR, ...
      return EIO;
  }
}

int BindBlob(sqlite3_stmt* stmt, int index, std::string_view blob) {
  // A null pointer would bind SQL NULL, so an empty blob needs a non-null one.
  // SQLITE_STATIC: the caller steps and resets before blob goes away.
  return sqlite3_bind_blob64(stmt, index, blob.empty() ? "" : blob.data(), blob.size(), SQLITE_STATIC);
}

std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const void* data = sqlite3_column_blob(stmt, column);
  const int size = sqlite3_column_bytes(stmt, column);
  return size > 0 ? std::string(static_cast<const char*>(data), size) : std::string();
}

// Sleeps before another attempt of something that found the database busy: a
// random time in [cap/2, cap], cap = 2^attempt ms up to 64 ms, so competing
// processes fall out of step.
void Backoff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int cap_us = 1000 << std::min(attempt, 6);
  std::uniform_int_distribution<int> dist(cap_us / 2, cap_us);
  std::this_thread::sleep_for(std::chrono::microseconds(dist(rng)));
}

// Resets a statement on every exit path, leaving it ready for reuse and
// releasing what it holds.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() { sqlite3_reset(stmt_); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* const stmt_;
};

// One SQLite connection with its prepared statements. Not thread-safe: the
// engine's pool lends it to one thread at a time, which is why it is opened
// with SQLITE_OPEN_NOMUTEX.
class Conn {
 public:
  static Result<std::unique_ptr<Conn>> Open(const std::string& path, const SqliteOptions& options) {
    std::unique_ptr<Conn> conn(new Conn(path));
    sqlite3*& db = conn->db_;
    int rc =
        sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) return conn->Error(rc, "cannot open database (the parent directory must exist)");
    if (sqlite3_db_readonly(db, "main") == 1) {
      return Status::Err(EACCES, "sqlite3 '" + path + "': database file is not writable");
    }
    rc = sqlite3_busy_timeout(db, options.busy_timeout_ms);
    if (rc != SQLITE_OK) return conn->Error(rc, "set busy timeout");
    // Switching a new file to WAL and creating the table upgrade a read lock
    // to a write lock, which SQLite refuses at once, without the busy
    // timeout, when another process races to do the same (waiting could
    // deadlock). So the setup is retried like a transaction.
    for (int attempt = 1;; ++attempt) {
      conn->ClearBusy();
      Status status = conn->Setup();
      if (status.ok()) break;
      if (!conn->busy() || attempt >= options.max_attempts) return status;
      Backoff(attempt);
    }
    for (int i = 0; i < kNumStmts; ++i) {
      rc = sqlite3_prepare_v3(db, kSql[i], -1, SQLITE_PREPARE_PERSISTENT, &conn->stmts_[i], nullptr);
      if (rc != SQLITE_OK) return conn->Error(rc, std::string("prepare ") + kSql[i]);
    }
    return conn;
  }

  ~Conn() {
    for (sqlite3_stmt* stmt : stmts_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);  // rolls back an open transaction
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  Status Begin(bool read_only) { return Exec(read_only ? kBegin : kBeginImmediate, "begin"); }
  Status Commit() { return Exec(kCommit, "commit"); }
  // Rolls back the open transaction, if any (SQLite ends it by itself after
  // some errors).
  Status Rollback() { return InTxn() ? Exec(kRollback, "rollback") : Status::OK(); }
  bool InTxn() const { return sqlite3_get_autocommit(db_) == 0; }

  // Whether a call failed with SQLITE_BUSY/SQLITE_LOCKED since ClearBusy().
  // Recorded here so that a retry happens even if fn swallowed the error.
  bool busy() const { return busy_; }
  void ClearBusy() { busy_ = false; }

  Result<std::string> Get(std::string_view key) {
    sqlite3_stmt* stmt = stmts_[kGet];
    ResetOnExit reset(stmt);
    if (int rc = BindBlob(stmt, 1, key); rc != SQLITE_OK) return Error(rc, "get");
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) return ColumnBlob(stmt, 0);
    if (rc == SQLITE_DONE) return Status::Err(ENOENT);
    return Error(rc, "get");
  }

  Status Put(std::string_view key, std::string_view value) {
    sqlite3_stmt* stmt = stmts_[kPut];
    ResetOnExit reset(stmt);
    int rc = BindBlob(stmt, 1, key);
    if (rc == SQLITE_OK) rc = BindBlob(stmt, 2, value);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "put");
  }

  Status Delete(std::string_view key) {
    sqlite3_stmt* stmt = stmts_[kDelete];
    ResetOnExit reset(stmt);
    int rc = BindBlob(stmt, 1, key);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "delete");
  }

  Status DeleteAll() { return Exec(kDeleteAll, "delete all"); }

  // Appends to *rows at most limit rows with keys in [from, end) (end empty:
  // no upper bound), in key order.
  Status ScanBatch(std::string_view from, std::string_view end, int64_t limit, Rows* rows) {
    sqlite3_stmt* stmt = stmts_[end.empty() ? kScanFrom : kScanRange];
    ResetOnExit reset(stmt);
    int index = 1;
    int rc = BindBlob(stmt, index++, from);
    if (rc == SQLITE_OK && !end.empty()) rc = BindBlob(stmt, index++, end);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(stmt, index, limit);
    if (rc != SQLITE_OK) return Error(rc, "scan");
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) rows->emplace_back(ColumnBlob(stmt, 0), ColumnBlob(stmt, 1));
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "scan");
  }

 private:
  explicit Conn(std::string path) : path_(std::move(path)) {}

  Status Exec(Stmt which, std::string_view what) {
    sqlite3_stmt* stmt = stmts_[which];
    ResetOnExit reset(stmt);
    const int rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, what);
  }

  Status Setup() {
    RETURN_IF_ERROR(EnableWal());
    int rc = sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "set synchronous=NORMAL");
    rc = sqlite3_exec(db_, kSchema, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? Status::OK() : Error(rc, "create table");
  }

  // journal_mode=WAL is persistent in the file. SQLite answers with the mode
  // in force, which stays the old one when WAL is unavailable.
  Status EnableWal() {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA journal_mode=WAL", -1, &stmt, nullptr);
    std::string mode;
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) mode = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    Status status = rc == SQLITE_ROW ? Status::OK() : Error(rc, "enable WAL");
    sqlite3_finalize(stmt);
    if (status.ok() && mode != "wal") {
      status = Status::Err(EIO, "sqlite3 '" + path_ + "': cannot enable WAL (journal mode is " + mode + ")");
    }
    return status;
  }

  Status Error(int rc, std::string_view what) {
    if (IsBusy(rc)) busy_ = true;
    std::string msg = "sqlite3 '" + path_ + "': " + std::string(what) + ": ";
    msg += db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    return Status::Err(ErrnoFor(rc, db_), std::move(msg));
  }

  const std::string path_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmts_[kNumStmts] = {};
  bool busy_ = false;
};

// Runs each operation on the connection inside its open SQLite transaction,
// so reads see the transaction's own writes. Not thread-safe.
class SqliteTxn final : public Txn {
 public:
  SqliteTxn(Conn* conn, bool read_only) : conn_(conn), read_only_(read_only) {}

  Result<std::string> Get(std::string_view key) override { return conn_->Get(key); }

  Status Put(std::string_view key, std::string_view value) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Put in a read-only transaction");
    return conn_->Put(key, value);
  }

  Status Delete(std::string_view key) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Delete in a read-only transaction");
    return conn_->Delete(key);
  }

  // fn runs between batch queries, never while a statement is active, so it
  // may read and write through this transaction.
  Status Scan(std::string_view begin, std::string_view end, size_t limit, const ScanFn& fn) override {
    std::string from(begin);
    Rows rows;
    size_t visited = 0;
    for (int64_t batch = kFirstScanBatch;; batch = std::min(batch * 2, kMaxScanBatch)) {
      const int64_t want = limit == 0 ? batch : std::min(batch, static_cast<int64_t>(limit - visited));
      rows.clear();
      RETURN_IF_ERROR(conn_->ScanBatch(from, end, want, &rows));
      for (const auto& [key, value] : rows) {
        if (!fn(key, value)) return Status::OK();
      }
      visited += rows.size();
      if (static_cast<int64_t>(rows.size()) < want || visited == limit) return Status::OK();
      // Resume at the smallest key after the last one.
      from = std::move(rows.back().first);
      from.push_back('\0');
    }
  }

 private:
  Conn* const conn_;
  const bool read_only_;
};

// Thread-safe. Lock order: writer_mu_ before mu_. fn must not call Run on the
// same engine (a nested write transaction would deadlock on writer_mu_).
class SqliteEngine final : public Engine {
 public:
  SqliteEngine(std::string path, const SqliteOptions& options, std::unique_ptr<Conn> first)
      : path_(std::move(path)), options_(options) {
    idle_.push_back(std::move(first));
    open_conns_ = 1;
  }

  Status Run(const TxnFn& fn, bool read_only) override {
    return Transact(read_only, [&](Conn& conn) {
      SqliteTxn txn(&conn, read_only);
      return fn(txn);
    });
  }

  Status DropAll() override {
    return Transact(false, [](Conn& conn) { return conn.DeleteAll(); });
  }

  std::string Name() const override { return "sqlite3"; }

 private:
  // A connection borrowed from the pool, returned on every exit path.
  class Lease {
   public:
    Lease(SqliteEngine* engine, std::unique_ptr<Conn> conn) : engine_(engine), conn_(std::move(conn)) {}
    ~Lease() { engine_->Release(std::move(conn_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Conn& operator*() const { return *conn_; }

   private:
    SqliteEngine* const engine_;
    std::unique_ptr<Conn> conn_;
  };

  // Runs body(conn) between BEGIN and COMMIT, retrying the whole transaction
  // while SQLite reports a busy or locked database.
  template <typename Body>
  Status Transact(bool read_only, const Body& body) {
    // This process's writers queue here rather than in SQLite's busy handler,
    // which polls with sleeps; only other processes make BEGIN IMMEDIATE wait.
    std::unique_lock<std::mutex> writer(writer_mu_, std::defer_lock);
    if (!read_only) writer.lock();
    Result<std::unique_ptr<Conn>> acquired = Acquire();
    if (!acquired.ok()) return acquired.status();
    Lease lease(this, std::move(acquired).value());
    Conn& conn = *lease;
    for (int attempt = 1;; ++attempt) {
      conn.ClearBusy();
      Status status = conn.Begin(read_only);
      if (status.ok()) status = body(conn);
      if (status.ok() && !conn.busy()) status = conn.Commit();
      if (status.ok() && !conn.busy()) return status;
      RETURN_IF_ERROR(conn.Rollback());
      if (!conn.busy()) return status;  // fn's own error, or a hard SQLite error
      if (attempt >= options_.max_attempts) {
        return Status::Err(EBUSY, "sqlite3 '" + path_ + "': database still busy after " + std::to_string(attempt) +
                                      " attempts" + (status.ok() ? "" : ": " + status.message()));
      }
      Backoff(attempt);
    }
  }

  Result<std::unique_ptr<Conn>> Acquire() {
    {
      std::unique_lock lock(mu_);
      conn_freed_.wait(lock, [&] { return !idle_.empty() || open_conns_ < options_.max_connections; });
      if (!idle_.empty()) {
        Result<std::unique_ptr<Conn>> conn(std::move(idle_.back()));
        idle_.pop_back();
        return conn;
      }
      ++open_conns_;
    }
    Result<std::unique_ptr<Conn>> conn = Conn::Open(path_, options_);
    if (!conn.ok()) {
      std::lock_guard lock(mu_);
      --open_conns_;
      conn_freed_.notify_one();
    }
    return conn;
  }

  void Release(std::unique_ptr<Conn> conn) {
    // A connection still inside a transaction (its rollback failed) is closed,
    // which rolls back, rather than handed to the next caller.
    if (conn->InTxn()) conn.reset();
    std::lock_guard lock(mu_);
    if (conn) {
      idle_.push_back(std::move(conn));  // LIFO: reuses the warmest page cache
    } else {
      --open_conns_;
    }
    conn_freed_.notify_one();
  }

  // Immutable.
  const std::string path_;
  const SqliteOptions options_;

  // Held for the whole of each write transaction of this process.
  std::mutex writer_mu_;

  std::mutex mu_;
  std::condition_variable conn_freed_;       // signalled when idle_ or open_conns_ changes
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
  int open_conns_ = 0;                       // guarded by mu_; idle plus lent out
};

}  // namespace

Result<std::unique_ptr<Engine>> OpenSqlite(const std::string& path, const SqliteOptions& options) {
  if (options.max_connections < 1 || options.max_attempts < 1 || options.busy_timeout_ms < 0) {
    return Status::Err(EINVAL,
                       "sqlite3 '" + path + "': max_connections and max_attempts must be >= 1, busy_timeout_ms >= 0");
  }
  // Pool connections are opened later, possibly after a chdir (daemonizing),
  // so a relative path is resolved once, now.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return Status::Err(EINVAL, "sqlite3 '" + path + "': cannot resolve path: " + ec.message());
  // The first connection reports a bad path now, and creates file and table.
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> first, Conn::Open(absolute.string(), options));
  return std::unique_ptr<Engine>(std::make_unique<SqliteEngine>(absolute.string(), options, std::move(first)));
}

}  // namespace tessera::kv
