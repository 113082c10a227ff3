#include "chunk/chunk_store.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "object/file_store.h"
#include "object/memory_store.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

constexpr uint32_t kBlock = 4096;

// Every test runs against each way of reading: ranged reads straight from the
// store, through the memory cache, through the disk cache, and compressed.
struct Mode {
  const char* name;
  Compression compression;
  uint64_t mem_cache_bytes;
  bool disk_cache;
};

class ChunkStoreTest : public ::testing::TestWithParam<Mode> {
 protected:
  static StoreConfig Config(const Mode& mode, const std::string& cache_dir) {
    StoreConfig config{.block_size = kBlock, .compression = mode.compression, .mem_cache_bytes = mode.mem_cache_bytes};
    if (mode.disk_cache) {
      config.cache_dir = cache_dir;
      config.cache_volume = "vol";
      config.free_space_ratio = 0;
    }
    return config;
  }

  std::vector<std::string> Keys() {
    std::vector<object::ObjectInfo> infos;
    EXPECT_TRUE(objects_.List("", "", 100000, &infos, nullptr).ok());
    std::vector<std::string> keys;
    for (const auto& info : infos) keys.push_back(info.key);
    return keys;
  }

  std::string Read(uint64_t id, uint32_t size, uint32_t off, uint32_t len) {
    std::string buf(len, '\xee');
    Status st = chunks_.ReadSlice(id, size, off, len, buf.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    return buf;
  }

  bool Cached() const { return GetParam().mem_cache_bytes > 0 || GetParam().disk_cache; }
  // Writes a slice without touching chunks_'s caches, as another client would.
  void WriteUncached(uint64_t id, const std::string& data) {
    ChunkStore other(&objects_, StoreConfig{.block_size = kBlock, .compression = GetParam().compression,
                                            .mem_cache_bytes = 0});
    auto writer = other.NewWriter(id);
    ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), 0).ok());
    ASSERT_TRUE(writer->Finish(uint32_t(data.size())).ok());
  }

  testing::TempDir cache_dir_;
  object::MemoryStore objects_{"test"};
  ChunkStore chunks_{&objects_, Config(GetParam(), cache_dir_.path())};
};

INSTANTIATE_TEST_SUITE_P(Modes, ChunkStoreTest,
                         ::testing::Values(Mode{"ranged", Compression::kNone, 0, false},
                                           Mode{"mem", Compression::kNone, 1 << 20, false},
                                           Mode{"disk", Compression::kNone, 0, true},
                                           Mode{"lz4_mem_disk", Compression::kLz4, 1 << 20, true},
                                           Mode{"zstd", Compression::kZstd, 0, false}),
                         [](const ::testing::TestParamInfo<Mode>& p) { return std::string(p.param.name); });

using testing::RandomBytes;

TEST_P(ChunkStoreTest, RandomOrderWritesThenRandomReads) {
  std::mt19937 rng(7);
  const uint32_t size = 5 * kBlock + 1234;
  std::string model(size, '\0');
  auto writer = chunks_.NewWriter(42);
  EXPECT_EQ(writer->id(), 42u);

  // Random pieces in random order, some overlapping (later wins), leaving
  // some bytes never written (they must read as zeros).
  std::vector<std::pair<uint32_t, std::string>> pieces;
  for (int i = 0; i < 60; ++i) {
    uint32_t off = rng() % size;
    uint32_t len = std::min<uint32_t>(1 + rng() % 3000, size - off);
    pieces.emplace_back(off, RandomBytes(rng, len));
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  for (const auto& [off, data] : pieces) {
    ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), off).ok());
    model.replace(off, data.size(), data);
  }
  ASSERT_TRUE(writer->Finish(size).ok());

  std::vector<std::string> want;
  for (uint32_t i = 0; i < 6; ++i) want.push_back(BlockKey(42, i, i < 5 ? kBlock : 1234));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Keys(), want);

  EXPECT_EQ(Read(42, size, 0, size), model);
  for (int i = 0; i < 500; ++i) {
    uint32_t off = rng() % (size + 1);
    uint32_t len = rng() % (size - off + 1);
    ASSERT_EQ(Read(42, size, off, len), model.substr(off, len)) << off << "+" << len;
  }
  // Block boundaries exactly.
  EXPECT_EQ(Read(42, size, kBlock - 1, 2), model.substr(kBlock - 1, 2));
  EXPECT_EQ(Read(42, size, kBlock, kBlock), model.substr(kBlock, kBlock));
  EXPECT_EQ(Read(42, size, size - 1, 1), model.substr(size - 1, 1));
}

