// CompactChunk's rule for background compactions: a chunk that small writes
// scattered over it (a packed slice, a record per write) is not rewritten
// while that would rewrite more than 8 KiB per record and the slices hold
// less than twice the visible data; it says at which record count to ask
// again. Explicit compactions (min_slices 2) always rewrite.
#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/buffer_pool.h"
#include "../chunk/test_util.h"
#include "object/memory_store.h"
#include "vfs/compactor.h"
#include "vfs/file_data.h"
#include "vfs/vfs.h"

namespace tessera::vfs {
namespace {

constexpr uint32_t kBlock = 4096;

class CompactorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = meta::Open("memory://");
    ASSERT_TRUE(m.ok());
    meta_ = std::move(*m);
    meta::Format format;
    format.name = "test";
    format.block_size = kBlock;
    ASSERT_TRUE(meta_->Init(format, false).ok());
    chunks_ = std::make_unique<chunk::ChunkStore>(&objects_, chunk::StoreConfig{.block_size = kBlock});
    Config c;
    c.cleanup_interval_ms = 10;
    c.compact_threshold = 0;  // only the compactions the test runs
    vfs_ = std::make_unique<Vfs>(meta_.get(), chunks_.get(), c);
    ASSERT_TRUE(vfs_->Start().ok());
  }
  void TearDown() override { vfs_.reset(); }

  // `n` writes of 1,000 bytes, `stride` apart, last to first (never cut into
  // blocks), committed at close as one packed slice. Returns the contents.
  std::string WriteScattered(meta::Ino* ino, int n, uint32_t stride) {
    Handle* fh = nullptr;
    meta::Attr attr;
    EXPECT_TRUE(vfs_->Create(ctx_, meta::kRootIno, "f", 0644, 022, O_RDWR | O_CREAT, &fh, ino, &attr).ok());
    std::string want(size_t(n - 1) * stride + 1000, '\0');
    for (int i = n - 1; i >= 0; --i) {
      std::string piece(1000, char('A' + i % 26));
      EXPECT_TRUE(vfs_->Write(ctx_, fh, uint64_t(i) * stride, piece.data(), piece.size()).ok());
      want.replace(size_t(i) * stride, piece.size(), piece);
    }
    EXPECT_TRUE(vfs_->Release(ctx_, fh).ok());
    return want;
  }
  std::string ReadAll(meta::Ino ino, size_t size) {
    Handle* fh = nullptr;
    meta::Attr attr;
    EXPECT_TRUE(vfs_->Open(ctx_, ino, O_RDONLY, &fh, &attr).ok());
    std::string buf(size + 10, '\xee');
    auto r = vfs_->Read(ctx_, fh, 0, buf.size(), buf.data());
    EXPECT_TRUE(r.ok());
    buf.resize(r.ok() ? *r : 0);
    EXPECT_TRUE(vfs_->Release(ctx_, fh).ok());
    return buf;
  }

  meta::Context ctx_ = meta::Context::Root();
  std::unique_ptr<meta::Meta> meta_;
  object::MemoryStore objects_{"x"};
  std::unique_ptr<chunk::ChunkStore> chunks_;
  std::unique_ptr<Vfs> vfs_;
};

TEST_F(CompactorTest, ScatteredRecordsWaitForMoreAndExplicitCompactionRewrites) {
  // 20 records 32 KiB apart: one run of ~608 KiB to rewrite (gaps under
  // 64 KiB are zeros of the run), over 8 KiB per record; the packed slice
  // holds 20,000 bytes for 20,000 visible.
  meta::Ino ino = 0;
  const std::string want = WriteScattered(&ino, 20, 32 << 10);
  std::vector<chunk::Slice> slices;
  ASSERT_TRUE(meta_->Read(ino, 0, &slices).ok());
  ASSERT_EQ(slices.size(), 20u);

  CompactResult r;
  ASSERT_TRUE(CompactChunk(meta_.get(), chunks_.get(), ino, 0, /*min_slices=*/4, &r).ok());
  EXPECT_FALSE(r.changed) << "a background compaction rewrote 30 KiB per record";
  // 608 KiB / 8 KiB = 77 records, but a quarter more records (26) comes first.
  EXPECT_EQ(r.retry_at, 26u);
  ASSERT_TRUE(meta_->Read(ino, 0, &slices).ok());
  EXPECT_EQ(slices.size(), 20u);

  ASSERT_TRUE(CompactChunk(meta_.get(), chunks_.get(), ino, 0, /*min_slices=*/2, &r).ok());
  EXPECT_TRUE(r.changed) << "an explicit compaction did not run";
  EXPECT_EQ(r.retry_at, 0u);
  EXPECT_EQ(r.slices_after, 1u);
  ASSERT_TRUE(meta_->Read(ino, 0, &slices).ok());
  EXPECT_EQ(slices.size(), 1u);
  EXPECT_EQ(ReadAll(ino, want.size()), want);
}

