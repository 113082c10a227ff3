#include "kv/sqlite_kv.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <utility>

#include "kv/listen.h"
#include "kv/sqlite_batch_vfs.h"
#include "kv/sqlite_redo.h"
#include "kv/sql_kv.h"

namespace tessera::kv {
namespace {

using sql::Failure;
using sql::Rows;
using sql::Stmt;

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

// One SQLite connection with its prepared statements: the driver of the
// shared SQL engine (sql_kv.h). Not thread-safe: the engine's pool lends it to
// one thread at a time, which is why it is opened with SQLITE_OPEN_NOMUTEX.
class SqliteConn {
 public:
  struct Config {
    std::string path;  // absolute
    SqliteOptions options;
    std::string redo_id;  // this engine's redo journal (sqlite_redo.h), "" if none
  };

  static Result<std::unique_ptr<SqliteConn>> Open(const Config& config) {
    const std::string& path = config.path;
    const SqliteOptions& options = config.options;
    std::unique_ptr<SqliteConn> conn(new SqliteConn(path));
    sqlite3*& db = conn->db_;
    int rc =
        sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        options.vfs.empty() ? nullptr : options.vfs.c_str());
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
      conn->ClearFailure();
      Status status = conn->Setup();
      if (status.ok()) break;
      if (conn->failure() != Failure::kRetry || attempt >= options.max_attempts) return status;
      sql::Backoff(attempt);
    }
    for (int i = 0; i < sql::kNumStmts; ++i) {
      const std::string text = sql::StatementText(sql::kSqliteDialect, static_cast<Stmt>(i));
      rc = sqlite3_prepare_v3(db, text.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &conn->stmts_[i], nullptr);
      if (rc != SQLITE_OK) return conn->Error(rc, "prepare " + text);
    }
    for (int i = 0; i < kSavepointStmts; ++i) {
      rc = sqlite3_prepare_v3(db, kSavepointSql[i], -1, SQLITE_PREPARE_PERSISTENT, &conn->savepoint_stmts_[i], nullptr);
      if (rc != SQLITE_OK) return conn->Error(rc, std::string("prepare ") + kSavepointSql[i]);
    }
    for (int i = 0; i < kRedoStmts; ++i) {
      rc = sqlite3_prepare_v3(db, kRedoSql[i], -1, SQLITE_PREPARE_PERSISTENT, &conn->redo_stmts_[i], nullptr);
      if (rc != SQLITE_OK) return conn->Error(rc, std::string("prepare ") + kRedoSql[i]);
    }
    conn->redo_id_ = config.redo_id;
    return conn;
  }

  ~SqliteConn() {
    for (sqlite3_stmt* stmt : stmts_) sqlite3_finalize(stmt);
    for (sqlite3_stmt* stmt : savepoint_stmts_) sqlite3_finalize(stmt);
    for (sqlite3_stmt* stmt : redo_stmts_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);  // rolls back an open transaction
  }
  SqliteConn(const SqliteConn&) = delete;
  SqliteConn& operator=(const SqliteConn&) = delete;

  // A write transaction first replays what engines that died left in
  // their redo journals (sqlite_redo.h): nothing may write before that.
  Status Begin(bool read_only) {
    Status st = Exec(read_only ? sql::kBeginRead : sql::kBeginWrite, "begin");
    began_ = st.ok();
    if (!st.ok() || read_only) return st;
    st = ReplayOrphans();
    if (!st.ok()) (void)Rollback();
    return st;
  }
  // A COMMIT that failed other than by losing a race (an I/O error while
  // writing or syncing the WAL) may still have reached the disk: its frames
  // are replayed when the database is next opened. So its outcome is unknown.
  Status Commit() {
    RETURN_IF_ERROR(Live());  // rolled back by SQLite: nothing of it is in the file
    Status st = Exec(sql::kCommit, "commit");
    began_ = InTxn();
    if (st.ok()) {
      for (const std::string& path : replayed_) ::unlink(path.c_str());  // their rows are gone for good
      replayed_.clear();
    }
    if (st.ok() || failure_ == Failure::kRetry) return st;
    return Status::Unknown(st.code(), st.message() + " (the commit may or may not have been applied)");
  }
  // Rolls back the open transaction, if any (SQLite ends it by itself after
  // some errors).
  Status Rollback() {
    Status st = InTxn() ? Exec(sql::kRollback, "rollback") : Status::OK();
    began_ = InTxn();
    replayed_.clear();
    return st;
  }
  bool Reusable() const { return !InTxn(); }

