#include "kv/postgres_kv.h"

#include <libpq-fe.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/url.h"
#include "kv/sql_kv.h"

namespace tessera::kv {
namespace {

using sql::Failure;
using sql::Rows;
using sql::Stmt;

// Parameter types of the prepared statements (pg_type OIDs), so that the
// server needs no guessing and parameters travel in binary.
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kByteaArrayOid = 1001;
struct StmtParams {
  int count;
  Oid types[3];
};
constexpr StmtParams kParams[sql::kNumStmts] = {
    {0, {}},                                // kBeginRead
    {0, {}},                                // kBeginWrite
    {0, {}},                                // kCommit
    {0, {}},                                // kRollback
    {1, {kByteaOid}},                       // kGet
    {2, {kByteaOid, kByteaOid}},            // kPut
    {2, {kByteaArrayOid, kByteaArrayOid}},  // kPutMany
    {1, {kByteaOid}},                       // kDelete
    {3, {kByteaOid, kByteaOid, kInt8Oid}},  // kScanRange
    {2, {kByteaOid, kInt8Oid}},             // kScanFrom
    {0, {}},                                // kDeleteAll
    {1, {kByteaOid}},                       // kNotify
};
constexpr const char* kStmtNames[sql::kNumStmts] = {
    "tessera_begin_read", "tessera_begin_write", "tessera_commit",     "tessera_rollback",  "tessera_get",
    "tessera_put",        "tessera_put_many",    "tessera_delete",      "tessera_scan_range", "tessera_scan_from", "tessera_delete_all", "tessera_notify",
};
// Every parameter and every result column is binary: bytea as raw bytes,
// int8 as 8 big-endian bytes.
constexpr int kBinary[3] = {1, 1, 1};
constexpr int kBinaryResults = 1;

struct PgResultFree {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, PgResultFree>;

bool Succeeded(const PGresult* result) {
  const ExecStatusType status = PQresultStatus(result);  // PGRES_FATAL_ERROR for null
  return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
}

int ErrnoFor(const char* sqlstate, bool connection_ok) {
  if (!connection_ok || sqlstate == nullptr) return EIO;
  const std::string_view state(sqlstate);
  // serialization_failure, deadlock_detected (after the last attempt)
  if (state == "40001" || state == "40P01") return EBUSY;
  if (state == "53100") return ENOSPC;  // disk_full
  if (state == "53200") return ENOMEM;  // out_of_memory
  if (state == "53300") return EAGAIN;  // too_many_connections
  // read_only_sql_transaction (e.g. a hot standby)
  if (state == "25006") return EROFS;
  // insufficient_privilege, invalid_authorization_specification class
  if (state == "42501" || state.substr(0, 2) == "28") return EACCES;
  if (state == "57014") return ETIMEDOUT;  // query_canceled (statement_timeout)
  return EIO;
}

// A libpq message on one line, with the secrets replaced by "****".
std::string CleanMessage(std::string_view text, const std::vector<std::string>& secrets) {
  std::string msg(text);
  for (char& c : msg) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  for (const std::string& secret : secrets) {
    if (secret.empty()) continue;
    for (size_t pos = 0; (pos = msg.find(secret, pos)) != std::string::npos; pos += 4)
      msg.replace(pos, secret.size(), "****");
  }
  return msg;
}

// Notices ("relation kv already exists, skipping") would go to stderr.
void IgnoreNotice(void*, const char*) {}

// A pointer libpq reads as a (possibly empty) bytea; a null one would be SQL
// NULL.
const char* Bytes(std::string_view s) { return s.empty() ? "" : s.data(); }

// One libpq connection with the dialect's statements prepared: the driver of
// the shared SQL engine (sql_kv.h). Not thread-safe: the engine's pool lends
// it to one thread at a time.
//
// BEGIN costs no round trip of its own: it is sent in one pipeline with the
// transaction's first statement, and a transaction that ran no statement
// sends neither BEGIN nor COMMIT.
class PgConn {
 public:
  struct Config {
    std::string url;
    // Connection parameters given before the URL, whose own override them.
    std::vector<std::pair<std::string, std::string>> defaults;
    std::string description;           // "postgres 'URL-without-password'"
    std::vector<std::string> secrets;  // never printed
  };

