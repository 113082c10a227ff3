// End-to-end POSIX conformance: name space operations and file I/O.
//   open/creat, mkdir, rmdir, unlink, link, symlink/readlink, mkfifo, mknod,
//   readdir, read/write/pread/pwrite, path resolution errors shared by all
//   path-taking calls (ENOENT, ENOTDIR, ENAMETOOLONG, ELOOP).
// See posix_util.h for the conventions; run with TESSERA_TEST_DIR=<dir>.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/xattr.h>

#include <functional>
#include <map>

#include "posix_util.h"

namespace posix_e2e {
namespace {

class Open : public PosixTest {};
class Mkdir : public PosixTest {};
class Rmdir : public PosixTest {};
class Unlink : public PosixTest {};
class Link : public PosixTest {};
class Symlink : public PosixTest {};
class Mknod : public PosixTest {};
class Readdir : public PosixTest {};
class Io : public PosixTest {};
class PathErrors : public PosixTest {};

// ===========================================================================
// open

TEST_F(Open, CreateAppliesModeAndUmask) {
  struct Case {
    mode_t umask_bits, requested, expected;
  };
  const Case cases[] = {
      {022, 0777, 0755}, {022, 0666, 0644}, {077, 0777, 0700}, {0, 0666, 0666},
      {0, 0777, 0777},   {027, 0751, 0750}, {0777, 0777, 0000}, {002, 0664, 0664},
  };
  int i = 0;
  for (const Case& c : cases) {
    umask(c.umask_bits);
    Path f = P("f" + std::to_string(i++));
    Fd fd(open(f, O_CREAT | O_WRONLY, c.requested));
    ASSERT_TRUE(fd.ok()) << strerror(errno);
    struct stat st = Fstat(fd);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(c.expected, st.st_mode & 07777) << "umask " << std::oct << c.umask_bits << " mode " << c.requested;
    EXPECT_EQ(0, st.st_size);
    EXPECT_EQ(1u, st.st_nlink);
    EXPECT_EQ(geteuid(), st.st_uid);
  }
  umask(022);
}

TEST_F(Open, CreateSetsTimesAndUpdatesParent) {
  struct stat parent0 = Stat(dir_);
  TimeTick();
  long long before = NowNs();
  Path f = P("f");
  Fd fd(open(f, O_CREAT | O_WRONLY, 0644));
  ASSERT_TRUE(fd.ok());
  long long after = NowNs();
  struct stat st = Fstat(fd);
  for (const timespec* t : {&st.st_atim, &st.st_mtim, &st.st_ctim}) {
    EXPECT_GE(Ns(*t), before - kClockSlackNs);
    EXPECT_LE(Ns(*t), after + kClockSlackNs);
  }
  struct stat parent1 = Stat(dir_);
  EXPECT_GT(Ns(parent1.st_mtim), Ns(parent0.st_mtim));
  EXPECT_GT(Ns(parent1.st_ctim), Ns(parent0.st_ctim));
}

TEST_F(Open, CreateWithModeZeroStillGivesWritableFd) {
  // Permissions only apply to opening existing files.
  Fd fd(open(P("f"), O_CREAT | O_RDWR, 0));
  ASSERT_TRUE(fd.ok()) << strerror(errno);
  EXPECT_EQ(0u, Mode(P("f")));
  EXPECT_EQ(3, write(fd, "abc", 3));
  EXPECT_EQ("abc", Pread(fd, 10, 0));
}

TEST_F(Open, CreateOnExistingFileOpensIt) {
  WriteFile(P("f"), "data", 0600);
  struct stat st0 = Stat(P("f"));
  Fd fd(open(P("f"), O_CREAT | O_RDWR, 0777));
  ASSERT_TRUE(fd.ok());
  struct stat st1 = Fstat(fd);
  EXPECT_EQ(st0.st_ino, st1.st_ino);
  EXPECT_EQ(0600u, st1.st_mode & 07777) << "mode of an existing file must not change";
  EXPECT_EQ(4, st1.st_size) << "O_CREAT without O_TRUNC must not truncate";
}

TEST_F(Open, ExclusiveCreateFailsOnAnyExistingName) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("file", P("link")));
  ASSERT_OK(symlink("nonexistent", P("dangling")));
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  for (const char* n : {"file", "dir", "link", "dangling", "fifo"}) {
    EXPECT_OPEN_ERRNO(EEXIST, P(n), O_CREAT | O_EXCL | O_RDONLY, 0644) << n;
    EXPECT_OPEN_ERRNO(EEXIST, P(n), O_CREAT | O_EXCL | O_WRONLY, 0644) << n;
  }
  EXPECT_FALSE(Exists(P("nonexistent"))) << "O_EXCL must not follow a dangling symlink";
  EXPECT_OPEN_OK(P("new"), O_CREAT | O_EXCL | O_WRONLY, 0644);
  EXPECT_EQ(S_IFREG, Type(P("new")));
}

TEST_F(Open, ExclusiveCreateRaceHasExactlyOneWinner) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 20; ++round) {
    Path f = P("race" + std::to_string(round));
    std::atomic<int> winners{0}, eexist{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&] {
        int fd = open(f, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd >= 0) {
          ++winners;
          close(fd);
        } else if (errno == EEXIST) {
          ++eexist;
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(1, winners.load()) << "round " << round;
    EXPECT_EQ(kThreads - 1, eexist.load()) << "round " << round;
  }
}

TEST_F(Open, TruncTruncatesAndUpdatesTimes) {
  WriteFile(P("f"), "0123456789");
  struct stat st0 = Stat(P("f"));
  TimeTick();
  Fd fd(open(P("f"), O_WRONLY | O_TRUNC));
  ASSERT_TRUE(fd.ok());
  struct stat st1 = Fstat(fd);
  EXPECT_EQ(0, st1.st_size);
  EXPECT_EQ(st0.st_ino, st1.st_ino);
  EXPECT_GT(Ns(st1.st_mtim), Ns(st0.st_mtim));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
  EXPECT_EQ("", ReadFile(P("f")));
  // Rewriting after truncation must not resurrect old bytes.
  ASSERT_OK(ftruncate(fd, 10));
  EXPECT_EQ(std::string(10, '\0'), ReadFile(P("f")));
}

TEST_F(Open, TruncWithCreateOnExisting) {
  WriteFile(P("f"), "hello");
  Fd fd(open(P("f"), O_CREAT | O_TRUNC | O_RDWR, 0644));
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(0, Fstat(fd).st_size);
}

TEST_F(Open, AppendWritesAtEnd) {
  WriteFile(P("f"), "abc");
  Fd fd(open(P("f"), O_WRONLY | O_APPEND));
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
  EXPECT_EQ(3, write(fd, "def", 3));
  EXPECT_EQ(6, lseek(fd, 0, SEEK_CUR)) << "offset must be at the new end";
  // A second writer extends the file; the append fd must follow.
  {
    Fd other(open(P("f"), O_WRONLY));
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(4, pwrite(other, "WXYZ", 4, 6));
  }
  EXPECT_EQ(2, write(fd, "gh", 2));
  EXPECT_EQ("abcdefWXYZgh", ReadFile(P("f")));
}

TEST_F(Open, ConcurrentAppendersDoNotOverwriteEachOther) {
  WriteFile(P("f"));
  constexpr int kThreads = 4, kWrites = 100, kLen = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Fd fd(open(P("f"), O_WRONLY | O_APPEND));
      std::string rec(kLen, static_cast<char>('a' + t));
      for (int i = 0; i < kWrites; ++i)
        if (write(fd, rec.data(), rec.size()) != kLen) return;
    });
  for (auto& t : threads) t.join();
  std::string data = ReadFile(P("f"));
  ASSERT_EQ(static_cast<size_t>(kThreads * kWrites * kLen), data.size());
  std::map<char, int> records;
  for (size_t off = 0; off < data.size(); off += kLen) {
    std::string rec = data.substr(off, kLen);
    EXPECT_EQ(std::string(kLen, rec[0]), rec) << "torn record at " << off;
    ++records[rec[0]];
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(kWrites, records[static_cast<char>('a' + t)]);
}

