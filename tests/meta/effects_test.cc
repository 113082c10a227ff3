// What namespace changes report to Context::effects, on every engine: the
// attributes they gave the parent directories, exactly as committed (the
// client answers the kernel's next GETATTR of the parent from them, see
// vfs/dir_attr_cache.h), and the other inodes they changed or removed.
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meta/meta.h"
#include "two_clients.h"

namespace tessera::meta {
namespace {

class EffectsTest : public testing::TwoClientsTest {
 protected:
  EffectsTest() : TwoClientsTest("effects") {}

  // ctx with a fresh report to fill.
  Context Reporting() {
    effects_ = Context::Effects{};
    Context ctx = Context::Root();
    ctx.effects = &effects_;
    return ctx;
  }

  // The report names exactly `dirs` as parents, each with the attributes
  // the engine now holds for it.
  void ExpectParents(const std::vector<Ino>& dirs) {
    ASSERT_TRUE(effects_.reported);
    std::vector<Ino> got;
    for (const auto& [ino, attr] : effects_.parents) {
      got.push_back(ino);
      Attr now;
      ASSERT_TRUE(a_->GetAttr(Context::Root(), ino, &now).ok());
      EXPECT_EQ(attr.mode, now.mode) << "inode " << ino;
      EXPECT_EQ(attr.nlink, now.nlink) << "inode " << ino;
      EXPECT_EQ(attr.uid, now.uid) << "inode " << ino;
      EXPECT_EQ(attr.parent, now.parent) << "inode " << ino;
      EXPECT_EQ(attr.mtime, now.mtime) << "inode " << ino;
      EXPECT_EQ(attr.ctime, now.ctime) << "inode " << ino;
    }
    std::vector<Ino> want = dirs;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
  }
  bool Other(Ino ino) const {
    return std::find(effects_.others.begin(), effects_.others.end(), ino) != effects_.others.end();
  }

  Context::Effects effects_;
};

TEST_P(EffectsTest, NamespaceChangesReportTheirParentsAsCommitted) {
  const Context root = Context::Root();
  Ino d = 0, e = 0, f = 0, g = 0, sub = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(Reporting(), kRootIno, "d", S_IFDIR | 0755, 0, 0, "", &d, &attr).ok());
  ExpectParents({kRootIno});
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "e", S_IFDIR | 0755, 0, 0, "", &e, &attr).ok());
  ASSERT_TRUE(a_->Mknod(Reporting(), d, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  ExpectParents({d});
  ASSERT_TRUE(a_->Mknod(Reporting(), d, "sub", S_IFDIR | 0755, 0, 0, "", &sub, &attr).ok());
  ExpectParents({d});
  EXPECT_EQ(effects_.parents[0].second.nlink, 3u);  // d gained a subdirectory

  ASSERT_TRUE(a_->Link(Reporting(), f, e, "f-link", &attr).ok());
  ExpectParents({e});

  // Across directories: both parents, and the moved inode.
  Ino moved = 0;
  ASSERT_TRUE(a_->Rename(Reporting(), d, "sub", e, "sub", 0, &moved, &attr).ok());
  ExpectParents({d, e});
  EXPECT_TRUE(Other(sub));

  // Over an existing name: the replaced inode too.
  ASSERT_TRUE(a_->Mknod(root, d, "g", S_IFREG | 0644, 0, 0, "", &g, &attr).ok());
  ASSERT_TRUE(a_->Rename(Reporting(), d, "f", d, "g", 0, &moved, &attr).ok());
  ExpectParents({d});
  EXPECT_TRUE(Other(f));
  EXPECT_TRUE(Other(g));

  // Removals also say what they removed, as it was before (for quotas).
  Attr fa;
  ASSERT_TRUE(a_->GetAttr(root, f, &fa).ok());
  ASSERT_TRUE(a_->Unlink(Reporting(), d, "g").ok());
  ExpectParents({d});
  EXPECT_EQ(effects_.removed, f);
  EXPECT_EQ(effects_.removed_attr.nlink, fa.nlink);
  EXPECT_EQ(effects_.removed_attr.uid, fa.uid);
  EXPECT_TRUE(effects_.removed_attr.IsFile());
  ASSERT_TRUE(a_->Rmdir(Reporting(), e, "sub").ok());
  ExpectParents({e});
  EXPECT_TRUE(Other(sub));
  EXPECT_EQ(effects_.removed, sub);
  EXPECT_TRUE(effects_.removed_attr.IsDir());

  Ino copy = 0;
  uint64_t entries = 0;
  ASSERT_TRUE(a_->Clone(Reporting(), e, d, "e-copy", 022, false, &copy, &attr, &entries).ok());
  ExpectParents({d});
}

TEST_P(EffectsTest, FailedOrSilentChangesReportNothing) {
  Ino d = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(Context::Root(), kRootIno, "d", S_IFDIR | 0755, 0, 0, "", &d, &attr).ok());
  Ino again = 0;
  EXPECT_EQ(a_->Mknod(Reporting(), kRootIno, "d", S_IFDIR | 0755, 0, 0, "", &again, &attr).code(), EEXIST);
  EXPECT_FALSE(effects_.reported);
  EXPECT_EQ(a_->Unlink(Reporting(), d, "nothing").code(), ENOENT);
  EXPECT_FALSE(effects_.reported);
  // A context without a report is fine (most callers).
  Ino f = 0;
  EXPECT_TRUE(a_->Mknod(Context::Root(), d, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, EffectsTest, ::testing::Values("memory", "sqlite3", "redis", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tessera::meta
