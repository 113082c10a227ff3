// DirCache (vfs/dir_cache.h): a change's report is kept only when
// nothing else touched the directory between its Begin and End, reported
// changes and losses drop entries, and nothing is served while off.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "vfs/dir_cache.h"

namespace tessera::vfs {
namespace {

using meta::Attr;
using meta::Ino;

Attr DirAttr(uint32_t nlink) {
  Attr a;
  a.mode = S_IFDIR | 0755;
  a.nlink = nlink;
  return a;
}

meta::Context::Effects Report(Ino dir, uint32_t nlink, std::vector<Ino> others = {}) {
  meta::Context::Effects e;
  e.parents.emplace_back(dir, DirAttr(nlink));
  e.others = std::move(others);
  e.reported = true;
  return e;
}

TEST(DirCacheTest, OffUntilEnabled) {
  DirCache c;
  const auto t = c.Begin(5);
  const auto e = Report(5, 3);
  c.End(t, &e);
  Attr a;
  EXPECT_FALSE(c.Get(5, &a));
  c.Enable(0);
  c.End(t, &e);  // begun while off: not kept
  EXPECT_FALSE(c.Get(5, &a));
  const auto t2 = c.Begin(5);
  c.End(t2, &e);
  ASSERT_TRUE(c.Get(5, &a));
  EXPECT_EQ(a.nlink, 3u);
}

TEST(DirCacheTest, KeepsTheReportOfALoneChange) {
  DirCache c;
  c.Enable(0);
  auto t = c.Begin(5, 6);
  meta::Context::Effects e = Report(5, 3);
  e.parents.emplace_back(6, DirAttr(4));
  c.End(t, &e);
  Attr a;
  ASSERT_TRUE(c.Get(5, &a));
  EXPECT_EQ(a.nlink, 3u);
  ASSERT_TRUE(c.Get(6, &a));
  EXPECT_EQ(a.nlink, 4u);
  // A failed change drops what it touched.
  t = c.Begin(5);
  c.End(t, nullptr);
  EXPECT_FALSE(c.Get(5, &a));
  EXPECT_TRUE(c.Get(6, &a));
}

TEST(DirCacheTest, OverlappingChangesOfADirectoryKeepNeither) {
  DirCache c;
  c.Enable(0);
  Attr a;
  // Either could have committed last: both orders of ending drop it.
  for (bool first_ends_first : {true, false}) {
    const auto t1 = c.Begin(5);
    const auto t2 = c.Begin(5);
    const auto e1 = Report(5, 3), e2 = Report(5, 4);
    if (first_ends_first) {
      c.End(t1, &e1);
      c.End(t2, &e2);
    } else {
      c.End(t2, &e2);
      c.End(t1, &e1);
    }
    EXPECT_FALSE(c.Get(5, &a)) << first_ends_first;
  }
}

TEST(DirCacheTest, OtherClientsChangesAndLossesDrop) {
  DirCache c;
  c.Enable(0);
  Attr a;
  // A change reported while ours was in flight: ours may be older.
  auto t = c.Begin(5);
  c.Changed({meta::Change{0, "", 5}});
  auto e = Report(5, 3);
  c.End(t, &e);
  EXPECT_FALSE(c.Get(5, &a));
  // An entry change drops its directory.
  t = c.Begin(5);
  c.End(t, &e);
  ASSERT_TRUE(c.Get(5, &a));
  c.Changed({meta::Change{5, "x", 0}});
  EXPECT_FALSE(c.Get(5, &a));
  // A loss drops everything, refuses changes in flight, and waits.
  t = c.Begin(5);
  c.End(t, &e);
  auto t2 = c.Begin(7);
  c.Lost(60000);
  EXPECT_FALSE(c.Get(5, &a));
  const auto e7 = Report(7, 2);
  c.End(t2, &e7);
  t2 = c.Begin(7);
  c.End(t2, &e7);
  EXPECT_FALSE(c.Get(7, &a));  // within the brief period after the loss
}

TEST(DirCacheTest, OthersUnknownAndTrashAreNotKept) {
  DirCache c;
  c.Enable(0);
  Attr a;
  auto t = c.Begin(5);
  auto e = Report(5, 3);
  c.End(t, &e);
  ASSERT_TRUE(c.Get(5, &a));
  // A removed or moved directory named in `others` goes.
  t = c.Begin(6);
  auto e6 = Report(6, 2, {5});
  c.End(t, &e6);
  EXPECT_FALSE(c.Get(5, &a));
  EXPECT_TRUE(c.Get(6, &a));
  // A parent not announced at Begin is dropped, not kept.
  t = c.Begin(8);
  auto e9 = Report(9, 2);
  c.End(t, &e9);
  EXPECT_FALSE(c.Get(9, &a));
  // The engine did not report: everything goes.
  t = c.Begin(8);
  meta::Context::Effects silent;
  c.End(t, &silent);
  EXPECT_FALSE(c.Get(6, &a));
  // Trash directories change unreported.
  t = c.Begin(meta::kTrashIno + 5);
  auto et = Report(meta::kTrashIno + 5, 2);
  c.End(t, &et);
  EXPECT_FALSE(c.Get(meta::kTrashIno + 5, &a));
}

// mkdir of 7 in 5, with 7's attributes.
void MakeDir(DirCache& c, Ino parent, Ino dir) {
  const auto t = c.Begin(parent);
  DirCache::Names n = DirCache::Names::Added(parent, "dir");
  n.made_dir = dir;
  n.made_attr = DirAttr(2);
  const auto e = Report(parent, 3);
  c.End(t, &e, n);
}

TEST(DirCacheTest, NamesOfADirectoryItMadeFollowItsChanges) {
  DirCache c;
  c.Enable(0);
  Attr a;
  MakeDir(c, 5, 7);
  ASSERT_TRUE(c.Absent(7, "x", &a));
  EXPECT_EQ(a.nlink, 2u);
  EXPECT_FALSE(c.Absent(5, "x", &a));  // 5 was not made here: unknown names
  auto t = c.Begin(7);
  auto e = Report(7, 2);
  c.End(t, &e, DirCache::Names::Added(7, "x"));
  EXPECT_FALSE(c.Absent(7, "x", &a));
  EXPECT_TRUE(c.Absent(7, "y", &a));
  // A rename within it.
  t = c.Begin(7);
  DirCache::Names mv = DirCache::Names::Removed(7, "x");
  mv.added_to = 7;
  mv.added = "y";
  c.End(t, &e, mv);
  EXPECT_TRUE(c.Absent(7, "x", &a));
  EXPECT_FALSE(c.Absent(7, "y", &a));
  t = c.Begin(7);
  c.End(t, &e, DirCache::Names::Removed(7, "y"));
  EXPECT_TRUE(c.Absent(7, "y", &a));
  EXPECT_FALSE(c.Absent(7, std::string(300, 'n'), &a));  // the engine says ENAMETOOLONG
  // A failed change, or another client's, forgets them.
  t = c.Begin(7);
  c.End(t, nullptr);
  EXPECT_FALSE(c.Absent(7, "y", &a));
  MakeDir(c, 5, 8);
  ASSERT_TRUE(c.Absent(8, "y", &a));
  c.Changed({meta::Change{8, "z", 0}});
  EXPECT_FALSE(c.Absent(8, "y", &a));
}

TEST(DirCacheTest, ADirectoryMadeWhileOthersChangedIsNotKnownEmpty) {
  DirCache c;
  c.Enable(0);
  Attr a;
  const auto t = c.Begin(5);
  c.Changed({meta::Change{0, "", 99}});  // anything: it may have been a create in the new directory
  DirCache::Names n = DirCache::Names::Added(5, "dir");
  n.made_dir = 7;
  n.made_attr = DirAttr(2);
  const auto e = Report(5, 3);
  c.End(t, &e, n);
  EXPECT_FALSE(c.Absent(7, "x", &a));
  c.Lost(0);
  MakeDir(c, 5, 8);
  ASSERT_TRUE(c.Absent(8, "x", &a));
  c.Lost(0);
  EXPECT_FALSE(c.Absent(8, "x", &a));
}

}  // namespace
}  // namespace tessera::vfs
