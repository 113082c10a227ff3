// PostgreSQL-specific behaviour: retries under contention, several clients,
// connection failures, reconnects, secrets kept out of messages. Needs a
// server (TESSERA_TEST_PG_URL, see pg_test_util.h); the tests that need none
// run anyway.
#include "kv/postgres_kv.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv_test_util.h"
#include "pg_test_util.h"

namespace tessera::kv {
namespace {

using testing::PgEnv;
using testing::PgSchema;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Engine> MustOpen(const std::string& url, const PostgresOptions& options = {}) {
  Result<std::unique_ptr<Engine>> engine = OpenPostgres(url, options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

int64_t Counter(Engine& engine, const std::string& key) {
  int64_t value = -1;
  EXPECT_OK(engine.Run([&](Txn& txn) {
    ASSIGN_OR_RETURN(value, txn.Incr(key, 0));
    return Status::OK();
  }));
  return value;
}

// A TCP port on 127.0.0.1 where nothing listens.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "bind";
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// n incompressible bytes: as a key, too long for the primary key's btree.
std::string RandomBytes(size_t n) {
  std::mt19937 rng(42);
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(rng()));
  return s;
}

// The password in postgres://user:password@host...
std::string PasswordOf(const std::string& url) {
  const size_t start = url.find("://") + 3;
  const size_t colon = url.find(':', start);
  const size_t at = url.find('@', start);
  return colon < at && at != std::string::npos ? url.substr(colon + 1, at - colon - 1) : "";
}

// ---------------------------------------------------------------- no server needed

TEST(PostgresUrlTest, MalformedUrlsAreInvalidAndRedacted) {
  for (const std::string url : {"postgres://user:s3cr3t-pw@host/db?nosuchparam=1",
                                "postgresql://user:s3cr3t-pw@[::1/db", "postgres://h/db?password=s3cr3t-pw&bogus=1"}) {
    Result<std::unique_ptr<Engine>> engine = Open(url);
    ASSERT_FALSE(engine.ok()) << url;
    EXPECT_EQ(engine.status().code(), EINVAL) << engine.status().ToString();
    EXPECT_EQ(engine.status().message().find("s3cr3t-pw"), std::string::npos) << engine.status().message();
    EXPECT_EQ(engine.status().message().find('\n'), std::string::npos) << engine.status().message();
  }
  // A typo in the scheme must not print the password either.
  Result<std::unique_ptr<Engine>> typo = Open("postgre://user:s3cr3t-pw@host/db");
  EXPECT_EQ(typo.status().code(), EINVAL);
  EXPECT_EQ(typo.status().message().find("s3cr3t-pw"), std::string::npos) << typo.status().message();
  EXPECT_NE(typo.status().message().find("postgres://"), std::string::npos) << typo.status().message();
}

// Nothing listens on the port: EIO at once, naming the server but not the
// password.
TEST(PostgresUrlTest, ClosedPortFailsFastWithEIO) {
  const std::string url = "postgres://tessera:s3cr3t-pw@127.0.0.1:" + std::to_string(ClosedPort()) + "/tessera";
  const auto start = Clock::now();
  Result<std::unique_ptr<Engine>> engine = Open(url);
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), EIO) << engine.status().ToString();
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_NE(engine.status().message().find("127.0.0.1"), std::string::npos) << engine.status().message();
  EXPECT_EQ(engine.status().message().find("s3cr3t-pw"), std::string::npos) << engine.status().message();
}

// A server that accepts TCP connections but never answers: connect_timeout
// bounds the wait.
TEST(PostgresUrlTest, SilentServerTimesOutWithEIO) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  PostgresOptions options;
  options.connect_timeout_s = 1;
  const auto start = Clock::now();
  Result<std::unique_ptr<Engine>> engine = OpenPostgres(
      "postgres://tessera:s3cr3t-pw@127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/tessera", options);
  const auto elapsed = Clock::now() - start;
  close(fd);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), EIO) << engine.status().ToString();
  EXPECT_LT(elapsed, std::chrono::seconds(4));
  EXPECT_EQ(engine.status().message().find("s3cr3t-pw"), std::string::npos) << engine.status().message();
}

