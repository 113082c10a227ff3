// The trash on every engine (meta.h, kTrashIno): removals of last names,
// directories and files replaced by a rename go into /.trash/<hour>/ as
// "<parent>-<ino>-<name>" with their data; hard links that keep a name, the
// trash itself and no_trash removals are final; only root changes the
// trash; a volume without trash deletes at once; dumps carry the trash and
// a loaded volume never hands out trash inode numbers. Redis and PostgreSQL
// need their servers (ctest unit_meta_redis / unit_meta_postgres).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../kv/pg_test_util.h"
#include "kv/kv.h"
#include "meta/dump.h"
#include "meta/encoding.h"
#include "meta/meta.h"
#include "meta/redis_client.h"

namespace tessera::meta {
namespace {

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    ::tessera::Status _st = (expr);                          \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                      \
  do {                                                       \
    ::tessera::Status _st = (expr);                          \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

class TrashTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-trash-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::string url;
    if (GetParam() == "postgres") {
      if (kv::testing::PgEnv("TESSERA_TEST_PG_URL").empty()) GTEST_SKIP() << kv::testing::kPgSkipMessage;
      schema_ = std::make_unique<kv::testing::PgSchema>(kv::testing::PgEnv("TESSERA_TEST_PG_URL"));
      url = schema_->url();
    } else if (GetParam() == "redis") {
      const char* u = std::getenv("TESSERA_TEST_REDIS_URL");
      if (u == nullptr) GTEST_SKIP() << "TESSERA_TEST_REDIS_URL not set (ctest unit_meta_redis sets it)";
      url = u;
      url = url.substr(0, url.rfind('/')) + "/5";
      auto opts = redis::Options::Parse(url);
      ASSERT_TRUE(opts.ok());
      auto c = redis::Client::Connect(*opts);
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE((*c)->Command({"FLUSHDB"}).ok());
    } else if (GetParam() == "memory") {
      url = "memory://";
    } else {
      url = "sqlite3://" + dir_ + "/m.db";
    }
    url_ = url;
    auto m = Open(url);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(*m);
    Format f;
    f.name = "trash";
    f.uuid = NewUuid();
    f.trash_days = 1;
    ASSERT_OK(m_->Init(f, false));
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Ino Make(Ino parent, const std::string& name, uint32_t mode) {
    Ino ino = 0;
    Attr attr;
    Status st = m_->Mknod(Context::Root(), parent, name, mode, 0, 0, "", &ino, &attr);
    EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
    return ino;
  }
  // The entries of this hour's trash directory, as name -> inode.
  std::map<std::string, Ino> HourEntries() {
    std::map<std::string, Ino> out;
    Ino hour = 0;
    Attr a;
    if (!m_->Lookup(Context::Root(), kTrashIno, TrashHourName(Now().sec), &hour, &a).ok()) return out;
    std::vector<Entry> entries;
    EXPECT_TRUE(m_->Readdir(Context::Root(), hour, false, &entries).ok());
    for (const auto& e : entries) out[e.name] = e.ino;
    return out;
  }
  void ExpectConsistent() {
    std::vector<std::string> problems;
    ASSERT_OK(m_->Check(&problems));
    EXPECT_TRUE(problems.empty()) << problems.front();
  }

  std::string dir_;
  std::string url_;
  std::unique_ptr<kv::testing::PgSchema> schema_;
  std::unique_ptr<Meta> m_;
};

TEST_P(TrashTest, RemovalsGoToTheTrashWithTheirData) {
  Ino trash = 0;
  Attr a;
  ASSERT_OK(m_->Lookup(Context::Root(), kRootIno, kTrashName, &trash, &a));
  EXPECT_EQ(trash, kTrashIno);
  EXPECT_EQ(a.mode, uint32_t(S_IFDIR | 0555));

  Ino d = Make(kRootIno, "d", S_IFDIR | 0755);
  Ino f = Make(d, "f", S_IFREG | 0644);
  auto id = m_->NewSliceId();
  ASSERT_TRUE(id.ok());
  ASSERT_OK(m_->Write(Context::Root(), f, 0, chunk::Slice{0, *id, 5000, 0, 5000}, Now(), &a));
  StatFs before;
  ASSERT_OK(m_->StatFS(Context::Root(), &before));

  ASSERT_OK(m_->Unlink(Context::Root(), d, "f"));
  Ino gone = 0;
  EXPECT_EQ(m_->Lookup(Context::Root(), d, "f", &gone, &a).code(), ENOENT);
  auto entries = HourEntries();
  const std::string fname = std::to_string(d) + "-" + std::to_string(f) + "-f";
  ASSERT_EQ(entries.count(fname), 1u);
  EXPECT_EQ(entries[fname], f);
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &a));
  EXPECT_TRUE(InTrash(a));
  EXPECT_EQ(a.nlink, 1u);
  EXPECT_EQ(a.length, 5000u);
  std::vector<chunk::Slice> slices;
  ASSERT_OK(m_->Read(f, 0, &slices));
  EXPECT_EQ(slices.size(), 1u) << "the data stays";
  StatFs after;
  ASSERT_OK(m_->StatFS(Context::Root(), &after));
  EXPECT_EQ(after.total_space - after.avail_space, before.total_space - before.avail_space) << "df counts the trash";
  int deleted = 0;
  ASSERT_OK(m_->CleanupDeleted([&](uint64_t, uint32_t) { ++deleted; return Status::OK(); }, 100).status());
  EXPECT_EQ(deleted, 0);