  // A new connection (the caller PQfinish-es it).
  static Result<PGconn*> Dial(const Config& config) {
    std::vector<const char*> keys, values;
    for (const auto& [key, value] : config.defaults) {
      keys.push_back(key.c_str());
      values.push_back(value.c_str());
    }
    keys.push_back("dbname");  // expanded: the URL's parameters
    values.push_back(config.url.c_str());
    keys.push_back(nullptr);
    values.push_back(nullptr);
    PGconn* pg = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
    if (pg == nullptr) return Status::Err(ENOMEM, config.description + ": connect: out of memory");
    if (PQstatus(pg) != CONNECTION_OK) {
      // A server that is down, restarting or out of reach may answer the
      // next try (transient); a refusal (password, database) will not.
      const std::string why = CleanMessage(PQerrorMessage(pg), config.secrets);
      PQfinish(pg);
      const bool unreachable = why.find("Connection refused") != std::string::npos ||
                               why.find("timeout expired") != std::string::npos ||
                               why.find("No route to host") != std::string::npos ||
                               why.find("Network is unreachable") != std::string::npos ||
                               why.find("server closed the connection") != std::string::npos ||
                               why.find("starting up") != std::string::npos ||
                               why.find("shutting down") != std::string::npos;
      return Status::Err(unreachable ? ECONNREFUSED : EIO, config.description + ": cannot connect: " + why);
    }
    PQsetNoticeProcessor(pg, IgnoreNotice, nullptr);
    return pg;
  }

  // create_table: create the table if it does not exist yet (the first
  // connection of an engine).
  static Result<std::unique_ptr<PgConn>> Open(const Config& config, bool create_table = false) {
    std::unique_ptr<PgConn> conn(new PgConn(config));
    ASSIGN_OR_RETURN(conn->pg_, Dial(config));
    PQsetNoticeProcessor(conn->pg_, IgnoreNotice, nullptr);
    if (create_table) RETURN_IF_ERROR(conn->CreateTable());
    for (int i = 0; i < sql::kNumStmts; ++i) {
      const std::string text = sql::StatementText(sql::kPostgresDialect, static_cast<Stmt>(i));
      PgResult result(PQprepare(conn->pg_, kStmtNames[i], text.c_str(), kParams[i].count, kParams[i].types));
      if (!Succeeded(result.get())) return conn->Error(result.get(), "prepare " + text);
    }
    return conn;
  }

  ~PgConn() { PQfinish(pg_); }  // the server rolls back an open transaction
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  Status Begin(bool read_only) {
    notes_.clear();
    begin_ = read_only ? sql::kBeginRead : sql::kBeginWrite;
    return Status::OK();
  }

  Status Commit() {
    if (begin_) {  // nothing ran, nothing to commit
      begin_.reset();
      return Status::OK();
    }
    // pg_notify queues the payload until COMMIT: listeners get it if, and
    // when, the transaction commits.
    for (const std::string& note : notes_) {
      const char* values[] = {Bytes(note)};
      const int lengths[] = {static_cast<int>(note.size())};
      RETURN_IF_ERROR(Exec(sql::kNotify, 1, values, lengths, "notify").status());
    }
    notes_.clear();
    ASSIGN_OR_RETURN(PgResult result, Exec(sql::kCommit, 0, nullptr, nullptr, "commit"));
    // COMMIT of a transaction that an error aborted succeeds and rolls back.
    // That error was returned to fn, which ignored it.
    if (std::strcmp(PQcmdStatus(result.get()), "COMMIT") != 0) {
      return Status::Err(EIO, config_.description + ": commit: the transaction was rolled back by an earlier error");
    }
    return Status::OK();
  }

  Status Rollback() {
    notes_.clear();
    if (begin_) {
      begin_.reset();
      return Status::OK();
    }
    // A lost connection took its transaction with it; a broken one is closed
    // (which rolls back) rather than reused.
    if (broken_ || PQstatus(pg_) != CONNECTION_OK || PQtransactionStatus(pg_) == PQTRANS_IDLE) return Status::OK();
    return Exec(sql::kRollback, 0, nullptr, nullptr, "rollback").status();
  }

  static constexpr bool kSavepoints = false;  // no group commit (sql_kv.h)
  static constexpr bool kRedo = false;        // no commit delay

  bool Reusable() const {
    return !broken_ && !begin_ && PQstatus(pg_) == CONNECTION_OK && PQtransactionStatus(pg_) == PQTRANS_IDLE;
  }

