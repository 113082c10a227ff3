// One suite for every kv::Engine backend: the contract of src/kv/kv.h.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "kv/kv.h"
#include "kv_test_util.h"
#include "pg_test_util.h"

namespace tessera::kv {
namespace {

using testing::TempDir;
using Pairs = std::vector<std::pair<std::string, std::string>>;

// The Incr counter format: 8-byte little-endian int64.
std::string EncodeCounter(int64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
  return s;
}
int64_t DecodeCounter(std::string_view s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s.at(i));
  return static_cast<int64_t>(v);
}

struct MemoryBackend {
  static std::string Url(const TempDir&) { return "memory://"; }
};
struct SqliteBackend {
  static std::string Url(const TempDir& dir) { return "sqlite3://" + (dir.path() / "meta.db").string(); }
};
// With a commit delay no test reaches: write transactions are committed
// only by reads, by the 256th in a row, or at close (sql_kv.h).
struct SqliteDelayedBackend {
  static std::string Url(const TempDir& dir) { return SqliteBackend::Url(dir); }
  static OpenOptions Options() {
    OpenOptions options;
    options.commit_delay = std::chrono::hours(1);
    return options;
  }
};
// TESSERA_TEST_PG_URL, each test in a fresh schema (pg_test_util.h).
struct PostgresBackend {};

template <typename Backend>
class KvConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string url;
    if constexpr (std::is_same_v<Backend, PostgresBackend>) {
      const std::string base = testing::PgEnv("TESSERA_TEST_PG_URL");
      if (base.empty()) GTEST_SKIP() << testing::kPgSkipMessage;
      pg_schema_ = std::make_unique<testing::PgSchema>(base);
      url = pg_schema_->url();
    } else {
      url = Backend::Url(dir_);
    }
    OpenOptions options;
    if constexpr (std::is_same_v<Backend, SqliteDelayedBackend>) options = Backend::Options();
    Result<std::unique_ptr<Engine>> engine = Open(url, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  Status Put(std::string_view key, std::string_view value) {
    return engine_->Run([&](Txn& txn) { return txn.Put(key, value); });
  }
  Status Delete(std::string_view key) {
    return engine_->Run([&](Txn& txn) { return txn.Delete(key); });
  }
  Result<std::string> Get(std::string_view key) { return testing::GetValue(*engine_, key); }
  Pairs Scan(std::string_view begin, std::string_view end, size_t limit = 0) {
    Pairs out;
    EXPECT_OK(engine_->Run(
        [&](Txn& txn) {
          out.clear();
          return txn.Scan(begin, end, limit, [&](std::string_view k, std::string_view v) {
            out.emplace_back(k, v);
            return true;
          });
        },
        true));
    return out;
  }

  TempDir dir_;
  std::unique_ptr<testing::PgSchema> pg_schema_;  // outlives engine_
  std::unique_ptr<Engine> engine_;
};

class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, MemoryBackend>) return "memory";
    if constexpr (std::is_same_v<T, SqliteBackend>) return "sqlite3";
    if constexpr (std::is_same_v<T, SqliteDelayedBackend>) return "sqlite3_delayed";
    return "postgres";
  }
};
using Backends = ::testing::Types<MemoryBackend, SqliteBackend, SqliteDelayedBackend, PostgresBackend>;
TYPED_TEST_SUITE(KvConformanceTest, Backends, BackendNames);

