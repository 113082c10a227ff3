// The staging area and the disk cache on a failing local disk (FaultEnv):
// write errors, full disks, short writes, failed syncs, unreadable records,
// lost unsynced data after a power loss, and clock jumps. What is promised:
// an append that failed stages nothing and can be retried; a block is
// acknowledged only once its Sync succeeded, and then survives a power loss;
// a record that cannot be read back is reported lost, never uploaded wrong;
// the cache turns every failure into a miss.
#include <fcntl.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "chunk/disk_cache.h"
#include "chunk/staging.h"
#include "common/fault_env.h"
#include "test_util.h"

namespace tessera::chunk {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using namespace std::chrono_literals;

template <typename Cond>
bool Eventually(Cond cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

class StagingFaultsTest : public ::testing::Test {
 protected:
  std::unique_ptr<StagingArea> Open(std::chrono::milliseconds delay = 0ms) {
    StagingOptions o;
    o.dir = dir_.path() + "/staging";
    o.env = &env_;
    o.uploaders = 2;
    o.free_space_ratio = 0;
    o.upload_delay = delay;
    o.retry_initial = 5ms;
    o.retry_max = 20ms;
    o.upload = [this](const std::string& key, const BlockRef& block) {
      std::lock_guard g(mu_);
      uploaded_[key] = *block;
      return Status::OK();
    };
    auto area = StagingArea::Open(std::move(o));
    EXPECT_TRUE(area.ok()) << area.status().ToString();
    return area.ok() ? std::move(area).value() : nullptr;
  }
  std::string Uploaded(const std::string& key) {
    std::lock_guard g(mu_);
    return uploaded_.count(key) ? uploaded_[key] : "<none>";
  }
  size_t UploadCount() {
    std::lock_guard g(mu_);
    return uploaded_.size();
  }

  TempDir dir_;
  FaultEnv env_;
  std::mt19937 rng_{5};
  std::mutex mu_;
  std::map<std::string, std::string> uploaded_;  // guarded by mu_
};

TEST_F(StagingFaultsTest, FailedAppendStagesNothingAndCanBeRetried) {
  auto area = Open(1h);  // nothing uploads during the test
  ASSERT_NE(area, nullptr);
  const std::string a = RandomBytes(rng_, 5000), b = RandomBytes(rng_, 7000);
  for (int err : {EIO, ENOSPC}) {
    env_.FailNext(FaultEnv::kWrite, err);
    Status st = area->Append({{"k-a", a}, {"k-b", b}});
    EXPECT_EQ(st.code(), err) << st.ToString();
    auto got = area->Get("k-a");
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, nullptr) << "a failed append left a readable block";
  }
  ASSERT_TRUE(area->Append({{"k-a", a}, {"k-b", b}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  EXPECT_EQ(**area->Get("k-a"), a);
  EXPECT_EQ(**area->Get("k-b"), b);
  EXPECT_EQ(area->stats().pending_blocks, 2u);
}

// A failed append whose torn bytes cannot even be cut off must not leave a
// torn record in the middle of a pack: later appends go to a new pack, and a
// restart recovers every acknowledged block.
TEST_F(StagingFaultsTest, TornAppendThatCannotBeCutOffClosesThePack) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  const std::string first = RandomBytes(rng_, 3000), later = RandomBytes(rng_, 5000);
  ASSERT_TRUE(area->Append({{"first", first}}).ok());
  env_.ShortWrites(1);                                // half of the next record reaches the pack,
  env_.FailNext(FaultEnv::kWrite, EIO, 1, /*skip=*/1);  // the rest fails,
  env_.FailNext(FaultEnv::kTruncate, EIO);            // and cannot be cut off
  (void)area->Append({{"torn", RandomBytes(rng_, 4000)}});
  ASSERT_TRUE(area->Append({{"later", later}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  area.reset();
  area = Open(1h);
  ASSERT_NE(area, nullptr);
  // Blocks recovered at open upload at once (whatever the delay), so look
  // for them in the bucket rather than in the staging area.
  EXPECT_TRUE(Eventually([&] { return Uploaded("first") == first; }));
  EXPECT_TRUE(Eventually([&] { return Uploaded("later") == later; }))
      << "an acknowledged block after a torn record was lost";
}

TEST_F(StagingFaultsTest, ShortWritesAreCompleted) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  env_.ShortWrites(20);
  const std::string a = RandomBytes(rng_, 100000);
  ASSERT_TRUE(area->Append({{"short", a}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  area.reset();
  area = Open(1h);  // the scan finds a whole record
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->stats().recovered, 1u);
  EXPECT_TRUE(Eventually([&] { return Uploaded("short") == a; }));
}

TEST_F(StagingFaultsTest, FailedSyncIsReportedAndRetried) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(area->Append({{"s", RandomBytes(rng_, 3000)}}).ok());
  env_.FailNext(FaultEnv::kSync, EIO);
  EXPECT_EQ(area->Sync().code(), EIO) << "a failed fdatasync was not reported";
  EXPECT_TRUE(area->Sync().ok()) << "the next Sync does not retry the packs";
}

// Power loss: blocks whose Sync returned survive; blocks appended after the
// last Sync were never acknowledged and may vanish, but never corrupt the
// pack for the others.
TEST_F(StagingFaultsTest, PowerLossKeepsEverySyncedBlock) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  std::map<std::string, std::string> acked;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "acked-" + std::to_string(i), data = RandomBytes(rng_, 1000 + 97 * size_t(i));
    ASSERT_TRUE(area->Append({{key, data}}).ok());
    acked[key] = data;
  }
  ASSERT_TRUE(area->Sync().ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(area->Append({{"unsynced-" + std::to_string(i), RandomBytes(rng_, 4000)}}).ok());
  area.reset();  // the process dies...
  ASSERT_TRUE(env_.DropUnsyncedData().ok());  // ...and the machine with it
  area = Open(0ms);
  ASSERT_NE(area, nullptr);
  EXPECT_EQ(area->stats().lost, 0u);
  ASSERT_TRUE(Eventually([&] { return UploadCount() >= acked.size(); }));
  for (const auto& [key, data] : acked) EXPECT_EQ(Uploaded(key), data) << key;
  ASSERT_TRUE(Eventually([&] { return area->stats().pending_blocks == 0; }));
}

// A pack that cannot be read at start fails the open (loudly: its blocks
// would be lost), and is recovered whole once the disk reads again.
TEST_F(StagingFaultsTest, UnreadablePackFailsTheOpenThenRecovers) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  const std::string data = RandomBytes(rng_, 2000);
  ASSERT_TRUE(area->Append({{"kept", data}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  area.reset();
  env_.FailRandomly(FaultEnv::kRead, EIO, 1.0);
  StagingOptions o;
  o.dir = dir_.path() + "/staging";
  o.env = &env_;
  o.upload = [](const std::string&, const BlockRef&) { return Status::OK(); };
  auto failed = StagingArea::Open(std::move(o));
  EXPECT_FALSE(failed.ok());
  if (!failed.ok()) {
    EXPECT_EQ(failed.status().code(), EIO) << failed.status().ToString();
  }
  env_.FailRandomly(FaultEnv::kRead, EIO, 0);
  area = Open(0ms);
  ASSERT_NE(area, nullptr);
  EXPECT_TRUE(Eventually([&] { return Uploaded("kept") == data; }));
}

// A record whose bytes rotted on disk is reported lost and never uploaded.
TEST_F(StagingFaultsTest, CorruptRecordIsLostNotUploaded) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(area->Append({{"rotten", std::string(3000, 'r')}}).ok());
  ASSERT_TRUE(area->Sync().ok());
  area.reset();
  std::string pack;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/staging"))
    if (e.path().extension() == ".pack") pack = e.path().string();
  ASSERT_FALSE(pack.empty());
  auto fd = Env::Posix()->Open(pack, O_RDWR, 0);
  ASSERT_TRUE(fd.ok());
  char flip = 'x';
  ASSERT_TRUE(PwriteFull(Env::Posix(), *fd, {{&flip, 1}}, 32 + 6 + 1500).ok());  // inside the data
  ASSERT_TRUE(Env::Posix()->Close(*fd).ok());
  area = Open(0ms);
  ASSERT_NE(area, nullptr);
  EXPECT_TRUE(Eventually([&] { return area->stats().lost == 1; })) << "a corrupt block was not reported lost";
  EXPECT_EQ(Uploaded("rotten"), "<none>");
}

TEST_F(StagingFaultsTest, ClockJumpReleasesDelayedUploads) {
  auto area = Open(1h);
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(area->Append({{"delayed", RandomBytes(rng_, 1000)}}).ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(UploadCount(), 0u);
  env_.AdvanceClock(2h);
  ASSERT_TRUE(area->Append({{"wakes-the-workers", RandomBytes(rng_, 10)}}).ok());
  EXPECT_TRUE(Eventually([&] { return Uploaded("delayed") != "<none>"; }));
}

class CacheFaultsTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskBlockCache> Open() {
    DiskCacheOptions opts;
    opts.dir = dir_.path() + "/cache";
    opts.capacity_bytes = 1 << 20;
    opts.free_space_ratio = 0;
    opts.async_writes = false;
    opts.env = &env_;
    auto cache = DiskBlockCache::Open(std::move(opts));
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return cache.ok() ? std::move(cache).value() : nullptr;
  }
  static BlockRef Block(std::string s) { return std::make_shared<const std::string>(std::move(s)); }

  TempDir dir_;
  FaultEnv env_;
  std::mt19937 rng_{7};
};

TEST_F(CacheFaultsTest, WriteFailuresDropTheBlockAndLeaveNoFiles) {
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  const std::string data = RandomBytes(rng_, 4096);
  unsigned kinds[] = {FaultEnv::kOpen, FaultEnv::kWrite, FaultEnv::kRename};
  int i = 0;
  for (unsigned kind : kinds) {
    env_.FailNext(kind, kind == FaultEnv::kWrite ? ENOSPC : EIO);
    const std::string key = "1_" + std::to_string(i++) + "_4096";
    cache->Put(key, Block(data));
    EXPECT_EQ(cache->Get(key, 4096), nullptr) << "kind " << kind;
  }
  EXPECT_EQ(cache->stats().dropped_writes, 3u);
  EXPECT_EQ(cache->stats().bytes, 0u) << "space of failed writes stays reserved";
  cache->Put("2_0_4096", Block(data));
  auto got = cache->Get("2_0_4096", 4096);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, data);
  cache.reset();
  cache = Open();  // no temporary files or half blocks found at the next start
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->stats().blocks, 1u);
}

TEST_F(CacheFaultsTest, ReadFailureIsAMiss) {
  auto cache = Open();
  ASSERT_NE(cache, nullptr);
  const std::string data = RandomBytes(rng_, 4096);
  cache->Put("3_0_4096", Block(data));
  env_.FailNext(FaultEnv::kRead, EIO);
  EXPECT_EQ(cache->Get("3_0_4096", 4096), nullptr);
  EXPECT_EQ(cache->stats().corrupt, 1u);
  cache->Put("3_0_4096", Block(data));  // cached again on the refetch
  auto got = cache->Get("3_0_4096", 4096);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, data);
}

}  // namespace
}  // namespace tessera::chunk