TEST_F(Open, DirectoryFlag) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("dir", P("dirlink")));
  ASSERT_OK(symlink("file", P("filelink")));
  EXPECT_OPEN_ERRNO(ENOTDIR, P("file"), O_RDONLY | O_DIRECTORY);
  EXPECT_OPEN_ERRNO(ENOTDIR, P("filelink"), O_RDONLY | O_DIRECTORY);
  EXPECT_OPEN_OK(P("dir"), O_RDONLY | O_DIRECTORY);
  EXPECT_OPEN_OK(P("dirlink"), O_RDONLY | O_DIRECTORY);
  EXPECT_OPEN_OK(P("dir"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ENOENT, P("missing"), O_RDONLY | O_DIRECTORY);
}

TEST_F(Open, WritingADirectoryIsEISDIR) {
  MkDir(P("dir"));
  EXPECT_OPEN_ERRNO(EISDIR, P("dir"), O_WRONLY);
  EXPECT_OPEN_ERRNO(EISDIR, P("dir"), O_RDWR);
  EXPECT_OPEN_ERRNO(EISDIR, P("dir"), O_WRONLY | O_TRUNC);
  EXPECT_OPEN_ERRNO(EISDIR, P("dir"), O_CREAT | O_RDONLY, 0644);  // O_CREAT without O_DIRECTORY
  EXPECT_OPEN_ERRNO(EISDIR, P("dir"), O_CREAT | O_WRONLY, 0644);
  EXPECT_OPEN_ERRNO(EISDIR, dir_, O_RDWR);
}

