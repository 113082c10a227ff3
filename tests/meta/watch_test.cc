// Coherent caches on every engine (Meta::WatchChanges): a watching client
// is told, within a fraction of a second, of every entry and inode another
// client changes, never of its own changes; nothing is recorded while no
// other client watches; a broken watch reports "lost" and recovers.
#include <sys/stat.h>
#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "meta/meta.h"
#include "two_clients.h"

namespace tessera::meta {
namespace {

using namespace std::chrono_literals;

// What a watcher was told.
class Collector {
 public:
  ChangeFn fn() {
    return [this](const std::vector<Change>& changes, bool lost) {
      std::lock_guard lock(mu_);
      for (const Change& c : changes) changes_.push_back(c);
      if (lost) ++lost_;
      cv_.notify_all();
    };
  }
  // Waits up to `timeout` for the entry change parent/name.
  bool WaitEntry(Ino parent, const std::string& name, std::chrono::milliseconds timeout = 3000ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const Change& c : changes_)
        if (c.parent == parent && c.name == name) return true;
      return false;
    });
  }
  bool WaitInode(Ino ino, std::chrono::milliseconds timeout = 3000ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const Change& c : changes_)
        if (c.parent == 0 && c.ino == ino) return true;
      return false;
    });
  }
  bool WaitLost(std::chrono::milliseconds timeout = 10000ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return lost_ > 0; });
  }
  bool SawName(const std::string& name) {
    std::lock_guard lock(mu_);
    for (const Change& c : changes_)
      if (c.name == name) return true;
    return false;
  }
  bool SawInode(Ino ino) {
    std::lock_guard lock(mu_);
    for (const Change& c : changes_)
      if (c.parent == 0 && c.ino == ino) return true;
    return false;
  }
  void Clear() {
    std::lock_guard lock(mu_);
    changes_.clear();
    lost_ = 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Change> changes_;
  int lost_ = 0;
};

class WatchTest : public testing::TwoClientsTest {
 protected:
  WatchTest() : TwoClientsTest("watch") {}

  // Change records written so far, where the engine shows them (sqlite3:
  // rows of its log; redis: PUBLISH calls); -1 elsewhere.
  int64_t Recorded() {
    if (GetParam() == "sqlite3") {
      sqlite3* db = nullptr;
      int64_t n = -1;
      if (sqlite3_open((dir_ / "meta.db").c_str(), &db) == SQLITE_OK) {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM kvlog", -1, &st, nullptr) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
          n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
      }
      sqlite3_close(db);
      return n;
    }
    if (GetParam() == "redis") {
      auto r = Redis({"INFO", "commandstats"});
      if (!r.ok()) return -1;
      const std::string info(r->str());
      const size_t at = info.find("cmdstat_publish:calls=");
      return at == std::string::npos ? 0 : std::stoll(info.substr(at + 22));
    }
    return -1;
  }

  // PostgreSQL clients look for watchers once a second at most (the other
  // engines in every transaction): a new or gone watcher is noticed within
  // a second there. A watching mount keeps its kernel caches short longer
  // (Meta::WatchGraceMs).
  static void NoticeWatchers() { std::this_thread::sleep_for(1100ms); }

  // What a_ and b_ were told: members, destroyed after TearDown has closed
  // the clients (whose watcher threads call them).
  Collector a_seen_, b_seen_;
};

TEST_P(WatchTest, OtherClientsChangesReachAWatcherButNotItsOwn) {
  const Context root = Context::Root();
  Collector& seen = b_seen_;
  ASSERT_TRUE(b_->WatchChanges(seen.fn()).ok());
  EXPECT_EQ(b_->WatchChanges(seen.fn()).code(), EBUSY);
  NoticeWatchers();

  Ino f = 0, d = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "d", S_IFDIR | 0755, 0, 0, "", &d, &attr).ok());
  EXPECT_TRUE(seen.WaitEntry(kRootIno, "f")) << "create";
  EXPECT_TRUE(seen.WaitInode(kRootIno)) << "the parent of a create";
  EXPECT_TRUE(seen.WaitInode(f)) << "the created inode";

  seen.Clear();
  Attr in;
  in.mode = 0600;
  ASSERT_TRUE(a_->SetAttr(root, f, kSetMode, in, &attr).ok());
  EXPECT_TRUE(seen.WaitInode(f)) << "chmod";

  seen.Clear();
  ASSERT_TRUE(a_->Write(root, f, 0, chunk::Slice{0, 77, 4096, 0, 4096}, Now(), &attr).ok());
  EXPECT_TRUE(seen.WaitInode(f)) << "write";

  seen.Clear();
  Ino moved = 0;
  ASSERT_TRUE(a_->Rename(root, kRootIno, "f", d, "g", 0, &moved, &attr).ok());
  EXPECT_TRUE(seen.WaitEntry(kRootIno, "f")) << "rename: the old name";
  EXPECT_TRUE(seen.WaitEntry(d, "g")) << "rename: the new name";

  seen.Clear();
  ASSERT_TRUE(a_->Unlink(root, d, "g").ok());
  EXPECT_TRUE(seen.WaitEntry(d, "g")) << "unlink";
  EXPECT_TRUE(seen.WaitInode(f)) << "unlink: the inode's link count";

  // The watcher's own changes are not reported back to it.
  seen.Clear();
  Ino mine = 0;
  ASSERT_TRUE(b_->Mknod(root, kRootIno, "mine", S_IFREG | 0644, 0, 0, "", &mine, &attr).ok());
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "after", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  EXPECT_TRUE(seen.WaitEntry(kRootIno, "after"));
  EXPECT_FALSE(seen.SawName("mine")) << "a client was told of its own change";
  EXPECT_FALSE(seen.SawInode(mine)) << "a client was told of its own change";

  // Stopped: nothing more arrives.
  b_->StopWatching();
  seen.Clear();
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "late", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(seen.SawName("late"));
}

