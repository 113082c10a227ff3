// ChunkStore with its block caches: write-through, whole-block fetches,
// single-flight misses, the disk cache across restarts and corruption.

#include <atomic>
#include <filesystem>
#include <latch>
#include <random>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/memory_store.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

namespace fs = std::filesystem;
using testing::CountingStore;
using testing::DiskUsage;
using testing::RandomBytes;
using testing::TempDir;

constexpr uint32_t kBlock = 4096;

class BlockCacheTest : public ::testing::Test {
 protected:
  StoreConfig MemOnly(uint64_t mem = 1 << 20) {
    return StoreConfig{.block_size = kBlock, .mem_cache_bytes = mem};
  }
  StoreConfig DiskOnly(uint64_t cache_size = 1 << 20) {
    StoreConfig config{.block_size = kBlock, .mem_cache_bytes = 0};
    config.cache_dir = dir_.path();
    config.cache_volume = "vol";
    config.cache_size = cache_size;
    config.free_space_ratio = 0;
    return config;
  }
  // Stores a slice straight in the object store, as another client would.
  std::string WriteElsewhere(uint64_t id, uint32_t size) {
    std::string data = RandomBytes(rng_, size);
    ChunkStore other(&objects_, StoreConfig{.block_size = kBlock, .mem_cache_bytes = 0});
    auto writer = other.NewWriter(id);
    EXPECT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
    EXPECT_TRUE(writer->Finish(size).ok());
    return data;
  }
  static std::string Read(ChunkStore& chunks, uint64_t id, uint32_t size, uint32_t off, uint32_t len) {
    std::string buf(len, '\xee');
    Status st = chunks.ReadSlice(id, size, off, len, buf.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    return buf;
  }

  std::mt19937 rng_{11};
  TempDir dir_;
  object::MemoryStore objects_{"test"};
  CountingStore counting_{&objects_};
};

TEST_F(BlockCacheTest, ReadAfterWriteIsServedByTheMemoryCache) {
  ChunkStore chunks(&counting_, MemOnly());
  const uint32_t size = 3 * kBlock + 10;
  const std::string data = RandomBytes(rng_, size);
  auto writer = chunks.NewWriter(7);
  ASSERT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
  ASSERT_TRUE(writer->FlushTo(2 * kBlock).ok());
  ASSERT_TRUE(writer->Finish(size).ok());
  EXPECT_EQ(counting_.puts.load(), 4);

  EXPECT_EQ(Read(chunks, 7, size, 0, size), data);
  EXPECT_EQ(Read(chunks, 7, size, kBlock + 5, 100), data.substr(kBlock + 5, 100));
  EXPECT_EQ(counting_.gets.load(), 0);
  const ChunkStats stats = chunks.stats();
  EXPECT_EQ(stats.mem_hits, 5u);
  EXPECT_EQ(stats.mem_misses, 0u);
  EXPECT_EQ(stats.store_gets, 0u);
  EXPECT_EQ(stats.mem_blocks, 4u);
  EXPECT_EQ(stats.mem_bytes, size);
  EXPECT_EQ(stats.store_puts, 4u);
  EXPECT_EQ(stats.store_put_bytes, size);
}

// With cache_written off (a mount on a local-directory bucket) the blocks a
// client writes, by any of its write paths, stay out of the memory cache and
// their buffers go back to the pool; reads still find every byte, and a
// block read is cached as before.
TEST_F(BlockCacheTest, WrittenBlocksStayOutOfTheMemoryCacheWithoutCacheWritten) {
  StoreConfig config = MemOnly();
  config.cache_written = false;
  ChunkStore chunks(&counting_, config);
  const uint32_t size = 3 * kBlock + 10;
  const std::string data = RandomBytes(rng_, size);
  auto writer = chunks.NewWriter(7);  // the slice writer: PutBlock
  ASSERT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
  ASSERT_TRUE(writer->Finish(size).ok());
  const std::string other = RandomBytes(rng_, kBlock);
  ASSERT_TRUE(chunks.UploadBlock(8, 0, other).ok());
  ASSERT_TRUE(chunks.StoreNewBlock(9, 0, other).ok());  // a buffered file's commit
  chunks.CacheUploaded(9, 0, other);
  ASSERT_TRUE(chunks.StageBlock(10, 0, other).ok());  // writeback off: uploaded directly
  EXPECT_EQ(counting_.puts.load(), 7);
  EXPECT_EQ(chunks.stats().mem_blocks, 0u);
  EXPECT_EQ(chunks.stats().mem_bytes, 0u);

  EXPECT_EQ(Read(chunks, 7, size, 0, size), data);  // whole blocks: fetched, then cached
  for (uint64_t id : {8, 9, 10}) EXPECT_EQ(Read(chunks, id, kBlock, 0, kBlock), other);
  EXPECT_EQ(counting_.gets.load(), 7);
  EXPECT_EQ(chunks.stats().mem_blocks, 7u);
  EXPECT_EQ(Read(chunks, 7, size, kBlock + 5, 100), data.substr(kBlock + 5, 100));
  EXPECT_EQ(counting_.gets.load(), 7);  // now a hit
}

// A partial read that misses reads just its range (a random 4 KiB read must
// not wait for a whole block) and tells the prefetch hook, which loads the
// whole block; later reads anywhere in the block hit the cache.
TEST_F(BlockCacheTest, PartialReadMissReadsItsRangeAndPrefetchesTheBlock) {
  const uint32_t size = 2 * kBlock;
  const std::string data = WriteElsewhere(5, size);
  ChunkStore chunks(&counting_, MemOnly());
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> hooked;
  chunks.set_partial_miss_hook([&](uint64_t id, uint32_t index, uint32_t len) { hooked.emplace_back(id, index, len); });
  EXPECT_EQ(Read(chunks, 5, size, 100, 10), data.substr(100, 10));
  EXPECT_EQ(counting_.gets.load(), 1);
  EXPECT_EQ(chunks.stats().store_get_bytes, 10u);  // just the range
  ASSERT_EQ(hooked.size(), 1u);
  EXPECT_EQ(hooked[0], std::make_tuple(uint64_t(5), 0u, kBlock));
  ASSERT_TRUE(chunks.Prefetch(5, 0, kBlock).ok());  // what the hook's owner does in the background
  EXPECT_EQ(counting_.gets.load(), 2);
  // Anywhere else in that block: no more object reads.
  EXPECT_EQ(Read(chunks, 5, size, 0, kBlock), data.substr(0, kBlock));
  EXPECT_EQ(Read(chunks, 5, size, kBlock - 1, 1), data.substr(kBlock - 1, 1));
  EXPECT_EQ(counting_.gets.load(), 2);
  EXPECT_EQ(hooked.size(), 1u);
}

TEST_F(BlockCacheTest, WithoutCachesReadsFetchOnlyTheirRange) {
  const std::string data = WriteElsewhere(5, kBlock);
  ChunkStore chunks(&counting_, MemOnly(0));
  EXPECT_EQ(Read(chunks, 5, kBlock, 100, 10), data.substr(100, 10));
  EXPECT_EQ(chunks.stats().store_get_bytes, 10u);
}

TEST_F(BlockCacheTest, LruBoundedMemoryCache) {
  const uint32_t size = 8 * kBlock;
  const std::string data = WriteElsewhere(3, size);
  ChunkStore chunks(&counting_, MemOnly(3 * kBlock));
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_EQ(Read(chunks, 3, size, 0, size), data);  // a scan larger than the cache
  }
  EXPECT_EQ(counting_.gets.load(), 16);
  EXPECT_EQ(chunks.stats().mem_bytes, 3u * kBlock);
  EXPECT_EQ(Read(chunks, 3, size, 7 * kBlock, kBlock), data.substr(7 * kBlock));  // most recent: a hit
  EXPECT_EQ(counting_.gets.load(), 16);
}

