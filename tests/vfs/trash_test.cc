// The trash's housekeeping (vfs/trash.h): restore puts a removed tree back,
// directories first, never overwriting; purge removes hours past trash-days
// with their data.
#include "vfs/trash.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv.h"
#include "meta/encoding.h"
#include "meta/fault_meta.h"
#include "meta/meta.h"
#include "test_util.h"

namespace tessera::vfs {
namespace {

using meta::Attr;
using meta::Context;
using meta::Entry;
using meta::Ino;

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    ::tessera::Status _st = (expr);                          \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

class TrashJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_ = testing::MemoryVolume("trash", 1);
    ASSERT_NE(m_, nullptr);
  }
  Ino Make(Ino parent, const std::string& name, uint32_t mode) {
    Ino ino = 0;
    Attr a;
    EXPECT_TRUE(m_->Mknod(Context::Root(), parent, name, mode, 0, 0, "", &ino, &a).ok()) << name;
    return ino;
  }
  Status Remove(Ino dir) {  // rm -rf of what is below dir
    std::vector<meta::Entry> entries;
    RETURN_IF_ERROR(m_->Readdir(Context::Root(), dir, false, &entries));
    for (const auto& e : entries) {
      if ((e.attr.mode & S_IFMT) == S_IFDIR) {
        RETURN_IF_ERROR(Remove(e.ino));
        RETURN_IF_ERROR(m_->Rmdir(Context::Root(), dir, e.name));
      } else {
        RETURN_IF_ERROR(m_->Unlink(Context::Root(), dir, e.name));
      }
    }
    return Status::OK();
  }
  std::unique_ptr<meta::Meta> m_;
};

TEST_F(TrashJobsTest, RestorePutsATreeBackWithoutOverwriting) {
  Ino top = Make(meta::kRootIno, "top", S_IFDIR | 0755);
  Ino a = Make(top, "a", S_IFDIR | 0755);
  Ino b = Make(a, "b", S_IFDIR | 0755);
  Ino f1 = Make(b, "f1", S_IFREG | 0644);
  Ino f2 = Make(a, "f2", S_IFREG | 0644);
  ASSERT_OK(Remove(top));
  ASSERT_OK(m_->Rmdir(Context::Root(), meta::kRootIno, "top"));
  const std::string hour = meta::TrashHourName(meta::Now().sec);
  std::vector<std::string> lines;
  auto n = RestoreTrashHour(m_.get(), hour, false, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5u);
  Attr attr;
  Ino got = 0;
  EXPECT_EQ(m_->Lookup(Context::Root(), meta::kRootIno, "top", &got, &attr).code(), ENOENT) << "a dry run moves nothing";

  // A file created where f2 was is never overwritten: f2 stays in the trash.
  n = RestoreTrashHour(m_.get(), hour, true, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5u);
  ASSERT_OK(m_->Lookup(Context::Root(), meta::kRootIno, "top", &got, &attr));
  EXPECT_EQ(got, top);
  ASSERT_OK(m_->Lookup(Context::Root(), top, "a", &got, &attr));
  EXPECT_EQ(got, a);
  ASSERT_OK(m_->Lookup(Context::Root(), a, "b", &got, &attr));
  EXPECT_EQ(got, b);
  EXPECT_EQ(attr.nlink, 2u);
  EXPECT_FALSE(meta::InTrash(attr));
  ASSERT_OK(m_->Lookup(Context::Root(), b, "f1", &got, &attr));
  EXPECT_EQ(got, f1);
  ASSERT_OK(m_->Lookup(Context::Root(), a, "f2", &got, &attr));
  EXPECT_EQ(got, f2);
  std::vector<std::string> problems;
  ASSERT_OK(m_->Check(&problems));
  EXPECT_TRUE(problems.empty()) << problems.front();

  // Remove f2 again, make a new f2: the trashed one cannot come back.
  ASSERT_OK(m_->Unlink(Context::Root(), a, "f2"));
  Ino f2b = Make(a, "f2", S_IFREG | 0644);
  lines.clear();
  n = RestoreTrashHour(m_.get(), hour, true, [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("already has a 'f2'"), std::string::npos) << lines[0];
  ASSERT_OK(m_->Lookup(Context::Root(), a, "f2", &got, &attr));
  EXPECT_EQ(got, f2b);
}

TEST_F(TrashJobsTest, PurgeRemovesExpiredHoursAndTheirData) {
  Ino d = Make(meta::kRootIno, "d", S_IFDIR | 0755);
  Ino f = Make(d, "f", S_IFREG | 0644);
  auto id = m_->NewSliceId();
  ASSERT_TRUE(id.ok());
  Attr a;
  ASSERT_OK(m_->Write(Context::Root(), f, 0, chunk::Slice{0, *id, 100, 0, 100}, meta::Now(), &a));
  ASSERT_OK(m_->Unlink(Context::Root(), d, "f"));
  ASSERT_OK(m_->Rmdir(Context::Root(), meta::kRootIno, "d"));
  const int64_t now = meta::Now().sec;

  auto removed = PurgeTrash(m_.get(), 1, now);  // within the day: kept
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 0u);
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));

  removed = PurgeTrash(m_.get(), 1, now + 2 * 86400);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 2u);
  EXPECT_EQ(m_->GetAttr(Context::Root(), f, &a).code(), ENOENT);
  EXPECT_EQ(m_->GetAttr(Context::Root(), d, &a).code(), ENOENT);
  std::vector<meta::Entry> hours;
  ASSERT_OK(ListTrashHours(m_.get(), &hours));
  EXPECT_TRUE(hours.empty());
  std::vector<uint64_t> deleted;
  ASSERT_TRUE(m_->CleanupDeleted([&](uint64_t sid, uint32_t) { deleted.push_back(sid); return Status::OK(); }, 100).ok());
  EXPECT_EQ(deleted, std::vector<uint64_t>{*id}) << "the data goes once purged";
  std::vector<std::string> problems;
  ASSERT_OK(m_->Check(&problems));
  EXPECT_TRUE(problems.empty()) << problems.front();

  EXPECT_FALSE(ParseTrashHour("2026-12-01").ok());
  EXPECT_EQ(*ParseTrashHour("1970-01-01-01"), 3600);
}

