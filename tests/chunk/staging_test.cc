// Writeback staging: StagingArea on its own (packs, recovery, retries,
// cancellation) and through the ChunkStore (reads of staged blocks, uploads
// that fail, DeleteSlice).
#include "chunk/staging.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/memory_store.h"
#include "../object/flaky_store.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

namespace fs = std::filesystem;
using testing::RandomBytes;
using testing::TempDir;
using namespace std::chrono_literals;

// Waits up to 10 s for cond.
template <typename Cond>
bool Eventually(Cond cond) {
  for (int i = 0; i < 1000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename() != ".lock") names.push_back(it->path().filename().string());
  return names;
}

// An upload target for StagingArea tests: a map of uploaded blocks; puts
// fail while `blocked`, and the next `fail_next` puts fail.
class Uploads {
 public:
  Status Put(const std::string& key, const BlockRef& block) {
    attempts.fetch_add(1);
    if (blocked.load()) return Status::Err(EIO, "blocked");
    if (fail_next.load() > 0) {
      fail_next.fetch_sub(1);
      return Status::Err(EIO, "injected");
    }
    std::lock_guard lock(mu_);
    objects_[key] = *block;
    return Status::OK();
  }
  Status Remove(const std::string& key) {
    std::lock_guard lock(mu_);
    objects_.erase(key);
    return Status::OK();
  }
  bool Has(const std::string& key) {
    std::lock_guard lock(mu_);
    return objects_.count(key) != 0;
  }
  std::string Get(const std::string& key) {
    std::lock_guard lock(mu_);
    return objects_.count(key) ? objects_[key] : std::string("<missing>");
  }
  size_t Count() {
    std::lock_guard lock(mu_);
    return objects_.size();
  }

  std::atomic<bool> blocked{false};
  std::atomic<int> fail_next{0};
  std::atomic<int> attempts{0};

 private:
  std::mutex mu_;
  std::map<std::string, std::string> objects_;
};

class StagingAreaTest : public ::testing::Test {
 protected:
  StagingOptions Options(Uploads* up) {
    StagingOptions o;
    o.dir = dir_.path() + "/rawstaging";
    o.uploaders = 4;
    o.free_space_ratio = 0;
    o.retry_initial = 5ms;
    o.retry_max = 20ms;
    o.upload = [up](const std::string& key, const BlockRef& b) { return up->Put(key, b); };
    o.remove = [up](const std::string& key) { return up->Remove(key); };
    return o;
  }
  std::unique_ptr<StagingArea> Open(Uploads* up) {
    auto area = StagingArea::Open(Options(up));
    EXPECT_TRUE(area.ok()) << area.status().ToString();
    return area.ok() ? std::move(area).value() : nullptr;
  }
  std::string StagingDir() const { return dir_.path() + "/rawstaging"; }
  std::vector<std::string> Packs() {
    std::vector<std::string> packs;
    for (auto& name : FilesIn(StagingDir()))
      if (name.size() > 5 && name.substr(name.size() - 5) == ".pack") packs.push_back(StagingDir() + "/" + name);
    return packs;
  }

  TempDir dir_;
  std::mt19937 rng_{42};
};