  ASSERT_OK(m_->Rmdir(Context::Root(), kRootIno, "d"));
  entries = HourEntries();
  EXPECT_EQ(entries.count("1-" + std::to_string(d) + "-d"), 1u);
  ASSERT_OK(m_->GetAttr(Context::Root(), d, &a));
  EXPECT_EQ(a.nlink, 2u);

  // A rename over a file trashes the replaced one.
  Ino x = Make(kRootIno, "x", S_IFREG | 0644);
  Ino y = Make(kRootIno, "y", S_IFREG | 0644);
  Ino out = 0;
  ASSERT_OK(m_->Rename(Context::Root(), kRootIno, "x", kRootIno, "y", 0, &out, &a));
  EXPECT_EQ(HourEntries().count("1-" + std::to_string(y) + "-y"), 1u);
  (void)x;
  // A hard link that keeps a name is not trashed.
  Ino h = Make(kRootIno, "h", S_IFREG | 0644);
  ASSERT_OK(m_->Link(Context::Root(), h, kRootIno, "h2", &a));
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "h"));
  EXPECT_EQ(HourEntries().count("1-" + std::to_string(h) + "-h"), 0u);
  ExpectConsistent();

  // Only root changes the trash.
  Context user;
  user.uid = user.gid = 1000;
  Ino hour = 0;
  ASSERT_OK(m_->Lookup(Context::Root(), kTrashIno, TrashHourName(Now().sec), &hour, &a));
  EXPECT_EQ(m_->Unlink(user, hour, fname).code(), EACCES);
  EXPECT_EQ(m_->Mknod(user, kTrashIno, "mine", S_IFREG | 0644, 0, 0, "", &out, &a).code(), EACCES);
  EXPECT_EQ(m_->Rename(user, kRootIno, kTrashName, kRootIno, "mine", 0, &out, &a).code(), EPERM);
  EXPECT_EQ(m_->Rmdir(user, kRootIno, kTrashName).code(), EPERM);
  Ino mine = Make(kRootIno, "mine", S_IFREG | 0666);
  (void)mine;
  EXPECT_EQ(m_->Rename(user, kRootIno, "mine", kRootIno, kTrashName, 0, &out, &a).code(), EPERM);

  // Removing from the trash, or with no_trash, is final.
  ASSERT_OK(m_->Unlink(Context::Root(), hour, fname));
  EXPECT_EQ(m_->GetAttr(Context::Root(), f, &a).code(), ENOENT);
  Ino z = Make(kRootIno, "z", S_IFREG | 0644);
  Context final_ctx = Context::Root();
  final_ctx.no_trash = true;
  ASSERT_OK(m_->Unlink(final_ctx, kRootIno, "z"));
  EXPECT_EQ(m_->GetAttr(Context::Root(), z, &a).code(), ENOENT);
  ExpectConsistent();
}