TEST_P(ChunkStoreTest, FlushToUploadsOnlyCompleteBlocksBelowOffset) {
  auto writer = chunks_.NewWriter(9);
  std::string data(3 * kBlock + 100, 'x');
  ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), 0).ok());

  ASSERT_TRUE(writer->FlushTo(kBlock - 1).ok());  // block 0 not complete below the offset
  EXPECT_TRUE(Keys().empty());
  ASSERT_TRUE(writer->FlushTo(2 * kBlock + 10).ok());
  EXPECT_EQ(Keys(), (std::vector<std::string>{BlockKey(9, 0, kBlock), BlockKey(9, 1, kBlock)}));
  ASSERT_TRUE(writer->FlushTo(kBlock).ok());  // going backwards is a no-op
  EXPECT_EQ(Keys().size(), 2u);

  // Flushed blocks are closed; the rest still takes writes.
  EXPECT_EQ(writer->WriteAt("y", 1, 0).code(), EINVAL);
  EXPECT_EQ(writer->WriteAt("yy", 2, 2 * kBlock - 1).code(), EINVAL);
  ASSERT_TRUE(writer->WriteAt("z", 1, 2 * kBlock).ok());
  data[2 * kBlock] = 'z';
  EXPECT_EQ(writer->Finish(kBlock).code(), EINVAL);  // shorter than what was flushed

  ASSERT_TRUE(writer->Finish(uint32_t(data.size())).ok());
  EXPECT_EQ(Keys().size(), 4u);
  EXPECT_EQ(Read(9, uint32_t(data.size()), 0, uint32_t(data.size())), data);
}

TEST_P(ChunkStoreTest, FlushUploadsUnwrittenBlocksAsZeros) {
  auto writer = chunks_.NewWriter(3);
  ASSERT_TRUE(writer->WriteAt("abc", 3, 2 * kBlock).ok());
  ASSERT_TRUE(writer->FlushTo(2 * kBlock).ok());
  ASSERT_TRUE(writer->Finish(2 * kBlock + 3).ok());
  std::string want(2 * kBlock, '\0');
  want += "abc";
  EXPECT_EQ(Read(3, 2 * kBlock + 3, 0, 2 * kBlock + 3), want);
}

TEST_P(ChunkStoreTest, FinishDropsBytesBeyondLength) {
  auto writer = chunks_.NewWriter(4);
  std::string data(2 * kBlock, 'q');
  ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), 0).ok());
  ASSERT_TRUE(writer->Finish(10).ok());
  EXPECT_EQ(Keys(), std::vector<std::string>{BlockKey(4, 0, 10)});
  EXPECT_EQ(Read(4, 10, 0, 10), std::string(10, 'q'));
}

TEST_P(ChunkStoreTest, CallsAfterFinishAreEINVAL) {
  auto writer = chunks_.NewWriter(5);
  ASSERT_TRUE(writer->WriteAt("a", 1, 0).ok());
  ASSERT_TRUE(writer->Finish(1).ok());
  EXPECT_EQ(writer->WriteAt("b", 1, 1).code(), EINVAL);
  EXPECT_EQ(writer->FlushTo(1).code(), EINVAL);
  EXPECT_EQ(writer->Finish(1).code(), EINVAL);
}