  // The worst failure since ClearFailure(): kReconnect after the connection
  // broke, kRetry after a serialization failure or deadlock. Recorded here so
  // that the transaction is retried even if fn swallowed the error.
  Failure failure() const { return failure_; }
  void ClearFailure() { failure_ = Failure::kNone; }

  Result<std::string> Get(std::string_view key) {
    const char* values[] = {Bytes(key)};
    const int lengths[] = {static_cast<int>(key.size())};
    ASSIGN_OR_RETURN(PgResult result, Exec(sql::kGet, 1, values, lengths, "get"));
    if (PQntuples(result.get()) == 0) return Status::Err(ENOENT);
    return std::string(PQgetvalue(result.get(), 0, 0), PQgetlength(result.get(), 0, 0));
  }

  Status Put(std::string_view key, std::string_view value) {
    const char* values[] = {Bytes(key), Bytes(value)};
    const int lengths[] = {static_cast<int>(key.size()), static_cast<int>(value.size())};
    return Exec(sql::kPut, 2, values, lengths, "put").status();
  }

  // Up to 1,000 rows per statement, keys and values as binary bytea arrays.
  Status PutMany(const Txn::KeyValues& kvs) {
    constexpr size_t kRows = 1000;
    for (size_t from = 0; from < kvs.size(); from += kRows) {
      const size_t to = std::min(kvs.size(), from + kRows);
      std::string keys = ArrayHeader(to - from), values = keys;
      for (size_t i = from; i < to; ++i) {
        AppendElement(&keys, kvs[i].first);
        AppendElement(&values, kvs[i].second);
      }
      const char* params[] = {keys.data(), values.data()};
      const int lengths[] = {static_cast<int>(keys.size()), static_cast<int>(values.size())};
      RETURN_IF_ERROR(Exec(sql::kPutMany, 2, params, lengths, "put many").status());
    }
    return Status::OK();
  }

  Status Delete(std::string_view key) {
    const char* values[] = {Bytes(key)};
    const int lengths[] = {static_cast<int>(key.size())};
    return Exec(sql::kDelete, 1, values, lengths, "delete").status();
  }

  Status DeleteAll() { return Exec(sql::kDeleteAll, 0, nullptr, nullptr, "delete all").status(); }
  // Sent at COMMIT.
  Status Notify(std::string_view payload) {
    notes_.emplace_back(payload);
    return Status::OK();
  }
  static Result<std::unique_ptr<Listener>> Listen(const Config& config, Engine::NotifyFn fn);
  // A COMMIT returns once the server has flushed it (synchronous_commit).
  static Status Sync(const Config&) { return Status::OK(); }

  // Appends to *rows at most limit rows with keys in [from, end) (end empty:
  // no upper bound), in key order.
  Status ScanBatch(std::string_view from, std::string_view end, int64_t limit, Rows* rows) {
    char limit_be[8];
    for (int i = 0; i < 8; ++i) limit_be[i] = static_cast<char>(static_cast<uint64_t>(limit) >> (56 - 8 * i));
    const char* values[3];
    int lengths[3];
    int n = 0;
    values[n] = Bytes(from);
    lengths[n++] = static_cast<int>(from.size());
    if (!end.empty()) {
      values[n] = end.data();
      lengths[n++] = static_cast<int>(end.size());
    }
    values[n] = limit_be;
    lengths[n++] = sizeof(limit_be);
    ASSIGN_OR_RETURN(PgResult result, Exec(end.empty() ? sql::kScanFrom : sql::kScanRange, n, values, lengths, "scan"));
    const int count = PQntuples(result.get());
    for (int row = 0; row < count; ++row) {
      rows->emplace_back(std::string(PQgetvalue(result.get(), row, 0), PQgetlength(result.get(), row, 0)),
                         std::string(PQgetvalue(result.get(), row, 1), PQgetlength(result.get(), row, 1)));
    }
    return Status::OK();
  }

 private:
  explicit PgConn(const Config& config) : config_(config) {}

  // The binary form of a one-dimensional bytea[] (array_send): ndim, has
  // nulls, element type, then the dimension's length and lower bound, then
  // each element as a length and its bytes; all integers 4 bytes big-endian.
  static void AppendBE32(std::string* s, uint32_t v) {
    for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
  }
  static std::string ArrayHeader(size_t n) {
    std::string s;
    for (uint32_t v : {1u, 0u, uint32_t(kByteaOid), uint32_t(n), 1u}) AppendBE32(&s, v);
    return s;
  }
  static void AppendElement(std::string* s, const std::string& e) {
    AppendBE32(s, uint32_t(e.size()));
    s->append(e);
  }

