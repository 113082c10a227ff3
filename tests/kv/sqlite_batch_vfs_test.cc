// The SQLite engine's batching VFS (kv/sqlite_batch_vfs.h): one write per
// commit, and nothing else changes — other connections see each commit at
// once, a commit survives the process dying right after it, a rolled-back
// transaction that spilled pages leaves nothing, and a failed write fails
// the commit it belongs to.
#include "kv/sqlite_batch_vfs.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "common/fault_env.h"
#include "kv/sqlite_fault_vfs.h"
#include "kv/sqlite_kv.h"
#include "sqlite_test_util.h"

namespace tessera::kv {
namespace {

using testing::MustOpen;
using testing::TempDir;

// This process's write system calls and the bytes they passed
// (/proc/self/io: syscw, wchar).
struct WriteCalls {
  uint64_t calls = 0, bytes = 0;
};
WriteCalls ProcessWrites() {
  std::ifstream in("/proc/self/io");
  WriteCalls w;
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == "syscw:") w.calls = value;
    if (name == "wchar:") w.bytes = value;
  }
  return w;
}

std::string Key(char prefix, int i) { return std::string(1, prefix) + std::to_string(100000 + i); }

// Five key ranges far apart in the table: a transaction that changes one key
// in each changes five pages.
Status FillRanges(Engine& engine) {
  return engine.Run([](Txn& txn) {
    for (char prefix : std::string("abcde")) {
      for (int i = 0; i < 400; ++i) RETURN_IF_ERROR(txn.Put(Key(prefix, i), std::string(200, 'x')));
    }
    return Status::OK();
  });
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  std::string result = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return result;
}

class SqliteBatchVfsTest : public testing::SqliteFileTest {};

// Each commit of five changed pages is one write system call (it was ten:
// a frame header and a page each), and those pages were written.
TEST_F(SqliteBatchVfsTest, ACommitIsOneWriteCall) {
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(FillRanges(*engine));
  constexpr int kCommits = 100;
  const WriteCalls before = ProcessWrites();
  for (int n = 0; n < kCommits; ++n) {
    ASSERT_OK(engine->Run([&](Txn& txn) {
      for (char prefix : std::string("abcde")) RETURN_IF_ERROR(txn.Put(Key(prefix, (n * 37) % 400), "changed"));
      return Status::OK();
    }));
  }
  const WriteCalls after = ProcessWrites();
  const double calls = double(after.calls - before.calls) / kCommits;
  const double bytes = double(after.bytes - before.bytes) / kCommits;
  const int page = testing::PageSizeOf(path_);
  ASSERT_GT(page, 0);
  EXPECT_GE(bytes, 5 * page) << "the commits did not change five pages each: the test measures nothing";
  // One write per commit; checkpoints (every 1000 frames) add a few writes
  // of database pages, spread over the commits.
  EXPECT_LE(calls, 1.5) << "write calls per commit";
}

// Two engines on one file (as two processes): each sees the other's
// commits at once.
TEST_F(SqliteBatchVfsTest, AnotherConnectionSeesEachCommitAtOnce) {
  std::unique_ptr<Engine> a = MustOpen(path_), b = MustOpen(path_);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_OK(FillRanges(*a));
  for (int i = 0; i < 300; ++i) {
    Engine& writer = i % 2 == 0 ? *a : *b;
    Engine& reader = i % 2 == 0 ? *b : *a;
    const std::string value = "v" + std::to_string(i);
    ASSERT_OK(writer.Run([&](Txn& txn) {
      RETURN_IF_ERROR(txn.Put(Key('c', i % 400), value));
      return txn.Put(Key('e', i % 400), value);
    }));
    std::string c, e;
    ASSERT_OK(reader.Run(
        [&](Txn& txn) {
          ASSIGN_OR_RETURN(c, txn.Get(Key('c', i % 400)));
          ASSIGN_OR_RETURN(e, txn.Get(Key('e', i % 400)));
          return Status::OK();
        },
        true));
    ASSERT_EQ(c, value) << "commit " << i;
    ASSERT_EQ(e, value) << "commit " << i;
  }
}

