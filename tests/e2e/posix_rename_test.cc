// End-to-end POSIX conformance: rename(2) and renameat2(2).
// See posix_util.h for the conventions; run with TESSERA_TEST_DIR=<dir>.
#include <cstdio>

#include "posix_util.h"

namespace posix_e2e {
namespace {

class Rename : public PosixTest {};
class Renameat2 : public PosixTest {};

int Renameat2Call(const char* from, const char* to, unsigned flags) {
  return renameat2(AT_FDCWD, from, AT_FDCWD, to, flags);
}

TEST_F(Rename, MovesFileKeepingInode) {
  WriteFile(P("a"), "payload");
  struct stat a = Stat(P("a")), p0 = Stat(dir_);
  TimeTick();
  ASSERT_OK(rename(P("a"), P("b")));
  EXPECT_FALSE(Exists(P("a")));
  struct stat b = Stat(P("b")), p1 = Stat(dir_);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(1u, b.st_nlink);
  EXPECT_EQ(Ns(a.st_mtim), Ns(b.st_mtim)) << "rename does not modify the file's data";
  EXPECT_EQ("payload", ReadFile(P("b")));
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  EXPECT_EQ(std::multiset<std::string>{"b"}, ListDir(dir_));
}

TEST_F(Rename, BetweenDirectoriesUpdatesBothParents) {
  MkDir(P("src"));
  MkDir(P("dst"));
  WriteFile(P("src/f"), "x");
  struct stat s0 = Stat(P("src")), d0 = Stat(P("dst"));
  TimeTick();
  ASSERT_OK(rename(P("src/f"), P("dst/g")));
  struct stat s1 = Stat(P("src")), d1 = Stat(P("dst"));
  EXPECT_GT(Ns(s1.st_mtim), Ns(s0.st_mtim));
  EXPECT_GT(Ns(s1.st_ctim), Ns(s0.st_ctim));
  EXPECT_GT(Ns(d1.st_mtim), Ns(d0.st_mtim));
  EXPECT_GT(Ns(d1.st_ctim), Ns(d0.st_ctim));
  EXPECT_EQ(2u, s1.st_nlink);
  EXPECT_EQ(2u, d1.st_nlink);
  EXPECT_TRUE(ListDir(P("src")).empty());
  EXPECT_EQ(std::multiset<std::string>{"g"}, ListDir(P("dst")));
}

TEST_F(Rename, ReplacesExistingFile) {
  WriteFile(P("a"), "new");
  WriteFile(P("b"), "old");
  ASSERT_OK(link(P("b"), P("b2")));
  ino_t a_ino = Stat(P("a")).st_ino, b_ino = Stat(P("b")).st_ino;
  EXPECT_EQ(2u, Stat(P("b2")).st_nlink);
  Fd old_fd(open(P("b"), O_RDONLY));
  ASSERT_OK(rename(P("a"), P("b")));
  EXPECT_FALSE(Exists(P("a")));
  EXPECT_EQ(a_ino, Stat(P("b")).st_ino);
  EXPECT_EQ("new", ReadFile(P("b")));
  struct stat b2 = Stat(P("b2"));
  EXPECT_EQ(b_ino, b2.st_ino);
  EXPECT_EQ(1u, b2.st_nlink) << "the replaced inode lost one link";
  EXPECT_EQ("old", ReadFile(P("b2")));
  EXPECT_EQ("old", Pread(old_fd, 100, 0)) << "an open descriptor keeps the replaced file";
  EXPECT_EQ(1u, Fstat(old_fd).st_nlink);
}

TEST_F(Rename, ReplacedFileWithoutOtherLinksStaysOpen) {
  WriteFile(P("a"), "new");
  WriteFile(P("b"), "old");
  Fd old_fd(open(P("b"), O_RDWR));
  ASSERT_OK(rename(P("a"), P("b")));
  EXPECT_EQ(0u, Fstat(old_fd).st_nlink);
  EXPECT_EQ("old", Pread(old_fd, 100, 0));
  PwriteAll(old_fd, "OLD", 0);
  EXPECT_EQ("OLD", Pread(old_fd, 100, 0));
  EXPECT_EQ("new", ReadFile(P("b")));
}

TEST_F(Rename, ReplaceIsAtomicForReaders) {
  // While b is repeatedly replaced, opening b must never fail with ENOENT.
  WriteFile(P("b"), "0");
  std::atomic<bool> done{false};
  std::atomic<int> missing{0}, opened{0};
  const Path b = P("b");
  std::thread reader([&] {
    while (!done) {
      int fd = open(b, O_RDONLY);
      if (fd >= 0) {
        ++opened;
        close(fd);
      } else if (errno == ENOENT) {
        ++missing;
      }
    }
  });
  // Wait for the reader to run, then replace b until both sides have done
  // enough work to overlap (bounded by a deadline).
  while (opened.load() == 0 && missing.load() == 0) std::this_thread::yield();
  const int opened_before = opened.load();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int i = 0;
  for (; i < 300 || (opened.load() - opened_before < 300 && std::chrono::steady_clock::now() < deadline); ++i) {
    Path tmp = P("tmp" + std::to_string(i));
    WriteFile(tmp, std::to_string(i));
    if (rename(tmp, b) != 0) {
      ADD_FAILURE() << "rename: " << strerror(errno);
      break;
    }
  }
  done = true;
  reader.join();
  EXPECT_EQ(0, missing.load()) << "opens that failed with ENOENT while b was being replaced";
  EXPECT_GT(opened.load(), opened_before);
  EXPECT_EQ(std::to_string(i - 1), ReadFile(b));
  EXPECT_EQ(std::multiset<std::string>{"b"}, ListDir(dir_));
}

TEST_F(Rename, FileOntoDirectoryIsEISDIR) {
  WriteFile(P("f"), "x");
  MkDir(P("empty"));
  MkDir(P("full"));
  WriteFile(P("full/x"));
  EXPECT_ERRNO(EISDIR, rename(P("f"), P("empty")));
  EXPECT_ERRNO(EISDIR, rename(P("f"), P("full")));
  EXPECT_TRUE(S_ISREG(Stat(P("f")).st_mode));
  EXPECT_TRUE(S_ISDIR(Stat(P("empty")).st_mode));
}

TEST_F(Rename, DirectoryOntoFileIsENOTDIR) {
  MkDir(P("d"));
  WriteFile(P("f"), "x");
  ASSERT_OK(symlink("d", P("sym")));
  EXPECT_ERRNO(ENOTDIR, rename(P("d"), P("f")));
  EXPECT_ERRNO(ENOTDIR, rename(P("d"), P("sym"))) << "the symlink is not followed";
  EXPECT_TRUE(S_ISDIR(Stat(P("d")).st_mode));
  EXPECT_EQ("x", ReadFile(P("f")));
}

TEST_F(Rename, DirectoryOntoEmptyDirectory) {
  MkDir(P("a"));
  WriteFile(P("a/inside"), "i");
  MkDir(P("b"));
  ino_t a_ino = Stat(P("a")).st_ino;
  EXPECT_EQ(4u, Stat(dir_).st_nlink);
  ASSERT_OK(rename(P("a"), P("b")));
  EXPECT_FALSE(Exists(P("a")));
  EXPECT_EQ(a_ino, Stat(P("b")).st_ino);
  EXPECT_EQ("i", ReadFile(P("b/inside")));
  EXPECT_EQ(3u, Stat(dir_).st_nlink) << "one subdirectory fewer";
  EXPECT_EQ(2u, Stat(P("b")).st_nlink);
}

TEST_F(Rename, DirectoryOntoNonEmptyDirectory) {
  MkDir(P("a"));
  MkDir(P("b"));
  WriteFile(P("b/f"));
  MkDir(P("c"));
  MkDir(P("c/sub"));
  EXPECT_ERRNO_IN(rename(P("a"), P("b")), ENOTEMPTY, EEXIST);
  EXPECT_ERRNO_IN(rename(P("a"), P("c")), ENOTEMPTY, EEXIST);
  EXPECT_TRUE(Exists(P("a")));
  EXPECT_TRUE(Exists(P("b/f")));
  EXPECT_TRUE(Exists(P("c/sub")));
  EXPECT_EQ(5u, Stat(dir_).st_nlink);
}

TEST_F(Rename, DirectoryIntoItsOwnSubtreeIsEINVAL) {
  MkDir(P("a"));
  MkDir(P("a/b"));
  MkDir(P("a/b/c"));
  EXPECT_ERRNO(EINVAL, rename(P("a"), P("a/new")));
  EXPECT_ERRNO(EINVAL, rename(P("a"), P("a/b/new")));
  EXPECT_ERRNO(EINVAL, rename(P("a"), P("a/b/c/new")));
  EXPECT_ERRNO(EINVAL, rename(P("a/b"), P("a/b/c/new")));
  // Onto an existing descendant.
  EXPECT_ERRNO_IN(rename(P("a"), P("a/b/c")), EINVAL, ENOTEMPTY, EEXIST);
  // Onto an ancestor (which is necessarily non-empty).
  EXPECT_ERRNO_IN(rename(P("a/b/c"), P("a")), ENOTEMPTY, EEXIST, EINVAL);
  EXPECT_TRUE(S_ISDIR(Stat(P("a/b/c")).st_mode));
  EXPECT_EQ(3u, Stat(P("a")).st_nlink);
}

TEST_F(Rename, DirectoryBetweenParentsFixesLinkCountsAndDotDot) {
  MkDir(P("p1"));
  MkDir(P("p2"));
  MkDir(P("p1/d"));
  MkDir(P("p1/d/sub"));
  WriteFile(P("p1/d/f"), "data");
  ino_t p1 = Stat(P("p1")).st_ino, p2 = Stat(P("p2")).st_ino;
  EXPECT_EQ(p1, Stat(P("p1/d/..")).st_ino);
  EXPECT_EQ(3u, Stat(P("p1")).st_nlink);
  EXPECT_EQ(2u, Stat(P("p2")).st_nlink);
  struct stat s0 = Stat(P("p1")), d0 = Stat(P("p2"));
  TimeTick();
  ASSERT_OK(rename(P("p1/d"), P("p2/moved")));
  struct stat s1 = Stat(P("p1")), d1 = Stat(P("p2"));
  EXPECT_EQ(2u, s1.st_nlink);
  EXPECT_EQ(3u, d1.st_nlink);
  EXPECT_EQ(p2, Stat(P("p2/moved/..")).st_ino) << "\"..\" points to the new parent";
  EXPECT_EQ(3u, Stat(P("p2/moved")).st_nlink);
  EXPECT_EQ(Stat(P("p2/moved")).st_ino, Stat(P("p2/moved/sub/..")).st_ino);
  EXPECT_EQ("data", ReadFile(P("p2/moved/f")));
  EXPECT_GT(Ns(s1.st_mtim), Ns(s0.st_mtim));
  EXPECT_GT(Ns(s1.st_ctim), Ns(s0.st_ctim));
  EXPECT_GT(Ns(d1.st_mtim), Ns(d0.st_mtim));
  EXPECT_GT(Ns(d1.st_ctim), Ns(d0.st_ctim));
  // And back again, this time replacing an empty directory.
  MkDir(P("p1/empty"));
  EXPECT_EQ(3u, Stat(P("p1")).st_nlink);
  ASSERT_OK(rename(P("p2/moved"), P("p1/empty")));
  EXPECT_EQ(3u, Stat(P("p1")).st_nlink);
  EXPECT_EQ(2u, Stat(P("p2")).st_nlink);
  EXPECT_EQ(p1, Stat(P("p1/empty/..")).st_ino);
  // Moving up and down the tree.
  ASSERT_OK(rename(P("p1/empty/sub"), P("up")));
  EXPECT_EQ(Stat(dir_).st_ino, Stat(P("up/..")).st_ino);
  EXPECT_EQ(2u, Stat(P("p1/empty")).st_nlink);
  EXPECT_EQ(5u, Stat(dir_).st_nlink);
}

TEST_F(Rename, HardLinksOfTheSameFileAreANoOp) {
  WriteFile(P("a"), "x");
  ASSERT_OK(link(P("a"), P("b")));
  EXPECT_OK(rename(P("a"), P("b")));
  EXPECT_TRUE(Exists(P("a"))) << "POSIX: renaming onto another link of the same file does nothing";
  EXPECT_TRUE(Exists(P("b")));
  EXPECT_EQ(2u, Stat(P("a")).st_nlink);
  EXPECT_OK(rename(P("a"), P("a")));
  EXPECT_EQ(2u, Stat(P("a")).st_nlink);
  MkDir(P("d"));
  EXPECT_OK(rename(P("d"), P("d")));
  EXPECT_TRUE(S_ISDIR(Stat(P("d")).st_mode));
  EXPECT_EQ(3u, Stat(dir_).st_nlink);
}

TEST_F(Rename, SymlinkIsRenamedNotItsTarget) {
  WriteFile(P("target"), "t");
  ASSERT_OK(symlink("target", P("l")));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  ASSERT_OK(rename(P("l"), P("l2")));
  ASSERT_OK(rename(P("dangling"), P("dangling2")));
  EXPECT_TRUE(S_ISLNK(Lstat(P("l2")).st_mode));
  EXPECT_TRUE(S_ISLNK(Lstat(P("dangling2")).st_mode));
  EXPECT_TRUE(Exists(P("target")));
  EXPECT_EQ("t", ReadFile(P("l2")));
  // A symlink as the destination is replaced, not followed.
  WriteFile(P("f"), "f");
  ASSERT_OK(rename(P("f"), P("l2")));
  EXPECT_TRUE(S_ISREG(Lstat(P("l2")).st_mode));
  EXPECT_EQ("t", ReadFile(P("target")));
}

TEST_F(Rename, SpecialFiles) {
  ASSERT_OK(mkfifo(P("fifo"), 0640));
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0640, 0));
  ASSERT_OK(rename(P("fifo"), P("fifo2")));
  ASSERT_OK(rename(P("sock"), P("sock2")));
  EXPECT_TRUE(S_ISFIFO(Lstat(P("fifo2")).st_mode));
  EXPECT_TRUE(S_ISSOCK(Lstat(P("sock2")).st_mode));
  EXPECT_EQ(0640u, Mode(P("fifo2")));
}

