// One suite for every ObjectStore backend (STYLE.md principle 1), followed by
// the checks that only make sense for the file backend. The s3 instances run
// against a real server when TESSERA_TEST_S3_ENDPOINT is set (ctest
// unit_object_s3, through tests/tools/with-s3.sh) and skip otherwise.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "object/object_store.h"
#include "s3_test_util.h"

namespace tessera::object {
namespace {

// A fresh temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-object-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct MemoryBackend {
  StoreOptions Options() const { return {.storage = "memory", .bucket = "test"}; }
};

struct FileBackend {
  TempDir dir;
  // A subdirectory, so Create has to make it.
  StoreOptions Options() const { return {.storage = "file", .bucket = dir.path() + "/vol"}; }
};

// A fresh bucket on the server of TESSERA_TEST_S3_ENDPOINT (s3_test_util.h),
// removed afterwards; the tests skip without one.
struct S3Backend {
  // The test server (Swift's s3api) can answer 404 for a key while other
  // clients overwrite it concurrently (its object server cleans the replaced
  // version's directory); AWS S3 is strongly consistent. Tessera never
  // overwrites an object with different bytes (block keys are unique), so
  // only torn content is an error there (docs/s3-test-server.md).
  static constexpr bool kMissingWhileOverwritten = true;
  std::string bucket = testing::RandomBucketName();
  StoreOptions Options() const { return testing::S3TestOptions(bucket); }
  static std::string SkipReason() { return testing::S3SkipReason(); }
  void Cleanup(ObjectStore* store) {
    Status st = testing::DestroyS3Bucket(store);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
};

// Whether Backend may answer ENOENT for a key being overwritten concurrently.
template <typename Backend>
constexpr bool MissingWhileOverwritten() {
  if constexpr (requires { Backend::kMissingWhileOverwritten; }) return Backend::kMissingWhileOverwritten;
  return false;
}

template <typename Backend>
class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (requires { Backend::SkipReason(); }) {
      if (std::string why = Backend::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    }
    auto store = Open(backend_.Options());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    Status created = store_->Create();
    ASSERT_TRUE(created.ok()) << created.ToString();
  }
  void TearDown() override {
    if constexpr (requires(Backend b, ObjectStore* s) { b.Cleanup(s); }) {
      if (store_) backend_.Cleanup(store_.get());
    }
  }

  std::string MustGet(const std::string& key, int64_t off = 0, int64_t len = -1) {
    auto r = store_->Get(key, off, len);
    EXPECT_TRUE(r.ok()) << key << ": " << r.status().ToString();
    return r.ok() ? *r : std::string();
  }

  std::vector<std::string> ListKeys(const std::string& prefix, const std::string& start_after, size_t limit,
                                    bool* more) {
    std::vector<ObjectInfo> infos;
    Status st = store_->List(prefix, start_after, limit, &infos, more);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<std::string> keys;
    for (const auto& info : infos) keys.push_back(info.key);
    return keys;
  }

  Backend backend_;
  std::unique_ptr<ObjectStore> store_;
};

using Backends = ::testing::Types<MemoryBackend, FileBackend, S3Backend>;
class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, MemoryBackend> ? "memory" : std::is_same_v<T, FileBackend> ? "file" : "s3";
  }
};
TYPED_TEST_SUITE(ObjectStoreTest, Backends, BackendNames);

TYPED_TEST(ObjectStoreTest, PutGet) {
  ASSERT_TRUE(this->store_->Put("a/b/c", "hello world").ok());
  EXPECT_EQ(this->MustGet("a/b/c"), "hello world");
  EXPECT_EQ(this->MustGet("a/b/c", 0, -1), "hello world");
}

TYPED_TEST(ObjectStoreTest, RangedGet) {
  ASSERT_TRUE(this->store_->Put("k", "0123456789").ok());
  EXPECT_EQ(this->MustGet("k", 3, 4), "3456");
  EXPECT_EQ(this->MustGet("k", 0, 10), "0123456789");
  EXPECT_EQ(this->MustGet("k", 7, 100), "789");  // truncated at the end
  EXPECT_EQ(this->MustGet("k", 6, -1), "6789");
  EXPECT_EQ(this->MustGet("k", 10, 5), "");
  EXPECT_EQ(this->MustGet("k", 50, -1), "");
  EXPECT_EQ(this->MustGet("k", 4, 0), "");
  EXPECT_EQ(this->store_->Get("k", -1, 2).status().code(), EINVAL);
}