TEST_P(ChunkStoreTest, WritesBeyondChunkSizeAreEINVAL) {
  auto writer = chunks_.NewWriter(6);
  EXPECT_EQ(writer->WriteAt("a", 1, uint32_t(kChunkSize)).code(), EINVAL);
  EXPECT_EQ(writer->Finish(uint32_t(kChunkSize) + 1).code(), EINVAL);
  writer->Abort();
}

TEST_P(ChunkStoreTest, AbortRemovesUploadedBlocks) {
  ASSERT_TRUE(objects_.Put("unrelated", "keep").ok());
  auto writer = chunks_.NewWriter(77);
  std::string data(3 * kBlock, 'a');
  ASSERT_TRUE(writer->WriteAt(data.data(), data.size(), 0).ok());
  ASSERT_TRUE(writer->FlushTo(2 * kBlock).ok());
  EXPECT_EQ(Keys().size(), 3u);
  writer->Abort();
  EXPECT_EQ(Keys(), std::vector<std::string>{"unrelated"});
  EXPECT_EQ(writer->WriteAt("a", 1, 2 * kBlock).code(), EINVAL);
}

TEST_P(ChunkStoreTest, DeleteSliceRemovesAllBlocks) {
  ASSERT_TRUE(objects_.Put("unrelated", "keep").ok());
  const uint32_t size = 4 * kBlock + 1;
  auto writer = chunks_.NewWriter(1000001);
  std::string data(size, 'd');
  ASSERT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
  ASSERT_TRUE(writer->Finish(size).ok());
  EXPECT_EQ(Keys().size(), 6u);
  ASSERT_TRUE(chunks_.DeleteSlice(1000001, size).ok());
  EXPECT_EQ(Keys(), std::vector<std::string>{"unrelated"});
  EXPECT_TRUE(chunks_.DeleteSlice(1000001, size).ok());  // already gone is fine
}

TEST_P(ChunkStoreTest, MissingBlockIsEIO) {
  const uint32_t size = 3 * kBlock;
  WriteUncached(8, std::string(size, 'm'));
  ASSERT_TRUE(objects_.Delete(BlockKey(8, 1, kBlock)).ok());

  std::string buf(size, '\0');
  EXPECT_TRUE(chunks_.ReadSlice(8, size, 0, kBlock, buf.data()).ok());  // block 0 is intact
  Status st = chunks_.ReadSlice(8, size, kBlock - 10, 20, buf.data());
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find(BlockKey(8, 1, kBlock)), std::string::npos) << st.message();
}

TEST_P(ChunkStoreTest, ShortBlockIsEIO) {
  ASSERT_TRUE(objects_.Put(BlockKey(11, 0, kBlock), std::string(100, 's')).ok());
  std::string buf(kBlock, '\0');
  Status st = chunks_.ReadSlice(11, kBlock, 0, kBlock, buf.data());
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.message().find(BlockKey(11, 0, kBlock)), std::string::npos) << st.message();
  // Partial reads of raw blocks fetch just their range (only compressed
  // blocks are always fetched, and checked, whole).
  const bool ranged = GetParam().compression == Compression::kNone;
  EXPECT_EQ(chunks_.ReadSlice(11, kBlock, 0, 100, buf.data()).ok(), ranged);
}

TEST_P(ChunkStoreTest, LongBlockIsEIOWhenReadWhole) {
  if (!Cached() || GetParam().compression != Compression::kNone) GTEST_SKIP() << "whole raw blocks only";
  ASSERT_TRUE(objects_.Put(BlockKey(15, 0, 100), std::string(101, 'l')).ok());
  std::string buf(100, '\0');
  EXPECT_EQ(chunks_.ReadSlice(15, 100, 0, 100, buf.data()).code(), EIO);
}

