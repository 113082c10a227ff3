// The metadata engine on SQLite over a failing disk (the fault VFS, driven by
// a FaultEnv): a failed commit is reported with the right class (ENOSPC for a
// full disk; outcome unknown when the commit may have reached the WAL), reads
// fail with EIO, and whatever the faults, the tree stays consistent and the
// engine works again once the disk does.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/fault_env.h"
#include "kv/sqlite_fault_vfs.h"
#include "kv/sqlite_kv.h"
#include "meta/kv_meta.h"

namespace tessera::meta {
namespace {

class SqliteFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-sqlfaults-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    m_ = OpenMeta();
    ASSERT_NE(m_, nullptr);
    Format f;
    f.name = "faults";
    f.uuid = NewUuid();
    ASSERT_TRUE(m_->Init(f, false).ok());
    SessionInfo s;
    s.mount_point = "/mnt/faults";
    ASSERT_TRUE(m_->NewSession(s).ok());
  }
  void TearDown() override {
    env_.FailRandomly(FaultEnv::kAll, EIO, 0);
    m_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Meta> OpenMeta() {
    kv::SqliteOptions o;
    o.vfs = kv::RegisterFaultVfs(&env_);
    o.max_attempts = 3;
    auto engine = kv::OpenSqlite((dir_ / "meta.db").string(), o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return nullptr;
    return std::make_unique<KvMeta>(std::move(engine).value());
  }
  Status Create(const std::string& name, Ino* ino = nullptr) {
    Ino i = 0;
    Attr attr;
    return m_->Mknod(Context::Root(), kRootIno, name, S_IFREG | 0644, 0, 0, "", ino ? ino : &i, &attr);
  }
  void ExpectConsistent() {
    std::vector<std::string> problems;
    ASSERT_TRUE(m_->Check(&problems).ok());
    EXPECT_TRUE(problems.empty()) << problems.front();
  }

  std::filesystem::path dir_;
  FaultEnv env_;
  std::unique_ptr<Meta> m_;
};

TEST_F(SqliteFaultsTest, FailedWalWriteAtCommitIsOutcomeUnknown) {
  ASSERT_TRUE(Create("before").ok());
  env_.FailNext(FaultEnv::kWrite, EIO);
  Status st = Create("doubtful");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), EIO) << st.ToString();
  EXPECT_TRUE(st.outcome_unknown()) << st.ToString();
  ASSERT_TRUE(Create("after").ok());
  ExpectConsistent();
}

TEST_F(SqliteFaultsTest, FullDiskIsENOSPC) {
  env_.FailNext(FaultEnv::kWrite, ENOSPC);
  Status st = Create("full");
  EXPECT_EQ(st.code(), ENOSPC) << st.ToString();
  ASSERT_TRUE(Create("room-again").ok());
  ExpectConsistent();
}

TEST_F(SqliteFaultsTest, UnreadableDatabaseIsEIO) {
  ASSERT_TRUE(Create("x").ok());
  m_.reset();
  auto m = OpenMeta();  // a new engine reads the file from disk
  ASSERT_NE(m, nullptr);
  env_.FailNext(FaultEnv::kRead, EIO, 1000);
  auto loaded = m->Load();
  EXPECT_FALSE(loaded.ok());
  if (!loaded.ok()) {
    EXPECT_EQ(loaded.status().code(), EIO) << loaded.status().ToString();
  }
  env_.FailRandomly(FaultEnv::kAll, EIO, 0);
  env_.FailNext(FaultEnv::kRead, EIO, 0);
  m_ = std::move(m);
}