// The purge meets an engine that fails a fifth of its removals and loses a
// tenth of its replies (the removal done, the caller told EIO): each failed
// run stops with the error, the next one goes on, and once one succeeds the
// expired hour is gone with exactly its data, while the live tree is
// untouched.
// An hour directory that answers ENOENT for everything in it (a client older
// than CountSubdir lowered its link count to 0): the purge stops with an
// error naming fsck instead of reading the same page for ever.
TEST(TrashPurge, AnHourWhoseEntriesCannotBeRemovedEndsThePurge) {
  auto opened = meta::Open("memory://purge-loop");
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<meta::Meta> m = std::move(*opened);
  meta::Format f;
  f.name = "loop";
  f.uuid = meta::NewUuid();
  f.storage = "memory";
  f.bucket = "x";
  f.trash_days = 1;
  ASSERT_OK(m->Init(f, false));
  const Context root = Context::Root();
  for (const char* name : {"a", "b"}) {
    Ino ino = 0;
    Attr a;
    ASSERT_OK(m->Mknod(root, meta::kRootIno, name, S_IFDIR | 0755, 0, 0, "", &ino, &a));
    ASSERT_OK(m->Rmdir(root, meta::kRootIno, name));
  }
  const Ino hour = meta::TrashHourIno(meta::Now().sec);
  Attr h;
  ASSERT_OK(m->GetAttr(root, hour, &h));
  h.nlink = 0;  // what the older client's two decrements leave
  auto raw = kv::Open("memory://purge-loop");
  ASSERT_TRUE(raw.ok());
  ASSERT_OK((*raw)->Run([&](kv::Txn& tx) { return tx.Put(meta::keys::AttrKey(hour), meta::EncodeAttr(h)); }));

  std::atomic<bool> cancel{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 100 && !cancel.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel.store(true);
  });
  auto purged = PurgeTrash(m.get(), 1, meta::Now().sec + 2 * 86400, &cancel);
  const bool timed_out = cancel.exchange(true);
  watchdog.join();
  EXPECT_FALSE(timed_out) << "the purge went round for 10 s";
  ASSERT_FALSE(purged.ok());
  EXPECT_EQ(purged.status().code(), EIO) << purged.status().ToString();
  EXPECT_NE(purged.status().message().find("fsck"), std::string::npos) << purged.status().ToString();
}