TEST_F(Open, MissingAndNotDirectory) {
  WriteFile(P("file"));
  EXPECT_OPEN_ERRNO(ENOENT, P("missing"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ENOENT, P("missing"), O_WRONLY | O_TRUNC);
  EXPECT_OPEN_ERRNO(ENOENT, P("nodir/f"), O_CREAT | O_WRONLY, 0644);
  EXPECT_OPEN_ERRNO(ENOENT, "", O_RDONLY);
  EXPECT_OPEN_ERRNO(ENOTDIR, P("file/f"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ENOTDIR, P("file/f"), O_CREAT | O_WRONLY, 0644);
  EXPECT_OPEN_ERRNO(ENOTDIR, P("file/"), O_RDONLY);  // trailing slash demands a directory
  EXPECT_FALSE(Exists(P("missing")));
}

TEST_F(Open, NameLength) {
  EXPECT_OPEN_OK(P(Name(kNameMax)), O_CREAT | O_WRONLY, 0644);
  EXPECT_TRUE(Exists(P(Name(kNameMax))));
  EXPECT_OPEN_ERRNO(ENAMETOOLONG, P(Name(kNameMax + 1)), O_CREAT | O_WRONLY, 0644);
  EXPECT_OPEN_ERRNO(ENAMETOOLONG, P(Name(kNameMax + 1)), O_RDONLY);
  EXPECT_OPEN_ERRNO(ENAMETOOLONG, P(Name(1000)), O_CREAT | O_WRONLY, 0644);
  // Names are byte strings: any byte except '/' and NUL.
  const std::string odd = "sp ace\ttab\xc3\xa9\xff*?\\\"'\n";
  EXPECT_OPEN_OK(P(odd), O_CREAT | O_WRONLY, 0644);
  EXPECT_EQ(1u, ListDir(dir_).count(odd));
}

TEST_F(Open, SymlinkLoopsAndNoFollow) {
  WriteFile(P("file"), "x");
  ASSERT_OK(symlink("loop1", P("loop2")));
  ASSERT_OK(symlink("loop2", P("loop1")));
  ASSERT_OK(symlink("self", P("self")));
  ASSERT_OK(symlink("file", P("link")));
  MkDir(P("dir"));
  ASSERT_OK(symlink("dir", P("dirlink")));
  EXPECT_OPEN_ERRNO(ELOOP, P("loop1"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ELOOP, P("self"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ELOOP, P("self"), O_CREAT | O_WRONLY, 0644);
  EXPECT_OPEN_ERRNO(ELOOP, P("loop1/x"), O_RDONLY);
  EXPECT_OPEN_ERRNO(ELOOP, P("link"), O_RDONLY | O_NOFOLLOW);
  EXPECT_OPEN_ERRNO(ELOOP, P("link"), O_WRONLY | O_NOFOLLOW);
  EXPECT_OPEN_OK(P("file"), O_RDONLY | O_NOFOLLOW);
  EXPECT_OPEN_OK(P("link"), O_RDONLY);
  // O_NOFOLLOW only concerns the last component.
  WriteFile(P("dir/f"));
  EXPECT_OPEN_OK(P("dirlink/f"), O_RDONLY | O_NOFOLLOW);
}

TEST_F(Open, SymlinkChainOfEightResolves) {
  // _POSIX_SYMLOOP_MAX is 8: a chain of 8 links must resolve.
  WriteFile(P("target"), "t");
  std::string prev = "target";
  for (int i = 0; i < 8; ++i) {
    std::string name = "l" + std::to_string(i);
    ASSERT_OK(symlink(prev.c_str(), P(name)));
    prev = name;
  }
  EXPECT_EQ("t", ReadFile(P(prev)));
}

TEST_F(Open, AccessModeIsEnforcedOnDescriptor) {
  WriteFile(P("f"), "abc");
  char buf[4];
  {
    Fd fd(open(P("f"), O_RDONLY));
    EXPECT_ERRNO(EBADF, write(fd, "x", 1));
    EXPECT_EQ(3, read(fd, buf, sizeof buf));
  }
  {
    Fd fd(open(P("f"), O_WRONLY));
    EXPECT_ERRNO(EBADF, read(fd, buf, sizeof buf));
    EXPECT_EQ(1, write(fd, "x", 1));
  }
  EXPECT_EQ("xbc", ReadFile(P("f")));
}

TEST_F(Open, CreatAndRelativeToDirFd) {
  MkDir(P("d"));
  Fd dfd(open(P("d"), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(dfd.ok());
  Fd fd(openat(dfd, "f", O_CREAT | O_WRONLY, 0644));
  ASSERT_TRUE(fd.ok()) << strerror(errno);
  EXPECT_TRUE(Exists(P("d/f")));
  Fd fd2(creat(P("g"), 0600));
  ASSERT_TRUE(fd2.ok());
  EXPECT_EQ(0600u, Mode(P("g")));
  char buf[1];
  EXPECT_ERRNO(EBADF, read(fd2, buf, 1)) << "creat() opens write-only";
}

// ===========================================================================
// mkdir

TEST_F(Mkdir, CreatesEmptyDirectoryWithModeAndUmask) {
  struct Case {
    mode_t umask_bits, requested, expected;
  };
  const Case cases[] = {{022, 0777, 0755}, {077, 0777, 0700}, {0, 0777, 0777}, {0, 0500, 0500}, {027, 0775, 0750}};
  int i = 0;
  for (const Case& c : cases) {
    umask(c.umask_bits);
    Path d = P("d" + std::to_string(i++));
    ASSERT_OK(mkdir(d, c.requested));
    struct stat st = Stat(d);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(c.expected, st.st_mode & 0777);
    EXPECT_EQ(2u, st.st_nlink);
    EXPECT_EQ(geteuid(), st.st_uid);
    chmod(d, 0755);
    EXPECT_TRUE(ListDir(d).empty());
  }
  umask(022);
}

TEST_F(Mkdir, DotAndDotDotResolve) {
  MkDir(P("d"));
  struct stat d = Stat(P("d")), parent = Stat(dir_);
  EXPECT_EQ(d.st_ino, Stat(P("d/.")).st_ino);
  EXPECT_EQ(parent.st_ino, Stat(P("d/..")).st_ino);
  EXPECT_EQ(d.st_dev, parent.st_dev);
}

TEST_F(Mkdir, LinkCounts) {
  EXPECT_EQ(2u, Stat(dir_).st_nlink);
  MkDir(P("a"));
  EXPECT_EQ(3u, Stat(dir_).st_nlink);
  MkDir(P("b"));
  EXPECT_EQ(4u, Stat(dir_).st_nlink);
  WriteFile(P("file"));
  ASSERT_OK(symlink("a", P("sl")));
  EXPECT_EQ(4u, Stat(dir_).st_nlink) << "files and symlinks do not count";
  for (int i = 0; i < 5; ++i) MkDir(P("a/" + std::to_string(i)));
  EXPECT_EQ(7u, Stat(P("a")).st_nlink);
  EXPECT_EQ(2u, Stat(P("a/0")).st_nlink);
  EXPECT_EQ(4u, Stat(dir_).st_nlink);
}

TEST_F(Mkdir, UpdatesParentTimes) {
  struct stat p0 = Stat(dir_);
  TimeTick();
  long long before = NowNs();
  MkDir(P("d"));
  struct stat p1 = Stat(dir_), d = Stat(P("d"));
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  EXPECT_GE(Ns(d.st_mtim), before - kClockSlackNs);
  EXPECT_GE(Ns(d.st_ctim), before - kClockSlackNs);
  EXPECT_GE(Ns(d.st_atim), before - kClockSlackNs);
}

TEST_F(Mkdir, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("dir", P("link")));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  for (const char* n : {"file", "dir", "link", "dangling", "fifo", ".", ".."}) EXPECT_ERRNO(EEXIST, mkdir(P(n), 0755)) << n;
  EXPECT_FALSE(Exists(P("nowhere")));
  EXPECT_ERRNO(EEXIST, mkdir(dir_, 0755));
  EXPECT_ERRNO(ENOENT, mkdir(P("missing/d"), 0755));
  EXPECT_ERRNO(ENOENT, mkdir("", 0755));
  EXPECT_ERRNO(ENOTDIR, mkdir(P("file/d"), 0755));
  EXPECT_ERRNO(ENAMETOOLONG, mkdir(P(Name(kNameMax + 1)), 0755));
  EXPECT_OK(mkdir(P(Name(kNameMax)), 0755));
  EXPECT_OK(mkdir(P("trailing/"), 0755));
  EXPECT_TRUE(S_ISDIR(Stat(P("trailing")).st_mode));
  EXPECT_EQ(5u, Stat(dir_).st_nlink) << "failed mkdirs must not change the link count";
}

TEST_F(Mkdir, DeepTree) {
  std::string rel = "d";
  for (int i = 0; i < 40; ++i) {
    ASSERT_OK(mkdir(P(rel), 0755));
    rel += "/d";
  }
  WriteFile(P(rel), "deep");
  EXPECT_EQ("deep", ReadFile(P(rel)));
}

// ===========================================================================
// rmdir

TEST_F(Rmdir, RemovesEmptyDirectoryAndUpdatesParent) {
  MkDir(P("d"));
  struct stat p0 = Stat(dir_);
  EXPECT_EQ(3u, p0.st_nlink);
  TimeTick();
  ASSERT_OK(rmdir(P("d")));
  EXPECT_FALSE(Exists(P("d")));
  struct stat p1 = Stat(dir_);
  EXPECT_EQ(2u, p1.st_nlink);
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  EXPECT_ERRNO(ENOENT, rmdir(P("d")));
  EXPECT_OK(mkdir(P("d"), 0755)) << "the name can be reused";
}

TEST_F(Rmdir, NonEmpty) {
  MkDir(P("a"));
  WriteFile(P("a/f"));
  MkDir(P("b"));
  MkDir(P("b/sub"));
  MkDir(P("c"));
  ASSERT_OK(symlink("x", P("c/l")));
  MkDir(P("d"));
  ASSERT_OK(mkfifo(P("d/p"), 0644));
  for (const char* n : {"a", "b", "c", "d"}) EXPECT_ERRNO_IN(rmdir(P(n)), ENOTEMPTY, EEXIST) << n;
  EXPECT_TRUE(Exists(P("a/f")));
  EXPECT_EQ(3u, Stat(P("b")).st_nlink);
  ASSERT_OK(unlink(P("a/f")));
  EXPECT_OK(rmdir(P("a")));
  ASSERT_OK(rmdir(P("b/sub")));
  EXPECT_EQ(2u, Stat(P("b")).st_nlink);
  EXPECT_OK(rmdir(P("b")));
}

TEST_F(Rmdir, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("dir", P("link")));
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  EXPECT_ERRNO(ENOTDIR, rmdir(P("file")));
  EXPECT_ERRNO(ENOTDIR, rmdir(P("link"))) << "rmdir does not follow a final symlink";
  EXPECT_ERRNO(ENOTDIR, rmdir(P("fifo")));
  EXPECT_ERRNO(ENOTDIR, rmdir(P("file/x")));
  EXPECT_ERRNO(ENOENT, rmdir(P("missing")));
  EXPECT_ERRNO(ENOENT, rmdir(P("missing/x")));
  EXPECT_ERRNO(ENAMETOOLONG, rmdir(P(Name(kNameMax + 1))));
  EXPECT_ERRNO(EINVAL, rmdir(P("dir/.")));
  EXPECT_ERRNO_IN(rmdir(P("dir/..")), ENOTEMPTY, EEXIST, EINVAL, EBUSY);
  EXPECT_TRUE(Exists(P("dir")));
  EXPECT_TRUE(Exists(P("link")));
}

TEST_F(Rmdir, OpenDirectoryAfterRemoval) {
  MkDir(P("d"));
  Fd dfd(open(P("d"), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(dfd.ok());
  ASSERT_OK(rmdir(P("d")));
  EXPECT_FALSE(Exists(P("d")));
  // No new entries may be created in a removed directory.
  EXPECT_EQ(Errno{ENOENT}, Err(openat(dfd, "f", O_CREAT | O_WRONLY, 0644)));
  EXPECT_ERRNO(ENOENT, mkdirat(dfd, "sub", 0755));
  struct stat st = Fstat(dfd);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(0u, st.st_nlink);
}

// ===========================================================================
// unlink

TEST_F(Unlink, RemovesNameAndUpdatesTimes) {
  WriteFile(P("f"), "data");
  ASSERT_OK(link(P("f"), P("g")));
  struct stat p0 = Stat(dir_), f0 = Stat(P("g"));
  EXPECT_EQ(2u, f0.st_nlink);
  TimeTick();
  ASSERT_OK(unlink(P("f")));
  EXPECT_FALSE(Exists(P("f")));
  struct stat p1 = Stat(dir_), f1 = Stat(P("g"));
  EXPECT_EQ(1u, f1.st_nlink);
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  EXPECT_GT(Ns(f1.st_ctim), Ns(f0.st_ctim)) << "ctime of a file that still has links";
  EXPECT_EQ("data", ReadFile(P("g")));
  EXPECT_ERRNO(ENOENT, unlink(P("f")));
  EXPECT_EQ(std::multiset<std::string>{"g"}, ListDir(dir_));
}

TEST_F(Unlink, EveryFileType) {
  WriteFile(P("reg"));
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0644, 0));
  ASSERT_OK(symlink("reg", P("sym")));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  if (IsRoot()) {
    ASSERT_OK(mknod(P("chr"), S_IFCHR | 0644, makedev(1, 3)));
    ASSERT_OK(mknod(P("blk"), S_IFBLK | 0644, makedev(7, 0)));
  }
  ASSERT_OK(unlink(P("sym")));
  EXPECT_TRUE(Exists(P("reg"))) << "unlinking a symlink must not touch its target";
  for (const char* n : {"reg", "fifo", "sock", "dangling"}) EXPECT_OK(unlink(P(n))) << n;
  if (IsRoot()) {
    for (const char* n : {"chr", "blk"}) EXPECT_OK(unlink(P(n))) << n;
  }
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(Unlink, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  EXPECT_ERRNO_IN(unlink(P("dir")), EISDIR, EPERM);  // Linux: EISDIR, POSIX also allows EPERM
  EXPECT_TRUE(Exists(P("dir")));
  EXPECT_ERRNO(ENOENT, unlink(P("missing")));
  EXPECT_ERRNO(ENOENT, unlink(P("missing/x")));
  EXPECT_ERRNO(ENOENT, unlink(""));
  EXPECT_ERRNO(ENOTDIR, unlink(P("file/x")));
  EXPECT_ERRNO(ENOTDIR, unlink(P("file/")));
  EXPECT_ERRNO(ENAMETOOLONG, unlink(P(Name(kNameMax + 1))));
  EXPECT_TRUE(Exists(P("file")));
}

TEST_F(Unlink, OpenFileSurvivesUntilClose) {
  WriteFile(P("f"), "hello");
  Fd fd(open(P("f"), O_RDWR));
  ASSERT_TRUE(fd.ok());
  struct stat before = Fstat(fd);
  ASSERT_OK(unlink(P("f")));
  EXPECT_FALSE(Exists(P("f")));
  EXPECT_TRUE(ListDir(dir_).empty());
  struct stat after = Fstat(fd);
  EXPECT_EQ(0u, after.st_nlink);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ("hello", Pread(fd, 100, 0));
  // Still writable, including beyond the old end and across a block boundary.
  PwriteAll(fd, " world", 5);
  std::string big = Pattern(3 << 20);
  PwriteAll(fd, big, 1 << 20);
  EXPECT_EQ("hello world", Pread(fd, 11, 0));
  EXPECT_EQ(big, Pread(fd, big.size(), 1 << 20));
  EXPECT_EQ(static_cast<off_t>((1 << 20) + big.size()), Fstat(fd).st_size);
  EXPECT_OK(ftruncate(fd, 3));
  EXPECT_EQ("hel", Pread(fd, 100, 0));
  EXPECT_OK(fchmod(fd, 0600));
  EXPECT_OK(fsync(fd));
  // A new file with the same name is a different file.
  WriteFile(P("f"), "new");
  EXPECT_EQ("hel", Pread(fd, 100, 0));
  EXPECT_EQ("new", ReadFile(P("f")));
}

TEST_F(Unlink, OpenFileHardLinkedElsewhere) {
  WriteFile(P("f"), "x");
  MkDir(P("d"));
  ASSERT_OK(link(P("f"), P("d/g")));
  Fd fd(open(P("f"), O_RDWR));
  ASSERT_OK(unlink(P("f")));
  EXPECT_EQ(1u, Fstat(fd).st_nlink);
  WriteAll(fd, "yz");
  EXPECT_EQ("yz", ReadFile(P("d/g")));
}

// ===========================================================================
// link

TEST_F(Link, SharesInodeAndData) {
  WriteFile(P("f"), "one");
  struct stat f0 = Stat(P("f")), p0 = Stat(dir_);
  TimeTick();
  ASSERT_OK(link(P("f"), P("g")));
  struct stat f1 = Stat(P("f")), g = Stat(P("g")), p1 = Stat(dir_);
  EXPECT_EQ(f1.st_ino, g.st_ino);
  EXPECT_EQ(2u, f1.st_nlink);
  EXPECT_EQ(2u, g.st_nlink);
  EXPECT_GT(Ns(f1.st_ctim), Ns(f0.st_ctim)) << "link marks the file's ctime";
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  EXPECT_EQ(Ns(f0.st_mtim), Ns(f1.st_mtim)) << "link does not modify data";
  // Writes through either name are visible through the other.
  {
    Fd fd(open(P("g"), O_WRONLY | O_APPEND));
    WriteAll(fd, "+two");
  }
  EXPECT_EQ("one+two", ReadFile(P("f")));
  ASSERT_OK(chmod(P("f"), 0600));
  EXPECT_EQ(0600u, Mode(P("g"))) << "metadata is shared";
  ASSERT_OK(truncate(P("f"), 3));
  EXPECT_EQ("one", ReadFile(P("g")));
}

TEST_F(Link, CountsAcrossDirectories) {
  WriteFile(P("f"));
  MkDir(P("a"));
  MkDir(P("b"));
  const char* names[] = {"a/1", "a/2", "b/1", "b/2", "f2"};
  nlink_t n = 1;
  for (const char* name : names) {
    ASSERT_OK(link(P("f"), P(name))) << name;
    EXPECT_EQ(++n, Stat(P("f")).st_nlink);
  }
  EXPECT_EQ(2u, Stat(P("a")).st_nlink) << "file links do not change directory link counts";
  EXPECT_EQ(4u, Stat(dir_).st_nlink);
  for (const char* name : names) {
    ASSERT_OK(unlink(P(name)));
    EXPECT_EQ(--n, Stat(P("f")).st_nlink);
  }
  ASSERT_OK(link(P("f"), P("g")));
  ASSERT_OK(unlink(P("f")));
  EXPECT_EQ(1u, Stat(P("g")).st_nlink) << "the original name is not special";
}

TEST_F(Link, Errors) {
  WriteFile(P("file"));
  WriteFile(P("other"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("file", P("sym")));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  for (const char* n : {"other", "dir", "sym", "dangling", "file"}) EXPECT_ERRNO(EEXIST, link(P("file"), P(n))) << n;
  EXPECT_FALSE(Exists(P("nowhere")));
  EXPECT_EQ(1u, Stat(P("file")).st_nlink);
  EXPECT_ERRNO(EPERM, link(P("dir"), P("dirlink")));
  EXPECT_ERRNO(ENOENT, link(P("missing"), P("new")));
  EXPECT_ERRNO(ENOENT, link(P("file"), P("missing/new")));
  EXPECT_ERRNO(ENOENT, link(P("missing/x"), P("new")));
  EXPECT_ERRNO(ENOTDIR, link(P("file/x"), P("new")));
  EXPECT_ERRNO(ENOTDIR, link(P("file"), P("other/new")));
  EXPECT_ERRNO(ENAMETOOLONG, link(P("file"), P(Name(kNameMax + 1))));
  EXPECT_OK(link(P("file"), P(Name(kNameMax))));
  EXPECT_FALSE(Exists(P("new")));
}

TEST_F(Link, SymlinkItselfOrTarget) {
  WriteFile(P("file"));
  ASSERT_OK(symlink("file", P("sym")));
  // linkat without AT_SYMLINK_FOLLOW links the symlink itself.
  ASSERT_OK(linkat(AT_FDCWD, P("sym"), AT_FDCWD, P("sym2"), 0));
  struct stat s2 = Lstat(P("sym2"));
  EXPECT_TRUE(S_ISLNK(s2.st_mode));
  EXPECT_EQ(Lstat(P("sym")).st_ino, s2.st_ino);
  EXPECT_EQ(2u, s2.st_nlink);
  EXPECT_EQ(1u, Stat(P("file")).st_nlink);
  // With AT_SYMLINK_FOLLOW the target is linked.
  ASSERT_OK(linkat(AT_FDCWD, P("sym"), AT_FDCWD, P("hard"), AT_SYMLINK_FOLLOW));
  EXPECT_TRUE(S_ISREG(Lstat(P("hard")).st_mode));
  EXPECT_EQ(Stat(P("file")).st_ino, Lstat(P("hard")).st_ino);
  EXPECT_EQ(2u, Stat(P("file")).st_nlink);
}

TEST_F(Link, SpecialFiles) {
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  ASSERT_OK(link(P("fifo"), P("fifo2")));
  EXPECT_TRUE(S_ISFIFO(Lstat(P("fifo2")).st_mode));
  EXPECT_EQ(2u, Lstat(P("fifo")).st_nlink);
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0644, 0));
  ASSERT_OK(link(P("sock"), P("sock2")));
  EXPECT_TRUE(S_ISSOCK(Lstat(P("sock2")).st_mode));
}

// ===========================================================================
// symlink / readlink

TEST_F(Symlink, RoundTrip) {
  struct Case {
    const char* name;
    std::string target;
  };
  const Case cases[] = {
      {"rel", "file"},
      {"abs", "/etc/passwd"},
      {"dots", "../../x/./y"},
      {"dangling", "does/not/exist"},
      {"spaces", "a b\tc"},
      {"long1000", std::string(1000, 't')},
      {"longpath", [] {
         std::string s;
         for (int i = 0; i < 200; ++i) s += "dir" + std::to_string(i) + "/";
         return s + "end";
       }()},
  };
  for (const Case& c : cases) {
    ASSERT_OK(symlink(c.target.c_str(), P(c.name))) << c.name;
    struct stat st = Lstat(P(c.name));
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << c.name;
    EXPECT_EQ(static_cast<off_t>(c.target.size()), st.st_size) << c.name;
    EXPECT_EQ(1u, st.st_nlink);
    std::string buf(8192, '\0');
    ssize_t n = readlink(P(c.name), buf.data(), buf.size());
    ASSERT_GE(n, 0) << strerror(errno);
    EXPECT_EQ(c.target, buf.substr(0, static_cast<size_t>(n))) << c.name;
  }
}

TEST_F(Symlink, FollowedByPathResolution) {
  MkDir(P("dir"));
  WriteFile(P("dir/file"), "content");
  ASSERT_OK(symlink("dir", P("rel")));
  ASSERT_OK(symlink((dir_.str() + "/dir/file").c_str(), P("abs")));
  ASSERT_OK(symlink("../dir/file", P("dir/up")));
  EXPECT_EQ("content", ReadFile(P("rel/file")));
  EXPECT_EQ("content", ReadFile(P("abs")));
  EXPECT_EQ("content", ReadFile(P("rel/up")));
  EXPECT_EQ(Stat(P("dir/file")).st_ino, Stat(P("abs")).st_ino);
  EXPECT_TRUE(S_ISDIR(Stat(P("rel")).st_mode));
  EXPECT_TRUE(S_ISLNK(Lstat(P("rel")).st_mode));
  EXPECT_TRUE(S_ISDIR(Lstat(P("rel/")).st_mode)) << "a trailing slash resolves the symlink";
  ASSERT_OK(symlink("nowhere", P("dangling")));
  EXPECT_ERRNO(ENOENT, access(P("dangling"), F_OK));
  struct stat st;
  EXPECT_ERRNO(ENOENT, stat(P("dangling"), &st));
  EXPECT_OK(lstat(P("dangling"), &st));
}

TEST_F(Symlink, UpdatesParentTimes) {
  struct stat p0 = Stat(dir_);
  TimeTick();
  ASSERT_OK(symlink("x", P("l")));
  struct stat p1 = Stat(dir_);
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
}

TEST_F(Symlink, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("file", P("sym")));
  for (const char* n : {"file", "dir", "sym"}) EXPECT_ERRNO(EEXIST, symlink("t", P(n))) << n;
  EXPECT_EQ("file", [&] {
    char b[16];
    ssize_t n = readlink(P("sym"), b, sizeof b);
    return std::string(b, n > 0 ? static_cast<size_t>(n) : 0);
  }());
  EXPECT_ERRNO(ENOENT, symlink("t", P("missing/l")));
  EXPECT_ERRNO(ENOTDIR, symlink("t", P("file/l")));
  EXPECT_ERRNO(ENAMETOOLONG, symlink("t", P(Name(kNameMax + 1))));
  EXPECT_OK(symlink("t", P(Name(kNameMax))));
  // Linux VFS: targets are limited to PATH_MAX including the terminating NUL.
  EXPECT_ERRNO(ENAMETOOLONG, symlink(std::string(PATH_MAX, 'a').c_str(), P("huge")));
  EXPECT_FALSE(Exists(P("huge")));
}

TEST_F(Symlink, ReadlinkErrorsAndTruncation) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("0123456789", P("sym")));
  char buf[64];
  EXPECT_ERRNO(EINVAL, readlink(P("file"), buf, sizeof buf));
  EXPECT_ERRNO(EINVAL, readlink(P("dir"), buf, sizeof buf));
  EXPECT_ERRNO(ENOENT, readlink(P("missing"), buf, sizeof buf));
  EXPECT_ERRNO(ENOTDIR, readlink(P("file/x"), buf, sizeof buf));
  // A too-small buffer truncates; no NUL is appended.
  memset(buf, '#', sizeof buf);
  EXPECT_EQ(4, readlink(P("sym"), buf, 4));
  EXPECT_EQ("0123#", std::string(buf, 5));
  EXPECT_EQ(10, readlink(P("sym"), buf, sizeof buf));
}

TEST_F(Symlink, LoopsAreELOOP) {
  ASSERT_OK(symlink("b", P("a")));
  ASSERT_OK(symlink("a", P("b")));
  struct stat st;
  EXPECT_ERRNO(ELOOP, stat(P("a"), &st));
  EXPECT_ERRNO(ELOOP, stat(P("a/x"), &st));
  EXPECT_ERRNO(ELOOP, access(P("b"), F_OK));
  EXPECT_ERRNO(ELOOP, chmod(P("a"), 0644));
  EXPECT_ERRNO(ELOOP, truncate(P("a"), 0));
  EXPECT_ERRNO(ELOOP, mkdir(P("a/x"), 0755));
  EXPECT_OK(lstat(P("a"), &st));
  EXPECT_OK(unlink(P("a"))) << "the link itself can be removed";
}

// ===========================================================================
// mkfifo / mknod

TEST_F(Mknod, Fifo) {
  umask(022);
  ASSERT_OK(mkfifo(P("fifo"), 0666));
  struct stat st = Lstat(P("fifo"));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(0644u, st.st_mode & 07777);
  EXPECT_EQ(0, st.st_size);
  ASSERT_OK(mknod(P("fifo2"), S_IFIFO | 0600, 0));
  EXPECT_TRUE(S_ISFIFO(Lstat(P("fifo2")).st_mode));
  EXPECT_EQ(0600u, Mode(P("fifo2")));
  // The FIFO works: data written to it comes out of it.
  Fd rd(open(P("fifo"), O_RDONLY | O_NONBLOCK));
  ASSERT_TRUE(rd.ok());
  Fd wr(open(P("fifo"), O_WRONLY | O_NONBLOCK));
  ASSERT_TRUE(wr.ok());
  EXPECT_EQ(5, write(wr, "hello", 5));
  char buf[16];
  EXPECT_EQ(5, read(rd, buf, sizeof buf));
  EXPECT_EQ("hello", std::string(buf, 5));
  EXPECT_ERRNO(ESPIPE, lseek(rd, 0, SEEK_SET));
  // Writer-only non-blocking open without a reader fails with ENXIO.
  rd.reset();
  wr.reset();
  EXPECT_OPEN_ERRNO(ENXIO, P("fifo2"), O_WRONLY | O_NONBLOCK);
}

TEST_F(Mknod, Socket) {
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0644, 0));
  EXPECT_TRUE(S_ISSOCK(Lstat(P("sock")).st_mode));
  EXPECT_EQ(0644u, Mode(P("sock")));
  // bind() creates a socket file; connect() through the name reaches it.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = P("bound").str();
  if (name.size() >= sizeof addr.sun_path) GTEST_SKIP() << "path too long for sun_path";
  memcpy(addr.sun_path, name.c_str(), name.size() + 1);
  Fd srv(socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_OK(bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr));
  ASSERT_OK(listen(srv, 1));
  EXPECT_TRUE(S_ISSOCK(Lstat(P("bound")).st_mode));
  Fd cli(socket(AF_UNIX, SOCK_STREAM, 0));
  EXPECT_OK(connect(cli, reinterpret_cast<sockaddr*>(&addr), sizeof addr));
  EXPECT_ERRNO(EADDRINUSE, bind(Fd(socket(AF_UNIX, SOCK_STREAM, 0)), reinterpret_cast<sockaddr*>(&addr), sizeof addr));
}

