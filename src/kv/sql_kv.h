// The shared core of the SQL kv::Engine backends (sqlite3, postgres).
//
// Both store the key space in one table `kv (k <blob> PRIMARY KEY, v <blob>)`
// and run the same statements; what differs is split in two:
//
//   * the dialect (this file, sql_kv.cc): SQL text that differs (table DDL,
//     parameter placeholders, how a read or write transaction begins) and
//     which native errors mean "lost a race, run the transaction again" or
//     "the connection is gone";
//   * the driver (sqlite_kv.cc over the SQLite C API, postgres_kv.cc over
//     libpq): a `Conn` class that prepares every statement of the dialect once
//     when it connects, binds parameters and reads rows.
//
// Everything else is here, written once as templates over the driver's Conn
// (so the SQLite hot path has no virtual calls and no per-operation SQL
// formatting): the Txn (read-only checks, batched scans), the connection
// pool, and the transaction loop (BEGIN, fn, COMMIT, roll back and retry with
// backoff on a conflict, reconnect when a connection broke).
//
// A driver's Conn provides:
//   static Result<std::unique_ptr<Conn>> Open(const Config&)
//   Status Begin(bool read_only); Status Rollback();
//   Status Commit();                  // outcome-unknown Status when it may have taken effect
//   bool Reusable() const;            // idle and healthy: may go back to the pool
//   Failure failure() const; void ClearFailure();
//   Result<std::string> Get(key); Status Put(key, value); Status Delete(key);
//   Status PutMany(const Txn::KeyValues&);
//   Status ScanBatch(from, end, limit, Rows*); Status DeleteAll();
//   Status Notify(payload);           // Txn::Notify
//   static Result<std::unique_ptr<Listener>> Listen(const Config&, Engine::NotifyFn);
//   static constexpr bool kSavepoints;  // true: also the following, for group commit
//   Status Savepoint(); Status RollbackToSavepoint(); Status ReleaseSavepoint();
//   bool InTransaction() const;
//   static constexpr bool kRedo;     // true: also the following, for a commit delay
//   Status RedoStamp(id, gen); Status RedoForget(id);   // its redo journal
// where every failing call records its Failure (so that a retry happens even
// when fn swallows the error).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/retry.h"
#include "common/thread_name.h"
#include "common/wait_word.h"
#include "kv/kv.h"
#include "kv/sqlite_redo.h"

namespace tessera::kv::sql {

// The statements every connection prepares once.
enum Stmt {
  kBeginRead,
  kBeginWrite,
  kCommit,
  kRollback,
  kGet,
  kPut,
  kPutMany,
  kDelete,
  kScanRange,
  kScanFrom,
  kDeleteAll,
  kNotify,
  kNumStmts
};

// What differs between the SQL dialects; everything else is shared.
// Shared with the Redis client: one family for every engine.
inline constexpr const char* kRetriesMetric = "tessera_meta_tx_retries_total";
inline constexpr const char* kRetriesHelp =
    "Metadata transactions or requests sent again (conflict, busy database, lost connection)";

struct Dialect {
  // Engine::Name() and the first word of error messages.
  const char* name;
  // Engine::RemoteReads(): the database is a server.
  bool remote;
  // Creates the table if missing (binary key type, primary key).
  const char* create_table;
  // Parameters are written ?1, ?2... in the shared statements; a dialect
  // numbering them $1, $2... says '$'.
  char placeholder;
  const char* begin_read;
  const char* begin_write;
  // Many upserts in one statement ($1 keys, $2 values as arrays), or null:
  // the driver puts them one at a time.
  const char* put_many;
  // Txn::Notify: sqlite3 appends to a log table other processes poll
  // (?1 time, ?2 payload); postgres calls pg_notify (?1 payload).
  const char* notify;
};

extern const Dialect kSqliteDialect;
extern const Dialect kPostgresDialect;

// The text of statement s in dialect d. Built when a connection prepares its
// statements, never per operation.
std::string StatementText(const Dialect& d, Stmt s);

// What the transaction loop does after a call failed, by kind of error.
enum class Failure {
  kNone,
  // Lost a race with another transaction: roll back, back off, run fn again.
  kRetry,
  // The connection is gone (server restart, network): replace it and run fn
  // again, unless COMMIT of a write transaction was in flight.
  kReconnect,
};

// SQLite: SQLITE_BUSY and SQLITE_LOCKED (any extended code) mean retry.
Failure ClassifySqlite(int rc);
// PostgreSQL: SQLSTATE 40001 serialization_failure and 40P01
// deadlock_detected mean retry; a connection not in CONNECTION_OK state means
// reconnect. sqlstate may be null (errors raised by libpq itself).
Failure ClassifyPostgres(const char* sqlstate, bool connection_ok);

// Sleeps before another attempt of a transaction that lost a race: a random
// time in [cap/2, cap], cap = 2^attempt ms up to 64 ms, so competitors fall
// out of step.
void Backoff(int attempt);

using Rows = std::vector<std::pair<std::string, std::string>>;

// Lets a write transaction that lost a race run its retries alone in this
// process. Write transactions pass the gate shared; one that must retry
// waits until it can pass exclusively, and while it waits or runs no new one
// passes. So a hot key (a counter, the directory every thread creates files
// in) costs each thread at most one lost race inside the process, rather
// than a retry storm that can starve one of them; unrelated writes still run
// in parallel while nothing conflicts. Transactions of other processes are
// not held back: against those, only backoff helps.
class ConflictGate {
 public:
  void EnterShared() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return !exclusive_ && exclusive_waiting_ == 0; });
    ++shared_;
  }
  void ExitShared() {
    std::lock_guard lock(mu_);
    if (--shared_ == 0) changed_.notify_all();
  }
  void EnterExclusive() {
    std::unique_lock lock(mu_);
    ++exclusive_waiting_;
    changed_.wait(lock, [&] { return !exclusive_ && shared_ == 0; });
    --exclusive_waiting_;
    exclusive_ = true;
  }
  void ExitExclusive() {
    std::lock_guard lock(mu_);
    exclusive_ = false;
    changed_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int shared_ = 0;             // guarded by mu_
  int exclusive_waiting_ = 0;  // guarded by mu_
  bool exclusive_ = false;     // guarded by mu_
};

