// What a client's data path does when it learns that another client changed
// a file it has open (Vfs::OthersChanged, fed by the engine's change
// notifications through fuse/coherence): the kernel drops its pages of the
// file, and the slice lists and length cached for the open file must not
// serve the old bytes again.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "../object/flaky_store.h"
#include "chunk/chunk_store.h"
#include "meta/meta.h"
#include "vfs/vfs.h"

namespace tessera::vfs {
namespace {

constexpr uint32_t kBlock = 4096;

std::string Bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(1 + rng() % 255);
  return s;
}

// Client a keeps the file open and has read it; client b (the engine alone)
// truncates it and extends it again, then appends; after each change is
// reported, a's reads through the same handle see zeros where the truncate
// cut, and the new length. They used to come from the cached slice view:
// the old bytes (their objects were still in the bucket) and the old length
// (review).
TEST(VfsCoherenceTest, AnOpenFileReadsWhatAnotherClientChanged) {
  const std::string url = "memory://vfs-coherence-" + std::to_string(getpid());
  auto ma = meta::Open(url);
  auto mb = meta::Open(url);
  ASSERT_TRUE(ma.ok() && mb.ok());
  meta::Format format;
  format.name = "test";
  format.block_size = kBlock;
  ASSERT_TRUE((*ma)->Init(format, false).ok());
  ASSERT_TRUE((*mb)->Load().ok());
  tessera::testing::FlakyStore objects;
  chunk::ChunkStore chunks(&objects, chunk::StoreConfig{.block_size = kBlock, .mem_cache_bytes = 0});
  Config c;
  c.cleanup_interval_ms = 3600 * 1000;  // the truncated slice's objects stay in the bucket
  Vfs a(ma->get(), &chunks, c);
  ASSERT_TRUE(a.Start().ok());
  const meta::Context ctx = meta::Context::Root();
  meta::Ino ino = 0;
  meta::Attr attr;
  Handle* fh = nullptr;
  ASSERT_TRUE(a.Create(ctx, meta::kRootIno, "f", 0644, 022, O_RDWR | O_CREAT, &fh, &ino, &attr).ok());
  std::mt19937_64 rng(13);
  const std::string data = Bytes(rng, 8 * kBlock);
  ASSERT_TRUE(a.Write(ctx, fh, 0, data.data(), data.size()).ok());
  ASSERT_TRUE(a.Fsync(ctx, fh).ok());
  std::string buf(data.size(), '\0');
  auto r = a.Read(ctx, fh, 0, buf.size(), buf.data());
  ASSERT_TRUE(r.ok() && *r == data.size());

  // b: truncate to one block and back to eight.
  ASSERT_TRUE((*mb)->Truncate(ctx, ino, kBlock, true, &attr).ok());
  ASSERT_TRUE((*mb)->Truncate(ctx, ino, data.size(), true, &attr).ok());
  a.OthersChanged({meta::Change{0, "", ino}}, false, 0);
  r = a.Read(ctx, fh, 0, buf.size(), buf.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(*r, data.size());
  EXPECT_EQ(buf.substr(0, kBlock), data.substr(0, kBlock));
  EXPECT_EQ(buf.substr(kBlock), std::string(data.size() - kBlock, '\0')) << "bytes another client truncated away";

  // b: appends a block; a lost notification stands for every open file.
  const std::string more = Bytes(rng, kBlock);
  auto id = (*mb)->NewSliceId();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(chunks.StoreNewBlock(*id, 0, more).ok());
  ASSERT_TRUE((*mb)->Write(ctx, ino, 0, chunk::Slice{uint32_t(data.size()), *id, kBlock, 0, kBlock}, meta::Now(),
                           &attr).ok());
  a.OthersChanged({}, true, 0);
  buf.assign(data.size() + 2 * kBlock, '\xee');
  r = a.Read(ctx, fh, 0, buf.size(), buf.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, data.size() + kBlock) << "the length before another client's append";
  EXPECT_EQ(buf.substr(data.size(), kBlock), more);
  ASSERT_TRUE(a.Release(ctx, fh).ok());
  a.Stop();
}

}  // namespace
}  // namespace tessera::vfs