TEST_F(Mknod, RegularFile) {
  ASSERT_OK(mknod(P("reg"), S_IFREG | 0640, 0));
  struct stat st = Lstat(P("reg"));
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(0640u, st.st_mode & 07777);
  EXPECT_EQ(0, st.st_size);
  {
    Fd fd(open(P("reg"), O_WRONLY));
    WriteAll(fd, "abc");
  }
  EXPECT_EQ("abc", ReadFile(P("reg")));
}

TEST_F(Mknod, DevicesPreserveRdev) {
  if (!IsRoot()) GTEST_SKIP() << "device nodes need root";
  umask(0);
  struct Case {
    const char* name;
    mode_t type;
    unsigned maj, min;
  };
  const Case cases[] = {
      {"null", S_IFCHR, 1, 3},       {"zero", S_IFCHR, 1, 5},      {"loop", S_IFBLK, 7, 0},
      {"big", S_IFCHR, 4095, 1048575}, {"bigblk", S_IFBLK, 259, 65536}, {"zerodev", S_IFCHR, 0, 0},
  };
  for (const Case& c : cases) {
    ASSERT_OK(mknod(P(c.name), c.type | 0620, makedev(c.maj, c.min))) << c.name;
    struct stat st = Lstat(P(c.name));
    EXPECT_EQ(c.type, st.st_mode & S_IFMT) << c.name;
    EXPECT_EQ(0620u, st.st_mode & 07777) << c.name;
    EXPECT_EQ(c.maj, major(st.st_rdev)) << c.name;
    EXPECT_EQ(c.min, minor(st.st_rdev)) << c.name;
  }
  // The rdev survives a rename and a hard link.
  ASSERT_OK(rename(P("null"), P("null2")));
  ASSERT_OK(link(P("null2"), P("null3")));
  EXPECT_EQ(makedev(1, 3), Lstat(P("null3")).st_rdev);
}