TEST_F(Rename, OpenDescriptorFollowsTheFile) {
  MkDir(P("d"));
  WriteFile(P("a"), "abc");
  Fd fd(open(P("a"), O_RDWR));
  ASSERT_OK(rename(P("a"), P("d/b")));
  PwriteAll(fd, "XYZ", 3);
  EXPECT_EQ("abcXYZ", ReadFile(P("d/b")));
  // Same for a directory descriptor.
  MkDir(P("dir"));
  Fd dfd(open(P("dir"), O_RDONLY | O_DIRECTORY));
  ASSERT_OK(rename(P("dir"), P("d/dir2")));
  Fd f(openat(dfd, "created", O_CREAT | O_WRONLY, 0644));
  EXPECT_TRUE(f.ok());
  EXPECT_TRUE(Exists(P("d/dir2/created")));
}

TEST_F(Rename, LargeFileAndManyFiles) {
  std::string data = Pattern(6 << 20);
  WriteFile(P("big"), data);
  MkDir(P("d"));
  ASSERT_OK(rename(P("big"), P("d/big")));
  EXPECT_TRUE(data == ReadFile(P("d/big")));
  MkDir(P("from"));
  MkDir(P("to"));
  std::multiset<std::string> names;
  for (int i = 0; i < 200; ++i) {
    std::string n = "f" + std::to_string(i);
    WriteFile(P("from/" + n), n);
    names.insert(n);
  }
  for (int i = 0; i < 200; ++i) {
    std::string n = "f" + std::to_string(i);
    ASSERT_OK(rename(P("from/" + n), P("to/" + n)));
  }
  EXPECT_TRUE(ListDir(P("from")).empty());
  EXPECT_EQ(names, ListDir(P("to")));
  EXPECT_EQ("f123", ReadFile(P("to/f123")));
}