// GetInto reads a range into the caller's buffer (FileStore with no copy in
// between, the others through Get): the same bytes as Get, fewer at the end,
// and nothing written past what it reports.
TYPED_TEST(ObjectStoreTest, RangedGetInto) {
  ASSERT_TRUE(this->store_->Put("k", "0123456789").ok());
  auto into = [&](int64_t off, size_t len) {
    std::string buf(len + 4, '#');
    auto r = this->store_->GetInto("k", off, len, buf.data());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    const size_t got = r.ok() ? *r : 0;
    EXPECT_EQ(buf.substr(got), std::string(len + 4 - got, '#')) << "bytes written past the reported length";
    return buf.substr(0, got);
  };
  EXPECT_EQ(into(3, 4), "3456");
  EXPECT_EQ(into(0, 10), "0123456789");
  EXPECT_EQ(into(7, 100), "789");  // fewer at the end
  EXPECT_EQ(into(10, 5), "");
  EXPECT_EQ(into(4, 0), "");
  char c;
  EXPECT_EQ(this->store_->GetInto("missing", 0, 1, &c).status().code(), ENOENT);
  EXPECT_EQ(this->store_->GetInto("k", -1, 1, &c).status().code(), EINVAL);
}

TYPED_TEST(ObjectStoreTest, Overwrite) {
  ASSERT_TRUE(this->store_->Put("k", "a longer first value").ok());
  ASSERT_TRUE(this->store_->Put("k", "short").ok());
  EXPECT_EQ(this->MustGet("k"), "short");
  auto info = this->store_->Head("k");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 5);
}

TYPED_TEST(ObjectStoreTest, Delete) {
  ASSERT_TRUE(this->store_->Put("x/y", "v").ok());
  ASSERT_TRUE(this->store_->Delete("x/y").ok());
  EXPECT_EQ(this->store_->Get("x/y").status().code(), ENOENT);
  EXPECT_TRUE(this->store_->Delete("x/y").ok());
  EXPECT_TRUE(this->store_->Delete("never/was/there").ok());
  // The key can be reused after deletion.
  ASSERT_TRUE(this->store_->Put("x/y", "w").ok());
  EXPECT_EQ(this->MustGet("x/y"), "w");
}

TYPED_TEST(ObjectStoreTest, Head) {
  ASSERT_TRUE(this->store_->Put("dir/obj", std::string(12345, 'z')).ok());
  auto info = this->store_->Head("dir/obj");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key, "dir/obj");
  EXPECT_EQ(info->size, 12345);
  EXPECT_GT(info->mtime_sec, 0);
}

TYPED_TEST(ObjectStoreTest, MissingIsENOENT) {
  EXPECT_EQ(this->store_->Get("missing").status().code(), ENOENT);
  EXPECT_EQ(this->store_->Get("missing/deeper", 3, 4).status().code(), ENOENT);
  EXPECT_EQ(this->store_->Head("missing").status().code(), ENOENT);
  EXPECT_TRUE(this->store_->Get("missing").status().not_found());
  // A key prefix ("directory") is not an object.
  ASSERT_TRUE(this->store_->Put("p/q/r", "v").ok());
  EXPECT_EQ(this->store_->Get("p/q").status().code(), ENOENT);
  EXPECT_EQ(this->store_->Head("p").status().code(), ENOENT);
  // Below an object.
  EXPECT_EQ(this->store_->Get("p/q/r/s").status().code(), ENOENT);
}

TYPED_TEST(ObjectStoreTest, BinaryAndEmpty) {
  std::string bin;
  for (int i = 0; i < 4096; ++i) bin.push_back(char(i % 7 == 0 ? 0 : i * 31));
  ASSERT_TRUE(this->store_->Put("bin", bin).ok());
  EXPECT_EQ(this->MustGet("bin"), bin);
  EXPECT_EQ(this->MustGet("bin", 7, 100), bin.substr(7, 100));

  ASSERT_TRUE(this->store_->Put("empty", "").ok());
  EXPECT_EQ(this->MustGet("empty"), "");
  EXPECT_EQ(this->MustGet("empty", 0, 10), "");
  auto info = this->store_->Head("empty");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 0);
}