TEST_P(ChunkStoreTest, ReadBeyondSliceIsEINVAL) {
  char buf[8];
  EXPECT_EQ(chunks_.ReadSlice(12, 100, 95, 8, buf).code(), EINVAL);
}

TEST_P(ChunkStoreTest, HoleReadsZeros) {
  std::string buf(100, 'x');
  ASSERT_TRUE(chunks_.ReadSlice(0, 1000, 10, 100, buf.data()).ok());
  EXPECT_EQ(buf, std::string(100, '\0'));
  EXPECT_TRUE(chunks_.DeleteSlice(0, 1000).ok());
}

TEST_P(ChunkStoreTest, ZeroLengthSlice) {
  auto writer = chunks_.NewWriter(13);
  ASSERT_TRUE(writer->WriteAt("", 0, 0).ok());
  ASSERT_TRUE(writer->Finish(0).ok());
  EXPECT_TRUE(Keys().empty());
  EXPECT_TRUE(chunks_.ReadSlice(13, 0, 0, 0, nullptr).ok());
  EXPECT_TRUE(chunks_.DeleteSlice(13, 0).ok());
}

TEST_P(ChunkStoreTest, ExactMultipleOfBlockSize) {
  const uint32_t size = 2 * kBlock;
  auto writer = chunks_.NewWriter(14);
  std::string data(size, 'e');
  ASSERT_TRUE(writer->WriteAt(data.data(), size, 0).ok());
  ASSERT_TRUE(writer->FlushTo(size).ok());  // both blocks complete
  EXPECT_EQ(Keys().size(), 2u);
  ASSERT_TRUE(writer->Finish(size).ok());  // nothing left to upload
  EXPECT_EQ(Keys().size(), 2u);
  EXPECT_EQ(Read(14, size, 0, size), data);
}