// Eight readers missing the same block at once share one object read.
TEST_F(BlockCacheTest, ConcurrentMissesOfOneBlockShareOneGet) {
  const uint32_t size = kBlock;
  const std::string data = WriteElsewhere(9, size);
  for (const StoreConfig& config : {MemOnly(), DiskOnly()}) {
    TempDir fresh;  // a cold disk cache for each round
    StoreConfig c = config;
    if (!c.cache_dir.empty()) c.cache_dir = fresh.path();
    counting_.gets = 0;
    counting_.get_delay = std::chrono::milliseconds(200);
    ChunkStore chunks(&counting_, c);
    constexpr int kReaders = 8;
    std::latch start(kReaders);
    std::vector<std::string> got(kReaders);
    std::vector<std::thread> threads;
    for (int t = 0; t < kReaders; ++t) {
      threads.emplace_back([&, t] {
        // Whole-block reads (partial ones read just their range).
        const uint32_t off = 0, len = size;
        std::string buf(len, '\0');
        start.arrive_and_wait();
        EXPECT_TRUE(chunks.ReadSlice(9, size, off, len, buf.data()).ok());
        got[size_t(t)] = buf;
      });
    }
    for (auto& th : threads) th.join();
    counting_.get_delay = std::chrono::milliseconds(0);
    EXPECT_EQ(counting_.gets.load(), 1) << (c.cache_dir.empty() ? "memory" : "disk");
    for (int t = 0; t < kReaders; ++t) EXPECT_EQ(got[size_t(t)], data);
    EXPECT_EQ(chunks.stats().shared_fetches + chunks.stats().mem_hits, uint64_t(kReaders - 1));
  }
}