// A transaction's passage through a ConflictGate (none when gate is null),
// left on every exit path.
class GatePass {
 public:
  explicit GatePass(ConflictGate* gate) : gate_(gate) {
    if (gate_ != nullptr) gate_->EnterShared();
  }
  ~GatePass() {
    if (gate_ == nullptr) return;
    if (exclusive_) {
      gate_->ExitExclusive();
    } else {
      gate_->ExitShared();
    }
  }
  GatePass(const GatePass&) = delete;
  GatePass& operator=(const GatePass&) = delete;

  void MakeExclusive() {
    if (gate_ == nullptr || exclusive_) return;
    gate_->ExitShared();
    gate_->EnterExclusive();
    exclusive_ = true;
  }

 private:
  ConflictGate* const gate_;
  bool exclusive_ = false;
};

// Scan fetches rows in batches that grow from the first to the last size, so
// a scan stopped early reads little and a long one needs few queries.
inline constexpr int64_t kFirstScanBatch = 32;
inline constexpr int64_t kMaxScanBatch = 1024;

// Runs each operation on the connection inside its open transaction, so reads
// see the transaction's own writes. Not thread-safe.
template <typename Conn>
class SqlTxn final : public Txn {
 public:
  SqlTxn(Conn* conn, bool read_only) : conn_(conn), read_only_(read_only) {}

  // Records every change made through this transaction into *body
  // (AppendRedoOp), for a redo journal.
  void RecordInto(std::string* body) { redo_ = body; }

  Result<std::string> Get(std::string_view key) override { return conn_->Get(key); }

  Status Put(std::string_view key, std::string_view value) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Put in a read-only transaction");
    RETURN_IF_ERROR(conn_->Put(key, value));
    if (redo_ != nullptr) AppendRedoOp('P', key, value, redo_);
    return Status::OK();
  }

  Status PutMany(const KeyValues& kvs) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Put in a read-only transaction");
    RETURN_IF_ERROR(conn_->PutMany(kvs));
    if (redo_ != nullptr) {
      for (const auto& [k, v] : kvs) AppendRedoOp('P', k, v, redo_);
    }
    return Status::OK();
  }

  Status Delete(std::string_view key) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Delete in a read-only transaction");
    RETURN_IF_ERROR(conn_->Delete(key));
    if (redo_ != nullptr) AppendRedoOp('D', key, {}, redo_);
    return Status::OK();
  }

  Status Notify(std::string_view payload) override {
    if (read_only_) return Status::Err(EINVAL, "kv: Notify in a read-only transaction");
    RETURN_IF_ERROR(conn_->Notify(payload));
    if (redo_ != nullptr) AppendRedoOp('N', {}, payload, redo_);
    return Status::OK();
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
  std::string* redo_ = nullptr;
};