TEST_P(ChunkStoreTest, ConcurrentWritersAndReaders) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t id = 100 + uint64_t(t);
      const std::string data(3 * kBlock + uint32_t(t), char('A' + t));
      auto writer = chunks_.NewWriter(id);
      if (!writer->WriteAt(data.data(), data.size(), 0).ok() || !writer->Finish(uint32_t(data.size())).ok()) {
        ++failures[size_t(t)];
        return;
      }
      std::string buf(data.size(), '\0');
      for (int r = 0; r < 20; ++r) {
        if (!chunks_.ReadSlice(id, uint32_t(data.size()), 0, uint32_t(data.size()), buf.data()).ok() ||
            buf != data) {
          ++failures[size_t(t)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[size_t(t)], 0) << "thread " << t;
}

// ---------------------------------------------------------------- prefetch guard

TEST(PrefetchGuardTest, PrefetchesWhileCachedReadsPay) {
  PrefetchGuard g;
  constexpr uint32_t kBlock = 4 << 20;
  // Sequential-like: one miss per block, then the rest of the block hits.
  for (uint32_t i = 0; i < 4 * PrefetchGuard::kWindow; ++i) {
    if (i % 4 == 0) {
      g.Read(1 << 20, false);
      EXPECT_TRUE(g.Miss(kBlock)) << i;
    } else {
      g.Read(1 << 20, true);
    }
  }
  EXPECT_FALSE(g.throttled());
}

TEST(PrefetchGuardTest, RandomReadsOverMoreThanTheCacheThrottleToProbes) {
  PrefetchGuard g;
  constexpr uint32_t kBlock = 4 << 20;
  // 4 KiB reads, one in four hits: each miss would fetch 4 MiB for 4 KiB.
  auto window = [&](int hit_every) {
    int prefetches = 0;
    for (uint32_t i = 0; i < PrefetchGuard::kWindow; ++i) {
      if (i % hit_every == 0) {
        g.Read(4096, true);
      } else {
        g.Read(4096, false);
        prefetches += g.Miss(kBlock);
      }
    }
    return prefetches;
  };
  const int misses = int(PrefetchGuard::kWindow) * 3 / 4;
  EXPECT_EQ(window(4), misses);  // the first window prefetches every miss
  EXPECT_TRUE(g.throttled());
  EXPECT_LE(window(4), 1);  // then one probe per interval at most
  EXPECT_TRUE(g.throttled());
  std::this_thread::sleep_for(std::chrono::microseconds(PrefetchGuard::kProbeIntervalUs + 1000));
  EXPECT_EQ(window(4), 1);
  EXPECT_TRUE(g.throttled());
  // A window whose misses happen to make no probe does not end it.
  for (uint32_t i = 0; i < PrefetchGuard::kWindow; ++i) g.Read(4096, i % 4 == 0);
  EXPECT_TRUE(g.throttled());
  // Once the data fits (every read hits), prefetching comes back.
  window(1);
  EXPECT_FALSE(g.throttled());
  g.Read(4096, false);
  EXPECT_TRUE(g.Miss(kBlock));
}

// A block object damaged underneath the mount in a local-directory bucket
// (cut short by a full disk or a stray tool, or replaced by a directory)
// reads as EIO, whole or in part, through either read path (whole block,
// range straight into the reader's buffer): never as zeros or stale bytes.
TEST(ChunkStoreFileBucketTest, DamagedBlockObjectsReadAsEioNeverAsWrongData) {
  testing::TempDir dir;
  object::FileStore files(dir.path() + "/bucket", /*fsync=*/false);
  ASSERT_TRUE(files.Create().ok());
  std::mt19937 rng(3);
  const std::string data = testing::RandomBytes(rng, 3 * kBlock);
  {
    ChunkStore writer(&files, StoreConfig{.block_size = kBlock});
    for (uint32_t k = 0; k < 3; ++k)
      ASSERT_TRUE(writer.UploadBlock(7, k, std::string_view(data).substr(k * kBlock, kBlock)).ok());
  }
  auto read = [&](uint32_t off, uint32_t len) -> Result<std::string> {
    ChunkStore cold(&files, StoreConfig{.block_size = kBlock, .mem_cache_bytes = 0});  // no cache between reads
    std::string out(len, '\xee');
    RETURN_IF_ERROR(cold.ReadSlice(7, 3 * kBlock, off, len, out.data()));
    return out;
  };
  auto got = read(0, 3 * kBlock);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(*got == data);

  // Block 1 cut to half its length.
  std::filesystem::resize_file(dir.path() + "/bucket/" + BlockKey(7, 1, kBlock), kBlock / 2);
  for (auto [off, len] : {std::pair<uint32_t, uint32_t>{kBlock, kBlock}, {kBlock + kBlock / 2 + 10, 100},
                          {kBlock + kBlock / 2 - 10, 100}, {0, 3 * kBlock}}) {
    auto r = read(off, len);
    EXPECT_FALSE(r.ok()) << "read [" << off << ", +" << len << ") of a cut block succeeded";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), EIO) << r.status().ToString();
    }
  }
  // What is left of it still reads right.
  got = read(kBlock + 100, 200);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data.substr(kBlock + 100, 200));

  // Block 2 replaced by a directory.
  const std::string path2 = dir.path() + "/bucket/" + BlockKey(7, 2, kBlock);
  ASSERT_TRUE(std::filesystem::remove(path2));
  ASSERT_TRUE(std::filesystem::create_directory(path2));
  for (auto [off, len] : {std::pair<uint32_t, uint32_t>{2 * kBlock, kBlock}, {2 * kBlock + 10, 100}}) {
    auto r = read(off, len);
    EXPECT_FALSE(r.ok()) << "read [" << off << ", +" << len << ") of a block that is a directory succeeded";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), EIO) << r.status().ToString();
    }
  }
  // Block 0 is intact.
  got = read(0, kBlock);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data.substr(0, kBlock));
}

}  // namespace
}  // namespace tessera::chunk
