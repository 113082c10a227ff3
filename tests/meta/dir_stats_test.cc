// Directory statistics on every engine (meta.h, DirStat): exact through
// creates, writes, truncates, fallocate, renames across directories, hard
// links, unlinks, the trash and dump/load; exact under four concurrent
// threads of two clients once flushed; fsck finds damaged records and
// --repair recomputes them. Redis and PostgreSQL need their servers (ctest
// unit_meta_redis / unit_meta_postgres).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../kv/pg_test_util.h"
#include "chunk/layout.h"
#include "meta/dump.h"
#include "meta/meta.h"
#include "meta/redis_client.h"
#include "meta/summary.h"

namespace tessera::meta {

void PrintTo(const DirStat& d, std::ostream* os) {
  *os << "{length " << d.length << ", space " << d.space << ", entries " << d.inodes << "}";
}

namespace {

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

constexpr int64_t k4K = 4096;

class DirStatsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-dirstats-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    if (GetParam() == "postgres" && kv::testing::PgEnv("TESSERA_TEST_PG_URL").empty())
      GTEST_SKIP() << kv::testing::kPgSkipMessage;
    if (GetParam() == "redis" && std::getenv("TESSERA_TEST_REDIS_URL") == nullptr)
      GTEST_SKIP() << "TESSERA_TEST_REDIS_URL not set (ctest unit_meta_redis sets it)";
    url_ = FreshUrl(6);
    m_ = OpenClient();
    ASSERT_NE(m_, nullptr);
    Format f;
    f.name = "dirstats";
    f.uuid = NewUuid();
    ASSERT_OK(m_->Init(f, false));
    ASSERT_OK(m_->NewSession(SessionInfo{}));
  }
  void TearDown() override {
    m_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // An empty engine of this test's kind (its server is there: SetUp
  // skipped otherwise); Redis: database `db`, flushed.
  std::string FreshUrl(int db) {
    if (GetParam() == "postgres") {
      schemas_.push_back(std::make_unique<kv::testing::PgSchema>(kv::testing::PgEnv("TESSERA_TEST_PG_URL")));
      return schemas_.back()->url();
    }
    if (GetParam() == "redis") {
      std::string url = std::getenv("TESSERA_TEST_REDIS_URL");
      url = url.substr(0, url.rfind('/')) + "/" + std::to_string(db);
      auto opts = redis::Options::Parse(url);
      EXPECT_TRUE(opts.ok());
      auto c = redis::Client::Connect(*opts);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (c.ok()) {
        EXPECT_TRUE((*c)->Command({"FLUSHDB"}).ok());
      }
      return url;
    }
    static std::atomic<int> n{0};
    if (GetParam() == "memory") return "memory://dirstats-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    return "sqlite3://" + dir_ + "/m" + std::to_string(n++) + ".db";
  }

  std::unique_ptr<Meta> OpenClient(const std::string& url = "") {
    auto m = Open(url.empty() ? url_ : url);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }

  Ino Make(Ino parent, const std::string& name, uint32_t mode, Meta* m = nullptr, const std::string& target = "") {
    Ino ino = 0;
    Attr attr;
    Status st = (m ? m : m_.get())->Mknod(Context::Root(), parent, name, mode, 0, 0, target, &ino, &attr);
    EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
    return ino;
  }
  // Extends (or writes inside) a file: one slice of len bytes at off.
  void WriteAt(Ino ino, uint64_t off, uint32_t len, Meta* m = nullptr) {
    Meta* meta = m ? m : m_.get();
    auto id = meta->NewSliceId();
    ASSERT_TRUE(id.ok());
    Attr attr;
    chunk::Slice s{uint32_t(off % chunk::kChunkSize), *id, len, 0, len};
    ASSERT_OK(meta->Write(Context::Root(), ino, uint32_t(off / chunk::kChunkSize), s, Now(), &attr));
  }
  void Truncate(Ino ino, uint64_t len) {
    Attr attr;
    ASSERT_OK(m_->Truncate(Context::Root(), ino, len, true, &attr));
  }
  void Link(Ino ino, Ino parent, const std::string& name, Meta* m = nullptr) {
    Attr attr;
    ASSERT_OK((m ? m : m_.get())->Link(Context::Root(), ino, parent, name, &attr));
  }
  void Rename(Ino p1, const std::string& n1, Ino p2, const std::string& n2, uint32_t flags = 0) {
    Ino ino = 0;
    Attr attr;
    ASSERT_OK(m_->Rename(Context::Root(), p1, n1, p2, n2, flags, &ino, &attr));
  }

  DirStat Stat(Ino dir, Meta* m = nullptr) {
    std::vector<DirStat> out;
    EXPECT_OK((m ? m : m_.get())->GetDirStats({dir}, &out));
    return out.empty() ? DirStat{} : out[0];
  }
  // What the statistics of dir must be, from its entries.
  DirStat Walk(Ino dir) {
    std::vector<Entry> entries;
    EXPECT_OK(m_->Readdir(Context::Root(), dir, true, &entries));
    DirStat d;
    for (const auto& e : entries) {
      d.inodes++;
      if (e.attr.IsFile()) {
        d.length += int64_t(e.attr.length);
        d.space += int64_t((e.attr.length + 4095) / 4096 * 4096);
      }
    }
    return d;
  }
  std::vector<std::string> Problems(Meta* m = nullptr) {
    std::vector<std::string> problems;
    EXPECT_OK((m ? m : m_.get())->Check(&problems));
    return problems;
  }
  void ExpectClean(Meta* m = nullptr) {
    auto problems = Problems(m);
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    EXPECT_TRUE(problems.empty()) << all;
  }

  std::string dir_, url_;
  std::vector<std::unique_ptr<kv::testing::PgSchema>> schemas_;
  std::unique_ptr<Meta> m_;
};

INSTANTIATE_TEST_SUITE_P(Engines, DirStatsTest, ::testing::Values("memory", "sqlite3", "postgres", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(DirStatsTest, FollowEveryKindOfChange) {
  Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  Ino b = Make(kRootIno, "b", S_IFDIR | 0755);
  EXPECT_EQ(Stat(kRootIno), (DirStat{0, 0, 2}));
  Ino f = Make(a, "f", S_IFREG | 0644);
  Make(a, "sym", S_IFLNK | 0777, nullptr, "target-of-some-length");
  Make(a, "fifo", S_IFIFO | 0644);
  EXPECT_EQ(Stat(a), (DirStat{0, 0, 3}));  // only regular files have a length here

  WriteAt(f, 0, 5000);
  EXPECT_EQ(Stat(a), (DirStat{5000, 2 * k4K, 3}));
  WriteAt(f, 100, 10);  // inside: no change
  EXPECT_EQ(Stat(a), (DirStat{5000, 2 * k4K, 3}));
  WriteAt(f, uint64_t(chunk::kChunkSize) + 1, 1);  // a second chunk
  EXPECT_EQ(Stat(a), (DirStat{int64_t(chunk::kChunkSize) + 2, int64_t(chunk::kChunkSize) + k4K, 3}));
  Truncate(f, 4096);
  EXPECT_EQ(Stat(a), (DirStat{4096, k4K, 3}));
  Attr attr;
  ASSERT_OK(m_->Fallocate(Context::Root(), f, 0, 0, 3 * 4096 + 1, &attr));
  EXPECT_EQ(Stat(a), (DirStat{3 * 4096 + 1, 4 * k4K, 3}));
  ASSERT_OK(m_->Fallocate(Context::Root(), f, FALLOC_FL_KEEP_SIZE, 0, 1 << 20, &attr));  // no size change
  EXPECT_EQ(Stat(a), (DirStat{3 * 4096 + 1, 4 * k4K, 3}));

  Rename(a, "f", b, "g");  // across directories: the length moves
  EXPECT_EQ(Stat(a), (DirStat{0, 0, 2}));
  EXPECT_EQ(Stat(b), (DirStat{3 * 4096 + 1, 4 * k4K, 1}));
  Rename(b, "g", b, "h");  // within one: nothing
  EXPECT_EQ(Stat(b), (DirStat{3 * 4096 + 1, 4 * k4K, 1}));

  // Replacing a file by a rename removes the replaced one's share.
  Ino small = Make(a, "small", S_IFREG | 0644);
  WriteAt(small, 0, 10);
  Rename(a, "small", b, "h");
  EXPECT_EQ(Stat(a), (DirStat{0, 0, 2}));
  EXPECT_EQ(Stat(b), (DirStat{10, k4K, 1}));

  // RENAME_EXCHANGE swaps the shares.
  Ino big = Make(a, "big", S_IFREG | 0644);
  WriteAt(big, 0, 100000);
  Rename(a, "big", b, "h", kRenameExchange);
  EXPECT_EQ(Stat(a), (DirStat{10, k4K, 3}));
  EXPECT_EQ(Stat(b), (DirStat{100000, 25 * k4K, 1}));

  // A directory moving carries its own entries, not counted in its parent.
  Ino sub = Make(a, "sub", S_IFDIR | 0755);
  Make(sub, "x", S_IFREG | 0644);
  Rename(a, "sub", b, "sub");
  EXPECT_EQ(Stat(a), (DirStat{10, k4K, 3}));
  EXPECT_EQ(Stat(b), (DirStat{100000, 25 * k4K, 2}));
  EXPECT_EQ(Stat(sub), (DirStat{0, 0, 1}));

  ASSERT_OK(m_->Unlink(Context::Root(), sub, "x"));
  ASSERT_OK(m_->Rmdir(Context::Root(), b, "sub"));
  ASSERT_OK(m_->Unlink(Context::Root(), b, "h"));
  EXPECT_EQ(Stat(b), (DirStat{0, 0, 0}));
  for (Ino d : {kRootIno, a, b}) EXPECT_EQ(Stat(d), Walk(d)) << "directory " << d;
  ExpectClean();
}

TEST_P(DirStatsTest, HardLinksChargeEveryDirectoryNamingTheFile) {
  Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  Ino b = Make(kRootIno, "b", S_IFDIR | 0755);
  Ino c = Make(kRootIno, "c", S_IFDIR | 0755);
  Ino f = Make(a, "f", S_IFREG | 0644);
  WriteAt(f, 0, 100);
  Link(f, b, "f1");
  Link(f, c, "f2");
  Link(f, c, "f3");
  EXPECT_EQ(Stat(a), (DirStat{100, k4K, 1}));
  EXPECT_EQ(Stat(b), (DirStat{100, k4K, 1}));
  EXPECT_EQ(Stat(c), (DirStat{200, 2 * k4K, 2}));
  ExpectClean();

  WriteAt(f, 0, 5000);  // every name's directory follows the new length
  EXPECT_EQ(Stat(a), (DirStat{5000, 2 * k4K, 1}));
  EXPECT_EQ(Stat(b), (DirStat{5000, 2 * k4K, 1}));
  EXPECT_EQ(Stat(c), (DirStat{10000, 4 * k4K, 2}));

  // A name moved between directories moves its share for later writes too.
  Rename(c, "f3", a, "f3");
  Truncate(f, 1);
  EXPECT_EQ(Stat(a), (DirStat{2, 2 * k4K, 2}));
  EXPECT_EQ(Stat(c), (DirStat{1, k4K, 1}));
  ExpectClean();

  // Down to one name: that directory becomes the parent and alone is charged.
  ASSERT_OK(m_->Unlink(Context::Root(), a, "f"));
  ASSERT_OK(m_->Unlink(Context::Root(), a, "f3"));
  Ino ino = 0;
  Attr attr;
  ASSERT_OK(m_->Unlink(Context::Root(), c, "f2"));
  ASSERT_OK(m_->Lookup(Context::Root(), b, "f1", &ino, &attr));
  EXPECT_EQ(attr.nlink, 1u);
  EXPECT_EQ(attr.parent, b);
  WriteAt(f, 0, 8192);
  EXPECT_EQ(Stat(a), (DirStat{0, 0, 0}));
  EXPECT_EQ(Stat(b), (DirStat{8192, 2 * k4K, 1}));
  EXPECT_EQ(Stat(c), (DirStat{0, 0, 0}));
  // A rename replacing one name of a linked file drops that name only.
  Link(f, c, "again");
  Ino other = Make(a, "other", S_IFREG | 0644);
  WriteAt(other, 0, 1);
  Rename(a, "other", c, "again");
  EXPECT_EQ(Stat(c), (DirStat{1, k4K, 1}));
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &attr));
  EXPECT_EQ(attr.nlink, 1u);
  EXPECT_EQ(attr.parent, b);
  for (Ino d : {kRootIno, a, b, c}) EXPECT_EQ(Stat(d), Walk(d)) << "directory " << d;
  ExpectClean();
}

TEST_P(DirStatsTest, TheTrashHoldsTheShareOfWhatItHolds) {
  Format f;
  f.name = "dirstats";
  f.uuid = NewUuid();
  f.trash_days = 1;
  ASSERT_OK(m_->Init(f, true));
  Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  Ino file = Make(a, "f", S_IFREG | 0644);
  WriteAt(file, 0, 3000);
  ASSERT_OK(m_->Unlink(Context::Root(), a, "f"));
  EXPECT_EQ(Stat(a), (DirStat{0, 0, 0}));
  std::vector<Entry> hours;
  ASSERT_OK(m_->Readdir(Context::Root(), kTrashIno, false, &hours));
  ASSERT_EQ(hours.size(), 1u);
  EXPECT_EQ(Stat(kTrashIno), (DirStat{0, 0, 1}));
  EXPECT_EQ(Stat(hours[0].ino), (DirStat{3000, k4K, 1}));
  Context purge = Context::Root();
  purge.no_trash = true;
  std::vector<Entry> in_hour;
  ASSERT_OK(m_->Readdir(Context::Root(), hours[0].ino, false, &in_hour));
  ASSERT_EQ(in_hour.size(), 1u);
  ASSERT_OK(m_->Unlink(purge, hours[0].ino, in_hour[0].name));
  EXPECT_EQ(Stat(hours[0].ino), (DirStat{0, 0, 0}));
  ExpectClean();
}

// Four threads, two clients, random operations over three directories:
// once both clients flushed, every directory's statistics are exact.
TEST_P(DirStatsTest, ExactUnderFourThreadsOfTwoClientsOnceFlushed) {
  auto other = OpenClient();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->Load().ok());
  ASSERT_OK(other->NewSession(SessionInfo{}));
  std::vector<Ino> dirs;
  for (int i = 0; i < 3; ++i) dirs.push_back(Make(kRootIno, "d" + std::to_string(i), S_IFDIR | 0777));
  constexpr int kThreads = 4, kOps = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Meta* m = t % 2 == 0 ? m_.get() : other.get();
      std::mt19937 rng(1234 + t);
      const Context root = Context::Root();
      auto dir = [&] { return dirs[rng() % dirs.size()]; };
      auto name = [&] { return "n" + std::to_string(rng() % 12); };  // shared names: collisions on purpose
      for (int i = 0; i < kOps; ++i) {
        Ino ino = 0;
        Attr attr;
        Ino d = dir();
        std::string n = name();
        switch (rng() % 8) {
          case 0:
          case 1:
            (void)m->Mknod(root, d, n, S_IFREG | 0644, 0, 0, "", &ino, &attr);
            break;
          case 2: {  // write: extend by up to 64 KiB
            if (!m->Lookup(root, d, n, &ino, &attr).ok() || !attr.IsFile()) break;
            auto id = m->NewSliceId();
            if (!id.ok()) break;
            uint32_t len = 1 + rng() % 65536;
            (void)m->Write(root, ino, 0, chunk::Slice{uint32_t(attr.length % 1000000), *id, len, 0, len}, Now(),
                           &attr);
            break;
          }
          case 3:
            if (m->Lookup(root, d, n, &ino, &attr).ok() && attr.IsFile())
              (void)m->Truncate(root, ino, rng() % 20000, true, &attr);
            break;
          case 4:
            (void)m->Rename(root, d, n, dir(), name(), rng() % 4 == 0 ? kRenameExchange : 0, &ino, &attr);
            break;
          case 5:
            if (m->Lookup(root, d, n, &ino, &attr).ok() && attr.IsFile()) (void)m->Link(root, ino, dir(), name(), &attr);
            break;
          case 6:
            (void)m->Unlink(root, d, n);
            break;
          case 7:
            (void)m->Mknod(root, d, n + "s", S_IFDIR | 0755, 0, 0, "", &ino, &attr);
            (void)m->Rmdir(root, dir(), name() + "s");
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_OK(other->FlushDirStats());
  ASSERT_OK(m_->FlushDirStats());
  for (Ino d : dirs) {
    EXPECT_EQ(Stat(d), Walk(d)) << "directory " << d;
    EXPECT_EQ(Stat(d, other.get()), Walk(d)) << "directory " << d << ", seen by the other client";
  }
  ExpectClean();
  ExpectClean(other.get());
}

// A client that dies loses its unflushed changes; damaged records are
// reported by fsck and recomputed by --repair.
TEST_P(DirStatsTest, FsckFindsWrongStatisticsAndRepairRecomputesThem) {
  Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  Ino b = Make(kRootIno, "b", S_IFDIR | 0755);
  Ino f = Make(a, "f", S_IFREG | 0644);
  WriteAt(f, 0, 7000);
  Link(f, b, "f");
  Ino g = Make(b, "g", S_IFREG | 0644);
  ASSERT_OK(m_->FlushDirStats());
  const DirStat want_a = Stat(a), want_b = Stat(b), want_root = Stat(kRootIno);
  // What a crash between flushes leaves behind, and worse: wrong values, a
  // record of a directory that does not exist, wrong parent records.
  ASSERT_OK(m_->WriteTree([&](TreeWriter& w) -> Status {
    RETURN_IF_ERROR(w.PutDirStat(a, DirStat{1, 2, 3}));
    RETURN_IF_ERROR(w.PutDirStat(kRootIno, DirStat{}));
    RETURN_IF_ERROR(w.PutDirStat(999999, DirStat{5, 5, 5}));
    RETURN_IF_ERROR(w.PutParents(f, {{a, 1}}));
    return w.PutParents(g, {{b, 1}, {a, 1}});
  }));
  auto problems = Problems();
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_EQ(problems.size(), 5u) << all;
  EXPECT_NE(all.find("directory " + std::to_string(a) + ":"), std::string::npos) << all;
  EXPECT_NE(all.find("999999"), std::string::npos) << all;

  std::vector<std::string> changes;
  ASSERT_OK(m_->Repair(&changes));
  EXPECT_EQ(changes.size(), 5u);
  ExpectClean();
  EXPECT_EQ(Stat(a), want_a);
  EXPECT_EQ(Stat(b), want_b);
  EXPECT_EQ(Stat(kRootIno), want_root);
  // The parent records work again: a write charges both directories.
  WriteAt(f, 0, 9000);
  EXPECT_EQ(Stat(a), (DirStat{9000, 3 * k4K, 1}));
  EXPECT_EQ(Stat(b), (DirStat{9000, 3 * k4K, 2}));
}

TEST_P(DirStatsTest, LoadDerivesStatisticsAndParentRecords) {
  Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  Ino b = Make(a, "b", S_IFDIR | 0755);
  Ino f = Make(b, "f", S_IFREG | 0644);
  WriteAt(f, 0, 12345);
  Link(f, a, "f-link");
  Link(f, kRootIno, "f-link2");
  Ino g = Make(kRootIno, "g", S_IFREG | 0644);
  WriteAt(g, 0, 1);
  std::vector<std::string> lines;
  DumpStats stats;
  ASSERT_OK(Dump(m_.get(), DumpOptions{}, [&](std::string_view l) {
    lines.emplace_back(l);
    return Status::OK();
  }, &stats));
  auto dst = OpenClient(FreshUrl(7));
  ASSERT_NE(dst, nullptr);
  size_t next = 0;
  Format format;
  LoadOptions lo;
  lo.batch_records = 2;
  ASSERT_OK(Load(dst.get(), lo, [&](std::string* line) -> Result<bool> {
    if (next == lines.size()) return false;
    *line = lines[next++];
    return true;
  }, &stats, &format));
  ASSERT_TRUE(dst->Load().ok());
  for (Ino d : {kRootIno, a, b}) EXPECT_EQ(Stat(d, dst.get()), Stat(d)) << "directory " << d;
  EXPECT_EQ(Stat(kRootIno, dst.get()), (DirStat{12346, 5 * k4K, 3}));
  ExpectClean(dst.get());
  // The loaded parent records are live: a write charges the three directories.
  ASSERT_OK(dst->NewSession(SessionInfo{}));
  WriteAt(f, 0, 20000, dst.get());
  EXPECT_EQ(Stat(a, dst.get()), (DirStat{20000, 5 * k4K, 2}));
  EXPECT_EQ(Stat(b, dst.get()), (DirStat{20000, 5 * k4K, 1}));
  EXPECT_EQ(Stat(kRootIno, dst.get()), (DirStat{20001, 6 * k4K, 3}));
}

// Summarize (tessera summary): totals from the statistics, rows biggest
// first down to the depth, the rest folded; big directories' files as one row.
TEST_P(DirStatsTest, SummaryAddsUpTheTreeFromTheStatistics) {
  Ino top = Make(kRootIno, "top", S_IFDIR | 0755);
  Ino big = Make(top, "big", S_IFDIR | 0755);
  Ino deep = Make(big, "deep", S_IFDIR | 0755);
  Ino deeper = Make(deep, "deeper", S_IFDIR | 0755);
  for (int i = 0; i < 5; ++i) WriteAt(Make(deeper, "x" + std::to_string(i), S_IFREG | 0644), 0, 10000);
  Ino small = Make(top, "small", S_IFDIR | 0755);
  WriteAt(Make(small, "s", S_IFREG | 0644), 0, 1);
  Ino f = Make(top, "f", S_IFREG | 0644);
  WriteAt(f, 0, 20000);
  Link(f, big, "f-again");  // two names: counted twice
  Make(top, "empty-dir", S_IFDIR | 0755);
  Make(top, "sym", S_IFLNK | 0777, nullptr, "f");

  SummaryOptions opts;
  opts.depth = 1;
  opts.entries = 3;
  SummaryNode n;
  ASSERT_OK(Summarize(m_.get(), top, "top", opts, &n));
  EXPECT_EQ(n.usage.dirs, 6);   // top, big, deep, deeper, small, empty-dir
  EXPECT_EQ(n.usage.files, 9);  // x0..x4, s, f, f-again, sym
  EXPECT_EQ(n.usage.length, 5 * 10000 + 1 + 2 * 20000);
  EXPECT_EQ(n.usage.space, (5 * 3 + 1 + 2 * 5) * k4K);
  ASSERT_EQ(n.children.size(), 4u);  // 3 biggest + the rest folded
  EXPECT_EQ(n.children[0].name, "big");
  EXPECT_EQ(n.children[0].usage.files, 6);
  EXPECT_EQ(n.children[0].usage.dirs, 3);
  EXPECT_TRUE(n.children[0].children.empty()) << "depth 1: no rows below the first level";
  EXPECT_EQ(n.children[1].name, "f");
  EXPECT_EQ(n.children[1].usage.space, 5 * k4K);
  EXPECT_EQ(n.children[2].name, "small");
  EXPECT_EQ(n.children[3].ino, 0u);
  EXPECT_EQ(n.children[3].name, "(2 more)");
  EXPECT_EQ(n.children[3].usage.dirs, 1);
  EXPECT_EQ(n.children[3].usage.files, 1);

  // A directory with more entries than file_rows_limit: its files are one row.
  opts.file_rows_limit = 2;
  opts.depth = 4;
  opts.entries = 10;
  ASSERT_OK(Summarize(m_.get(), top, "top", opts, &n));
  const SummaryNode* d = &n;
  for (const char* name : {"big", "deep", "deeper"}) {
    auto it = std::find_if(d->children.begin(), d->children.end(), [&](const SummaryNode& c) { return c.name == name; });
    ASSERT_NE(it, d->children.end()) << name;
    d = &*it;
  }
  ASSERT_EQ(d->children.size(), 1u);
  EXPECT_EQ(d->children[0].name, "(5 files)");
  EXPECT_EQ(d->children[0].usage.length, 50000);
  // A file summarises as itself.
  ASSERT_OK(Summarize(m_.get(), f, "f", opts, &n));
  EXPECT_FALSE(n.dir);
  EXPECT_EQ(n.usage.files, 1);
  EXPECT_EQ(n.usage.length, 20000);
  (void)deep;
  (void)small;
}


// Quota records (meta.h, "Quotas"): kept by every engine; usage added by
// clients at once, exactly.
TEST_P(DirStatsTest, QuotaRecordsKeepLimitsAndAddUsageExactly) {
  const Ino d = Make(kRootIno, "q", S_IFDIR | 0755);
  const QuotaKey dir{QuotaKind::kDir, d}, user{QuotaKind::kUser, 1000}, group{QuotaKind::kGroup, 50};
  ASSERT_OK(m_->SetQuota(dir, Quota{10 << 20, 100, 4096, 3}, true));
  ASSERT_OK(m_->SetQuota(user, Quota{0, 5, 0, 0}, true));
  // A change of limits keeps the usage.
  ASSERT_OK(m_->SetQuota(dir, Quota{20 << 20, 200, 999, 999}, false));
  std::vector<std::pair<QuotaKey, Quota>> all;
  ASSERT_OK(m_->ListQuotas(&all));
  std::map<QuotaKey, Quota> got(all.begin(), all.end());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[dir].max_space, 20 << 20);
  EXPECT_EQ(got[dir].max_inodes, 200);
  EXPECT_EQ(got[dir].used_space, 4096);
  EXPECT_EQ(got[dir].used_inodes, 3);
  EXPECT_EQ(got[user].max_inodes, 5);

  // Two clients, four threads, adding at once; one add to a quota that does
  // not exist (ignored, not created).
  auto second = OpenClient();
  ASSERT_NE(second, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Meta* m = t % 2 ? second.get() : m_.get();
      for (int i = 0; i < 50; ++i)
        EXPECT_OK(m->AddQuotaUsage({{dir, QuotaUsage{4096, 1}}, {user, QuotaUsage{-1, 2}}, {group, QuotaUsage{7, 7}}}));
    });
  for (auto& t : threads) t.join();
  ASSERT_OK(m_->ListQuotas(&all));
  got = std::map<QuotaKey, Quota>(all.begin(), all.end());
  ASSERT_EQ(got.size(), 2u) << "an add created a quota";
  EXPECT_EQ(got[dir].used_space, 4096 + 200 * 4096);
  EXPECT_EQ(got[dir].used_inodes, 3 + 200);
  EXPECT_EQ(got[user].used_space, -200);
  EXPECT_EQ(got[user].used_inodes, 400);

