// The metadata engine conformance suite: the contract of src/meta/meta.h, run
// on every engine (memory, sqlite3, postgres, redis). Errors are asserted by exact errno
// (Status::code()), because the FUSE adapter hands them to the kernel as is;
// where meta.h leaves a detail open, the expected value is what Linux does for
// the same system call on a local file system.
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../kv/pg_test_util.h"
#include "chunk/layout.h"
#include "meta/meta.h"
#include "meta/redis_client.h"

namespace tessera::meta {
namespace {

using chunk::kChunkSize;
using chunk::Slice;

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)
// Expects `expr` (a Status) to fail with exactly errno `err`.
#define EXPECT_ERRNO(err, expr)                                                                     \
  do {                                                                                              \
    const ::tessera::Status _st = (expr);                                                           \
    EXPECT_EQ(_st.code(), (err)) << #expr << ": got " << _st.ToString() << ", want " << #err << " (" \
                                 << std::strerror(err) << ")";                                      \
  } while (0)

// A fresh private directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-meta-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A process-unique name, so named memory stores of different tests never meet.
std::string UniqueName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

Context User(uint32_t uid, uint32_t gid, std::vector<uint32_t> gids = {}) {
  Context ctx;
  ctx.uid = uid;
  ctx.gid = gid;
  ctx.gids = std::move(gids);
  return ctx;
}

int64_t Nanos(const Timespec& t) { return t.sec * 1'000'000'000 + int64_t(t.nsec); }

constexpr Timespec kOldTime{1000, 0};

using SliceRef = std::pair<uint64_t, uint32_t>;  // (id, size) as given to a SliceDeleter

class MetaConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Named memory stores are shared by every client opened with the same URL
    // (like sqlite3 files), so multi-client tests run on both engines.
    if (GetParam() == "postgres") {
      if (kv::testing::PgEnv("TESSERA_TEST_PG_URL").empty()) GTEST_SKIP() << kv::testing::kPgSkipMessage;
      url_ = FreshUrl();
    } else if (GetParam() == "redis") {
      // A real redis-server (ctest runs these under tests/tools/with-redis.sh).
      const char* url = std::getenv("TESSERA_TEST_REDIS_URL");
      if (url == nullptr) GTEST_SKIP() << "TESSERA_TEST_REDIS_URL not set (ctest unit_meta_redis sets it)";
      url_ = url;
      ASSERT_NO_FATAL_FAILURE(FlushRedis(url_));
      ASSERT_NO_FATAL_FAILURE(FlushRedis(FreshUrl()));
    } else {
      url_ = GetParam() == "memory" ? "memory://" + UniqueName("meta-conformance")
                                    : "sqlite3://" + (dir_.path() / "meta.db").string();
      // sqlite3_delayed: changes committed only by reads, Flush, the 256th
      // in a row or close (a mount's --commit-delay, made long).
      if (GetParam() == "sqlite3_delayed") {
        // Tests with a second client of the volume: its writes would wait
        // an hour for the first one's lock (with a mount's 1 ms they wait
        // 1 ms; kv's commit_delay_test and the e2e suites cover that).
        static const std::set<std::string> kMultiClient = {
            "CleanStaleSessionsReclaimsADeadClient", "ConcurrentCreatesRenamesUnlinksInOneDirectory",
            "CrossRenamesNeverMakeACycle",           "LoadReturnsTheFormat",
            "NewSliceIdsAreUnique",                  "SessionsListAndClose"};
        std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
        test = test.substr(0, test.find('/'));
        if (kMultiClient.count(test) > 0) GTEST_SKIP() << "a second client would wait an hour for the delayed commit";
        options_.commit_delay = std::chrono::hours(1);
      }
    }
    m_ = OpenClient();
    ASSERT_NE(m_, nullptr);
    format_.name = "conformance";
    format_.uuid = NewUuid();
    ASSERT_OK(m_->Init(format_, false));
    ASSERT_OK(m_->NewSession(Session("/mnt/a")));
  }

  static SessionInfo Session(const std::string& mount_point) {
    SessionInfo info;
    info.mount_point = mount_point;
    info.version = "conformance-test";
    return info;
  }

  // A URL of an engine with nothing formatted in it.
  std::string FreshUrl() {
    if (GetParam() == "postgres") {  // a new schema, dropped after the test
      pg_schemas_.push_back(std::make_unique<kv::testing::PgSchema>(kv::testing::PgEnv("TESSERA_TEST_PG_URL")));
      return pg_schemas_.back()->url();
    }
    if (GetParam() == "redis") return url_.substr(0, url_.rfind('/')) + "/1";  // database 1, flushed by SetUp
    return GetParam() == "memory" ? "memory://" : "sqlite3://" + (dir_.path() / UniqueName("fresh")).string() + ".db";
  }