// ---------------------------------------------------------------- with a server

class PostgresKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = PgEnv("TESSERA_TEST_PG_URL");
    if (base_.empty()) GTEST_SKIP() << testing::kPgSkipMessage;
    schema_ = std::make_unique<PgSchema>(base_);
    url_ = schema_->url();
  }

  std::string base_;
  std::unique_ptr<PgSchema> schema_;  // outlives the engines of each test
  std::string url_;
};

TEST_F(PostgresKvTest, NameAndMessagesHideThePassword) {
  const std::string password = PasswordOf(base_);
  ASSERT_FALSE(password.empty()) << "TESSERA_TEST_PG_URL should carry a password";
  std::unique_ptr<Engine> engine = MustOpen(url_);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->Name(), "postgres");
  Result<std::unique_ptr<Engine>> long_scheme = Open("postgresql" + url_.substr(std::string("postgres").size()));
  ASSERT_TRUE(long_scheme.ok()) << long_scheme.status().ToString();
  EXPECT_EQ((*long_scheme)->Name(), "postgres");

  // Wrong password, missing database, an error inside a transaction.
  std::string wrong = base_;
  wrong.replace(wrong.find(password), password.size(), "wrong-password");
  Result<std::unique_ptr<Engine>> refused = Open(wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), EIO) << refused.status().ToString();
  EXPECT_EQ(refused.status().message().find(password), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("****"), std::string::npos) << refused.status().message();

  std::string no_db = base_.substr(0, base_.rfind('/')) + "/no_such_database";
  Result<std::unique_ptr<Engine>> missing = Open(no_db);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().find(password), std::string::npos) << missing.status().message();

  Status too_big = engine->Run([](Txn& txn) { return txn.Put(RandomBytes(100000), "v"); });
  EXPECT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.message().find(password), std::string::npos) << too_big.message();
  EXPECT_NE(too_big.message().find("postgres '"), std::string::npos) << too_big.message();

  // The password as a query parameter.
  const std::string in_query =
      "postgres://nobody@127.0.0.1:" + std::to_string(ClosedPort()) + "/x?password=" + password;
  Result<std::unique_ptr<Engine>> query = Open(in_query);
  ASSERT_FALSE(query.ok());
  EXPECT_EQ(query.status().message().find(password), std::string::npos) << query.status().message();
}

TEST_F(PostgresKvTest, UnixSocketUrl) {
  const std::string socket_url = PgEnv("TESSERA_TEST_PG_SOCKET_URL");
  if (socket_url.empty()) GTEST_SKIP() << "TESSERA_TEST_PG_SOCKET_URL is not set";
  std::unique_ptr<Engine> tcp = MustOpen(url_);
  std::unique_ptr<Engine> unix_socket = MustOpen(schema_->UrlFrom(socket_url));
  ASSERT_TRUE(tcp && unix_socket);
  ASSERT_OK(tcp->Run([](Txn& txn) { return txn.Put("k", "over tcp"); }));
  Result<std::string> value = testing::GetValue(*unix_socket, "k");
  ASSERT_OK(value.status());
  EXPECT_EQ(*value, "over tcp");
}

// libpq takes a password missing from the URL from PGPASSWORD.
TEST_F(PostgresKvTest, PasswordFromPgpassword) {
  const std::string password = PasswordOf(base_);
  std::string without = url_;
  without.erase(without.find(":" + password + "@"), password.size() + 1);
  ASSERT_EQ(without.find(password), std::string::npos);
  setenv("PGPASSWORD", password.c_str(), 1);
  Result<std::unique_ptr<Engine>> engine = Open(without);
  unsetenv("PGPASSWORD");
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_OK((*engine)->Run([](Txn& txn) { return txn.Put("k", "v"); }));
}