TEST_F(CompactorTest, CloseRecordsAreCompactedInTheBackgroundToo) {
  // 20 records 2,000 bytes apart: ~39 KiB to rewrite, under 8 KiB per record.
  meta::Ino ino = 0;
  const std::string want = WriteScattered(&ino, 20, 2000);
  CompactResult r;
  ASSERT_TRUE(CompactChunk(meta_.get(), chunks_.get(), ino, 0, /*min_slices=*/4, &r).ok());
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.retry_at, 0u);
  EXPECT_EQ(ReadAll(ino, want.size()), want);
}

// DataPath asks again about a chunk found not worth rewriting only once it
// holds retry_at records or a quarter fewer than when it was checked (it
// was truncated or compacted meanwhile), not at every commit.
TEST_F(CompactorTest, ChunkNotWorthItIsCheckedAgainOnlyWhenItsCountMoves) {
  meta::Ino ino = 0;
  (void)WriteScattered(&ino, 20, 32 << 10);  // 20 records, retry_at 26 (above)
  DataPath dp(meta_.get(), chunks_.get(), 64 << 20, 64 << 20, 2);
  dp.ConfigureCompaction(4, nullptr);
  const std::vector<meta::SliceWrite> writes(1, meta::SliceWrite{0, chunk::Slice{}});
  auto wait_for_checks = [&](uint64_t n) {
    for (int i = 0; i < 500 && dp.compaction_checks() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return dp.compaction_checks();
  };
  dp.ScheduleCompactions(ino, writes, {20});
  ASSERT_EQ(wait_for_checks(1), 1u);
  // Below retry_at: not asked. (Were it asked, the check below that waits
  // for the second one would count three, or, merged in the queue, one.)
  dp.ScheduleCompactions(ino, writes, {21});
  dp.ScheduleCompactions(ino, writes, {25});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  dp.ScheduleCompactions(ino, writes, {26});
  ASSERT_EQ(wait_for_checks(2), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dp.compaction_checks(), 2u) << "asked below retry_at";
  // The check found the 20 records the chunk holds (the counts given here
  // are made up): asked again at 26, or below 15 (3/4 of 20).
  dp.ScheduleCompactions(ino, writes, {25});
  dp.ScheduleCompactions(ino, writes, {15});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dp.compaction_checks(), 2u) << "asked below retry_at, or before the count fell by a quarter";
  dp.ScheduleCompactions(ino, writes, {14});
  ASSERT_EQ(wait_for_checks(3), 3u) << "a chunk whose record count fell was not asked again";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(dp.compaction_checks(), 3u);
  std::vector<chunk::Slice> slices;
  ASSERT_TRUE(meta_->Read(ino, 0, &slices).ok());
  EXPECT_EQ(slices.size(), 20u) << "a background compaction rewrote the chunk";
}

// A volume of `block`-byte blocks on the memory engine and a memory store,
// no background compaction, with an empty file "f" open read-write.
struct BigBlockVolume {
  void Open(uint32_t block) {
    auto opened = meta::Open("memory://");
    ASSERT_TRUE(opened.ok());
    m = std::move(*opened);
    meta::Format format;
    format.name = "test";
    format.block_size = block;
    ASSERT_TRUE(m->Init(format, false).ok());
    chunks = std::make_unique<chunk::ChunkStore>(&objects, chunk::StoreConfig{.block_size = block});
    Config c;
    c.compact_threshold = 0;
    vfs = std::make_unique<Vfs>(m.get(), chunks.get(), c);
    ASSERT_TRUE(vfs->Start().ok());
    meta::Attr attr;
    ASSERT_TRUE(
        vfs->Create(meta::Context::Root(), meta::kRootIno, "f", 0644, 022, O_RDWR | O_CREAT, &fh, &ino, &attr).ok());
  }
  ~BigBlockVolume() { vfs.reset(); }

