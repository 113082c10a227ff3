// Writeback mode through the VFS: writes are acknowledged (close, fsync)
// while the object store refuses every upload, read back from the staging
// area, survive a restart of the client, and reach the store once it works.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/memory_store.h"
#include "vfs/vfs.h"

#include "../object/flaky_store.h"
#include "test_util.h"

namespace tessera::vfs {
namespace {

using meta::kRootIno;
using namespace std::chrono_literals;

constexpr uint32_t kBlock = 4096;

using tessera::testing::FlakyStore;

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(1 + rng() % 255);
  return s;
}

class WritebackVfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-wbvfs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    meta_ = testing::MemoryVolume("test", 0, kBlock);
    ASSERT_NE(meta_, nullptr);
  }
  void TearDown() override {
    vfs_.reset();
    chunks_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A client: writeback on (no read caches, so reads of pending data come
  // from the staging area) or off (reads only what is in the store).
  // free_space_ratio: the staging area refuses blocks that would leave less
  // of its disk free (0.9999: it refuses every block).
  void StartClient(bool writeback, uint32_t compact_threshold = 0, size_t file_buffer_limit = 64 << 10,
                   double free_space_ratio = 0) {
    vfs_.reset();
    chunks_.reset();
    chunk::StoreConfig sc{.block_size = kBlock, .mem_cache_bytes = 0};
    if (writeback) {
      sc.cache_dir = dir_;
      sc.cache_volume = "vol";
      sc.cache_size = 0;
      sc.free_space_ratio = free_space_ratio;
      sc.writeback = true;
      sc.max_uploads = 4;
      sc.upload_retry_ms = 5;
      sc.upload_retry_max_ms = 50;
    }
    chunks_ = std::make_unique<chunk::ChunkStore>(&objects_, sc);
    ASSERT_EQ(chunks_->writeback(), writeback) << chunks_->writeback_status().ToString();
    Config c;
    c.cleanup_interval_ms = 10;
    c.compact_threshold = compact_threshold;
    c.file_buffer_limit = file_buffer_limit;  // writes beyond it commit (in the background with writeback)
    vfs_ = std::make_unique<Vfs>(meta_.get(), chunks_.get(), c);
    ASSERT_TRUE(vfs_->Start().ok());
  }

  Handle* Open(meta::Ino ino) {
    Handle* fh = nullptr;
    meta::Attr attr;
    Status st = vfs_->Open(ctx_, ino, O_RDWR, &fh, &attr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return fh;
  }
  std::string ReadAll(meta::Ino ino, size_t size) {
    Handle* fh = Open(ino);
    if (!fh) return "<open failed>";
    std::string buf(size + 10, '\xee');
    auto r = vfs_->Read(ctx_, fh, 0, buf.size(), buf.data());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    buf.resize(r.ok() ? *r : 0);
    EXPECT_TRUE(vfs_->Release(ctx_, fh).ok());
    return buf;
  }

  std::string dir_;
  meta::Context ctx_ = meta::Context::Root();
  std::unique_ptr<meta::Meta> meta_;
  FlakyStore objects_;
  std::unique_ptr<chunk::ChunkStore> chunks_;
  std::unique_ptr<Vfs> vfs_;
};

TEST_F(WritebackVfsTest, CloseIsAcknowledgedWhileTheStoreIsDown) {
  ASSERT_NO_FATAL_FAILURE(StartClient(true));
  objects_.blocked = true;
  std::mt19937_64 rng(1);
  meta::Ino ino = 0;
  meta::Attr attr;
  Handle* fh = nullptr;
  ASSERT_TRUE(vfs_->Create(ctx_, kRootIno, "f", 0644, 022, O_RDWR | O_CREAT, &fh, &ino, &attr).ok());
  std::string model = RandomBytes(rng, 3 * kBlock + 1000);
  ASSERT_TRUE(vfs_->Write(ctx_, fh, 0, model.data(), model.size()).ok());
  for (int i = 0; i < 20; ++i) {  // small overwrites: many small slices
    uint64_t off = rng() % model.size();
    std::string patch = RandomBytes(rng, 1 + rng() % 300);
    ASSERT_TRUE(vfs_->Write(ctx_, fh, off, patch.data(), patch.size()).ok());
    if (off + patch.size() > model.size()) model.resize(off + patch.size());
    model.replace(off, patch.size(), patch);
  }
  ASSERT_TRUE(vfs_->Fsync(ctx_, fh).ok());
  ASSERT_TRUE(vfs_->Release(ctx_, fh).ok());
  EXPECT_EQ(objects_.Count(), 0u) << "nothing can have been uploaded";
  ASSERT_TRUE(meta_->GetAttr(ctx_, ino, &attr).ok());
  EXPECT_EQ(attr.length, model.size()) << "the slices are committed";
  EXPECT_GT(chunks_->stats().staged_blocks, 0u);
  EXPECT_EQ(ReadAll(ino, model.size()), model);

  // A restart of the client while the store is still down: the new client
  // finds the staged blocks and serves them.
  ASSERT_NO_FATAL_FAILURE(StartClient(true));
  EXPECT_GT(chunks_->stats().staged_blocks, 0u);
  EXPECT_EQ(ReadAll(ino, model.size()), model);

  objects_.blocked = false;
  chunks_->DrainStaged();
  EXPECT_EQ(chunks_->stats().staged_blocks, 0u);
  EXPECT_GT(objects_.Count(), 0u);
  // A client without writeback sees the data in the store.
  ASSERT_NO_FATAL_FAILURE(StartClient(false));
  EXPECT_EQ(ReadAll(ino, model.size()), model);
}

// A staging area that refuses blocks (its disk full) makes the blocks go
// straight to the store, also for a commit in the background: that one used
// to fail instead, discarding every pending write of the file (review).
TEST_F(WritebackVfsTest, ABackgroundCommitUploadsWhatStagingRefuses) {
  ASSERT_NO_FATAL_FAILURE(StartClient(true, 0, 64 << 10, /*free_space_ratio=*/0.9999));
  std::mt19937_64 rng(11);
  meta::Ino ino = 0;
  meta::Attr attr;
  Handle* fh = nullptr;
  ASSERT_TRUE(vfs_->Create(ctx_, kRootIno, "full-disk", 0644, 022, O_RDWR | O_CREAT, &fh, &ino, &attr).ok());
  // Descending 2 KiB writes stay buffered (never cut into blocks) until the
  // 64 KiB limit starts a background commit; then more go on.
  std::string model(160 << 10, '\0');
  for (uint64_t off = model.size(); off > 0; off -= 2048) {
    std::string patch = RandomBytes(rng, 2048);
    auto w = vfs_->Write(ctx_, fh, off - 2048, patch.data(), patch.size());
    ASSERT_TRUE(w.ok()) << "write at " << off - 2048 << ": " << w.status().ToString();
    model.replace(off - 2048, patch.size(), patch);
  }
  Status st = vfs_->Fsync(ctx_, fh);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(vfs_->Release(ctx_, fh).ok());
  EXPECT_EQ(chunks_->stats().staged_blocks, 0u) << "the staging area took blocks it should refuse";
  EXPECT_GT(objects_.Count(), 0u);
  EXPECT_EQ(ReadAll(ino, model.size()), model);
}

// Random writes, truncates, fsyncs and reads against a byte model: first
// with every upload failing, then across a client restart, then with uploads
// working and compaction rewriting the chunks (deleting staged slices).
TEST_F(WritebackVfsTest, RandomOperationsMatchTheModel) {
  std::mt19937_64 rng(7);
  std::string model;
  meta::Ino ino = 0;
  auto run = [&](int ops) {
    Handle* fh = Open(ino);
    ASSERT_NE(fh, nullptr);
    for (int step = 0; step < ops; ++step) {
      const int op = int(rng() % 10);
      const uint64_t span = 6 * kBlock;
      if (op < 5) {
        uint64_t off = rng() % span;
        std::string data = RandomBytes(rng, 1 + rng() % (2 * kBlock));
        ASSERT_TRUE(vfs_->Write(ctx_, fh, off, data.data(), data.size()).ok());
        if (off > model.size()) model.resize(off, '\0');
        if (off + data.size() > model.size()) model.resize(off + data.size());
        model.replace(off, data.size(), data);
      } else if (op == 5) {
        uint64_t size = rng() % span;
        meta::Attr out;
        ASSERT_TRUE(vfs_->SetAttr(ctx_, ino, fh, 0, meta::Attr{}, true, size, &out).ok());
        model.resize(size, '\0');
      } else if (op == 6) {
        ASSERT_TRUE(vfs_->Fsync(ctx_, fh).ok());
      } else {
        uint64_t off = rng() % (span + kBlock);
        size_t n = 1 + rng() % (2 * kBlock);
        std::string buf(n, '\xee');
        auto r = vfs_->Read(ctx_, fh, off, n, buf.data());
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        std::string want = off < model.size() ? model.substr(off, n) : "";
        ASSERT_EQ(std::string(buf.data(), *r), want) << "step " << step << " read [" << off << ", +" << n << ")";
      }
    }
    ASSERT_TRUE(vfs_->Release(ctx_, fh).ok());
  };

  // A tiny per-file buffer: most writes start a background commit or wait
  // for one.
  constexpr size_t kSmallBuffer = 6 << 10;
  ASSERT_NO_FATAL_FAILURE(StartClient(true, 0, kSmallBuffer));
  objects_.blocked = true;
  {
    meta::Attr attr;
    Handle* fh = nullptr;
    ASSERT_TRUE(vfs_->Create(ctx_, kRootIno, "r", 0644, 022, O_RDWR | O_CREAT, &fh, &ino, &attr).ok());
    ASSERT_TRUE(vfs_->Release(ctx_, fh).ok());
  }
  ASSERT_NO_FATAL_FAILURE(run(400));
  EXPECT_EQ(objects_.Count(), 0u);
  ASSERT_NO_FATAL_FAILURE(StartClient(true, 0, kSmallBuffer));  // restart, store still down
  EXPECT_EQ(ReadAll(ino, model.size()), model);
  ASSERT_NO_FATAL_FAILURE(run(200));

  objects_.blocked = false;
  ASSERT_NO_FATAL_FAILURE(StartClient(true, /*compact_threshold=*/4, kSmallBuffer));
  ASSERT_NO_FATAL_FAILURE(run(400));
  EXPECT_EQ(ReadAll(ino, model.size()), model);
  vfs_->Stop();
  chunks_->DrainStaged();
  ASSERT_NO_FATAL_FAILURE(StartClient(false));
  EXPECT_EQ(ReadAll(ino, model.size()), model);
}

}  // namespace
}  // namespace tessera::vfs