TEST_F(Mknod, UpdatesParentTimes) {
  struct stat p0 = Stat(dir_);
  TimeTick();
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  struct stat p1 = Stat(dir_);
  EXPECT_GT(Ns(p1.st_mtim), Ns(p0.st_mtim));
  EXPECT_GT(Ns(p1.st_ctim), Ns(p0.st_ctim));
  TimeTick();
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0644, 0));
  struct stat p2 = Stat(dir_);
  EXPECT_GT(Ns(p2.st_mtim), Ns(p1.st_mtim));
  EXPECT_GT(Ns(p2.st_ctim), Ns(p1.st_ctim));
}

TEST_F(Mknod, Errors) {
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("nowhere", P("dangling")));
  for (const char* n : {"file", "dir", "dangling"}) {
    EXPECT_ERRNO(EEXIST, mkfifo(P(n), 0644)) << n;
    EXPECT_ERRNO(EEXIST, mknod(P(n), S_IFIFO | 0644, 0)) << n;
    EXPECT_ERRNO(EEXIST, mknod(P(n), S_IFSOCK | 0644, 0)) << n;
  }
  EXPECT_FALSE(Exists(P("nowhere")));
  EXPECT_ERRNO(ENOENT, mkfifo(P("missing/f"), 0644));
  EXPECT_ERRNO(ENOTDIR, mkfifo(P("file/f"), 0644));
  EXPECT_ERRNO(ENAMETOOLONG, mkfifo(P(Name(kNameMax + 1)), 0644));
  EXPECT_ERRNO(ENAMETOOLONG, mknod(P(Name(kNameMax + 1)), S_IFSOCK | 0644, 0));
  EXPECT_OK(mkfifo(P(Name(kNameMax)), 0644));
  EXPECT_OK(mknod(P(Name(kNameMax, 'y')), S_IFSOCK | 0644, 0));
}

