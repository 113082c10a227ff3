// SQLite may end a transaction by itself after an error (a full disk, an
// I/O error: https://sqlite.org/lang_transaction.html). The statements a
// caller runs after that must not run as transactions of their own,
// committed at once: a caller that goes on past a failed read or write (as
// some metadata cleanups do, skipping what they cannot read) would commit
// the rest of its writes without the ones before.
#include <string>

#include "common/fault_env.h"
#include "kv/sqlite_fault_vfs.h"
#include "kv/sqlite_kv.h"
#include "kv_test_util.h"

namespace tessera::kv {
namespace {

using testing::TempDir;

// A transaction larger than SQLite's page cache (2 MB by default) spills
// pages into the WAL before its commit; a failed spill rolls the whole
// transaction back. fn ignores every error and returns OK, the way a loop
// that skips what it cannot do would.
TEST(SqliteRollbackTest, WritesAfterSQLiteEndedTheTransactionAreRefused) {
  TempDir dir;
  const std::string path = (dir.path() / "meta.db").string();
  FaultEnv env;
  SqliteOptions options;
  options.vfs = RegisterFaultVfs(&env);
  options.max_attempts = 1;
  constexpr int kKeys = 400;
  const std::string value(16 * 1024, 'v');  // 400 x 16 KiB: 6.4 MB, three page caches
  int failed = 0, first_failed = -1;
  Status st;
  {
    auto engine = OpenSqlite(path, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_OK((*engine)->Run([](Txn& txn) { return txn.Put("before", "x"); }));
    st = (*engine)->Run([&](Txn& txn) {
      failed = 0, first_failed = -1;
      for (int i = 0; i < kKeys; ++i) {
        if (i == 10) env.FailNext(FaultEnv::kWrite, EIO);  // the next write to the file fails: a spill
        if (!txn.Put("k" + std::to_string(i), value).ok()) {
          ++failed;
          if (first_failed < 0) first_failed = i;
        }
      }
      return Status::OK();
    });
    env.FailRandomly(FaultEnv::kAll, EIO, 0);
  }
  ASSERT_EQ(env.injected(), 1u) << "the transaction never spilled: the test does not reach what it is for";
  ASSERT_GE(first_failed, 0) << "the injected write failure did not fail a Put";
  // Everything or nothing of the transaction; the caller told so.
  auto engine = OpenSqlite(path);  // without faults, as after a restart
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  int present = 0;
  ASSERT_OK((*engine)->Run(
      [&](Txn& txn) {
        present = 0;
        for (int i = 0; i < kKeys; ++i) present += txn.Get("k" + std::to_string(i)).ok() ? 1 : 0;
        return Status::OK();
      },
      true));
  EXPECT_TRUE(present == 0 || present == kKeys)
      << present << " of " << kKeys << " keys committed; the first failed Put was k" << first_failed << ", "
      << failed << " failed in all";
  if (present == 0) {
    EXPECT_FALSE(st.ok()) << "the transaction was lost, but its caller was told OK";
  }
  Result<std::string> before = testing::GetValue(**engine, "before");
  EXPECT_TRUE(before.ok() && *before == "x") << "a transaction committed before it is gone";
}

}  // namespace
}  // namespace tessera::kv
