// PostgreSQL kv::Engine: metadata in a PostgreSQL server, shared by clients
// on any number of hosts. The same table and statements as the sqlite3
// engine (sql_kv.h), over libpq.
//
// Schema: one table `kv (k BYTEA PRIMARY KEY, v BYTEA NOT NULL)`, created if
// missing, in the first schema of the connection's search_path; bytea
// compares bytewise, which is the kv::Engine key order.
//
// Transactions: every Run is one SERIALIZABLE transaction (READ ONLY for
// read-only ones), retried with backoff on serialization failures (SQLSTATE
// 40001) and deadlocks (40P01); see docs/format.md for why SERIALIZABLE.
//
// Connections: a bounded pool, one connection per concurrent transaction,
// each with every statement prepared once. A connection found broken (server
// restart, network) is replaced and the transaction run again, except when
// the break cut a write transaction's COMMIT short: then Run returns EIO,
// because whether it committed is unknown. An unreachable server gives EIO
// after at most connect_timeout_s.
//
// Durability is the server's (synchronous_commit etc.).
#pragma once

#include <memory>
#include <string>

#include "kv/kv.h"

namespace tessera::kv {

struct PostgresOptions {
  // Connections kept open; bounds how many transactions of this engine run at
  // once.
  int max_connections = 8;
  // Times a whole transaction is tried while it keeps failing with a
  // serialization failure or deadlock; then Run returns EBUSY (transient).
  // SERIALIZABLE transactions conflict more often than SQLite's, hence more
  // attempts than SqliteOptions.
  int max_attempts = 50;
  // Seconds to wait for a connection to be established, unless the URL sets
  // connect_timeout itself.
  int connect_timeout_s = 5;
};

// Opens the database named by a libpq URI: postgres://[user[:password]@]
// [host][:port][/dbname][?param=value&...] (or postgresql://...), e.g.
// postgres://tessera:secret@db.example:5432/tessera, or over a Unix socket
// postgres://tessera@/tessera?host=/var/run/postgresql. Any libpq connection
// parameter may be given in the query (sslmode, options=-csearch_path%3Dvol1,
// ...); a missing password comes from PGPASSWORD or ~/.pgpass as usual.
// Creates the table if missing. The password never appears in Name() or in
// error messages. EINVAL for a malformed URI, EIO when the server cannot be
// reached or refuses the connection.
Result<std::unique_ptr<Engine>> OpenPostgres(const std::string& url, const PostgresOptions& options = {});

}  // namespace tessera::kv