// Whatever enters this hour's directory moves its times only when the second
// changed (one write a second, not one a removal), and its link count stays 2
// whatever directories enter or leave it (CountSubdir): every removal of the
// hour would otherwise rewrite its record, and concurrent ones conflict.
TEST_P(TrashTest, TheHourDirectoryFollowsWhatEntersIt) {
  while (Now().sec % 3600 > 3590) usleep(200000);  // the whole test in one hour
  const Timespec t0 = Now();
  Ino d = Make(kRootIno, "d", S_IFDIR | 0755);
  for (int i = 0; i < 3; ++i) Make(d, "f" + std::to_string(i), S_IFREG | 0644);
  Make(d, "e", S_IFDIR | 0755);
  for (int i = 0; i < 3; ++i) ASSERT_OK(m_->Unlink(Context::Root(), d, "f" + std::to_string(i)));
  ASSERT_OK(m_->Rmdir(Context::Root(), d, "e"));
  Ino hour = 0;
  Attr h;
  ASSERT_OK(m_->Lookup(Context::Root(), kTrashIno, TrashHourName(t0.sec), &hour, &h));
  EXPECT_EQ(h.nlink, 2u) << "an hour's directory does not count the directories in it (CountSubdir)";
  EXPECT_GE(h.mtime.sec, t0.sec);
  EXPECT_LE(h.mtime.sec, Now().sec);
  EXPECT_EQ(HourEntries().size(), 4u);

  const int64_t second = Now().sec;
  while (Now().sec == second) usleep(20000);
  Make(d, "g", S_IFREG | 0644);
  const Timespec t1 = Now();
  ASSERT_OK(m_->Unlink(Context::Root(), d, "g"));
  ASSERT_OK(m_->GetAttr(Context::Root(), hour, &h));
  EXPECT_GE(h.mtime.sec, t1.sec) << "a file removed in a later second moves the hour's times";
  EXPECT_GE(h.ctime.sec, t1.sec);
  EXPECT_EQ(h.nlink, 2u);
  EXPECT_EQ(HourEntries().size(), 5u);
  ExpectConsistent();

  // A directory removed in a later second moves them too; directories
  // leaving the hour (put back, purged) leave its count at 2.
  const int64_t third = Now().sec;
  while (Now().sec == third) usleep(20000);
  Ino e2 = Make(d, "e2", S_IFDIR | 0755);
  const Timespec t2 = Now();
  ASSERT_OK(m_->Rmdir(Context::Root(), d, "e2"));
  ASSERT_OK(m_->GetAttr(Context::Root(), hour, &h));
  EXPECT_GE(h.mtime.sec, t2.sec) << "a directory removed in a later second moves the hour's times";
  EXPECT_EQ(h.nlink, 2u);
  Ino back = 0;
  Attr battr;
  ASSERT_OK(m_->Rename(Context::Root(), hour, TrashEntryName(d, e2, "e2"), d, "e2", kRenameNoReplace, &back, &battr));
  EXPECT_EQ(back, e2);
  Attr dattr;
  ASSERT_OK(m_->GetAttr(Context::Root(), d, &dattr));
  EXPECT_EQ(dattr.nlink, 3u) << "the directory put back counts in its parent again";
  ASSERT_OK(m_->GetAttr(Context::Root(), hour, &h));
  EXPECT_EQ(h.nlink, 2u);
  for (const auto& [name, ino] : HourEntries()) {
    Attr a;
    ASSERT_OK(m_->GetAttr(Context::Root(), ino, &a));
    if (!a.IsDir()) continue;
    Context purge = Context::Root();
    purge.no_trash = true;
    ASSERT_OK(m_->Rmdir(purge, hour, name));
  }
  ASSERT_OK(m_->GetAttr(Context::Root(), hour, &h));
  EXPECT_EQ(h.nlink, 2u) << "purging the directories in it";
  EXPECT_EQ(HourEntries().size(), 4u);
  ExpectConsistent();
}