  // Group commit (sql_kv.h): each grouped caller's writes in a savepoint.
  static constexpr bool kSavepoints = true;
  Status Savepoint() { return LiveStep(savepoint_stmts_[0], "savepoint"); }
  Status RollbackToSavepoint() { return LiveStep(savepoint_stmts_[1], "rollback to savepoint"); }
  Status ReleaseSavepoint() { return LiveStep(savepoint_stmts_[2], "release savepoint"); }
  bool InTransaction() const { return InTxn(); }

  // Redo journals (sqlite_redo.h), in a write transaction: sets the row of
  // journal id to gen, removes it, lists every journal's id.
  static constexpr bool kRedo = true;
  Status RedoStamp(std::string_view id, uint64_t gen) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = redo_stmts_[kRedoStamp];
    ResetOnExit reset(stmt);
    int rc = sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(stmt, 2, static_cast<int64_t>(gen));
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "write the redo journal's generation");
  }
  Status RedoForget(std::string_view id) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = redo_stmts_[kRedoForget];
    ResetOnExit reset(stmt);
    int rc = sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "remove a redo journal's row");
  }
  // This engine's own journal (Config::redo_id), for a connection opened
  // before it was made.
  void SetRedoId(const std::string& id) { redo_id_ = id; }

  // When an engine opens, before its first transaction: replays what
  // engines that died left (so a CLI command or a remount does), registers
  // the journal with id (if not empty) at its first generation, and removes
  // journal files nobody needs any more. Takes the write lock only for the
  // first two, so an engine that only opens does not wait for another's
  // delayed transaction.
  Status OpenRedo(const std::string& id, int max_attempts) {
    for (int attempt = 1;; ++attempt) {
      ClearFailure();
      Status st = Status::OK();
      if (id.empty()) {
        st = ReplayDeadJournals();
      } else {
        st = Begin(false);  // replays
        if (st.ok()) st = RedoStamp(id, 1);
        if (st.ok()) st = Commit();
        if (!st.ok()) (void)Rollback();
      }
      if (st.ok()) break;
      if (failure_ != Failure::kRetry || attempt >= max_attempts) return st;
      sql::Backoff(attempt);
    }
    std::vector<std::pair<std::string, uint64_t>> rows;
    RETURN_IF_ERROR(RedoList(&rows));
    std::vector<std::string> ids;
    for (auto& row : rows) ids.push_back(std::move(row.first));
    RemoveStaleRedoFiles(path_, ids);
    return Status::OK();
  }

  // Outside a transaction: replays the journals whose owners died, if any
  // (one short write transaction; nothing when there are none).
  Status ReplayDeadJournals() {
    std::vector<std::pair<std::string, uint64_t>> rows;
    RETURN_IF_ERROR(RedoList(&rows));
    const bool orphans = std::any_of(rows.begin(), rows.end(), [&](const auto& row) {
      return row.first != redo_id_ && RedoOwnerGone(RedoPath(path_, row.first));
    });
    if (!orphans) return Status::OK();
    ClearFailure();
    Status st = Begin(false);  // replays
    if (st.ok()) st = Commit();
    if (!st.ok()) (void)Rollback();
    return st;
  }

  Status RedoList(std::vector<std::pair<std::string, uint64_t>>* rows) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = redo_stmts_[kRedoList];
    ResetOnExit reset(stmt);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      rows->emplace_back(ColumnBlob(stmt, 0), static_cast<uint64_t>(sqlite3_column_int64(stmt, 1)));
    }
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "list the redo journals");
  }

  // Failure::kRetry if a call failed with SQLITE_BUSY/SQLITE_LOCKED since
  // ClearFailure(). Recorded here so that a retry happens even if fn
  // swallowed the error.
  Failure failure() const { return failure_; }
  void ClearFailure() { failure_ = Failure::kNone; }

  Result<std::string> Get(std::string_view key) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = stmts_[sql::kGet];
    ResetOnExit reset(stmt);
    if (int rc = BindBlob(stmt, 1, key); rc != SQLITE_OK) return Error(rc, "get");
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) return ColumnBlob(stmt, 0);
    if (rc == SQLITE_DONE) return Status::Err(ENOENT);
    return Error(rc, "get");
  }

  Status Put(std::string_view key, std::string_view value) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = stmts_[sql::kPut];
    ResetOnExit reset(stmt);
    int rc = BindBlob(stmt, 1, key);
    if (rc == SQLITE_OK) rc = BindBlob(stmt, 2, value);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "put");
  }

  Status PutMany(const Txn::KeyValues& kvs) {
    for (const auto& [k, v] : kvs) RETURN_IF_ERROR(Put(k, v));
    return Status::OK();
  }

  Status Delete(std::string_view key) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = stmts_[sql::kDelete];
    ResetOnExit reset(stmt);
    int rc = BindBlob(stmt, 1, key);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, "delete");
  }

  Status DeleteAll() { return LiveStep(stmts_[sql::kDeleteAll], "delete all"); }

  // Appends to the change log, and every 256th time drops what is older
  // than kLogKeepSec (a listener polls every 50 ms; one that fell further
  // behind finds a gap and drops its caches).
  Status Notify(std::string_view payload) {
    RETURN_IF_ERROR(Live());
    const int64_t now = int64_t(std::time(nullptr));
    {
      sqlite3_stmt* stmt = stmts_[sql::kNotify];
      ResetOnExit reset(stmt);
      int rc = sqlite3_bind_int64(stmt, 1, now);
      if (rc == SQLITE_OK) rc = BindBlob(stmt, 2, payload);
      if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
      if (rc != SQLITE_DONE) return Error(rc, "append to the change log");
    }
    if (++notified_ % 256 != 0) return Status::OK();
    const std::string prune = "DELETE FROM kvlog WHERE at < " + std::to_string(now - kLogKeepSec);
    const int rc = sqlite3_exec(db_, prune.c_str(), nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? Status::OK() : Error(rc, "prune the change log");
  }

  // synchronous=NORMAL syncs the WAL only at checkpoints: syncing the file
  // makes every commit in it durable (a checkpoint syncs the database file
  // before the WAL starts over, so no commit is only elsewhere unsynced).
  static Status Sync(const Config& config) {
    const std::string wal = config.path + "-wal";
    const int fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? Status::OK() : Status::Err(errno, "open " + wal);
    const int rc = ::fdatasync(fd);
    const int err = errno;
    ::close(fd);
    return rc == 0 ? Status::OK() : Status::Err(err, "fsync " + wal);
  }

  // Polls the change log every 50 ms on a connection of its own.
  static Result<std::unique_ptr<Listener>> Listen(const Config& config, Engine::NotifyFn fn) {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteConn> conn, Open(config));
    auto reader = std::make_shared<LogReader>(std::move(conn));
    RETURN_IF_ERROR(reader->Start());
    auto poll = [reader](std::vector<std::string>* out, bool* lost) { return reader->Poll(out, lost); };
    return std::unique_ptr<Listener>(
        std::make_unique<PollingListener>(std::move(poll), std::move(fn), std::chrono::milliseconds(50)));
  }

  // Appends to *rows at most limit rows with keys in [from, end) (end empty:
  // no upper bound), in key order.
  Status ScanBatch(std::string_view from, std::string_view end, int64_t limit, Rows* rows) {
    RETURN_IF_ERROR(Live());
    sqlite3_stmt* stmt = stmts_[end.empty() ? sql::kScanFrom : sql::kScanRange];
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
  explicit SqliteConn(std::string path) : path_(std::move(path)) {}

  bool InTxn() const { return sqlite3_get_autocommit(db_) == 0; }

  // SQLite may end a transaction by itself after an error (a full disk, an
  // I/O error, no memory: https://sqlite.org/lang_transaction.html), and a
  // statement run after that is a transaction of its own, committed at once:
  // a caller that went on past a failed read would commit the rest of its
  // writes without the ones before. So between Begin and Commit/Rollback
  // every statement first checks that the transaction is still open.
  Status Live() const {
    if (!began_ || InTxn()) return Status::OK();
    return Status::Err(EIO, "sqlite3 '" + path_ + "': the transaction was rolled back after an error");
  }
  Status LiveStep(sqlite3_stmt* stmt, std::string_view what) {
    RETURN_IF_ERROR(Live());
    return Step(stmt, what);
  }

  Status Exec(Stmt which, std::string_view what) { return Step(stmts_[which], what); }
  Status Step(sqlite3_stmt* stmt, std::string_view what) {
    ResetOnExit reset(stmt);
    const int rc = sqlite3_step(stmt);
    return rc == SQLITE_DONE ? Status::OK() : Error(rc, what);
  }

  Status Setup() {
    // Before anything writes the file: a new database gets 2 KiB pages
    // (kPageSizePragma); an existing one keeps the page size it was made
    // with (SQLite cannot change it in WAL mode), so this is a no-op there.
    int rc = sqlite3_exec(db_, kPageSizePragma, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "set page_size");
    RETURN_IF_ERROR(EnableWal());
    rc = sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "set synchronous=NORMAL");
    rc = sqlite3_exec(db_, sql::kSqliteDialect.create_table, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "create table");
    rc = sqlite3_exec(db_, kCreateLog, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return Error(rc, "create table kvlog");
    rc = sqlite3_exec(db_, kCreateRedo, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? Status::OK() : Error(rc, "create table kvredo");
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
    if (sql::ClassifySqlite(rc) == Failure::kRetry) failure_ = Failure::kRetry;
    std::string msg = "sqlite3 '" + path_ + "': " + std::string(what) + ": ";
    msg += db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    return Status::Err(ErrnoFor(rc, db_), std::move(msg));
  }

  // Every commit writes each page it changed to the WAL whole, with a
  // checksum over it: a metadata operation changes a few records on 2-3
  // pages, so smaller pages mean fewer bytes written and summed per
  // operation. 2 KiB, not SQLite's 4 KiB default: in `tessera bench-meta`
  // on tmpfs, 9 rounds alternating with 4 KiB (docs/benchmarks.md), mkdir,
  // create, unlink, rmdir and rename ran 9-24% faster, reads and readdir
  // alike within the noise. Not 1 KiB: in the index b-tree of a
  // WITHOUT ROWID table a record of more than ~230 bytes would then spill to
  // an overflow page (~490 bytes at 2 KiB), i.e. a chunk of more than 9
  // slices (24 bytes each), which is common before compaction.
  static constexpr const char* kPageSizePragma = "PRAGMA page_size=2048";

  // The change log (Txn::Notify): ids grow in commit order (writers are
  // serial, AUTOINCREMENT never reuses an id, a rollback takes its id back).
  static constexpr const char* kCreateLog =
      "CREATE TABLE IF NOT EXISTS kvlog (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, p BLOB NOT NULL)";
  static constexpr int64_t kLogKeepSec = 60;

  // The redo journals of engines with a commit delay (sqlite_redo.h): the
  // generation of each one's records not yet in the database.
  static constexpr const char* kCreateRedo =
      "CREATE TABLE IF NOT EXISTS kvredo (id TEXT PRIMARY KEY, gen INTEGER NOT NULL)";
  enum RedoStmt { kRedoList, kRedoStamp, kRedoForget, kRedoStmts };
  static constexpr const char* kRedoSql[kRedoStmts] = {
      "SELECT id, gen FROM kvredo", "INSERT OR REPLACE INTO kvredo (id, gen) VALUES (?1, ?2)",
      "DELETE FROM kvredo WHERE id = ?1"};

  // Applies the records of every journal whose engine died (its flock is
  // free) and removes its row; the file goes once this transaction commits.
  // One statement over an empty table when no engine has a delay.
  Status ReplayOrphans() {
    std::vector<std::pair<std::string, uint64_t>> rows;
    RETURN_IF_ERROR(RedoList(&rows));
    for (const auto& [id, gen] : rows) {
      if (id == redo_id_) continue;
      const std::string path = RedoPath(path_, id);
      std::vector<RedoOp> ops;
      ASSIGN_OR_RETURN(bool orphaned, ReadOrphanedRedo(path, gen, &ops));
      if (!orphaned && ::access(path.c_str(), F_OK) == 0) continue;  // its engine lives
      for (const RedoOp& op : ops) {
        if (op.kind == 'P') {
          RETURN_IF_ERROR(Put(op.key, op.value));
        } else if (op.kind == 'D') {
          RETURN_IF_ERROR(Delete(op.key));
        } else {
          RETURN_IF_ERROR(Notify(op.value));
        }
      }
      RETURN_IF_ERROR(RedoForget(id));
      if (!ops.empty()) {
        LOG_WARN("sqlite3 '{}': replayed {} metadata change(s) of a client that stopped before committing them",
                 path_, ops.size());
      }
      replayed_.push_back(path);
    }
    return Status::OK();
  }

  // Reads the log after the last id it returned.
  class LogReader {
   public:
    explicit LogReader(std::unique_ptr<SqliteConn> conn) : conn_(std::move(conn)) {}
    ~LogReader() { sqlite3_finalize(read_); }
    Status Start() {
      int rc = sqlite3_prepare_v2(conn_->db_, "SELECT id, p FROM kvlog WHERE id > ?1 ORDER BY id LIMIT 4096", -1,
                                  &read_, nullptr);
      if (rc != SQLITE_OK) return conn_->Error(rc, "prepare the change log reader");
      return LastId(&last_);
    }
    Status Poll(std::vector<std::string>* out, bool* lost) {
      // A client that died with answered changes not committed is replayed
      // here too, so that the others see them within a poll, not only at
      // their next write. Busy (another writer holds the lock, or replays
      // it first): tried again at the next poll.
      (void)conn_->ReplayDeadJournals();
      if (resync_) {  // a poll failed: start after what the log holds now
        RETURN_IF_ERROR(LastId(&last_));
        resync_ = false;
        *lost = true;
      }
      ResetOnExit reset(read_);
      int rc = sqlite3_bind_int64(read_, 1, last_);
      while (rc == SQLITE_OK && (rc = sqlite3_step(read_)) == SQLITE_ROW) {
        const int64_t id = sqlite3_column_int64(read_, 0);
        if (id != last_ + 1) *lost = true;  // pruned before this reader saw it
        last_ = id;
        out->push_back(ColumnBlob(read_, 1));
        rc = SQLITE_OK;
      }
      if (rc == SQLITE_DONE) return Status::OK();
      resync_ = true;
      return conn_->Error(rc, "read the change log");
    }

   private:
    // The last id handed out (the log may have been pruned empty).
    Status LastId(int64_t* id) {
      sqlite3_stmt* stmt = nullptr;
      int rc = sqlite3_prepare_v2(conn_->db_, "SELECT seq FROM sqlite_sequence WHERE name = 'kvlog'", -1, &stmt,
                                  nullptr);
      *id = 0;
      if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) *id = sqlite3_column_int64(stmt, 0);
      sqlite3_finalize(stmt);
      return rc == SQLITE_ROW || rc == SQLITE_DONE ? Status::OK() : conn_->Error(rc, "read the change log");
    }

    const std::unique_ptr<SqliteConn> conn_;
    sqlite3_stmt* read_ = nullptr;
    int64_t last_ = 0;
    bool resync_ = false;
  };

  const std::string path_;
  uint64_t notified_ = 0;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmts_[sql::kNumStmts] = {};
  static constexpr int kSavepointStmts = 3;
  static constexpr const char* kSavepointSql[kSavepointStmts] = {"SAVEPOINT g", "ROLLBACK TO SAVEPOINT g",
                                                                  "RELEASE SAVEPOINT g"};
  sqlite3_stmt* savepoint_stmts_[kSavepointStmts] = {};
  sqlite3_stmt* redo_stmts_[kRedoStmts] = {};
  std::string redo_id_;                // Config::redo_id
  std::vector<std::string> replayed_;  // journals replayed by this transaction, removed once it commits
  Failure failure_ = Failure::kNone;
  bool began_ = false;  // between a Begin and its Commit/Rollback (Live)
};

}  // namespace