TEST_F(StagingAreaTest, StagedBlocksAreReadableUntilUploadedThenGone) {
  Uploads up;
  up.blocked = true;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  const std::string a = RandomBytes(rng_, 5000), b = RandomBytes(rng_, 1);
  ASSERT_TRUE(area->Append({{"k/a_0_5000", a}, {"k/b_0_1", b}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  auto got = area->Get("k/a_0_5000");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_NE(*got, nullptr);
  EXPECT_EQ(**got, a);
  EXPECT_EQ(*area->Get("k/b_0_1").value(), b);
  EXPECT_EQ(area->Get("k/other").value(), nullptr);
  EXPECT_EQ(area->stats().pending_blocks, 2u);
  EXPECT_EQ(area->stats().pending_bytes, 5001u);
  ASSERT_TRUE(Eventually([&] { return up.attempts.load() >= 4; }));  // retried while blocked
  EXPECT_EQ(up.Count(), 0u);

  up.blocked = false;
  area->Drain();
  EXPECT_EQ(up.Get("k/a_0_5000"), a);
  EXPECT_EQ(up.Get("k/b_0_1"), b);
  EXPECT_EQ(area->Get("k/a_0_5000").value(), nullptr);
  EXPECT_FALSE(area->Contains("k/b_0_1"));
  const auto s = area->stats();
  EXPECT_EQ(s.pending_blocks, 0u);
  EXPECT_EQ(s.uploaded, 2u);
  EXPECT_GE(s.upload_failures, 2u);
  EXPECT_EQ(s.packs, 0u);
  EXPECT_TRUE(Packs().empty()) << "a drained staging area keeps no pack";
}

TEST_F(StagingAreaTest, FailedUploadsAreRetriedNeverDropped) {
  Uploads up;
  up.fail_next = 25;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  std::vector<std::string> data;
  std::vector<StagingArea::Block> blocks;
  for (int i = 0; i < 10; ++i) data.push_back(RandomBytes(rng_, 100 + i));
  for (int i = 0; i < 10; ++i) blocks.push_back({"k/" + std::to_string(i), data[i]});
  ASSERT_TRUE(area->Append(blocks).ok());
  area->Drain();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(up.Get("k/" + std::to_string(i)), data[i]);
  EXPECT_EQ(area->stats().upload_failures, 25u);
  EXPECT_EQ(area->stats().uploaded, 10u);
  EXPECT_EQ(up.attempts.load(), 35);
}

TEST_F(StagingAreaTest, RecoveryUploadsLeftoversAndIgnoresTemporaryFilesAndTornRecords) {
  Uploads up;
  up.blocked = true;
  const std::string a = RandomBytes(rng_, 3000), b = RandomBytes(rng_, 4000), c = RandomBytes(rng_, 5000);
  {
    auto area = Open(&up);
    ASSERT_NE(area, nullptr);
    ASSERT_TRUE(area->Append({{"k/a", a}}).ok());
    ASSERT_TRUE(area->Append({{"k/b", b}}).ok());
    ASSERT_TRUE(area->Sync().ok());
  }  // like a crash: nothing was uploaded
  {
    // A pack of another staging area, holding a block that was never
    // acknowledged, left under a temporary name: it must not be uploaded.
    TempDir other;
    StagingOptions o = Options(&up);
    o.dir = other.path();
    auto area = StagingArea::Open(o);
    ASSERT_TRUE(area.ok());
    ASSERT_TRUE((*area)->Append({{"k/c", c}}).ok());
    area->reset();
    auto packs = FilesIn(other.path());
    ASSERT_EQ(packs.size(), 1u);
    fs::copy_file(other.path() + "/" + packs[0], StagingDir() + "/0000000000000099.pack.tmp");
  }
  auto packs = Packs();
  ASSERT_EQ(packs.size(), 1u);
  // A torn third record: its header and half of its data.
  {
    int fd = ::open(packs[0].c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    auto size = fs::file_size(packs[0]);
    // The first 1000 bytes of the file look like a record start (copy of its
    // beginning): a header that promises more bytes than there are.
    std::string start(1000, '\0');
    int rfd = ::open(packs[0].c_str(), O_RDONLY);
    ASSERT_EQ(::pread(rfd, start.data(), start.size(), 0), 1000);
    ::close(rfd);
    ASSERT_EQ(::write(fd, start.data(), start.size()), 1000);
    ::close(fd);
    ASSERT_EQ(fs::file_size(packs[0]), size + 1000);
  }

  up.blocked = false;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->stats().recovered, 2u);
  // Readable from the staging area right after Open, before any upload.
  area->Drain();
  EXPECT_EQ(up.Get("k/a"), a);
  EXPECT_EQ(up.Get("k/b"), b);
  EXPECT_FALSE(up.Has("k/c")) << "a temporary file was uploaded";
  EXPECT_EQ(up.Count(), 2u);
  EXPECT_TRUE(FilesIn(StagingDir()).empty()) << "left: " << ::testing::PrintToString(FilesIn(StagingDir()));
}

TEST_F(StagingAreaTest, BlocksUploadedBeforeACrashAreNotUploadedAgain) {
  Uploads up;
  const std::string a = RandomBytes(rng_, 3000), b = RandomBytes(rng_, 3000);
  {
    auto area = Open(&up);
    ASSERT_NE(area, nullptr);
    ASSERT_TRUE(area->Append({{"k/a", a}}).ok());
    ASSERT_TRUE(Eventually([&] { return up.Has("k/a"); }));
    ASSERT_TRUE(Eventually([&] { return area->stats().pending_blocks == 0; }));
    up.blocked = true;
    ASSERT_TRUE(area->Append({{"k/b", b}}).ok());
  }
  ASSERT_EQ(Packs().size(), 1u) << "the pack still holds b";
  ASSERT_TRUE(up.Remove("k/a").ok());  // a deleted since: must stay deleted
  up.blocked = false;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->stats().recovered, 1u);
  area->Drain();
  EXPECT_EQ(up.Get("k/b"), b);
  EXPECT_FALSE(up.Has("k/a"));
}

TEST_F(StagingAreaTest, CancelledBlocksAreNeverUploaded) {
  Uploads up;
  up.blocked = true;
  const std::string a = RandomBytes(rng_, 3000), b = RandomBytes(rng_, 3000);
  {
    auto area = Open(&up);
    ASSERT_NE(area, nullptr);
    ASSERT_TRUE(area->Append({{"k/a", a}, {"k/b", b}}).ok());
    area->Cancel("k/a");
    EXPECT_FALSE(area->Contains("k/a"));
    EXPECT_EQ(area->Get("k/a").value(), nullptr);
  }
  up.blocked = false;
  auto area = Open(&up);  // the cancellation survived the restart
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->stats().recovered, 1u);
  area->Drain();
  EXPECT_FALSE(up.Has("k/a"));
  EXPECT_EQ(up.Get("k/b"), b);
}

TEST_F(StagingAreaTest, CancelDuringUploadRemovesTheObject) {
  std::mutex mu;
  std::condition_variable cv;
  bool in_put = false, release = false;
  std::map<std::string, std::string> objects;
  StagingOptions o;
  o.dir = StagingDir();
  o.uploaders = 1;
  o.free_space_ratio = 0;
  o.upload = [&](const std::string& key, const BlockRef& block) {
    std::unique_lock lock(mu);
    in_put = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    objects[key] = *block;
    return Status::OK();
  };
  o.remove = [&](const std::string& key) {
    std::lock_guard lock(mu);
    objects.erase(key);
    return Status::OK();
  };
  auto area = StagingArea::Open(o);
  ASSERT_TRUE(area.ok());
  ASSERT_TRUE((*area)->Append({{"k/a", "aaaa"}}).ok());
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_put; });
  }
  (*area)->Cancel("k/a");  // the slice is deleted while its block uploads
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  (*area)->Drain();
  std::lock_guard lock(mu);
  EXPECT_EQ(objects.count("k/a"), 0u) << "the upload outlived the deletion of its slice";
  EXPECT_EQ((*area)->stats().cancelled, 1u);
}