TEST_F(Rename, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  EXPECT_ERRNO(ENOENT, rename(P("missing"), P("x")));
  EXPECT_ERRNO(ENOENT, rename(P("missing/a"), P("x")));
  EXPECT_ERRNO(ENOENT, rename(P("file"), P("missing/x")));
  EXPECT_ERRNO(ENOENT, rename("", P("x")));
  EXPECT_ERRNO(ENOENT, rename(P("file"), ""));
  EXPECT_ERRNO(ENOTDIR, rename(P("file/a"), P("x")));
  EXPECT_ERRNO(ENOTDIR, rename(P("file"), P("file/x")));
  EXPECT_ERRNO(ENOTDIR, rename(P("file/"), P("x")));
  EXPECT_ERRNO(ENOTDIR, rename(P("file"), P("x/")));
  EXPECT_ERRNO(ENAMETOOLONG, rename(P("file"), P(Name(kNameMax + 1))));
  EXPECT_ERRNO(ENAMETOOLONG, rename(P(Name(kNameMax + 1)), P("x")));
  EXPECT_ERRNO_IN(rename(P("dir/."), P("x")), EINVAL, EBUSY);
  EXPECT_ERRNO_IN(rename(P("dir/.."), P("x")), EINVAL, EBUSY);
  EXPECT_ERRNO_IN(rename(P("file"), P("dir/.")), EINVAL, EBUSY, EISDIR, EEXIST, ENOTEMPTY);
  EXPECT_ERRNO_IN(rename(P("dir"), P("dir/..")), EINVAL, EBUSY, EEXIST, ENOTEMPTY);
  EXPECT_FALSE(Exists(P("x")));
  EXPECT_TRUE(Exists(P("file")));
  EXPECT_TRUE(Exists(P("dir")));
  EXPECT_OK(rename(P("file"), P(Name(kNameMax))));
  EXPECT_OK(rename(P("dir/"), P("dir2/"))) << "trailing slashes are fine for directories";
  EXPECT_EQ((std::multiset<std::string>{Name(kNameMax), "dir2"}), ListDir(dir_));
}

