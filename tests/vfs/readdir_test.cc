// Directory listings through the VFS: windows, offsets, attributes, marks
// (fixture: vfs_fixture.h).
#include "vfs_fixture.h"

namespace tessera::vfs {
namespace {

// With a page of 3 entries, a directory of 20 lists completely through
// several windows, each window holds at most one page, rewinding re-reads,
// and a switch from readdir to readdirplus adds attributes to the window.
TEST_F(VfsTest, ReadDirPagesBigDirectoriesThroughBoundedWindows) {
  Config config = DefaultConfig();
  config.readdir_page = 3;
  ASSERT_NO_FATAL_FAILURE(StartVfs(config));
  std::set<std::string> want;
  for (int i = 0; i < 20; ++i) {
    Ino ino = 0;
    std::string name = "f" + std::to_string(i);
    Handle* fh = Create(name, &ino);
    ASSERT_NE(fh, nullptr);
    Release(fh);
    want.insert(name);
  }
  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, kRootIno, O_RDONLY, &dh));
  for (int pass = 0; pass < 2; ++pass) {
    std::set<std::string> seen;
    uint64_t off = 0;
    for (;;) {
      const std::vector<meta::Entry>* entries = nullptr;
      uint64_t base = 0;
      bool plus = off >= 8;  // switch to readdirplus half way
      ASSERT_OK(vfs_->ReadDir(ctx_, dh, off, plus, &entries, &base));
      ASSERT_LE(entries->size(), 5u);  // one page (+ "." and "..")
      if (off >= base + entries->size()) break;
      ASSERT_LE(base, off);
      const meta::Entry& e = (*entries)[off - base];
      if (e.name != "." && e.name != "..") {
        EXPECT_TRUE(seen.insert(e.name).second) << "listed twice: " << e.name;
        if (plus) {
          EXPECT_TRUE(e.attr.IsFile()) << e.name;
        }
      }
      ++off;
    }
    EXPECT_EQ(seen, want) << "pass " << pass;
    EXPECT_EQ(off, 22u);
  }
  ASSERT_OK(vfs_->ReleaseDir(dh));
}

// rm -rf removes what it has read before it reads on, and the kernel
// switches between READDIR and READDIRPLUS within one listing. A window
// read again from its first name for the switch held other entries at the
// same offsets once some were removed, and the entries after them were
// never listed (rm -rf of a 100,000-entry trash directory: "Directory not
// empty", 41 entries left). The window keeps its entries instead.
TEST_F(VfsTest, ReadDirOffsetsHoldWhileEntriesGoAndTheKernelSwitchesToPlus) {
  Config config = DefaultConfig();
  config.readdir_page = 3;
  ASSERT_NO_FATAL_FAILURE(StartVfs(config));
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back("f" + std::to_string(i));
  Ino dir = 0;
  ASSERT_NO_FATAL_FAILURE(MakeDirOfFiles(names, &dir));
  const std::set<std::string> want(names.begin(), names.end());
  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  std::set<std::string> seen;
  for (uint64_t off = 0;; ++off) {
    const std::vector<meta::Entry>* entries = nullptr;
    uint64_t base = 0;
    const bool plus = off % 2 == 1;  // a switch inside every window
    ASSERT_OK(vfs_->ReadDir(ctx_, dh, off, plus, &entries, &base));
    if (off >= base + entries->size()) break;
    const meta::Entry& e = (*entries)[off - base];
    if (e.name == "." || e.name == "..") continue;
    ASSERT_FALSE(e.gone) << e.name << " is still there";
    if (plus) {
      EXPECT_TRUE(e.attr.IsFile()) << e.name;
    }
    EXPECT_TRUE(seen.insert(e.name).second) << "listed twice: " << e.name;
    ASSERT_OK(vfs_->Unlink(ctx_, dir, e.name));  // as rm -rf does
  }
  ASSERT_OK(vfs_->ReleaseDir(dh));
  EXPECT_EQ(seen, want);
  ASSERT_OK(vfs_->Rmdir(ctx_, kRootIno, "d"));  // ENOTEMPTY: entries were never listed
}

