// Group commit on SQLite (sql_kv.h, PoolOptions::group_commit): concurrent
// writers share transactions, yet each one's outcome is its own — a caller
// whose fn fails is rolled back alone, the others commit — and the result
// is that of running them one after another.
#include <atomic>
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

using testing::TempDir;

uint64_t Groups() {
  return metrics::NewCounter(sql::kGroupsMetric, sql::kGroupsHelp, {{"engine", "sqlite3"}})->value();
}
uint64_t Grouped() {
  return metrics::NewCounter(sql::kGroupedMetric, sql::kGroupedHelp, {{"engine", "sqlite3"}})->value();
}

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = OpenSqlite((dir_.path() / "meta.db").string());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  TempDir dir_;
  std::unique_ptr<Engine> engine_;
};

// 4 threads: each writes its own keys, increments one shared counter, and
// every third transaction writes a key and then fails. Each caller sees its
// own result; failed ones leave nothing; the counter counts exactly the
// successful ones; and some transactions did share a commit.
TEST_F(GroupCommitTest, EachCallerKeepsItsOwnOutcome) {
  constexpr int kThreads = 4, kEach = 400;
  const uint64_t groups0 = Groups(), grouped0 = Grouped();
  std::atomic<int> wrong{0}, succeeded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const bool fail = i % 3 == 0;
        const std::string key = "k" + std::to_string(t) + "_" + std::to_string(i);
        Status st = engine_->Run([&](Txn& txn) {
          RETURN_IF_ERROR(txn.Put(key, "v"));
          RETURN_IF_ERROR(txn.Incr("counter", 1).status());
          return fail ? Status::Err(EEXIST, "refused") : Status::OK();
        });
        if (fail ? st.code() != EEXIST : !st.ok()) ++wrong;
        if (st.ok()) ++succeeded;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  int present = 0, leaked = 0;
  int64_t counter = -1;
  ASSERT_OK(engine_->Run(
      [&](Txn& txn) {
        for (int t = 0; t < kThreads; ++t) {
          for (int i = 0; i < kEach; ++i) {
            auto v = txn.Get("k" + std::to_string(t) + "_" + std::to_string(i));
            if (!v.ok()) continue;
            if (i % 3 == 0) ++leaked;
            else ++present;
          }
        }
        ASSIGN_OR_RETURN(counter, txn.Incr("counter", 0));
        return Status::OK();
      },
      false));
  EXPECT_EQ(leaked, 0) << "writes of failed transactions were committed";
  EXPECT_EQ(present, succeeded.load());
  EXPECT_EQ(counter, succeeded.load());
  const uint64_t groups = Groups() - groups0, grouped = Grouped() - grouped0;
  EXPECT_GT(groups, 0u) << "no two writers ever shared a commit";
  EXPECT_GE(grouped, 2 * groups);
}

// Disk errors while groups commit (writes and syncs of the database and
// its WAL fail at random): a caller told OK has its key, a caller told a
// plain error has not, and only a caller told "outcome unknown" may have
// either. The shared counter matches the keys present (each transaction
// wrote both or neither).
TEST(GroupCommitFaultTest, DiskErrorsLeaveEachCallerItsTrueOutcome) {
  TempDir dir;
  const std::string path = (dir.path() / "meta.db").string();
  FaultEnv env;
  SqliteOptions options;
  options.vfs = RegisterFaultVfs(&env);
  options.max_attempts = 3;
  std::vector<Status> outcomes;
  const uint64_t groups0 = Groups();
  {
    auto engine = OpenSqlite(path, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    constexpr int kThreads = 4, kEach = 150;
    env.FailRandomly(FaultEnv::kWrite | FaultEnv::kSync, EIO, 0.05, 7);
    // Writers overlap only by chance (a loaded machine may run them one
    // after another): rounds go on until one formed a group, at most 20.
    for (int round = 0; round < 20 && Groups() == groups0; ++round) {
      const size_t base = outcomes.size();
      outcomes.resize(base + kThreads * kEach);
      std::atomic<int> ready{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          ready.fetch_add(1);
          while (ready.load() < kThreads) std::this_thread::yield();  // start together
          for (int i = 0; i < kEach; ++i) {
            const size_t n = base + size_t(t * kEach + i);
            const std::string key = "k" + std::to_string(n);
            outcomes[n] = (*engine)->Run([&](Txn& txn) {
              RETURN_IF_ERROR(txn.Put(key, "v"));
              return txn.Incr("counter", 1).status();
            });
          }
        });
      }
      for (auto& th : threads) th.join();
    }
    env.FailRandomly(FaultEnv::kAll, EIO, 0);
  }
  EXPECT_GT(env.injected(), 0u);
  auto engine = OpenSqlite(path);  // without faults, as after a restart
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int present = 0, failed = 0;
  int64_t counter = 0;
  ASSERT_OK((*engine)->Run(
      [&](Txn& txn) {
        for (size_t i = 0; i < outcomes.size(); ++i) {
          const bool has = txn.Get("k" + std::to_string(i)).ok();
          present += has ? 1 : 0;
          const Status& st = outcomes[i];
          if (!st.ok()) ++failed;
          if (st.ok()) {
            EXPECT_TRUE(has) << "k" << i << ": acknowledged but lost";
          } else if (!st.outcome_unknown()) {
            EXPECT_FALSE(has) << "k" << i << ": failed (" << st.ToString() << ") but committed";
          }
        }
        auto c = txn.Get("counter");
        if (c.ok()) {
          ASSIGN_OR_RETURN(counter, txn.Incr("counter", 0));
        }
        return Status::OK();
      },
      false));
  EXPECT_GT(failed, 0) << "no transaction met a fault";
  EXPECT_GT(present, 0) << "no transaction got through";
  EXPECT_GT(Groups(), groups0) << "no group formed: the grouped failure paths were not reached";
  EXPECT_EQ(counter, present);
}

// Switched off, every transaction commits alone.
TEST(GroupCommitOffTest, NoGroups) {
  TempDir dir;
  SqliteOptions options;
  options.group_commit = false;
  auto engine = OpenSqlite((dir.path() / "meta.db").string(), options);
  ASSERT_TRUE(engine.ok());
  const uint64_t groups0 = Groups();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) EXPECT_OK((*engine)->Run([](Txn& txn) { return txn.Incr("c", 1).status(); }));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(Groups(), groups0);
}

}  // namespace
}  // namespace tessera::kv