// A process that dies right after its commits returned, closing nothing,
// leaves every one of them in the database.
TEST_F(SqliteBatchVfsTest, CommitsSurviveTheProcessDying) {
  constexpr int kCommits = 60;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<std::unique_ptr<Engine>> engine = OpenSqlite(path_);
    if (!engine.ok()) _exit(2);
    for (int i = 0; i < kCommits; ++i) {
      Status st = (*engine)->Run([&](Txn& txn) {
        RETURN_IF_ERROR(txn.Put(Key('k', i), std::string(3000, char('a' + i % 26))));
        return txn.Put(Key('z', i), "last");
      });
      if (!st.ok()) _exit(3);
    }
    _exit(0);  // no destructor, no close, no checkpoint
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(engine->Run(
      [&](Txn& txn) {
        for (int i = 0; i < kCommits; ++i) {
          ASSIGN_OR_RETURN(std::string k, txn.Get(Key('k', i)));
          ASSIGN_OR_RETURN(std::string z, txn.Get(Key('z', i)));
          EXPECT_EQ(k, std::string(3000, char('a' + i % 26))) << i;
          EXPECT_EQ(z, "last") << i;
        }
        return Status::OK();
      },
      true));
  EXPECT_EQ(IntegrityCheck(path_), "ok");
}

// A transaction larger than SQLite's page cache spills pages into the WAL
// before it ends (batches of 1 MiB go out on their own). Rolled back, it
// leaves nothing; committed, all of it is there; the file stays sound.
TEST_F(SqliteBatchVfsTest, LargeTransactionsRollBackAndCommitWhole) {
  {
    std::unique_ptr<Engine> engine = MustOpen(path_);
    ASSERT_NE(engine, nullptr);
    const std::string big(4000, 'b');
    Status st = engine->Run([&](Txn& txn) {
      for (int i = 0; i < 3000; ++i) RETURN_IF_ERROR(txn.Put(Key('r', i), big));  // ~12 MB
      return Status::Err(ECANCELED, "roll back");
    });
    ASSERT_EQ(st.code(), ECANCELED);
    ASSERT_OK(engine->Run([&](Txn& txn) { return txn.Put("small", "s"); }));
    ASSERT_OK(engine->Run([&](Txn& txn) {
      for (int i = 0; i < 3000; ++i) RETURN_IF_ERROR(txn.Put(Key('c', i), big));
      return Status::OK();
    }));
  }
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(engine->Run(
      [&](Txn& txn) {
        for (int i = 0; i < 3000; ++i) {
          EXPECT_EQ(txn.Get(Key('r', i)).status().code(), ENOENT) << "rolled-back key " << i;
          ASSIGN_OR_RETURN(std::string v, txn.Get(Key('c', i)));
          EXPECT_EQ(v.size(), 4000u);
        }
        ASSIGN_OR_RETURN(std::string s, txn.Get("small"));
        EXPECT_EQ(s, "s");
        return Status::OK();
      },
      true));
  EXPECT_EQ(IntegrityCheck(path_), "ok");
}

// The disk fails the one write that carries a commit: that commit fails
// (its outcome reported unknown or as an error), later ones succeed, and
// after a restart every commit reported done is there and the file is sound.
TEST_F(SqliteBatchVfsTest, AFailedBatchFailsItsCommitOnly) {
  FaultEnv env;
  SqliteOptions options;
  options.vfs = RegisterFaultVfs(&env);
  options.max_attempts = 1;
  {
    std::unique_ptr<Engine> engine = MustOpen(path_, options);
    ASSERT_NE(engine, nullptr);
    ASSERT_OK(FillRanges(*engine));
    ASSERT_OK(engine->Run([](Txn& txn) { return txn.Put("before", "1"); }));
    env.FailNext(FaultEnv::kWrite, EIO);
    Status failed = engine->Run([](Txn& txn) {
      RETURN_IF_ERROR(txn.Put(Key('a', 7), "failed"));
      return txn.Put(Key('d', 7), "failed");
    });
    EXPECT_EQ(failed.code(), EIO) << failed.ToString();
    EXPECT_EQ(env.injected(), 1u);
    ASSERT_OK(engine->Run([](Txn& txn) { return txn.Put("after", "1"); }));
  }
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(engine->Run(
      [&](Txn& txn) {
        ASSIGN_OR_RETURN(std::string before, txn.Get("before"));
        ASSIGN_OR_RETURN(std::string after, txn.Get("after"));
        ASSIGN_OR_RETURN(std::string a7, txn.Get(Key('a', 7)));
        ASSIGN_OR_RETURN(std::string d7, txn.Get(Key('d', 7)));
        EXPECT_EQ(a7, d7) << "half a transaction was committed";
        return Status::OK();
      },
      true));
  EXPECT_EQ(IntegrityCheck(path_), "ok");
}