TYPED_TEST(ObjectStoreTest, ListNested) {
  for (const char* key : {"a/1", "a/2", "a/b/1", "a/b/2", "a/c", "ab", "b/1", "a0"}) {
    ASSERT_TRUE(this->store_->Put(key, key).ok());
  }
  bool more = true;
  using V = std::vector<std::string>;
  EXPECT_EQ(this->ListKeys("", "", 100, &more), (V{"a/1", "a/2", "a/b/1", "a/b/2", "a/c", "a0", "ab", "b/1"}));
  EXPECT_FALSE(more);
  EXPECT_EQ(this->ListKeys("a/", "", 100, &more), (V{"a/1", "a/2", "a/b/1", "a/b/2", "a/c"}));
  EXPECT_EQ(this->ListKeys("a", "", 100, &more), (V{"a/1", "a/2", "a/b/1", "a/b/2", "a/c", "a0", "ab"}));
  EXPECT_EQ(this->ListKeys("a/b", "", 100, &more), (V{"a/b/1", "a/b/2"}));
  EXPECT_EQ(this->ListKeys("a/b/", "a/b/1", 100, &more), (V{"a/b/2"}));
  EXPECT_EQ(this->ListKeys("a/", "a/1", 2, &more), (V{"a/2", "a/b/1"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(this->ListKeys("a/", "a/b/1", 2, &more), (V{"a/b/2", "a/c"}));
  EXPECT_FALSE(more);
  EXPECT_EQ(this->ListKeys("", "a/c", 100, &more), (V{"a0", "ab", "b/1"}));
  EXPECT_EQ(this->ListKeys("", "a", 1, &more), (V{"a/1"}));  // start_after need not be a key
  EXPECT_TRUE(more);
  EXPECT_EQ(this->ListKeys("", "", 0, &more), V{});
  EXPECT_TRUE(more);
  EXPECT_EQ(this->ListKeys("zzz", "", 10, &more), V{});
  EXPECT_FALSE(more);
  EXPECT_EQ(this->ListKeys("a/1/", "", 10, &more), V{});  // below an object
  EXPECT_EQ(this->ListKeys("b", "b/1", 10, &more), V{});
  EXPECT_FALSE(more);

  std::vector<ObjectInfo> infos;
  ASSERT_TRUE(this->store_->List("a/b/", "", 10, &infos, nullptr).ok());  // more is optional
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].size, 5);
  EXPECT_GT(infos[0].mtime_sec, 0);
}

TYPED_TEST(ObjectStoreTest, ListManyPaged) {
  std::vector<std::string> want;
  for (int i = 0; i < 250; ++i) {
    // Three levels, like block keys; numbers unpadded so string order differs from numeric.
    std::string key = "chunks/" + std::to_string(i % 3) + "/" + std::to_string(i % 17) + "/" + std::to_string(i);
    ASSERT_TRUE(this->store_->Put(key, std::to_string(i)).ok());
    want.push_back(key);
  }
  ASSERT_TRUE(this->store_->Put("other", "x").ok());
  std::sort(want.begin(), want.end());

  std::vector<std::string> got;
  std::string after;
  bool more = true;
  int pages = 0;
  while (more) {
    auto page = this->ListKeys("chunks/", after, 64, &more);
    ASSERT_FALSE(page.empty());
    ASSERT_LE(page.size(), 64u);
    got.insert(got.end(), page.begin(), page.end());
    after = page.back();
    ++pages;
  }
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(got, want);
}

TYPED_TEST(ObjectStoreTest, ConcurrentPutGet) {
  constexpr int kThreads = 8, kRounds = 50;
  // Each shared value is uniform, so a torn or mixed read is detectable.
  auto value = [](int t, int r) { return std::string(size_t(1000 + 37 * r), char('a' + t)); };
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds && errors[size_t(t)].empty(); ++r) {
        std::string own = "own/" + std::to_string(t) + "/" + std::to_string(r);
        if (!this->store_->Put(own, value(t, r)).ok()) errors[size_t(t)] = "put " + own;
        auto got = this->store_->Get(own);
        if (!got.ok() || *got != value(t, r)) errors[size_t(t)] = "get " + own;
        if (!this->store_->Put("shared/key", value(t, r)).ok()) errors[size_t(t)] = "put shared";
        auto shared = this->store_->Get("shared/key");
        if (!shared.ok()) {
          if (!(MissingWhileOverwritten<TypeParam>() && shared.status().code() == ENOENT))
            errors[size_t(t)] = "get shared/key: " + shared.status().ToString();
        } else if (shared->empty() || *shared != std::string(shared->size(), (*shared)[0]) ||
                   (shared->size() - 1000) % 37 != 0) {
          errors[size_t(t)] = "torn read of shared/key (" + std::to_string(shared->size()) + " bytes)";
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
  bool more = true;
  EXPECT_EQ(this->ListKeys("own/", "", 10000, &more).size(), size_t(kThreads * kRounds));
}

// ---- Open ----

TEST(OpenTest, RejectsBadOptions) {
  auto r = Open({.storage = "s4", .bucket = "x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().message(), "unknown storage type 's4' (expected file, memory or s3)");
  EXPECT_EQ(Open({.storage = "file", .bucket = ""}).status().code(), EINVAL);
  EXPECT_EQ(Open({.storage = "file", .bucket = "/"}).status().code(), EINVAL);
}

TEST(OpenTest, Describe) {
  auto mem = Open({.storage = "memory", .bucket = "vol1"});
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ((*mem)->Describe(), "memory://vol1/");
  auto file = Open({.storage = "file", .bucket = "/var/lib//tessera/./vol/"});
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->Describe(), "file:///var/lib/tessera/vol/");
  auto rel = Open({.storage = "file", .bucket = "rel/dir"});
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ((*rel)->Describe(), "file://" + std::filesystem::current_path().string() + "/rel/dir/");
}

// ---- file backend only ----

TEST(FileStoreCreateTest, RefusesABucketPathThatIsAFile) {
  TempDir dir;
  const std::string path = dir.path() + "/not-a-dir";
  { std::ofstream(path) << "x"; }
  auto store = Open({.storage = "file", .bucket = path});
  ASSERT_TRUE(store.ok());
  Status st = (*store)->Create();
  EXPECT_EQ(st.code(), ENOTDIR) << st.ToString();
  EXPECT_NE(st.message().find("not a directory"), std::string::npos) << st.message();
}

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Open({.storage = "file", .bucket = dir_.path()});
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    ASSERT_TRUE(store_->Create().ok());
  }
  TempDir dir_;
  std::unique_ptr<ObjectStore> store_;
};

TEST_F(FileStoreTest, LayoutAndNoTempFilesLeft) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store_->Put("chunks/0/0/" + std::to_string(i), "data").ok());
  ASSERT_TRUE(store_->Put("chunks/0/0/3", "overwritten").ok());
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path())) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp.")) << e.path();
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 20);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.path() + "/chunks/0/0/7"));
}