struct PoolOptions {
  // Connections kept open; bounds how many transactions run at once.
  int max_connections = 8;
  // Times a whole transaction is tried while it keeps losing races (or
  // finding its connection broken); then Run returns EBUSY (transient).
  int max_attempts = 10;
  // Run this process's write transactions one at a time (SQLite has a single
  // writer anyway; queueing on a mutex beats its polling busy handler).
  bool serialize_writers = false;
  // Retry a write transaction that lost a race with no other write
  // transaction of this engine running (ConflictGate).
  bool serialize_retries = false;
  // Group commit (with serialize_writers, on a driver with savepoints): the
  // write transactions of callers that queue while one commits share the
  // next database transaction, each in a savepoint of its own (one that
  // fails rolls back alone), ended by one COMMIT. Every caller still returns
  // only after that COMMIT, with its own outcome.
  bool group_commit = false;
  // Commit delay (with serialize_writers, on a driver with savepoints; 0:
  // off). A write transaction's changes are made in the database
  // transaction left open by the one before (each in a savepoint of its
  // own, so one that fails rolls back alone) and Run returns without a
  // COMMIT; that transaction is committed once it is this old (by the
  // writer that finds it so, or a thread of the engine), holds
  // kMaxDelayed transactions, or on Flush, Sync, DropAll, a read-only Run
  // and the engine's destruction. So nothing but this engine's own
  // writers ever reads changes not committed: reads of other
  // connections, and what callers do after reading (deleting objects),
  // see only committed state. A change Run returned from can be lost when
  // its COMMIT then fails (LostWrites, OnLostWrites), and without redo in
  // a crash of the process within commit_delay.
  std::chrono::microseconds commit_delay{0};
  // With a commit delay, on a driver with kRedo: the journal that makes a
  // change Run returned from survive a crash of the process before its
  // COMMIT (sqlite_redo.h). Its row must exist (gen()) before the first Run.
  std::shared_ptr<RedoJournal> redo;
};

inline constexpr const char* kGroupsMetric = "tessera_meta_tx_groups_total";
inline constexpr const char* kGroupsHelp =
    "Database transactions that carried the write transactions of several callers (group commit)";
inline constexpr const char* kGroupedMetric = "tessera_meta_tx_grouped_total";
inline constexpr const char* kGroupedHelp = "Write transactions committed in a group with others (group commit)";
inline constexpr const char* kLostMetric = "tessera_meta_tx_lost_total";
inline constexpr const char* kLostHelp =
    "Write transactions answered under a commit delay whose COMMIT then failed: their changes are gone";

// A kv::Engine over a pool of driver connections. Thread-safe. Lock order:
// writer_mu_, then a pool connection (mu_), then gate_. fn must not call Run
// on the same engine (a nested transaction could deadlock on writer_mu_, the
// pool or gate_).
template <typename Conn>
class SqlEngine final : public Engine {
 public:
  using Config = typename Conn::Config;

  // config: what Conn::Open needs; description: how error messages name the
  // database (e.g. "sqlite3 '/path'"; must hold no secret); first: an open
  // connection, which becomes the pool's first.
  SqlEngine(const Dialect& dialect, Config config, std::string description, const PoolOptions& options,
            std::unique_ptr<Conn> first)
      : dialect_(dialect),
        config_(std::move(config)),
        description_(std::move(description)),
        options_(options),
        retries_(metrics::NewCounter(kRetriesMetric, kRetriesHelp, {{"engine", std::string(dialect.name)}})),
        groups_(metrics::NewCounter(kGroupsMetric, kGroupsHelp, {{"engine", std::string(dialect.name)}})),
        grouped_(metrics::NewCounter(kGroupedMetric, kGroupedHelp, {{"engine", std::string(dialect.name)}})),
        lost_(metrics::NewCounter(kLostMetric, kLostHelp, {{"engine", std::string(dialect.name)}})) {
    idle_.push_back(std::move(first));
    open_conns_ = 1;
    if constexpr (Conn::kSavepoints) {
      if (Delaying()) committer_ = std::thread([this] { CommitterLoop(); });
    }
  }

  ~SqlEngine() override {
    if (!committer_.joinable()) return;
    {
      std::lock_guard lock(committer_mu_);
      stopping_ = true;
    }
    committer_cv_.notify_all();
    committer_.join();
    if (Status st = Flush(); !st.ok())
      LOG_ERROR("{}: the last metadata changes could not be committed at close: {}", description_, st.ToString());
    if constexpr (Conn::kRedo) {
      if (options_.redo) RetireRedo();
    }
  }

