#include "kv/sql_kv.h"

#include <sqlite3.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace tessera::kv::sql {
namespace {

// The statements, shared by every dialect; null entries come from the
// dialect. Parameters are ?N (rewritten to the dialect's placeholder).
// The upsert syntax is standard in PostgreSQL and SQLite >= 3.24.
constexpr const char* kSharedSql[kNumStmts] = {
    nullptr,  // kBeginRead
    nullptr,  // kBeginWrite
    "COMMIT",
    "ROLLBACK",
    "SELECT v FROM kv WHERE k = ?1",
    "INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
    nullptr,  // kPutMany
    "DELETE FROM kv WHERE k = ?1",
    "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT ?3",
    "SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2",
    "DELETE FROM kv",
    nullptr,  // kNotify
};

}  // namespace

// BLOBs compare with memcmp, so the primary key orders bytewise. A write
// transaction takes the database's single write lock at BEGIN, so write
// transactions are serial; a read-only one reads a WAL snapshot.
const Dialect kSqliteDialect = {
    .name = "sqlite3",
    .remote = false,
    .create_table = "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
    .placeholder = '?',
    .begin_read = "BEGIN",
    .begin_write = "BEGIN IMMEDIATE",
    .put_many = nullptr,
    .notify = "INSERT INTO kvlog (at, p) VALUES (?1, ?2)",
};

// bytea compares with memcmp (then length), whatever the collation, so the
// primary key orders bytewise. SERIALIZABLE (SSI) for both kinds of
// transaction: see docs/format.md, "The postgres engine".
const Dialect kPostgresDialect = {
    .name = "postgres",
    .remote = true,
    .create_table = "CREATE TABLE IF NOT EXISTS kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL)",
    .placeholder = '$',
    .begin_read = "BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY",
    .begin_write = "BEGIN ISOLATION LEVEL SERIALIZABLE",
    .put_many = "INSERT INTO kv (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) "
                "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
    // NOTIFY payloads are text in the server's encoding: hex keeps any byte.
    // One channel per schema: volumes in other schemas of the database
    // (each has its own kv table) are not told.
    .notify = "SELECT pg_notify('tessera_kv_' || current_schema(), encode($1::bytea, 'hex'))",
};

std::string StatementText(const Dialect& d, Stmt s) {
  switch (s) {
    case kBeginRead:
      return d.begin_read;
    case kBeginWrite:
      return d.begin_write;
    case kPutMany:  // a single upsert where the dialect has no bulk form
      return d.put_many != nullptr ? d.put_many : StatementText(d, kPut);
    case kNotify:
      return d.notify;
    default:
      break;
  }
  std::string text = kSharedSql[s];
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '?' && text[i + 1] >= '1' && text[i + 1] <= '9') text[i] = d.placeholder;
  }
  return text;
}

Failure ClassifySqlite(int rc) {
  rc &= 0xff;
  return rc == SQLITE_BUSY || rc == SQLITE_LOCKED ? Failure::kRetry : Failure::kNone;
}

Failure ClassifyPostgres(const char* sqlstate, bool connection_ok) {
  if (!connection_ok) return Failure::kReconnect;
  if (sqlstate != nullptr && (std::strcmp(sqlstate, "40001") == 0 || std::strcmp(sqlstate, "40P01") == 0)) {
    return Failure::kRetry;
  }
  return Failure::kNone;
}

void Backoff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int cap_us = 1000 << std::min(attempt, 6);
  std::uniform_int_distribution<int> dist(cap_us / 2, cap_us);
  std::this_thread::sleep_for(std::chrono::microseconds(dist(rng)));
}

}  // namespace tessera::kv::sql