  std::unique_ptr<meta::Meta> m;
  object::MemoryStore objects{"x"};
  std::unique_ptr<chunk::ChunkStore> chunks;
  std::unique_ptr<Vfs> vfs;
  Handle* fh = nullptr;
  meta::Ino ino = 0;
};

// The rewrite reads each new block into a pooled buffer, whose old bytes
// must never show: random overlapping writes (some across block edges, some
// far apart: separate runs, holes between) over several commits, compacted
// explicitly with the pool full of buffers of 0xAB, read back byte for byte.
TEST(CompactorRewriteTest, RewrittenBlocksHoldExactlyTheVisibleBytes) {
  constexpr uint32_t kBig = 128 << 10;  // pooled buffers are at least 64 KiB
  BigBlockVolume vol;
  ASSERT_NO_FATAL_FAILURE(vol.Open(kBig));
  auto& m = vol.m;
  auto& objects = vol.objects;
  auto& chunks = *vol.chunks;
  auto& vfs = *vol.vfs;
  const meta::Context ctx = meta::Context::Root();
  Handle* fh = vol.fh;
  meta::Ino ino = vol.ino;
  meta::Attr attr;
  std::mt19937 rng(7);
  std::string want;
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 40; ++i) {
      // Mostly in the first 1.5 MiB; now and then 3 MiB on (a far run).
      const uint64_t off = (rng() % 8 == 0 ? (3u << 20) : 0) + rng() % (3u << 19);
      std::string piece(1 + rng() % (3 * kBig / 2), char('a' + rng() % 26));
      ASSERT_TRUE(vfs.Write(ctx, fh, off, piece.data(), piece.size()).ok());
      if (want.size() < off + piece.size()) want.resize(off + piece.size(), '\0');
      want.replace(off, piece.size(), piece);
    }
    ASSERT_TRUE(vfs.Fsync(ctx, fh).ok());
  }
  // A run of its own at 2 MiB with holes under 64 KiB, so that zero-filled
  // gaps are always there: one inside a block, one across a block's edge.
  for (auto [off, len] : {std::pair<uint64_t, size_t>{2u << 20, 1000}, {(2u << 20) + 10000, 1000},
                          {(2u << 20) + 40000, 60000}, {(2u << 20) + kBig + 3000, 5000}}) {
    std::string piece(len, 'z');
    ASSERT_TRUE(vfs.Write(ctx, fh, off, piece.data(), piece.size()).ok());
    if (want.size() < off + len) want.resize(off + len, '\0');
    want.replace(off, len, piece);
  }
  ASSERT_TRUE(vfs.Fsync(ctx, fh).ok());
  ASSERT_TRUE(vfs.Release(ctx, fh).ok());
  std::vector<chunk::Slice> slices;
  ASSERT_TRUE(m->Read(ino, 0, &slices).ok());
  ASSERT_GT(slices.size(), 6u);
  for (int i = 0; i < 40; ++i) BufferPool::Default().Give(std::string(kBig, '\xab'));

  CompactResult r;
  ASSERT_TRUE(CompactChunk(m.get(), &chunks, ino, 0, /*min_slices=*/2, &r).ok());
  ASSERT_TRUE(r.changed);
  EXPECT_GE(r.slices_after, 3u) << "the writes at 2 MiB and at 3 MiB should make runs of their own";
  // What the mount reads (the rewritten blocks sit in its memory cache)...
  ASSERT_TRUE(vfs.Open(ctx, ino, O_RDONLY, &fh, &attr).ok());
  std::string got(want.size() + 10, '\xee');
  auto n = vfs.Read(ctx, fh, 0, got.size(), got.data());
  ASSERT_TRUE(n.ok());
  got.resize(*n);
  ASSERT_TRUE(vfs.Release(ctx, fh).ok());
  ASSERT_EQ(got.size(), want.size());
  if (got != want) {  // byte by byte only to name the first difference
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i << " after compaction";
  }
  // ... and what the objects hold, read without any cache.
  chunk::ChunkStore cold(&objects, chunk::StoreConfig{.block_size = kBig, .mem_cache_bytes = 0});
  ASSERT_TRUE(m->Read(ino, 0, &slices).ok());
  ASSERT_EQ(slices.size(), r.slices_after);
  for (const chunk::Slice& s : slices) {
    std::string bytes(s.len, '\xee');
    ASSERT_TRUE(cold.ReadSlice(s.id, s.size, s.off, s.len, bytes.data()).ok());
    ASSERT_TRUE(bytes == want.substr(s.pos, s.len)) << "slice at " << s.pos << " differs from what was written";
  }
}