TEST_F(FileStoreTest, ListIgnoresTempFiles) {
  ASSERT_TRUE(store_->Put("d/obj", "v").ok());
  // What a crash between create and rename leaves behind.
  std::FILE* f = std::fopen((dir_.path() + "/d/.tmp.obj.0123456789abcdef").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  std::vector<ObjectInfo> infos;
  bool more = true;
  ASSERT_TRUE(store_->List("", "", 10, &infos, &more).ok());
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].key, "d/obj");
}

// A bucket directory on a local file system reads ranges cheaply (no block
// prefetch on partial misses), also through the retry layer Open adds; the
// memory store (a stand-in for remote stores in tests) says no.
TEST_F(FileStoreTest, LocalDirectoryHasCheapRanges) {
  EXPECT_TRUE(store_->cheap_ranges());
  auto memory = Open({.storage = "memory", .bucket = "cheap-ranges"});
  ASSERT_TRUE(memory.ok());
  EXPECT_FALSE((*memory)->cheap_ranges());
}

// Ranged reads keep the object's file open (file_store.h): a kept file is
// never read once the object was deleted or replaced, by this store or by
// another one on the same directory (another process), and a whole-object
// read keeps nothing.
TEST_F(FileStoreTest, KeptFilesNeverServeADeletedOrReplacedObject) {
  auto other = Open({.storage = "file", .bucket = dir_.path()});
  ASSERT_TRUE(other.ok());
  auto fds = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  ASSERT_TRUE(store_->Put("b/1", "0123456789").ok());
  const size_t before = fds();
  EXPECT_EQ(*store_->Get("b/1"), "0123456789");
  EXPECT_EQ(*store_->Get("b/1", 0, 10), "0123456789");
  EXPECT_EQ(fds(), before) << "a whole-object read kept its file";
  EXPECT_EQ(*store_->Get("b/1", 2, 3), "234");
  EXPECT_EQ(fds(), before + 1) << "a ranged read did not keep its file";
  EXPECT_EQ(*store_->Get("b/1", 5, 2), "56");
  EXPECT_EQ(fds(), before + 1) << "the kept file was not reused";

  // Replaced and deleted by the other store: this one must not notice by
  // anything but the file itself.
  ASSERT_TRUE((*other)->Put("b/1", "abcdefghij").ok());
  EXPECT_EQ(*store_->Get("b/1", 2, 3), "cde");
  ASSERT_TRUE((*other)->Delete("b/1").ok());
  EXPECT_EQ(store_->Get("b/1", 2, 3).status().code(), ENOENT);
  EXPECT_EQ(fds(), before) << "the deleted object's file is still open";
  // By this store.
  ASSERT_TRUE(store_->Put("b/2", "0123456789").ok());
  EXPECT_EQ(*store_->Get("b/2", 1, 2), "12");
  ASSERT_TRUE(store_->Put("b/2", "ABCDEFGHIJ").ok());
  EXPECT_EQ(fds(), before) << "a replaced object's kept file was not closed";
  EXPECT_EQ(*store_->Get("b/2", 1, 2), "BC");
  ASSERT_TRUE(store_->Delete("b/2").ok());
  EXPECT_EQ(fds(), before) << "a deleted object's kept file was not closed";
  EXPECT_EQ(store_->Get("b/2", 1, 2).status().code(), ENOENT);
}