  static void FlushRedis(const std::string& url) {
    auto opts = redis::Options::Parse(url);
    ASSERT_TRUE(opts.ok()) << opts.status().ToString();
    auto client = redis::Client::Connect(*opts);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto r = (*client)->Command({"FLUSHDB"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  std::unique_ptr<Meta> OpenClient() {
    auto r = Open(url_, options_);
    EXPECT_TRUE(r.ok()) << url_ << ": " << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // Another client of the same volume (another mount), with its own session.
  std::unique_ptr<Meta> SecondClient(const std::string& mount_point) {
    auto client = OpenClient();
    if (!client) return nullptr;
    auto loaded = client->Load();
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_OK(client->NewSession(Session(mount_point)));
    return client;
  }

  Ino Mk(Ino parent, const std::string& name, uint32_t mode, const Context& ctx = Context::Root(),
         Meta* m = nullptr) {
    Ino ino = 0;
    Attr attr;
    Status st = (m ? m : m_.get())->Mknod(ctx, parent, name, mode, 0, 0, "", &ino, &attr);
    EXPECT_TRUE(st.ok()) << "mknod " << name << ": " << st.ToString();
    return ino;
  }
  Ino File(Ino parent, const std::string& name, uint32_t perm = 0644, const Context& ctx = Context::Root()) {
    return Mk(parent, name, S_IFREG | perm, ctx);
  }
  Ino Dir(Ino parent, const std::string& name, uint32_t perm = 0755, const Context& ctx = Context::Root()) {
    return Mk(parent, name, S_IFDIR | perm, ctx);
  }
  Ino Symlink(Ino parent, const std::string& name, const std::string& target) {
    Ino ino = 0;
    Attr attr;
    EXPECT_OK(m_->Mknod(Context::Root(), parent, name, S_IFLNK | 0777, 0, 0, target, &ino, &attr));
    return ino;
  }

  Attr Get(Ino ino) {
    Attr attr;
    EXPECT_OK(m_->GetAttr(Context::Root(), ino, &attr));
    return attr;
  }
  // The inode a name resolves to, 0 if it does not.
  Ino Find(Ino parent, const std::string& name) {
    Ino ino = 0;
    Attr attr;
    Status st = m_->Lookup(Context::Root(), parent, name, &ino, &attr);
    EXPECT_TRUE(st.ok() || st.code() == ENOENT) << "lookup " << name << ": " << st.ToString();
    return st.ok() ? ino : 0;
  }
  std::vector<std::string> Names(Ino dir) {
    std::vector<Entry> entries;
    EXPECT_OK(m_->Readdir(Context::Root(), dir, false, &entries));
    std::vector<std::string> names;
    for (const auto& e : entries) names.push_back(e.name);
    std::sort(names.begin(), names.end());
    return names;
  }

  Status SetAttrAs(const Context& ctx, Ino ino, uint32_t mask, const Attr& in) {
    Attr out;
    return m_->SetAttr(ctx, ino, mask, in, &out);
  }
  void Chmod(Ino ino, uint32_t perm) {
    Attr in;
    in.mode = perm;
    EXPECT_OK(SetAttrAs(Context::Root(), ino, kSetMode, in));
  }
  void Chown(Ino ino, uint32_t uid, uint32_t gid) {
    Attr in;
    in.uid = uid;
    in.gid = gid;
    EXPECT_OK(SetAttrAs(Context::Root(), ino, kSetUid | kSetGid, in));
  }
  // Sets atime, mtime and ctime far in the past, so any later change shows.
  void AgeTimes(Ino ino) {
    Attr in;
    in.atime = in.mtime = in.ctime = kOldTime;
    EXPECT_OK(SetAttrAs(Context::Root(), ino, kSetAtime | kSetMtime | kSetCtime, in));
  }
  void ExpectModifiedSinceAged(Ino ino, const char* what) {
    Attr a = Get(ino);
    EXPECT_NE(a.mtime, kOldTime) << what << ": mtime";
    EXPECT_NE(a.ctime, kOldTime) << what << ": ctime";
  }

  // Allocates a slice id and appends a slice of `len` fresh bytes at `pos`.
  Slice WriteSlice(Ino ino, uint32_t chunk_index, uint32_t pos, uint32_t len, Meta* m = nullptr) {
    Meta* meta = m ? m : m_.get();
    auto id = meta->NewSliceId();
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    Slice s{pos, id.ok() ? *id : 0, len, 0, len};
    Attr attr;
    EXPECT_OK(meta->Write(Context::Root(), ino, chunk_index, s, Now(), &attr));
    return s;
  }
  std::vector<Slice> ReadChunk(Ino ino, uint32_t chunk_index) {
    std::vector<Slice> slices;
    EXPECT_OK(m_->Read(ino, chunk_index, &slices));
    return slices;
  }

  // Runs CleanupDeleted until it has nothing left; returns what it deleted.
  std::vector<SliceRef> Cleanup() {
    std::vector<SliceRef> deleted;
    for (int round = 0; round < 100; ++round) {
      auto n = m_->CleanupDeleted(
          [&](uint64_t id, uint32_t size) {
            deleted.emplace_back(id, size);
            return Status::OK();
          },
          1000);
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok() || *n == 0) break;
    }
    std::sort(deleted.begin(), deleted.end());
    return deleted;
  }

  void ExpectClean(Meta* m = nullptr) {
    std::vector<std::string> problems;
    ASSERT_OK((m ? m : m_.get())->Check(&problems));
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    EXPECT_TRUE(problems.empty()) << all;
  }

  uint64_t UsedInodes() {
    StatFs fs;
    EXPECT_OK(m_->StatFS(Context::Root(), &fs));
    return fs.used_inodes;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<kv::testing::PgSchema>> pg_schemas_;  // outlive the clients
  std::string url_;
  Format format_;
  OpenOptions options_;
  std::unique_ptr<Meta> m_;
};

// postgres: TESSERA_TEST_PG_URL (skipped when unset; ctest unit_meta_postgres).
// redis: TESSERA_TEST_REDIS_URL (skipped when unset; ctest unit_meta_redis).
INSTANTIATE_TEST_SUITE_P(Engines, MetaConformanceTest,
                         ::testing::Values("memory", "sqlite3", "sqlite3_delayed", "postgres", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// ---------------------------------------------------------------- volume

TEST_P(MetaConformanceTest, InitTwiceIsEexist) { EXPECT_ERRNO(EEXIST, m_->Init(format_, false)); }

TEST_P(MetaConformanceTest, InitForceKeepsUuidAndTree) {
  Ino f = File(kRootIno, "keep");
  Format other = format_;
  other.uuid = NewUuid();
  other.name = "renamed";
  other.trash_days = 3;
  ASSERT_OK(m_->Init(other, true));
  auto loaded = m_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->uuid, format_.uuid);
  EXPECT_EQ(loaded->name, "renamed");
  EXPECT_EQ(loaded->trash_days, 3);
  EXPECT_EQ(Find(kRootIno, "keep"), f);
  ExpectClean();
}

TEST_P(MetaConformanceTest, LoadReturnsTheFormat) {
  auto client = OpenClient();
  ASSERT_NE(client, nullptr);
  auto loaded = client->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->name, format_.name);
  EXPECT_EQ(loaded->uuid, format_.uuid);
  EXPECT_EQ(loaded->storage, format_.storage);
  EXPECT_EQ(loaded->block_size, format_.block_size);
  EXPECT_EQ(loaded->version, kFormatVersion);

  auto fresh = Open(FreshUrl());
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_ERRNO(ENOENT, (*fresh)->Load().status());
}

TEST_P(MetaConformanceTest, RootDirectory) {
  Attr root = Get(kRootIno);
  EXPECT_TRUE(root.IsDir());
  EXPECT_EQ(root.mode & 07777, 0777u);
  EXPECT_EQ(root.nlink, 2u);
  EXPECT_EQ(root.parent, kRootIno);
  EXPECT_EQ(UsedInodes(), 1u);
  ExpectClean();
}

// ---------------------------------------------------------------- mknod

TEST_P(MetaConformanceTest, MknodEveryType) {
  const Context ctx = User(1000, 1000);
  struct Case {
    const char* name;
    uint32_t type;
    uint32_t rdev;
    const char* target;
  };
  const Case cases[] = {
      {"file", S_IFREG, 0, ""},      {"dir", S_IFDIR, 0, ""},          {"link", S_IFLNK, 0, "../some/target"},
      {"fifo", S_IFIFO, 0, ""},      {"sock", S_IFSOCK, 0, ""},        {"chr", S_IFCHR, makedev(1, 3), ""},
      {"blk", S_IFBLK, makedev(8, 1), ""},
  };
  uint32_t subdirs = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    uint32_t perm = c.type == S_IFDIR ? 0777 : 0666;
    Ino ino = 0;
    Attr a;
    Timespec before = Now();
    ASSERT_OK(m_->Mknod(ctx, kRootIno, c.name, c.type | perm, 022, c.rdev, c.target, &ino, &a));
    Timespec after = Now();
    EXPECT_NE(ino, 0u);
    EXPECT_EQ(a.mode & S_IFMT, c.type);
    // Symlinks are always 0777; everything else gets the umask applied.
    EXPECT_EQ(a.mode & 07777, c.type == S_IFLNK ? 0777u : (perm & ~022u));
    EXPECT_EQ(a.uid, 1000u);
    EXPECT_EQ(a.gid, 1000u);
    EXPECT_EQ(a.nlink, c.type == S_IFDIR ? 2u : 1u);
    EXPECT_EQ(a.parent, kRootIno);
    EXPECT_EQ(a.rdev, c.rdev);
    EXPECT_EQ(a.length, std::strlen(c.target));
    EXPECT_EQ(a.atime, a.mtime);
    EXPECT_EQ(a.mtime, a.ctime);
    EXPECT_GE(Nanos(a.mtime), Nanos(before));
    EXPECT_LE(Nanos(a.mtime), Nanos(after));

    Attr got = Get(ino);
    EXPECT_EQ(got.mode, a.mode);
    EXPECT_EQ(got.uid, a.uid);
    EXPECT_EQ(got.nlink, a.nlink);
    EXPECT_EQ(got.rdev, a.rdev);
    EXPECT_EQ(got.length, a.length);
    EXPECT_EQ(got.mtime, a.mtime);
    EXPECT_EQ(Find(kRootIno, c.name), ino);
    if (c.type == S_IFDIR) ++subdirs;

    std::string target;
    if (c.type == S_IFLNK) {
      ASSERT_OK(m_->ReadLink(ctx, ino, &target));
      EXPECT_EQ(target, c.target);
    } else {
      EXPECT_ERRNO(EINVAL, m_->ReadLink(ctx, ino, &target));
    }
  }
  EXPECT_EQ(Get(kRootIno).nlink, 2 + subdirs);
  EXPECT_EQ(UsedInodes(), 1 + std::size(cases));

  // No type bits means a regular file.
  Ino ino = 0;
  Attr a;
  ASSERT_OK(m_->Mknod(ctx, kRootIno, "plain", 0640, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.mode, uint32_t(S_IFREG | 0640));
  ExpectClean();
}

TEST_P(MetaConformanceTest, MknodSymlinkTargetLimits) {
  Ino ino = 0;
  Attr a;
  EXPECT_ERRNO(ENOENT, m_->Mknod(Context::Root(), kRootIno, "empty", S_IFLNK | 0777, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Mknod(Context::Root(), kRootIno, "long", S_IFLNK | 0777, 0, 0,
                                       std::string(kMaxSymlink + 1, 'x'), &ino, &a));
  ASSERT_OK(m_->Mknod(Context::Root(), kRootIno, "max", S_IFLNK | 0777, 0, 0, std::string(kMaxSymlink, 'x'), &ino, &a));
  EXPECT_EQ(a.length, kMaxSymlink);
}

TEST_P(MetaConformanceTest, MknodExistingNameIsEexist) {
  File(kRootIno, "f");
  Dir(kRootIno, "d");
  Ino ino = 0;
  Attr a;
  EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), kRootIno, "f", S_IFREG | 0644, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), kRootIno, "f", S_IFDIR | 0755, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), kRootIno, "d", S_IFREG | 0644, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), kRootIno, "d", S_IFLNK | 0777, 0, 0, "t", &ino, &a));
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_EQ(UsedInodes(), 3u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, NameLengthLimit) {
  const std::string max(kMaxName, 'n');
  const std::string over(kMaxName + 1, 'n');
  Ino f = File(kRootIno, max);
  EXPECT_EQ(Find(kRootIno, max), f);
  Ino ino = 0;
  Attr a;
  EXPECT_ERRNO(ENAMETOOLONG, m_->Mknod(Context::Root(), kRootIno, over, S_IFREG | 0644, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Mknod(Context::Root(), kRootIno, over, S_IFDIR | 0755, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Lookup(Context::Root(), kRootIno, over, &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Link(Context::Root(), f, kRootIno, over, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Rename(Context::Root(), kRootIno, max, kRootIno, over, 0, &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Rename(Context::Root(), kRootIno, over, kRootIno, "x", 0, &ino, &a));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Unlink(Context::Root(), kRootIno, over));
  EXPECT_ERRNO(ENAMETOOLONG, m_->Rmdir(Context::Root(), kRootIno, over));
  EXPECT_EQ(Names(kRootIno), std::vector<std::string>{max});
}

TEST_P(MetaConformanceTest, ParentThatIsAFileIsEnotdir) {
  Ino f = File(kRootIno, "f");
  Ino g = File(kRootIno, "g");
  Ino ino = 0;
  Attr a;
  std::vector<Entry> entries;
  EXPECT_ERRNO(ENOTDIR, m_->Mknod(Context::Root(), f, "x", S_IFREG | 0644, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(ENOTDIR, m_->Mknod(Context::Root(), f, "x", S_IFDIR | 0755, 0, 0, "", &ino, &a));
  EXPECT_ERRNO(ENOTDIR, m_->Lookup(Context::Root(), f, "x", &ino, &a));
  EXPECT_ERRNO(ENOTDIR, m_->Readdir(Context::Root(), f, false, &entries));
  EXPECT_ERRNO(ENOTDIR, m_->Unlink(Context::Root(), f, "x"));
  EXPECT_ERRNO(ENOTDIR, m_->Rmdir(Context::Root(), f, "x"));
  EXPECT_ERRNO(ENOTDIR, m_->Link(Context::Root(), g, f, "x", &a));
  EXPECT_ERRNO(ENOTDIR, m_->Rename(Context::Root(), kRootIno, "g", f, "x", 0, &ino, &a));
  EXPECT_ERRNO(ENOTDIR, m_->Rename(Context::Root(), f, "x", kRootIno, "y", 0, &ino, &a));
}

// "." and ".." always exist in a directory, so they can be neither created
// (EEXIST, like mkdir(".")) nor unlinked (EISDIR, like unlink(".")).
TEST_P(MetaConformanceTest, DotNamesCannotBeCreatedOrUnlinked) {
  Ino f = File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  Ino ino = 0;
  Attr a;
  for (const char* name : {".", ".."}) {
    SCOPED_TRACE(name);
    EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), d, name, S_IFREG | 0644, 0, 0, "", &ino, &a));
    EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), d, name, S_IFDIR | 0755, 0, 0, "", &ino, &a));
    EXPECT_ERRNO(EEXIST, m_->Mknod(Context::Root(), d, name, S_IFLNK | 0777, 0, 0, "target", &ino, &a));
    EXPECT_ERRNO(EEXIST, m_->Link(Context::Root(), f, d, name, &a));
    EXPECT_ERRNO(EISDIR, m_->Unlink(Context::Root(), d, name));
  }
  EXPECT_TRUE(Names(d).empty());
  EXPECT_EQ(Find(d, "."), d);
  EXPECT_EQ(Find(d, ".."), kRootIno);
  EXPECT_EQ(Get(d).nlink, 2u);
  EXPECT_EQ(Get(f).nlink, 1u);
  EXPECT_EQ(UsedInodes(), 3u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, LookupDotAndDotDot) {
  Ino d = Dir(kRootIno, "d");
  Ino sub = Dir(d, "sub");
  EXPECT_EQ(Find(sub, "."), sub);
  EXPECT_EQ(Find(sub, ".."), d);
  EXPECT_EQ(Find(d, ".."), kRootIno);
  EXPECT_EQ(Find(kRootIno, "."), kRootIno);
  EXPECT_EQ(Find(kRootIno, ".."), kRootIno);
  Ino ino = 0;
  Attr a;
  ASSERT_OK(m_->Lookup(Context::Root(), d, "..", &ino, &a));
  EXPECT_TRUE(a.IsDir());
  EXPECT_EQ(a.nlink, 3u);  // the root: ".", "..", "d"
  EXPECT_ERRNO(ENOENT, m_->Lookup(Context::Root(), d, "missing", &ino, &a));
  // Searching needs x on the directory.
  Chmod(d, 0700);
  EXPECT_ERRNO(EACCES, m_->Lookup(User(1000, 1000), d, "sub", &ino, &a));
}

TEST_P(MetaConformanceTest, NamespaceChangesUpdateParentNlinkAndTimes) {
  Ino d = Dir(kRootIno, "d");
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  Ino other = File(kRootIno, "other");

  AgeTimes(d);
  File(d, "f");
  EXPECT_EQ(Get(d).nlink, 2u);
  ExpectModifiedSinceAged(d, "create");

  AgeTimes(d);
  Dir(d, "s");
  EXPECT_EQ(Get(d).nlink, 3u);
  ExpectModifiedSinceAged(d, "mkdir");

  AgeTimes(d);
  AgeTimes(other);
  Attr a;
  ASSERT_OK(m_->Link(Context::Root(), other, d, "l", &a));
  EXPECT_EQ(Get(d).nlink, 3u);
  ExpectModifiedSinceAged(d, "link");
  EXPECT_NE(Get(other).ctime, kOldTime) << "link changes the inode's ctime";

  AgeTimes(d);
  Ino ino = 0;
  ASSERT_OK(m_->Rename(Context::Root(), d, "f", d, "g", 0, &ino, &a));
  ExpectModifiedSinceAged(d, "rename");

  AgeTimes(d);
  AgeTimes(other);
  ASSERT_OK(m_->Unlink(Context::Root(), d, "l"));
  ExpectModifiedSinceAged(d, "unlink");
  EXPECT_NE(Get(other).ctime, kOldTime) << "unlink changes the inode's ctime";

  AgeTimes(d);
  ASSERT_OK(m_->Rmdir(Context::Root(), d, "s"));
  EXPECT_EQ(Get(d).nlink, 2u);
  ExpectModifiedSinceAged(d, "rmdir");
  ExpectClean();
}

// ---------------------------------------------------------------- unlink, rmdir, link

TEST_P(MetaConformanceTest, UnlinkRules) {
  Ino f = File(kRootIno, "f");
  Dir(kRootIno, "d");
  EXPECT_ERRNO(EISDIR, m_->Unlink(Context::Root(), kRootIno, "d"));
  EXPECT_ERRNO(ENOENT, m_->Unlink(Context::Root(), kRootIno, "missing"));
  EXPECT_EQ(UsedInodes(), 3u);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  EXPECT_EQ(Find(kRootIno, "f"), 0u);
  Attr a;
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  EXPECT_ERRNO(ENOENT, m_->Unlink(Context::Root(), kRootIno, "f"));
  EXPECT_EQ(UsedInodes(), 2u);
  // Removing an entry needs w+x on the directory.
  Ino d2 = Dir(kRootIno, "ro", 0755);
  File(d2, "x");
  EXPECT_ERRNO(EACCES, m_->Unlink(User(1000, 1000), d2, "x"));
  ExpectClean();
}

TEST_P(MetaConformanceTest, RmdirRules) {
  File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  File(d, "child");
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_ERRNO(ENOTDIR, m_->Rmdir(Context::Root(), kRootIno, "f"));
  EXPECT_ERRNO(ENOTEMPTY, m_->Rmdir(Context::Root(), kRootIno, "d"));
  EXPECT_ERRNO(EINVAL, m_->Rmdir(Context::Root(), d, "."));
  EXPECT_ERRNO(ENOTEMPTY, m_->Rmdir(Context::Root(), d, ".."));
  EXPECT_ERRNO(ENOENT, m_->Rmdir(Context::Root(), kRootIno, "missing"));
  ASSERT_OK(m_->Unlink(Context::Root(), d, "child"));
  ASSERT_OK(m_->Rmdir(Context::Root(), kRootIno, "d"));
  EXPECT_EQ(Get(kRootIno).nlink, 2u);
  Attr a;
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), d, &a));
  EXPECT_EQ(UsedInodes(), 2u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, LinkRules) {
  Ino d = Dir(kRootIno, "d");
  Ino f = File(kRootIno, "f");
  Attr a;
  EXPECT_ERRNO(EPERM, m_->Link(Context::Root(), d, kRootIno, "d2", &a));
  ASSERT_OK(m_->Link(Context::Root(), f, d, "g", &a));
  EXPECT_EQ(a.nlink, 2u);
  EXPECT_EQ(Get(f).nlink, 2u);
  EXPECT_EQ(Find(d, "g"), f);
  EXPECT_EQ(Get(d).nlink, 2u) << "a hard link to a file is not a subdirectory";
  EXPECT_ERRNO(EEXIST, m_->Link(Context::Root(), f, d, "g", &a));
  EXPECT_ERRNO(EEXIST, m_->Link(Context::Root(), f, kRootIno, "d", &a));
  EXPECT_ERRNO(ENOENT, m_->Link(Context::Root(), 999999, kRootIno, "x", &a));
  // Symlinks can be hard-linked too.
  Ino s = Symlink(kRootIno, "s", "target");
  ASSERT_OK(m_->Link(Context::Root(), s, d, "s2", &a));
  EXPECT_EQ(Get(s).nlink, 2u);
  ExpectClean();

  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  EXPECT_EQ(Get(f).nlink, 1u);
  EXPECT_EQ(Find(d, "g"), f);
  EXPECT_EQ(UsedInodes(), 4u);
  ASSERT_OK(m_->Unlink(Context::Root(), d, "g"));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  ExpectClean();
}

