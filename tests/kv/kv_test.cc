// Key helpers and Open(url) (src/kv/kv.cc).
#include "kv/kv.h"

#include <filesystem>

#include "kv_test_util.h"

namespace tessera::kv {
namespace {

using testing::TempDir;

TEST(KeyHelpersTest, BigEndianRoundTripAndOrder) {
  std::string s = "p";
  AppendU64BE(&s, 0x0102030405060708ull);
  AppendU32BE(&s, 0xa0b0c0d0u);
  ASSERT_EQ(s.size(), 13u);
  EXPECT_EQ(s.substr(1, 8), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(ReadU64BE(std::string_view(s).substr(1)), 0x0102030405060708ull);
  EXPECT_EQ(ReadU32BE(std::string_view(s).substr(9)), 0xa0b0c0d0u);

  // Encoded integers sort like the integers.
  const uint64_t values[] = {0, 1, 255, 256, 65535, 1ull << 32, UINT64_MAX - 1, UINT64_MAX};
  for (size_t i = 1; i < std::size(values); ++i) {
    std::string a, b;
    AppendU64BE(&a, values[i - 1]);
    AppendU64BE(&b, values[i]);
    EXPECT_LT(a, b) << values[i];
    EXPECT_EQ(ReadU64BE(b), values[i]);
  }
}

TEST(KeyHelpersTest, PrefixEnd) {
  using namespace std::string_literals;
  EXPECT_EQ(PrefixEnd("abc"), "abd");
  EXPECT_EQ(PrefixEnd("ab\xff"s), "ac");
  EXPECT_EQ(PrefixEnd("a\xff\xff"s), "b");
  EXPECT_EQ(PrefixEnd("a\x00"s), "a\x01"s);
  EXPECT_EQ(PrefixEnd("\x7f"s), "\x80"s);
  EXPECT_EQ(PrefixEnd("\xff\xff"s), "");
  EXPECT_EQ(PrefixEnd(""), "");
  // Every extension of the prefix sorts below PrefixEnd.
  EXPECT_LT("ab\xff\xff\xff"s, PrefixEnd("ab"));
  EXPECT_LT("ab\xfe"s, PrefixEnd("ab\xfe"s));
}

TEST(OpenTest, MalformedUrlsAreInvalid) {
  for (const std::string url :
       {"", "memory", "sqlite3:/tmp/x.db", "foo://x", "sqlite3://", "://x", "sqlite3://:memory:"}) {
    Result<std::unique_ptr<Engine>> engine = Open(url);
    ASSERT_FALSE(engine.ok()) << url;
    EXPECT_EQ(engine.status().code(), EINVAL) << url;
    EXPECT_NE(engine.status().message().find("'" + url + "'"), std::string::npos) << engine.status().message();
    EXPECT_EQ(engine.status().message().find('\n'), std::string::npos);
  }
  EXPECT_NE(Open("foo://x").status().message().find("sqlite3://PATH"), std::string::npos);
  EXPECT_NE(Open("sqlite3://").status().message().find("sqlite3://PATH"), std::string::npos);
}

TEST(OpenTest, MemoryEnginesShareDataByName) {
  Result<std::unique_ptr<Engine>> a = Open("memory://vol");
  Result<std::unique_ptr<Engine>> b = Open("memory://vol");
  Result<std::unique_ptr<Engine>> other = Open("memory://other");
  Result<std::unique_ptr<Engine>> anonymous = Open("memory://");
  ASSERT_TRUE(a.ok() && b.ok() && other.ok() && anonymous.ok());
  EXPECT_EQ((*a)->Name(), "memory");
  ASSERT_OK((*a)->Run([](Txn& txn) { return txn.Put("k", "v"); }));
  auto has_key = [](Engine& engine) { return engine.Run([](Txn& txn) { return txn.Get("k").status(); }, true).ok(); };
  EXPECT_TRUE(has_key(**b));
  EXPECT_FALSE(has_key(**other));
  EXPECT_FALSE(has_key(**anonymous));
  // The store lives while an engine uses it.
  a->reset();
  b->reset();
  Result<std::unique_ptr<Engine>> again = Open("memory://vol");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(has_key(**again));
}

// Relative paths: sqlite_kv_test.cc RelativePathSurvivesChdir.
TEST(OpenTest, SqliteCreatesTheFile) {
  TempDir dir;
  Result<std::unique_ptr<Engine>> absolute = Open("sqlite3://" + (dir.path() / "abs.db").string());
  ASSERT_TRUE(absolute.ok()) << absolute.status().ToString();
  EXPECT_EQ((*absolute)->Name(), "sqlite3");
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "abs.db"));
}

TEST(OpenTest, SqliteMissingParentDirectory) {
  TempDir dir;
  const std::string path = (dir.path() / "no-such-dir" / "meta.db").string();
  Result<std::unique_ptr<Engine>> engine = Open("sqlite3://" + path);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), ENOENT);
  EXPECT_NE(engine.status().message().find(path), std::string::npos) << engine.status().message();
}

}  // namespace
}  // namespace tessera::kv
