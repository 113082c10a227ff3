// FaultEnv itself: errors where asked, short writes continued by PwriteFull,
// unsynced data lost on DropUnsyncedData, clock jumps.
#include "common/fault_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace tessera {
namespace {

class FaultEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-faultenv-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }
  std::string Contents(const std::string& path) {
    auto fd = Env::Posix()->Open(path, O_RDONLY, 0);
    if (!fd.ok()) return "<missing>";
    EnvFile f(Env::Posix(), *fd);
    auto size = Env::Posix()->FileSize(f.get());
    std::string s(size.ok() ? *size : 0, '\0');
    EXPECT_TRUE(PreadFull(Env::Posix(), f.get(), s.data(), s.size(), 0).ok());
    return s;
  }
  std::filesystem::path dir_;
  FaultEnv env_;
};

TEST_F(FaultEnvTest, InjectsTheNextErrorsOfAKind) {
  env_.FailNext(FaultEnv::kWrite, ENOSPC);
  auto fd = env_.Open(Path("a"), O_RDWR | O_CREAT, 0644);
  ASSERT_TRUE(fd.ok());
  EnvFile f(&env_, *fd);
  std::string data = "hello";
  Status st = PwriteFull(&env_, f.get(), {{data.data(), data.size()}}, 0);
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_TRUE(PwriteFull(&env_, f.get(), {{data.data(), data.size()}}, 0).ok());
  env_.FailNext(FaultEnv::kSync | FaultEnv::kRead, EIO, 2);
  EXPECT_EQ(env_.Fdatasync(f.get()).code(), EIO);
  char buf[5];
  EXPECT_EQ(PreadFull(&env_, f.get(), buf, 5, 0).code(), EIO);
  EXPECT_TRUE(env_.Fdatasync(f.get()).ok());
  EXPECT_EQ(env_.injected(), 3u);
}

TEST_F(FaultEnvTest, ShortWritesAreContinued) {
  env_.ShortWrites(10);
  auto fd = env_.Open(Path("b"), O_RDWR | O_CREAT, 0644);
  ASSERT_TRUE(fd.ok());
  EnvFile f(&env_, *fd);
  std::string a(1000, 'a'), b(333, 'b');
  ASSERT_TRUE(PwriteFull(&env_, f.get(), {{a.data(), a.size()}, {b.data(), b.size()}}, 7).ok());
  EXPECT_EQ(Contents(Path("b")), std::string(7, '\0') + a + b);
  EXPECT_GE(env_.injected(), 5u);
}

TEST_F(FaultEnvTest, DropUnsyncedDataKeepsWhatWasSynced) {
  auto fd = env_.Open(Path("c"), O_RDWR | O_CREAT, 0644);
  ASSERT_TRUE(fd.ok());
  EnvFile f(&env_, *fd);
  std::string one = "synced", two = "+lost";
  ASSERT_TRUE(PwriteFull(&env_, f.get(), {{one.data(), one.size()}}, 0).ok());
  ASSERT_TRUE(env_.Fdatasync(f.get()).ok());
  ASSERT_TRUE(PwriteFull(&env_, f.get(), {{two.data(), two.size()}}, one.size()).ok());
  auto g = env_.Open(Path("never-synced"), O_RDWR | O_CREAT, 0644);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(PwriteFull(&env_, *g, {{one.data(), one.size()}}, 0).ok());
  ASSERT_TRUE(env_.Close(*g).ok());
  ASSERT_TRUE(env_.DropUnsyncedData().ok());
  EXPECT_EQ(Contents(Path("c")), "synced");
  EXPECT_EQ(Contents(Path("never-synced")), "");
}

TEST_F(FaultEnvTest, ClockJumps) {
  const auto before = env_.Now();
  env_.AdvanceClock(std::chrono::hours(2));
  EXPECT_GE(env_.Now() - before, std::chrono::hours(2));
}

}  // namespace
}  // namespace tessera