// ---------------------------------------------------------------- rename

TEST_P(MetaConformanceTest, RenameOverFile) {
  Ino a = File(kRootIno, "a");
  Ino b = File(kRootIno, "b");
  Ino c = File(kRootIno, "c");
  Slice sa = WriteSlice(a, 0, 0, 100);
  Slice sb = WriteSlice(b, 0, 0, 200);
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "a", kRootIno, "b", 0, &ino, &attr));
  EXPECT_EQ(ino, a);
  EXPECT_EQ(attr.length, 100u);
  EXPECT_EQ(Find(kRootIno, "a"), 0u);
  EXPECT_EQ(Find(kRootIno, "b"), a);
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), b, &attr));
  EXPECT_EQ(UsedInodes(), 3u);
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{sb.id, sb.size}}));
  EXPECT_EQ(ReadChunk(a, 0), std::vector<Slice>{sa});
  ExpectClean();

  // A replaced file with another name only loses one link.
  ASSERT_OK(m_->Link(Context::Root(), c, kRootIno, "c2", &attr));
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "b", kRootIno, "c", 0, &ino, &attr));
  EXPECT_EQ(Get(c).nlink, 1u);
  EXPECT_EQ(Find(kRootIno, "c2"), c);
  EXPECT_EQ(Find(kRootIno, "c"), a);
  EXPECT_EQ(UsedInodes(), 3u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameOverEmptyDirectory) {
  Ino d1 = Dir(kRootIno, "d1");
  Ino d2 = Dir(kRootIno, "d2");
  Ino child = File(d1, "child");
  EXPECT_EQ(Get(kRootIno).nlink, 4u);
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "d1", kRootIno, "d2", 0, &ino, &attr));
  EXPECT_EQ(ino, d1);
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_EQ(Find(kRootIno, "d2"), d1);
  EXPECT_EQ(Find(d1, "child"), child);
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), d2, &attr));
  EXPECT_EQ(UsedInodes(), 3u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameOverNonEmptyDirectoryIsEnotempty) {
  Ino d1 = Dir(kRootIno, "d1");
  Ino d2 = Dir(kRootIno, "d2");
  File(d2, "x");
  Ino ino = 0;
  Attr attr;
  EXPECT_ERRNO(ENOTEMPTY, m_->Rename(Context::Root(), kRootIno, "d1", kRootIno, "d2", 0, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "d1"), d1);
  EXPECT_EQ(Find(kRootIno, "d2"), d2);
  // A directory may not replace an ancestor of itself either.
  Ino inner = Dir(d2, "inner");
  EXPECT_ERRNO(ENOTEMPTY, m_->Rename(Context::Root(), d2, "inner", kRootIno, "d2", 0, &ino, &attr));
  EXPECT_EQ(Find(d2, "inner"), inner);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameBetweenFileAndDirectoryTypes) {
  Ino f = File(kRootIno, "f");
  Ino d = Dir(kRootIno, "d");
  Ino ino = 0;
  Attr attr;
  EXPECT_ERRNO(EISDIR, m_->Rename(Context::Root(), kRootIno, "f", kRootIno, "d", 0, &ino, &attr));
  EXPECT_ERRNO(ENOTDIR, m_->Rename(Context::Root(), kRootIno, "d", kRootIno, "f", 0, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "f"), f);
  EXPECT_EQ(Find(kRootIno, "d"), d);
  EXPECT_ERRNO(ENOENT, m_->Rename(Context::Root(), kRootIno, "missing", kRootIno, "x", 0, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "f", kRootIno, "g", 4, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "f", kRootIno, "g", kRenameNoReplace | kRenameExchange,
                                  &ino, &attr));
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameDirectoryIntoItsOwnSubtreeIsEinval) {
  Ino a = Dir(kRootIno, "a");
  Ino b = Dir(a, "b");
  Ino c = Dir(b, "c");
  Ino ino = 0;
  Attr attr;
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "a", a, "x", 0, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "a", b, "x", 0, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "a", c, "x", 0, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), a, "b", c, "x", 0, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "a", c, "x", kRenameNoReplace, &ino, &attr));
  // Exchanging a directory with an entry below it would loop as well.
  File(c, "deep");
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), kRootIno, "a", c, "deep", kRenameExchange, &ino, &attr));
  EXPECT_ERRNO(EINVAL, m_->Rename(Context::Root(), c, "deep", kRootIno, "a", kRenameExchange, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "a"), a);
  EXPECT_EQ(Find(a, "b"), b);
  EXPECT_EQ(Find(b, "c"), c);
  // Moving it up is fine.
  ASSERT_OK(m_->Rename(Context::Root(), b, "c", kRootIno, "c", 0, &ino, &attr));
  EXPECT_EQ(Get(c).parent, kRootIno);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameBetweenHardLinksOfOneInodeIsNoop) {
  Ino f = File(kRootIno, "f");
  Attr attr;
  ASSERT_OK(m_->Link(Context::Root(), f, kRootIno, "g", &attr));
  Ino ino = 0;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "f", kRootIno, "g", 0, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "f"), f);
  EXPECT_EQ(Find(kRootIno, "g"), f);
  EXPECT_EQ(Get(f).nlink, 2u);
  // Renaming a name onto itself is a no-op too.
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "f", kRootIno, "f", 0, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "f"), f);
  Ino d = Dir(kRootIno, "d");
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "d", kRootIno, "d", 0, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "d"), d);
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameNoReplace) {
  Ino a = File(kRootIno, "a");
  Ino b = File(kRootIno, "b");
  Ino ino = 0;
  Attr attr;
  EXPECT_ERRNO(EEXIST, m_->Rename(Context::Root(), kRootIno, "a", kRootIno, "b", kRenameNoReplace, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "a"), a);
  EXPECT_EQ(Find(kRootIno, "b"), b);
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "a", kRootIno, "c", kRenameNoReplace, &ino, &attr));
  EXPECT_EQ(Find(kRootIno, "c"), a);
  EXPECT_EQ(Find(kRootIno, "a"), 0u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameExchangeFileAndDirectoryAcrossParents) {
  Ino p1 = Dir(kRootIno, "p1");
  Ino p2 = Dir(kRootIno, "p2");
  Ino x = File(p1, "x");
  Ino y = Dir(p2, "y");
  Ino inner = File(y, "inner");
  EXPECT_EQ(Get(p1).nlink, 2u);
  EXPECT_EQ(Get(p2).nlink, 3u);
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Rename(Context::Root(), p1, "x", p2, "y", kRenameExchange, &ino, &attr));
  EXPECT_EQ(Find(p1, "x"), y);
  EXPECT_EQ(Find(p2, "y"), x);
  EXPECT_EQ(Get(p1).nlink, 3u);
  EXPECT_EQ(Get(p2).nlink, 2u);
  EXPECT_EQ(Get(y).parent, p1);
  EXPECT_EQ(Get(x).parent, p2);
  EXPECT_EQ(Find(y, ".."), p1);
  EXPECT_EQ(Find(y, "inner"), inner);
  ExpectClean();

  // Exchanging two directories in one parent keeps its nlink.
  Ino z = Dir(p1, "z");
  EXPECT_EQ(Get(p1).nlink, 4u);
  ASSERT_OK(m_->Rename(Context::Root(), p1, "x", p1, "z", kRenameExchange, &ino, &attr));
  EXPECT_EQ(Find(p1, "x"), z);
  EXPECT_EQ(Find(p1, "z"), y);
  EXPECT_EQ(Get(p1).nlink, 4u);
  ExpectClean();

  EXPECT_ERRNO(ENOENT, m_->Rename(Context::Root(), p1, "x", p1, "missing", kRenameExchange, &ino, &attr));
  EXPECT_ERRNO(ENOENT, m_->Rename(Context::Root(), p1, "missing", p1, "x", kRenameExchange, &ino, &attr));
}

TEST_P(MetaConformanceTest, RenameDirectoryAcrossParents) {
  Ino p1 = Dir(kRootIno, "p1");
  Ino p2 = Dir(kRootIno, "p2");
  Ino d = Dir(p1, "d");
  Ino sub = Dir(d, "sub");
  EXPECT_EQ(Get(p1).nlink, 3u);
  EXPECT_EQ(Get(p2).nlink, 2u);
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Rename(Context::Root(), p1, "d", p2, "e", 0, &ino, &attr));
  EXPECT_EQ(ino, d);
  EXPECT_EQ(attr.parent, p2);
  EXPECT_EQ(Get(p1).nlink, 2u);
  EXPECT_EQ(Get(p2).nlink, 3u);
  EXPECT_EQ(Get(d).parent, p2);
  EXPECT_EQ(Get(d).nlink, 3u);
  EXPECT_EQ(Find(d, ".."), p2);
  EXPECT_EQ(Find(sub, ".."), d);
  EXPECT_EQ(Find(p1, "d"), 0u);
  // Over an empty directory in the other parent.
  Dir(p1, "empty");
  ASSERT_OK(m_->Rename(Context::Root(), p2, "e", p1, "empty", 0, &ino, &attr));
  EXPECT_EQ(Get(p1).nlink, 3u);
  EXPECT_EQ(Get(p2).nlink, 2u);
  EXPECT_EQ(Find(p1, "empty"), d);
  // A non-root caller moving a directory to another parent needs write
  // permission on it (its ".." changes).
  Chmod(p1, 0777);
  Chmod(p2, 0777);
  Ino mine = Dir(p1, "mine", 0755, User(1000, 1000));
  Dir(p1, "theirs", 0755, User(2000, 2000));
  EXPECT_ERRNO(EACCES, m_->Rename(User(1000, 1000), p1, "theirs", p2, "theirs", 0, &ino, &attr));
  ASSERT_OK(m_->Rename(User(1000, 1000), p1, "theirs", p1, "renamed", 0, &ino, &attr));
  ASSERT_OK(m_->Rename(User(1000, 1000), p1, "mine", p2, "mine", 0, &ino, &attr));
  EXPECT_EQ(Get(mine).parent, p2);
  ExpectClean();
}

TEST_P(MetaConformanceTest, RenameFileKeepsData) {
  Ino p1 = Dir(kRootIno, "p1");
  Ino f = File(kRootIno, "f");
  Slice s = WriteSlice(f, 0, 0, 4096);
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "f", p1, "g", 0, &ino, &attr));
  EXPECT_EQ(ino, f);
  EXPECT_EQ(attr.length, 4096u);
  EXPECT_EQ(Get(f).parent, p1);
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{s});
  EXPECT_EQ(Get(kRootIno).nlink, 3u);
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  ExpectClean();
}

// ---------------------------------------------------------------- readdir

TEST_P(MetaConformanceTest, Readdir) {
  Ino d = Dir(kRootIno, "d");
  std::vector<Entry> entries;
  ASSERT_OK(m_->Readdir(Context::Root(), d, false, &entries));
  EXPECT_TRUE(entries.empty());

  Ino a = File(d, "a", 0600);
  Ino b = Dir(d, "b");
  Ino c = Symlink(d, "c", "target");
  WriteSlice(a, 0, 0, 1234);
  std::map<std::string, Ino> want{{"a", a}, {"b", b}, {"c", c}};
  std::map<std::string, uint32_t> types{{"a", S_IFREG}, {"b", S_IFDIR}, {"c", S_IFLNK}};

  ASSERT_OK(m_->Readdir(Context::Root(), d, false, &entries));
  ASSERT_EQ(entries.size(), 3u);
  for (const auto& e : entries) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(e.ino, want[e.name]);
    EXPECT_EQ(e.attr.mode & S_IFMT, types[e.name]);
  }

  ASSERT_OK(m_->Readdir(Context::Root(), d, true, &entries));
  ASSERT_EQ(entries.size(), 3u);
  for (const auto& e : entries) {
    SCOPED_TRACE(e.name);
    Attr g = Get(e.ino);
    EXPECT_EQ(e.ino, want[e.name]);
    EXPECT_EQ(e.attr.mode, g.mode);
    EXPECT_EQ(e.attr.nlink, g.nlink);
    EXPECT_EQ(e.attr.length, g.length);
    EXPECT_EQ(e.attr.parent, d);
    EXPECT_EQ(e.attr.mtime, g.mtime);
  }
  EXPECT_EQ(Names(d), (std::vector<std::string>{"a", "b", "c"}));

  // Listing needs r on the directory.
  Chmod(d, 0711);
  EXPECT_ERRNO(EACCES, m_->Readdir(User(1000, 1000), d, false, &entries));
  ASSERT_OK(m_->Readdir(Context::Root(), d, false, &entries));
  EXPECT_ERRNO(ENOENT, m_->Readdir(Context::Root(), 999999, false, &entries));
}

// ---------------------------------------------------------------- permissions