// Many operations with 5% of reads, writes and truncates failing: every
// operation succeeds or fails cleanly, and the tree is consistent after.
// A flush of directory statistics that failed on a full disk: the next
// flush writes its changes, nothing is lost or counted twice.
TEST_F(SqliteFaultsTest, AStatisticsFlushFailingOnAFullDiskLosesNothing) {
  StatFs before, fs;
  ASSERT_TRUE(m_->StatFS(Context::Root(), &before).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Create("f" + std::to_string(i)).ok());
  env_.FailNext(FaultEnv::kWrite, ENOSPC);
  Status st = m_->FlushDirStats();
  EXPECT_EQ(st.code(), ENOSPC) << st.ToString();
  // The volume's inode counter rides the same flush: still counted once.
  ASSERT_TRUE(m_->StatFS(Context::Root(), &fs).ok());
  EXPECT_EQ(fs.used_inodes, before.used_inodes + 5);
  std::vector<DirStat> stats;
  ASSERT_TRUE(m_->FlushDirStats().ok());
  auto other = OpenMeta();  // sees only what was written
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->GetDirStats({kRootIno}, &stats).ok());
  EXPECT_EQ(stats.at(0).inodes, 5);
  ASSERT_TRUE(other->StatFS(Context::Root(), &fs).ok());
  EXPECT_EQ(fs.used_inodes, before.used_inodes + 5);
  ExpectConsistent();
}

// A flush whose commit's outcome is unknown (a failed WAL write): the next
// flush applies its changes exactly once, whether or not it had landed.
TEST_F(SqliteFaultsTest, AStatisticsFlushOfUnknownOutcomeCountsOnce) {
  StatFs before, fs;
  ASSERT_TRUE(m_->StatFS(Context::Root(), &before).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create("f" + std::to_string(i)).ok());
  env_.FailNext(FaultEnv::kWrite, EIO);
  Status st = m_->FlushDirStats();
  ASSERT_FALSE(st.ok());
  ASSERT_TRUE(st.outcome_unknown()) << st.ToString();
  // Landed or not, this client never counts its inodes short (the limit
  // checks read this).
  ASSERT_TRUE(m_->StatFS(Context::Root(), &fs).ok());
  EXPECT_GE(fs.used_inodes, before.used_inodes + 3);
  ASSERT_TRUE(Create("g").ok());
  ASSERT_TRUE(m_->FlushDirStats().ok());
  ASSERT_TRUE(m_->StatFS(Context::Root(), &fs).ok());
  EXPECT_EQ(fs.used_inodes, before.used_inodes + 4);  // settled: exact
  std::vector<DirStat> stats;
  auto other = OpenMeta();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->GetDirStats({kRootIno}, &stats).ok());
  EXPECT_EQ(stats.at(0).inodes, 4);
  ASSERT_TRUE(other->StatFS(Context::Root(), &fs).ok());
  EXPECT_EQ(fs.used_inodes, before.used_inodes + 4);  // once, in the engine
  ExpectConsistent();
}

TEST_F(SqliteFaultsTest, RandomFaultsNeverCorruptTheTree) {
  std::mt19937 rng(3);
  env_.FailRandomly(FaultEnv::kRead | FaultEnv::kWrite | FaultEnv::kTruncate, EIO, 0.05, 17);
  int failed = 0;
  for (int i = 0; i < 600; ++i) {
    const std::string a = "f" + std::to_string(rng() % 40), b = "f" + std::to_string(rng() % 40);
    Ino ino = 0;
    Attr attr;
    Status st;
    switch (rng() % 4) {
      case 0: st = Create(a); break;
      case 1: st = m_->Unlink(Context::Root(), kRootIno, a); break;
      case 2: st = m_->Rename(Context::Root(), kRootIno, a, kRootIno, b, 0, &ino, &attr); break;
      default: st = m_->Mknod(Context::Root(), kRootIno, a, S_IFDIR | 0755, 0, 0, "", &ino, &attr); break;
    }
    if (!st.ok()) {
      EXPECT_TRUE(st.code() == EIO || st.code() == ENOENT || st.code() == EEXIST || st.code() == EISDIR ||
                  st.code() == ENOTDIR || st.code() == ENOTEMPTY || st.code() == EBUSY)
          << st.ToString();
      failed += st.code() == EIO;
    }
  }
  env_.FailRandomly(FaultEnv::kAll, EIO, 0);
  EXPECT_GT(failed, 5) << "too few injected faults to mean anything";
  EXPECT_GT(env_.injected(), 5u);
  ExpectConsistent();
  ASSERT_TRUE(Create("healthy").ok());
}

}  // namespace
}  // namespace tessera::meta
