// Quotas in the client (vfs/quota.h) on two Vfs clients of one in-memory
// volume: creates, writes, truncates, links and renames into a quota'd tree
// fail with EDQUOT at the limit and pass again once usage goes; nested
// quotas both apply; a user quota charges only that user's files; the other
// client refuses once both synced; statfs inside the tree shows the quota.
#include "vfs/vfs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "chunk/chunk_store.h"
#include "object/object_store.h"

namespace tessera::vfs {
namespace {

using meta::kRootIno;
using meta::Quota;
using meta::QuotaKey;
using meta::QuotaKind;

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::tessera::Status _st = (expr);                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

struct Client {
  std::unique_ptr<meta::Meta> meta;
  std::unique_ptr<object::ObjectStore> objects;
  std::unique_ptr<chunk::ChunkStore> chunks;
  std::unique_ptr<Vfs> vfs;
};

class QuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = "memory://quota-test-" + std::to_string(getpid());
    auto m = meta::Open(url_);
    ASSERT_TRUE(m.ok());
    meta::Format f;
    f.name = "quota";
    f.uuid = meta::NewUuid();
    ASSERT_OK((*m)->Init(f, false));
    ASSERT_NO_FATAL_FAILURE(Connect(&a_));
    ASSERT_NO_FATAL_FAILURE(Connect(&b_));
  }
  void TearDown() override {
    b_.vfs.reset();
    a_.vfs.reset();
  }
  void Connect(Client* c) {
    auto m = meta::Open(url_);
    ASSERT_TRUE(m.ok());
    c->meta = std::move(*m);
    auto s = object::Open(object::StoreOptions{"memory", "quota-test"});
    ASSERT_TRUE(s.ok());
    c->objects = std::move(*s);
    c->chunks = std::make_unique<chunk::ChunkStore>(c->objects.get(), chunk::StoreConfig{4096});
    c->vfs = std::make_unique<Vfs>(c->meta.get(), c->chunks.get(), Config{});
    ASSERT_OK(c->vfs->Start());
  }
  // Both clients send their usage and load the engine's (what the
  // background sync does every 0.4 s).
  void SyncBoth() {
    ASSERT_OK(a_.vfs->quotas().Sync());
    ASSERT_OK(b_.vfs->quotas().Sync());
    ASSERT_OK(a_.vfs->quotas().Sync());
  }
  Status Touch(Client& c, Ino parent, const std::string& name, const Context& ctx = Context::Root()) {
    Handle* fh = nullptr;
    Ino ino = 0;
    Attr attr;
    RETURN_IF_ERROR(c.vfs->Create(ctx, parent, name, 0644, 0, O_RDWR, &fh, &ino, &attr));
    return c.vfs->Release(ctx, fh);
  }
  Ino Mkdir(Client& c, Ino parent, const std::string& name) {
    Ino ino = 0;
    Attr attr;
    Status st = c.vfs->Mkdir(Context::Root(), parent, name, 0777, 0, &ino, &attr);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return ino;
  }
  // Writes len bytes at off into parent/name (created if needed).
  Status WriteFile(Client& c, Ino parent, const std::string& name, uint64_t off, size_t len,
                   const Context& ctx = Context::Root()) {
    Handle* fh = nullptr;
    Ino ino = 0;
    Attr attr;
    Status st = c.vfs->Create(ctx, parent, name, 0644, 0, O_RDWR, &fh, &ino, &attr);
    if (!st.ok()) return st;
    std::string data(len, 'q');
    auto w = c.vfs->Write(ctx, fh, off, data.data(), data.size());
    Status rst = c.vfs->Release(ctx, fh);
    return w.ok() ? rst : w.status();
  }
  void SetQuota(const QuotaKey& k, int64_t space, int64_t inodes) {
    ASSERT_OK(a_.meta->SetQuota(k, Quota{space, inodes, 0, 0}, true));
    SyncBoth();
  }