TEST_P(MetaConformanceTest, CheckPermissionClasses) {
  Attr file;
  file.mode = S_IFREG | 0640;
  file.uid = 10;
  file.gid = 20;
  EXPECT_OK(CheckPermission(User(10, 99), file, R_OK | W_OK));
  EXPECT_ERRNO(EACCES, CheckPermission(User(10, 99), file, X_OK));
  EXPECT_OK(CheckPermission(User(11, 20), file, R_OK));
  EXPECT_ERRNO(EACCES, CheckPermission(User(11, 20), file, W_OK));
  EXPECT_OK(CheckPermission(User(11, 99, {5, 20}), file, R_OK));
  EXPECT_ERRNO(EACCES, CheckPermission(User(12, 99), file, R_OK));
  EXPECT_OK(CheckPermission(User(12, 99), file, F_OK));
  // The owner class decides for the owner even when others may do more.
  file.mode = S_IFREG | 0077;
  EXPECT_ERRNO(EACCES, CheckPermission(User(10, 20), file, R_OK));
  EXPECT_OK(CheckPermission(User(11, 20), file, R_OK | W_OK | X_OK));

  // Root reads and writes anything, but executes a file only if some x bit is set.
  file.mode = S_IFREG | 0000;
  EXPECT_OK(CheckPermission(Context::Root(), file, R_OK | W_OK));
  EXPECT_ERRNO(EACCES, CheckPermission(Context::Root(), file, X_OK));
  file.mode = S_IFREG | 0644;
  EXPECT_ERRNO(EACCES, CheckPermission(Context::Root(), file, X_OK));
  file.mode = S_IFREG | 0001;
  EXPECT_OK(CheckPermission(Context::Root(), file, X_OK));
  Attr dir;
  dir.mode = S_IFDIR | 0000;
  EXPECT_OK(CheckPermission(Context::Root(), dir, R_OK | W_OK | X_OK));

  // Through Access on a stored inode.
  Ino f = File(kRootIno, "f", 0640);
  Chown(f, 10, 20);
  EXPECT_OK(m_->Access(User(10, 99), f, R_OK | W_OK));
  EXPECT_ERRNO(EACCES, m_->Access(User(11, 20), f, W_OK));
  EXPECT_ERRNO(EACCES, m_->Access(User(12, 99), f, R_OK));
  EXPECT_ERRNO(EACCES, m_->Access(Context::Root(), f, X_OK));
  EXPECT_OK(m_->Access(User(12, 99), f, F_OK));
  EXPECT_ERRNO(ENOENT, m_->Access(Context::Root(), 999999, F_OK));
}

TEST_P(MetaConformanceTest, SetAttrChmodRules) {
  const Context user = User(1000, 1000);
  Ino theirs = File(kRootIno, "theirs", 0666);
  Chown(theirs, 2000, 2000);
  Attr in;
  in.mode = 0777;
  EXPECT_ERRNO(EPERM, SetAttrAs(user, theirs, kSetMode, in));
  Ino mine = File(kRootIno, "mine", 0644, user);
  in.mode = 0600;
  Attr out;
  ASSERT_OK(m_->SetAttr(user, mine, kSetMode, in, &out));
  EXPECT_EQ(out.mode, uint32_t(S_IFREG | 0600));
  EXPECT_EQ(Get(mine).mode, uint32_t(S_IFREG | 0600));
  // Only the permission bits change, never the type.
  Ino d = Dir(kRootIno, "d");
  in.mode = S_IFREG | 0700;
  ASSERT_OK(m_->SetAttr(Context::Root(), d, kSetMode, in, &out));
  EXPECT_EQ(out.mode, uint32_t(S_IFDIR | 0700));
  // SGID on a file is dropped when the owner is not in the file's group.
  Chown(mine, 1000, 3000);
  in.mode = 02755;
  ASSERT_OK(m_->SetAttr(user, mine, kSetMode, in, &out));
  EXPECT_EQ(out.mode & 07777, 0755u);
  ASSERT_OK(m_->SetAttr(User(1000, 1000, {3000}), mine, kSetMode, in, &out));
  EXPECT_EQ(out.mode & 07777, 02755u);
}

TEST_P(MetaConformanceTest, SetAttrChownRules) {
  const Context user = User(1000, 1000, {3000});
  Ino mine = File(kRootIno, "mine", 0644, user);
  Attr in;
  in.uid = 2000;
  EXPECT_ERRNO(EPERM, SetAttrAs(user, mine, kSetUid, in));
  in.uid = 1000;
  EXPECT_OK(SetAttrAs(user, mine, kSetUid, in));
  in.gid = 4000;
  EXPECT_ERRNO(EPERM, SetAttrAs(user, mine, kSetGid, in));
  in.gid = 3000;
  Attr out;
  ASSERT_OK(m_->SetAttr(user, mine, kSetGid, in, &out));
  EXPECT_EQ(out.gid, 3000u);
  EXPECT_EQ(Get(mine).gid, 3000u);
  in.gid = 1000;  // the primary group counts as well
  ASSERT_OK(m_->SetAttr(user, mine, kSetGid, in, &out));
  EXPECT_EQ(out.gid, 1000u);
  // A non-owner may not change the group even to one it is in.
  in.gid = 3000;
  EXPECT_ERRNO(EPERM, SetAttrAs(User(2000, 3000), mine, kSetGid, in));
  // Root may give it away; the owner's set-uid bit goes with a chown.
  in.mode = 04755;
  ASSERT_OK(m_->SetAttr(user, mine, kSetMode, in, &out));
  EXPECT_EQ(out.mode & 07777, 04755u);
  in.uid = 5000;
  in.gid = 6000;
  ASSERT_OK(m_->SetAttr(Context::Root(), mine, kSetUid | kSetGid, in, &out));
  EXPECT_EQ(out.uid, 5000u);
  EXPECT_EQ(out.gid, 6000u);
  EXPECT_EQ(out.mode & 07777, 0755u);
}

TEST_P(MetaConformanceTest, SetAttrTimesRules) {
  const Context user = User(1000, 1000);
  Ino f = File(kRootIno, "f", 0666);
  Chown(f, 2000, 2000);
  Attr in;
  in.atime = Timespec{12345, 6};
  in.mtime = Timespec{23456, 7};
  EXPECT_ERRNO(EPERM, SetAttrAs(user, f, kSetAtime | kSetMtime, in));
  EXPECT_ERRNO(EPERM, SetAttrAs(user, f, kSetMtime, in));

  // "Now" needs only write permission (utimensat with UTIME_NOW / NULL).
  AgeTimes(f);
  Timespec before = Now();
  Attr out;
  ASSERT_OK(m_->SetAttr(user, f, kSetAtime | kSetAtimeNow | kSetMtime | kSetMtimeNow, in, &out));
  EXPECT_GE(Nanos(out.atime), Nanos(before));
  EXPECT_GE(Nanos(out.mtime), Nanos(before));
  EXPECT_GE(Nanos(out.ctime), Nanos(before));
  AgeTimes(f);
  ASSERT_OK(m_->SetAttr(user, f, kSetMtimeNow, in, &out));
  EXPECT_GE(Nanos(out.mtime), Nanos(before));
  EXPECT_EQ(out.atime, kOldTime);

  Chmod(f, 0644);
  EXPECT_ERRNO(EACCES, SetAttrAs(user, f, kSetAtime | kSetAtimeNow | kSetMtime | kSetMtimeNow, in));

  // The owner sets explicit times.
  ASSERT_OK(m_->SetAttr(User(2000, 2000), f, kSetAtime | kSetMtime, in, &out));
  EXPECT_EQ(out.atime, in.atime);
  EXPECT_EQ(out.mtime, in.mtime);
  EXPECT_EQ(Get(f).mtime, in.mtime);
  EXPECT_GE(Nanos(out.ctime), Nanos(before)) << "any attribute change sets ctime";
  in.ctime = Timespec{34567, 8};
  ASSERT_OK(m_->SetAttr(Context::Root(), f, kSetCtime, in, &out));
  EXPECT_EQ(Get(f).ctime, in.ctime);
  EXPECT_ERRNO(ENOENT, m_->SetAttr(Context::Root(), 999999, kSetMtimeNow, in, &out));
}

TEST_P(MetaConformanceTest, StickyDirectoryRestrictsRemoval) {
  Ino tmp = Dir(kRootIno, "tmp", 01777);
  const Context owner = User(2000, 2000);
  const Context other = User(1000, 1000);
  Ino theirs = File(tmp, "theirs", 0666, owner);
  Dir(tmp, "theirdir", 0777, owner);
  File(tmp, "mine", 0644, other);
  Ino ino = 0;
  Attr attr;
  EXPECT_ERRNO(EPERM, m_->Unlink(other, tmp, "theirs"));
  EXPECT_ERRNO(EPERM, m_->Rmdir(other, tmp, "theirdir"));
  EXPECT_ERRNO(EPERM, m_->Rename(other, tmp, "theirs", tmp, "stolen", 0, &ino, &attr));
  EXPECT_ERRNO(EPERM, m_->Rename(other, tmp, "mine", tmp, "theirs", 0, &ino, &attr));
  EXPECT_ERRNO(EPERM, m_->Rename(other, tmp, "mine", tmp, "theirs", kRenameExchange, &ino, &attr));
  EXPECT_EQ(Find(tmp, "theirs"), theirs);
  // The entry's owner, the directory's owner and root may.
  ASSERT_OK(m_->Rename(other, tmp, "mine", tmp, "mine2", 0, &ino, &attr));
  ASSERT_OK(m_->Rename(owner, tmp, "theirs", tmp, "theirs2", 0, &ino, &attr));
  ASSERT_OK(m_->Unlink(owner, tmp, "theirs2"));
  Chown(tmp, 1000, 1000);
  ASSERT_OK(m_->Rmdir(other, tmp, "theirdir"));
  File(tmp, "x", 0644, owner);
  ASSERT_OK(m_->Unlink(Context::Root(), tmp, "x"));
  ExpectClean();
}

TEST_P(MetaConformanceTest, SetgidDirectoryInheritance) {
  Ino sg = Dir(kRootIno, "sg", 02777);
  Chown(sg, 0, 5000);
  EXPECT_EQ(Get(sg).mode & 07777, 02777u);
  const Context member = User(1000, 1000, {5000});
  const Context outsider = User(1001, 1001);
  Ino ino = 0;
  Attr a;
  ASSERT_OK(m_->Mknod(outsider, sg, "file", S_IFREG | 0644, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.gid, 5000u);
  EXPECT_EQ(a.uid, 1001u);
  EXPECT_EQ(a.mode & 07777, 0644u);
  ASSERT_OK(m_->Mknod(outsider, sg, "sub", S_IFDIR | 0755, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.gid, 5000u);
  EXPECT_EQ(a.mode & 07777, 02755u);
  EXPECT_EQ(Get(ino).mode & 07777, 02755u);
  // ...and it propagates further down.
  Ino deeper = 0;
  ASSERT_OK(m_->Mknod(outsider, ino, "deeper", S_IFDIR | 0755, 0, 0, "", &deeper, &a));
  EXPECT_EQ(a.gid, 5000u);
  EXPECT_EQ(a.mode & 07777, 02755u);
  // A group-executable SGID file keeps the bit only for a member of the group.
  ASSERT_OK(m_->Mknod(outsider, sg, "prog1", S_IFREG | 02755, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.mode & 07777, 0755u);
  ASSERT_OK(m_->Mknod(member, sg, "prog2", S_IFREG | 02755, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.mode & 07777, 02755u);
  // Without SGID on the parent, the creator's group is used.
  Ino plain = Dir(kRootIno, "plain", 0777);
  Chown(plain, 0, 5000);
  ASSERT_OK(m_->Mknod(outsider, plain, "sub", S_IFDIR | 0755, 0, 0, "", &ino, &a));
  EXPECT_EQ(a.gid, 1001u);
  EXPECT_EQ(a.mode & 07777, 0755u);
}

TEST_P(MetaConformanceTest, OpenChecksPermissionPerFlags) {
  Ino f = File(kRootIno, "f", 0640);
  Chown(f, 2000, 2000);
  const Context owner = User(2000, 2000);
  const Context member = User(1000, 1000, {2000});
  const Context other = User(1000, 1000);
  Attr a;
  auto open_close = [&](const Context& ctx, Ino ino, int flags) {
    Status st = m_->Open(ctx, ino, flags, &a);
    if (st.ok()) EXPECT_OK(m_->Close(ctx, ino));
    return st;
  };
  EXPECT_ERRNO(EACCES, open_close(other, f, O_RDONLY));
  EXPECT_OK(open_close(member, f, O_RDONLY));
  EXPECT_ERRNO(EACCES, open_close(member, f, O_WRONLY));
  EXPECT_ERRNO(EACCES, open_close(member, f, O_RDWR));
  EXPECT_ERRNO(EACCES, open_close(member, f, O_RDONLY | O_TRUNC));
  EXPECT_OK(open_close(owner, f, O_RDWR));
  EXPECT_OK(open_close(owner, f, O_WRONLY | O_TRUNC));
  EXPECT_OK(open_close(owner, f, O_RDONLY | O_TRUNC));
  Chmod(f, 0200);
  EXPECT_ERRNO(EACCES, open_close(owner, f, O_RDONLY));
  EXPECT_OK(open_close(owner, f, O_WRONLY));
  EXPECT_ERRNO(EACCES, open_close(owner, f, O_RDWR));
  Chmod(f, 0000);
  EXPECT_OK(open_close(Context::Root(), f, O_RDWR | O_TRUNC));

  Ino d = Dir(kRootIno, "d", 0755);
  EXPECT_OK(open_close(other, d, O_RDONLY));
  EXPECT_ERRNO(EISDIR, open_close(Context::Root(), d, O_WRONLY));
  EXPECT_ERRNO(EISDIR, open_close(Context::Root(), d, O_RDWR));
  EXPECT_ERRNO(EISDIR, open_close(other, d, O_RDWR));
  EXPECT_ERRNO(ENOENT, open_close(Context::Root(), 999999, O_RDONLY));
}

// ---------------------------------------------------------------- open files

TEST_P(MetaConformanceTest, UnlinkedWhileOpenLivesUntilClose) {
  Ino f = File(kRootIno, "f");
  Attr a;
  ASSERT_OK(m_->Open(Context::Root(), f, O_RDWR, &a));
  Slice s1 = WriteSlice(f, 0, 0, 5000);
  Slice s2 = WriteSlice(f, 1, 0, 100);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  EXPECT_EQ(Find(kRootIno, "f"), 0u);
  EXPECT_TRUE(Names(kRootIno).empty());
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(a.nlink, 0u);
  EXPECT_EQ(a.length, kChunkSize + 100);
  // Still readable and writable through the open descriptor.
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{s1});
  Slice s3 = WriteSlice(f, 0, 5000, 10);
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  EXPECT_ERRNO(ENOENT, m_->Link(Context::Root(), f, kRootIno, "again", &a));
  ExpectClean();

  ASSERT_OK(m_->Close(Context::Root(), f));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(UsedInodes(), 1u);
  std::vector<SliceRef> want{{s1.id, s1.size}, {s2.id, s2.size}, {s3.id, s3.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  StatFs fs;
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.avail_space, fs.total_space);
}

TEST_P(MetaConformanceTest, UnlinkedWhileOpenTwiceNeedsBothCloses) {
  Ino f = File(kRootIno, "f");
  Attr a;
  ASSERT_OK(m_->Open(Context::Root(), f, O_RDONLY, &a));
  ASSERT_OK(m_->Open(Context::Root(), f, O_RDONLY, &a));
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  ASSERT_OK(m_->Close(Context::Root(), f));
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  ASSERT_OK(m_->Close(Context::Root(), f));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
}

TEST_P(MetaConformanceTest, ReplacedByRenameWhileOpenLivesUntilClose) {
  File(kRootIno, "a");
  Ino b = File(kRootIno, "b");
  Slice s = WriteSlice(b, 0, 0, 300);
  Attr a;
  ASSERT_OK(m_->Open(Context::Root(), b, O_RDONLY, &a));
  Ino ino = 0;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "a", kRootIno, "b", 0, &ino, &a));
  ASSERT_OK(m_->GetAttr(Context::Root(), b, &a));
  EXPECT_EQ(a.nlink, 0u);
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  ASSERT_OK(m_->Close(Context::Root(), b));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), b, &a));
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{s.id, s.size}}));
  ExpectClean();
}