// Increments of one key from many threads conflict (serialization failures,
// retried): none is lost, and retries did happen.
TEST_F(PostgresKvTest, ContendedCounterLosesNothing) {
  std::unique_ptr<Engine> engine = MustOpen(url_);
  ASSERT_NE(engine, nullptr);
  constexpr int kThreads = 8;
  constexpr int kIncrements = 100;
  std::atomic<int> attempts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        EXPECT_OK(engine->Run([&](Txn& txn) {
          ++attempts;
          return txn.Incr("counter", 1).status();
        }));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(Counter(*engine, "counter"), kThreads * kIncrements);
  EXPECT_GT(attempts.load(), kThreads * kIncrements) << "expected some serialization failures to be retried";
  std::printf("%d attempts for %d increments\n", attempts.load(), kThreads * kIncrements);
}

// Two engines stand for two clients (two pools): for each key, both run
// "create if absent" at once; exactly one succeeds and the other sees EEXIST.
TEST_F(PostgresKvTest, TwoClientsCreatingOneNameExactlyOneWins) {
  std::unique_ptr<Engine> clients[2] = {MustOpen(url_), MustOpen(url_)};
  ASSERT_TRUE(clients[0] && clients[1]);
  constexpr int kRounds = 50;
  std::barrier sync(2);
  int wins[2] = {0, 0};
  int other_errors = 0;
  std::mutex mu;
  auto race = [&](int who) {
    for (int round = 0; round < kRounds; ++round) {
      const std::string key = "entry/" + std::to_string(round);
      sync.arrive_and_wait();
      Status status = clients[who]->Run([&](Txn& txn) {
        Result<std::string> existing = txn.Get(key);
        if (existing.ok()) return Status::Err(EEXIST, "exists");
        if (!existing.status().not_found()) return existing.status();
        return txn.Put(key, std::to_string(who));
      });
      std::lock_guard lock(mu);
      if (status.ok()) {
        ++wins[who];
      } else if (status.code() != EEXIST) {
        ++other_errors;
        ADD_FAILURE() << status.ToString();
      }
    }
  };
  std::thread a(race, 0), b(race, 1);
  a.join();
  b.join();
  EXPECT_EQ(other_errors, 0);
  EXPECT_EQ(wins[0] + wins[1], kRounds);
  // Each key holds its one winner's mark.
  int marks[2] = {0, 0};
  ASSERT_OK(clients[0]->Run(
      [&](Txn& txn) {
        marks[0] = marks[1] = 0;
        return txn.Scan("entry/", PrefixEnd("entry/"), 0, [&](std::string_view, std::string_view v) {
          ++marks[v == "1" ? 1 : 0];
          return true;
        });
      },
      true));
  EXPECT_EQ(marks[0], wins[0]);
  EXPECT_EQ(marks[1], wins[1]);
}

// Write skew: each transaction reads both keys and writes the other one's
// guard only if neither is set. Snapshot isolation (REPEATABLE READ) would
// let both commit; SERIALIZABLE lets one.
TEST_F(PostgresKvTest, NoWriteSkew) {
  std::unique_ptr<Engine> clients[2] = {MustOpen(url_), MustOpen(url_)};
  ASSERT_TRUE(clients[0] && clients[1]);
  constexpr int kRounds = 30;
  std::barrier sync(2);
  std::atomic<int> both{0};
  auto race = [&](int who) {
    for (int round = 0; round < kRounds; ++round) {
      const std::string mine = "g/" + std::to_string(round) + "/" + std::to_string(who);
      const std::string theirs = "g/" + std::to_string(round) + "/" + std::to_string(1 - who);
      sync.arrive_and_wait();
      Status status = clients[who]->Run([&](Txn& txn) {
        if (txn.Get(theirs).ok()) return Status::Err(EEXIST, "taken");
        return txn.Put(mine, "x");
      });
      EXPECT_TRUE(status.ok() || status.code() == EEXIST) << status.ToString();
    }
  };
  std::thread a(race, 0), b(race, 1);
  a.join();
  b.join();
  ASSERT_OK(clients[0]->Run(
      [&](Txn& txn) {
        both = 0;
        for (int round = 0; round < kRounds; ++round) {
          const std::string prefix = "g/" + std::to_string(round) + "/";
          if (txn.Get(prefix + "0").ok() && txn.Get(prefix + "1").ok()) ++both;
        }
        return Status::OK();
      },
      true));
  EXPECT_EQ(both.load(), 0);
}