TEST_F(BlockCacheTest, ConcurrentMissesShareTheError) {
  ChunkStore chunks(&counting_, MemOnly());
  counting_.get_delay = std::chrono::milliseconds(200);
  constexpr int kReaders = 8;
  std::latch start(kReaders);
  std::atomic<int> eio{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&] {
      std::string buf(kBlock, '\0');  // whole-block reads share one fetch
      start.arrive_and_wait();
      if (chunks.ReadSlice(404, kBlock, 0, kBlock, buf.data()).code() == EIO) ++eio;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(eio.load(), kReaders);
  EXPECT_EQ(counting_.gets.load(), 1);
  // Errors are not cached: the next read tries again.
  counting_.get_delay = std::chrono::milliseconds(0);
  std::string buf(kBlock, '\0');
  EXPECT_EQ(chunks.ReadSlice(404, kBlock, 0, kBlock, buf.data()).code(), EIO);
  EXPECT_EQ(counting_.gets.load(), 2);
}

TEST_F(BlockCacheTest, DiskCacheSurvivesRestart) {
  const uint32_t size = 5 * kBlock + 77;
  const std::string data = WriteElsewhere(21, size);
  {
    ChunkStore chunks(&counting_, DiskOnly());
    EXPECT_EQ(Read(chunks, 21, size, 0, size), data);
    EXPECT_EQ(counting_.gets.load(), 6);
    chunks.WaitForCacheWrites();
    EXPECT_EQ(chunks.stats().disk_blocks, 6u);
    EXPECT_EQ(chunks.stats().disk_bytes, size + 6 * kDiskCacheHeaderSize);
  }
  StoreConfig config = DiskOnly();
  config.mem_cache_bytes = 1 << 20;
  ChunkStore chunks(&counting_, config);
  EXPECT_EQ(chunks.stats().disk_blocks, 6u);
  EXPECT_EQ(Read(chunks, 21, size, 0, size), data);
  EXPECT_EQ(Read(chunks, 21, size, 3, 4 * kBlock), data.substr(3, 4 * kBlock));
  EXPECT_EQ(counting_.gets.load(), 6);  // not one more object read
  EXPECT_EQ(chunks.stats().disk_hits, 6u);
  EXPECT_EQ(chunks.stats().disk_misses, 0u);
  EXPECT_GT(chunks.stats().mem_hits, 0u);
}

TEST_F(BlockCacheTest, WrittenBlocksGoToTheDiskCacheToo) {
  const uint32_t size = 2 * kBlock;
  const std::string data = RandomBytes(rng_, size);
  {
    ChunkStore chunks(&counting_, DiskOnly());
    auto writer = chunks.NewWriter(31);
    ASSERT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
    ASSERT_TRUE(writer->Finish(size).ok());
  }
  ChunkStore chunks(&counting_, DiskOnly());
  EXPECT_EQ(Read(chunks, 31, size, 0, size), data);
  EXPECT_EQ(counting_.gets.load(), 0);
}

// A damaged cache file is noticed, deleted, the block refetched (correct
// data returned) and cached again.
class CorruptCacheFileTest : public BlockCacheTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CorruptCacheFileTest, IsRefetchedFromTheStore) {
  const bool truncate = GetParam();
  const uint32_t size = 2 * kBlock;
  const std::string data = WriteElsewhere(41, size);
  ChunkStore chunks(&counting_, DiskOnly());
  EXPECT_EQ(Read(chunks, 41, size, 0, size), data);
  chunks.WaitForCacheWrites();
  EXPECT_EQ(counting_.gets.load(), 2);