TEST_P(MetaConformanceTest, UnlinkedWhileLookedUpLivesUntilForget) {
  Ino f = File(kRootIno, "f");
  Slice s = WriteSlice(f, 0, 0, 1000);
  m_->AddRef(f);  // two kernel lookups
  m_->AddRef(f);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  Attr a;
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(a.nlink, 0u);
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{s});
  ASSERT_OK(m_->Forget(f, 1));
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  ExpectClean();
  ASSERT_OK(m_->Forget(f, 1));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{s.id, s.size}}));
  EXPECT_EQ(UsedInodes(), 1u);

  // Opens and lookups count together: the last of either releases it.
  Ino g = File(kRootIno, "g");
  m_->AddRef(g);
  ASSERT_OK(m_->Open(Context::Root(), g, O_RDONLY, &a));
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "g"));
  ASSERT_OK(m_->Close(Context::Root(), g));
  ASSERT_OK(m_->GetAttr(Context::Root(), g, &a));
  ASSERT_OK(m_->Forget(g, 1));
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), g, &a));

  // A looked-up symlink stays readable too.
  Ino l = Symlink(kRootIno, "l", "somewhere");
  m_->AddRef(l);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "l"));
  std::string target;
  ASSERT_OK(m_->ReadLink(Context::Root(), l, &target));
  EXPECT_EQ(target, "somewhere");
  ASSERT_OK(m_->Forget(l, 5));  // forgetting more than was looked up is harmless
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), l, &a));

  // Forgetting what was never looked up, or a referenced inode that still has
  // names, changes nothing.
  Ino h = File(kRootIno, "h");
  ASSERT_OK(m_->Forget(h, 1));
  m_->AddRef(h);
  ASSERT_OK(m_->Forget(h, 1));
  EXPECT_EQ(Find(kRootIno, "h"), h);
  EXPECT_EQ(UsedInodes(), 2u);
  ExpectClean();
}

TEST_P(MetaConformanceTest, ManyForgetsFromThreadsReleaseEveryInode) {
  // The kernel's FORGETs after an rm -r arrive from several threads at once;
  // each unlinked inode must go exactly once, whatever the engine batches.
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string name = "f" + std::to_string(t) + "_" + std::to_string(i);
        Ino ino = 0;
        Attr a;
        if (!m_->Mknod(Context::Root(), kRootIno, name, S_IFREG | 0644, 0, 0, "", &ino, &a).ok()) ++failures;
        m_->AddRef(ino);
        if (!m_->Unlink(Context::Root(), kRootIno, name).ok()) ++failures;
        if (!m_->Forget(ino, 1).ok()) ++failures;
        if (m_->GetAttr(Context::Root(), ino, &a).code() != ENOENT) ++failures;  // gone once forgotten
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(UsedInodes(), 1u);
  ExpectClean();
}

// ---------------------------------------------------------------- data

TEST_P(MetaConformanceTest, WriteAndReadSlices) {
  Ino f = File(kRootIno, "f");
  AgeTimes(f);
  auto id1 = m_->NewSliceId();
  ASSERT_TRUE(id1.ok());
  Slice s1{0, *id1, 8192, 0, 8192};
  Attr a;
  // mtime and ctime become the time the data was written, as given.
  const Timespec written{5000, 42};
  ASSERT_OK(m_->Write(Context::Root(), f, 0, s1, written, &a));
  EXPECT_EQ(a.length, 8192u);
  EXPECT_EQ(a.mtime, written);
  EXPECT_EQ(a.ctime, written);
  EXPECT_EQ(Get(f).mtime, written);
  EXPECT_EQ(Get(f).ctime, written);
  // An overwrite inside the file keeps its length; order is kept.
  Slice s2 = WriteSlice(f, 0, 4096, 100);
  EXPECT_EQ(Get(f).length, 8192u);
  Slice s3 = WriteSlice(f, 0, 8000, 1000);
  EXPECT_EQ(Get(f).length, 9000u);
  EXPECT_EQ(ReadChunk(f, 0), (std::vector<Slice>{s1, s2, s3}));
  // A slice in a later chunk extends the length past the gap.
  Slice s4 = WriteSlice(f, 2, 10, 20);
  EXPECT_EQ(Get(f).length, 2 * kChunkSize + 30);
  EXPECT_EQ(ReadChunk(f, 1), std::vector<Slice>{});
  EXPECT_EQ(ReadChunk(f, 2), std::vector<Slice>{s4});

  // A slice may not cross its chunk's end.
  Slice bad{uint32_t(kChunkSize - 10), s4.id, 20, 0, 20};
  EXPECT_ERRNO(EINVAL, m_->Write(Context::Root(), f, 0, bad, Now(), &a));
  std::vector<Slice> slices;
  EXPECT_ERRNO(ENOENT, m_->Read(999999, 0, &slices));
  EXPECT_ERRNO(ENOENT, m_->Write(Context::Root(), 999999, 0, s1, Now(), &a));
  Ino d = Dir(kRootIno, "d");
  EXPECT_FALSE(m_->Write(Context::Root(), d, 0, s1, Now(), &a).ok());

  StatFs fs;
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.total_space - fs.avail_space, ((2 * kChunkSize + 30 + 4095) / 4096) * 4096);
}

TEST_P(MetaConformanceTest, OverwrittenSlicesAreReclaimed) {
  Ino f = File(kRootIno, "f");
  Slice old1 = WriteSlice(f, 0, 0, 4096);
  Slice old2 = WriteSlice(f, 0, 4096, 4096);
  Slice partly = WriteSlice(f, 0, 8192, 4096);
  Slice over = WriteSlice(f, 0, 0, 10000);  // hides old1 and old2 wholly, partly in part
  auto view = chunk::BuildView(ReadChunk(f, 0));
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0], over);
  EXPECT_EQ(view[1], (Slice{10000, partly.id, partly.size, 10000 - 8192, 12288 - 10000}));
  std::vector<SliceRef> want{{old1.id, old1.size}, {old2.id, old2.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);
  // What is still visible stays.
  view = chunk::BuildView(ReadChunk(f, 0));
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[1].id, partly.id);
  // Writing the very same slice record again (a retried commit) never
  // reclaims it.
  Attr a;
  ASSERT_OK(m_->Write(Context::Root(), f, 0, over, Now(), &a));
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
  view = chunk::BuildView(ReadChunk(f, 0));
  EXPECT_EQ(view[0], over);
}

