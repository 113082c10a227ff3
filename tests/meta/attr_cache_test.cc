// The attribute cache's rules (meta/attr_cache.h): a value is kept only if
// nothing changed its inode after the transaction that read or wrote it
// began; overlapping writers forget; a loss or a stop drops everything and
// refuses what began before it; nothing is used before Start's grace.
#include "meta/attr_cache.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace tessera::meta {
namespace {

Attr WithMode(uint32_t mode) {
  Attr a;
  a.mode = S_IFREG | mode;
  a.nlink = 1;
  return a;
}
AttrCache::Value V(Ino ino, uint32_t mode) { return AttrCache::Value{ino, true, WithMode(mode)}; }

class AttrCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_.Start(0);
    ASSERT_TRUE(cache_.Active());
  }
  uint32_t Mode(Ino ino) {
    Attr a;
    return cache_.Get(ino, &a) ? a.mode & 07777 : 0;
  }
  AttrCache cache_;
};

TEST_F(AttrCacheTest, NothingIsUsedBeforeStartOrDuringItsGrace) {
  AttrCache cache;
  EXPECT_FALSE(cache.Active());
  cache.Filled(cache.Now(), {V(1, 0644)});
  cache.Committed(cache.Now(), true, {V(2, 0644)});
  Attr a;
  EXPECT_FALSE(cache.Get(1, &a));
  EXPECT_FALSE(cache.Get(2, &a));
  cache.Start(200);
  EXPECT_FALSE(cache.Active());
  cache.Filled(cache.Now(), {V(1, 0644)});
  EXPECT_FALSE(cache.Get(1, &a));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(cache.Active());
  cache.Filled(cache.Now(), {V(1, 0644)});
  EXPECT_TRUE(cache.Get(1, &a));
}

TEST_F(AttrCacheTest, ReadsAndCommitsAreKept) {
  cache_.Filled(cache_.Now(), {V(1, 0644), V(2, 0600)});
  EXPECT_EQ(Mode(1), 0644u);
  EXPECT_EQ(Mode(2), 0600u);
  cache_.Committed(cache_.Now(), true, {V(1, 0640)});
  EXPECT_EQ(Mode(1), 0640u);
  cache_.Committed(cache_.Now(), true, {AttrCache::Value{2, false, {}}});  // deleted
  EXPECT_EQ(Mode(2), 0u);
}

// A read that began before a change of its inode may hold the old value.
TEST_F(AttrCacheTest, AReadOlderThanAChangeIsNotKept) {
  const uint64_t before = cache_.Now();
  cache_.Committed(cache_.Now(), true, {V(1, 0640)});
  cache_.Filled(before, {V(1, 0644)});  // read the record before the commit
  EXPECT_EQ(Mode(1), 0640u);
  cache_.Invalidate({1});  // another client changed it
  cache_.Filled(before, {V(1, 0644)});
  EXPECT_EQ(Mode(1), 0u);
  cache_.Filled(cache_.Now(), {V(1, 0600)});  // read after the change
  EXPECT_EQ(Mode(1), 0600u);
}

// Two writers of one inode that overlap: either may have committed last,
// whichever order they report in.
TEST_F(AttrCacheTest, OverlappingWritersForgetTheInode) {
  for (bool first_reports_first : {true, false}) {
    const Ino ino = first_reports_first ? 1 : 2;
    const uint64_t a = cache_.Now(), b = cache_.Now();
    if (first_reports_first) {
      cache_.Committed(a, true, {V(ino, 0601)});
      cache_.Committed(b, true, {V(ino, 0602)});
    } else {
      cache_.Committed(b, true, {V(ino, 0602)});
      cache_.Committed(a, true, {V(ino, 0601)});
    }
    EXPECT_EQ(Mode(ino), 0u) << first_reports_first;
  }
  // Writers of different inodes do not disturb each other.
  const uint64_t a = cache_.Now(), b = cache_.Now();
  cache_.Committed(a, true, {V(3, 0603)});
  cache_.Committed(b, true, {V(4, 0604)});
  EXPECT_EQ(Mode(3), 0603u);
  EXPECT_EQ(Mode(4), 0604u);
}

TEST_F(AttrCacheTest, AFailedOrUnknownWriteForgetsWhatItTouched) {
  cache_.Filled(cache_.Now(), {V(1, 0644)});
  cache_.Committed(cache_.Now(), false, {V(1, 0600)});
  EXPECT_EQ(Mode(1), 0u);
  // Its stamp also refuses a read that began before it ended.
  const uint64_t before = cache_.Now();
  cache_.Committed(cache_.Now(), false, {AttrCache::Value{1, false, {}}});
  cache_.Filled(before, {V(1, 0644)});
  EXPECT_EQ(Mode(1), 0u);
}

TEST_F(AttrCacheTest, LostDropsEverythingAndRefusesWhatBeganBefore) {
  const uint64_t before = cache_.Now();
  cache_.Filled(before, {V(1, 0644)});
  cache_.Lost(0);
  EXPECT_EQ(Mode(1), 0u);
  EXPECT_TRUE(cache_.Active());  // re-armed: no brief time asked
  cache_.Filled(before, {V(2, 0644)});
  cache_.Committed(before, true, {V(3, 0644)});
  EXPECT_EQ(Mode(2), 0u);
  EXPECT_EQ(Mode(3), 0u);
  cache_.Lost(10'000);
  EXPECT_FALSE(cache_.Active());
  cache_.Filled(cache_.Now(), {V(4, 0644)});
  Attr a;
  EXPECT_FALSE(cache_.Get(4, &a));
}

TEST_F(AttrCacheTest, StopDropsEverythingAndKeepsNothing) {
  cache_.Filled(cache_.Now(), {V(1, 0644)});
  cache_.Stop();
  EXPECT_FALSE(cache_.Active());
  Attr a;
  EXPECT_FALSE(cache_.Get(1, &a));
  cache_.Committed(cache_.Now(), true, {V(1, 0644)});
  EXPECT_FALSE(cache_.Get(1, &a));
  EXPECT_EQ(cache_.size(), 0u);
}

TEST(AttrCacheBoundTest, AFullCacheStartsOverAndRefusesOlderValues) {
  AttrCache cache(4);
  cache.Start(0);
  ASSERT_TRUE(cache.Active());
  const uint64_t before = cache.Now();
  for (Ino i = 1; i <= 4; ++i) cache.Filled(cache.Now(), {V(i, 0644)});
  EXPECT_EQ(cache.size(), 4u);
  cache.Filled(cache.Now(), {V(5, 0644)});  // full: dropped everything first
  EXPECT_LE(cache.size(), 1u);
  Attr a;
  EXPECT_FALSE(cache.Get(1, &a));
  cache.Filled(before, {V(6, 0644)});
  EXPECT_FALSE(cache.Get(6, &a));
}

}  // namespace
}  // namespace tessera::meta
