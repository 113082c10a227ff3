#include "chunk/mem_cache.h"

#include <map>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::chunk {
namespace {

BlockRef Block(size_t n, char c) { return std::make_shared<const std::string>(n, c); }

TEST(MemBlockCacheTest, EvictsLeastRecentlyUsedFirst) {
  MemBlockCache cache(300);
  cache.Put("a", Block(100, 'a'));
  cache.Put("b", Block(100, 'b'));
  cache.Put("c", Block(100, 'c'));
  EXPECT_EQ(cache.bytes(), 300u);
  ASSERT_NE(cache.Get("a"), nullptr);  // a is now the most recently used; b the least

  cache.Put("d", Block(100, 'd'));
  EXPECT_EQ(cache.Get("b"), nullptr);
  cache.Put("e", Block(100, 'e'));
  EXPECT_EQ(cache.Get("c"), nullptr);
  for (const char* key : {"a", "d", "e"}) {
    BlockRef got = cache.Get(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(*got, std::string(100, key[0]));
  }
  EXPECT_EQ(cache.bytes(), 300u);
  EXPECT_EQ(cache.blocks(), 3u);
}

TEST(MemBlockCacheTest, LargeBlockEvictsSeveralSmallOnes) {
  MemBlockCache cache(300);
  cache.Put("a", Block(100, 'a'));
  cache.Put("b", Block(100, 'b'));
  cache.Put("c", Block(100, 'c'));
  cache.Put("big", Block(250, 'x'));  // needs a, b and c gone
  EXPECT_EQ(cache.blocks(), 1u);
  EXPECT_EQ(cache.bytes(), 250u);
  cache.Put("d", Block(50, 'd'));  // fits next to it
  EXPECT_EQ(cache.bytes(), 300u);
  EXPECT_NE(cache.Get("big"), nullptr);
}

TEST(MemBlockCacheTest, BlockLargerThanCapacityIsNotKept) {
  MemBlockCache cache(100);
  cache.Put("a", Block(60, 'a'));
  cache.Put("huge", Block(101, 'h'));
  EXPECT_EQ(cache.Get("huge"), nullptr);
  EXPECT_NE(cache.Get("a"), nullptr);  // and it evicted nothing
}

TEST(MemBlockCacheTest, ReplaceAndEraseKeepBytesExact) {
  MemBlockCache cache(1000);
  cache.Put("a", Block(100, 'a'));
  cache.Put("a", Block(40, 'A'));
  EXPECT_EQ(cache.bytes(), 40u);
  EXPECT_EQ(*cache.Get("a"), std::string(40, 'A'));
  cache.Erase("a");
  cache.Erase("missing");
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.blocks(), 0u);
  EXPECT_EQ(cache.Get("a"), nullptr);
}

TEST(MemBlockCacheTest, ZeroCapacityKeepsNothing) {
  MemBlockCache cache(0);
  cache.Put("a", Block(1, 'a'));
  EXPECT_EQ(cache.Get("a"), nullptr);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(MemBlockCacheTest, RandomLoadAgainstModel) {
  constexpr uint64_t kCapacity = 5000;
  MemBlockCache cache(kCapacity);
  std::mt19937 rng(3);
  std::map<std::string, size_t> sizes;  // what each key would hold if cached
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "k" + std::to_string(rng() % 100);
    switch (rng() % 3) {
      case 0: {
        const size_t n = 1 + rng() % 800;
        cache.Put(key, Block(n, key[1]));
        sizes[key] = n;
        break;
      }
      case 1:
        if (BlockRef got = cache.Get(key)) {
          EXPECT_EQ(got->size(), sizes[key]);
        }
        break;
      default:
        cache.Erase(key);
    }
    ASSERT_LE(cache.bytes(), kCapacity);
  }
  uint64_t sum = 0;
  for (const auto& [key, n] : sizes) {
    if (BlockRef got = cache.Get(key)) sum += got->size();
  }
  EXPECT_EQ(cache.bytes(), sum);
}

TEST(MemBlockCacheTest, ConcurrentUseStaysBounded) {
  constexpr uint64_t kCapacity = 10000;
  MemBlockCache cache(kCapacity);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng{uint32_t(t)};
      for (int i = 0; i < 20000; ++i) {
        const std::string key = std::to_string(rng() % 64);
        const size_t n = 100 + std::stoul(key) * 10;  // a key's size never changes
        if (rng() % 2) {
          cache.Put(key, Block(n, 'x'));
        } else if (BlockRef got = cache.Get(key)) {
          EXPECT_EQ(got->size(), n);
        }
        if (i % 1000 == 0) {
          EXPECT_LE(cache.bytes(), kCapacity);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(cache.bytes(), kCapacity);
}

}  // namespace
}  // namespace tessera::chunk
