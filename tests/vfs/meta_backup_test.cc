// Automatic metadata backups (vfs/meta_backup.h) when things fail: a store
// that refuses the upload or the pruning, a dump that is cancelled. The
// older backups are never touched by a failed run, no temporary file is
// left behind, and the next good run catches up.
#include "vfs/meta_backup.h"

#include <dirent.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../chunk/test_util.h"
#include "meta/meta.h"
#include "object/fault_store.h"
#include "object/memory_store.h"
#include "test_util.h"

namespace tessera::vfs {
namespace {

class MetaBackupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    meta_ = testing::MemoryVolume("backups");
    ASSERT_NE(meta_, nullptr);
    for (int i = 0; i < 20; ++i) {
      meta::Ino ino = 0;
      meta::Attr a;
      ASSERT_TRUE(meta_->Mknod(meta::Context::Root(), meta::kRootIno, "f" + std::to_string(i), S_IFREG | 0644, 0, 0,
                               "", &ino, &a).ok());
    }
    char tmpl[] = "/tmp/tessera-backup-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    tmpdir_ = tmpl;
    old_tmpdir_ = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
    setenv("TMPDIR", tmpdir_.c_str(), 1);
  }
  void TearDown() override {
    if (old_tmpdir_.empty()) unsetenv("TMPDIR");
    else setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    rmdir(tmpdir_.c_str());
  }
  // A store whose operations in `ops` (put, delete, ...) all fail.
  static std::unique_ptr<object::FaultStore> Failing(object::ObjectStore* inner, const std::string& ops) {
    auto spec = object::FaultSpec::Parse("seed=1,error=1,ops=" + ops);
    EXPECT_TRUE(spec.ok());
    return std::make_unique<object::FaultStore>(std::make_unique<chunk::testing::CountingStore>(inner), *spec);
  }
  std::vector<std::string> Keys() {
    std::vector<object::ObjectInfo> all;
    EXPECT_TRUE(ListBackups(&store_, &all).ok());
    std::vector<std::string> keys;
    for (const auto& o : all) keys.push_back(o.key);
    return keys;
  }
  size_t FilesIn(const std::string& dir) {
    size_t n = 0;
    DIR* d = opendir(dir.c_str());
    if (!d) return 0;
    while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
    return n;
  }
  // Backups are named by the second: the next one a second later.
  static void NextSecond() {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    std::this_thread::sleep_for(std::chrono::seconds(1) - (now % std::chrono::seconds(1)) + std::chrono::milliseconds(20));
  }

  std::unique_ptr<meta::Meta> meta_;
  object::MemoryStore store_{"backups"};
  std::string tmpdir_, old_tmpdir_;
};

TEST_F(MetaBackupTest, KeepsTheNewestAndLeavesNoTemporaryFile) {
  std::vector<std::string> made;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) NextSecond();
    uint64_t inodes = 0;
    auto key = BackupMeta(meta_.get(), &store_, 2, nullptr, &inodes);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    EXPECT_EQ(inodes, 21u);
    made.push_back(*key);
  }
  EXPECT_EQ(Keys(), (std::vector<std::string>{made[1], made[2]}));
  EXPECT_EQ(FilesIn(tmpdir_), 0u);
}

TEST_F(MetaBackupTest, AFailedUploadKeepsTheOldBackupsAndNoTemporaryFile) {
  auto first = BackupMeta(meta_.get(), &store_, 1, nullptr);
  ASSERT_TRUE(first.ok());
  NextSecond();
  auto failing = Failing(&store_, "put");
  auto r = BackupMeta(meta_.get(), failing.get(), 1, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("storing the backup"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(Keys(), std::vector<std::string>{*first});  // the only good backup is not pruned
  EXPECT_EQ(FilesIn(tmpdir_), 0u);
}

TEST_F(MetaBackupTest, ACancelledDumpStoresNothingAndLeavesNoTemporaryFile) {
  auto first = BackupMeta(meta_.get(), &store_, 1, nullptr);
  ASSERT_TRUE(first.ok());
  NextSecond();
  std::atomic<bool> cancel{true};
  auto r = BackupMeta(meta_.get(), &store_, 1, &cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(Keys(), std::vector<std::string>{*first});
  EXPECT_EQ(FilesIn(tmpdir_), 0u);
}

TEST_F(MetaBackupTest, AFailedPruneKeepsTheNewBackupAndTheNextRunCatchesUp) {
  std::vector<std::string> made;
  for (int i = 0; i < 2; ++i) {
    if (i > 0) NextSecond();
    auto key = BackupMeta(meta_.get(), &store_, 5, nullptr);
    ASSERT_TRUE(key.ok());
    made.push_back(*key);
  }
  NextSecond();
  auto failing = Failing(&store_, "delete");
  auto r = BackupMeta(meta_.get(), failing.get(), 1, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("removing the old backup"), std::string::npos) << r.status().ToString();
  auto keys = Keys();
  ASSERT_EQ(keys.size(), 3u);  // the new one is stored; nothing was removed
  EXPECT_EQ(keys[0], made[0]);
  NextSecond();
  auto next = BackupMeta(meta_.get(), &store_, 1, nullptr);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Keys(), std::vector<std::string>{*next});
  EXPECT_EQ(FilesIn(tmpdir_), 0u);
}

}  // namespace
}  // namespace tessera::vfs