// Raw writes (fsck --repair on a mounted volume writes through WriteTree,
// as load does) reach the watchers like any change: an inode's attributes
// and an entry taken away.
TEST_P(WatchTest, RepairsReachAWatcher) {
  const Context root = Context::Root();
  Collector& seen = b_seen_;
  Ino f = 0, g = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "g", S_IFREG | 0644, 0, 0, "", &g, &attr).ok());
  ASSERT_TRUE(b_->WatchChanges(seen.fn()).ok());
  NoticeWatchers();
  attr.mode = S_IFREG | 0600;
  ASSERT_TRUE(a_->WriteTree([&](TreeWriter& w) {
                  RETURN_IF_ERROR(w.PutAttr(f, attr));
                  return w.DeleteEntry(kRootIno, "g");
                }).ok());
  EXPECT_TRUE(seen.WaitInode(f)) << "attributes written by a repair";
  EXPECT_TRUE(seen.WaitEntry(kRootIno, "g")) << "an entry a repair took away";
}

// Nobody else watches: a client writes no change records at all (its own
// watch does not count); a second watcher makes both record.
TEST_P(WatchTest, NothingIsRecordedWhileNoOtherClientWatches) {
  if (GetParam() != "sqlite3" && GetParam() != "redis") GTEST_SKIP() << "records are not countable on this engine";
  const Context root = Context::Root();
  Collector& a_seen = a_seen_;
  Collector& b_seen = b_seen_;
  ASSERT_TRUE(a_->WatchChanges(a_seen.fn()).ok());
  const int64_t before = Recorded();
  Ino ino = 0;
  Attr attr;
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(a_->Mknod(root, kRootIno, "alone" + std::to_string(i), S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  EXPECT_EQ(Recorded(), before) << "a client alone with its watch recorded changes";
  ASSERT_TRUE(b_->WatchChanges(b_seen.fn()).ok());
  NoticeWatchers();
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "seen-by-b", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  ASSERT_TRUE(b_->Mknod(root, kRootIno, "seen-by-a", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  EXPECT_TRUE(b_seen.WaitEntry(kRootIno, "seen-by-b"));
  EXPECT_TRUE(a_seen.WaitEntry(kRootIno, "seen-by-a"));
  EXPECT_EQ(Recorded(), before + 2);
  EXPECT_FALSE(b_seen.SawName("alone0")) << "a change from before the watch started";
  // A watcher gone (its session cleaned) no longer makes others record.
  a_->StopWatching();
  NoticeWatchers();
  const int64_t two = Recorded();
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "only-b-watches", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  EXPECT_TRUE(b_seen.WaitEntry(kRootIno, "only-b-watches"));
  ASSERT_TRUE(b_->Mknod(root, kRootIno, "nobody-watches", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  EXPECT_EQ(Recorded(), two + 1);
}

// The watch's connection is cut: the watcher is told it lost changes, then
// watches again by itself.
TEST_P(WatchTest, ABrokenWatchReportsLostAndRecovers) {
  if (GetParam() != "redis" && GetParam() != "postgres") GTEST_SKIP() << "no connection to cut";
  const Context root = Context::Root();
  Collector& seen = b_seen_;
  ASSERT_TRUE(b_->WatchChanges(seen.fn()).ok());
  NoticeWatchers();
  if (GetParam() == "redis") {
    ASSERT_TRUE(Redis({"CLIENT", "KILL", "TYPE", "pubsub"}).ok());
  } else {
    const std::string err = kv::testing::PgExec(
        kv::testing::PgEnv("TESSERA_TEST_PG_URL"),
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'tessera-listen'");
    ASSERT_EQ(err, "");
  }
  EXPECT_TRUE(seen.WaitLost()) << "the cut was not reported";
  // Watching again within a few seconds.
  bool again = false;
  for (int i = 0; i < 50 && !again; ++i) {
    Ino ino = 0;
    Attr attr;
    const std::string name = "after-cut-" + std::to_string(i);
    ASSERT_TRUE(a_->Mknod(root, kRootIno, name, S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
    again = seen.WaitEntry(kRootIno, name, 200ms);
  }
  EXPECT_TRUE(again) << "changes no longer arrive after the connection was cut";
}

// The attribute cache behind Meta::CachedAttr (KvMeta: memory, sqlite3,
// postgres; Redis has none: every answer comes from the engine): a watcher's own changes show at
// once; another client's as soon as they are reported, before the watcher
// is told, never later; unchanged attributes cost no engine read (the hit
// counter moves); a stopped watch keeps nothing.
TEST_P(WatchTest, CachedAttrFollowsOwnAndReportedChanges) {
  const Context root = Context::Root();
  Collector& seen = b_seen_;
  ASSERT_TRUE(b_->WatchChanges(seen.fn()).ok());
  NoticeWatchers();
  std::this_thread::sleep_for(std::chrono::milliseconds(b_->WatchGraceMs()));
  const bool cached = GetParam() != "redis";
  metrics::Counter* hits = metrics::NewCounter("tessera_meta_attr_cache_hits_total",
                                               "Attribute requests answered from the client's attribute cache");
  // What the kernel's GETATTR gets (vfs::Vfs::GetAttr).
  auto stat = [&](Ino ino, Attr* got) { return b_->CachedAttr(ino, got) ? Status::OK() : b_->GetAttr(root, ino, got); };
  auto mode_of = [&](Ino ino) {
    Attr got;
    Status st = stat(ino, &got);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return got.mode & 07777;
  };

  Ino f = 0;
  Attr attr, got;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  ASSERT_TRUE(seen.WaitInode(f));
  EXPECT_EQ(mode_of(f), 0644u);
  const uint64_t h0 = hits->value();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(mode_of(f), 0644u);
  if (cached) {
    EXPECT_EQ(hits->value() - h0, 3u) << "unchanged attributes were read from the engine";
  }

  // Another client's changes: new once reported.
  seen.Clear();
  Attr in;
  in.mode = 0600;
  ASSERT_TRUE(a_->SetAttr(root, f, kSetMode, in, &attr).ok());
  ASSERT_TRUE(seen.WaitInode(f)) << "chmod";
  EXPECT_EQ(mode_of(f), 0600u) << "another client's chmod, reported, still answered from the cache";
  seen.Clear();
  ASSERT_TRUE(a_->Write(root, f, 0, chunk::Slice{0, 77, 4096, 0, 4096}, Now(), &attr).ok());
  ASSERT_TRUE(seen.WaitInode(f)) << "write";
  ASSERT_TRUE(stat(f, &got).ok());
  EXPECT_EQ(got.length, 4096u) << "another client's write, reported, still answered from the cache";

  // Its own changes: at once, and then from the cache.
  in.mode = 0640;
  ASSERT_TRUE(b_->SetAttr(root, f, kSetMode, in, &attr).ok());
  EXPECT_EQ(mode_of(f), 0640u);
  ASSERT_TRUE(b_->Truncate(root, f, 100, true, &attr).ok());
  const uint64_t h1 = hits->value();
  ASSERT_TRUE(stat(f, &got).ok());
  EXPECT_EQ(got.length, 100u);
  if (cached) {
    EXPECT_EQ(hits->value() - h1, 1u) << "its own truncate's attributes were not kept";
  }
  Ino g = 0;
  ASSERT_TRUE(b_->Mknod(root, kRootIno, "g", S_IFREG | 0604, 0, 0, "", &g, &attr).ok());
  EXPECT_EQ(mode_of(g), 0604u);
  ASSERT_TRUE(b_->Unlink(root, kRootIno, "g").ok());
  EXPECT_EQ(stat(g, &got).code(), b_->GetAttr(root, g, &attr).code()) << "after its own unlink";

  // Stopped: nothing is answered from the cache any more.
  b_->StopWatching();
  const uint64_t h2 = hits->value();
  EXPECT_EQ(mode_of(f), 0640u);
  EXPECT_EQ(hits->value(), h2);
  in.mode = 0444;
  ASSERT_TRUE(a_->SetAttr(root, f, kSetMode, in, &attr).ok());
  EXPECT_EQ(mode_of(f), 0444u) << "a stopped watch answered from what it kept";
}

INSTANTIATE_TEST_SUITE_P(Engines, WatchTest, ::testing::Values("memory", "sqlite3", "redis", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tessera::meta