TYPED_TEST(KvConformanceTest, PutGetDelete) {
  ASSERT_OK(this->Put("a", "1"));
  Result<std::string> got = this->Get("a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "1");
  ASSERT_OK(this->Delete("a"));
  EXPECT_EQ(this->Get("a").status().code(), ENOENT);
}

// PutMany (postgres: one statement of bytea arrays per 1,000 rows) stores
// binary keys and values, empty values included, and overwrites.
TYPED_TEST(KvConformanceTest, PutManyStoresEveryPair) {
  using namespace std::string_literals;
  ASSERT_OK(this->Put("k\0" "0005"s, "old"));
  Txn::KeyValues kvs;
  for (int i = 0; i < 2500; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "%04d", i);
    kvs.emplace_back("k\0"s + key, i % 7 == 0 ? ""s : "v\xff\0"s + std::to_string(i));
  }
  ASSERT_OK(this->engine_->Run([&](Txn& txn) { return txn.PutMany(kvs); }));
  size_t seen = 0;
  ASSERT_OK(this->engine_->Run(
      [&](Txn& txn) {
        return txn.Scan("k"s, "l"s, 0, [&](std::string_view k, std::string_view v) {
          EXPECT_EQ(k, kvs[seen].first);
          EXPECT_EQ(v, kvs[seen].second);
          ++seen;
          return true;
        });
      },
      true));
  EXPECT_EQ(seen, kvs.size());
}

TYPED_TEST(KvConformanceTest, MissingKeyIsNotFound) {
  Result<std::string> got = this->Get("missing");
  EXPECT_EQ(got.status().code(), ENOENT);
  EXPECT_TRUE(got.status().not_found());
  EXPECT_OK(this->Delete("missing"));  // deleting a missing key is not an error
}

TYPED_TEST(KvConformanceTest, OverwriteReplacesValue) {
  ASSERT_OK(this->Put("k", "first"));
  ASSERT_OK(this->Put("k", "second, longer"));
  EXPECT_EQ(*this->Get("k"), "second, longer");
  ASSERT_OK(this->Put("k", ""));
  Result<std::string> empty = this->Get("k");
  ASSERT_TRUE(empty.ok()) << "an empty value is a value";
  EXPECT_EQ(*empty, "");
}

TYPED_TEST(KvConformanceTest, BinaryKeysAndValuesOrderBytewise) {
  using namespace std::string_literals;
  // Ascending bytewise: a key sorts before its extensions, 0x00 is smallest
  // and 0xff largest (unsigned).
  const std::vector<std::string> keys = {"\x00"s,     "\x00\x00"s, "\x01"s,     "a"s,       "a\x00"s,
                                         "a\x00z"s,   "a\x01"s,    "b"s,        "\x7f"s,    "\x80"s,
                                         "\xfe\xff"s, "\xff"s,     "\xff\x00"s, "\xff\xff"s};
  for (size_t i = keys.size(); i-- > 0;) ASSERT_OK(this->Put(keys[i], "v\x00\xff"s + keys[i]));
  Pairs all = this->Scan("", "");
  ASSERT_EQ(all.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(all[i].first, keys[i]) << i;
    EXPECT_EQ(all[i].second, "v\x00\xff"s + keys[i]) << i;
    EXPECT_EQ(*this->Get(keys[i]), "v\x00\xff"s + keys[i]) << i;
  }
  EXPECT_EQ(this->Get("a\x00\x00"s).status().code(), ENOENT);
}

TYPED_TEST(KvConformanceTest, ScanBoundsLimitAndEarlyStop) {
  for (const char* k : {"a", "b", "c", "d", "e"}) ASSERT_OK(this->Put(k, std::string(k) + "!"));
  auto keys = [](const Pairs& pairs) {
    std::string s;
    for (const auto& p : pairs) s += p.first;
    return s;
  };
  EXPECT_EQ(keys(this->Scan("", "")), "abcde");
  EXPECT_EQ(keys(this->Scan("b", "d")), "bc");  // begin inclusive, end exclusive
  EXPECT_EQ(keys(this->Scan("bb", "dd")), "cd");
  EXPECT_EQ(keys(this->Scan("c", "")), "cde");
  EXPECT_EQ(keys(this->Scan("", "", 2)), "ab");
  EXPECT_EQ(keys(this->Scan("b", "", 10)), "bcde");
  EXPECT_EQ(keys(this->Scan("d", "b")), "");  // empty range
  EXPECT_EQ(keys(this->Scan("f", "")), "");
  EXPECT_EQ(this->Scan("c", "d")[0].second, "c!");

  std::string seen;
  ASSERT_OK(this->engine_->Run(
      [&](Txn& txn) {
        seen.clear();
        return txn.Scan("", "", 0, [&](std::string_view k, std::string_view) {
          seen += k;
          return k != "c";
        });
      },
      true));
  EXPECT_EQ(seen, "abc");
}

