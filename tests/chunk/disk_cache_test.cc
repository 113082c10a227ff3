#include "chunk/disk_cache.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "chunk/layout.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

namespace fs = std::filesystem;
using testing::DiskUsage;
using testing::FlipByte;
using testing::TempDir;

constexpr uint32_t kLen = 100;
constexpr uint64_t kFile = kDiskCacheHeaderSize + kLen;  // bytes of one cached block of kLen

std::string Key(uint64_t id, uint32_t len = kLen) { return BlockKey(id, 0, len); }
BlockRef Data(uint64_t id, uint32_t len = kLen) {
  std::string s(len, '\0');
  for (uint32_t i = 0; i < len; ++i) s[i] = char(id * 31 + i);
  return std::make_shared<const std::string>(std::move(s));
}

class DiskBlockCacheTest : public ::testing::Test {
 protected:
  DiskCacheOptions Options(uint64_t capacity) {
    DiskCacheOptions opts;
    opts.dir = dir_.path() + "/vol";
    opts.capacity_bytes = capacity;
    opts.free_space_ratio = 0;
    opts.async_writes = false;
    opts.seed = 42;
    return opts;
  }
  std::unique_ptr<DiskBlockCache> Open(DiskCacheOptions opts) {
    Result<std::unique_ptr<DiskBlockCache>> cache = DiskBlockCache::Open(std::move(opts));
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? std::move(cache).value() : nullptr;
  }
  std::unique_ptr<DiskBlockCache> Open(uint64_t capacity) { return Open(Options(capacity)); }

  bool Has(DiskBlockCache* cache, uint64_t id) {
    BlockRef got = cache->Get(Key(id), kLen);
    if (got) {
      EXPECT_EQ(*got, *Data(id));
    }
    return got != nullptr;
  }
  uint64_t Usage() { return DiskUsage(dir_.path() + "/vol/raw"); }

  TempDir dir_;
};

TEST_F(DiskBlockCacheTest, RoundTripAndFileFormat) {
  auto cache = Open(1 << 20);
  cache->Put(Key(1), Data(1));
  EXPECT_TRUE(Has(cache.get(), 1));
  EXPECT_EQ(cache->Get(Key(2), kLen), nullptr);

  const std::string path = cache->PathOf(Key(1));
  EXPECT_EQ(path, dir_.path() + "/vol/raw/" + Key(1));
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(file.size(), kFile);
  EXPECT_EQ(file.substr(0, 4), "TSBC");
  EXPECT_EQ(file.substr(4, 4), std::string("\1\0\0\0", 4));                    // version 1
  EXPECT_EQ(file.substr(8, 8), std::string("\x64\0\0\0\0\0\0\0", 8));          // length 100
  EXPECT_EQ(file.substr(kDiskCacheHeaderSize), *Data(1));
  EXPECT_EQ(cache->stats().bytes, kFile);
  EXPECT_EQ(cache->stats().blocks, 1u);
}

TEST_F(DiskBlockCacheTest, IndexSurvivesReopen) {
  {
    auto cache = Open(1 << 20);
    for (uint64_t id = 1; id <= 5; ++id) cache->Put(Key(id), Data(id));
  }
  auto cache = Open(1 << 20);
  EXPECT_EQ(cache->stats().blocks, 5u);
  EXPECT_EQ(cache->stats().bytes, 5 * kFile);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_TRUE(Has(cache.get(), id)) << id;
}

TEST_F(DiskBlockCacheTest, LruEvictionOrderAndExactBytes) {
  auto cache = Open(3 * kFile);
  cache->Put(Key(1), Data(1));
  cache->Put(Key(2), Data(2));
  cache->Put(Key(3), Data(3));
  ASSERT_TRUE(Has(cache.get(), 1));  // 2 is now the least recently used
  cache->Put(Key(4), Data(4));
  EXPECT_FALSE(Has(cache.get(), 2));
  cache->Put(Key(5), Data(5));
  EXPECT_FALSE(Has(cache.get(), 3));
  for (uint64_t id : {1, 4, 5}) EXPECT_TRUE(Has(cache.get(), id)) << id;
  EXPECT_EQ(cache->stats().bytes, 3 * kFile);
  EXPECT_EQ(cache->stats().evictions, 2u);
  EXPECT_EQ(Usage(), 3 * kFile);
}