  Status Run(const TxnFn& fn, bool read_only) override {
    if constexpr (Conn::kSavepoints) {
      if (Delaying()) {
        if (!read_only) return RunDelayed(fn);
        (void)Flush();  // a failure is counted, logged and reported already (LoseDelayed); the read goes on
      } else if (!read_only && options_.group_commit && options_.serialize_writers) {
        return RunGrouped(fn);
      }
    }
    return RunAlone(fn, read_only);
  }

  Status Flush() override {
    if constexpr (Conn::kSavepoints) {
      if (!open_flag_.load(std::memory_order_acquire)) return Status::OK();
      std::lock_guard writer(writer_mu_);
      return CommitDelayed();
    }
    return Status::OK();
  }

  uint64_t LostWrites() const override { return lost_writes_.load(std::memory_order_acquire); }
  // Waits for a call of the old function in progress: after it returns,
  // the old one is never called again.
  void OnLostWrites(std::function<void()> fn) override {
    std::unique_lock lock(committer_mu_);
    committer_cv_.wait(lock, [&] { return !calling_lost_; });
    on_lost_ = std::move(fn);
  }

  Status Sync() override {
    RETURN_IF_ERROR(Flush());
    return Conn::Sync(config_);
  }

  Status DropAll() override {
    RETURN_IF_ERROR(Flush());
    return Transact(false, [](Conn& conn) { return conn.DeleteAll(); });
  }

  std::string Name() const override { return dialect_.name; }
  bool RemoteReads() const override { return dialect_.remote; }

  Result<std::unique_ptr<Listener>> Listen(NotifyFn fn) override { return Conn::Listen(config_, std::move(fn)); }