Result<std::unique_ptr<Engine>> OpenSqlite(const std::string& path, const SqliteOptions& options) {
  if (options.max_connections < 1 || options.max_attempts < 1 || options.busy_timeout_ms < 0 ||
      options.commit_delay.count() < 0) {
    return Status::Err(EINVAL, "sqlite3 '" + path +
                                   "': max_connections and max_attempts must be >= 1, busy_timeout_ms and "
                                   "commit_delay >= 0");
  }
  // Pool connections are opened later, possibly after a chdir (daemonizing),
  // so a relative path is resolved once, now.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return Status::Err(EINVAL, "sqlite3 '" + path + "': cannot resolve path: " + ec.message());
  // The first connection reports a bad path now, and creates file and table.
  SqliteConn::Config config{absolute.string(), options, {}};
  // Each commit's WAL frames in one write (sqlite_batch_vfs.h).
  config.options.vfs = RegisterBatchVfs(options.vfs);
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteConn> first, SqliteConn::Open(config));
  // A commit delay keeps a redo journal (sqlite_redo.h).
  std::shared_ptr<RedoJournal> redo;
  if (options.commit_delay.count() > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<RedoJournal> journal, RedoJournal::Create(config.path));
    redo = std::move(journal);
    config.redo_id = redo->id();
    first->SetRedoId(config.redo_id);
  }
  RETURN_IF_ERROR(first->OpenRedo(config.redo_id, options.max_attempts));
  sql::PoolOptions pool;
  pool.max_connections = options.max_connections;
  pool.max_attempts = options.max_attempts;
  // This process's writers queue on a mutex rather than in SQLite's busy
  // handler, which polls with sleeps; only other processes make BEGIN
  // IMMEDIATE wait.
  pool.serialize_writers = true;
  pool.group_commit = options.group_commit;
  pool.commit_delay = options.commit_delay;
  pool.redo = std::move(redo);
  return std::unique_ptr<Engine>(std::make_unique<sql::SqlEngine<SqliteConn>>(
      sql::kSqliteDialect, std::move(config), "sqlite3 '" + absolute.string() + "'", pool, std::move(first)));
}

}  // namespace tessera::kv
