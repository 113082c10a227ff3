// `tessera rmr` inside the client (Vfs::RemoveTree) and the mount's control
// channel (vfs/control.h) over a real Unix socket: a tree bigger than a
// directory page goes whole and the kernel hears of every entry; what the
// caller may not remove stays with what holds it; a stopped walk stops; with
// the trash on the tree goes into the trash; the channel answers progress
// and a result, and clear errors for bad requests.
#include "vfs/vfs.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/object_store.h"
#include "test_util.h"
#include "vfs/control.h"

namespace tessera::vfs {
namespace {

using meta::kRootIno;

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

constexpr uint32_t kBlock = 4096;

class RemoveTreeTest : public ::testing::Test {
 protected:
  void Start(int trash_days) {
    meta_ = testing::MemoryVolume("rmr", trash_days);
    ASSERT_NE(meta_, nullptr);
    if (trash_days > 0) ASSERT_OK(meta_->EnsureTrash());
    auto s = object::Open(object::StoreOptions{"memory", "x"});
    ASSERT_TRUE(s.ok());
    objects_ = std::move(*s);
    chunks_ = std::make_unique<chunk::ChunkStore>(objects_.get(), chunk::StoreConfig{kBlock});
    Config c;
    c.cleanup_interval_ms = 10;
    vfs_ = std::make_unique<Vfs>(meta_.get(), chunks_.get(), c);
    ASSERT_OK(vfs_->Start());
    vfs_->SetEntryInvalidator([this](Ino parent, const std::string& name, Ino child) {
      told_.emplace(parent, name, child);
    });
  }
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Start(0)); }
  void TearDown() override {
    server_.reset();
    vfs_.reset();
  }

  Ino Make(Ino parent, const std::string& name, uint32_t mode, const Context& ctx = Context::Root()) {
    Ino ino = 0;
    Attr a;
    Status st = meta_->Mknod(ctx, parent, name, mode, 0, 0, "", &ino, &a);
    EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
    return ino;
  }
  void Chown(Ino ino, uint32_t uid) {
    Attr in, out;
    in.uid = uid;
    in.gid = uid;
    ASSERT_OK(meta_->SetAttr(Context::Root(), ino, meta::kSetUid | meta::kSetGid, in, &out));
  }
  bool Exists(Ino parent, const std::string& name) {
    Ino ino = 0;
    Attr a;
    return meta_->Lookup(Context::Root(), parent, name, &ino, &a).ok();
  }
  // top/ with `files` files, and d1/d2/d3 below it with files of their own.
  // Returns how many entries it made below top (top excluded).
  uint64_t BuildTree(Ino top, int files) {
    uint64_t n = 0;
    for (int i = 0; i < files; ++i, ++n) Make(top, "f" + std::to_string(i), S_IFREG | 0644);
    Ino d = top;
    for (int level = 1; level <= 3; ++level) {
      d = Make(d, "d" + std::to_string(level), S_IFDIR | 0755);
      ++n;
      for (int i = 0; i < 30; ++i, ++n) Make(d, "g" + std::to_string(i), S_IFREG | 0644);
    }
    return n;
  }
  void ExpectClean() {
    std::vector<std::string> problems;
    ASSERT_OK(meta_->Check(&problems));
    EXPECT_TRUE(problems.empty()) << problems.front();
  }

  std::unique_ptr<meta::Meta> meta_;
  std::unique_ptr<object::ObjectStore> objects_;
  std::unique_ptr<chunk::ChunkStore> chunks_;
  std::unique_ptr<Vfs> vfs_;
  std::unique_ptr<ControlServer> server_;
  std::set<std::tuple<Ino, std::string, Ino>> told_;  // what the kernel was told
};

TEST_F(RemoveTreeTest, RemovesATreeBiggerThanAPageAndTellsTheKernelOfEachEntry) {
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  const uint64_t below = BuildTree(top, 700);  // 700 > one page of 256
  Vfs::RemoveProgress done;
  int calls = 0;
  ASSERT_OK(vfs_->RemoveTree(Context::Root(), kRootIno, "top", [&](const Vfs::RemoveProgress&) { return ++calls > 0; },
                             &done));
  EXPECT_EQ(done.files + done.dirs, below + 1);
  EXPECT_EQ(done.dirs, 4u);
  EXPECT_EQ(done.failed, 0u);
  EXPECT_GE(calls, 3);  // every 256 removals, and at the end
  EXPECT_FALSE(Exists(kRootIno, "top"));
  EXPECT_EQ(told_.size(), below + 1);
  EXPECT_EQ(told_.count({kRootIno, "top", top}), 1u);
  meta::StatFs fs;
  ASSERT_OK(meta_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.used_inodes, 1u) << "only the root is left";
  ExpectClean();
}

