// A fixture for tests of two clients (two mounts) of one volume, on every
// engine: the parameter names it ("memory", "sqlite3", "redis",
// "postgres"; the servers come from tests/tools/with-*.sh, tests on them
// skip without). a_ and b_ each have a session; the first formats.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../kv/pg_test_util.h"
#include "meta/meta.h"
#include "meta/redis_client.h"

namespace tessera::meta::testing {

class TwoClientsTest : public ::testing::TestWithParam<std::string> {
 protected:
  // name: the volume's, and part of the sqlite3 directory and memory store.
  explicit TwoClientsTest(std::string name) : name_(std::move(name)) {}

  void SetUp() override {
    if (GetParam() == "postgres") {
      if (kv::testing::PgEnv("TESSERA_TEST_PG_URL").empty()) GTEST_SKIP() << kv::testing::kPgSkipMessage;
      schema_ = std::make_unique<kv::testing::PgSchema>(kv::testing::PgEnv("TESSERA_TEST_PG_URL"));
      url_ = schema_->url();
    } else if (GetParam() == "redis") {
      const char* url = std::getenv("TESSERA_TEST_REDIS_URL");
      if (!url) GTEST_SKIP() << "TESSERA_TEST_REDIS_URL not set (ctest unit_meta_redis sets it)";
      url_ = url;
      ASSERT_TRUE(Redis({"FLUSHDB"}).ok());
    } else if (GetParam() == "sqlite3") {
      dir_ = std::filesystem::temp_directory_path() / ("tessera-" + name_ + "-" + std::to_string(getpid()));
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
      url_ = "sqlite3://" + (dir_ / "meta.db").string();
    } else {
      url_ = "memory://" + name_ + "-" + std::to_string(getpid());
    }
    a_ = OpenClient("/mnt/a");
    ASSERT_NE(a_, nullptr);
    b_ = OpenClient("/mnt/b");
    ASSERT_NE(b_, nullptr);
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<Meta> OpenClient(const std::string& mount_point) {
    auto m = Open(url_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return nullptr;
    if (!(*m)->Load().ok()) {
      Format f;
      f.name = name_;
      f.uuid = NewUuid();
      EXPECT_TRUE((*m)->Init(f, false).ok());
      EXPECT_TRUE((*m)->Load().ok());
    }
    SessionInfo s;
    s.mount_point = mount_point;
    EXPECT_TRUE((*m)->NewSession(s).ok());
    return std::move(*m);
  }

  // One command on the test's Redis server.
  Result<redis::Reply> Redis(const std::vector<std::string_view>& argv) {
    auto opts = redis::Options::Parse(url_);
    if (!opts.ok()) return opts.status();
    auto client = redis::Client::Connect(*opts);
    if (!client.ok()) return client.status();
    return (*client)->Command(argv);
  }

  const std::string name_;
  std::string url_;
  std::filesystem::path dir_;
  std::unique_ptr<kv::testing::PgSchema> schema_;
  std::unique_ptr<Meta> a_, b_;
};

}  // namespace tessera::meta::testing
