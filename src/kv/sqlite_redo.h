// The redo journal of a SQLite engine with a commit delay: what makes a
// change answered before its COMMIT survive a crash of the process.
//
// With a commit delay (sql_kv.h, PoolOptions::commit_delay) write
// transactions share one SQLite transaction, committed up to the delay
// later; a crash of the process in between would roll back changes that
// were already answered. So each write transaction, before it returns,
// appends what it wrote (its puts, deletes and notifications: a physical
// redo record) to a journal file of its engine with one write(2), which
// puts it in the OS page cache, as SQLite's own commit does with WAL frames
// (synchronous=NORMAL; neither is synced before answering).
//
// Which records are not yet in the database: each engine's journal has a
// row in the table `kvredo (id, gen)`. Records carry the generation `gen`
// in force when they were written and a sequence number; the commit of the
// shared transaction sets the row to gen + 1 in the same transaction, and
// the next records are written from the file's start again, over the old
// ones (no truncate: on ext4 one per commit cost more than the journal's
// writes). So after a crash the file's first records, as long as their gen
// equals the row's and their numbers follow one another, are exactly the
// answered changes the crash rolled back, in the order they were made.
//
// Who replays them: the next write transaction of any engine on the
// database (of any process), right after its BEGIN IMMEDIATE, before
// anything else writes (sqlite_kv.cc, Begin). Holding the write lock, it
// finds each journal whose owner is gone (the owner holds an exclusive
// flock on its file for its life, released by the kernel when it dies),
// applies the records of the current generation, deletes the row, and
// removes the file once that transaction committed. An engine that opens
// does one such transaction at once, so a remount or any CLI command
// replays what a crashed client left, and so does a change-log listener
// (a mount with coherent caches) at its next poll, within 50 ms. The owner held SQLite's write lock
// from the first record of the lost transaction until it died, so nothing
// else was committed in between: replaying the records onto the database
// gives exactly the state its callers were answered.
//
// File: <database>-redo-<id>. Records (little-endian):
//   0  magic u32 'TRDO'   4 body length u32   8 gen u64   16 seq u64
//   24 XXH64 u64 of bytes 8..23 and the body (seed 0)   32 body:
//   ops, each: kind u8 ('P' put, 'D' delete, 'N' notify), key length u32,
//   key, value length u32, value (a notification's payload is its value).
// A record cut short by the crash (its write never returned, so its caller
// was never answered) fails its length or checksum: reading stops there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::kv {

struct RedoOp {
  char kind;  // 'P', 'D' or 'N'
  std::string key;
  std::string value;
};

// Appends one op's encoding to *body.
void AppendRedoOp(char kind, std::string_view key, std::string_view value, std::string* body);

// The journal file of a database's engine with id.
std::string RedoPath(const std::string& db_path, std::string_view id);

// This engine's journal. Not thread-safe: its engine calls it under its
// writer mutex.
class RedoJournal {
 public:
  // Creates a journal with a new id beside the database, locked for this
  // process's life.
  static Result<std::unique_ptr<RedoJournal>> Create(const std::string& db_path);
  ~RedoJournal();
  RedoJournal(const RedoJournal&) = delete;
  RedoJournal& operator=(const RedoJournal&) = delete;

  const std::string& id() const { return id_; }
  // The generation of the records written now (the row's committed value).
  uint64_t gen() const { return gen_; }

  // Writes one write transaction's record after the last (one pwrite(2)).
  // On failure nothing of the record counts.
  Status Append(std::string_view body);
  // Takes back the last Append (its transaction was rolled back after all).
  Status Undo();
  // The shared transaction committed with the row set to gen() + 1: its
  // records are in the database. The next generation starts, written from
  // the file's start (no I/O).
  void Committed();
  // The shared transaction is being rolled back: its records must never
  // be replayed (one write, before the rollback lets others write).
  Status Discard();
  // The engine closes and its row is gone: removes the file.
  void Remove();

 private:
  RedoJournal(std::string path, std::string id, int fd) : path_(std::move(path)), id_(std::move(id)), fd_(fd) {}
  Status Invalidate(uint64_t offset);

  const std::string path_;
  const std::string id_;
  int fd_;
  uint64_t gen_ = 1;
  uint64_t seq_ = 1;       // the next record's
  uint64_t end_ = 0;       // where the next record goes
  uint64_t last_end_ = 0;  // before the last Append
};

// Reads the journal at path for replay, if its owner is gone. Returns
// false when its owner still holds it (alive: nothing to replay) or it does
// not exist; true with *ops the ops of the records of generation gen, in
// order, otherwise.
Result<bool> ReadOrphanedRedo(const std::string& path, uint64_t gen, std::vector<RedoOp>* ops);

// Whether the journal at path has no live owner (or no file).
bool RedoOwnerGone(const std::string& path);

// Removes the journal files beside the database that no live engine holds
// and no row of ids names (left by a crash after their replay, or before
// their row was written).
void RemoveStaleRedoFiles(const std::string& db_path, const std::vector<std::string>& ids);

}  // namespace tessera::kv