  // Runs a prepared statement; the first one of a transaction goes in one
  // pipeline after the pending BEGIN.
  Result<PgResult> Exec(Stmt stmt, int n, const char* const* values, const int* lengths, std::string_view what) {
    if (begin_) {
      const Stmt begin = *begin_;
      begin_.reset();
      return ExecAfterBegin(begin, stmt, n, values, lengths, what);
    }
    PgResult result(PQexecPrepared(pg_, kStmtNames[stmt], n, values, lengths, kBinary, kBinaryResults));
    if (!Succeeded(result.get())) return Error(result.get(), what);
    return result;
  }

  Result<PgResult> ExecAfterBegin(Stmt begin, Stmt stmt, int n, const char* const* values, const int* lengths,
                                  std::string_view what) {
    const bool sent = PQenterPipelineMode(pg_) == 1 &&
                      PQsendQueryPrepared(pg_, kStmtNames[begin], 0, nullptr, nullptr, nullptr, kBinaryResults) == 1 &&
                      PQsendQueryPrepared(pg_, kStmtNames[stmt], n, values, lengths, kBinary, kBinaryResults) == 1 &&
                      PQpipelineSync(pg_) == 1;
    PgResult begin_result, stmt_result;
    bool synced = false;
    if (sent) {
      begin_result = NextPipelineResult();
      stmt_result = NextPipelineResult();
      const PgResult sync = NextPipelineResult();
      synced = sync && PQresultStatus(sync.get()) == PGRES_PIPELINE_SYNC;
    }
    if (!synced || PQexitPipelineMode(pg_) != 1) {
      // Only a broken connection should get here; in any case its state is
      // unknown, so it is replaced (nothing was committed).
      broken_ = true;
      return Error(stmt_result ? stmt_result.get() : begin_result.get(), what);
    }
    if (!Succeeded(begin_result.get())) return Error(begin_result.get(), "begin");
    if (!Succeeded(stmt_result.get())) return Error(stmt_result.get(), what);
    return stmt_result;
  }

  // The next query's result in pipeline mode (null when none comes, e.g. the
  // connection broke), having read the null that ends it.
  PgResult NextPipelineResult() {
    PgResult result(PQgetResult(pg_));
    if (result && PQresultStatus(result.get()) != PGRES_PIPELINE_SYNC) {
      for (int extra = 0; extra < 8; ++extra) {
        PgResult more(PQgetResult(pg_));
        if (!more) break;
      }
    }
    return result;
  }

  // Without CREATE privilege on the schema, CREATE TABLE IF NOT EXISTS fails
  // even when the table exists, so look first. Clients racing to create it
  // may see a unique violation on the catalog (23505), or find the table
  // (42P07) or its row type (42710, "type kv already exists") created under
  // them: then look again.
  Status CreateTable() {
    for (int attempt = 1;; ++attempt) {
      PgResult exists(PQexec(pg_, "SELECT to_regclass('kv') IS NOT NULL"));
      if (!Succeeded(exists.get())) return Error(exists.get(), "look for table kv");
      if (PQntuples(exists.get()) == 1 && PQgetvalue(exists.get(), 0, 0)[0] == 't') return Status::OK();
      PgResult created(PQexec(pg_, sql::kPostgresDialect.create_table));
      if (Succeeded(created.get())) return Status::OK();
      const char* sqlstate = PQresultErrorField(created.get(), PG_DIAG_SQLSTATE);
      const bool raced =
          sqlstate != nullptr && (std::strcmp(sqlstate, "23505") == 0 || std::strcmp(sqlstate, "42P07") == 0 ||
                                std::strcmp(sqlstate, "42710") == 0);
      if (!raced || attempt >= 3) return Error(created.get(), "create table kv");
    }
  }