// A client older than CountSubdir still lowers an hour directory's link
// count when it takes a directory out, so with directories that newer
// clients put in, the count can reach 0. fsck must say so, --repair must set
// it back to 2, and removals must then go to the trash again. (SQLite: a
// second connection to the file plays the older client.)
TEST_P(TrashTest, AnHourDirectoryLoweredByAnOlderClientIsFoundAndRepaired) {
  if (GetParam() != "sqlite3") GTEST_SKIP() << "needs a second connection to the same engine";
  while (Now().sec % 3600 > 3590) usleep(200000);  // the whole test in one hour
  const Context root = Context::Root();
  Ino d = Make(kRootIno, "d", S_IFDIR | 0755);
  Make(d, "e", S_IFDIR | 0755);
  ASSERT_OK(m_->Rmdir(root, d, "e"));
  const Ino hour = TrashHourIno(Now().sec);
  Attr h;
  ASSERT_OK(m_->GetAttr(root, hour, &h));
  ASSERT_EQ(h.nlink, 2u);
  auto raw = kv::Open(url_);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  auto put_count = [&](uint32_t nlink) {
    h.nlink = nlink;
    return (*raw)->Run([&](kv::Txn& tx) { return tx.Put(keys::AttrKey(hour), EncodeAttr(h)); });
  };
  // An hour made before the rule counted the directories that entered it
  // (more than it holds now, once some were purged): not a problem.
  ASSERT_OK(put_count(5));
  ExpectConsistent();
  ASSERT_OK(put_count(0));  // the older client's two decrements, as its purge of two directories would
  std::vector<std::string> problems;
  ASSERT_OK(m_->Check(&problems));
  // The hour's own count, and /.trash's (an hour at 0 looks removed).
  EXPECT_TRUE(std::any_of(problems.begin(), problems.end(), [&](const std::string& p) {
    return p.find("directory " + std::to_string(hour) + " nlink 0") != std::string::npos;
  })) << (problems.empty() ? "no problem found" : problems[0]);
  std::vector<std::string> changes;
  ASSERT_OK(m_->Repair(&changes));
  EXPECT_FALSE(changes.empty());
  ASSERT_OK(m_->GetAttr(root, hour, &h));
  EXPECT_EQ(h.nlink, 2u);
  ExpectConsistent();
  Make(d, "f", S_IFREG | 0644);
  ASSERT_OK(m_->Unlink(root, d, "f"));
  EXPECT_EQ(HourEntries().size(), 2u) << "after the repair, removals go to the trash again";
}

// Root removes this hour's trash directory while a session still holds it
// open: a file removed later in the same hour must not go into that dead
// directory, where nothing would list it, purge it or count it again; it is
// removed for good instead.
TEST_P(TrashTest, RemovalsSkipAnHourDirectoryThatWasRemoved) {
  while (Now().sec % 3600 > 3590) usleep(200000);  // the whole test in one hour
  const Context root = Context::Root();
  SessionInfo s;
  s.mount_point = "/mnt/trash";
  ASSERT_OK(m_->NewSession(s));
  Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  ASSERT_OK(m_->Unlink(root, kRootIno, "f"));  // makes this hour's directory
  const std::string hour_name = TrashHourName(Now().sec);
  Ino hour = 0;
  Attr attr;
  ASSERT_OK(m_->Lookup(root, kTrashIno, hour_name, &hour, &attr));
  ASSERT_OK(m_->Unlink(root, hour, TrashEntryName(kRootIno, f, "f")));  // emptied
  ASSERT_OK(m_->Open(root, hour, O_RDONLY, &attr));                      // held open
  ASSERT_OK(m_->Rmdir(root, kTrashIno, hour_name));
  Ino g = Make(kRootIno, "g", S_IFREG | 0644);
  ASSERT_OK(m_->Unlink(root, kRootIno, "g"));
  Status st = m_->GetAttr(root, g, &attr);
  if (st.ok()) {  // kept for the session until it lets go, with no name
    EXPECT_EQ(attr.nlink, 0u) << "the removed file went into the removed hour directory";
    EXPECT_NE(attr.parent, hour);
  } else {
    EXPECT_EQ(st.code(), ENOENT) << st.ToString();
  }
  ASSERT_OK(m_->Close(root, hour));
  ExpectConsistent();
}