TEST_F(StagingAreaTest, CorruptStagedBlockIsReportedNotUploaded) {
  Uploads up;
  up.blocked = true;
  {
    auto area = Open(&up);
    ASSERT_NE(area, nullptr);
    ASSERT_TRUE(area->Append({{"k/a", std::string(1000, 'a')}, {"k/b", std::string(1000, 'b')}}).ok());
  }
  auto packs = Packs();
  ASSERT_EQ(packs.size(), 1u);
  testing::FlipByte(packs[0], 32 + 3 + 500);  // inside the data of the first record
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  up.blocked = false;
  area->Drain();
  EXPECT_FALSE(up.Has("k/a")) << "a corrupt staged block was uploaded";
  EXPECT_EQ(up.Get("k/b"), std::string(1000, 'b'));
  EXPECT_EQ(area->stats().lost, 1u);
}

TEST_F(StagingAreaTest, ReadingACorruptStagedBlockFails) {
  Uploads up;
  up.blocked = true;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(area->Append({{"k/a", std::string(1000, 'a')}}).ok());
  // The worker holds a verified copy and keeps retrying its upload.
  ASSERT_TRUE(Eventually([&] { return up.attempts.load() >= 2; }));
  testing::FlipByte(Packs().at(0), 32 + 3 + 500);
  auto got = area->Get("k/a");
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), EIO);
}