  std::string url_;
  Client a_, b_;
};

TEST_F(QuotaTest, InodeLimitHoldsInBothClients) {
  const Ino q = Mkdir(a_, kRootIno, "q");
  SetQuota({QuotaKind::kDir, q}, 0, 4);
  ASSERT_OK(Touch(a_, q, "a1"));
  ASSERT_OK(Touch(a_, q, "a2"));
  ASSERT_OK(Touch(b_, q, "b1"));
  SyncBoth();
  ASSERT_OK(Touch(b_, q, "b2"));  // the 4th
  EXPECT_EQ(Touch(b_, q, "b3").code(), EDQUOT);
  SyncBoth();
  EXPECT_EQ(Touch(a_, q, "a3").code(), EDQUOT) << "the other client did not see the limit reached";
  Ino ino = 0;
  Attr attr;
  EXPECT_EQ(a_.vfs->Mkdir(Context::Root(), q, "d", 0755, 0, &ino, &attr).code(), EDQUOT);
  EXPECT_EQ(a_.vfs->Symlink(Context::Root(), q, "s", "x", &ino, &attr).code(), EDQUOT);
  // Outside the tree nothing is limited.
  ASSERT_OK(Touch(a_, kRootIno, "outside"));
  ASSERT_OK(a_.vfs->Unlink(Context::Root(), q, "a1"));
  ASSERT_OK(Touch(a_, q, "a3"));
  meta::StatFs fs;
  ASSERT_OK(a_.vfs->StatFS(Context::Root(), q, &fs));
  EXPECT_EQ(fs.used_inodes, 4u);
  EXPECT_EQ(fs.avail_inodes, 0u);
}

TEST_F(QuotaTest, SpaceLimitRefusesWritesTruncatesLinksAndRenames) {
  const Ino q = Mkdir(a_, kRootIno, "q");
  const Ino out = Mkdir(a_, kRootIno, "out");
  SetQuota({QuotaKind::kDir, q}, 1 << 20, 0);
  ASSERT_OK(WriteFile(a_, q, "f", 0, 512 << 10));
  EXPECT_EQ(WriteFile(a_, q, "g", 0, 600 << 10).code(), EDQUOT);
  ASSERT_OK(WriteFile(a_, q, "g", 0, 500 << 10));
  meta::StatFs fs;
  ASSERT_OK(a_.vfs->StatFS(Context::Root(), q, &fs));
  EXPECT_EQ(fs.total_space, 1u << 20);
  EXPECT_EQ(fs.avail_space, (1u << 20) - (1012u << 10));
  ASSERT_OK(a_.vfs->StatFS(Context::Root(), kRootIno, &fs));
  EXPECT_NE(fs.total_space, 1u << 20) << "the root shows a directory's quota";

  Ino f = 0;
  Attr attr;
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), q, "f", &f, &attr));
  EXPECT_EQ(a_.vfs->SetAttr(Context::Root(), f, nullptr, 0, Attr{}, true, 2 << 20, &attr).code(), EDQUOT);
  ASSERT_OK(a_.vfs->SetAttr(Context::Root(), f, nullptr, 0, Attr{}, true, 4096, &attr));  // frees 508 KiB

  ASSERT_OK(WriteFile(a_, out, "big", 0, 800 << 10));
  Ino big = 0;
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), out, "big", &big, &attr));
  EXPECT_EQ(a_.vfs->Rename(Context::Root(), out, "big", q, "big", 0).code(), EDQUOT);
  EXPECT_EQ(a_.vfs->Link(Context::Root(), big, q, "link", &attr).code(), EDQUOT);
  // A directory holding it moves as a whole.
  const Ino sub = Mkdir(a_, out, "sub");
  ASSERT_OK(a_.vfs->Rename(Context::Root(), out, "big", sub, "big", 0));
  EXPECT_EQ(a_.vfs->Rename(Context::Root(), out, "sub", q, "sub", 0).code(), EDQUOT);
  // Room made: the move passes, and moving it out gives the room back.
  ASSERT_OK(a_.vfs->Unlink(Context::Root(), q, "g"));
  ASSERT_OK(a_.vfs->Rename(Context::Root(), out, "sub", q, "sub", 0));
  EXPECT_EQ(WriteFile(a_, q, "h", 0, 300 << 10).code(), EDQUOT);
  ASSERT_OK(a_.vfs->Rename(Context::Root(), q, "sub", out, "sub", 0));
  ASSERT_OK(WriteFile(a_, q, "h", 0, 300 << 10));

  // What the client charged is what the tree holds, once sent.
  SyncBoth();
  std::vector<std::pair<QuotaKey, Quota>> all;
  ASSERT_OK(a_.meta->ListQuotas(&all));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].second.used_space, 4096 + (300 << 10));
  EXPECT_EQ(all[0].second.used_inodes, 2);
}