// One commit may carry several passes of a writer over the same bytes (a
// file kept open and overwritten in place): the passes it hides itself are
// dropped and reclaimed too, in a new chunk and in one that had slices.
TEST_P(MetaConformanceTest, SlicesHiddenWithinOneCommitAreReclaimed) {
  Ino f = File(kRootIno, "f");
  auto slice = [&](uint32_t pos, uint32_t len) {
    auto id = m_->NewSliceId();
    EXPECT_TRUE(id.ok());
    return Slice{pos, id.ok() ? *id : 0, len, 0, len};
  };
  Slice pass1 = slice(0, 8192), pass2 = slice(0, 8192), tail = slice(4096, 8192);
  Slice other1 = slice(0, 100), other2 = slice(0, 100);
  std::vector<SliceWrite> writes{{0, pass1}, {1, other1}, {0, pass2}, {0, tail}, {1, other2}};
  Attr a;
  ASSERT_OK(m_->WriteSlices(Context::Root(), f, writes, Now(), &a, nullptr));
  EXPECT_EQ(a.length, kChunkSize + 100);
  EXPECT_EQ(ReadChunk(f, 0), (std::vector<Slice>{pass2, tail}));  // pass2 still shows [0, 4096)
  EXPECT_EQ(ReadChunk(f, 1), std::vector<Slice>{other2});
  std::vector<SliceRef> want{{pass1.id, pass1.size}, {other1.id, other1.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);
  // A chunk that had slices: a commit of two passes over all of it.
  Slice again1 = slice(0, 12288), again2 = slice(0, 12288);
  ASSERT_OK(m_->WriteSlices(Context::Root(), f, {{0, again1}, {0, again2}}, Now(), &a, nullptr));
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{again2});
  want = {{pass2.id, pass2.size}, {tail.id, tail.size}, {again1.id, again1.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);
  // The same commit retried (its outcome was unknown): nothing it shows goes.
  ASSERT_OK(m_->WriteSlices(Context::Root(), f, {{0, again1}, {0, again2}}, Now(), &a, nullptr));
  EXPECT_EQ(chunk::BuildView(ReadChunk(f, 0)), std::vector<Slice>{again2});
  for (const SliceRef& r : Cleanup()) EXPECT_NE(r.first, again2.id);
}

// Pruning a chunk's list at each commit (every commit while the list is
// short) drops every slice none of whose records shows a byte and reclaims
// exactly those, and never changes what the chunk reads as: random overlapping writes, some of them packed slices (one id,
// several records), checked after every commit against the view of every
// record ever written.
TEST_P(MetaConformanceTest, PruningDropsExactlyTheSlicesThatShowNothing) {
  Ino f = File(kRootIno, "f");
  std::mt19937 rng(23);
  std::vector<Slice> all;  // every record written, oldest first
  for (int step = 0; step < 200; ++step) {
    auto id = m_->NewSliceId();
    ASSERT_TRUE(id.ok());
    std::vector<SliceWrite> writes;
    const int records = step % 5 == 0 ? 3 : 1;  // a packed slice: its pieces one after another
    uint32_t off = 0;
    for (int r = 0; r < records; ++r) {
      const uint32_t len = 1 + rng() % (24 << 10), pos = rng() % (256 << 10);
      writes.push_back({0, Slice{pos, *id, 0, off, len}});
      off += len;
    }
    for (auto& w : writes) w.slice.size = off;
    Attr a;
    ASSERT_OK(m_->WriteSlices(Context::Root(), f, writes, Now(), &a, nullptr));
    for (const auto& w : writes) all.push_back(w.slice);
    const std::vector<Slice> raw = ReadChunk(f, 0);
    const std::vector<Slice> view = chunk::BuildView(raw);
    ASSERT_EQ(view, chunk::BuildView(all)) << "step " << step;
    // A record that shows nothing may stay only while another record of
    // its slice shows (engines drop such records or keep them till
    // compaction).
    for (const Slice& r : raw) {
      const bool slice_shows =
          std::any_of(view.begin(), view.end(), [&](const Slice& p) { return p.id == r.id; });
      ASSERT_TRUE(slice_shows) << "step " << step << ": slice " << r.id << " at " << r.pos << " shows nothing";
    }
  }
  std::set<uint64_t> visible;
  for (const Slice& p : chunk::BuildView(all)) visible.insert(p.id);
  std::vector<SliceRef> want;
  for (const Slice& s : all)
    if (!visible.count(s.id) && (want.empty() || want.back().first != s.id)) want.emplace_back(s.id, s.size);
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  ASSERT_GT(want.size(), 20u);
  EXPECT_EQ(Cleanup(), want);
}

TEST_P(MetaConformanceTest, LongSliceListsStayBoundedUnderOverwrites) {
  // Random small writes: 300 fragments that stay visible, then one range
  // overwritten 1500 times. Engines may prune hidden slices lazily on long
  // lists, but the list stays bounded and the hidden ones get reclaimed.
  // Sanitizer runs (TESSERA_TEST_QUICK=1): 50 fragments, 1100 overwrites
  // (still past the 1024 of lazy pruning).
  const char* quick = std::getenv("TESSERA_TEST_QUICK");
  const bool short_run = quick != nullptr && std::string(quick) == "1";
  const uint32_t fragments = short_run ? 50 : 300;
  const int overwrites = short_run ? 1100 : 1500;
  Ino f = File(kRootIno, "f");
  for (uint32_t i = 0; i < fragments; ++i) WriteSlice(f, 0, (i + 1) * 8192, 4096);
  Slice last;
  for (int i = 0; i < overwrites; ++i) last = WriteSlice(f, 0, 0, 4096);
  auto raw = ReadChunk(f, 0);
  EXPECT_LE(raw.size(), fragments + 1024u + 1u);
  auto view = chunk::BuildView(raw);
  ASSERT_EQ(view.size(), fragments + 1u);
  EXPECT_EQ(view[0], last);
  EXPECT_GE(Cleanup().size(), size_t(overwrites - 1024 - 1));
  ExpectClean();
}

TEST_P(MetaConformanceTest, TruncateShrinkAndGrow) {
  Ino f = File(kRootIno, "f");
  Slice s0 = WriteSlice(f, 0, 0, 1 << 20);
  Slice s1 = WriteSlice(f, 1, 0, 1 << 20);
  Slice s2a = WriteSlice(f, 2, 0, 4096);
  Slice s2b = WriteSlice(f, 2, 8192, 4096);
  Slice s3 = WriteSlice(f, 3, 0, 10);
  EXPECT_EQ(Get(f).length, 3 * kChunkSize + 10);

  Attr a;
  AgeTimes(f);
  ASSERT_OK(m_->Truncate(Context::Root(), f, kChunkSize + 100, true, &a));
  EXPECT_EQ(a.length, kChunkSize + 100);
  ExpectModifiedSinceAged(f, "truncate");
  // Chunks wholly past the end are gone and their slices queued for deletion.
  EXPECT_EQ(ReadChunk(f, 2), std::vector<Slice>{});
  EXPECT_EQ(ReadChunk(f, 3), std::vector<Slice>{});
  std::vector<SliceRef> want{{s2a.id, s2a.size}, {s2b.id, s2b.size}, {s3.id, s3.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);
  // The partial chunk hides its tail behind a hole.
  auto chunk1 = ReadChunk(f, 1);
  ASSERT_EQ(chunk1.size(), 2u);
  EXPECT_EQ(chunk1[0], s1);
  EXPECT_EQ(chunk1[1].id, 0u);
  EXPECT_EQ(chunk1[1].pos, 100u);
  EXPECT_EQ(uint64_t(chunk1[1].pos) + chunk1[1].len, kChunkSize);
  auto view = chunk::BuildView(chunk1);
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0].id, s1.id);
  EXPECT_EQ(view[0].len, 100u);
  EXPECT_EQ(view[1].id, 0u);
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{s0});

  // Growing only changes the length: what was cut off reads as zeros.
  ASSERT_OK(m_->Truncate(Context::Root(), f, 4 * kChunkSize, true, &a));
  EXPECT_EQ(a.length, 4 * kChunkSize);
  EXPECT_EQ(Get(f).length, 4 * kChunkSize);
  view = chunk::BuildView(ReadChunk(f, 1));
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0].len, 100u);
  EXPECT_EQ(view[1].id, 0u);
  EXPECT_EQ(ReadChunk(f, 2), std::vector<Slice>{});
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});

  // To a chunk boundary: no hole needed, the chunk past it is gone.
  Slice s5 = WriteSlice(f, 1, 500, 10);
  ASSERT_OK(m_->Truncate(Context::Root(), f, kChunkSize, true, &a));
  EXPECT_EQ(ReadChunk(f, 1), std::vector<Slice>{});
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{s0});
  want = {{s1.id, s1.size}, {s5.id, s5.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Cleanup(), want);

  // To zero: everything goes.
  ASSERT_OK(m_->Truncate(Context::Root(), f, 0, true, &a));
  EXPECT_EQ(a.length, 0u);
  EXPECT_EQ(ReadChunk(f, 0), std::vector<Slice>{});
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{s0.id, s0.size}}));
  StatFs fs;
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.avail_space, fs.total_space);
}

TEST_P(MetaConformanceTest, TruncateRules) {
  Ino f = File(kRootIno, "f", 0644);
  Ino d = Dir(kRootIno, "d");
  Ino s = Symlink(kRootIno, "s", "t");
  Attr a;
  EXPECT_ERRNO(EISDIR, m_->Truncate(Context::Root(), d, 0, true, &a));
  EXPECT_ERRNO(EINVAL, m_->Truncate(Context::Root(), s, 0, true, &a));
  EXPECT_ERRNO(EFBIG, m_->Truncate(Context::Root(), f, kMaxFileSize + 1, true, &a));
  EXPECT_ERRNO(EACCES, m_->Truncate(User(1000, 1000), f, 10, true, &a));
  ASSERT_OK(m_->Truncate(User(1000, 1000), f, 10, false, &a));  // ftruncate on an fd open for writing
  EXPECT_EQ(a.length, 10u);
  EXPECT_ERRNO(ENOENT, m_->Truncate(Context::Root(), 999999, 0, true, &a));
}

TEST_P(MetaConformanceTest, FallocateModes) {
  Ino f = File(kRootIno, "f");
  Attr a;
  ASSERT_OK(m_->Fallocate(Context::Root(), f, 0, 0, 10000, &a));
  EXPECT_EQ(a.length, 10000u);
  ASSERT_OK(m_->Fallocate(Context::Root(), f, FALLOC_FL_KEEP_SIZE, 0, 20000, &a));
  EXPECT_EQ(a.length, 10000u);
  EXPECT_EQ(Get(f).length, 10000u);
  ASSERT_OK(m_->Fallocate(Context::Root(), f, 0, 100, 200, &a));
  EXPECT_EQ(a.length, 10000u) << "allocating inside the file keeps its size";
  EXPECT_ERRNO(EOPNOTSUPP, m_->Fallocate(Context::Root(), f, FALLOC_FL_PUNCH_HOLE, 0, 100, &a));
  EXPECT_ERRNO(EINVAL, m_->Fallocate(Context::Root(), f, 0, 0, 0, &a));

  Slice s = WriteSlice(f, 0, 0, 10000);
  ASSERT_OK(m_->Fallocate(Context::Root(), f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 200, &a));
  EXPECT_EQ(a.length, 10000u);
  auto slices = ReadChunk(f, 0);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0], s);
  EXPECT_EQ(slices[1].id, 0u);
  EXPECT_EQ(slices[1].pos, 100u);
  EXPECT_EQ(slices[1].len, 200u);
  auto view = chunk::BuildView(slices);
  ASSERT_EQ(view.size(), 3u);
  EXPECT_EQ(view[0].len, 100u);
  EXPECT_EQ(view[1].id, 0u);
  EXPECT_EQ(view[2].pos, 300u);
  EXPECT_EQ(view[2].off, 300u);
  // A punch reaching past the end only covers up to the end.
  ASSERT_OK(m_->Fallocate(Context::Root(), f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 9000, 5000, &a));
  EXPECT_EQ(a.length, 10000u);
  slices = ReadChunk(f, 0);
  ASSERT_FALSE(slices.empty());
  EXPECT_EQ(slices.back(), (Slice{9000, 0, 1000, 0, 1000}));
  // Zeroing a range without KEEP_SIZE extends the file; the new part needs no
  // hole (nothing was ever written there).
  ASSERT_OK(m_->Fallocate(Context::Root(), f, FALLOC_FL_ZERO_RANGE, 5000, 10000, &a));
  EXPECT_EQ(a.length, 15000u);
  slices = ReadChunk(f, 0);
  ASSERT_FALSE(slices.empty());
  EXPECT_EQ(slices.back(), (Slice{5000, 0, 5000, 0, 5000}));
  view = chunk::BuildView(slices);
  ASSERT_EQ(view.size(), 4u);
  EXPECT_EQ(view[0], (Slice{0, s.id, s.size, 0, 100}));
  EXPECT_EQ(view[1], (Slice{100, 0, 200, 0, 200}));
  EXPECT_EQ(view[2], (Slice{300, s.id, s.size, 300, 4700}));
  EXPECT_EQ(view[3], (Slice{5000, 0, 5000, 0, 5000}));

  // A punch across a chunk boundary leaves a hole in each chunk.
  Ino g = File(kRootIno, "g");
  WriteSlice(g, 0, uint32_t(kChunkSize - 4096), 4096);
  WriteSlice(g, 1, 0, 4096);
  ASSERT_OK(m_->Fallocate(Context::Root(), g, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kChunkSize - 10, 20, &a));
  EXPECT_EQ(a.length, kChunkSize + 4096);
  EXPECT_EQ(ReadChunk(g, 0).back(), (Slice{uint32_t(kChunkSize - 10), 0, 10, 0, 10}));
  EXPECT_EQ(ReadChunk(g, 1).back(), (Slice{0, 0, 10, 0, 10}));

  Ino d = Dir(kRootIno, "d");
  EXPECT_ERRNO(EISDIR, m_->Fallocate(Context::Root(), d, 0, 0, 10, &a));
  EXPECT_ERRNO(ENOENT, m_->Fallocate(Context::Root(), 999999, 0, 0, 10, &a));
  // Nothing punched or zeroed needs deleting now.
  EXPECT_EQ(Cleanup(), std::vector<SliceRef>{});
}

TEST_P(MetaConformanceTest, NewSliceIdsAreUnique) {
  auto other = SecondClient("/mnt/b");
  ASSERT_NE(other, nullptr);
  std::set<uint64_t> seen;
  uint64_t last = 0;
  for (int i = 0; i < 3000; ++i) {
    auto id = m_->NewSliceId();
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_NE(*id, 0u);
    EXPECT_GT(*id, last) << "ids of one client increase";
    last = *id;
    EXPECT_TRUE(seen.insert(*id).second) << "duplicate " << *id;
    if (i % 3 == 0) {
      auto theirs = other->NewSliceId();
      ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
      EXPECT_TRUE(seen.insert(*theirs).second) << "duplicate across clients " << *theirs;
    }
  }
  EXPECT_EQ(seen.size(), 4000u);
}

// ---------------------------------------------------------------- xattrs

