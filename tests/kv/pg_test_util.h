// PostgreSQL test helpers, for the kv and meta suites. The server comes from
// the environment (tests/tools/with-postgres.sh sets it up):
//   TESSERA_TEST_PG_URL         postgres://user:password@127.0.0.1:port/db
//   TESSERA_TEST_PG_SOCKET_URL  the same database over a Unix socket
//   TESSERA_TEST_PG_RESTART     a shell command that restarts the server
// Tests skip (GTEST_SKIP) when TESSERA_TEST_PG_URL is unset.
#pragma once

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace tessera::kv::testing {

inline std::string PgEnv(const char* name) {
  const char* value = getenv(name);
  return value != nullptr ? value : "";
}

inline constexpr const char* kPgSkipMessage =
    "TESSERA_TEST_PG_URL is not set; run under tests/tools/with-postgres.sh (ctest unit_kv_postgres, "
    "unit_meta_postgres)";

// base with a libpq parameter added to its query.
inline std::string WithPgParam(const std::string& base, const std::string& param) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") + param;
}

// Notices ("drop cascades to ...") would go to stderr.
inline void IgnorePgNotice(void*, const char*) {}

// Runs one SQL command on a fresh connection; "" or the error.
inline std::string PgExec(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  PQsetNoticeProcessor(conn, IgnorePgNotice, nullptr);
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* result = PQexec(conn, sql.c_str());
    if (PQresultStatus(result) != PGRES_COMMAND_OK && PQresultStatus(result) != PGRES_TUPLES_OK) {
      error = PQresultErrorMessage(result);
    }
    PQclear(result);
  }
  PQfinish(conn);
  return error;
}

// A private schema in the test database, dropped with its contents on
// destruction: url() opens an engine whose table lives there, so every test
// starts from an empty key space.
class PgSchema {
 public:
  // base: TESSERA_TEST_PG_URL (or another URL of the same database).
  explicit PgSchema(std::string base) : base_(std::move(base)) {
    static std::atomic<int> counter{0};
    name_ = "t" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    const std::string error = PgExec(base_, "CREATE SCHEMA " + name_);
    if (!error.empty()) ADD_FAILURE() << "create schema " << name_ << ": " << error;
  }
  ~PgSchema() {
    const std::string error = PgExec(base_, "DROP SCHEMA IF EXISTS " + name_ + " CASCADE");
    if (!error.empty()) ADD_FAILURE() << "drop schema " << name_ << ": " << error;
  }
  PgSchema(const PgSchema&) = delete;
  PgSchema& operator=(const PgSchema&) = delete;

  const std::string& name() const { return name_; }
  // base with search_path set to this schema (libpq's options parameter).
  std::string url() const { return UrlFrom(base_); }
  std::string UrlFrom(const std::string& base) const { return WithPgParam(base, "options=-csearch_path%3D" + name_); }

 private:
  const std::string base_;
  std::string name_;
};

}  // namespace tessera::kv::testing