TEST_P(TrashTest, WithoutTrashRemovalsAreFinal) {
  Format f = *m_->Load();
  f.trash_days = 0;
  ASSERT_OK(m_->Init(f, true));  // loads the settings again: this client's trash is off
  EXPECT_EQ(m_->TrashDays(), 0);
  Ino g = Make(kRootIno, "g", S_IFREG | 0644);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "g"));
  Attr a;
  EXPECT_EQ(m_->GetAttr(Context::Root(), g, &a).code(), ENOENT);
  EXPECT_TRUE(HourEntries().empty());
  ExpectConsistent();
}

TEST_P(TrashTest, DumpCarriesTheTrashAndLoadKeepsItsNumbersApart) {
  Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  std::vector<std::string> lines;
  DumpStats stats;
  ASSERT_OK(Dump(m_.get(), DumpOptions{}, [&](std::string_view l) {
    lines.emplace_back(l);
    return Status::OK();
  }, &stats));
  auto dst = Open("memory://");
  ASSERT_TRUE(dst.ok());
  size_t next = 0;
  Format format;
  ASSERT_OK(Load(dst->get(), LoadOptions{}, [&](std::string* l) -> Result<bool> {
    if (next == lines.size()) return false;
    *l = lines[next++];
    return true;
  }, &stats, &format));
  Attr a;
  ASSERT_OK((*dst)->GetAttr(Context::Root(), f, &a));
  EXPECT_TRUE(InTrash(a));
  Ino fresh = 0;
  ASSERT_OK((*dst)->Mknod(Context::Root(), kRootIno, "new", S_IFREG | 0644, 0, 0, "", &fresh, &a));
  EXPECT_LT(fresh, kTrashIno);
  EXPECT_GT(fresh, f);
}

// Slices replaced by compaction that a metadata dump may name stay while
// the trash would keep a file (here: a dump is being taken): their deletion
// is queued for trash-days later, gc counts them as pending, and they go
// once due.
TEST_P(TrashTest, CompactionKeepsReplacedSlicesForTrashDays) {
  ASSERT_OK(m_->BeginBackup());
  Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  Attr a;
  std::vector<chunk::Slice> expected;
  for (uint32_t i = 0; i < 3; ++i) {
    auto id = m_->NewSliceId();
    ASSERT_TRUE(id.ok());
    chunk::Slice s{i * 100, *id, 100, 0, 100};
    ASSERT_OK(m_->Write(Context::Root(), f, 0, s, Now(), &a));
    expected.push_back(s);
  }
  auto merged = m_->NewSliceId();
  ASSERT_TRUE(merged.ok());
  ASSERT_OK(m_->CompactChunk(f, 0, expected, {chunk::Slice{0, *merged, 300, 0, 300}}));
  std::vector<uint64_t> deleted;
  auto deleter = [&](uint64_t id, uint32_t) {
    deleted.push_back(id);
    return Status::OK();
  };
  ASSERT_TRUE(m_->CleanupDeleted(deleter, 100).ok());
  EXPECT_TRUE(deleted.empty()) << "replaced slices deleted at once with the trash on";
  size_t pending = 0;
  ASSERT_OK(m_->ScanAllSlices([&](uint64_t, uint32_t, bool p) { pending += p; }));
  EXPECT_EQ(pending, 3u);

  // Once due, they go: a record made due by hand, as time would.
  if (GetParam() == "memory") return;  // private store: nothing else can reach it
  const uint64_t id = expected[0].id;
  if (GetParam() == "redis") {
    auto opts = redis::Options::Parse(url_);
    ASSERT_TRUE(opts.ok());
    auto c = redis::Client::Connect(*opts);
    ASSERT_TRUE(c.ok());
    std::string member = std::to_string(id) + "_100";
    ASSERT_TRUE((*c)->Command({"ZADD", "delslices", "1", member}).ok());
  } else {
    auto kv = kv::Open(url_);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    ASSERT_OK((*kv)->Run([&](kv::Txn& tx) -> Status {
      std::string prefix = "K";
      std::string from = prefix, to = kv::PrefixEnd(prefix);
      std::vector<std::string> keys;
      RETURN_IF_ERROR(tx.Scan(from, to, 0, [&](std::string_view k, std::string_view) {
        keys.emplace_back(k);
        return true;
      }));
      for (const auto& k : keys) {
        if (kv::ReadU64BE(std::string_view(k).substr(9)) != id) continue;
        RETURN_IF_ERROR(tx.Delete(k));
        std::string due = "K";
        kv::AppendU64BE(&due, 1);
        due.append(k.substr(9));
        RETURN_IF_ERROR(tx.Put(due, ""));
      }
      return Status::OK();
    }));
  }
  ASSERT_TRUE(m_->CleanupDeleted(deleter, 100).ok());
  EXPECT_EQ(deleted, std::vector<uint64_t>{id});
}