// fn ignoring a failed statement must not turn into a silent rollback: in
// PostgreSQL the error aborts the transaction and COMMIT merely rolls back.
TEST_F(PostgresKvTest, IgnoredErrorDoesNotReportSuccess) {
  std::unique_ptr<Engine> engine = MustOpen(url_);
  ASSERT_NE(engine, nullptr);
  const std::string huge = RandomBytes(100000);
  Status status = engine->Run([&](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("a", "1"));
    EXPECT_FALSE(txn.Put(huge, "v").ok());
    return Status::OK();
  });
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), EIO) << status.ToString();
  EXPECT_EQ(engine->Run([](Txn& txn) { return txn.Get("a").status(); }, true).code(), ENOENT);
  EXPECT_OK(engine->Run([](Txn& txn) { return txn.Put("b", "2"); }));
}

// Clients opening a new schema at once all create (or find) the table.
TEST_F(PostgresKvTest, EnginesRacingToCreateTheTable) {
  constexpr int kEngines = 6;
  std::vector<std::thread> threads;
  std::barrier sync(kEngines);
  std::atomic<int> failures{0};
  for (int i = 0; i < kEngines; ++i) {
    threads.emplace_back([&] {
      sync.arrive_and_wait();
      Result<std::unique_ptr<Engine>> engine = OpenPostgres(url_);
      if (!engine.ok() || !(*engine)->Run([](Txn& txn) { return txn.Incr("opened", 1).status(); }).ok()) {
        ++failures;
        ADD_FAILURE() << engine.status().ToString();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  std::unique_ptr<Engine> engine = MustOpen(url_);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(Counter(*engine, "opened"), kEngines);
}

// The pool never holds more than max_connections connections.
TEST_F(PostgresKvTest, PoolIsBounded) {
  const std::string app = "tessera_pool_" + std::to_string(getpid());
  PostgresOptions options;
  options.max_connections = 3;
  std::unique_ptr<Engine> engine = MustOpen(testing::WithPgParam(url_, "application_name=" + app), options);
  ASSERT_NE(engine, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        EXPECT_OK(engine->Run([&](Txn& txn) { return txn.Put("k" + std::to_string(t), std::to_string(i)); }));
        EXPECT_OK(engine->Run([&](Txn& txn) { return txn.Get("k" + std::to_string(t)).status(); }, true));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  // Counted from SQL through a helper connection (not through the kv API).
  PGconn* conn = PQconnectdb(base_.c_str());
  ASSERT_EQ(PQstatus(conn), CONNECTION_OK);
  const std::string sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + app + "'";
  PGresult* result = PQexec(conn, sql.c_str());
  ASSERT_EQ(PQresultStatus(result), PGRES_TUPLES_OK) << PQresultErrorMessage(result);
  const int count = std::atoi(PQgetvalue(result, 0, 0));
  PQclear(result);
  PQfinish(conn);
  EXPECT_GE(count, 1);
  EXPECT_LE(count, 3);
}

// After a server restart every pooled connection is dead; the next
// transactions reconnect and succeed.
TEST_F(PostgresKvTest, ServerRestartReconnects) {
  const std::string restart = PgEnv("TESSERA_TEST_PG_RESTART");
  if (restart.empty()) GTEST_SKIP() << "TESSERA_TEST_PG_RESTART is not set";
  std::unique_ptr<Engine> engine = MustOpen(url_);
  ASSERT_NE(engine, nullptr);
  // Fill the pool with several connections.
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        EXPECT_OK(engine->Run([&](Txn& txn) { return txn.Incr("c" + std::to_string(t), 1).status(); }));
    });
  }
  for (auto& thread : threads) thread.join();

  ASSERT_EQ(std::system(restart.c_str()), 0) << restart;

  threads.clear();
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        EXPECT_OK(engine->Run([&](Txn& txn) { return txn.Incr("c" + std::to_string(t), 1).status(); }));
      EXPECT_OK(engine->Run([&](Txn& txn) { return txn.Get("c" + std::to_string(t)).status(); }, true));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(Counter(*engine, "c" + std::to_string(t)), 40) << t;
}

}  // namespace
}  // namespace tessera::kv
