// SQLite-specific behaviour: several engines and processes on one file,
// persistence, busy handling, pool connections opened after a chdir.
#include "kv/sqlite_kv.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sqlite_test_util.h"

namespace tessera::kv {
namespace {

using testing::MustOpen;
using testing::PageSizeOf;
using testing::TempDir;

Status Increment(Engine& engine) {
  return engine.Run([](Txn& txn) { return txn.Incr("counter", 1).status(); });
}

int64_t Counter(Engine& engine) {
  Result<std::string> value = testing::GetValue(engine, "counter");
  EXPECT_OK(value.status());
  if (!value.ok() || value->size() != 8) return -1;
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>((*value)[i]);
  return static_cast<int64_t>(v);
}

// Opens the database at `path` again and reads `key` (what went wrong, if
// anything, comes back in place of the value).
std::string ReadAfterReopen(const std::string& path, const std::string& key) {
  std::unique_ptr<Engine> engine = MustOpen(path);
  if (engine == nullptr) return "<cannot open>";
  Result<std::string> v = testing::GetValue(*engine, key);
  return v.ok() ? *v : "<" + v.status().ToString() + ">";
}

class SqliteKvTest : public testing::SqliteFileTest {};

TEST_F(SqliteKvTest, DataSurvivesReopen) {
  {
    std::unique_ptr<Engine> engine = MustOpen(path_);
    ASSERT_NE(engine, nullptr);
    ASSERT_OK(engine->Run([](Txn& txn) { return txn.Put("k", std::string("v\0v", 3)); }));
  }
  EXPECT_EQ(ReadAfterReopen(path_, "k"), std::string("v\0v", 3));
}

// Sync (an fsync of the WAL, which synchronous=NORMAL leaves to checkpoints)
// succeeds with commits in the WAL and after a checkpoint emptied it, and
// the data is still there.
TEST_F(SqliteKvTest, SyncMakesTheWalDurable) {
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(Increment(*engine));
  ASSERT_TRUE(std::filesystem::exists(path_ + "-wal"));
  EXPECT_OK(engine->Sync());
  engine.reset();  // the last connection checkpoints and removes the WAL
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));
  engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  EXPECT_OK(engine->Sync());
  EXPECT_EQ(Counter(*engine), 1);
}

// Two engines on one file stand for two processes: each has its own writer
// mutex and pool, so only SQLite's file locks keep them apart.
TEST_F(SqliteKvTest, TwoEnginesOnOneFileIncrementExactly) {
  std::unique_ptr<Engine> engines[2] = {MustOpen(path_), MustOpen(path_)};
  ASSERT_TRUE(engines[0] && engines[1]);
  constexpr int kThreadsPerEngine = 2;
  constexpr int kIncrements = 250;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (auto& engine : engines) {
    for (int t = 0; t < kThreadsPerEngine; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kIncrements; ++i) {
          if (Status status = Increment(*engine); !status.ok()) {
            ADD_FAILURE() << status.ToString();
            ++errors;
          }
        }
      });
    }
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(Counter(*engines[0]), 2 * kThreadsPerEngine * kIncrements);
  EXPECT_EQ(Counter(*engines[1]), 2 * kThreadsPerEngine * kIncrements);
}

TEST_F(SqliteKvTest, ForkedProcessIncrementsExactly) {
  constexpr int kIncrements = 1000;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: its own engine; no gtest assertions, report through the exit code.
    close(ready[0]);
    int code = 0;
    {
      Result<std::unique_ptr<Engine>> engine = OpenSqlite(path_);
      const char byte = 1;
      if (!engine.ok() || write(ready[1], &byte, 1) != 1) {
        code = 2;
      } else {
        for (int i = 0; i < kIncrements && code == 0; ++i) {
          if (!Increment(**engine).ok()) code = 1;
        }
      }
    }
    _exit(code);
  }
  close(ready[1]);
  std::unique_ptr<Engine> engine = MustOpen(path_);
  char byte = 0;
  EXPECT_EQ(read(ready[0], &byte, 1), 1);  // start together
  close(ready[0]);
  int errors = 0;
  for (int i = 0; engine && i < kIncrements; ++i) errors += Increment(*engine).ok() ? 0 : 1;
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  EXPECT_EQ(errors, 0);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(Counter(*engine), 2 * kIncrements);
}