TEST_P(MetaConformanceTest, Xattrs) {
  Ino f = File(kRootIno, "f", 0644);
  std::string value;
  EXPECT_ERRNO(ENODATA, m_->GetXattr(Context::Root(), f, "user.a", &value));
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.a", "v1", 0));
  ASSERT_OK(m_->GetXattr(Context::Root(), f, "user.a", &value));
  EXPECT_EQ(value, "v1");
  EXPECT_ERRNO(EEXIST, m_->SetXattr(Context::Root(), f, "user.a", "v2", XATTR_CREATE));
  EXPECT_ERRNO(ENODATA, m_->SetXattr(Context::Root(), f, "user.b", "v2", XATTR_REPLACE));
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.a", "v2", XATTR_REPLACE));
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.c", std::string("bin\0ary", 7), XATTR_CREATE));
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.empty", "", 0));
  ASSERT_OK(m_->GetXattr(Context::Root(), f, "user.a", &value));
  EXPECT_EQ(value, "v2");
  ASSERT_OK(m_->GetXattr(Context::Root(), f, "user.c", &value));
  EXPECT_EQ(value, std::string("bin\0ary", 7));
  ASSERT_OK(m_->GetXattr(Context::Root(), f, "user.empty", &value));
  EXPECT_EQ(value, "");

  std::vector<std::string> names;
  ASSERT_OK(m_->ListXattr(Context::Root(), f, &names));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"user.a", "user.c", "user.empty"}));
  ASSERT_OK(m_->RemoveXattr(Context::Root(), f, "user.a"));
  EXPECT_ERRNO(ENODATA, m_->RemoveXattr(Context::Root(), f, "user.a"));
  EXPECT_ERRNO(ENODATA, m_->GetXattr(Context::Root(), f, "user.a", &value));
  ASSERT_OK(m_->ListXattr(Context::Root(), f, &names));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"user.c", "user.empty"}));

  // user.* needs r to read and w to write for non-root callers.
  const Context other = User(1000, 1000);
  ASSERT_OK(m_->GetXattr(other, f, "user.c", &value));
  EXPECT_ERRNO(EACCES, m_->SetXattr(other, f, "user.c", "x", 0));
  EXPECT_ERRNO(EACCES, m_->RemoveXattr(other, f, "user.c"));
  // trusted.* is root's only.
  EXPECT_ERRNO(EPERM, m_->SetXattr(other, f, "trusted.t", "x", 0));
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "trusted.t", "x", 0));
  EXPECT_ERRNO(EOPNOTSUPP, m_->SetXattr(Context::Root(), f, "nonamespace", "x", 0));
  EXPECT_ERRNO(ERANGE, m_->SetXattr(Context::Root(), f, "user." + std::string(XATTR_NAME_MAX, 'x'), "x", 0));
  EXPECT_ERRNO(ERANGE, m_->GetXattr(Context::Root(), f, "", &value));
  EXPECT_ERRNO(E2BIG, m_->SetXattr(Context::Root(), f, "user.big", std::string(XATTR_SIZE_MAX + 1, 'v'), 0));
  // Changing an attribute changes the inode's ctime.
  AgeTimes(f);
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.c", "new", 0));
  EXPECT_NE(Get(f).ctime, kOldTime);
  EXPECT_EQ(Get(f).mtime, kOldTime);

  // user.* attributes exist only on regular files and directories.
  Ino s = Symlink(kRootIno, "s", "f");
  EXPECT_ERRNO(EPERM, m_->SetXattr(Context::Root(), s, "user.x", "v", 0));
  EXPECT_ERRNO(ENODATA, m_->GetXattr(Context::Root(), s, "user.x", &value));
  Ino d = Dir(kRootIno, "d");
  ASSERT_OK(m_->SetXattr(Context::Root(), d, "user.x", "v", 0));
  ASSERT_OK(m_->ListXattr(Context::Root(), s, &names));
  EXPECT_TRUE(names.empty());
  EXPECT_ERRNO(ENOENT, m_->SetXattr(Context::Root(), 999999, "user.x", "v", 0));
}

// ---------------------------------------------------------------- locks

TEST_P(MetaConformanceTest, FlockBetweenOwners) {
  Ino f = File(kRootIno, "f");
  const Context ctx = Context::Root();
  ASSERT_OK(m_->Flock(ctx, f, 1, kReadLock));
  ASSERT_OK(m_->Flock(ctx, f, 2, kReadLock));
  EXPECT_ERRNO(EAGAIN, m_->Flock(ctx, f, 2, kWriteLock));
  ASSERT_OK(m_->Flock(ctx, f, 1, kUnlock));
  ASSERT_OK(m_->Flock(ctx, f, 2, kWriteLock));  // upgrade once alone
  EXPECT_ERRNO(EAGAIN, m_->Flock(ctx, f, 1, kReadLock));
  EXPECT_ERRNO(EAGAIN, m_->Flock(ctx, f, 1, kWriteLock));
  ASSERT_OK(m_->Flock(ctx, f, 2, kReadLock));  // downgrade
  ASSERT_OK(m_->Flock(ctx, f, 1, kReadLock));
  ASSERT_OK(m_->Flock(ctx, f, 1, kUnlock));
  ASSERT_OK(m_->Flock(ctx, f, 2, kUnlock));
  ASSERT_OK(m_->Flock(ctx, f, 1, kWriteLock));
  ASSERT_OK(m_->Flock(ctx, f, 1, kUnlock));
  ASSERT_OK(m_->Flock(ctx, f, 1, kUnlock));  // unlocking twice is fine
  EXPECT_ERRNO(ENOENT, m_->Flock(ctx, 999999, 1, kReadLock));
}

TEST_P(MetaConformanceTest, PosixLocksBetweenOwners) {
  Ino f = File(kRootIno, "f");
  const Context ctx = Context::Root();
  auto lk = [](LockType type, uint64_t start, uint64_t end, uint32_t pid) { return PosixLock{type, start, end, pid}; };
  auto getlk = [&](uint64_t owner, LockType type, uint64_t start, uint64_t end) {
    PosixLock l = lk(type, start, end, 0);
    EXPECT_OK(m_->GetLk(ctx, f, owner, &l));
    return l;
  };
  // Read locks share.
  ASSERT_OK(m_->SetLk(ctx, f, 1, lk(kReadLock, 0, 99, 11)));
  ASSERT_OK(m_->SetLk(ctx, f, 2, lk(kReadLock, 50, 149, 22)));
  EXPECT_EQ(getlk(2, kReadLock, 0, 99).type, kUnlock);
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 2, lk(kWriteLock, 0, 10, 22)));
  PosixLock c = getlk(2, kWriteLock, 0, 10);
  EXPECT_EQ(c.type, kReadLock);
  EXPECT_EQ(c.start, 0u);
  EXPECT_EQ(c.end, 99u);
  EXPECT_EQ(c.pid, 11u);
  ASSERT_OK(m_->SetLk(ctx, f, 2, lk(kUnlock, 0, UINT64_MAX, 22)));
  ASSERT_OK(m_->SetLk(ctx, f, 1, lk(kUnlock, 0, UINT64_MAX, 11)));

  // A write lock excludes both kinds where it overlaps, not elsewhere.
  ASSERT_OK(m_->SetLk(ctx, f, 1, lk(kWriteLock, 0, 99, 11)));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 2, lk(kReadLock, 50, 60, 22)));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 2, lk(kWriteLock, 99, 99, 22)));
  ASSERT_OK(m_->SetLk(ctx, f, 2, lk(kReadLock, 100, 199, 22)));
  c = getlk(2, kWriteLock, 0, 10);
  EXPECT_EQ(c.type, kWriteLock);
  EXPECT_EQ(c.start, 0u);
  EXPECT_EQ(c.end, 99u);
  EXPECT_EQ(c.pid, 11u);
  EXPECT_EQ(getlk(1, kWriteLock, 0, 99).type, kUnlock) << "an owner never conflicts with itself";
  c = getlk(1, kWriteLock, 150, 150);
  EXPECT_EQ(c.type, kReadLock);
  EXPECT_EQ(c.pid, 22u);

  // Unlocking the middle splits the range in two.
  ASSERT_OK(m_->SetLk(ctx, f, 1, lk(kUnlock, 40, 59, 11)));
  ASSERT_OK(m_->SetLk(ctx, f, 2, lk(kWriteLock, 40, 59, 22)));
  c = getlk(2, kWriteLock, 0, 39);
  EXPECT_EQ(c.type, kWriteLock);
  EXPECT_EQ(c.start, 0u);
  EXPECT_EQ(c.end, 39u);
  c = getlk(2, kWriteLock, 60, 99);
  EXPECT_EQ(c.type, kWriteLock);
  EXPECT_EQ(c.start, 60u);
  EXPECT_EQ(c.end, 99u);
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 2, lk(kReadLock, 39, 40, 22)));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 1, lk(kReadLock, 45, 45, 11)));

  // Changing a lock's type in place (write -> read) lets others read.
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 1, lk(kReadLock, 0, 99, 11)));  // owner 2 still writes 40..59
  ASSERT_OK(m_->SetLk(ctx, f, 2, lk(kUnlock, 0, UINT64_MAX, 22)));
  ASSERT_OK(m_->SetLk(ctx, f, 1, lk(kReadLock, 0, 99, 11)));
  c = getlk(3, kWriteLock, 0, UINT64_MAX);
  EXPECT_EQ(c.type, kReadLock);
  EXPECT_EQ(c.start, 0u);
  ASSERT_OK(m_->SetLk(ctx, f, 3, lk(kReadLock, 0, 10, 33)));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(ctx, f, 3, lk(kWriteLock, 0, 10, 33)));

  EXPECT_ERRNO(EINVAL, m_->SetLk(ctx, f, 1, lk(kWriteLock, 10, 5, 11)));
  for (uint64_t owner : {1, 2, 3}) ASSERT_OK(m_->SetLk(ctx, f, owner, lk(kUnlock, 0, UINT64_MAX, 0)));
  EXPECT_EQ(getlk(9, kWriteLock, 0, UINT64_MAX).type, kUnlock);
  ASSERT_OK(m_->SetLk(ctx, f, 9, lk(kWriteLock, 0, UINT64_MAX, 99)));
}

// ---------------------------------------------------------------- sessions

TEST_P(MetaConformanceTest, SessionsListAndClose) {
  auto sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
  ASSERT_EQ(sessions->size(), 1u);
  const SessionInfo mine = (*sessions)[0];
  EXPECT_NE(mine.sid, 0u);
  EXPECT_EQ(mine.mount_point, "/mnt/a");
  EXPECT_EQ(mine.version, "conformance-test");
  EXPECT_FALSE(mine.host.empty());
  EXPECT_EQ(mine.pid, uint32_t(getpid()));
  EXPECT_LE(std::abs(mine.heartbeat - Now().sec), 5);
  ASSERT_OK(m_->Heartbeat({}));

  auto other = SecondClient("/mnt/b");
  ASSERT_NE(other, nullptr);
  sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 2u);
  EXPECT_NE((*sessions)[0].sid, (*sessions)[1].sid);

  // Closing a session releases what it held: its locks and its open files.
  Ino locked = File(kRootIno, "locked");
  Ino f = Mk(kRootIno, "f", S_IFREG | 0644, Context::Root(), other.get());
  Slice s = WriteSlice(f, 0, 0, 777, other.get());
  Attr a;
  ASSERT_OK(other->Open(Context::Root(), f, O_RDWR, &a));
  ASSERT_OK(other->Unlink(Context::Root(), kRootIno, "f"));
  ASSERT_OK(other->Flock(Context::Root(), locked, 1, kWriteLock));
  ASSERT_OK(other->SetLk(Context::Root(), locked, 1, PosixLock{kWriteLock, 0, 100, 1}));
  EXPECT_ERRNO(EAGAIN, m_->Flock(Context::Root(), locked, 1, kReadLock));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(Context::Root(), locked, 1, PosixLock{kReadLock, 0, 0, 2}));
  PosixLock probe{kReadLock, 0, 0, 0};
  ASSERT_OK(m_->GetLk(Context::Root(), locked, 1, &probe));
  EXPECT_EQ(probe.type, kWriteLock);
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));

  ASSERT_OK(other->CloseSession());
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  EXPECT_OK(m_->Flock(Context::Root(), locked, 1, kWriteLock));
  EXPECT_OK(m_->SetLk(Context::Root(), locked, 1, PosixLock{kWriteLock, 0, 100, 2}));
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{s.id, s.size}}));
  sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].sid, mine.sid);
  ASSERT_OK(other->CloseSession());  // closing twice is harmless

  ASSERT_OK(m_->CloseSession());
  sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok());
  EXPECT_TRUE(sessions->empty());
  ExpectClean();
}

TEST_P(MetaConformanceTest, CleanStaleSessionsReclaimsADeadClient) {
  Ino locked = File(kRootIno, "locked");
  Ino f = 0;
  Slice s;
  {
    auto other = SecondClient("/mnt/dead");
    ASSERT_NE(other, nullptr);
    f = Mk(kRootIno, "f", S_IFREG | 0644, Context::Root(), other.get());
    s = WriteSlice(f, 0, 0, 4096, other.get());
    Attr a;
    ASSERT_OK(other->Open(Context::Root(), f, O_RDWR, &a));
    ASSERT_OK(other->Unlink(Context::Root(), kRootIno, "f"));
    ASSERT_OK(other->Flock(Context::Root(), locked, 7, kWriteLock));
    ASSERT_OK(other->SetLk(Context::Root(), locked, 7, PosixLock{kWriteLock, 0, UINT64_MAX, 7}));
    // A live client is not stale.
    auto n = m_->CleanStaleSessions(3600);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 0);
    // The client dies: no CloseSession, its state stays in the volume.
  }
  Attr a;
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  EXPECT_EQ(a.nlink, 0u);
  EXPECT_ERRNO(EAGAIN, m_->Flock(Context::Root(), locked, 1, kReadLock));
  EXPECT_ERRNO(EAGAIN, m_->SetLk(Context::Root(), locked, 1, PosixLock{kReadLock, 0, 0, 1}));
  auto sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok());
  EXPECT_EQ(sessions->size(), 2u);

  // Its process (this one) is alive, so only the heartbeat's age marks it
  // dead: wait until it is at least a second old.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_OK(m_->Heartbeat({}));
  auto n = m_->CleanStaleSessions(0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1);
  EXPECT_ERRNO(ENOENT, m_->GetAttr(Context::Root(), f, &a));
  EXPECT_OK(m_->Flock(Context::Root(), locked, 1, kWriteLock));
  EXPECT_OK(m_->SetLk(Context::Root(), locked, 1, PosixLock{kWriteLock, 0, 10, 1}));
  EXPECT_EQ(Cleanup(), (std::vector<SliceRef>{{s.id, s.size}}));
  sessions = m_->ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].mount_point, "/mnt/a");
  // The cleaner never cleans itself.
  n = m_->CleanStaleSessions(0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
  EXPECT_EQ(UsedInodes(), 2u);
  ExpectClean();
}

// ---------------------------------------------------------------- statfs