// What no dump can name goes at once, trash or not: slices created after
// the newest dump ended. While dumps run (two overlapping here), everything
// a compaction replaces is kept; slices from before the last dump ended are
// kept afterwards too.
TEST_P(TrashTest, CompactionKeepsOnlyWhatADumpMayName) {
  Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  Attr a;
  uint32_t end = 0;  // each write after the last: none hides another
  auto write3 = [&](std::vector<chunk::Slice>* list) {
    for (uint32_t i = 0; i < 3; ++i, end += 100) {
      auto id = m_->NewSliceId();
      ASSERT_TRUE(id.ok());
      chunk::Slice s{end, *id, 100, 0, 100};
      ASSERT_OK(m_->Write(Context::Root(), f, 0, s, Now(), &a));
      list->push_back(s);
    }
  };
  std::vector<uint64_t> deleted;
  auto deleter = [&](uint64_t id, uint32_t) {
    deleted.push_back(id);
    return Status::OK();
  };
  auto compact = [&](const std::vector<chunk::Slice>& expected) {
    auto merged = m_->NewSliceId();
    EXPECT_TRUE(merged.ok());
    const chunk::Slice all{0, *merged, end, 0, end};
    EXPECT_OK(m_->CompactChunk(f, 0, expected, {all}));
    return all;
  };
  auto pending = [&] {
    size_t n = 0;
    EXPECT_OK(m_->ScanAllSlices([&](uint64_t, uint32_t, bool p) { n += p; }));
    return n;
  };
  // No dump ever: replaced slices go at once.
  std::vector<chunk::Slice> first;
  write3(&first);
  const chunk::Slice merged1 = compact(first);
  ASSERT_TRUE(m_->CleanupDeleted(deleter, 100).ok());
  EXPECT_EQ(deleted.size(), 3u);
  EXPECT_EQ(pending(), 0u);

  // Two dumps overlap: while either runs, everything replaced is kept.
  ASSERT_OK(m_->BeginBackup());
  ASSERT_OK(m_->BeginBackup());
  ASSERT_OK(m_->EndBackup());
  std::vector<chunk::Slice> second{merged1};
  write3(&second);
  const chunk::Slice merged2 = compact(second);
  deleted.clear();
  ASSERT_TRUE(m_->CleanupDeleted(deleter, 100).ok());
  EXPECT_TRUE(deleted.empty()) << "a slice a running dump may name was deleted";
  EXPECT_EQ(pending(), 4u);
  ASSERT_OK(m_->EndBackup());

  // After the last dump: slices created before it ended are kept, those
  // created after (past this client's batch of ids reserved before) go.
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(m_->NewSliceId().ok());
  std::vector<chunk::Slice> third{merged2};
  write3(&third);
  compact(third);
  deleted.clear();
  ASSERT_TRUE(m_->CleanupDeleted(deleter, 100).ok());
  std::vector<uint64_t> want{third[1].id, third[2].id, third[3].id};
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, want);
  EXPECT_EQ(pending(), 5u);  // merged2 joined the four
}

INSTANTIATE_TEST_SUITE_P(Engines, TrashTest, ::testing::Values("memory", "sqlite3", "postgres", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tessera::meta