  const std::string path = chunks.disk_cache()->PathOf(BlockKey(41, 1, kBlock));
  if (truncate) {
    fs::resize_file(path, kDiskCacheHeaderSize + kBlock / 2);
  } else {
    testing::FlipByte(path, kDiskCacheHeaderSize + 1000);
  }

  EXPECT_EQ(Read(chunks, 41, size, kBlock, kBlock), data.substr(kBlock, kBlock));
  EXPECT_EQ(counting_.gets.load(), 3);
  EXPECT_EQ(chunks.stats().disk_corrupt, 1u);
  EXPECT_EQ(chunks.stats().disk_hits, 0u);

  chunks.WaitForCacheWrites();  // cached again, intact
  EXPECT_EQ(fs::file_size(path), kDiskCacheHeaderSize + kBlock);
  EXPECT_EQ(Read(chunks, 41, size, 0, size), data);
  EXPECT_EQ(counting_.gets.load(), 3);
  EXPECT_EQ(chunks.stats().disk_hits, 2u);
}

INSTANTIATE_TEST_SUITE_P(Damage, CorruptCacheFileTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("truncated") : std::string("flipped_byte");
                         });

// Random reads of many more blocks than fit: the disk cache's bytes never go
// over cache_size, with either eviction policy.
class DiskCacheBoundTest : public BlockCacheTest, public ::testing::WithParamInterface<CacheEviction> {};

TEST_P(DiskCacheBoundTest, NeverExceedsCacheSizeUnderRandomReads) {
  constexpr uint32_t kSize = 6 * kBlock + 333;
  constexpr int kSlices = 10;
  std::vector<std::string> data;
  for (int i = 0; i < kSlices; ++i) data.push_back(WriteElsewhere(100 + uint64_t(i), kSize));

  const uint64_t cache_size = 9 * (kBlock + kDiskCacheHeaderSize) + 500;
  StoreConfig config = DiskOnly(cache_size);
  config.cache_eviction = GetParam();
  ChunkStore chunks(&counting_, config);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> max_seen{0};
  std::thread monitor([&] {
    while (!done) {
      const uint64_t bytes = chunks.stats().disk_bytes;
      if (bytes > max_seen) max_seen = bytes;
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng{uint32_t(t) + 100};
      for (int i = 0; i < 300; ++i) {
        const int s = int(rng() % kSlices);
        const uint32_t off = rng() % kSize, len = 1 + rng() % std::min<uint32_t>(kSize - off, 3 * kBlock);
        std::string buf(len, '\0');
        ASSERT_TRUE(chunks.ReadSlice(100 + uint64_t(s), kSize, off, len, buf.data()).ok());
        ASSERT_EQ(buf, data[size_t(s)].substr(off, len));
      }
    });
  }
  for (auto& th : threads) th.join();
  chunks.WaitForCacheWrites();
  done = true;
  monitor.join();
  const ChunkStats stats = chunks.stats();
  EXPECT_LE(max_seen.load(), cache_size);
  EXPECT_GT(stats.disk_evictions, 0u);
  EXPECT_EQ(stats.disk_bytes, DiskUsage(dir_.path() + "/vol/raw"));
  EXPECT_LE(DiskUsage(dir_.path() + "/vol/raw"), cache_size);
}