// Another process holding the write lock past the busy timeout and every
// retry makes a write transaction fail with a transient EBUSY; WAL still lets
// read-only transactions through.
TEST_F(SqliteKvTest, WriteLockHeldElsewhereGivesTransientEBUSY) {
  SqliteOptions options;
  options.busy_timeout_ms = 10;
  options.max_attempts = 3;
  std::unique_ptr<Engine> engine = MustOpen(path_, options);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(Increment(*engine));

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  int attempts = 0;
  Status status = engine->Run([&](Txn& txn) {
    ++attempts;
    return txn.Incr("counter", 1).status();
  });
  EXPECT_EQ(status.code(), EBUSY) << status.ToString();
  EXPECT_TRUE(status.transient());
  EXPECT_EQ(attempts, 0) << "BEGIN IMMEDIATE fails before fn runs";
  EXPECT_EQ(Counter(*engine), 1);

  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_close(other), SQLITE_OK);
  ASSERT_OK(Increment(*engine));
  EXPECT_EQ(Counter(*engine), 2);
}

// The change log (Engine::Listen): payloads arrive in commit order; a row
// pruned before the listener read it (a gap in the ids) is reported as lost,
// never skipped silently, and the listener goes on after it.
TEST_F(SqliteKvTest, ChangeLogGapIsReportedAsLost) {
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> got;
  int losses = 0;
  auto listener = engine->Listen([&](const std::vector<std::string>& payloads, bool lost) {
    std::lock_guard<std::mutex> g(mu);
    got.insert(got.end(), payloads.begin(), payloads.end());
    losses += lost;
    cv.notify_all();
  });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto wait_for = [&](const std::string& payload) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(5),
                       [&] { return std::find(got.begin(), got.end(), payload) != got.end(); });
  };
  ASSERT_OK(engine->Run([](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("k", "1"));
    return txn.Notify("first");
  }));
  ASSERT_TRUE(wait_for("first"));
  {
    std::lock_guard<std::mutex> g(mu);
    EXPECT_EQ(losses, 0) << "a loss without a gap";
  }
  // Another process appends two records and prunes the first before the
  // listener's next poll: one commit, so the listener cannot see it between.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other,
                         "BEGIN IMMEDIATE; INSERT INTO kvlog (at, p) VALUES (0, 'pruned'); "
                         "INSERT INTO kvlog (at, p) VALUES (0, 'after-gap'); DELETE FROM kvlog WHERE p = 'pruned'; "
                         "COMMIT",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(other);
  ASSERT_EQ(sqlite3_close(other), SQLITE_OK);
  ASSERT_TRUE(wait_for("after-gap"));
  ASSERT_OK(engine->Run([](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("k", "2"));
    return txn.Notify("later");
  }));
  ASSERT_TRUE(wait_for("later")) << "the listener stopped after the gap";
  std::lock_guard<std::mutex> g(mu);
  EXPECT_EQ(losses, 1) << "the pruned record was skipped silently (or a loss was reported twice)";
  EXPECT_EQ(std::count(got.begin(), got.end(), std::string("pruned")), 0);
}

// SQLite keeps no memory statistics in an engine's process (they cost a
// process-wide mutex per allocation: sqlite_shim_vfs.h). Checked in a fresh
// process (gtest re-executes the binary for this test alone), where opening
// the engine is the first use of SQLite whatever other tests ran before.
TEST_F(SqliteKvTest, KeepsNoMemoryStatistics) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = path_;
  EXPECT_EXIT(
      {
        int code = 2;
        {
          Result<std::unique_ptr<Engine>> engine = OpenSqlite(path);
          if (engine.ok() && Increment(**engine).ok()) code = sqlite3_memory_used() == 0 ? 0 : 1;
        }
        std::exit(code);
      },
      ::testing::ExitedWithCode(0), "");
}

// A value far larger than a page: spread over overflow pages, whole again
// when read back.
std::string BigValue(char seed) {
  std::string v(100 << 10, '\0');
  for (size_t i = 0; i < v.size(); ++i) v[i] = char(seed + i * 7 + (i >> 9));
  return v;
}