// seekdir(3) back into an earlier window lands on the entry telldir(3) gave
// there, though entries before that window were removed meanwhile: the
// window is read again from the name it began after, not from the start.
TEST_F(VfsTest, ReadDirSeekBackLandsOnTheSameEntryAfterEarlierRemovals) {
  Config config = DefaultConfig();
  config.readdir_page = 3;
  ASSERT_NO_FATAL_FAILURE(StartVfs(config));
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back((i < 10 ? "f0" : "f") + std::to_string(i));
  Ino dir = 0;
  ASSERT_NO_FATAL_FAILURE(MakeDirOfFiles(names, &dir));
  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  std::map<std::string, uint64_t> offset_of;
  for (uint64_t off = 0;; ++off) {  // telldir of every entry
    const std::vector<meta::Entry>* entries = nullptr;
    uint64_t base = 0;
    ASSERT_OK(vfs_->ReadDir(ctx_, dh, off, false, &entries, &base));
    if (off >= base + entries->size()) break;
    offset_of[(*entries)[off - base].name] = off;
  }
  ASSERT_EQ(offset_of.size(), 22u);
  for (int i = 0; i < 6; ++i) ASSERT_OK(vfs_->Unlink(ctx_, dir, "f0" + std::to_string(i)));
  for (const bool plus : {false, true}) {
    std::vector<std::string> listed;
    for (uint64_t off = offset_of["f10"];; ++off) {  // seekdir, then read on
      const std::vector<meta::Entry>* entries = nullptr;
      uint64_t base = 0;
      ASSERT_OK(vfs_->ReadDir(ctx_, dh, off, plus, &entries, &base));
      if (off >= base + entries->size()) break;
      listed.push_back((*entries)[off - base].name);
    }
    EXPECT_EQ(listed, (std::vector<std::string>{"f10", "f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18",
                                                "f19"}))
        << "plus=" << plus;
  }
  ASSERT_OK(vfs_->ReleaseDir(dh));
}

// Entries of a window removed before the switch to READDIRPLUS keep their
// offsets and are listed without attributes; the others get theirs.
TEST_F(VfsTest, ReadDirPlusListsEntriesRemovedSinceTheWindowWithoutAttributes) {
  Ino dir = 0;
  Attr attr;
  ASSERT_OK(vfs_->Mkdir(ctx_, kRootIno, "d", 0755, 022, &dir, &attr));
  for (const char* name : {"a", "b", "c", "d"}) {
    Ino ino = 0;
    Handle* fh = Create(name, &ino, dir);
    ASSERT_NE(fh, nullptr);
    Release(fh);
  }
  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  const std::vector<meta::Entry>* entries = nullptr;
  uint64_t base = 0;
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 0, /*plus=*/false, &entries, &base));
  ASSERT_EQ(entries->size(), 6u);
  ASSERT_OK(vfs_->Unlink(ctx_, dir, "b"));
  ASSERT_OK(vfs_->Unlink(ctx_, dir, "c"));
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 2, /*plus=*/true, &entries, &base));
  ASSERT_EQ(base, 0u);
  ASSERT_EQ(entries->size(), 6u);
  const std::vector<std::string> names = {".", "..", "a", "b", "c", "d"};
  for (size_t i = 0; i < names.size(); ++i) {
    const meta::Entry& e = (*entries)[i];
    EXPECT_EQ(e.name, names[i]) << "offset " << i;
    const bool removed = e.name == "b" || e.name == "c";
    EXPECT_EQ(e.gone, removed) << e.name;
    if (!removed) {
      EXPECT_NE(e.attr.mode & S_IFMT, 0u) << e.name << " has attributes";
    }
  }
  ASSERT_OK(vfs_->ReleaseDir(dh));
}

// A window's attributes are as old as the read that fetched them: later
// calls answering from it hand back that read's mark (the FUSE adapter's
// coherence sequence number), so a change reported meanwhile does not get
// old attributes cached for long.
TEST_F(VfsTest, ReadDirHandsBackTheMarkOfTheReadItsAttributesCameFrom) {
  Config config = DefaultConfig();
  config.readdir_page = 3;
  ASSERT_NO_FATAL_FAILURE(StartVfs(config));
  Ino dir = 0;
  ASSERT_NO_FATAL_FAILURE(MakeDirOfFiles({"a", "b", "c", "d", "e", "f"}, &dir));
  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  const std::vector<meta::Entry>* entries = nullptr;
  uint64_t base = 0;
  auto read = [&](uint64_t off, bool plus, uint64_t now) {
    uint64_t mark = now;
    EXPECT_OK(vfs_->ReadDir(ctx_, dh, off, plus, &entries, &base, &mark));
    return mark;
  };
  EXPECT_EQ(read(0, true, 5), 5u);   // ".", "..", a, b, c: read now
  EXPECT_EQ(read(3, true, 9), 5u);   // the same window
  EXPECT_EQ(read(5, true, 11), 11u);  // d, e, f: a new window
  EXPECT_EQ(read(6, true, 12), 11u);
  EXPECT_EQ(read(0, false, 20), 20u);  // from the start again, names only
  EXPECT_EQ(read(1, false, 21), 20u);
  EXPECT_EQ(read(2, true, 22), 22u);  // the window's attributes read now
  EXPECT_EQ(read(3, true, 23), 22u);
  EXPECT_EQ(read(3, true, 24), 22u);  // (without a mark: as before)
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 3, true, &entries, &base));
  ASSERT_OK(vfs_->ReleaseDir(dh));
}