// ===========================================================================
// readdir

TEST_F(Readdir, ListsExactlyTheEntries) {
  EXPECT_TRUE(ListDir(dir_).empty());
  WriteFile(P("file"));
  MkDir(P("dir"));
  ASSERT_OK(symlink("file", P("sym")));
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  EXPECT_EQ((std::multiset<std::string>{"file", "dir", "sym", "fifo"}), ListDir(dir_));
  // "." and ".." are reported, with the right inode numbers.
  DIR* d = opendir(dir_);
  ASSERT_NE(nullptr, d);
  std::map<std::string, dirent> entries;
  while (dirent* e = readdir(d)) entries[e->d_name] = *e;
  closedir(d);
  ASSERT_EQ(6u, entries.size());
  EXPECT_EQ(Stat(dir_).st_ino, entries["."].d_ino);
  EXPECT_EQ(Stat(root_.c_str()).st_ino, entries[".."].d_ino);
  for (const char* n : {"file", "dir", "sym", "fifo"}) EXPECT_EQ(Lstat(P(n)).st_ino, entries[n].d_ino) << n;
  // d_type is optional (DT_UNKNOWN), but when reported it must be right.
  const std::map<std::string, unsigned char> types = {
      {"file", DT_REG}, {"dir", DT_DIR}, {"sym", DT_LNK}, {"fifo", DT_FIFO}};
  for (const auto& [n, t] : types)
    if (entries[n].d_type != DT_UNKNOWN) {
      EXPECT_EQ(t, entries[n].d_type) << n;
    }
}