// ---------------------------------------------------------------------------
// renameat2

TEST_F(Renameat2, NoReplace) {
  WriteFile(P("a"), "a");
  WriteFile(P("b"), "b");
  MkDir(P("dir"));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  for (const char* n : {"b", "dir", "dangling"}) EXPECT_ERRNO(EEXIST, Renameat2Call(P("a"), P(n), RENAME_NOREPLACE)) << n;
  EXPECT_EQ("a", ReadFile(P("a")));
  EXPECT_EQ("b", ReadFile(P("b")));
  EXPECT_OK(Renameat2Call(P("a"), P("c"), RENAME_NOREPLACE));
  EXPECT_FALSE(Exists(P("a")));
  EXPECT_EQ("a", ReadFile(P("c")));
  EXPECT_OK(Renameat2Call(P("dir"), P("dir2"), RENAME_NOREPLACE));
  EXPECT_ERRNO(ENOENT, Renameat2Call(P("missing"), P("x"), RENAME_NOREPLACE));
}

TEST_F(Renameat2, ExchangeFiles) {
  WriteFile(P("a"), "AAA");
  WriteFile(P("b"), "B");
  ino_t a = Stat(P("a")).st_ino, b = Stat(P("b")).st_ino;
  ASSERT_OK(Renameat2Call(P("a"), P("b"), RENAME_EXCHANGE));
  EXPECT_EQ(b, Stat(P("a")).st_ino);
  EXPECT_EQ(a, Stat(P("b")).st_ino);
  EXPECT_EQ("B", ReadFile(P("a")));
  EXPECT_EQ("AAA", ReadFile(P("b")));
  EXPECT_EQ(1u, Stat(P("a")).st_nlink);
}