TEST_F(RemoveTreeTest, WhatTheCallerMayNotRemoveStaysWithWhatHoldsIt) {
  const Context user{1000, 1000, 0, {}};
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  Chown(top, 1000);
  Ino mine = Make(top, "mine", S_IFDIR | 0755, user);
  for (int i = 0; i < 10; ++i) Make(mine, "m" + std::to_string(i), S_IFREG | 0644, user);
  Ino locked = Make(top, "locked", S_IFDIR | 0755);  // root's: the user cannot empty it
  Make(locked, "roots-file", S_IFREG | 0644);
  Make(top, "zz-after", S_IFREG | 0644, user);  // listed after the failure: still removed

  Vfs::RemoveProgress done;
  Status st = vfs_->RemoveTree(user, kRootIno, "top", [](const Vfs::RemoveProgress&) { return true; }, &done);
  EXPECT_EQ(st.code(), EACCES) << st.ToString();
  EXPECT_NE(st.message().find("roots-file"), std::string::npos) << st.ToString();
  EXPECT_EQ(done.files, 11u);
  EXPECT_EQ(done.dirs, 1u);  // mine
  EXPECT_GE(done.failed, 1u);
  EXPECT_TRUE(Exists(kRootIno, "top"));
  EXPECT_TRUE(Exists(top, "locked"));
  EXPECT_TRUE(Exists(locked, "roots-file"));
  EXPECT_FALSE(Exists(top, "mine"));
  EXPECT_FALSE(Exists(top, "zz-after"));
  ExpectClean();
}

TEST_F(RemoveTreeTest, AWalkTheCallerStopsStops) {
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  BuildTree(top, 1000);
  Vfs::RemoveProgress done;
  Status st = vfs_->RemoveTree(Context::Root(), kRootIno, "top", [](const Vfs::RemoveProgress&) { return false; }, &done);
  EXPECT_EQ(st.code(), ECANCELED);
  EXPECT_LE(done.files, 300u);
  EXPECT_TRUE(Exists(kRootIno, "top"));
  ExpectClean();
}

TEST_F(RemoveTreeTest, AFileOrASymlinkIsRemovedItself) {
  Make(kRootIno, "file", S_IFREG | 0644);
  Ino ino = 0;
  Attr a;
  ASSERT_OK(meta_->Mknod(Context::Root(), kRootIno, "link", S_IFLNK | 0777, 0, 0, "file", &ino, &a));
  Vfs::RemoveProgress done;
  ASSERT_OK(vfs_->RemoveTree(Context::Root(), kRootIno, "link", [](const Vfs::RemoveProgress&) { return true; }, &done));
  EXPECT_EQ(done.files, 1u);
  EXPECT_FALSE(Exists(kRootIno, "link"));
  EXPECT_TRUE(Exists(kRootIno, "file"));
}

TEST_F(RemoveTreeTest, WithTheTrashOnTheTreeGoesIntoTheTrash) {
  TearDown();
  ASSERT_NO_FATAL_FAILURE(Start(1));
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  const uint64_t below = BuildTree(top, 50);
  Vfs::RemoveProgress done;
  ASSERT_OK(vfs_->RemoveTree(Context::Root(), kRootIno, "top", [](const Vfs::RemoveProgress&) { return true; }, &done));
  EXPECT_EQ(done.files + done.dirs, below + 1);
  std::vector<meta::Entry> hours, held;
  ASSERT_OK(meta_->Readdir(Context::Root(), meta::kTrashIno, false, &hours));
  ASSERT_EQ(hours.size(), 1u);
  ASSERT_OK(meta_->Readdir(Context::Root(), hours[0].ino, false, &held));
  EXPECT_EQ(held.size(), below + 1);
  ExpectClean();
}