TEST_F(TrashJobsTest, APurgeFailingHalfwayFinishesLaterAndTouchesNothingElse) {
  auto spec = meta::FaultMeta::Spec::Parse("seed=11,error=0.2,lost_reply=0.1,ops=namespace");
  ASSERT_TRUE(spec.ok());
  meta::FaultMeta faulty(std::move(m_), *spec);
  meta::Meta* raw = faulty.inner();
  auto make = [&](Ino parent, const std::string& name, uint32_t mode, uint64_t* slice_id) {
    Ino ino = 0;
    Attr a;
    EXPECT_TRUE(raw->Mknod(Context::Root(), parent, name, mode, 0, 0, "", &ino, &a).ok()) << name;
    if (slice_id != nullptr) {
      auto id = raw->NewSliceId();
      EXPECT_TRUE(id.ok());
      *slice_id = *id;
      EXPECT_TRUE(raw->Write(Context::Root(), ino, 0, chunk::Slice{0, *id, 100, 0, 100}, meta::Now(), &a).ok());
    }
    return ino;
  };
  // A tree of 3 directories and 30 files with data, removed into the trash.
  std::vector<uint64_t> trashed(30);
  Ino top = make(meta::kRootIno, "old", S_IFDIR | 0755, nullptr);
  for (int d = 0; d < 3; ++d) {
    Ino dir = make(top, "d" + std::to_string(d), S_IFDIR | 0755, nullptr);
    for (int f = 0; f < 10; ++f) make(dir, "f" + std::to_string(f), S_IFREG | 0644, &trashed[size_t(d * 10 + f)]);
  }
  {
    std::vector<Entry> entries;
    ASSERT_OK(raw->Readdir(Context::Root(), top, false, &entries));
    for (const auto& e : entries) {
      std::vector<Entry> files;
      ASSERT_OK(raw->Readdir(Context::Root(), e.ino, false, &files));
      for (const auto& f : files) ASSERT_OK(raw->Unlink(Context::Root(), e.ino, f.name));
      ASSERT_OK(raw->Rmdir(Context::Root(), top, e.name));
    }
    ASSERT_OK(raw->Rmdir(Context::Root(), meta::kRootIno, "old"));
  }
  uint64_t live_slice = 0;
  Ino live = make(meta::kRootIno, "live", S_IFREG | 0644, &live_slice);

  const int64_t later = meta::Now().sec + 2 * 86400;  // past trash-days
  int failed_runs = 0;
  for (int run = 0; run < 200 && !PurgeTrash(&faulty, 1, later).ok(); ++run) ++failed_runs;
  EXPECT_GT(failed_runs, 0) << "no fault hit the purge: the test proves nothing";
  EXPECT_GT(faulty.stats().lost_replies, 0u);
  std::vector<Entry> hours;
  ASSERT_OK(ListTrashHours(raw, &hours));
  EXPECT_TRUE(hours.empty()) << "the expired hour is still there";
  Attr attr;
  ASSERT_OK(raw->GetAttr(Context::Root(), live, &attr));
  EXPECT_EQ(attr.length, 100u);

  std::vector<uint64_t> deleted;
  ASSERT_TRUE(raw->CleanupDeleted([&](uint64_t sid, uint32_t) { deleted.push_back(sid); return Status::OK(); }, 1000).ok());
  std::sort(deleted.begin(), deleted.end());
  std::sort(trashed.begin(), trashed.end());
  EXPECT_EQ(deleted, trashed) << "exactly the purged files' data goes";
  std::vector<std::string> problems;
  ASSERT_OK(raw->Check(&problems));
  EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace tessera::vfs