TEST_F(QuotaTest, NestedQuotasAndUserQuotas) {
  const Ino q = Mkdir(a_, kRootIno, "q");
  const Ino inner = Mkdir(a_, q, "inner");
  SetQuota({QuotaKind::kDir, q}, 1 << 20, 0);
  SetQuota({QuotaKind::kDir, inner}, 0, 2);
  ASSERT_OK(Touch(a_, inner, "1"));
  ASSERT_OK(Touch(a_, inner, "2"));
  EXPECT_EQ(Touch(a_, inner, "3").code(), EDQUOT);  // the inner quota's inodes
  ASSERT_OK(a_.vfs->Unlink(Context::Root(), inner, "2"));
  EXPECT_EQ(WriteFile(a_, inner, "2", 0, 2 << 20).code(), EDQUOT);  // the outer quota's space

  Context user;
  user.uid = 1000;
  user.gid = 1000;
  Attr in, attr;
  in.mode = S_IFDIR | 0777;
  const Ino home = Mkdir(a_, kRootIno, "home");
  ASSERT_OK(a_.vfs->SetAttr(Context::Root(), home, nullptr, meta::kSetMode, in, false, 0, &attr));
  SetQuota({QuotaKind::kUser, 1000}, 64 << 10, 3);
  ASSERT_OK(Touch(a_, home, "u1", user));
  ASSERT_OK(WriteFile(b_, home, "u2", 0, 60 << 10, user));
  SyncBoth();
  EXPECT_EQ(WriteFile(a_, home, "u3", 0, 8 << 10, user).code(), EDQUOT);  // u3 made, its data refused
  EXPECT_EQ(Touch(a_, home, "u4", user).code(), EDQUOT);
  ASSERT_OK(Touch(a_, home, "root-file"));  // root's files are not the user's
  // chown hands the usage over.
  Ino u2 = 0;
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), home, "u2", &u2, &attr));
  Attr owner;
  owner.uid = 0;
  ASSERT_OK(a_.vfs->SetAttr(Context::Root(), u2, nullptr, meta::kSetUid, owner, false, 0, &attr));
  ASSERT_OK(Touch(a_, home, "u4", user));
}


