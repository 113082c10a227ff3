// Shared helpers for the SQLite engine's tests: opening an engine on a file,
// and a fixture with a fresh database path.
#pragma once

#include <memory>
#include <string>

#include "kv/sqlite_kv.h"
#include "kv_test_util.h"

namespace tessera::kv::testing {

inline std::unique_ptr<Engine> MustOpen(const std::string& path, const SqliteOptions& options = {}) {
  Result<std::unique_ptr<Engine>> engine = OpenSqlite(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// A database path in a private directory that goes at the end of the test.
class SqliteFileTest : public ::testing::Test {
 protected:
  TempDir dir_;
  const std::string path_ = (dir_.path() / "meta.db").string();
};

}  // namespace tessera::kv::testing