TEST_F(StagingAreaTest, PacksRotateAndEmptyOnesAreDeleted) {
  Uploads up;
  up.blocked = true;
  StagingOptions o = Options(&up);
  o.pack_bytes = 10000;
  auto opened = StagingArea::Open(o);
  ASSERT_TRUE(opened.ok());
  auto& area = *opened;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(area->Append({{"k/" + std::to_string(i), std::string(3000, 'x')}}).ok());
  EXPECT_GE(Packs().size(), 3u);
  ASSERT_TRUE(area->Sync().ok());
  up.blocked = false;
  ASSERT_TRUE(Eventually([&] { return area->stats().pending_blocks == 0; }));
  EXPECT_LE(Packs().size(), 1u) << "only the pack still open for appends may stay";
  EXPECT_EQ(up.Count(), 10u);
}

TEST_F(StagingAreaTest, OneClientAtATimeAndFullDisksRefuse) {
  Uploads up;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  auto second = StagingArea::Open(Options(&up));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), EBUSY);
  area.reset();

  StagingOptions o = Options(&up);
  o.free_space_ratio = 0.1;
  o.disk_space = [](const std::string&) { return Result<DiskSpace>(DiskSpace{1000, 100000}); };
  auto full = StagingArea::Open(o);
  ASSERT_TRUE(full.ok());
  Status st = (*full)->Append({{"k/a", "a"}});
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_FALSE((*full)->Contains("k/a"));
}