  // Records the failure the error means and returns it as a Status.
  Status Error(const PGresult* result, std::string_view what) {
    const char* sqlstate = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
    const bool connection_ok = !broken_ && PQstatus(pg_) == CONNECTION_OK;
    const Failure failure = sql::ClassifyPostgres(sqlstate, connection_ok);
    if (failure == Failure::kReconnect || (failure == Failure::kRetry && failure_ == Failure::kNone)) {
      failure_ = failure;
    }
    const char* primary = result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
    std::string msg = config_.description + ": " + std::string(what) + ": " +
                      CleanMessage(primary != nullptr ? primary : PQerrorMessage(pg_), config_.secrets);
    if (sqlstate != nullptr) msg += std::string(" (SQLSTATE ") + sqlstate + ")";
    return Status::Err(ErrnoFor(sqlstate, connection_ok), std::move(msg));
  }

  const Config config_;
  PGconn* pg_ = nullptr;
  std::optional<Stmt> begin_;  // BEGIN to send before the next statement
  std::vector<std::string> notes_;  // Notify payloads, sent at COMMIT
  bool broken_ = false;
  Failure failure_ = Failure::kNone;
};

bool HasPostgresScheme(const std::string& url) {
  return url.rfind("postgres://", 0) == 0 || url.rfind("postgresql://", 0) == 0;
}


// LISTEN on a connection of its own; a broken connection is reported as
// lost payloads and dialled again every second until it works.
class PgListener final : public Listener {
 public:
  PgListener(PgConn::Config config, Engine::NotifyFn fn, PGconn* pg)
      : config_(std::move(config)), fn_(std::move(fn)), pg_(pg), thread_([this] { Loop(); }) {}
  ~PgListener() override {
    stop_ = true;
    thread_.join();
    if (pg_ != nullptr) PQfinish(pg_);
  }
  PgListener(const PgListener&) = delete;
  PgListener& operator=(const PgListener&) = delete;

  // LISTEN on the channel of the schema the kv table is in (see the
  // dialect's notify statement).
  static Status Subscribe(PGconn* pg, const std::string& description) {
    // Named for pg_stat_activity (and the tests that cut it).
    PgResult named(PQexec(pg, "SET application_name = 'tessera-listen'"));
    PgResult schema(PQexec(pg, "SELECT current_schema()"));
    if (!Succeeded(schema.get()) || PQntuples(schema.get()) != 1 || PQgetisnull(schema.get(), 0, 0)) {
      return Status::Err(EIO, description + ": LISTEN: no current schema: " + std::string(PQerrorMessage(pg)));
    }
    const std::string name = "tessera_kv_" + std::string(PQgetvalue(schema.get(), 0, 0));
    char* channel = PQescapeIdentifier(pg, name.c_str(), name.size());
    if (channel == nullptr) return Status::Err(EIO, description + ": LISTEN: " + std::string(PQerrorMessage(pg)));
    PgResult result(PQexec(pg, ("LISTEN " + std::string(channel)).c_str()));
    PQfreemem(channel);
    if (Succeeded(result.get())) return Status::OK();
    return Status::Err(EIO, description + ": LISTEN: " + std::string(PQerrorMessage(pg)));
  }