TEST_F(Renameat2, ExchangeFileAndDirectoryAcrossParents) {
  MkDir(P("p1"));
  MkDir(P("p2"));
  WriteFile(P("p1/f"), "file");
  MkDir(P("p2/d"));
  WriteFile(P("p2/d/inside"), "in");
  ino_t p1 = Stat(P("p1")).st_ino, d = Stat(P("p2/d")).st_ino;
  EXPECT_EQ(2u, Stat(P("p1")).st_nlink);
  EXPECT_EQ(3u, Stat(P("p2")).st_nlink);
  ASSERT_OK(Renameat2Call(P("p1/f"), P("p2/d"), RENAME_EXCHANGE));
  EXPECT_TRUE(S_ISDIR(Stat(P("p1/f")).st_mode));
  EXPECT_TRUE(S_ISREG(Stat(P("p2/d")).st_mode));
  EXPECT_EQ(d, Stat(P("p1/f")).st_ino);
  EXPECT_EQ("in", ReadFile(P("p1/f/inside")));
  EXPECT_EQ("file", ReadFile(P("p2/d")));
  EXPECT_EQ(p1, Stat(P("p1/f/..")).st_ino) << "\"..\" of the moved directory";
  EXPECT_EQ(3u, Stat(P("p1")).st_nlink);
  EXPECT_EQ(2u, Stat(P("p2")).st_nlink);
}