TEST_F(Readdir, LargeDirectory) {
  constexpr int kFiles = 2000;
  std::multiset<std::string> want;
  for (int i = 0; i < kFiles; ++i) {
    std::string n = "file-with-a-longish-name-" + std::to_string(i);
    Fd fd(open(P(n), O_CREAT | O_WRONLY, 0644));
    ASSERT_TRUE(fd.ok());
    want.insert(n);
  }
  EXPECT_EQ(want, ListDir(dir_)) << "every entry exactly once";
  for (int i = 0; i < kFiles; i += 2) ASSERT_OK(unlink(P("file-with-a-longish-name-" + std::to_string(i))));
  for (int i = 0; i < kFiles; i += 2) want.erase("file-with-a-longish-name-" + std::to_string(i));
  EXPECT_EQ(want, ListDir(dir_));
}

TEST_F(Readdir, RemovingWhileIterating) {
  // Entries neither removed nor added during the iteration must be returned
  // exactly once.
  constexpr int kFiles = 500;
  for (int i = 0; i < kFiles; ++i) WriteFile(P(std::to_string(i)));
  DIR* d = opendir(dir_);
  ASSERT_NE(nullptr, d);
  std::multiset<std::string> seen;
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    seen.insert(name);
    // Remove the entry just returned (never one that is still to come).
    EXPECT_OK(unlink(P(name)));
    ++n;
  }
  closedir(d);
  EXPECT_EQ(kFiles, n);
  EXPECT_EQ(static_cast<size_t>(kFiles), std::set<std::string>(seen.begin(), seen.end()).size());
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(Readdir, RewindSeesNewEntries) {
  WriteFile(P("a"));
  DIR* d = opendir(dir_);
  ASSERT_NE(nullptr, d);
  int count = 0;
  while (readdir(d)) ++count;
  EXPECT_EQ(3, count);
  WriteFile(P("b"));
  rewinddir(d);
  count = 0;
  while (readdir(d)) ++count;
  EXPECT_EQ(4, count);
  closedir(d);
}

TEST_F(Readdir, Errors) {
  WriteFile(P("file"));
  EXPECT_EQ(nullptr, opendir(P("file")));
  EXPECT_EQ(ENOTDIR, errno);
  EXPECT_EQ(nullptr, opendir(P("missing")));
  EXPECT_EQ(ENOENT, errno);
}

// ===========================================================================
// read / write

TEST_F(Io, WriteUpdatesSizeMtimeCtimeAndReadDoesNot) {
  WriteFile(P("f"), "0123456789");
  Fd fd(open(P("f"), O_RDWR));
  struct stat st0 = Fstat(fd);
  TimeTick();
  char buf[4];
  EXPECT_EQ(4, pread(fd, buf, 4, 2));
  struct stat st1 = Fstat(fd);
  EXPECT_EQ(Ns(st0.st_mtim), Ns(st1.st_mtim)) << "read must not change mtime";
  EXPECT_EQ(Ns(st0.st_ctim), Ns(st1.st_ctim)) << "read must not change ctime";
  TimeTick();
  EXPECT_EQ(3, pwrite(fd, "abc", 3, 20));
  struct stat st2 = Fstat(fd);
  EXPECT_EQ(23, st2.st_size);
  EXPECT_GT(Ns(st2.st_mtim), Ns(st1.st_mtim));
  EXPECT_GT(Ns(st2.st_ctim), Ns(st1.st_ctim));
  // The gap reads as zeros.
  EXPECT_EQ(std::string("0123456789") + std::string(10, '\0') + "abc", ReadFile(P("f")));
  // Also observable through stat() by path and after reopening.
  EXPECT_EQ(Ns(st2.st_mtim), Ns(Stat(P("f")).st_mtim));
}

TEST_F(Io, ZeroLengthWriteChangesNothing) {
  WriteFile(P("f"), "abc");
  Fd fd(open(P("f"), O_WRONLY));
  EXPECT_EQ(0, write(fd, "", 0));
  EXPECT_EQ(0, pwrite(fd, "", 0, 100));
  EXPECT_EQ(3, Fstat(fd).st_size);
}

TEST_F(Io, ReadAtAndPastEof) {
  WriteFile(P("f"), "abc");
  Fd fd(open(P("f"), O_RDONLY));
  char buf[8];
  EXPECT_EQ(3, read(fd, buf, sizeof buf));
  EXPECT_EQ(0, read(fd, buf, sizeof buf));
  EXPECT_EQ(0, pread(fd, buf, sizeof buf, 1000));
  EXPECT_EQ(1, pread(fd, buf, sizeof buf, 2));
}

TEST_F(Io, UnalignedWritesAcrossBlockBoundaries) {
  // Overlapping, unaligned writes over several MiB, verified against a model.
  constexpr size_t kSize = 10 << 20;
  std::string model(kSize, '\0');
  Fd fd(open(P("f"), O_CREAT | O_RDWR, 0644));
  ASSERT_TRUE(fd.ok());
  struct W {
    size_t off, len;
  };
  const W writes[] = {
      {0, 1},           {1, 4095},        {4095, 2},        {(1 << 20) - 7, 14}, {(4 << 20) - 3, 6},
      {(4 << 20) - 100000, 300000},      {3 << 20, 2 << 20}, {(8 << 20) + 1, 65537}, {kSize - 10, 10},
      {12345, 1 << 20}, {(4 << 20) - 1, 1}, {4 << 20, 1},
  };
  unsigned seed = 1;
  for (const W& w : writes) {
    std::string data = Pattern(w.len, seed++);
    PwriteAll(fd, data, static_cast<off_t>(w.off));
    model.replace(w.off, w.len, data);
  }
  EXPECT_EQ(static_cast<off_t>(kSize), Fstat(fd).st_size);
  std::string got = Pread(fd, kSize, 0);
  ASSERT_EQ(model.size(), got.size());
  EXPECT_TRUE(model == got) << "content differs from the model";
  fd.reset();
  EXPECT_TRUE(model == ReadFile(P("f"))) << "content differs after reopening";
}

TEST_F(Io, DataVisibleThroughOtherDescriptors) {
  Fd w(open(P("f"), O_CREAT | O_WRONLY, 0644));
  Fd r(open(P("f"), O_RDONLY));
  ASSERT_TRUE(w.ok() && r.ok());
  WriteAll(w, "first");
  EXPECT_EQ("first", Pread(r, 100, 0)) << "a read after a write returns the new data";
  PwriteAll(w, "F", 0);
  EXPECT_EQ("First", Pread(r, 100, 0));
  EXPECT_EQ(5, Fstat(r).st_size);
  EXPECT_OK(fsync(w));
  EXPECT_OK(fdatasync(w));
  Fd dfd(open(dir_, O_RDONLY | O_DIRECTORY));
  EXPECT_OK(fsync(dfd)) << "fsync of a directory";
}

