// SQLite kv::Engine: the embedded default metadata engine.
//
// Schema: one table `kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID`;
// blobs compare bytewise, which is the kv::Engine key order. Statements, pool
// and transaction loop are shared with the postgres engine (sql_kv.h).
//
// Durability: WAL journal with synchronous=NORMAL, each commit's frames
// written in one system call (sqlite_batch_vfs.h). A committed transaction
// survives a crash of the process (it is in the WAL, in the OS page cache),
// and so does one answered under a commit delay (its redo record is);
// after an OS crash or power loss the last few committed transactions may be
// lost, but the database is never corrupt. fsync happens at WAL checkpoints.
//
// Concurrency: any number of threads, and any number of processes on the same
// host (WAL needs shared memory, so not on a network file system). Read-only
// transactions run in parallel on a pool of connections, each seeing a
// snapshot; write transactions take SQLite's single write lock at BEGIN
// (BEGIN IMMEDIATE), so they are serializable and never need a retry for a
// conflict, only when the lock is busy.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kv/kv.h"

namespace tessera::kv {

struct SqliteOptions {
  // Connections kept open; bounds how many transactions of this process run
  // at once (read-only ones in parallel, write ones one at a time).
  int max_connections = 8;
  // How long SQLite waits for a lock held by another process before a
  // statement fails with SQLITE_BUSY.
  int busy_timeout_ms = 5000;
  // Times a whole transaction is tried while it keeps failing with
  // SQLITE_BUSY/SQLITE_LOCKED; then Run returns EBUSY (transient).
  int max_attempts = 10;
  // The SQLite VFS to open the database with ("" = the default; tests use
  // a fault-injecting one, sqlite_fault_vfs.h).
  std::string vfs;
  // Group commit: concurrent write transactions of this process share one
  // SQLite transaction (each in a savepoint) and one commit (sql_kv.h).
  bool group_commit = true;
  // Commit delay (sql_kv.h, PoolOptions::commit_delay; 0: off, each write
  // transaction is committed before Run returns). With a delay, write
  // transactions that follow one another share one SQLite transaction,
  // committed within this time, on Engine::Flush/Sync or before a read.
  // Each one's changes are written to a redo journal before Run returns
  // (sqlite_redo.h), so a change Run returned from survives a crash of the
  // process as a committed one does: the next engine to open or write the
  // database replays it. Replaces group commit.
  std::chrono::microseconds commit_delay{0};
};

// Opens the database file at path (absolute, or relative to the working
// directory), creating it and the table if missing; the parent directory must
// exist. ENOENT/EACCES (with the path) when it cannot be opened.
Result<std::unique_ptr<Engine>> OpenSqlite(const std::string& path, const SqliteOptions& options = {});

}  // namespace tessera::kv
