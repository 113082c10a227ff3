// Shared helpers for the kv tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "common/status.h"
#include "kv/kv.h"

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

namespace tessera::kv::testing {

// The value of `key`, read in a transaction of its own.
inline Result<std::string> GetValue(Engine& engine, std::string_view key) {
  std::string value;
  Status status = engine.Run(
      [&](Txn& txn) {
        ASSIGN_OR_RETURN(value, txn.Get(key));
        return Status::OK();
      },
      true);
  if (!status.ok()) return status;
  return value;
}

// A fresh private directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-kv-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::kv::testing