// Warmup without a disk cache works on the memory cache: evict empties it,
// load fills it, check counts; a file the caller may not read is skipped.
TEST_F(RemoveTreeTest, WarmupLoadsEvictsAndCountsTheBlocksOfReadableFiles) {
  Ino dir = Make(kRootIno, "d", S_IFDIR | 0755);
  const Context root = Context::Root();
  Ino ino = 0;
  Attr attr;
  Handle* fh = nullptr;
  ASSERT_OK(vfs_->Create(root, dir, "f", 0644, 0, O_RDWR | O_CREAT, &fh, &ino, &attr));
  const std::string data(5 * kBlock + 100, 'x');
  auto n = vfs_->Write(root, fh, 0, data.data(), data.size());
  ASSERT_TRUE(n.ok());
  ASSERT_OK(vfs_->Release(root, fh));
  ASSERT_OK(vfs_->Create(root, dir, "secret", 0600, 0, O_RDWR | O_CREAT, &fh, &ino, &attr));
  n = vfs_->Write(root, fh, 0, data.data(), 10);
  ASSERT_TRUE(n.ok());
  ASSERT_OK(vfs_->Release(root, fh));

  auto run = [&](Vfs::WarmupMode mode, const Context& ctx, Vfs::WarmupProgress* p) {
    return vfs_->Warmup(ctx, dir, mode, 4, [](const Vfs::WarmupProgress&) { return true; }, p);
  };
  Vfs::WarmupProgress p;
  ASSERT_OK(run(Vfs::WarmupMode::kEvict, root, &p));
  EXPECT_EQ(p.files, 2u);
  EXPECT_EQ(p.blocks, 7u);  // 6 of f, 1 of secret
  ASSERT_OK(run(Vfs::WarmupMode::kCheck, root, &p));
  EXPECT_EQ(p.cached_blocks, 0u);
  ASSERT_OK(run(Vfs::WarmupMode::kLoad, root, &p));
  EXPECT_EQ(p.bytes, data.size() + 10);
  ASSERT_OK(run(Vfs::WarmupMode::kCheck, root, &p));
  EXPECT_EQ(p.cached_blocks, 7u);
  EXPECT_EQ(p.cached_bytes, data.size() + 10);

  const Context user{1000, 1000, 0, {}};
  ASSERT_OK(run(Vfs::WarmupMode::kEvict, root, &p));
  Status st = run(Vfs::WarmupMode::kLoad, user, &p);
  EXPECT_EQ(st.code(), EACCES) << st.ToString();
  EXPECT_EQ(p.files, 1u);
  EXPECT_EQ(p.failed, 1u);
  ASSERT_OK(run(Vfs::WarmupMode::kCheck, root, &p));
  EXPECT_EQ(p.cached_blocks, 6u) << "the secret file was loaded for a user who may not read it";
}

// ---------------------------------------------------------------- the channel

class ControlChannelTest : public RemoveTreeTest {
 protected:
  void SetUp() override {
    RemoveTreeTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() / ("tessera-control-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "c.sock").string();
    server_ = std::make_unique<ControlServer>(vfs_.get());
    ASSERT_OK(server_->Start(path_));
  }
  void TearDown() override {
    RemoveTreeTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  // Sends one request line; returns every line of the answer.
  std::vector<std::string> Ask(const std::string& request) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    std::string line = request + "\n";
    EXPECT_EQ(write(fd, line.data(), line.size()), ssize_t(line.size()));
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) all.append(buf, size_t(n));
    close(fd);
    std::vector<std::string> lines;
    size_t pos = 0, nl;
    while ((nl = all.find('\n', pos)) != std::string::npos) {
      lines.push_back(all.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return lines;
  }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ControlChannelTest, RmrAnswersProgressThenTheResult) {
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "anyone may ask; the mount checks who asks";
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  Ino sub = Make(top, "sub", S_IFDIR | 0755);
  for (int i = 0; i < 600; ++i) Make(sub, "f" + std::to_string(i), S_IFREG | 0644);
  auto lines = Ask(R"({"op":"rmr","path":"top/sub"})");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_NE(lines.front().find("\"progress\""), std::string::npos) << lines.front();
  EXPECT_NE(lines.back().find("\"done\""), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("\"files\":600"), std::string::npos) << lines.back();
  EXPECT_FALSE(Exists(top, "sub"));
  EXPECT_TRUE(Exists(kRootIno, "top"));
}

TEST_F(ControlChannelTest, BadRequestsGetClearErrors) {
  auto err = [&](const std::string& req) {
    auto lines = Ask(req);
    return lines.size() == 1 ? lines[0] : std::string("(") + std::to_string(lines.size()) + " lines)";
  };
  EXPECT_NE(err("not json").find("malformed request"), std::string::npos);
  EXPECT_NE(err(R"({"op":"explode"})").find("unknown control operation"), std::string::npos);
  EXPECT_NE(err(R"({"op":"rmr","path":""})").find("root of the mount"), std::string::npos);
  std::string missing = err(R"({"op":"rmr","path":"no/such"})");
  EXPECT_NE(missing.find("\"errno\":2"), std::string::npos) << missing;
  EXPECT_NE(err(R"({"op":"rmr","path":"../etc"})").find("'..'"), std::string::npos);
  EXPECT_NE(err(R"({"op":"ping"})").find("\"done\""), std::string::npos);
}

}  // namespace
}  // namespace tessera::vfs
