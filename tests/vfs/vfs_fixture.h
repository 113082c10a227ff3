// The fixture of the VFS unit tests (vfs_test.cc, fsx_test.cc, readdir_test.cc):
// the VFS over an in-memory metadata engine and an in-memory object store,
// no FUSE, no mount. The block size is small (4 KiB) so that ordinary writes
// cross block boundaries, and some tests work near the 64 MiB chunk boundary.
#pragma once

#include "vfs/vfs.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "object/object_store.h"
#include "test_util.h"

// Not in an anonymous namespace: GoogleTest requires one fixture class per
// suite across the binary (the functions are inline).
namespace tessera::vfs {

// Sanitizer runs (TESSERA_TEST_QUICK=1) do a quarter of the random
// operations: the same coverage of operation kinds, less wall time.
inline int ScaledOps(int ops) {
  const char* quick = std::getenv("TESSERA_TEST_QUICK");
  return quick && std::string(quick) == "1" ? ops / 4 : ops;
}

using chunk::kChunkSize;
using meta::kRootIno;

constexpr uint32_t kBlock = 4096;

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define ASSERT_OK(expr)                                                       \
  do {                                                                        \
    const auto& _r = (expr);                                                  \
    ASSERT_TRUE(StatusOf(_r).ok()) << #expr << ": " << StatusOf(_r).ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                                       \
  do {                                                                        \
    const auto& _r = (expr);                                                  \
    EXPECT_TRUE(StatusOf(_r).ok()) << #expr << ": " << StatusOf(_r).ToString(); \
  } while (0)

inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(1 + rng() % 255);  // never 0: data is told apart from holes
  return s;
}

class VfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    meta_ = testing::MemoryVolume("test", 0, kBlock);
    ASSERT_NE(meta_, nullptr);
    auto s = object::Open(object::StoreOptions{"memory", "x"});
    ASSERT_OK(s);
    objects_ = std::move(*s);
    chunks_ = std::make_unique<chunk::ChunkStore>(objects_.get(), chunk::StoreConfig{kBlock});
    ASSERT_NO_FATAL_FAILURE(StartVfs(DefaultConfig()));
  }

  void TearDown() override { vfs_.reset(); }

  static Config DefaultConfig() {
    Config c;
    c.cleanup_interval_ms = 10;
    return c;
  }

  // (Re)starts the VFS: a new client session over the same engine and store.
  void StartVfs(const Config& config) {
    vfs_.reset();
    vfs_ = std::make_unique<Vfs>(meta_.get(), chunks_.get(), config);
    ASSERT_OK(vfs_->Start());
  }

  Handle* Create(const std::string& name, Ino* ino, Ino parent = kRootIno) {
    Handle* fh = nullptr;
    Attr attr;
    Status st = vfs_->Create(ctx_, parent, name, 0644, 022, O_RDWR | O_CREAT, &fh, ino, &attr);
    EXPECT_TRUE(st.ok()) << "create " << name << ": " << st.ToString();
    return fh;
  }

  Handle* Open(Ino ino, int flags = O_RDWR) {
    Handle* fh = nullptr;
    Attr attr;
    Status st = vfs_->Open(ctx_, ino, flags, &fh, &attr);
    EXPECT_TRUE(st.ok()) << "open " << ino << ": " << st.ToString();
    return fh;
  }

  void Release(Handle* fh) { EXPECT_OK(vfs_->Release(ctx_, fh)); }

  // A new file with "hello" written and flushed (a close(2) whose RELEASE is
  // still to come): the handle goes to *fh.
  void CreateWrittenAndFlushed(const std::string& name, Ino* ino, Handle** fh) {
    *fh = Create(name, ino);
    ASSERT_NE(*fh, nullptr);
    ASSERT_NO_FATAL_FAILURE(Write(*fh, 0, "hello"));
    ASSERT_OK(vfs_->Flush(ctx_, *fh, 0));
  }

  // Opens ino read-only and closes it again: whether the open kept the
  // kernel's cached pages (keep_cache). -1 if it failed.
  int OpenKeepsCache(Ino ino) {
    Handle* fh = Open(ino, O_RDONLY);
    if (fh == nullptr) return -1;
    const int kept = fh->keep_cache ? 1 : 0;
    Release(fh);
    return kept;
  }

  // A directory "d" in the root holding empty files of these names.
  void MakeDirOfFiles(const std::vector<std::string>& names, Ino* dir) {
    Attr attr;
    ASSERT_OK(vfs_->Mkdir(ctx_, kRootIno, "d", 0755, 022, dir, &attr));
    for (const std::string& name : names) {
      Ino ino = 0;
      Handle* fh = Create(name, &ino, *dir);
      ASSERT_NE(fh, nullptr);
      Release(fh);
    }
  }

  void Write(Handle* fh, uint64_t off, const std::string& data) {
    auto r = vfs_->Write(ctx_, fh, off, data.data(), data.size());
    ASSERT_OK(r);
    ASSERT_EQ(*r, data.size());
  }

  // Reads up to `size` bytes; the result is as long as what was read.
  std::string Read(Handle* fh, uint64_t off, size_t size) {
    std::string buf(size, '\xee');
    auto r = vfs_->Read(ctx_, fh, off, size, buf.data());
    EXPECT_TRUE(r.ok()) << "read [" << off << ", +" << size << "): " << r.status().ToString();
    buf.resize(r.ok() ? *r : 0);
    return buf;
  }

  uint64_t Length(Ino ino) {
    Attr attr;
    Status st = vfs_->GetAttr(ctx_, ino, &attr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return attr.length;
  }

  // The length the metadata engine knows (committed writes only).
  uint64_t CommittedLength(Ino ino) {
    Attr attr;
    Status st = meta_->GetAttr(ctx_, ino, &attr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return attr.length;
  }

  std::vector<std::string> ObjectKeys() {
    std::vector<object::ObjectInfo> infos;
    Status st = objects_->List("chunks/", "", 1000000, &infos, nullptr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<std::string> keys;
    for (const auto& info : infos) keys.push_back(info.key);
    return keys;
  }

  Context ctx_ = Context::Root();
  std::unique_ptr<meta::Meta> meta_;
  std::unique_ptr<object::ObjectStore> objects_;
  std::unique_ptr<chunk::ChunkStore> chunks_;
  std::unique_ptr<Vfs> vfs_;  // declared last: stopped before the layers below go away
};

}  // namespace tessera::vfs