// A transaction that spilled pages into the WAL and then changed one of
// them again: at its commit SQLite rewrites the frame headers' checksums, the
// commit frame's header last (walRewriteChecksums). The disk fails that last
// write: the commit fails (SQLite's answer to a failed write), the process
// lives on. It used to stay buffered until the barrier before the commit is
// published, where a failed write stops the process.
TEST_F(SqliteBatchVfsTest, AFailedChecksumRewriteFailsItsCommitOnly) {
  // A reader holding the snapshot from before the transaction keeps the
  // checkpoint that follows a large commit from writing anything (after the
  // WAL was emptied first): the commit's writes are the last ones.
  struct Reader {
    sqlite3* db = nullptr;
    explicit Reader(const std::string& path) {
      if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return;
      sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
      sqlite3_exec(db, "BEGIN; SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
    }
    ~Reader() {
      sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
      sqlite3_close(db);
    }
  };
  const std::string big(4000, 'b');
  auto spill_and_change = [&](Txn& txn) -> Status {
    for (int i = 0; i < 3000; ++i) RETURN_IF_ERROR(txn.Put(Key('s', i), big));  // ~12 MB: spills
    return txn.Put(Key('s', 0), "changed after the spill");
  };
  // The same transaction on a file of its own, to count its writes.
  uint64_t writes = 0;
  {
    FaultEnv env;
    SqliteOptions options;
    options.vfs = RegisterFaultVfs(&env);
    std::unique_ptr<Engine> engine = MustOpen(path_ + ".count", options);
    ASSERT_NE(engine, nullptr);
    ASSERT_OK(engine->Run([](Txn& txn) { return txn.Put("before", "1"); }));
    Reader reader(path_ + ".count");
    const uint64_t w0 = env.calls(FaultEnv::kWrite);
    ASSERT_OK(engine->Run(spill_and_change));
    writes = env.calls(FaultEnv::kWrite) - w0;
  }
  ASSERT_GT(writes, 10u);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child runs it with its last write failing
    FaultEnv env;
    SqliteOptions options;
    options.vfs = RegisterFaultVfs(&env);
    options.max_attempts = 1;
    std::unique_ptr<Engine> engine = MustOpen(path_, options);
    if (engine == nullptr || !engine->Run([](Txn& txn) { return txn.Put("before", "1"); }).ok()) _exit(3);
    Status st;
    {
      Reader reader(path_);
      env.FailNext(FaultEnv::kWrite, EIO, 1, int(writes - 1));
      st = engine->Run(spill_and_change);
    }
    if (env.injected() != 1) _exit(4);
    if (st.ok()) _exit(5);
    if (!engine->Run([](Txn& txn) { return txn.Put("after", "1"); }).ok()) _exit(6);
    engine.reset();
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(wstatus)) << "the process was stopped by signal " << WTERMSIG(wstatus)
                                     << " on a write error SQLite could have reported";
  ASSERT_TRUE(WIFEXITED(wstatus));
  ASSERT_EQ(WEXITSTATUS(wstatus), 0) << "3: no engine, 4: no fault injected, 5: the commit succeeded, "
                                        "6: the next commit failed";
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(engine->Run(
      [&](Txn& txn) {
        ASSIGN_OR_RETURN(std::string after, txn.Get("after"));
        Result<std::string> first = txn.Get(Key('s', 0));
        EXPECT_EQ(first.status().code(), ENOENT) << "the failed transaction was committed";
        return Status::OK();
      },
      true));
  EXPECT_EQ(IntegrityCheck(path_), "ok");
}

}  // namespace
}  // namespace tessera::kv