// Long scans cross the batch boundaries of backends that page through results.
TYPED_TEST(KvConformanceTest, LongScan) {
  constexpr int kKeys = 3000;
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    for (int i = 0; i < kKeys; ++i) {
      std::string key = "n/";
      AppendU32BE(&key, i);
      RETURN_IF_ERROR(txn.Put(key, std::to_string(i)));
    }
    return txn.Put("o", "after");
  }));
  Pairs all = this->Scan("n/", PrefixEnd("n/"));
  ASSERT_EQ(all.size(), size_t{kKeys});
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(ReadU32BE(std::string_view(all[i].first).substr(2)), uint32_t(i));
    ASSERT_EQ(all[i].second, std::to_string(i));
  }
  for (size_t limit : {1, 31, 32, 33, 1000, 2999, 3000, 3001}) {
    EXPECT_EQ(this->Scan("n/", PrefixEnd("n/"), limit).size(), std::min<size_t>(limit, kKeys)) << limit;
  }
  EXPECT_EQ(this->Scan("n/", "").size(), size_t{kKeys + 1});
}

TYPED_TEST(KvConformanceTest, TxnSeesItsOwnWrites) {
  for (const char* k : {"a", "c", "e", "g"}) ASSERT_OK(this->Put(k, "old"));
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("b", "new"));
    RETURN_IF_ERROR(txn.Delete("c"));
    RETURN_IF_ERROR(txn.Put("e", "new"));
    RETURN_IF_ERROR(txn.Put("h", "tmp"));
    RETURN_IF_ERROR(txn.Delete("h"));
    EXPECT_EQ(*txn.Get("b"), "new");
    EXPECT_EQ(txn.Get("c").status().code(), ENOENT);
    EXPECT_EQ(*txn.Get("e"), "new");
    EXPECT_EQ(txn.Get("h").status().code(), ENOENT);
    std::string seen;
    RETURN_IF_ERROR(txn.Scan("", "", 0, [&](std::string_view k, std::string_view v) {
      seen += std::string(k) + "=" + std::string(v) + " ";
      return true;
    }));
    EXPECT_EQ(seen, "a=old b=new e=new g=old ");
    seen.clear();
    RETURN_IF_ERROR(txn.Scan("b", "g", 2, [&](std::string_view k, std::string_view) {
      seen += k;
      return true;
    }));
    EXPECT_EQ(seen, "be");
    return Status::OK();
  }));
  EXPECT_EQ(this->Scan("", "").size(), 4u);
  EXPECT_EQ(*this->Get("e"), "new");
}

// The usual "delete everything under a prefix" loop: writing to the visited
// key from inside the scan callback is allowed.
TYPED_TEST(KvConformanceTest, DeleteVisitedKeysDuringScan) {
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    for (int i = 0; i < 100; ++i) RETURN_IF_ERROR(txn.Put("d/" + std::to_string(1000 + i), "x"));
    return txn.Put("e", "keep");
  }));
  int visited = 0;
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    visited = 0;
    Status inner;
    RETURN_IF_ERROR(txn.Scan("d/", PrefixEnd("d/"), 0, [&](std::string_view k, std::string_view) {
      ++visited;
      inner = txn.Delete(k);
      return inner.ok();
    }));
    return inner;
  }));
  EXPECT_EQ(visited, 100);
  Pairs left = this->Scan("", "");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].first, "e");
}