TEST_F(StagingAreaTest, ConcurrentAppendsAndSyncs) {
  Uploads up;
  auto area = Open(&up);
  ASSERT_NE(area, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 50; ++i) {
        std::string key = "k/" + std::to_string(t) + "_" + std::to_string(i);
        std::string data = RandomBytes(rng, 1 + rng() % 5000);
        if (!area->Append({{key, data}}).ok() || !area->Sync().ok()) errors++;
        auto got = area->Get(key);
        if (!got.ok() || (*got != nullptr && **got != data)) errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  area->Drain();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(up.Count(), 200u);
  EXPECT_GT(area->stats().syncs, 0u);
  EXPECT_LE(area->stats().syncs, 200u);
}

// ---------------------------------------------------------------- through the ChunkStore

using tessera::testing::FlakyStore;

constexpr uint32_t kBlock = 4096;

class WritebackChunkStoreTest : public ::testing::TestWithParam<Compression> {
 protected:
  StoreConfig Config(uint64_t mem_cache, const std::string& cache_dir = "") const {
    StoreConfig c{.block_size = kBlock, .compression = GetParam(), .mem_cache_bytes = mem_cache};
    c.cache_dir = cache_dir.empty() ? dir_.path() : cache_dir;
    c.cache_volume = "vol";
    c.cache_size = 0;  // no read cache: reads of staged blocks must come from the staging area
    c.free_space_ratio = 0;
    c.writeback = true;
    c.max_uploads = 4;
    c.upload_retry_ms = 5;
    c.upload_retry_max_ms = 20;
    return c;
  }
  std::string ReadAll(ChunkStore* chunks, uint64_t id, uint32_t size) {
    std::string buf(size, '\xee');
    Status st = chunks->ReadSlice(id, size, 0, size, buf.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    return buf;
  }
  // Stages a slice block by block, as the VFS does.
  void StageSlice(ChunkStore* chunks, uint64_t id, const std::string& data) {
    for (uint32_t i = 0; i < BlockCount(uint32_t(data.size()), kBlock); ++i)
      ASSERT_TRUE(chunks->StageBlock(id, i, std::string_view(data).substr(size_t(i) * kBlock, kBlock)).ok());
  }

  TempDir dir_;
  FlakyStore objects_;
  std::mt19937 rng_{7};
};

INSTANTIATE_TEST_SUITE_P(Compression, WritebackChunkStoreTest,
                         ::testing::Values(Compression::kNone, Compression::kLz4),
                         [](const ::testing::TestParamInfo<Compression>& p) {
                           return p.param == Compression::kNone ? std::string("none") : std::string("lz4");
                         });

TEST_P(WritebackChunkStoreTest, StagedSliceIsReadableBeforeUpload) {
  objects_.blocked = true;
  const std::string data = RandomBytes(rng_, 3 * kBlock + 100);
  for (uint64_t mem : {uint64_t(0), uint64_t(1) << 20}) {
    SCOPED_TRACE(mem ? "memory cache" : "no memory cache");
    TempDir fresh;
    ChunkStore chunks(&objects_, Config(mem, fresh.path()));
    ASSERT_TRUE(chunks.writeback()) << chunks.writeback_status().ToString();
    const uint64_t id = 10 + mem;
    StageSlice(&chunks, id, data);
    ASSERT_TRUE(chunks.SyncStaged().ok());
    EXPECT_EQ(objects_.Count(), 0u);
    EXPECT_EQ(ReadAll(&chunks, id, uint32_t(data.size())), data);
    std::string part(1000, '\0');  // a partial read inside a block
    ASSERT_TRUE(chunks.ReadSlice(id, uint32_t(data.size()), kBlock + 17, 1000, part.data()).ok());
    EXPECT_EQ(part, data.substr(kBlock + 17, 1000));
    EXPECT_EQ(chunks.stats().staged_blocks, 4u);
  }
}

TEST_P(WritebackChunkStoreTest, FailedUploadsAreRetriedUntilTheyLand) {
  objects_.fail_next = 7;
  ChunkStore chunks(&objects_, Config(0));
  ASSERT_TRUE(chunks.writeback());
  const std::string data = RandomBytes(rng_, 2 * kBlock + 5);
  StageSlice(&chunks, 5, data);
  chunks.DrainStaged();
  const ChunkStats s = chunks.stats();
  EXPECT_EQ(s.staged_blocks, 0u);
  EXPECT_EQ(s.staged_uploads, 3u);
  EXPECT_EQ(s.staged_upload_failures, 7u);
  EXPECT_EQ(objects_.Count(), 3u);
  // Another client reads the objects themselves.
  ChunkStore other(&objects_, StoreConfig{.block_size = kBlock, .compression = GetParam(), .mem_cache_bytes = 0});
  EXPECT_EQ(ReadAll(&other, 5, uint32_t(data.size())), data);
}

TEST_P(WritebackChunkStoreTest, LeftoversAreUploadedByTheNextClient) {
  objects_.blocked = true;
  const std::string data = RandomBytes(rng_, 3 * kBlock);
  {
    ChunkStore chunks(&objects_, Config(1 << 20));
    StageSlice(&chunks, 9, data);
    ASSERT_TRUE(chunks.SyncStaged().ok());
  }
  EXPECT_EQ(objects_.Count(), 0u);
  {
    // Still unreachable: the next client reads the data from the staging area.
    ChunkStore chunks(&objects_, Config(0));
    EXPECT_EQ(chunks.stats().staged_blocks, 3u);
    EXPECT_EQ(ReadAll(&chunks, 9, uint32_t(data.size())), data);
  }
  objects_.blocked = false;
  ChunkStore chunks(&objects_, Config(0));
  chunks.DrainStaged();
  EXPECT_EQ(objects_.Count(), 3u);
  EXPECT_EQ(ReadAll(&chunks, 9, uint32_t(data.size())), data);
}

TEST_P(WritebackChunkStoreTest, DeletedSliceIsNotUploaded) {
  objects_.blocked = true;
  ChunkStore chunks(&objects_, Config(1 << 20));
  const std::string keep = RandomBytes(rng_, kBlock), drop = RandomBytes(rng_, 2 * kBlock);
  StageSlice(&chunks, 1, keep);
  StageSlice(&chunks, 2, drop);
  ASSERT_TRUE(chunks.DeleteSlice(2, uint32_t(drop.size())).ok());
  // A block whose upload attempt is in flight finishes once the attempt ends.
  EXPECT_TRUE(Eventually([&] { return chunks.stats().staged_blocks == 1; }));
  objects_.blocked = false;
  chunks.DrainStaged();
  EXPECT_EQ(objects_.Count(), 1u);
  EXPECT_TRUE(objects_.Has(BlockKey(1, 0, kBlock)));
}

TEST_P(WritebackChunkStoreTest, BatchStagingAndFallbackWhenOff) {
  objects_.blocked = true;
  ChunkStore chunks(&objects_, Config(1 << 20));
  std::vector<ChunkStore::BlockView> batch;
  std::vector<std::string> data;
  for (uint32_t i = 0; i < 50; ++i) data.push_back(RandomBytes(rng_, 100 + i));
  for (uint32_t i = 0; i < 50; ++i) batch.push_back({100 + i, 0, data[i]});
  ASSERT_TRUE(chunks.StageBlocks(batch).ok());
  ASSERT_TRUE(chunks.SyncStaged().ok());
  for (uint32_t i = 0; i < 50; ++i) EXPECT_EQ(ReadAll(&chunks, 100 + i, uint32_t(data[i].size())), data[i]);
  objects_.blocked = false;
  chunks.DrainStaged();
  EXPECT_EQ(objects_.Count(), 50u);

  // Without writeback, StageBlock uploads at once and StageBlocks refuses.
  ChunkStore plain(&objects_, StoreConfig{.block_size = kBlock, .compression = GetParam(), .mem_cache_bytes = 0});
  EXPECT_FALSE(plain.writeback());
  ASSERT_TRUE(plain.StageBlock(999, 0, "direct").ok());
  EXPECT_TRUE(objects_.Has(BlockKey(999, 0, 6)));
  EXPECT_FALSE(plain.StageBlocks(batch).ok());
  EXPECT_TRUE(plain.SyncStaged().ok());
}

TEST(WritebackConfig, NeedsACacheDirAndAFreeStagingArea) {
  object::MemoryStore objects("x");
  StoreConfig c{.block_size = kBlock};
  c.writeback = true;
  EXPECT_EQ(c.Validate().code(), EINVAL);
  ChunkStore no_dir(&objects, c);
  EXPECT_FALSE(no_dir.writeback());
  EXPECT_EQ(no_dir.writeback_status().code(), EINVAL);

  TempDir dir;
  c.cache_dir = dir.path();
  c.cache_volume = "vol";
  ChunkStore first(&objects, c);
  EXPECT_TRUE(first.writeback()) << first.writeback_status().ToString();
  ChunkStore second(&objects, c);
  EXPECT_FALSE(second.writeback());
  EXPECT_EQ(second.writeback_status().code(), EBUSY);
}

}  // namespace
}  // namespace tessera::chunk
