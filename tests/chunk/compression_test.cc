#include "chunk/compression.h"

#include <random>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/memory_store.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

using testing::CompressibleBytes;
using testing::CountingStore;
using testing::RandomBytes;

constexpr uint32_t kBlock = 64 << 10;

TEST(CompressionTest, ParseAndName) {
  for (Compression c : {Compression::kNone, Compression::kLz4, Compression::kZstd}) {
    Result<Compression> parsed = ParseCompression(CompressionName(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(ParseCompression("gzip").status().code(), EINVAL);
  EXPECT_EQ(ParseCompression("").status().code(), EINVAL);
}

class CompressionRoundTripTest : public ::testing::TestWithParam<Compression> {
 protected:
  std::mt19937 rng_{5};
  object::MemoryStore objects_{"test"};
  CountingStore counting_{&objects_};
};

TEST_P(CompressionRoundTripTest, BlockCodecRoundTrips) {
  for (size_t n : {size_t(1), size_t(100), size_t(kBlock), size_t(4u << 20)}) {
    for (const std::string& block : {RandomBytes(rng_, n), CompressibleBytes(rng_, n), std::string(n, '\0')}) {
      Result<std::string> body = CompressBlock(GetParam(), block);
      ASSERT_TRUE(body.ok()) << body.status().ToString();
      Result<std::string> back = DecompressBlock(GetParam(), *body, uint32_t(n), "k");
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, block);
    }
  }
}

// Slices written and read back through ChunkStore, with random (incompressible)
// and text-like data, all reads from the store (no caches).
TEST_P(CompressionRoundTripTest, ThroughChunkStore) {
  const Compression c = GetParam();
  ChunkStore chunks(&counting_, StoreConfig{.block_size = kBlock, .compression = c, .mem_cache_bytes = 0});
  const uint32_t size = 3 * kBlock + 1000;
  const std::string random = RandomBytes(rng_, size), text = CompressibleBytes(rng_, size);
  uint64_t uploaded = 0;
  for (auto [id, data] : {std::pair<uint64_t, const std::string*>{1, &random}, {2, &text}}) {
    auto writer = chunks.NewWriter(id);
    ASSERT_TRUE(writer->WriteAt(data->data(), size, 0).ok());
    ASSERT_TRUE(writer->Finish(size).ok());

    // Keys keep the uncompressed length; bodies decode to the block.
    uint64_t body_bytes = 0;
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t len = BlockLen(size, kBlock, i);
      Result<std::string> body = objects_.Get(BlockKey(id, i, len), 0, -1);
      ASSERT_TRUE(body.ok()) << BlockKey(id, i, len);
      body_bytes += body->size();
      Result<std::string> block = DecompressBlock(c, *body, len, "k");
      ASSERT_TRUE(block.ok()) << block.status().ToString();
      EXPECT_EQ(*block, data->substr(size_t(i) * kBlock, len));
    }
    if (data == &text) {
      EXPECT_LT(body_bytes, size / 2) << "text should compress well";
    }
    uploaded += body_bytes;
    EXPECT_EQ(chunks.stats().store_put_bytes, uploaded);

    std::string buf(size, '\0');
    ASSERT_TRUE(chunks.ReadSlice(id, size, 0, size, buf.data()).ok());
    EXPECT_EQ(buf, *data);
    // A partial read still fetches (and decodes) the whole object.
    const int gets = counting_.gets.load();
    const uint64_t fetched = chunks.stats().store_get_bytes;
    ASSERT_TRUE(chunks.ReadSlice(id, size, kBlock + 7, 10, buf.data()).ok());
    EXPECT_EQ(buf.substr(0, 10), data->substr(kBlock + 7, 10));
    EXPECT_EQ(counting_.gets.load(), gets + 1);
    EXPECT_EQ(chunks.stats().store_get_bytes - fetched, objects_.Head(BlockKey(id, 1, kBlock))->size);
  }
}

TEST_P(CompressionRoundTripTest, CachesHoldUncompressedBlocks) {
  testing::TempDir dir;
  StoreConfig config{.block_size = kBlock, .compression = GetParam()};
  config.cache_dir = dir.path();
  config.cache_volume = "vol";
  config.free_space_ratio = 0;
  const std::string text = CompressibleBytes(rng_, kBlock);
  {
    ChunkStore chunks(&counting_, config);
    auto writer = chunks.NewWriter(3);
    ASSERT_TRUE(writer->WriteAt(text.data(), kBlock, 0).ok());
    ASSERT_TRUE(writer->Finish(kBlock).ok());
    EXPECT_EQ(chunks.stats().mem_bytes, kBlock);
  }
  ChunkStore chunks(&counting_, config);
  EXPECT_EQ(chunks.stats().disk_bytes, kBlock + kDiskCacheHeaderSize);
  std::string buf(kBlock, '\0');
  ASSERT_TRUE(chunks.ReadSlice(3, kBlock, 0, kBlock, buf.data()).ok());
  EXPECT_EQ(buf, text);
  EXPECT_EQ(counting_.gets.load(), 0);
}

// Damaged objects: truncated, garbage, or a valid body of another length.
TEST_P(CompressionRoundTripTest, DamagedObjectIsEIONamingTheKey) {
  const Compression c = GetParam();
  ChunkStore chunks(&objects_, StoreConfig{.block_size = kBlock, .compression = c, .mem_cache_bytes = 0});
  const std::string text = CompressibleBytes(rng_, kBlock);
  const std::string key = BlockKey(8, 0, kBlock);
  Result<std::string> good = CompressBlock(c, text);
  ASSERT_TRUE(good.ok());
  Result<std::string> shorter = CompressBlock(c, text.substr(0, kBlock - 1));
  ASSERT_TRUE(shorter.ok());
  std::string longer_raw = text + "x";
  Result<std::string> longer = CompressBlock(c, longer_raw);
  ASSERT_TRUE(longer.ok());

  for (const std::string& body : {good->substr(0, good->size() / 2), good->substr(0, good->size() - 1),
                                  RandomBytes(rng_, 1000), std::string(), *shorter, *longer}) {
    ASSERT_TRUE(objects_.Put(key, body).ok());
    std::string buf(kBlock, '\0');
    Status st = chunks.ReadSlice(8, kBlock, 0, 100, buf.data());
    EXPECT_EQ(st.code(), EIO) << "body of " << body.size() << " bytes";
    EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  }
  ASSERT_TRUE(objects_.Put(key, *good).ok());
  std::string buf(kBlock, '\0');
  ASSERT_TRUE(chunks.ReadSlice(8, kBlock, 0, kBlock, buf.data()).ok());
  EXPECT_EQ(buf, text);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CompressionRoundTripTest,
                         ::testing::Values(Compression::kLz4, Compression::kZstd),
                         [](const ::testing::TestParamInfo<Compression>& p) {
                           return std::string(CompressionName(p.param));
                         });

TEST(CompressionTest, ObjectsOfAnUncompressedVolumeAreTheRawBlocks) {
  object::MemoryStore objects("test");
  ChunkStore chunks(&objects, StoreConfig{.block_size = kBlock});
  auto writer = chunks.NewWriter(1);
  ASSERT_TRUE(writer->WriteAt("hello", 5, 0).ok());
  ASSERT_TRUE(writer->Finish(5).ok());
  EXPECT_EQ(*objects.Get(BlockKey(1, 0, 5), 0, -1), "hello");
}

}  // namespace
}  // namespace tessera::chunk