 private:
  // A connection borrowed from the pool, returned on every exit path.
  class Lease {
   public:
    explicit Lease(SqlEngine* engine) : engine_(engine) {}
    ~Lease() {
      if (conn_) engine_->Release(std::move(conn_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    // Takes an idle connection or opens one, waiting while the pool is full.
    Status Acquire() { return engine_->Acquire(&conn_); }
    // Closes the (broken) connection and opens a new one in its place.
    Status Replace() {
      conn_.reset();
      return engine_->Open(&conn_);
    }
    Conn& conn() const { return *conn_; }

   private:
    SqlEngine* const engine_;
    std::unique_ptr<Conn> conn_;  // null: its pool slot is free
  };

  Status RunAlone(const TxnFn& fn, bool read_only) {
    return Transact(read_only, [&](Conn& conn) {
      SqlTxn<Conn> txn(&conn, read_only);
      return fn(txn);
    });
  }

  // Group commit (PoolOptions::group_commit). Callers queue; whoever finds
  // no group committing leads the next one: it takes the queue (up to
  // kMaxGroup, itself first), runs every caller's fn in one transaction,
  // hands the lead to the first caller still queued and wakes each member
  // of its group. A queued caller waits on its own state word, not on
  // group_mu_: woken, a member returns without taking the mutex again (with
  // condition variables every woken member re-took group_mu_ and fought the
  // leader and new arrivals for it; one shared condition, before that, woke
  // every waiter: with 4 writers 5 futex calls per transaction).
  static constexpr size_t kMaxGroup = 64;
  struct Member {
    explicit Member(const TxnFn* f) : fn(f) {}
    const TxnFn* fn;
    Status result = Status::OK();
    // kQueued, then kDone (result is set) or kLead (leads the next group):
    // stored by a leader (release) after it let go of group_mu_. A WaitWord,
    // not std::atomic::wait, whose spinning yields the CPU (wait_word.h).
    WaitWord state{kQueued};
  };
  static constexpr uint32_t kQueued = 0, kDone = 1, kLead = 2;

  static void Wake(Member* m, uint32_t state) { m->state.StoreAndWake(state); }

  Status RunGrouped(const TxnFn& fn) {
    // Shared with the leader, which wakes it after letting go of group_mu_
    // (and so may still touch it after the member returned).
    auto me = std::make_shared<Member>(&fn);
    std::unique_lock lock(group_mu_);
    group_queue_.push_back(me);
    if (group_leading_) {
      lock.unlock();
      const uint32_t state = me->state.WaitWhile(kQueued);
      if (state == kDone) return me->result;
      // kLead: nobody else leads, and this caller is still the queue's front.
      lock.lock();
    }
    group_leading_ = true;  // queued first: this caller is at the queue's front
    const size_t n = std::min(group_queue_.size(), kMaxGroup);
    std::vector<std::shared_ptr<Member>> group(group_queue_.begin(),
                                               group_queue_.begin() + static_cast<std::ptrdiff_t>(n));
    group_queue_.erase(group_queue_.begin(), group_queue_.begin() + static_cast<std::ptrdiff_t>(n));
    lock.unlock();
    std::vector<Member*> members;
    members.reserve(group.size());
    for (const auto& m : group) members.push_back(m.get());
    CommitGroup(members);
    lock.lock();
    std::shared_ptr<Member> next;
    if (!group_queue_.empty()) {
      next = group_queue_.front();  // the lead passes on: group_leading_ stays set
    } else {
      group_leading_ = false;
    }
    lock.unlock();
    for (const auto& m : group) {
      if (m != me) Wake(m.get(), kDone);
    }
    if (next) Wake(next.get(), kLead);
    return me->result;
  }

  // One transaction for the group, each fn in a savepoint. A member whose fn
  // fails is rolled back to its savepoint and the others go on; a lost race
  // runs the whole group again (Transact). If the group as a whole fails
  // otherwise, each member runs alone, so that each gets its own outcome —
  // except after a COMMIT of unknown outcome, which is every member's.
  void CommitGroup(const std::vector<Member*>& group) {
    if (group.size() == 1) {
      group[0]->result = RunAlone(*group[0]->fn, false);
      return;
    }
    Status st = Transact(false, [&](Conn& conn) -> Status {
      for (Member* m : group) {
        RETURN_IF_ERROR(conn.Savepoint());
        SqlTxn<Conn> txn(&conn, false);
        m->result = (*m->fn)(txn);
        if (conn.failure() != Failure::kNone)  // the group runs again, or fails
          return m->result.ok() ? Status::Err(EIO, description_ + ": a grouped transaction failed") : m->result;
        if (!m->result.ok()) {
          // Some errors (a full disk, an I/O error) end SQLite's
          // transaction by themselves: then the group cannot go on.
          if (!conn.InTransaction()) return Status::Err(EIO, description_ + ": a grouped transaction was rolled back");
          RETURN_IF_ERROR(conn.RollbackToSavepoint());
        }
        RETURN_IF_ERROR(conn.ReleaseSavepoint());
      }
      return Status::OK();
    });
    if (st.ok()) {
      groups_->Inc();
      grouped_->Inc(group.size());
      return;
    }
    if (st.outcome_unknown()) {
      for (Member* m : group) m->result = st;
      return;
    }
    for (Member* m : group) m->result = RunAlone(*m->fn, false);
  }

  // ---- Commit delay (PoolOptions::commit_delay). delayed_ and the rest
  // below are guarded by writer_mu_; open_flag_ mirrors delayed_ != null for
  // the readers' and Flush's check without the mutex.
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxDelayed = 256;

  bool Delaying() const {
    return Conn::kSavepoints && options_.serialize_writers && options_.commit_delay.count() > 0;
  }

  Status RunDelayed(const TxnFn& fn) {
    std::unique_lock writer(writer_mu_);
    if (!delayed_) RETURN_IF_ERROR(BeginDelayed());
    Conn& conn = *delayed_;
    conn.ClearFailure();
    Status st = conn.Savepoint();
    const bool saved = st.ok();
    std::string redo;
    bool stuck = false;  // a record of this call is stuck in the journal
    if (saved) {
      SqlTxn<Conn> txn(&conn, false);
      if (Journaling()) txn.RecordInto(&redo);
      st = fn(txn);
    }
    if (!conn.InTransaction()) {
      // SQLite ended the transaction by itself (a full disk, an I/O error):
      // the changes of the callers before this one went with it.
      LoseDelayed(st);
      return st.ok() ? Status::Err(EIO, description_ + ": the transaction was rolled back after an error") : st;
    }
    if (st.ok() && conn.failure() == Failure::kNone) {
      // Answered only once its changes are in the journal.
      bool appended = false;
      if (!redo.empty()) {
        st = AppendRedo(redo);  // cut back by itself if it failed
        appended = st.ok();
      }
      if (st.ok()) st = conn.ReleaseSavepoint();
      if (!st.ok() && appended && !UndoRedo()) stuck = true;
      if (st.ok()) {
        ++delayed_count_;
        if (delayed_count_ < kMaxDelayed && Clock::now() - delayed_since_ < options_.commit_delay) return st;
        return CommitDelayed();
      }
    }
    // This caller's changes go, the others' stay.
    const Failure failure = conn.failure();
    if (saved) {
      Status undo = conn.RollbackToSavepoint();
      if (undo.ok()) undo = conn.ReleaseSavepoint();
      if (!undo.ok()) {
        LoseDelayed(undo);
        return st;
      }
    }
    if (stuck) (void)CommitDelayed();  // reported
    if (failure == Failure::kNone) return st;  // fn's own error, or a hard database error
    // A lost race: commit what the others did, then run fn with the
    // transaction loop's retries.
    RETURN_IF_ERROR(CommitDelayed());
    writer.unlock();
    return RunAlone(fn, false);
  }

  // Opens the transaction the next writers share (writer_mu_ held).
  Status BeginDelayed() {
    std::unique_ptr<Conn> conn;
    RETURN_IF_ERROR(Acquire(&conn));
    for (int attempt = 1;; ++attempt) {
      conn->ClearFailure();
      Status st = conn->Begin(false);
      if (st.ok()) break;
      const Failure failure = conn->failure();
      if (failure != Failure::kRetry || attempt >= options_.max_attempts) {
        Release(std::move(conn));
        if (failure != Failure::kRetry) return st;
        return Status::Err(EBUSY, description_ + ": database still busy after " + std::to_string(attempt) +
                                      " attempts (locked by another process): " + st.message());
      }
      retries_->Inc();
      Backoff(attempt);
    }
    delayed_ = std::move(conn);
    delayed_since_ = Clock::now();
    open_flag_.store(true, std::memory_order_release);
    bool wake = false;
    {
      std::lock_guard lock(committer_mu_);
      due_ = delayed_since_ + options_.commit_delay;
      wake = committer_idle_;
    }
    if (wake) committer_cv_.notify_all();
    return Status::OK();
  }

  // Commits the open transaction, if any (writer_mu_ held). A failure is
  // counted and reported (LoseDelayed) as well as returned.
  Status CommitDelayed() {
    if (!delayed_) return Status::OK();
    Status st = StampRedo();
    if (st.ok()) st = delayed_->Commit();
    for (int attempt = 1; !st.ok() && delayed_->failure() == Failure::kRetry && delayed_->InTransaction() &&
                          attempt < options_.max_attempts;
         ++attempt) {
      retries_->Inc();
      Backoff(attempt);
      delayed_->ClearFailure();
      st = delayed_->Commit();
    }
    if (!st.ok()) {
      LoseDelayed(st);
      return st;
    }
    if (delayed_count_ > 1) {
      groups_->Inc();
      grouped_->Inc(delayed_count_);
    }
    CommittedRedo();
    EndDelayed();
    return st;
  }

  void EndDelayed() {
    delayed_->ClearFailure();
    Release(std::move(delayed_));
    delayed_count_ = 0;
    open_flag_.store(false, std::memory_order_release);
  }

  // The open transaction could not be committed: every change in it is
  // gone, though Run returned success for it. Counted (LostWrites, the
  // metric), logged, and reported to the OnLostWrites function by the
  // committer thread (never under writer_mu_: the function may wait for
  // requests that wait for it).
  void LoseDelayed(const Status& why) {
    DiscardRedo();  // before the rollback lets anyone else replay the journal
    (void)delayed_->Rollback();  // a failed rollback leaves the connection unusable: Release closes it
    const size_t n = delayed_count_;
    const auto age = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - delayed_since_);
    EndDelayed();
    if (n == 0) return;
    lost_->Inc(n);
    lost_writes_.fetch_add(n, std::memory_order_acq_rel);
    LOG_ERROR("{}: {} metadata change(s) answered in the last {:.1f} ms could not be committed and are gone: {}",
              description_, n, double(age.count()) / 1000.0, why.ToString());
    {
      std::lock_guard lock(committer_mu_);
      lost_pending_ = true;
    }
    committer_cv_.notify_all();
  }

  // ---- The redo journal (PoolOptions::redo, sqlite_redo.h), under writer_mu_.
  bool Journaling() const {
    if constexpr (Conn::kRedo) return options_.redo != nullptr;
    return false;
  }
  Status AppendRedo(std::string_view body) {
    if constexpr (Conn::kRedo) return options_.redo->Append(body);
    return Status::OK();
  }
  // False if the record could not be taken back (JournalStuck).
  bool UndoRedo() {
    if constexpr (Conn::kRedo) {
      if (Status st = options_.redo->Undo(); !st.ok()) {
        JournalStuck(st);
        return false;
      }
    }
    return true;
  }
  // In the open transaction, just before its COMMIT: its records are in
  // the database once it commits.
  Status StampRedo() {
    if constexpr (Conn::kRedo) {
      if (Journaling()) return delayed_->RedoStamp(options_.redo->id(), options_.redo->gen() + 1);
    }
    return Status::OK();
  }
  void CommittedRedo() {
    if constexpr (Conn::kRedo) {
      if (Journaling()) options_.redo->Committed();
    }
  }
  void DiscardRedo() {
    if constexpr (Conn::kRedo) {
      if (Journaling()) {
        if (Status st = options_.redo->Discard(); !st.ok()) JournalStuck(st);
      }
    }
  }
  // A record that must not count could not be marked so in the journal (a
  // write failed): a crash before the next COMMIT would replay a change
  // whose caller was told it failed. That COMMIT makes the record's
  // generation old; after a failed Undo, RunDelayed forces it at once.
  void JournalStuck(const Status& st) {
    LOG_ERROR("{}: cannot cut a failed change out of the metadata redo journal (a crash before the next commit "
              "would replay it): {}",
              description_, st.ToString());
  }
  // The engine closes: its journal's row goes, then its file.
  void RetireRedo() {
    if constexpr (Conn::kRedo) {
      Status st = Transact(false, [&](Conn& conn) { return conn.RedoForget(options_.redo->id()); });
      if (st.ok()) {
        options_.redo->Remove();
      } else {  // replayed (empty: its last transaction committed) by the next writer
        LOG_WARN("{}: cannot remove the redo journal's row at close: {}", description_, st.ToString());
      }
    }
  }

  // Commits each delayed transaction once it is due, unless a writer did
  // first, and calls on_lost_ after a loss.
  void CommitterLoop() {
    NameThisThread("ts-meta-commit");
    std::unique_lock lock(committer_mu_);
    for (;;) {
      committer_idle_ = true;
      committer_cv_.wait(lock, [&] { return stopping_ || lost_pending_ || due_ != Clock::time_point{}; });
      committer_idle_ = false;
      if (lost_pending_) {
        lost_pending_ = false;
        const std::function<void()> fn = on_lost_;
        calling_lost_ = true;
        lock.unlock();
        if (fn) fn();
        lock.lock();
        calling_lost_ = false;
        committer_cv_.notify_all();  // OnLostWrites may wait for it
        continue;
      }
      if (stopping_) return;
      const Clock::time_point due = due_;
      if (committer_cv_.wait_until(lock, due, [&] { return stopping_ || lost_pending_; })) continue;
      if (due_ == due) due_ = {};  // else a newer transaction is due later: the next round waits for it
      lock.unlock();
      {
        std::lock_guard writer(writer_mu_);
        if (delayed_ && Clock::now() - delayed_since_ >= options_.commit_delay) (void)CommitDelayed();  // reported
      }
      lock.lock();
    }
  }

  // Runs body(conn) between BEGIN and COMMIT, retrying the whole transaction
  // after a conflict (Failure::kRetry) or on a fresh connection after the old
  // one broke (Failure::kReconnect).
  template <typename Body>
  Status Transact(bool read_only, const Body& body) {
    std::unique_lock<std::mutex> writer(writer_mu_, std::defer_lock);
    if (!read_only && options_.serialize_writers) {
      writer.lock();
      // Its BEGIN would wait for the delayed transaction's write lock, which
      // only a holder of writer_mu_ can release.
      if constexpr (Conn::kSavepoints) RETURN_IF_ERROR(CommitDelayed());
    }
    Lease lease(this);
    RETURN_IF_ERROR(lease.Acquire());
    // Entered holding a connection, so that every transaction holding the
    // gate shared can finish and let an exclusive one in.
    GatePass pass(!read_only && options_.serialize_retries ? &gate_ : nullptr);
    for (int attempt = 1;; ++attempt) {
      if (attempt > 1) retries_->Inc();
      Conn& conn = lease.conn();
      conn.ClearFailure();
      bool committing = false;
      Status status = conn.Begin(read_only);
      if (status.ok()) status = body(conn);
      if (status.ok() && conn.failure() == Failure::kNone) {
        committing = true;
        status = conn.Commit();
      }
      const Failure failure = conn.failure();
      if (status.ok() && failure == Failure::kNone) return status;
      if (failure == Failure::kReconnect) {
        // The server rolls back what a lost connection had not committed, so
        // running fn again is safe, except when COMMIT itself was cut short:
        // then nobody knows whether it took effect.
        if (committing && !read_only) {
          return Status::Unknown(EIO, description_ +
                                          ": connection lost during COMMIT; the transaction may or may not have "
                                          "been applied: " +
                                          status.message());
        }
        RETURN_IF_ERROR(lease.Replace());
      } else {
        RETURN_IF_ERROR(conn.Rollback());
        if (failure == Failure::kNone) return status;  // fn's own error, or a hard database error
      }
      if (attempt >= options_.max_attempts) {
        return Status::Err(EBUSY, description_ + ": database still busy after " + std::to_string(attempt) +
                                      " attempts (locked by or conflicting with other transactions)" +
                                      (status.ok() ? "" : ": " + status.message()));
      }
      if (failure == Failure::kRetry) {
        Backoff(attempt);
        pass.MakeExclusive();
      }
    }
  }

  Status Acquire(std::unique_ptr<Conn>* conn) {
    {
      std::unique_lock lock(mu_);
      conn_freed_.wait(lock, [&] { return !idle_.empty() || open_conns_ < options_.max_connections; });
      if (!idle_.empty()) {
        *conn = std::move(idle_.back());
        idle_.pop_back();
        return Status::OK();
      }
      ++open_conns_;
    }
    return Open(conn);
  }

  // Opens a connection into a pool slot already counted in open_conns_; frees
  // the slot if that fails. A server that is restarting or briefly out of
  // reach is tried again under the one retry policy (about 15 s), like a
  // Redis server: a restart of the engine blocks operations, it does not
  // fail them.
  Status Open(std::unique_ptr<Conn>* conn) {
    const RetryPolicy policy{9, std::chrono::milliseconds(50), std::chrono::milliseconds(2000),
                             std::chrono::milliseconds(15000)};
    Result<std::unique_ptr<Conn>> opened = Retry(policy, description_ + ": connect", [&] { return Conn::Open(config_); });
    if (opened.ok()) {
      *conn = std::move(opened).value();
      return Status::OK();
    }
    std::lock_guard lock(mu_);
    --open_conns_;
    conn_freed_.notify_one();
    return opened.status();
  }

  void Release(std::unique_ptr<Conn> conn) {
    // A connection still inside a transaction (its rollback failed) or broken
    // is closed rather than handed to the next caller.
    if (!conn->Reusable()) conn.reset();
    std::lock_guard lock(mu_);
    if (conn) {
      idle_.push_back(std::move(conn));  // LIFO: reuses the warmest connection
    } else {
      --open_conns_;
    }
    conn_freed_.notify_one();
  }

  // Immutable.
  const Dialect& dialect_;
  const Config config_;
  const std::string description_;
  const PoolOptions options_;
  metrics::Counter* const retries_;
  metrics::Counter* const groups_;
  metrics::Counter* const grouped_;
  metrics::Counter* const lost_;

  // Held for the whole of each write transaction when serialize_writers.
  std::mutex writer_mu_;
  std::mutex group_mu_;
  std::vector<std::shared_ptr<Member>> group_queue_;  // guarded by group_mu_
  bool group_leading_ = false;                        // guarded by group_mu_: a group is being committed
  // Passed by write transactions when serialize_retries.
  ConflictGate gate_;

  // Commit delay: the open transaction (guarded by writer_mu_).
  std::unique_ptr<Conn> delayed_;
  size_t delayed_count_ = 0;            // transactions in it
  Clock::time_point delayed_since_;     // when it began
  std::atomic<bool> open_flag_{false};  // delayed_ != null
  std::atomic<uint64_t> lost_writes_{0};
  // The committer thread.
  std::mutex committer_mu_;
  std::condition_variable committer_cv_;
  Clock::time_point due_;          // guarded by committer_mu_: when the open transaction is due ({}: none)
  bool committer_idle_ = false;    // guarded by committer_mu_: waiting for a transaction to open
  bool lost_pending_ = false;      // guarded by committer_mu_: on_lost_ to be called
  bool calling_lost_ = false;      // guarded by committer_mu_: on_lost_ is being called
  bool stopping_ = false;          // guarded by committer_mu_
  std::function<void()> on_lost_;  // guarded by committer_mu_
  std::thread committer_;

  std::mutex mu_;
  std::condition_variable conn_freed_;       // signalled when idle_ or open_conns_ changes
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
  int open_conns_ = 0;                       // guarded by mu_; idle plus lent out
};

}  // namespace tessera::kv::sql