  ASSERT_OK(m_->DeleteQuota(user));
  EXPECT_EQ(m_->DeleteQuota(user).code(), ENOENT);
  ASSERT_OK(second->ListQuotas(&all));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, dir);
}


// Clones (meta.h, Meta::Clone) on every engine: a tree copied by metadata
// shares the source's slices; removing either side frees none of the
// other's; the last copy frees them; compaction of a copy releases its
// references without deleting what the other holds; statistics stay exact.
class CloneTest : public DirStatsTest {
 protected:
  std::set<uint64_t> SliceIds(Ino ino) {
    std::set<uint64_t> ids;
    std::vector<uint32_t> chunks;
    EXPECT_OK(m_->ListChunks(ino, 0, 1000, &chunks));
    for (uint32_t c : chunks) {
      std::vector<chunk::Slice> slices;
      EXPECT_OK(m_->Read(ino, c, &slices));
      for (const auto& s : slices)
        if (s.id != 0) ids.insert(s.id);
    }
    return ids;
  }
  // Runs the background deletion a few rounds; returns the slices deleted.
  std::set<uint64_t> Cleanup() {
    std::set<uint64_t> deleted;
    for (int round = 0; round < 5; ++round) {
      auto n = m_->CleanupDeleted(
          [&](uint64_t id, uint32_t) {
            deleted.insert(id);
            return Status::OK();
          },
          1000);
      EXPECT_TRUE(n.ok()) << n.status().ToString();
    }
    return deleted;
  }
  Ino Find(Ino parent, const std::string& name) {
    Ino ino = 0;
    Attr attr;
    EXPECT_OK(m_->Lookup(Context::Root(), parent, name, &ino, &attr));
    return ino;
  }
  void RemoveTree(Ino parent, const std::string& name) {
    Ino ino = Find(parent, name);
    Attr attr;
    ASSERT_OK(m_->GetAttr(Context::Root(), ino, &attr));
    if (!attr.IsDir()) {
      ASSERT_OK(m_->Unlink(Context::Root(), parent, name));
      return;
    }
    std::vector<Entry> entries;
    ASSERT_OK(m_->Readdir(Context::Root(), ino, false, &entries));
    for (const auto& e : entries) RemoveTree(ino, e.name);
    ASSERT_OK(m_->Rmdir(Context::Root(), parent, name));
  }
};

