// The commit delay on SQLite (sql_kv.h, PoolOptions::commit_delay): write
// transactions that follow one another share one SQLite transaction,
// committed once it is due, on Flush, before a read or when the engine
// closes. Another connection (another process) sees a change only once it
// is committed; this engine's own reads always see it; a writer that
// fails leaves the others' changes; a commit that fails is counted,
// reported, and the engine goes on.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/fault_env.h"
#include "common/metrics.h"
#include "kv/sql_kv.h"
#include "kv/sqlite_fault_vfs.h"
#include "kv/sqlite_kv.h"
#include "kv_test_util.h"

namespace tessera::kv {
namespace {

using namespace std::chrono_literals;
using testing::GetValue;
using testing::TempDir;

uint64_t Grouped() {
  return metrics::NewCounter(sql::kGroupedMetric, sql::kGroupedHelp, {{"engine", "sqlite3"}})->value();
}

std::unique_ptr<Engine> OpenDelayed(const std::string& path, std::chrono::microseconds delay,
                                    const std::string& vfs = "") {
  SqliteOptions options;
  options.commit_delay = delay;
  options.vfs = vfs;
  options.max_attempts = 3;
  auto engine = OpenSqlite(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// What another process sees: a connection of its own, no delay.
bool Committed(const std::string& path, const std::string& key) {
  auto other = OpenSqlite(path);
  EXPECT_TRUE(other.ok()) << other.status().ToString();
  if (!other.ok()) return false;
  auto v = GetValue(**other, key);
  return v.ok();
}

Status PutOne(Engine& engine, const std::string& key) {
  return engine.Run([&](Txn& txn) { return txn.Put(key, "v"); });
}

class CommitDelayTest : public ::testing::Test {
 protected:
  std::string Path() const { return (dir_.path() / "meta.db").string(); }
  TempDir dir_;
};

// A change is answered before it is committed, and committed within the
// delay by the engine's own thread, with nothing else happening.
TEST_F(CommitDelayTest, CommittedWithinTheDelay) {
  auto engine = OpenDelayed(Path(), 300ms);
  ASSERT_NE(engine, nullptr);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(PutOne(*engine, "a"));
  const bool early = Committed(Path(), "a");
  const bool in_time = early || std::chrono::steady_clock::now() - start < 250ms;
  if (in_time) {
    EXPECT_FALSE(early) << "committed at once despite a 300 ms delay";
  }
  bool seen = early;
  while (!seen && std::chrono::steady_clock::now() - start < 5s) {
    std::this_thread::sleep_for(20ms);
    seen = Committed(Path(), "a");
  }
  EXPECT_TRUE(seen) << "not committed 5 s after a change with a 300 ms delay";
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 250ms);
}

// Flush commits at once; so does a read of this engine, which sees the
// change either way; and so does closing the engine.
TEST_F(CommitDelayTest, FlushReadsAndCloseCommit) {
  auto engine = OpenDelayed(Path(), 1h);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(PutOne(*engine, "flushed"));
  EXPECT_FALSE(Committed(Path(), "flushed"));
  ASSERT_OK(engine->Flush());
  EXPECT_TRUE(Committed(Path(), "flushed"));

  ASSERT_OK(PutOne(*engine, "read"));
  EXPECT_FALSE(Committed(Path(), "read"));
  auto v = GetValue(*engine, "read");  // a read-only transaction
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(Committed(Path(), "read")) << "a read did not commit the changes before it";

  ASSERT_OK(PutOne(*engine, "closed"));
  EXPECT_FALSE(Committed(Path(), "closed"));
  engine.reset();
  EXPECT_TRUE(Committed(Path(), "closed")) << "closing the engine lost a delayed change";
}

// Writes that follow one another share commits; a writer whose fn fails is
// rolled back alone (its write is not there, the ones around it are); a
// later writer sees the earlier ones' uncommitted changes.
TEST_F(CommitDelayTest, WritersShareCommitsAndFailAlone) {
  auto engine = OpenDelayed(Path(), 1h);
  ASSERT_NE(engine, nullptr);
  const uint64_t grouped0 = Grouped();
  for (int i = 0; i < 100; ++i) {
    const std::string key = "k" + std::to_string(i);
    Status st = engine->Run([&](Txn& txn) {
      RETURN_IF_ERROR(txn.Put(key, "v"));
      RETURN_IF_ERROR(txn.Incr("counter", 1).status());
      return i % 10 == 3 ? Status::Err(EEXIST, "refused") : Status::OK();
    });
    if (i % 10 == 3) {
      EXPECT_EQ(st.code(), EEXIST) << st.ToString();
    } else {
      EXPECT_OK(st);
    }
  }
  int64_t counter = -1;
  ASSERT_OK(engine->Run([&](Txn& txn) {  // a write: sees the open transaction
    ASSIGN_OR_RETURN(counter, txn.Incr("counter", 0));
    return Status::OK();
  }));
  EXPECT_EQ(counter, 90);
  EXPECT_FALSE(Committed(Path(), "k0"));
  ASSERT_OK(engine->Flush());
  EXPECT_EQ(Grouped() - grouped0, 91u) << "101 writes, 10 refused: one commit should carry the 91 others";
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(Committed(Path(), "k" + std::to_string(i)), i % 10 != 3) << "k" << i;
}

// Another process's write waits for the delayed commit, then goes through
// (no deadlock with the engine's lock), and this engine then sees it.
TEST_F(CommitDelayTest, AnotherProcessWritesAfterTheDelay) {
  auto engine = OpenDelayed(Path(), 100ms);
  ASSERT_NE(engine, nullptr);
  ASSERT_OK(PutOne(*engine, "mine"));
  auto other = OpenSqlite(Path());
  ASSERT_TRUE(other.ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(PutOne(**other, "theirs"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(GetValue(*engine, "theirs").ok());
  EXPECT_TRUE(GetValue(**other, "mine").ok());
}

// Threads writing and reading at once: every increment counted once, each
// reader sees what its own thread wrote before.
TEST_F(CommitDelayTest, ConcurrentWritersAndReaders) {
  auto engine = OpenDelayed(Path(), 2ms);
  ASSERT_NE(engine, nullptr);
  constexpr int kThreads = 4, kEach = 300;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string key = "t" + std::to_string(t) + "_" + std::to_string(i);
        Status st = engine->Run([&](Txn& txn) {
          RETURN_IF_ERROR(txn.Put(key, "v"));
          return txn.Incr("counter", 1).status();
        });
        if (!st.ok()) ++wrong;
        if (i % 7 == 0 && !GetValue(*engine, key).ok()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_OK(engine->Flush());
  auto other = OpenSqlite(Path());
  ASSERT_TRUE(other.ok());
  int64_t counter = -1;
  ASSERT_OK((*other)->Run([&](Txn& txn) {
    ASSIGN_OR_RETURN(counter, txn.Incr("counter", 0));
    return Status::OK();
  }));
  EXPECT_EQ(counter, kThreads * kEach);
}

// A delayed commit that fails (the WAL cannot be written): Flush returns the
// error, the changes are counted lost, the loss function runs, and the
// engine works again once the disk does.
TEST_F(CommitDelayTest, AFailedCommitIsCountedAndReported) {
  FaultEnv env;
  auto engine = OpenDelayed(Path(), 1h, RegisterFaultVfs(&env));
  ASSERT_NE(engine, nullptr);
  std::atomic<int> reported{0};
  engine->OnLostWrites([&] { ++reported; });
  const uint64_t lost0 = metrics::NewCounter(sql::kLostMetric, sql::kLostHelp, {{"engine", "sqlite3"}})->value();
  ASSERT_OK(PutOne(*engine, "doomed1"));
  ASSERT_OK(PutOne(*engine, "doomed2"));
  EXPECT_EQ(engine->LostWrites(), 0u);
  env.FailRandomly(FaultEnv::kWrite, ENOSPC, 1.0);
  Status st = engine->Flush();
  env.FailRandomly(FaultEnv::kAll, EIO, 0);
  ASSERT_FALSE(st.ok()) << "the commit met no fault";
  EXPECT_EQ(engine->LostWrites(), 2u);
  EXPECT_EQ(metrics::NewCounter(sql::kLostMetric, sql::kLostHelp, {{"engine", "sqlite3"}})->value() - lost0, 2u);
  for (int i = 0; i < 500 && reported.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(reported.load(), 1);
  EXPECT_OK(engine->Flush());  // nothing left to commit
  ASSERT_OK(PutOne(*engine, "after"));
  ASSERT_OK(engine->Flush());
  EXPECT_TRUE(Committed(Path(), "after"));
  EXPECT_EQ(engine->LostWrites(), 2u);
}

// The URL opener passes the delay on (what a mount uses).
TEST_F(CommitDelayTest, OpenPassesTheDelay) {
  OpenOptions options;
  options.commit_delay = 1h;
  auto engine = Open("sqlite3://" + Path(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ASSERT_OK(PutOne(**engine, "x"));
  EXPECT_FALSE(Committed(Path(), "x"));
  ASSERT_OK((*engine)->Flush());
  EXPECT_TRUE(Committed(Path(), "x"));
}

}  // namespace
}  // namespace tessera::kv