TEST_F(DiskBlockCacheTest, BlockLargerThanCapacityIsNotCached) {
  auto cache = Open(kFile);
  cache->Put(Key(1), Data(1));
  cache->Put(Key(2, kLen + 1), Data(2, kLen + 1));
  EXPECT_TRUE(Has(cache.get(), 1));  // not evicted for nothing
  EXPECT_EQ(cache->Get(Key(2, kLen + 1), kLen + 1), nullptr);
  EXPECT_EQ(cache->stats().dropped_writes, 1u);
}

TEST_F(DiskBlockCacheTest, ReopenWithSmallerCapacityEvicts) {
  {
    auto cache = Open(1 << 20);
    for (uint64_t id = 1; id <= 10; ++id) cache->Put(Key(id), Data(id));
  }
  auto cache = Open(4 * kFile);
  EXPECT_EQ(cache->stats().blocks, 4u);
  EXPECT_EQ(cache->stats().bytes, 4 * kFile);
  EXPECT_EQ(Usage(), 4 * kFile);
}

// Each way a cache file can go bad: it is detected on read, deleted, counted,
// and the next Put caches the block again.
struct Damage {
  const char* name;
  std::function<void(const std::string& path)> apply;
  bool corrupt = true;  // counted as corrupt (a vanished file is not)
};

class DiskBlockCacheDamageTest : public DiskBlockCacheTest, public ::testing::WithParamInterface<Damage> {};

TEST_P(DiskBlockCacheDamageTest, CorruptFileIsDeletedAndMisses) {
  auto cache = Open(1 << 20);
  cache->Put(Key(1), Data(1));
  cache->Put(Key(2), Data(2));
  const std::string path = cache->PathOf(Key(1));
  GetParam().apply(path);

  EXPECT_EQ(cache->Get(Key(1), kLen), nullptr);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(cache->stats().corrupt, GetParam().corrupt ? 1u : 0u);
  EXPECT_EQ(cache->stats().blocks, 1u);
  EXPECT_EQ(cache->stats().bytes, kFile);
  EXPECT_TRUE(Has(cache.get(), 2));

  cache->Put(Key(1), Data(1));
  EXPECT_TRUE(Has(cache.get(), 1));
}

INSTANTIATE_TEST_SUITE_P(
    Damages, DiskBlockCacheDamageTest,
    ::testing::Values(
        Damage{"payload_byte", [](const std::string& p) { FlipByte(p, kDiskCacheHeaderSize + 37); }},
        Damage{"checksum_byte", [](const std::string& p) { FlipByte(p, 20); }},
        Damage{"magic", [](const std::string& p) { FlipByte(p, 0); }},
        Damage{"version", [](const std::string& p) { FlipByte(p, 4); }},
        Damage{"length_field", [](const std::string& p) { FlipByte(p, 8); }},
        Damage{"truncated", [](const std::string& p) { fs::resize_file(p, kFile - 1); }},
        Damage{"truncated_to_header", [](const std::string& p) { fs::resize_file(p, kDiskCacheHeaderSize); }},
        Damage{"empty", [](const std::string& p) { fs::resize_file(p, 0); }},
        Damage{"extended", [](const std::string& p) { fs::resize_file(p, kFile + 1); }},
        Damage{"deleted", [](const std::string& p) { fs::remove(p); }, false}),
    [](const ::testing::TestParamInfo<Damage>& p) { return std::string(p.param.name); });

TEST_F(DiskBlockCacheTest, ReopenDropsTempAndWrongSizeFilesKeepsForeignOnes) {
  std::string temp_path, short_path;
  {
    auto cache = Open(1 << 20);
    cache->Put(Key(1), Data(1));
    cache->Put(Key(2), Data(2));
    short_path = cache->PathOf(Key(2));
    temp_path = cache->PathOf(Key(3)) + ".tmp.7";
  }
  fs::resize_file(short_path, 10);
  std::ofstream(temp_path) << "partial";
  const std::string foreign = dir_.path() + "/vol/raw/README";
  std::ofstream(foreign) << "not a block";

  auto cache = Open(1 << 20);
  EXPECT_EQ(cache->stats().blocks, 1u);
  EXPECT_EQ(cache->stats().bytes, kFile);
  EXPECT_FALSE(fs::exists(short_path));
  EXPECT_FALSE(fs::exists(temp_path));
  EXPECT_TRUE(fs::exists(foreign));
  EXPECT_TRUE(Has(cache.get(), 1));
}