std::vector<std::string> Keys(object::ObjectStore* store);

// Random small writes over a file leave a packed slice per commit, its
// pieces in position order: a new block's pieces from one packed block lie
// close together there, and compaction reads them with one request rather
// than one per piece (on S3, a round trip each), skipping the bytes
// overwritten since, and the rewritten blocks hold exactly what was visible.
TEST(CompactorRewriteTest, PiecesCloseInAPackedBlockAreReadTogether) {
  constexpr uint32_t kBig = 128 << 10;
  constexpr uint32_t kFile = 1 << 20;
  BigBlockVolume vol;
  ASSERT_NO_FATAL_FAILURE(vol.Open(kBig));
  auto& m = vol.m;
  auto& objects = vol.objects;
  auto& vfs = *vol.vfs;
  const meta::Context ctx = meta::Context::Root();
  Handle* fh = vol.fh;
  meta::Ino ino = vol.ino;
  meta::Attr attr;
  std::string want(kFile, '\0');
  for (uint32_t i = 0; i < kFile; ++i) want[i] = char('0' + i % 71);
  ASSERT_TRUE(vfs.Write(ctx, fh, 0, want.data(), want.size()).ok());
  ASSERT_TRUE(vfs.Fsync(ctx, fh).ok());
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 300; ++i) {
      const uint64_t off = (rng() % (kFile / 1024)) * 1024 + rng() % 3;
      std::string piece(std::min<uint64_t>(500 + rng() % 700, kFile - off), char('a' + rng() % 26));
      ASSERT_TRUE(vfs.Write(ctx, fh, off, piece.data(), piece.size()).ok());
      want.replace(off, piece.size(), piece);
    }
    ASSERT_TRUE(vfs.Fsync(ctx, fh).ok());
  }
  ASSERT_TRUE(vfs.Release(ctx, fh).ok());
  std::vector<chunk::Slice> slices;
  ASSERT_TRUE(m->Read(ino, 0, &slices).ok());
  size_t pieces = 0;
  for (const chunk::Slice& v : chunk::BuildView(slices)) pieces += v.id != 0;
  ASSERT_GT(pieces, 500u);

  chunk::testing::CountingStore counting(&objects);
  chunk::ChunkStore cold_counting(&counting, chunk::StoreConfig{.block_size = kBig, .mem_cache_bytes = 0});
  CompactResult r;
  // A read failing partway (a span read for several pieces) changes nothing
  // and leaves no new object behind.
  const std::vector<std::string> keys = Keys(&objects);
  counting.fail_gets_after = 10;
  Status failed = CompactChunk(m.get(), &cold_counting, ino, 0, /*min_slices=*/2, &r);
  EXPECT_EQ(failed.code(), EIO) << failed.ToString();
  EXPECT_FALSE(r.changed);
  std::vector<chunk::Slice> unchanged;
  ASSERT_TRUE(m->Read(ino, 0, &unchanged).ok());
  EXPECT_EQ(unchanged.size(), slices.size());
  EXPECT_EQ(Keys(&objects), keys);
  counting.fail_gets_after = INT32_MAX;
  counting.gets = 0;
  ASSERT_TRUE(CompactChunk(m.get(), &cold_counting, ino, 0, /*min_slices=*/2, &r).ok());
  ASSERT_TRUE(r.changed);
  EXPECT_EQ(r.slices_after, 1u);
  // Each of the 8 new blocks reads one span from the base slice's block
  // under it and one from each packed slice's block, or two where its
  // pieces cross from a packed slice's first block to its second (~250 KiB
  // each): at most 8 * (1 + 3 * 2) requests, where a request per piece
  // would be more than 500.
  EXPECT_LE(counting.gets, 8 * (1 + 3 * 2)) << pieces << " pieces";
  chunk::ChunkStore cold(&objects, chunk::StoreConfig{.block_size = kBig, .mem_cache_bytes = 0});
  ASSERT_TRUE(m->Read(ino, 0, &slices).ok());
  ASSERT_EQ(slices.size(), 1u);
  std::string got(kFile, '\xee');
  ASSERT_TRUE(cold.ReadSlice(slices[0].id, slices[0].size, slices[0].off, slices[0].len, got.data()).ok());
  if (got != want) {  // byte by byte only to name the first difference
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i << " after compaction";
  }
}