INSTANTIATE_TEST_SUITE_P(Engines, CloneTest, ::testing::Values("memory", "sqlite3", "postgres", "redis"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(CloneTest, SharesSlicesUntilTheLastCopyGoes) {
  const Ino a = Make(kRootIno, "a", S_IFDIR | 0755);
  const Ino sub = Make(a, "sub", S_IFDIR | 0750);
  const Ino f = Make(a, "f", S_IFREG | 0644);
  WriteAt(f, 0, 100000);
  WriteAt(f, 50000, 1000);  // a second slice over the first, same chunk
  WriteAt(f, chunk::kChunkSize + 10, 5000);
  const Ino g = Make(sub, "g", S_IFREG | 0600);
  WriteAt(g, 0, 4096);
  Make(a, "l", S_IFLNK | 0777, nullptr, "f");
  ASSERT_OK(m_->SetXattr(Context::Root(), f, "user.k", "v", 0));
  std::set<uint64_t> source = SliceIds(f);
  for (uint64_t id : SliceIds(g)) source.insert(id);
  ASSERT_EQ(source.size(), 4u);

  Ino b = 0;
  Attr battr;
  uint64_t n = 0;
  ASSERT_OK(m_->Clone(Context::Root(), a, kRootIno, "b", 022, false, &b, &battr, &n));
  EXPECT_EQ(n, 5u);
  EXPECT_TRUE(battr.IsDir());
  EXPECT_EQ(battr.nlink, 3u);
  EXPECT_EQ(m_->Clone(Context::Root(), a, kRootIno, "b", 022, false, &b, &battr, &n).code(), EEXIST);
  EXPECT_EQ(m_->Clone(Context::Root(), a, sub, "inside", 022, false, &b, &battr, &n).code(), EINVAL);
  const Ino bf = Find(b, "f"), bg = Find(Find(b, "sub"), "g");
  std::set<uint64_t> copy = SliceIds(bf);
  for (uint64_t id : SliceIds(bg)) copy.insert(id);
  EXPECT_EQ(copy, source) << "the copy does not name the same slices";
  Attr fa, bfa;
  ASSERT_OK(m_->GetAttr(Context::Root(), f, &fa));
  ASSERT_OK(m_->GetAttr(Context::Root(), bf, &bfa));
  EXPECT_EQ(bfa.length, fa.length);
  std::string v, target;
  ASSERT_OK(m_->GetXattr(Context::Root(), bf, "user.k", &v));
  EXPECT_EQ(v, "v");
  ASSERT_OK(m_->ReadLink(Context::Root(), Find(b, "l"), &target));
  EXPECT_EQ(target, "f");
  ASSERT_OK(m_->FlushDirStats());
  EXPECT_EQ(Stat(b), Stat(a));
  EXPECT_EQ(Stat(kRootIno), Walk(kRootIno));
  ExpectClean();

  // A write to the copy is its own; compaction of the copy replaces its
  // slices with a new one and releases its references: only the slice the
  // copy alone held is deleted.
  WriteAt(bf, 0, 10);
  std::set<uint64_t> own;
  for (uint64_t x : SliceIds(bf))
    if (!source.count(x)) own.insert(x);
  ASSERT_EQ(own.size(), 1u);
  std::vector<chunk::Slice> expected;
  ASSERT_OK(m_->Read(bf, 0, &expected));
  auto id = m_->NewSliceId();
  ASSERT_TRUE(id.ok());
  ASSERT_OK(m_->CompactChunk(bf, 0, expected, {chunk::Slice{0, *id, 100000, 0, 100000}}));
  EXPECT_EQ(Cleanup(), own) << "compacting the copy deleted shared slices";
  EXPECT_EQ(SliceIds(f).size(), 3u);

  // The source goes: only what nobody else holds is deleted (f's first
  // chunk, which the copy no longer names after its compaction).
  RemoveTree(kRootIno, "a");
  std::set<uint64_t> deleted = Cleanup();
  std::set<uint64_t> still = SliceIds(bf);
  for (uint64_t x : SliceIds(bg)) still.insert(x);
  for (uint64_t x : still) EXPECT_EQ(deleted.count(x), 0u) << "slice " << x << " of the copy was deleted";
  EXPECT_EQ(deleted.size(), 2u);  // the two slices of f's first chunk
  // The last copy goes: everything else.
  RemoveTree(kRootIno, "b");
  deleted = Cleanup();
  EXPECT_EQ(deleted, still);
  ASSERT_OK(m_->FlushDirStats());
  ExpectClean();
}

// fsck checks the slices' holders: a reference record that undercounts
// its chunk lists (removing one holder would delete the others' data), and
// a slice queued for deletion while a file holds it, are found, repaired
// (the queued slice is taken out of the queue), and no data is deleted.
TEST_P(CloneTest, FsckFindsAndRepairsSliceHolders) {
  const Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  WriteAt(f, 0, 4096);
  Ino g = 0;
  Attr attr;
  ASSERT_OK(m_->Clone(Context::Root(), f, kRootIno, "g", 022, false, &g, &attr, nullptr));
  std::vector<chunk::Slice> slices;
  ASSERT_OK(m_->Read(f, 0, &slices));
  ASSERT_EQ(slices.size(), 1u);
  const chunk::Slice s = slices[0];
  const std::string name = fmt::format("slice {}_{}", s.id, s.size);
  ASSERT_OK(m_->FlushDirStats());
  ExpectClean();

  auto problems = [&] {
    std::string all;
    for (const auto& p : Problems()) all += p + "\n";
    return all;
  };
  auto repair = [&] {
    std::vector<std::string> changes;
    EXPECT_OK(m_->Repair(&changes));
    std::string all;
    for (const auto& c : changes) all += c + "\n";
    return all;
  };
  // The record lost: two lists hold the slice, the record says one.
  ASSERT_OK(m_->WriteTree([&](TreeWriter& w) { return w.PutSliceRef(s.id, s.size, 0); }));
  EXPECT_NE(problems().find(name + ": held by 2 chunk list(s), its reference record says 1"), std::string::npos)
      << problems();
  EXPECT_NE(repair().find(name + ": reference record 1 -> 2 holder(s)"), std::string::npos);
  ExpectClean();

  // Lost again, and one holder goes: the slice is queued while f holds it.
  ASSERT_OK(m_->WriteTree([&](TreeWriter& w) { return w.PutSliceRef(s.id, s.size, 0); }));
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "g"));
  for (int round = 0; round < 3; ++round)  // a deleter that fails (an error returned): the queue keeps it
    (void)m_->CleanupDeleted([](uint64_t, uint32_t) { return Status::Err(EIO, "store down"); }, 1000);
  EXPECT_NE(problems().find(name + ": queued for deletion while 1 chunk list(s) hold it"), std::string::npos)
      << problems();
  EXPECT_NE(repair().find(name + ": taken out of the deletion queue"), std::string::npos);
  ExpectClean();
  EXPECT_TRUE(Cleanup().empty()) << "f's data was deleted after the repair";

  // A record nobody holds (its objects would never be reclaimed).
  ASSERT_OK(m_->WriteTree([&](TreeWriter& w) { return w.PutSliceRef(s.id + 1000, 4096, 2); }));
  EXPECT_NE(problems().find(fmt::format("slice {}_4096: a reference record (3) but no chunk list holds it", s.id + 1000)),
            std::string::npos)
      << problems();
  EXPECT_NE(repair().find("removed its reference record"), std::string::npos);
  ExpectClean();
  EXPECT_TRUE(repair().empty()) << "a second repair changed something";
}