TEST_F(Io, StBlocksGrowWithData) {
  WriteFile(P("f"));
  Fd fd(open(P("f"), O_WRONLY));
  struct stat st0 = Fstat(fd);
  std::string data = Pattern(1 << 20);
  WriteAll(fd, data);
  ASSERT_OK(fsync(fd));
  struct stat st1 = Fstat(fd);
  EXPECT_GT(st1.st_blocks, st0.st_blocks);
  EXPECT_GE(st1.st_blocks * 512, static_cast<blkcnt_t>(data.size()) / 2) << "st_blocks counts 512-byte units";
  EXPECT_GT(st1.st_blksize, 0);
}

TEST_F(Io, LseekBasics) {
  WriteFile(P("f"), "0123456789");
  Fd fd(open(P("f"), O_RDWR));
  EXPECT_EQ(10, lseek(fd, 0, SEEK_END));
  EXPECT_EQ(4, lseek(fd, -6, SEEK_END));
  EXPECT_EQ(6, lseek(fd, 2, SEEK_CUR));
  EXPECT_ERRNO(EINVAL, lseek(fd, -1, SEEK_SET));
  EXPECT_ERRNO(EINVAL, lseek(fd, -100, SEEK_END));
  EXPECT_EQ(6, lseek(fd, 0, SEEK_CUR)) << "failed lseek must not move the offset";
  EXPECT_EQ(100, lseek(fd, 100, SEEK_SET)) << "seeking past EOF is allowed";
  EXPECT_EQ(10, Fstat(fd).st_size) << "and does not change the size";
  EXPECT_EQ(1, write(fd, "x", 1));
  EXPECT_EQ(101, Fstat(fd).st_size);
  char buf[1];
  EXPECT_ERRNO(EINVAL, pread(fd, buf, 1, -1));
  EXPECT_ERRNO(EINVAL, pwrite(fd, "x", 1, -1));
}

// ===========================================================================
// Path resolution errors, uniformly for every path-taking call.

TEST_F(PathErrors, EveryCallReportsPathProblems) {
  WriteFile(P("file"), "x");
  MkDir(P("dir"));
  ASSERT_OK(symlink("loop", P("loop")));
  const std::string too_long_path = P("dir").str() + std::string(PATH_MAX, '/') + "x";
  // bad path -> expected errno. Creation calls use the path as the new name.
  const std::vector<std::pair<std::string, int>> bad = {
      {P("missing/x").str(), ENOENT},
      {P("file/x").str(), ENOTDIR},
      {P(Name(kNameMax + 1) + "/x").str(), ENAMETOOLONG},
      {P("dir/" + Name(kNameMax + 1)).str(), ENAMETOOLONG},
      {too_long_path, ENAMETOOLONG},
      {P("loop/x").str(), ELOOP},
  };
  const std::string file = P("file").str();
  using Call = std::function<Errno(const char*)>;
  const std::vector<std::pair<const char*, Call>> calls = {
      {"stat", [](const char* p) { struct stat st; return Err(stat(p, &st)); }},
      {"lstat", [](const char* p) { struct stat st; return Err(lstat(p, &st)); }},
      {"access", [](const char* p) { return Err(access(p, F_OK)); }},
      {"open", [](const char* p) { return OpenErr(p, O_RDONLY); }},
      {"open-creat", [](const char* p) { return OpenErr(p, O_CREAT | O_WRONLY, 0644); }},
      {"opendir", [](const char* p) {
         DIR* d = opendir(p);
         if (!d) return Errno{errno};
         closedir(d);
         return Errno{};
       }},
      {"mkdir", [](const char* p) { return Err(mkdir(p, 0755)); }},
      {"rmdir", [](const char* p) { return Err(rmdir(p)); }},
      {"unlink", [](const char* p) { return Err(unlink(p)); }},
      {"mkfifo", [](const char* p) { return Err(mkfifo(p, 0644)); }},
      {"mknod", [](const char* p) { return Err(mknod(p, S_IFSOCK | 0644, 0)); }},
      {"symlink-new", [](const char* p) { return Err(symlink("t", p)); }},
      {"readlink", [](const char* p) { char b[8]; return Err(readlink(p, b, sizeof b)); }},
      {"link-old", [&](const char* p) { return Err(link(p, (file + ".l").c_str())); }},
      {"link-new", [&](const char* p) { return Err(link(file.c_str(), p)); }},
      {"rename-old", [&](const char* p) { return Err(rename(p, (file + ".r").c_str())); }},
      {"rename-new", [&](const char* p) { return Err(rename(file.c_str(), p)); }},
      {"chmod", [](const char* p) { return Err(chmod(p, 0644)); }},
      {"chown", [](const char* p) { return Err(chown(p, geteuid(), getegid())); }},
      {"lchown", [](const char* p) { return Err(lchown(p, geteuid(), getegid())); }},
      {"truncate", [](const char* p) { return Err(truncate(p, 0)); }},
      {"utimensat", [](const char* p) { return Err(utimensat(AT_FDCWD, p, nullptr, 0)); }},
      {"setxattr", [](const char* p) { return Err(setxattr(p, "user.x", "v", 1, 0)); }},
      {"getxattr", [](const char* p) { char b[8]; return Err(getxattr(p, "user.x", b, sizeof b)); }},
      {"listxattr", [](const char* p) { char b[64]; return Err(listxattr(p, b, sizeof b)); }},
      {"removexattr", [](const char* p) { return Err(removexattr(p, "user.x")); }},
      {"chdir-like", [](const char* p) { return OpenErr(p, O_RDONLY | O_DIRECTORY); }},
  };
  for (const auto& [call_name, call] : calls)
    for (const auto& [path, err] : bad) {
      std::string shown = path.size() > 80 ? path.substr(0, 40) + "..." : path;
      EXPECT_EQ(Errno{err}, call(path.c_str())) << call_name << "(" << shown << ")";
    }
  EXPECT_EQ((std::multiset<std::string>{"file", "dir", "loop"}), ListDir(dir_)) << "no call may have created anything";
  EXPECT_TRUE(ListDir(P("dir")).empty());
  EXPECT_EQ("x", ReadFile(P("file")));
}

TEST_F(PathErrors, MissingLastComponent) {
  const Path m = P("missing");
  struct stat st;
  char b[8];
  EXPECT_ERRNO(ENOENT, stat(m, &st));
  EXPECT_ERRNO(ENOENT, lstat(m, &st));
  EXPECT_ERRNO(ENOENT, access(m, F_OK));
  EXPECT_ERRNO(ENOENT, chmod(m, 0644));
  EXPECT_ERRNO(ENOENT, chown(m, 0, 0));
  EXPECT_ERRNO(ENOENT, lchown(m, 0, 0));
  EXPECT_ERRNO(ENOENT, truncate(m, 0));
  EXPECT_ERRNO(ENOENT, utimensat(AT_FDCWD, m, nullptr, 0));
  EXPECT_ERRNO(ENOENT, readlink(m, b, sizeof b));
  EXPECT_ERRNO(ENOENT, rmdir(m));
  EXPECT_ERRNO(ENOENT, unlink(m));
  EXPECT_ERRNO(ENOENT, rename(m, P("x")));
  EXPECT_ERRNO(ENOENT, link(m, P("x")));
  EXPECT_ERRNO(ENOENT, getxattr(m, "user.x", b, sizeof b));
  EXPECT_ERRNO(ENOENT, setxattr(m, "user.x", "v", 1, 0));
  EXPECT_FALSE(Exists(P("x")));
}

}  // namespace
}  // namespace posix_e2e