// A compaction whose upload fails partway (some of its new blocks stored,
// then a put fails) changes nothing: the chunk keeps its slices, the file
// reads as written, and the blocks it had stored are deleted again.
class FailingPuts final : public object::ObjectStore {
 public:
  FailingPuts(object::ObjectStore* base, int allowed) : base_(base), allowed_(allowed) {}
  std::string Describe() const override { return "failing-puts+" + base_->Describe(); }
  Status Create() override { return base_->Create(); }
  Status Put(const std::string& key, std::string_view data) override {
    if (allowed_-- <= 0) return Status::Err(EIO, "injected put failure");
    return base_->Put(key, data);
  }
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override {
    return base_->Get(key, off, len);
  }
  Status Delete(const std::string& key) override { return base_->Delete(key); }
  Result<object::ObjectInfo> Head(const std::string& key) override { return base_->Head(key); }
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<object::ObjectInfo>* out, bool* more) override {
    return base_->List(prefix, start_after, limit, out, more);
  }

 private:
  object::ObjectStore* const base_;
  int allowed_;
};

std::vector<std::string> Keys(object::ObjectStore* store) {
  std::vector<object::ObjectInfo> all;
  bool more = false;
  EXPECT_TRUE(store->List("", "", 1000000, &all, &more).ok());
  std::vector<std::string> keys;
  for (const auto& o : all) keys.push_back(o.key);
  return keys;
}

TEST_F(CompactorTest, AnUploadFailingPartwayChangesNothing) {
  // 40 records 2,000 bytes apart (~80 KiB): one run of 20 blocks of 4 KiB.
  meta::Ino ino = 0;
  const std::string want = WriteScattered(&ino, 40, 2000);
  std::vector<chunk::Slice> before;
  ASSERT_TRUE(meta_->Read(ino, 0, &before).ok());
  const std::vector<std::string> keys = Keys(&objects_);
  for (int allowed : {0, 1, 7}) {
    FailingPuts failing(&objects_, allowed);
    chunk::ChunkStore store(&failing, chunk::StoreConfig{.block_size = kBlock});
    CompactResult r;
    Status st = CompactChunk(meta_.get(), &store, ino, 0, /*min_slices=*/2, &r);
    EXPECT_EQ(st.code(), EIO) << "after " << allowed << " puts: " << st.ToString();
    EXPECT_FALSE(r.changed);
    std::vector<chunk::Slice> after;
    ASSERT_TRUE(meta_->Read(ino, 0, &after).ok());
    ASSERT_EQ(after.size(), before.size()) << "after " << allowed << " puts";
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].id, before[i].id);
      EXPECT_EQ(after[i].pos, before[i].pos);
      EXPECT_EQ(after[i].len, before[i].len);
    }
    EXPECT_EQ(Keys(&objects_), keys) << "the blocks stored before the failure were left behind (" << allowed << ")";
    EXPECT_EQ(ReadAll(ino, want.size()), want);
  }
  // The same compaction with a working store goes through.
  CompactResult r;
  ASSERT_TRUE(CompactChunk(meta_.get(), chunks_.get(), ino, 0, /*min_slices=*/2, &r).ok());
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(ReadAll(ino, want.size()), want);
}

}  // namespace
}  // namespace tessera::vfs