TEST_F(DiskBlockCacheTest, SecondOpenOfTheSameDirectoryIsEBUSY) {
  auto cache = Open(1 << 20);
  Result<std::unique_ptr<DiskBlockCache>> second = DiskBlockCache::Open(Options(1 << 20));
  EXPECT_EQ(second.status().code(), EBUSY);
  cache.reset();
  EXPECT_TRUE(DiskBlockCache::Open(Options(1 << 20)).ok());  // released with the first
}

TEST_F(DiskBlockCacheTest, EraseRemovesTheFile) {
  auto cache = Open(1 << 20);
  cache->Put(Key(1), Data(1));
  cache->Erase(Key(1));
  cache->Erase(Key(9));
  EXPECT_FALSE(fs::exists(cache->PathOf(Key(1))));
  EXPECT_EQ(cache->stats().bytes, 0u);
  EXPECT_EQ(cache->Get(Key(1), kLen), nullptr);
  EXPECT_EQ(cache->stats().corrupt, 0u);
}

TEST_F(DiskBlockCacheTest, FreeSpaceRatioEvictsThenStopsCaching) {
  // A 1,000,000-byte disk; 10% must stay free. avail is what the test says.
  std::atomic<uint64_t> avail{200000};
  DiskCacheOptions opts = Options(1 << 20);
  opts.free_space_ratio = 0.1;
  opts.disk_space = [&](const std::string&) -> Result<DiskSpace> {
    return DiskSpace{avail.load(), 1000000};
  };
  auto cache = Open(opts);
  for (uint64_t id = 1; id <= 4; ++id) cache->Put(Key(id), Data(id));
  EXPECT_EQ(cache->stats().blocks, 4u);

  // Writing one more block would leave 100000 + kFile - 1 - kFile < 100000
  // free: exactly one block (the least recently used) makes way.
  avail = 100000 + kFile - 1;
  cache->Put(Key(5), Data(5));
  EXPECT_EQ(cache->stats().blocks, 4u);
  EXPECT_FALSE(Has(cache.get(), 1));
  EXPECT_TRUE(Has(cache.get(), 5));

  // Disk full for other reasons: everything goes, and nothing is cached.
  avail = 1000;
  cache->Put(Key(6), Data(6));
  EXPECT_EQ(cache->stats().blocks, 0u);
  EXPECT_EQ(cache->stats().bytes, 0u);
  EXPECT_EQ(Usage(), 0u);
  EXPECT_GE(cache->stats().dropped_writes, 1u);

  // Reopening while the disk is short of space evicts at once.
  avail = 200000;
  cache->Put(Key(7), Data(7));
  cache->Put(Key(8), Data(8));
  cache.reset();
  avail = 100000 - kFile;
  cache = Open(opts);
  EXPECT_EQ(cache->stats().blocks, 1u);
}

TEST_F(DiskBlockCacheTest, TwoRandomEvictionKeepsTheHotBlockAndTheBound) {
  DiskCacheOptions opts = Options(10 * kFile);
  opts.eviction = CacheEviction::kTwoRandom;
  auto cache = Open(opts);
  cache->Put(Key(1), Data(1));  // the hot block
  for (uint64_t id = 2; id < 300; ++id) {
    // Used before every insertion, it is always the most recently used, so
    // it loses every comparison of two distinct samples.
    ASSERT_TRUE(Has(cache.get(), 1)) << "evicted before inserting " << id;
    cache->Put(Key(id), Data(id));
    ASSERT_LE(cache->stats().bytes, 10 * kFile);
  }
  EXPECT_EQ(cache->stats().blocks, 10u);
  EXPECT_EQ(Usage(), 10 * kFile);
  // Unlike LRU, which would have kept exactly the 9 newest, 2-random (with
  // this seed) let some older block survive.
  int older_survivors = 0;
  for (uint64_t id = 2; id < 290; ++id) older_survivors += cache->Get(Key(id), kLen) != nullptr;
  EXPECT_GT(older_survivors, 0);
}