TEST_P(CloneTest, ChecksPermissionsAndKeepsOwnersOnlyForRoot) {
  Context user;
  user.uid = 1000;
  user.gid = 1000;
  const Ino home = Make(kRootIno, "home", S_IFDIR | 0777);
  const Ino locked = Make(kRootIno, "locked", S_IFDIR | 0755);
  const Ino secret = Make(kRootIno, "secret", S_IFREG | 0600);
  WriteAt(secret, 0, 100);
  Ino ino = 0;
  Attr attr;
  EXPECT_EQ(m_->Clone(user, secret, home, "mine", 022, false, &ino, &attr, nullptr).code(), EACCES);
  EXPECT_EQ(m_->Clone(user, home, locked, "x", 022, false, &ino, &attr, nullptr).code(), EACCES);
  EXPECT_EQ(m_->Clone(user, home, home, "x", 022, true, &ino, &attr, nullptr).code(), EPERM);
  const Ino pub = Make(kRootIno, "pub", S_IFREG | 0644);
  ASSERT_OK(m_->Clone(user, pub, home, "mine", 077, false, &ino, &attr, nullptr));
  EXPECT_EQ(attr.uid, 1000u);
  EXPECT_EQ(attr.mode & 07777, 0600u);
  // No privilege passes to a copy the caller owns: device nodes, capabilities.
  Ino dev = 0;
  ASSERT_OK(m_->Mknod(Context::Root(), kRootIno, "dev", S_IFCHR | 0666, 0, 0x0103, "", &dev, &attr));
  EXPECT_EQ(m_->Clone(user, dev, home, "mydev", 022, false, &ino, &attr, nullptr).code(), EPERM);
  ASSERT_OK(m_->SetXattr(Context::Root(), pub, "security.capability", "cap", 0));
  ASSERT_OK(m_->SetXattr(Context::Root(), pub, "user.note", "n", 0));
  ASSERT_OK(m_->Clone(user, pub, home, "mine2", 022, false, &ino, &attr, nullptr));
  std::string v;
  EXPECT_EQ(m_->GetXattr(Context::Root(), ino, "security.capability", &v).code(), ENODATA);
  ASSERT_OK(m_->GetXattr(Context::Root(), ino, "user.note", &v));
  EXPECT_EQ(v, "n");
  ASSERT_OK(m_->Clone(Context::Root(), secret, home, "kept", 022, true, &ino, &attr, nullptr));
  EXPECT_EQ(attr.uid, 0u);
  EXPECT_EQ(attr.mode & 07777, 0600u);
}