// Usage stays exact through changes that move none: truncates, chmod,
// utimes; and an open file whose last name went charges nothing after.
TEST_F(QuotaTest, UsageDoesNotDriftThroughAttributeChangesAndUnlinkedFiles) {
  const Ino q = Mkdir(a_, kRootIno, "q");
  SetQuota({QuotaKind::kDir, q}, 1 << 30, 1000);
  SetQuota({QuotaKind::kUser, 0}, 1 << 30, 1000000);
  std::vector<std::pair<QuotaKey, Quota>> before;
  ASSERT_OK(a_.meta->ListQuotas(&before));
  ASSERT_OK(WriteFile(a_, q, "f", 0, 10000));
  Ino f = 0;
  Attr attr, in;
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), q, "f", &f, &attr));
  in.mode = S_IFREG | 0600;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(a_.vfs->SetAttr(Context::Root(), f, nullptr, 0, Attr{}, true, 5000, &attr));
    ASSERT_OK(a_.vfs->SetAttr(Context::Root(), f, nullptr, meta::kSetMode, in, false, 0, &attr));
    ASSERT_OK(a_.vfs->SetAttr(Context::Root(), f, nullptr, meta::kSetMtimeNow, in, false, 0, &attr));
  }
  // Open, unlinked, then written: its growth is no one's.
  Handle* fh = nullptr;
  Ino g = 0;
  ASSERT_OK(a_.vfs->Create(Context::Root(), q, "g", 0644, 0, O_RDWR, &fh, &g, &attr));
  ASSERT_OK(a_.vfs->Unlink(Context::Root(), q, "g"));
  std::string data(1 << 20, 'x');
  ASSERT_TRUE(a_.vfs->Write(Context::Root(), fh, 0, data.data(), data.size()).ok());
  ASSERT_OK(a_.vfs->Release(Context::Root(), fh));
  SyncBoth();
  std::vector<std::pair<QuotaKey, Quota>> after;
  ASSERT_OK(a_.meta->ListQuotas(&after));
  std::map<QuotaKey, Quota> b(before.begin(), before.end()), a(after.begin(), after.end());
  for (const auto& k : {QuotaKey{QuotaKind::kDir, q}, QuotaKey{QuotaKind::kUser, 0}}) {
    EXPECT_EQ(a[k].used_inodes - b[k].used_inodes, 1) << "kind " << int(k.kind);
    EXPECT_EQ(a[k].used_space - b[k].used_space, 8192) << "kind " << int(k.kind);
  }
}

// A rename from one name of a file to another name of the same file does
// nothing (rename(2)); the quotas used to move its usage from the source's
// tree to the destination's each time (review).
TEST_F(QuotaTest, ARenameBetweenTwoNamesOfOneFileChargesNothing) {
  const Ino qa = Mkdir(a_, kRootIno, "qa"), qb = Mkdir(a_, kRootIno, "qb");
  SetQuota({QuotaKind::kDir, qa}, 1 << 30, 1000);
  SetQuota({QuotaKind::kDir, qb}, 1 << 30, 1000);
  ASSERT_OK(WriteFile(a_, qa, "f", 0, 10000));
  Ino f = 0;
  Attr attr;
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), qa, "f", &f, &attr));
  ASSERT_OK(a_.vfs->Link(Context::Root(), f, qb, "g", &attr));
  SyncBoth();
  std::vector<std::pair<QuotaKey, Quota>> before;
  ASSERT_OK(a_.meta->ListQuotas(&before));
  for (int i = 0; i < 3; ++i) ASSERT_OK(a_.vfs->Rename(Context::Root(), qa, "f", qb, "g", 0));
  ASSERT_OK(a_.vfs->Lookup(Context::Root(), qa, "f", &f, &attr));  // both names stay
  SyncBoth();
  std::vector<std::pair<QuotaKey, Quota>> after;
  ASSERT_OK(a_.meta->ListQuotas(&after));
  std::map<QuotaKey, Quota> b(before.begin(), before.end()), a(after.begin(), after.end());
  for (const Ino q : {qa, qb}) {
    const QuotaKey k{QuotaKind::kDir, q};
    EXPECT_EQ(a[k].used_space, b[k].used_space) << "quota of inode " << q;
    EXPECT_EQ(a[k].used_inodes, b[k].used_inodes) << "quota of inode " << q;
  }
}

