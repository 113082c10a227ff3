// Shared helpers for the SQLite engine's tests: opening an engine on a file,
// and a fixture with a fresh database path.
#pragma once

#include <sqlite3.h>

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

// The page size of the database at `path` (-1 if it cannot be read).
inline int PageSizeOf(const std::string& path) {
  sqlite3* db = nullptr;
  int size = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
      size = sqlite3_column_int(stmt, 0);
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return size;
}

// A database path in a private directory that goes at the end of the test.
class SqliteFileTest : public ::testing::Test {
 protected:
  TempDir dir_;
  const std::string path_ = (dir_.path() / "meta.db").string();
};

}  // namespace tessera::kv::testing