INSTANTIATE_TEST_SUITE_P(Policies, DiskCacheBoundTest, ::testing::Values(CacheEviction::kLru, CacheEviction::kTwoRandom),
                         [](const ::testing::TestParamInfo<CacheEviction>& p) {
                           return p.param == CacheEviction::kLru ? std::string("lru") : std::string("two_random");
                         });

TEST_F(BlockCacheTest, DeleteSliceAndAbortDropCachedBlocks) {
  StoreConfig config = DiskOnly();
  config.mem_cache_bytes = 1 << 20;
  ChunkStore chunks(&counting_, config);
  const std::string data = RandomBytes(rng_, 3 * kBlock);
  auto writer = chunks.NewWriter(51);
  ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), 0).ok());
  ASSERT_TRUE(writer->Finish(uint32_t(data.size())).ok());
  auto aborted = chunks.NewWriter(52);
  ASSERT_TRUE(aborted->WriteAt(data.data(), data.size(), 0).ok());
  ASSERT_TRUE(aborted->FlushTo(2 * kBlock).ok());
  chunks.WaitForCacheWrites();
  EXPECT_EQ(chunks.stats().mem_blocks, 5u);
  EXPECT_EQ(chunks.stats().disk_blocks, 5u);

  aborted->Abort();
  ASSERT_TRUE(chunks.DeleteSlice(51, uint32_t(data.size())).ok());
  chunks.WaitForCacheWrites();
  EXPECT_EQ(chunks.stats().mem_blocks, 0u);
  EXPECT_EQ(chunks.stats().disk_blocks, 0u);
  EXPECT_EQ(chunks.stats().disk_bytes, 0u);
  EXPECT_EQ(DiskUsage(dir_.path() + "/vol/raw"), 0u);
  char buf[1];
  EXPECT_EQ(chunks.ReadSlice(51, uint32_t(data.size()), 0, 1, buf).code(), EIO);
}

TEST_F(BlockCacheTest, DiskCacheNeedsAVolumeSubdirectory) {
  StoreConfig config = DiskOnly();
  config.cache_volume = "";
  EXPECT_EQ(config.Validate().code(), EINVAL);
  config.cache_volume = "a/b";
  EXPECT_EQ(config.Validate().code(), EINVAL);
  config.cache_volume = "..";
  EXPECT_EQ(config.Validate().code(), EINVAL);
  ChunkStore chunks(&counting_, config);  // runs, without a disk cache
  EXPECT_EQ(chunks.disk_cache(), nullptr);
  EXPECT_FALSE(chunks.stats().disk_enabled);
  const std::string data = WriteElsewhere(61, 100);
  EXPECT_EQ(Read(chunks, 61, 100, 0, 100), data);

  config.cache_volume = "0b9a4c7e-uuid";
  EXPECT_TRUE(config.Validate().ok());
  config.free_space_ratio = 1;
  EXPECT_EQ(config.Validate().code(), EINVAL);
  EXPECT_TRUE(StoreConfig{}.Validate().ok());
}

TEST_F(BlockCacheTest, ASecondStoreOnTheSameCacheDirRunsWithoutDiskCache) {
  ChunkStore first(&counting_, DiskOnly());
  ChunkStore second(&counting_, DiskOnly());
  EXPECT_NE(first.disk_cache(), nullptr);
  EXPECT_EQ(second.disk_cache(), nullptr);
  const std::string data = WriteElsewhere(71, 100);
  EXPECT_EQ(Read(second, 71, 100, 0, 100), data);
}

TEST_F(BlockCacheTest, DefaultsAreDocumented) {
  const StoreConfig defaults;
  EXPECT_EQ(defaults.block_size, 4u << 20);
  EXPECT_EQ(defaults.compression, Compression::kNone);
  EXPECT_EQ(defaults.mem_cache_bytes, 256ull << 20);
  EXPECT_TRUE(defaults.cache_written);
  EXPECT_TRUE(defaults.cache_dir.empty());
  EXPECT_EQ(defaults.cache_size, 100ull << 30);
  EXPECT_DOUBLE_EQ(defaults.free_space_ratio, 0.1);
  EXPECT_EQ(defaults.cache_eviction, CacheEviction::kLru);
}

}  // namespace
}  // namespace tessera::chunk