// The parents of directories a client learnt stay cached while the engine
// reports other clients' changes (no engine read per directory after each
// cache drop; mdtest's tree removal paid one per directory), and a report
// naming a moved directory, or a loss of reports, forgets them; without
// reports they are dropped every few syncs. The move is made straight in
// the engine (another client), so a stale cache shows in the quotas found.
TEST_F(QuotaTest, DirectoryParentsFollowReportsOfOtherClientsMoves) {
  const Ino q = Mkdir(a_, kRootIno, "q");
  const Ino d1 = Mkdir(a_, q, "d1");
  const Ino d2 = Mkdir(a_, d1, "d2");
  SetQuota({QuotaKind::kDir, q}, 1 << 30, 1000);
  auto move_out = [&](const std::string& from, Ino from_parent, Ino to_parent) {
    Ino moved = 0;
    Attr attr;
    ASSERT_OK(a_.meta->Rename(Context::Root(), from_parent, from, to_parent, "d1", 0, &moved, &attr));
  };
  auto quota_dirs = [&](QuotaTracker& t) {
    std::vector<Ino> dirs;
    EXPECT_TRUE(t.QuotaDirs(d2, &dirs).ok());
    return dirs;
  };
  const std::vector<Ino> under_q{q}, none{};

  // Not watching: the parents learnt are dropped within 5 syncs.
  {
    QuotaTracker t(a_.meta.get());
    ASSERT_OK(t.Sync());
    ASSERT_EQ(quota_dirs(t), under_q);
    ASSERT_NO_FATAL_FAILURE(move_out("d1", q, kRootIno));
    EXPECT_EQ(quota_dirs(t), under_q) << "cached until the next drop";
    for (int i = 0; i < 5; ++i) ASSERT_OK(t.Sync());
    EXPECT_EQ(quota_dirs(t), none) << "a directory another client moved kept its old ancestors' quotas";
    ASSERT_NO_FATAL_FAILURE(move_out("d1", kRootIno, q));
  }
  // Watching: kept through many syncs, forgotten by a report naming it.
  {
    QuotaTracker t(a_.meta.get());
    ASSERT_OK(t.Sync());
    ASSERT_EQ(quota_dirs(t), under_q);
    ASSERT_NO_FATAL_FAILURE(move_out("d1", q, kRootIno));
    t.WatchStarted(0);  // reported at once: what was learnt before is dropped now
    EXPECT_EQ(quota_dirs(t), none);
    ASSERT_NO_FATAL_FAILURE(move_out("d1", kRootIno, q));
    EXPECT_EQ(quota_dirs(t), none) << "cached (a report would have named d1)";
    t.OthersChanged({meta::Change{0, "", d1}}, false, 0);
    ASSERT_EQ(quota_dirs(t), under_q);
    ASSERT_NO_FATAL_FAILURE(move_out("d1", q, kRootIno));
    for (int i = 0; i < 12; ++i) ASSERT_OK(t.Sync());
    EXPECT_EQ(quota_dirs(t), under_q) << "the parents were dropped although reports kept them honest";
    t.OthersChanged({meta::Change{0, "", d2}}, false, 0);  // not the moved one
    EXPECT_EQ(quota_dirs(t), under_q);
    t.OthersChanged({meta::Change{kRootIno, "d1", 0}, meta::Change{0, "", d1}}, false, 0);
    EXPECT_EQ(quota_dirs(t), none) << "a reported move was not followed";
    // A loss forgets everything at once, and reports are trusted again
    // only after the brief period (the syncs in it drop the cache as
    // without reports).
    ASSERT_NO_FATAL_FAILURE(move_out("d1", kRootIno, q));
    t.OthersChanged({}, true, 60000);
    EXPECT_EQ(quota_dirs(t), under_q);
    ASSERT_NO_FATAL_FAILURE(move_out("d1", q, kRootIno));
    for (int i = 0; i < 5; ++i) ASSERT_OK(t.Sync());
    EXPECT_EQ(quota_dirs(t), none) << "after a loss, parents were kept without trusted reports";
  }
}

}  // namespace
}  // namespace tessera::vfs
