#include "common/url.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(UrlTest, RedactUrlMasksPasswords) {
  EXPECT_EQ(RedactUrl("redis://user:secret@host:6379/1"), "redis://user:****@host:6379/1");
  EXPECT_EQ(RedactUrl("redis://:secret@host/1"), "redis://:****@host/1");
  EXPECT_EQ(RedactUrl("postgres://u@h/db?password=secret&sslmode=disable"),
            "postgres://u@h/db?password=****&sslmode=disable");
  EXPECT_EQ(RedactUrl("sqlite3:///var/lib/x.db"), "sqlite3:///var/lib/x.db");
  EXPECT_EQ(RedactUrl("unix:///tmp/redis.sock?db=2"), "unix:///tmp/redis.sock?db=2");
}

TEST(UrlTest, HidePasswordsInArgsOverwritesInPlace) {
  std::vector<std::string> args = {"tessera", "mount", "redis://u:pa55@host:6379/1", "/mnt/x",
                                   "sqlite3:///a@b:c", "--bucket", "http://h:9000/b"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  HidePasswordsInArgs(int(argv.size()), argv.data());
  EXPECT_STREQ(argv[2], "redis://u:****@host:6379/1");
  EXPECT_STREQ(argv[3], "/mnt/x");
  EXPECT_STREQ(argv[4], "sqlite3:///a@b:c");  // a path, not credentials
  EXPECT_STREQ(argv[6], "http://h:9000/b");
}

}  // namespace
}  // namespace tessera