 private:
  void Loop() {
    bool failing = false;
    while (!stop_) {
      if (pg_ == nullptr) {
        Result<PGconn*> pg = PgConn::Dial(config_);
        Status st = pg.ok() ? Subscribe(*pg, config_.description) : pg.status();
        if (!st.ok()) {
          if (pg.ok()) PQfinish(*pg);
          if (!failing) LOG_WARN("listening for other clients' changes: {} (caches dropped until it works)", st.ToString());
          failing = true;
          fn_({}, true);
          for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        pg_ = *pg;
        LOG_INFO("listening for other clients' changes again");
        failing = false;
        fn_({}, true);  // what changed while nobody listened
      }
      // A ping every second; a server silent for kSilentMs is gone.
      const auto now = std::chrono::steady_clock::now();
      bool broken = false;
      if (!pinging_ && now - pinged_ >= std::chrono::seconds(1)) {
        broken = PQsendQuery(pg_, "SELECT 1") != 1;
        pinging_ = true;
        pinged_ = now;
      }
      if (pinging_ && now - pinged_ > std::chrono::milliseconds(kSilentMs)) broken = true;
      pollfd pfd{PQsocket(pg_), POLLIN, 0};
      const int ready = broken ? 0 : ::poll(&pfd, 1, 100);
      if (ready != 0 && (PQconsumeInput(pg_) != 1 || PQstatus(pg_) != CONNECTION_OK)) broken = true;
      while (!broken && pinging_ && PQisBusy(pg_) == 0) {
        PgResult result(PQgetResult(pg_));
        if (!result) pinging_ = false;  // the ping's results are all in
      }
      if (broken) {
        LOG_WARN("{}: listening for other clients' changes broke ({}); caches dropped, listening again",
                 config_.description, CleanMessage(PQerrorMessage(pg_), config_.secrets));
        PQfinish(pg_);
        pg_ = nullptr;
        pinging_ = false;
        fn_({}, true);
        continue;
      }
      std::vector<std::string> payloads;
      while (PGnotify* note = PQnotifies(pg_)) {
        payloads.push_back(Unhex(note->extra));
        PQfreemem(note);
      }
      if (!payloads.empty()) fn_(payloads, false);
    }
  }

  static std::string Unhex(std::string_view hex) {
    auto digit = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
    std::string out(hex.size() / 2, '\0');
    for (size_t i = 0; i < out.size(); ++i) out[i] = char(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
    return out;
  }

  static constexpr int kSilentMs = 10000;
  const PgConn::Config config_;
  const Engine::NotifyFn fn_;
  PGconn* pg_;  // only the thread uses it once started
  bool pinging_ = false;  // the thread's: a ping is unanswered
  std::chrono::steady_clock::time_point pinged_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: started after everything above
};

Result<std::unique_ptr<Listener>> PgConn::Listen(const Config& config, Engine::NotifyFn fn) {
  ASSIGN_OR_RETURN(PGconn* pg, Dial(config));
  if (Status st = PgListener::Subscribe(pg, config.description); !st.ok()) {
    PQfinish(pg);
    return st;
  }
  return std::unique_ptr<Listener>(std::make_unique<PgListener>(config, std::move(fn), pg));
}

}  // namespace

Result<std::unique_ptr<Engine>> OpenPostgres(const std::string& url, const PostgresOptions& options) {
  PgConn::Config config;
  config.url = url;
  config.description = "postgres '" + RedactUrl(url) + "'";
  // As written in the URL: libpq quotes the URI, or the password token, in
  // some messages.
  for (std::string& p : UrlPasswords(url)) config.secrets.push_back(std::move(p));
  if (options.max_connections < 1 || options.max_attempts < 1 || options.connect_timeout_s < 1) {
    return Status::Err(EINVAL,
                       config.description + ": max_connections, max_attempts and connect_timeout_s must be >= 1");
  }
  if (!HasPostgresScheme(url)) {
    return Status::Err(EINVAL, config.description + ": expected postgres://[USER[:PASSWORD]@][HOST][:PORT]/DB");
  }
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string msg = parse_error != nullptr ? CleanMessage(parse_error, config.secrets) : "out of memory";
    PQfreemem(parse_error);
    return Status::Err(EINVAL, config.description + ": malformed URL: " + msg);
  }
  for (const PQconninfoOption* option = parsed; option->keyword != nullptr; ++option) {
    if (option->val != nullptr && std::strcmp(option->keyword, "password") == 0) {
      config.secrets.emplace_back(option->val);
    }
  }
  PQconninfoFree(parsed);
  // Defaults the URL may override. Fail fast when the server is unreachable,
  // rather than after the TCP connect timeout (minutes); notice a server that
  // vanished (network partition, host crash) within about a minute rather
  // than hanging for hours in a read (keepalives probe idle connections,
  // tcp_user_timeout bounds unacknowledged sends).
  config.defaults = {
      {"connect_timeout", std::to_string(options.connect_timeout_s)},
      {"keepalives_idle", "30"},
      {"keepalives_interval", "10"},
      {"keepalives_count", "3"},
      {"tcp_user_timeout", "60000"},
      {"fallback_application_name", "tessera"},
  };

  // At startup an unreachable server is the answer (EIO, at once): a mount
  // against a wrong address must not hang in retries.
  auto opened = PgConn::Open(config, /*create_table=*/true);
  if (!opened.ok())
    return opened.status().transient() ? Status::Err(EIO, opened.status().message()) : opened.status();
  std::unique_ptr<PgConn> first = std::move(opened).value();
  sql::PoolOptions pool;
  pool.max_connections = options.max_connections;
  pool.max_attempts = options.max_attempts;
  pool.serialize_retries = true;
  std::string description = config.description;
  return std::unique_ptr<Engine>(std::make_unique<sql::SqlEngine<PgConn>>(
      sql::kPostgresDialect, std::move(config), std::move(description), pool, std::move(first)));
}

}  // namespace tessera::kv