TEST_F(Renameat2, ExchangeDirectoriesAcrossParents) {
  MkDir(P("p1"));
  MkDir(P("p2"));
  MkDir(P("p1/x"));
  MkDir(P("p1/x/sub"));
  MkDir(P("p2/y"));
  WriteFile(P("p2/y/f"), "y");
  ino_t p1 = Stat(P("p1")).st_ino, p2 = Stat(P("p2")).st_ino;
  ino_t x = Stat(P("p1/x")).st_ino, y = Stat(P("p2/y")).st_ino;
  struct stat s0 = Stat(P("p1")), d0 = Stat(P("p2"));
  TimeTick();
  ASSERT_OK(Renameat2Call(P("p1/x"), P("p2/y"), RENAME_EXCHANGE));
  EXPECT_EQ(y, Stat(P("p1/x")).st_ino);
  EXPECT_EQ(x, Stat(P("p2/y")).st_ino);
  EXPECT_EQ(p1, Stat(P("p1/x/..")).st_ino);
  EXPECT_EQ(p2, Stat(P("p2/y/..")).st_ino);
  EXPECT_EQ("y", ReadFile(P("p1/x/f")));
  EXPECT_TRUE(S_ISDIR(Stat(P("p2/y/sub")).st_mode));
  EXPECT_EQ(3u, Stat(P("p1")).st_nlink);
  EXPECT_EQ(3u, Stat(P("p2")).st_nlink);
  EXPECT_EQ(3u, Stat(P("p2/y")).st_nlink);
  EXPECT_EQ(2u, Stat(P("p1/x")).st_nlink);
  struct stat s1 = Stat(P("p1")), d1 = Stat(P("p2"));
  EXPECT_GT(Ns(s1.st_mtim), Ns(s0.st_mtim));
  EXPECT_GT(Ns(d1.st_mtim), Ns(d0.st_mtim));
}

TEST_F(Renameat2, ExchangeSymlinkAndFile) {
  WriteFile(P("f"), "f");
  ASSERT_OK(symlink("nowhere", P("l")));
  ASSERT_OK(Renameat2Call(P("f"), P("l"), RENAME_EXCHANGE));
  EXPECT_TRUE(S_ISLNK(Lstat(P("f")).st_mode));
  EXPECT_TRUE(S_ISREG(Lstat(P("l")).st_mode));
  EXPECT_FALSE(Exists(P("nowhere")));
}

TEST_F(Renameat2, Errors) {
  WriteFile(P("a"));
  MkDir(P("d"));
  MkDir(P("d/sub"));
  EXPECT_ERRNO(ENOENT, Renameat2Call(P("a"), P("missing"), RENAME_EXCHANGE));
  EXPECT_ERRNO(ENOENT, Renameat2Call(P("missing"), P("a"), RENAME_EXCHANGE));
  EXPECT_ERRNO(EINVAL, Renameat2Call(P("a"), P("b"), RENAME_EXCHANGE | RENAME_NOREPLACE));
  EXPECT_ERRNO(EINVAL, Renameat2Call(P("d"), P("d/sub"), RENAME_EXCHANGE)) << "into its own subtree";
  EXPECT_ERRNO(EINVAL, Renameat2Call(P("d/sub"), P("d"), RENAME_EXCHANGE)) << "with its own ancestor";
  EXPECT_ERRNO(EINVAL, Renameat2Call(P("a"), P("b"), 0x80000000u)) << "unknown flag";
  EXPECT_TRUE(Exists(P("a")));
  EXPECT_FALSE(Exists(P("b")));
  EXPECT_EQ(3u, Stat(P("d")).st_nlink);
}

}  // namespace
}  // namespace posix_e2e