// A dump of a volume with clones loads with the slices' reference counts:
// removing the source in the loaded volume deletes nothing the copy holds.
TEST_P(CloneTest, LoadKeepsTheSharing) {
  const Ino f = Make(kRootIno, "f", S_IFREG | 0644);
  WriteAt(f, 0, 5000);
  WriteAt(f, chunk::kChunkSize, 5000);
  Ino c = 0;
  Attr attr;
  ASSERT_OK(m_->Clone(Context::Root(), f, kRootIno, "copy", 022, false, &c, &attr, nullptr));
  std::vector<std::string> lines;
  DumpStats stats;
  ASSERT_OK(Dump(m_.get(), DumpOptions{}, [&](std::string_view l) {
    lines.emplace_back(l);
    return Status::OK();
  }, &stats));
  m_ = OpenClient(FreshUrl(7));
  ASSERT_NE(m_, nullptr);
  size_t next = 0;
  Format format;
  ASSERT_OK(Load(m_.get(), LoadOptions{}, [&](std::string* line) -> Result<bool> {
    if (next == lines.size()) return false;
    *line = lines[next++];
    return true;
  }, &stats, &format));
  ASSERT_TRUE(m_->Load().ok());
  ASSERT_OK(m_->NewSession(SessionInfo{}));
  const std::set<uint64_t> shared = SliceIds(f);
  ASSERT_EQ(shared.size(), 2u);
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "f"));
  EXPECT_TRUE(Cleanup().empty()) << "the loaded volume deleted the copy's slices";
  ASSERT_OK(m_->Unlink(Context::Root(), kRootIno, "copy"));
  EXPECT_EQ(Cleanup(), shared);
}

}  // namespace
}  // namespace tessera::meta