TEST_F(DiskBlockCacheTest, AsyncWritesFinishOnDestruction) {
  DiskCacheOptions opts = Options(1 << 20);
  opts.async_writes = true;
  {
    auto cache = Open(opts);
    for (uint64_t id = 1; id <= 50; ++id) cache->Put(Key(id), Data(id));
  }
  auto cache = Open(opts);
  EXPECT_EQ(cache->stats().blocks, 50u);
  for (uint64_t id = 1; id <= 50; ++id) EXPECT_TRUE(Has(cache.get(), id)) << id;
}

TEST_F(DiskBlockCacheTest, AsyncQueueFullDropsWrites) {
  DiskCacheOptions opts = Options(1 << 20);
  opts.async_writes = true;
  opts.max_pending_bytes = kLen - 1;
  auto cache = Open(opts);
  cache->Put(Key(1), Data(1));
  cache->Drain();
  EXPECT_EQ(cache->Get(Key(1), kLen), nullptr);
  EXPECT_EQ(cache->stats().dropped_writes, 1u);
}

// Many threads putting, reading and erasing blocks of assorted sizes through
// the background writer: the accounted bytes never exceed the capacity, and
// once idle they equal the bytes on disk exactly.
class DiskBlockCacheLoadTest : public DiskBlockCacheTest, public ::testing::WithParamInterface<CacheEviction> {};

TEST_P(DiskBlockCacheLoadTest, NeverExceedsCapacityUnderRandomLoad) {
  constexpr uint64_t kCapacity = 20000;
  DiskCacheOptions opts = Options(kCapacity);
  opts.async_writes = true;
  opts.eviction = GetParam();
  auto cache = Open(opts);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> max_seen{0};
  std::thread monitor([&] {
    while (!done) {
      const uint64_t bytes = cache->stats().bytes;
      if (bytes > max_seen) max_seen = bytes;
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(t) + 1);
      for (int i = 0; i < 1500; ++i) {
        const uint64_t id = 1 + rng() % 200;
        const uint32_t len = uint32_t(50 + id * 13 % 2000);  // fixed per id
        switch (rng() % 4) {
          case 0:
          case 1:
            cache->Put(Key(id, len), Data(id, len));
            break;
          case 2:
            if (BlockRef got = cache->Get(Key(id, len), len)) {
              EXPECT_EQ(*got, *Data(id, len));
            }
            break;
          default:
            if (rng() % 8 == 0) cache->Erase(Key(id, len));
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  cache->Drain();
  done = true;
  monitor.join();
  EXPECT_LE(max_seen.load(), kCapacity);
  EXPECT_EQ(cache->stats().corrupt, 0u);
  EXPECT_GT(cache->stats().evictions, 0u);
  EXPECT_EQ(cache->stats().bytes, Usage());
  EXPECT_LE(Usage(), kCapacity);

  // The index matches the files after a restart, too.
  const uint64_t bytes = cache->stats().bytes, blocks = cache->stats().blocks;
  cache.reset();
  cache = Open(opts);
  EXPECT_EQ(cache->stats().bytes, bytes);
  EXPECT_EQ(cache->stats().blocks, blocks);
}

INSTANTIATE_TEST_SUITE_P(Policies, DiskBlockCacheLoadTest,
                         ::testing::Values(CacheEviction::kLru, CacheEviction::kTwoRandom),
                         [](const ::testing::TestParamInfo<CacheEviction>& p) {
                           return p.param == CacheEviction::kLru ? std::string("lru") : std::string("two_random");
                         });

TEST(CacheEvictionTest, ParseAndName) {
  EXPECT_EQ(*ParseCacheEviction("lru"), CacheEviction::kLru);
  EXPECT_EQ(*ParseCacheEviction("2-random"), CacheEviction::kTwoRandom);
  EXPECT_EQ(ParseCacheEviction("random").status().code(), EINVAL);
  EXPECT_EQ(CacheEvictionName(CacheEviction::kTwoRandom), "2-random");
  EXPECT_EQ(CacheEvictionName(CacheEviction::kLru), "lru");
}

}  // namespace
}  // namespace tessera::chunk
