// BufferPool (common/buffer_pool.h): buffers come back and are handed out
// again without a new allocation, small ones are not kept, the pool's bound
// holds (a raised one until the pool goes idle), and a shared block returns
// its buffer only when its last reference goes.
#include "common/buffer_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace tessera {
namespace {

constexpr size_t kBlock = 4 << 20;

TEST(BufferPoolTest, GivenBuffersAreTakenAgain) {
  BufferPool pool;
  std::string a = pool.Take(kBlock);
  EXPECT_TRUE(a.empty());
  EXPECT_GE(a.capacity(), kBlock);
  a.assign(1000, 'x');
  const char* room = a.data();
  pool.Give(std::move(a));
  EXPECT_TRUE(a.empty());
  EXPECT_GE(pool.kept_bytes(), kBlock);
  std::string b = pool.Take(kBlock);
  EXPECT_EQ(b.data(), room) << "the kept buffer was not handed out again";
  EXPECT_TRUE(b.empty()) << "a taken buffer must come empty";
  EXPECT_EQ(pool.kept_bytes(), 0u);
  // Too big a buffer for the request is not handed out (it would waste room).
  pool.Give(std::move(b));
  std::string small = pool.Take(kBlock / 4);
  EXPECT_NE(small.data(), room);
  EXPECT_GE(pool.kept_bytes(), kBlock);
}

// Sized hands out a kept buffer without zeroing the bytes it held (a memset
// of 4 MiB per block read was 10% of a mount's CPU in random reads); only
// bytes past them are new, and zero.
TEST(BufferPoolTest, SizedReusesAKeptBufferWithoutZeroingIt) {
  BufferPool pool;
  std::string a = pool.Sized(kBlock);
  ASSERT_EQ(a.size(), kBlock);
  a.assign(kBlock / 2, 'x');
  const char* room = a.data();
  pool.Give(std::move(a));
  std::string b = pool.Sized(kBlock / 4 * 3);
  ASSERT_EQ(b.data(), room) << "the kept buffer was not handed out again";
  ASSERT_EQ(b.size(), kBlock / 4 * 3);
  EXPECT_EQ(b.find_first_not_of('x'), kBlock / 2) << "the kept bytes were rewritten";
  EXPECT_EQ(b.find_first_not_of('\0', kBlock / 2), std::string::npos) << "bytes past the kept ones are not zero";
  pool.Give(std::move(b));
  std::string c = pool.Take(kBlock);
  EXPECT_EQ(c.data(), room);
  EXPECT_TRUE(c.empty()) << "Take must hand a kept buffer out empty";
}

TEST(BufferPoolTest, SmallBuffersAreNotKeptAndTheBoundHolds) {
  BufferPool pool;
  std::string tiny(100, 'x');
  pool.Give(std::move(tiny));
  EXPECT_EQ(pool.kept_bytes(), 0u);
  for (size_t i = 0; i < 2 * BufferPool::kMaxBytes / kBlock; ++i) {
    std::string block(kBlock, 'y');
    pool.Give(std::move(block));
  }
  EXPECT_LE(pool.kept_bytes(), BufferPool::kMaxBytes);
  EXPECT_GE(pool.kept_bytes(), BufferPool::kMaxBytes - 2 * kBlock);
}

TEST(BufferPoolTest, GiveBlockKeepsOnlyABlocksBuffer) {
  BufferPool pool;
  std::string grown(BufferPool::kMinBytes, 'x');  // kept by Give, but fits no block
  pool.GiveBlock(std::move(grown), kBlock);
  EXPECT_TRUE(grown.empty());
  EXPECT_EQ(pool.kept_bytes(), 0u);
  std::string block = pool.Take(kBlock);
  block.assign(10, 'y');
  pool.GiveBlock(std::move(block), kBlock);
  EXPECT_TRUE(block.empty());
  EXPECT_GE(pool.kept_bytes(), kBlock);
}

TEST(BufferPoolTest, ASharedBlockReturnsItsBufferAfterItsLastReference) {
  BufferPool pool;
  std::string s = pool.Take(kBlock);
  s.assign(kBlock, 'z');
  const char* room = s.data();
  auto ref = pool.Share(std::move(s));
  auto second = ref;
  ref.reset();
  EXPECT_EQ(pool.kept_bytes(), 0u) << "given back while a reference still reads it";
  EXPECT_EQ((*second)[kBlock - 1], 'z');
  second.reset();
  EXPECT_GE(pool.kept_bytes(), kBlock);
  EXPECT_EQ(pool.Take(kBlock).data(), room);
  // A small block is shared as it is, and not kept.
  auto small = pool.Share(std::string(10, 'q'));
  EXPECT_EQ(*small, std::string(10, 'q'));
  small.reset();
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST(BufferPoolTest, ARaisedLimitKeepsMoreUntilThePoolGoesIdle) {
  BufferPool pool;
  pool.set_limit(BufferPool::kMaxBytes / 2);
  EXPECT_EQ(pool.limit(), BufferPool::kMaxBytes) << "never below the default";
  pool.set_limit(2 * BufferPool::kMaxBytes);
  std::vector<std::string> blocks;  // as two files' commits pack their buffers at once
  for (size_t i = 0; i < 2 * BufferPool::kMaxBytes / kBlock; ++i) blocks.push_back(pool.Take(kBlock));
  for (auto& b : blocks) {
    b.assign(kBlock, 'z');  // touched, as packing does
    pool.Give(std::move(b));
  }
  EXPECT_GE(pool.kept_bytes(), 2 * BufferPool::kMaxBytes - 2 * kBlock) << "all of them come back for the next commit";

  EXPECT_EQ(pool.TrimIdle(std::chrono::hours(1)), 0u) << "asked a moment ago: nothing is trimmed";
  EXPECT_GE(pool.kept_bytes(), 2 * BufferPool::kMaxBytes - 2 * kBlock);

  const size_t before = pool.kept_bytes();
  const size_t freed = pool.TrimIdle(std::chrono::seconds(0));
  EXPECT_EQ(pool.kept_bytes(), before - freed);
  EXPECT_LE(pool.kept_bytes(), BufferPool::kMaxBytes) << "an idle pool goes back to the default bound";
  EXPECT_GE(pool.kept_bytes(), BufferPool::kMaxBytes - 2 * kBlock) << "and keeps that much";
  EXPECT_EQ(pool.TrimIdle(std::chrono::seconds(0)), 0u);

  // What is kept is still handed out.
  std::string again = pool.Take(kBlock);
  EXPECT_GE(again.capacity(), kBlock);
  EXPECT_LE(pool.kept_bytes(), BufferPool::kMaxBytes - kBlock + kBlock / 2);
}

}  // namespace
}  // namespace tessera