TYPED_TEST(KvConformanceTest, FailedTxnRollsBack) {
  ASSERT_OK(this->Put("keep", "v1"));
  Status status = this->engine_->Run([&](Txn& txn) {
    RETURN_IF_ERROR(txn.Put("new", "x"));
    RETURN_IF_ERROR(txn.Put("keep", "v2"));
    RETURN_IF_ERROR(txn.Delete("keep"));
    return Status::Err(EEXIST, "fn failed");
  });
  EXPECT_EQ(status.code(), EEXIST);
  EXPECT_EQ(status.message(), "fn failed");
  EXPECT_EQ(this->Get("new").status().code(), ENOENT);
  EXPECT_EQ(*this->Get("keep"), "v1");
  // The engine is usable afterwards.
  ASSERT_OK(this->Put("after", "ok"));
  EXPECT_EQ(this->Scan("", "").size(), 2u);
}

TYPED_TEST(KvConformanceTest, ReadOnlyTxnCannotWrite) {
  ASSERT_OK(this->Put("a", "1"));
  Status put_status;
  Status status = this->engine_->Run(
      [&](Txn& txn) {
        EXPECT_EQ(*txn.Get("a"), "1");
        put_status = txn.Put("b", "2");
        EXPECT_FALSE(txn.Delete("a").ok());
        return put_status;
      },
      true);
  EXPECT_EQ(put_status.code(), EINVAL);
  EXPECT_EQ(status.code(), EINVAL);
  EXPECT_EQ(this->Get("b").status().code(), ENOENT);
  EXPECT_EQ(*this->Get("a"), "1");
}

TYPED_TEST(KvConformanceTest, Incr) {
  auto incr = [&](std::string_view key, int64_t delta) -> Result<int64_t> {
    int64_t value = 0;
    Status status = this->engine_->Run([&](Txn& txn) {
      ASSIGN_OR_RETURN(value, txn.Incr(key, delta));
      return Status::OK();
    });
    if (!status.ok()) return status;
    return value;
  };
  EXPECT_EQ(*incr("c", 5), 5);  // missing = 0
  EXPECT_EQ(*incr("c", -7), -2);
  EXPECT_EQ(*incr("c", 0), -2);
  EXPECT_EQ(*this->Get("c"), std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8));  // little-endian -2
  EXPECT_EQ(*this->Get("c"), EncodeCounter(-2));
  ASSERT_OK(this->Put("c", EncodeCounter(256)));
  EXPECT_EQ(*incr("c", 1), 257);
  ASSERT_OK(this->Put("bad", "short"));
  EXPECT_EQ(incr("bad", 1).status().code(), EINVAL);
  EXPECT_EQ(*this->Get("bad"), "short");
  ASSERT_OK(this->engine_->Run([&](Txn& txn) { return txn.Incr("max", INT64_MAX).status(); }));
  EXPECT_EQ(incr("max", 1).status().code(), EOVERFLOW);
}

TYPED_TEST(KvConformanceTest, DropAll) {
  for (const char* k : {"a", "b", "c"}) ASSERT_OK(this->Put(k, "v"));
  ASSERT_OK(this->engine_->DropAll());
  EXPECT_TRUE(this->Scan("", "").empty());
  EXPECT_EQ(this->Get("a").status().code(), ENOENT);
  ASSERT_OK(this->Put("a", "again"));
  EXPECT_EQ(*this->Get("a"), "again");
}

TYPED_TEST(KvConformanceTest, ConcurrentIncrementsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kIncrements = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        Status status = this->engine_->Run([](Txn& txn) { return txn.Incr("counter", 1).status(); });
        if (!status.ok()) {
          ADD_FAILURE() << status.ToString();
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  int64_t total = 0;
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    ASSIGN_OR_RETURN(total, txn.Incr("counter", 0));
    return Status::OK();
  }));
  EXPECT_EQ(total, kThreads * kIncrements);
}