TEST_F(FileStoreTest, FsyncOption) {
  auto store = Open({.storage = "file", .bucket = dir_.path() + "/synced", .fsync = true});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Create().ok());
  ASSERT_TRUE((*store)->Put("new/dirs/key", "durable").ok());
  ASSERT_TRUE((*store)->Put("new/dirs/key", "again").ok());
  EXPECT_EQ(*(*store)->Get("new/dirs/key"), "again");
}

TEST_F(FileStoreTest, InvalidKeysAreEINVAL) {
  for (const char* key : {"", "/abs", "a//b", "a/", "../escape", "a/./b", "a/../b", ".tmp.x", "d/.tmp.y"}) {
    EXPECT_EQ(store_->Put(key, "v").code(), EINVAL) << key;
    EXPECT_EQ(store_->Get(key).status().code(), EINVAL) << key;
    EXPECT_EQ(store_->Head(key).status().code(), EINVAL) << key;
    EXPECT_EQ(store_->Delete(key).code(), EINVAL) << key;
  }
}

TEST_F(FileStoreTest, PutBelowAnObjectIsENOTDIR) {
  ASSERT_TRUE(store_->Put("blocker", "a file").ok());
  Status st = store_->Put("blocker/child", "v");
  EXPECT_EQ(st.code(), ENOTDIR) << st.ToString();
  EXPECT_NE(st.message().find("blocker/child"), std::string::npos) << st.message();
  EXPECT_EQ(*store_->Get("blocker"), "a file");
}

TEST_F(FileStoreTest, CreateFailsUnderAFile) {
  ASSERT_TRUE(store_->Put("f", "x").ok());
  auto store = Open({.storage = "file", .bucket = dir_.path() + "/f/vol"});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Create().code(), ENOTDIR);
}

// Root ignores permissions, so the write runs in a child that drops to nobody.
TEST_F(FileStoreTest, PutIntoReadOnlyDirectoryIsEACCES) {
  ASSERT_TRUE(store_->Put("ro/existing", "v").ok());
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_.path() + "/ro").c_str(), 0555), 0);
  auto check = [&]() -> int {
    Status st = store_->Put("ro/new", "v");
    if (st.code() != EACCES) return 1;
    if (st.message().find("ro/new") == std::string::npos) return 2;
    return store_->Get("ro/existing").ok() ? 0 : 3;  // reading still works
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(check(), 0);
    return;
  }
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    ::_exit(check());
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "1: wrong code, 2: message lacks key, 3: read failed, 10: setuid";
}

}  // namespace
}  // namespace tessera::object