TEST_P(MetaConformanceTest, StatFsCountsInodesAndSpace) {
  StatFs fs;
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.used_inodes, 1u);
  EXPECT_GT(fs.avail_inodes, 0u);
  EXPECT_GT(fs.total_space, 0u);
  EXPECT_EQ(fs.avail_space, fs.total_space);

  Ino d = Dir(kRootIno, "d");
  Ino f = File(d, "f");
  Symlink(d, "s", "f");
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.used_inodes, 4u);
  WriteSlice(f, 0, 0, 5000);
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.total_space - fs.avail_space, 8192u) << "space is counted in 4 KiB units";
  Attr a;
  ASSERT_OK(m_->Truncate(Context::Root(), f, 10000, true, &a));
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.total_space - fs.avail_space, 12288u);
  ASSERT_OK(m_->Unlink(Context::Root(), d, "f"));
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.used_inodes, 3u);
  EXPECT_EQ(fs.avail_space, fs.total_space);
}

TEST_P(MetaConformanceTest, CapacityAndInodeLimits) {
  Format limited = format_;
  limited.capacity = 1 << 20;
  limited.inodes = 4;
  ASSERT_OK(m_->Init(limited, true));
  StatFs fs;
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.total_space, 1u << 20);
  EXPECT_EQ(fs.used_inodes + fs.avail_inodes, 4u);

  Ino f = File(kRootIno, "f");
  WriteSlice(f, 0, 0, 1 << 20);  // exactly the capacity
  auto id = m_->NewSliceId();
  ASSERT_TRUE(id.ok());
  Attr a;
  EXPECT_ERRNO(ENOSPC, m_->Write(Context::Root(), f, 0, Slice{1 << 20, *id, 4096, 0, 4096}, Now(), &a));
  EXPECT_ERRNO(ENOSPC, m_->Truncate(Context::Root(), f, (1 << 20) + 1, true, &a));
  EXPECT_ERRNO(ENOSPC, m_->Fallocate(Context::Root(), f, 0, 0, 2 << 20, &a));
  EXPECT_EQ(Get(f).length, 1u << 20);
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.avail_space, 0u);

  File(kRootIno, "g");
  Dir(kRootIno, "h");
  Ino ino = 0;
  EXPECT_ERRNO(ENOSPC, m_->Mknod(Context::Root(), kRootIno, "i", S_IFREG | 0644, 0, 0, "", &ino, &a));
  ASSERT_OK(m_->StatFS(Context::Root(), &fs));
  EXPECT_EQ(fs.used_inodes, 4u);
  EXPECT_EQ(fs.avail_inodes, 0u);
}

// ---------------------------------------------------------------- fsck

// Every directory reachable from the root (its ".." checked against where it
// was found) and the set of reachable inodes.
void Walk(Meta* m, Ino dir, std::set<Ino>* seen, int* dirs) {
  seen->insert(dir);
  ++*dirs;
  std::vector<Entry> entries;
  ASSERT_OK(m->Readdir(Context::Root(), dir, true, &entries));
  for (const auto& e : entries) {
    seen->insert(e.ino);
    if (e.attr.IsDir()) {
      EXPECT_EQ(e.attr.parent, dir) << e.name;
      Walk(m, e.ino, seen, dirs);
    }
  }
}

TEST_P(MetaConformanceTest, CheckIsCleanAfterRandomWorkload) {
  std::mt19937 rng(20240611);
  std::vector<Ino> dirs{kRootIno};
  auto pick_dir = [&] { return dirs[rng() % dirs.size()]; };
  auto pick_name = [&] { return "n" + std::to_string(rng() % 12); };
  const std::set<int> expected_errors{ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, EINVAL, EPERM};
  std::map<std::string, int> ok_ops;
  for (int i = 0; i < 2000; ++i) {
    Ino ino = 0;
    Attr a;
    Status st;
    std::string op;
    switch (rng() % 8) {
      case 0:
      case 1:
        op = "create";
        st = m_->Mknod(Context::Root(), pick_dir(), pick_name(), S_IFREG | 0644, 0, 0, "", &ino, &a);
        break;
      case 2:
        op = "mkdir";
        st = m_->Mknod(Context::Root(), pick_dir(), pick_name(), S_IFDIR | 0755, 0, 0, "", &ino, &a);
        if (st.ok()) dirs.push_back(ino);
        break;
      case 3: {
        op = "link";
        Ino target = 0;
        st = m_->Lookup(Context::Root(), pick_dir(), pick_name(), &target, &a);
        if (st.ok()) st = m_->Link(Context::Root(), target, pick_dir(), pick_name(), &a);
        break;
      }
      case 4:
        op = "unlink";
        st = m_->Unlink(Context::Root(), pick_dir(), pick_name());
        break;
      case 5:
        op = "rmdir";
        st = m_->Rmdir(Context::Root(), pick_dir(), pick_name());
        break;
      default: {
        op = "rename";
        uint32_t r = rng() % 6;
        uint32_t flags = r == 0 ? kRenameNoReplace : r == 1 ? kRenameExchange : 0;
        if (flags) op += std::to_string(flags);
        st = m_->Rename(Context::Root(), pick_dir(), pick_name(), pick_dir(), pick_name(), flags, &ino, &a);
        break;
      }
    }
    if (st.ok()) {
      ok_ops[op]++;
    } else {
      ASSERT_TRUE(expected_errors.count(st.code())) << "op " << i << " " << op << ": " << st.ToString();
    }
  }
  for (const char* op : {"create", "mkdir", "link", "unlink", "rmdir", "rename", "rename1", "rename2"})
    EXPECT_GT(ok_ops[op], 5) << op << " should have succeeded a few times";
  ExpectClean();
  // Nothing is open, so every inode in use is reachable from the root.
  std::set<Ino> seen;
  int ndirs = 0;
  Walk(m_.get(), kRootIno, &seen, &ndirs);
  EXPECT_EQ(seen.size(), UsedInodes());
  EXPECT_GT(ndirs, 3);
}

// ---------------------------------------------------------------- concurrency

TEST_P(MetaConformanceTest, ConcurrentCreatesRenamesUnlinksInOneDirectory) {
  constexpr int kThreads = 8;
  constexpr int kFiles = 40;
  Ino shared = Dir(kRootIno, "shared", 0777);
  auto other = SecondClient("/mnt/b");
  ASSERT_NE(other, nullptr);
  std::atomic<int> common_created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Meta* m = t % 2 == 0 ? m_.get() : other.get();  // two clients, four threads each
      const Context ctx = Context::Root();
      const std::string tag = std::to_string(t);
      Ino ino = 0;
      Attr a;
      for (int j = 0; j < kFiles; ++j) {
        std::string name = "t" + tag + "_" + std::to_string(j);
        EXPECT_OK(m->Mknod(ctx, shared, name, S_IFREG | 0644, 0, 0, "", &ino, &a));
        if (j % 3 == 0) {
          std::string renamed = "r" + tag + "_" + std::to_string(j);
          EXPECT_OK(m->Rename(ctx, shared, name, shared, renamed, 0, &ino, &a));
          name = renamed;
        }
        if (j % 5 == 0) EXPECT_OK(m->Unlink(ctx, shared, name));
      }
      // Everybody races for one name: exactly one create wins.
      Status st = m->Mknod(ctx, shared, "common", S_IFREG | 0644, 0, 0, "", &ino, &a);
      if (st.ok()) common_created++;
      else EXPECT_EQ(st.code(), EEXIST) << st.ToString();
      // Everybody replaces one name: the last rename wins, the rest are freed.
      EXPECT_OK(m->Mknod(ctx, shared, "x" + tag, S_IFREG | 0644, 0, 0, "", &ino, &a));
      EXPECT_OK(m->Rename(ctx, shared, "x" + tag, shared, "target", 0, &ino, &a));
      // Directories moving in and out change the shared parent's nlink.
      Ino d = 0;
      EXPECT_OK(m->Mknod(ctx, shared, "d" + tag, S_IFDIR | 0755, 0, 0, "", &d, &a));
      EXPECT_OK(m->Mknod(ctx, d, "sub", S_IFDIR | 0755, 0, 0, "", &ino, &a));
      EXPECT_OK(m->Rename(ctx, d, "sub", shared, "sub" + tag, 0, &ino, &a));
      EXPECT_OK(m->Mknod(ctx, shared, "gone" + tag, S_IFDIR | 0755, 0, 0, "", &ino, &a));
      EXPECT_OK(m->Rename(ctx, shared, "gone" + tag, d, "back", 0, &ino, &a));
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(common_created.load(), 1);
  // Per thread: kFiles files less the unlinked ones, "d", "sub"; plus
  // "common" and "target" once.
  int unlinked_per_thread = (kFiles + 4) / 5;
  size_t want = size_t(kThreads * (kFiles - unlinked_per_thread + 2) + 2);
  std::vector<Entry> entries;
  ASSERT_OK(m_->Readdir(Context::Root(), shared, false, &entries));
  EXPECT_EQ(entries.size(), want);
  std::vector<Entry> others;
  ASSERT_OK(other->Readdir(Context::Root(), shared, true, &others));
  EXPECT_EQ(others.size(), want);
  EXPECT_EQ(Get(shared).nlink, uint32_t(2 + 2 * kThreads));
  ASSERT_OK(other->FlushDirStats());  // Check flushes its own client's statistics only
  ExpectClean();
  ExpectClean(other.get());
  std::set<Ino> seen;
  int ndirs = 0;
  Walk(m_.get(), kRootIno, &seen, &ndirs);
  EXPECT_EQ(seen.size(), UsedInodes());
  EXPECT_EQ(ndirs, 2 + 3 * kThreads);
}

// Two clients move two directories into each other's subtrees at once:
// /p/a -> /q/b/c/a and /q/b -> /p/a/d/b. Each checks that the directory it
// moves is not above its new parent, and the two write disjoint keys, so
// snapshot isolation would let both succeed and cut a cycle off the tree;
// the engines must serialize them: exactly one succeeds, the other is EINVAL.
TEST_P(MetaConformanceTest, CrossRenamesNeverMakeACycle) {
  constexpr int kRounds = 20;
  auto other = SecondClient("/mnt/b");
  ASSERT_NE(other, nullptr);
  for (int round = 0; round < kRounds; ++round) {
    const std::string tag = std::to_string(round);
    Ino p = Dir(kRootIno, "p" + tag);
    Ino q = Dir(kRootIno, "q" + tag);
    Ino a = Dir(p, "a");
    Ino b = Dir(q, "b");
    Ino c = Dir(b, "c");
    Ino d = Dir(a, "d");
    std::barrier start(2);
    Status moved_a, moved_b;
    std::thread t1([&] {
      Ino ino = 0;
      Attr attr;
      start.arrive_and_wait();
      moved_a = m_->Rename(Context::Root(), p, "a", c, "a", 0, &ino, &attr);
    });
    std::thread t2([&] {
      Ino ino = 0;
      Attr attr;
      start.arrive_and_wait();
      moved_b = other->Rename(Context::Root(), q, "b", d, "b", 0, &ino, &attr);
    });
    t1.join();
    t2.join();
    EXPECT_TRUE(moved_a.ok() || moved_a.code() == EINVAL) << moved_a.ToString();
    EXPECT_TRUE(moved_b.ok() || moved_b.code() == EINVAL) << moved_b.ToString();
    EXPECT_NE(moved_a.ok(), moved_b.ok()) << "round " << round;
  }
  ASSERT_OK(other->FlushDirStats());
  ExpectClean();
  std::set<Ino> seen;
  int ndirs = 0;
  Walk(m_.get(), kRootIno, &seen, &ndirs);
  EXPECT_EQ(seen.size(), UsedInodes()) << "directories cut off the tree";
}

// ---------------------------------------------------------------- compaction

TEST_P(MetaConformanceTest, CompactChunkReplacesPrefixAndKeepsNewerSlices) {
  Ino ino = File(kRootIno, "f");
  Slice a = WriteSlice(ino, 0, 0, 4000);
  Slice b = WriteSlice(ino, 0, 1000, 1000);
  std::vector<Slice> before = ReadChunk(ino, 0);
  ASSERT_EQ(before.size(), 2u);
  Slice c = WriteSlice(ino, 0, 3500, 1000);  // appended "concurrently", after the snapshot
  auto id = m_->NewSliceId();
  ASSERT_TRUE(id.ok());
  Slice merged{0, *id, 4000, 0, 4000};
  ASSERT_OK(m_->CompactChunk(ino, 0, before, {merged}));
  std::vector<Slice> after = ReadChunk(ino, 0);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0], merged);
  EXPECT_EQ(after[1], c);
  std::vector<SliceRef> deleted = Cleanup();
  std::vector<SliceRef> want{{a.id, a.size}, {b.id, b.size}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(deleted, want);
  // A stale snapshot no longer matches: EAGAIN, nothing changes.
  EXPECT_ERRNO(EAGAIN, m_->CompactChunk(ino, 0, before, {merged}));
  EXPECT_EQ(ReadChunk(ino, 0), after);
  // A chunk that is gone (truncated away) is EAGAIN too.
  Attr out;
  ASSERT_OK(m_->Truncate(Context::Root(), ino, 0, false, &out));
  EXPECT_ERRNO(EAGAIN, m_->CompactChunk(ino, 0, after, {merged}));
}

}  // namespace
}  // namespace tessera::meta