TEST_F(VfsTest, ReadDirListsDotsFirstAndPagesByOffset) {
  Ino dir = 0;
  Attr attr;
  ASSERT_OK(vfs_->Mkdir(ctx_, kRootIno, "d", 0755, 022, &dir, &attr));
  std::set<std::string> names = {"a", "b", "c"};
  Ino a = 0;
  for (const auto& name : names) {
    Ino ino = 0;
    Handle* fh = Create(name, &ino, dir);
    ASSERT_NE(fh, nullptr);
    if (name == "a") {
      a = ino;
      ASSERT_NO_FATAL_FAILURE(Write(fh, 0, std::string(100, 'x')));  // pending, not flushed
      ASSERT_OK(vfs_->Fsync(ctx_, fh));
      ASSERT_NO_FATAL_FAILURE(Write(fh, 100, std::string(50, 'y')));  // pending again
      // While "a" is open with pending bytes, readdirplus shows its length.
      Handle* dh = nullptr;
      ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
      const std::vector<meta::Entry>* entries = nullptr;
      uint64_t base = 0;
      ASSERT_OK(vfs_->ReadDir(ctx_, dh, 0, /*plus=*/true, &entries, &base));
      bool seen = false;
      for (const auto& e : *entries) {
        if (e.name == "a") {
          seen = true;
          EXPECT_EQ(e.attr.length, 150u) << "readdirplus must show pending length";
        }
      }
      EXPECT_TRUE(seen);
      ASSERT_OK(vfs_->ReleaseDir(dh));
      Release(fh);
      continue;
    }
    Release(fh);
  }

  Handle* dh = nullptr;
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  const std::vector<meta::Entry>* entries = nullptr;
  uint64_t base = 0;
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 0, /*plus=*/true, &entries, &base));
  ASSERT_EQ(entries->size(), 5u);
  EXPECT_EQ((*entries)[0].name, ".");
  EXPECT_EQ((*entries)[0].ino, dir);
  EXPECT_TRUE((*entries)[0].attr.IsDir());
  EXPECT_EQ((*entries)[1].name, "..");
  EXPECT_EQ((*entries)[1].ino, kRootIno);
  EXPECT_TRUE((*entries)[1].attr.IsDir());
  std::set<std::string> listed;
  for (size_t i = 2; i < entries->size(); ++i) {
    listed.insert((*entries)[i].name);
    if ((*entries)[i].name == "a") {
      EXPECT_EQ((*entries)[i].ino, a);
      EXPECT_EQ((*entries)[i].attr.length, 150u);
    }
  }
  EXPECT_EQ(listed, names);

  // A later page continues the listing taken at offset 0 ...
  Ino d = 0;
  Handle* fh = Create("d", &d, dir);
  ASSERT_NE(fh, nullptr);
  Release(fh);
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 3, false, &entries, &base));
  EXPECT_EQ(entries->size(), 5u);
  // ... and offset 0 (rewinddir) reads the directory again.
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 0, false, &entries, &base));
  EXPECT_EQ(entries->size(), 6u);
  ASSERT_OK(vfs_->ReleaseDir(dh));

  // A handle whose first call is at a non-zero offset still gets a listing.
  ASSERT_OK(vfs_->OpenDir(ctx_, dir, O_RDONLY, &dh));
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 4, false, &entries, &base));
  EXPECT_EQ(entries->size(), 6u);
  ASSERT_OK(vfs_->ReleaseDir(dh));

  // The root's ".." is the root itself.
  ASSERT_OK(vfs_->OpenDir(ctx_, kRootIno, O_RDONLY, &dh));
  ASSERT_OK(vfs_->ReadDir(ctx_, dh, 0, true, &entries, &base));
  ASSERT_GE(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].name, ".");
  EXPECT_EQ((*entries)[0].ino, kRootIno);
  EXPECT_EQ((*entries)[1].name, "..");
  EXPECT_EQ((*entries)[1].ino, kRootIno);
  EXPECT_TRUE((*entries)[1].attr.IsDir());
  ASSERT_OK(vfs_->ReleaseDir(dh));
}

}  // namespace
}  // namespace tessera::vfs