// A new database gets 2 KiB pages (fewer bytes in the WAL per commit:
// sqlite_kv.cc), and records of every size round-trip.
TEST_F(SqliteKvTest, NewDatabaseHasTwoKiBPages) {
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  const std::string big = BigValue('a');
  ASSERT_OK(engine->Run([&](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("small", "v"));
    RETURN_IF_ERROR(txn.Put("mid", std::string(600, 'm')));  // over the ~490 bytes kept in a 2 KiB page
    return txn.Put("big", big);
  }));
  engine.reset();
  EXPECT_EQ(PageSizeOf(path_), 2048);
  EXPECT_EQ(ReadAfterReopen(path_, "small"), "v");
  EXPECT_EQ(ReadAfterReopen(path_, "mid"), std::string(600, 'm'));
  EXPECT_TRUE(ReadAfterReopen(path_, "big") == big) << "the 100 KiB value came back different";
}

// A database made with SQLite's default 4 KiB pages (every volume formatted
// before the change) keeps them, and its records stay readable and writable.
TEST_F(SqliteKvTest, DatabaseWithFourKiBPagesKeepsThem) {
  const std::string big = BigValue('x');
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    const char* setup =
        "PRAGMA page_size=4096; PRAGMA journal_mode=WAL;"
        "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;"
        "INSERT INTO kv VALUES (CAST('old' AS BLOB), CAST('value' AS BLOB));";
    EXPECT_EQ(sqlite3_exec(db, setup, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  ASSERT_EQ(PageSizeOf(path_), 4096);
  std::unique_ptr<Engine> engine = MustOpen(path_);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(engine->Run([&](Txn& txn) {
    ASSIGN_OR_RETURN(std::string v, txn.Get("old"));
    EXPECT_EQ(v, "value");
    return txn.Put("big", big);
  }));
  engine.reset();
  EXPECT_EQ(PageSizeOf(path_), 4096);
  EXPECT_TRUE(ReadAfterReopen(path_, "big") == big) << "the 100 KiB value came back different";
}

// Pool connections opened after the process changed directory still open the
// file named by the relative path at Open time.
TEST_F(SqliteKvTest, RelativePathSurvivesChdir) {
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  Result<std::unique_ptr<Engine>> opened = Open("sqlite3://rel.db");
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Engine& engine = **opened;

  // Hold the only open connection in a read-only txn so that the write below
  // needs a second one, opened now.
  std::promise<void> reading, release;
  std::shared_future<void> released = release.get_future().share();
  std::thread reader([&] {
    EXPECT_OK(engine.Run(
        [&](Txn&) {
          reading.set_value();
          released.wait();
          return Status::OK();
        },
        true));
  });
  reading.get_future().wait();
  EXPECT_OK(engine.Run([](Txn& txn) { return txn.Put("k", "v"); }));
  release.set_value();
  reader.join();

  std::unique_ptr<Engine> check = MustOpen((dir_.path() / "rel.db").string());
  ASSERT_NE(check, nullptr);
  EXPECT_OK(check->Run([](Txn& txn) { return txn.Get("k").status(); }, true));
  EXPECT_FALSE(std::filesystem::exists(cwd / "rel.db"));
}

// Setting up a new file needs an exclusive lock, which SQLite refuses without
// waiting when processes race to open it; Open must retry rather than fail.
TEST_F(SqliteKvTest, ProcessesRacingToOpenANewFile) {
  constexpr int kRounds = 10;
  constexpr int kProcesses = 4;
  for (int round = 0; round < kRounds; ++round) {
    const std::string path = (dir_.path() / ("new-" + std::to_string(round) + ".db")).string();
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(go[1]);
        char byte;
        const bool started = read(go[0], &byte, 1) == 0;  // EOF: the parent said go
        int code = 0;
        {
          Result<std::unique_ptr<Engine>> engine = OpenSqlite(path);
          if (!started || !engine.ok()) {
            code = 2;
          } else if (!Increment(**engine).ok()) {
            code = 1;
          }
        }
        _exit(code);
      }
      children.push_back(pid);
    }
    close(go[0]);
    close(go[1]);
    for (pid_t pid : children) {
      int wstatus = 0;
      ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
      EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "round " << round << " status " << wstatus;
    }
    std::unique_ptr<Engine> engine = MustOpen(path);
    ASSERT_NE(engine, nullptr);
    EXPECT_EQ(Counter(*engine), kProcesses);
  }
}

}  // namespace
}  // namespace tessera::kv