// Transfers between accounts read two balances and write both back; readers
// check in read-only transactions that the total never changes. Lost updates
// or torn reads would break the invariant.
TYPED_TEST(KvConformanceTest, ConcurrentTransfersKeepTheSum) {
  constexpr int kAccounts = 10;
  constexpr int64_t kInitial = 100;
  constexpr int kWriters = 4;
  constexpr int kTransfers = 300;
  auto account = [](int i) { return "acct/" + std::to_string(i); };
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    for (int i = 0; i < kAccounts; ++i) RETURN_IF_ERROR(txn.Incr(account(i), kInitial).status());
    return Status::OK();
  }));

  std::atomic<bool> done{false};
  std::atomic<int> errors{0};
  std::atomic<int> bad_sums{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      std::uniform_int_distribution<int> pick(0, kAccounts - 1);
      std::uniform_int_distribution<int> amount(1, 30);
      for (int i = 0; i < kTransfers; ++i) {
        const int from = pick(rng);
        const int to = (from + 1 + pick(rng) % (kAccounts - 1)) % kAccounts;
        const int64_t x = amount(rng);
        Status status = this->engine_->Run([&](Txn& txn) {
          ASSIGN_OR_RETURN(std::string a, txn.Get(account(from)));
          ASSIGN_OR_RETURN(std::string b, txn.Get(account(to)));
          RETURN_IF_ERROR(txn.Put(account(from), EncodeCounter(DecodeCounter(a) - x)));
          return txn.Put(account(to), EncodeCounter(DecodeCounter(b) + x));
        });
        if (!status.ok()) ++errors;
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      while (!done.load()) {
        int64_t sum = 0;
        int count = 0;
        Status status = this->engine_->Run(
            [&](Txn& txn) {
              sum = 0;
              count = 0;
              return txn.Scan("acct/", PrefixEnd("acct/"), 0, [&](std::string_view, std::string_view v) {
                sum += DecodeCounter(v);
                ++count;
                return true;
              });
            },
            true);
        if (!status.ok()) ++errors;
        if (count != kAccounts || sum != kAccounts * kInitial) ++bad_sums;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  done = true;
  for (size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(bad_sums.load(), 0);
  Pairs final = this->Scan("acct/", PrefixEnd("acct/"));
  int64_t sum = 0;
  for (const auto& [k, v] : final) sum += DecodeCounter(v);
  EXPECT_EQ(sum, kAccounts * kInitial);
}

// Not an assertion: prints small-transaction throughput for a rough feel.
TYPED_TEST(KvConformanceTest, Throughput) {
  using Clock = std::chrono::steady_clock;
  const auto budget = std::chrono::milliseconds(500);
  // Every key the read phase gets exists, however few writes the budget saw.
  ASSERT_OK(this->engine_->Run([&](Txn& txn) {
    for (uint32_t i = 0; i < 1000; ++i) {
      std::string key = "t/";
      AppendU32BE(&key, i);
      RETURN_IF_ERROR(txn.Put(key, "value-of-some-size"));
    }
    return Status::OK();
  }));
  auto measure = [&](bool read_only) {
    int n = 0;
    const auto start = Clock::now();
    while (Clock::now() - start < budget) {
      std::string key = "t/";
      AppendU32BE(&key, n % 1000);
      Status status = read_only ? this->engine_->Run([&](Txn& txn) { return txn.Get(key).status(); }, true)
                                : this->engine_->Run([&](Txn& txn) { return txn.Put(key, "value-of-some-size"); });
      EXPECT_OK(status);
      ++n;
    }
    return n / std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double writes = measure(false);
  const double reads = measure(true);
  std::printf("[ %s ] %.0f write txn/s (1 put), %.0f read txn/s (1 get), 1 thread\n", this->engine_->Name().c_str(),
              writes, reads);
}

}  // namespace
}  // namespace tessera::kv
