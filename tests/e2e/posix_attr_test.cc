// End-to-end POSIX conformance: attributes and space management.
//   chmod, chown, truncate/ftruncate, utimensat/futimens and timestamp rules,
//   extended attributes, posix_fallocate/fallocate, lseek SEEK_DATA/SEEK_HOLE,
//   statvfs.
// See posix_util.h for the conventions; run with TESSERA_TEST_DIR=<dir>.
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include <algorithm>

#include "posix_util.h"

namespace posix_e2e {
namespace {

class Chmod : public PosixTest {};
class Chown : public PosixTest {};
class Truncate : public PosixTest {};
class Utimensat : public PosixTest {};
class Times : public PosixTest {};
class Xattr : public PosixTest {};
class Fallocate : public PosixTest {};
class SeekHole : public PosixTest {};
class Statfs : public PosixTest {};

// ===========================================================================
// chmod

TEST_F(Chmod, SetsPermissionBitsOfFiles) {
  WriteFile(P("f"));
  for (mode_t m : {0000, 0400, 0644, 0755, 0777, 0111, 0070, 0007, 04755, 02755, 06777, 04000, 02000}) {
    ASSERT_OK(chmod(P("f"), m));
    EXPECT_EQ(m, Mode(P("f"))) << std::oct << m;
    EXPECT_TRUE(S_ISREG(Lstat(P("f")).st_mode));
  }
}

TEST_F(Chmod, SetsPermissionBitsOfDirectoriesAndSpecialFiles) {
  MkDir(P("d"));
  ASSERT_OK(mkfifo(P("fifo"), 0600));
  ASSERT_OK(mknod(P("sock"), S_IFSOCK | 0600, 0));
  for (const char* n : {"d", "fifo", "sock"}) {
    for (mode_t m : {0000, 0700, 0755, 0777, 01777, 02755, 03775, 0511}) {
      ASSERT_OK(chmod(P(n), m));
      EXPECT_EQ(m, Mode(P(n))) << n << " " << std::oct << m;
    }
  }
  EXPECT_TRUE(S_ISDIR(Lstat(P("d")).st_mode));
  EXPECT_TRUE(S_ISFIFO(Lstat(P("fifo")).st_mode));
  EXPECT_TRUE(S_ISSOCK(Lstat(P("sock")).st_mode));
}

TEST_F(Chmod, UpdatesCtimeOnly) {
  WriteFile(P("f"), "x");
  struct stat st0 = Stat(P("f"));
  TimeTick();
  ASSERT_OK(chmod(P("f"), 0600));
  struct stat st1 = Stat(P("f"));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
  EXPECT_EQ(Ns(st0.st_mtim), Ns(st1.st_mtim));
  EXPECT_EQ(Ns(st0.st_atim), Ns(st1.st_atim));
  // The parent directory is not modified by chmod of an entry.
  struct stat p0 = Stat(dir_);
  TimeTick();
  ASSERT_OK(chmod(P("f"), 0644));
  struct stat p1 = Stat(dir_);
  EXPECT_EQ(Ns(p0.st_mtim), Ns(p1.st_mtim));
  EXPECT_EQ(Ns(p0.st_ctim), Ns(p1.st_ctim));
}

TEST_F(Chmod, FollowsSymlinks) {
  WriteFile(P("f"), "", 0644);
  ASSERT_OK(symlink("f", P("l")));
  mode_t link_mode = Mode(P("l"));
  ASSERT_OK(chmod(P("l"), 0600));
  EXPECT_EQ(0600u, Mode(P("f")));
  EXPECT_EQ(link_mode, Mode(P("l"))) << "the symlink's own mode is unchanged";
  EXPECT_TRUE(S_ISLNK(Lstat(P("l")).st_mode));
}

TEST_F(Chmod, ThroughDescriptor) {
  WriteFile(P("f"), "", 0644);
  Fd fd(open(P("f"), O_RDONLY));
  ASSERT_OK(fchmod(fd, 0400));
  EXPECT_EQ(0400u, Mode(P("f")));
  EXPECT_OK(fchmodat(AT_FDCWD, P("f"), 0440, 0));
  EXPECT_EQ(0440u, Fstat(fd).st_mode & 07777);
  ASSERT_OK(unlink(P("f")));
  EXPECT_OK(fchmod(fd, 0600)) << "works on an unlinked open file";
  EXPECT_EQ(0600u, Fstat(fd).st_mode & 07777);
}

// ===========================================================================
// chown (as root; the unprivileged rules are in posix_perm_test.cc)

TEST_F(Chown, ChangesOwnerAndGroup) {
  if (!IsRoot()) GTEST_SKIP() << "needs root";
  WriteFile(P("f"));
  struct Case {
    uid_t uid;
    gid_t gid;
    uid_t want_uid;
    gid_t want_gid;
  };
  const uid_t keep_u = static_cast<uid_t>(-1);
  const gid_t keep_g = static_cast<gid_t>(-1);
  const Case cases[] = {
      {65534, 65534, 65534, 65534}, {keep_u, 100, 65534, 100},  {1000, keep_g, 1000, 100},
      {keep_u, keep_g, 1000, 100},  {0, 0, 0, 0},               {123456, 654321, 123456, 654321},
      {4000000000u, 4000000001u, 4000000000u, 4000000001u},     {0, keep_g, 0, 4000000001u},
  };
  for (const Case& c : cases) {
    ASSERT_OK(chown(P("f"), c.uid, c.gid));
    struct stat st = Stat(P("f"));
    EXPECT_EQ(c.want_uid, st.st_uid) << c.uid << ":" << c.gid;
    EXPECT_EQ(c.want_gid, st.st_gid) << c.uid << ":" << c.gid;
  }
}

TEST_F(Chown, UpdatesCtimeNotMtime) {
  if (!IsRoot()) GTEST_SKIP() << "needs root";
  WriteFile(P("f"), "x");
  struct stat st0 = Stat(P("f"));
  TimeTick();
  ASSERT_OK(chown(P("f"), 65534, 65534));
  struct stat st1 = Stat(P("f"));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
  EXPECT_EQ(Ns(st0.st_mtim), Ns(st1.st_mtim));
}

TEST_F(Chown, SymlinkFollowedOrNot) {
  if (!IsRoot()) GTEST_SKIP() << "needs root";
  WriteFile(P("f"));
  ASSERT_OK(symlink("f", P("l")));
  ASSERT_OK(lchown(P("l"), 65533, 65533));
  EXPECT_EQ(65533u, Lstat(P("l")).st_uid);
  EXPECT_EQ(65533u, Lstat(P("l")).st_gid);
  EXPECT_EQ(0u, Stat(P("f")).st_uid);
  ASSERT_OK(chown(P("l"), 65534, 65532));
  EXPECT_EQ(65534u, Stat(P("f")).st_uid);
  EXPECT_EQ(65532u, Stat(P("f")).st_gid);
  EXPECT_EQ(65533u, Lstat(P("l")).st_uid);
  ASSERT_OK(fchownat(AT_FDCWD, P("l"), 1, 2, AT_SYMLINK_NOFOLLOW));
  EXPECT_EQ(1u, Lstat(P("l")).st_uid);
  EXPECT_EQ(65534u, Stat(P("f")).st_uid);
}

TEST_F(Chown, DirectoriesAndDescriptors) {
  if (!IsRoot()) GTEST_SKIP() << "needs root";
  MkDir(P("d"));
  ASSERT_OK(chown(P("d"), 65534, 65533));
  EXPECT_EQ(65534u, Stat(P("d")).st_uid);
  EXPECT_EQ(65533u, Stat(P("d")).st_gid);
  WriteFile(P("f"));
  Fd fd(open(P("f"), O_RDONLY));
  ASSERT_OK(fchown(fd, 42, 43));
  EXPECT_EQ(42u, Stat(P("f")).st_uid);
  EXPECT_EQ(43u, Stat(P("f")).st_gid);
}

// ===========================================================================
// truncate / ftruncate

TEST_F(Truncate, GrowAndShrink) {
  WriteFile(P("f"), "0123456789");
  ASSERT_OK(truncate(P("f"), 20));
  EXPECT_EQ(std::string("0123456789") + std::string(10, '\0'), ReadFile(P("f")));
  ASSERT_OK(truncate(P("f"), 4));
  EXPECT_EQ("0123", ReadFile(P("f")));
  // Growing again must expose zeros, not the old bytes.
  ASSERT_OK(truncate(P("f"), 8));
  EXPECT_EQ(std::string("0123") + std::string(4, '\0'), ReadFile(P("f")));
  ASSERT_OK(truncate(P("f"), 0));
  EXPECT_EQ("", ReadFile(P("f")));
  EXPECT_EQ(0, Stat(P("f")).st_size);
}

TEST_F(Truncate, AcrossBlocksKeepsPrefixAndZeroesTail) {
  const std::string data = Pattern(9 << 20);
  WriteFile(P("f"), data);
  for (off_t len : {off_t{(8 << 20) + 3}, off_t{(4 << 20)}, off_t{(4 << 20) - 1}, off_t{65537}, off_t{4096}, off_t{1}}) {
    ASSERT_OK(truncate(P("f"), len));
    EXPECT_EQ(len, Stat(P("f")).st_size);
    std::string got = ReadFile(P("f"));
    EXPECT_TRUE(got == data.substr(0, static_cast<size_t>(len))) << "after truncate to " << len;
  }
  ASSERT_OK(truncate(P("f"), 6 << 20));
  std::string got = ReadFile(P("f"));
  ASSERT_EQ(static_cast<size_t>(6 << 20), got.size());
  EXPECT_EQ(data[0], got[0]);
  EXPECT_EQ(std::string::npos, got.find_first_not_of('\0', 1)) << "the regrown range reads as zeros";
}

TEST_F(Truncate, HugeSparseSize) {
  WriteFile(P("f"), "head");
  const off_t big = off_t{1} << 40;  // 1 TiB
  ASSERT_OK(truncate(P("f"), big));
  EXPECT_EQ(big, Stat(P("f")).st_size);
  Fd fd(open(P("f"), O_RDWR));
  EXPECT_EQ(std::string(4096, '\0'), Pread(fd, 4096, big - 4096));
  EXPECT_EQ("head", Pread(fd, 4, 0));
  PwriteAll(fd, "tail", big - 4);
  EXPECT_EQ("tail", Pread(fd, 100, big - 4));
  EXPECT_EQ(big, Fstat(fd).st_size);
}

TEST_F(Truncate, FtruncateThroughDescriptor) {
  WriteFile(P("f"), "abcdef");
  Fd fd(open(P("f"), O_RDWR));
  ASSERT_EQ(6, lseek(fd, 0, SEEK_END));
  ASSERT_OK(ftruncate(fd, 2));
  EXPECT_EQ(6, lseek(fd, 0, SEEK_CUR)) << "the file offset is not changed";
  EXPECT_EQ(2, Fstat(fd).st_size);
  EXPECT_EQ(1, write(fd, "Z", 1));
  EXPECT_EQ(std::string("ab") + std::string(4, '\0') + "Z", ReadFile(P("f")));
  // A write-only descriptor is enough.
  Fd wo(open(P("f"), O_WRONLY));
  EXPECT_OK(ftruncate(wo, 1));
  EXPECT_EQ("a", ReadFile(P("f")));
}

TEST_F(Truncate, UpdatesMtimeAndCtimeWhenSizeChanges) {
  WriteFile(P("f"), "0123456789");
  struct stat st0 = Stat(P("f"));
  TimeTick();
  ASSERT_OK(truncate(P("f"), 5));
  struct stat st1 = Stat(P("f"));
  EXPECT_GT(Ns(st1.st_mtim), Ns(st0.st_mtim));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
  TimeTick();
  ASSERT_OK(truncate(P("f"), 50));
  struct stat st2 = Stat(P("f"));
  EXPECT_GT(Ns(st2.st_mtim), Ns(st1.st_mtim));
  EXPECT_GT(Ns(st2.st_ctim), Ns(st1.st_ctim));
  Fd fd(open(P("f"), O_WRONLY));
  TimeTick();
  ASSERT_OK(ftruncate(fd, 0));
  struct stat st3 = Fstat(fd);
  EXPECT_GT(Ns(st3.st_mtim), Ns(st2.st_mtim));
  EXPECT_GT(Ns(st3.st_ctim), Ns(st2.st_ctim));
  TimeTick();
  ASSERT_OK(ftruncate(fd, 4096));
  struct stat st4 = Fstat(fd);
  EXPECT_GT(Ns(st4.st_mtim), Ns(st3.st_mtim));
  EXPECT_GT(Ns(st4.st_ctim), Ns(st3.st_ctim));
}

TEST_F(Truncate, FollowsSymlinks) {
  WriteFile(P("f"), "0123456789");
  ASSERT_OK(symlink("f", P("l")));
  ASSERT_OK(truncate(P("l"), 3));
  EXPECT_EQ("012", ReadFile(P("f")));
  EXPECT_TRUE(S_ISLNK(Lstat(P("l")).st_mode));
}

TEST_F(Truncate, Errors) {
  WriteFile(P("f"), "abc");
  MkDir(P("d"));
  EXPECT_ERRNO(EINVAL, truncate(P("f"), -1));
  EXPECT_ERRNO(EISDIR, truncate(P("d"), 0));
  {
    Fd fd(open(P("f"), O_RDWR));
    EXPECT_ERRNO(EINVAL, ftruncate(fd, -1));
    EXPECT_ERRNO(EINVAL, ftruncate(fd, -4096));
  }
  {
    // POSIX: EBADF or EINVAL when the descriptor is not open for writing (Linux: EINVAL).
    Fd ro(open(P("f"), O_RDONLY));
    EXPECT_ERRNO_IN(ftruncate(ro, 0), EBADF, EINVAL);
    Fd dfd(open(P("d"), O_RDONLY | O_DIRECTORY));
    EXPECT_ERRNO_IN(ftruncate(dfd, 0), EBADF, EINVAL);
  }
  EXPECT_ERRNO(EBADF, ftruncate(-1, 0));
  EXPECT_EQ("abc", ReadFile(P("f"))) << "failed truncates change nothing";
}

// ===========================================================================
// utimensat / futimens

TEST_F(Utimensat, ExplicitTimesWithNanoseconds) {
  WriteFile(P("f"));
  struct Case {
    timespec atime, mtime;
  };
  const Case cases[] = {
      {{1000000000, 123456789}, {1200000000, 987654321}},
      {{0, 0}, {0, 1}},
      {{1, 999999999}, {2, 0}},
      {{1700000000, 1}, {1700000000, 999999999}},
      {{5000000000LL, 500000000}, {4102444800LL, 42}},  // beyond 2038 and 2100
  };
  for (const Case& c : cases) {
    const timespec ts[2] = {c.atime, c.mtime};
    ASSERT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
    struct stat st = Stat(P("f"));
    EXPECT_EQ(c.atime.tv_sec, st.st_atim.tv_sec);
    EXPECT_EQ(c.atime.tv_nsec, st.st_atim.tv_nsec);
    EXPECT_EQ(c.mtime.tv_sec, st.st_mtim.tv_sec);
    EXPECT_EQ(c.mtime.tv_nsec, st.st_mtim.tv_nsec);
  }
}

TEST_F(Utimensat, NowAndOmit) {
  WriteFile(P("f"));
  const timespec old_a{1000000000, 111}, old_m{1100000000, 222};
  auto reset = [&] {
    const timespec ts[2] = {old_a, old_m};
    ASSERT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
  };
  auto near_now = [](const timespec& t, long long before, long long after) {
    return Ns(t) >= before - kClockSlackNs && Ns(t) <= after + kClockSlackNs;
  };
  struct Case {
    const char* what;
    bool null_times;
    long a_nsec, m_nsec;  // UTIME_NOW, UTIME_OMIT or a real value
    bool a_now, m_now;    // expected: set to now (else: unchanged/explicit)
  };
  const Case cases[] = {
      {"NULL", true, 0, 0, true, true},
      {"NOW,NOW", false, UTIME_NOW, UTIME_NOW, true, true},
      {"NOW,OMIT", false, UTIME_NOW, UTIME_OMIT, true, false},
      {"OMIT,NOW", false, UTIME_OMIT, UTIME_NOW, false, true},
      {"OMIT,OMIT", false, UTIME_OMIT, UTIME_OMIT, false, false},
  };
  for (const Case& c : cases) {
    reset();
    long long before = NowNs();
    timespec ts[2] = {{0, c.a_nsec}, {0, c.m_nsec}};
    ASSERT_OK(utimensat(AT_FDCWD, P("f"), c.null_times ? nullptr : ts, 0)) << c.what;
    long long after = NowNs();
    struct stat st = Stat(P("f"));
    if (c.a_now) {
      EXPECT_TRUE(near_now(st.st_atim, before, after)) << c.what;
    } else {
      EXPECT_EQ(Ns(old_a), Ns(st.st_atim)) << c.what;
    }
    if (c.m_now) {
      EXPECT_TRUE(near_now(st.st_mtim, before, after)) << c.what;
    } else {
      EXPECT_EQ(Ns(old_m), Ns(st.st_mtim)) << c.what;
    }
  }
  // One explicit time, the other omitted.
  reset();
  timespec ts[2] = {{0, UTIME_OMIT}, {1234567890, 5}};
  ASSERT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
  struct stat st = Stat(P("f"));
  EXPECT_EQ(Ns(old_a), Ns(st.st_atim));
  EXPECT_EQ(1234567890LL * 1000000000LL + 5, Ns(st.st_mtim));
}

TEST_F(Utimensat, MarksCtime) {
  WriteFile(P("f"));
  struct stat st0 = Stat(P("f"));
  TimeTick();
  const timespec ts[2] = {{1000, 0}, {2000, 0}};
  ASSERT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
  struct stat st1 = Stat(P("f"));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim)) << "ctime is set to now, not to the given times";
  TimeTick();
  ASSERT_OK(utimensat(AT_FDCWD, P("f"), nullptr, 0));
  EXPECT_GT(Ns(Stat(P("f")).st_ctim), Ns(st1.st_ctim));
}

TEST_F(Utimensat, SymlinkNoFollow) {
  WriteFile(P("f"));
  ASSERT_OK(symlink("f", P("l")));
  const timespec target_ts[2] = {{100, 1}, {200, 2}};
  ASSERT_OK(utimensat(AT_FDCWD, P("f"), target_ts, 0));
  const timespec link_ts[2] = {{300, 3}, {400, 4}};
  ASSERT_OK(utimensat(AT_FDCWD, P("l"), link_ts, AT_SYMLINK_NOFOLLOW));
  EXPECT_EQ(400LL * 1000000000 + 4, Ns(Lstat(P("l")).st_mtim));
  EXPECT_EQ(300LL * 1000000000 + 3, Ns(Lstat(P("l")).st_atim));
  EXPECT_EQ(200LL * 1000000000 + 2, Ns(Stat(P("f")).st_mtim)) << "target untouched";
  const timespec follow_ts[2] = {{500, 5}, {600, 6}};
  ASSERT_OK(utimensat(AT_FDCWD, P("l"), follow_ts, 0));
  EXPECT_EQ(600LL * 1000000000 + 6, Ns(Stat(P("f")).st_mtim));
  EXPECT_EQ(400LL * 1000000000 + 4, Ns(Lstat(P("l")).st_mtim)) << "link untouched";
}

TEST_F(Utimensat, DirectoriesAndDescriptors) {
  MkDir(P("d"));
  const timespec ts[2] = {{11, 11}, {22, 22}};
  ASSERT_OK(utimensat(AT_FDCWD, P("d"), ts, 0));
  EXPECT_EQ(22LL * 1000000000 + 22, Ns(Stat(P("d")).st_mtim));
  WriteFile(P("f"));
  Fd fd(open(P("f"), O_RDONLY));
  ASSERT_OK(futimens(fd, ts));
  EXPECT_EQ(11LL * 1000000000 + 11, Ns(Stat(P("f")).st_atim));
  EXPECT_EQ(22LL * 1000000000 + 22, Ns(Stat(P("f")).st_mtim));
  // Times survive a rename and are shared by hard links.
  ASSERT_OK(rename(P("f"), P("g")));
  ASSERT_OK(link(P("g"), P("h")));
  EXPECT_EQ(22LL * 1000000000 + 22, Ns(Stat(P("h")).st_mtim));
}

TEST_F(Utimensat, InvalidNanoseconds) {
  WriteFile(P("f"));
  const timespec bad[][2] = {
      {{0, 1000000000}, {0, 0}},
      {{0, 0}, {0, 1000000000}},
      {{0, -1}, {0, 0}},
      {{0, 0}, {0, -2}},
  };
  for (const auto& ts : bad) EXPECT_ERRNO(EINVAL, utimensat(AT_FDCWD, P("f"), ts, 0));
  EXPECT_ERRNO(EINVAL, utimensat(AT_FDCWD, P("f"), nullptr, 0x4000000)) << "unknown flag";
}

// ===========================================================================
// Which calls mark which timestamps (the per-call tests cover the rest).

TEST_F(Times, LookupsAndReadsChangeNoMtimeOrCtime) {
  MkDir(P("d"));
  WriteFile(P("d/f"), "data");
  ASSERT_OK(symlink("f", P("d/l")));
  struct stat d0 = Stat(P("d")), f0 = Stat(P("d/f"));
  TimeTick();
  struct stat tmp;
  char buf[16];
  EXPECT_OK(stat(P("d/f"), &tmp));
  EXPECT_OK(access(P("d/f"), R_OK));
  EXPECT_OK(readlink(P("d/l"), buf, sizeof buf));
  EXPECT_EQ(2u, ListDir(P("d")).size());
  EXPECT_EQ("data", ReadFile(P("d/l")));
  EXPECT_ERRNO(ENOENT, stat(P("d/missing"), &tmp));
  EXPECT_ERRNO(EEXIST, mkdir(P("d/f"), 0755)) << "a failed call changes nothing";
  EXPECT_ERRNO_IN(rmdir(P("d")), ENOTEMPTY, EEXIST);
  struct stat d1 = Stat(P("d")), f1 = Stat(P("d/f"));
  EXPECT_EQ(Ns(d0.st_mtim), Ns(d1.st_mtim));
  EXPECT_EQ(Ns(d0.st_ctim), Ns(d1.st_ctim));
  EXPECT_EQ(Ns(f0.st_mtim), Ns(f1.st_mtim));
  EXPECT_EQ(Ns(f0.st_ctim), Ns(f1.st_ctim));
}

TEST_F(Times, WriteMarksMtimeAndCtime) {
  WriteFile(P("f"), "abc");
  struct stat st0 = Stat(P("f"));
  Fd fd(open(P("f"), O_WRONLY));
  TimeTick();
  ASSERT_EQ(1, pwrite(fd, "X", 1, 1)) << "an overwrite inside the file, size unchanged";
  fd.reset();
  struct stat st1 = Stat(P("f"));
  EXPECT_GT(Ns(st1.st_mtim), Ns(st0.st_mtim));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
  EXPECT_EQ(3, st1.st_size);
  // The parent directory is not modified by writing a file.
  struct stat p0 = Stat(dir_);
  Fd fd2(open(P("f"), O_WRONLY | O_APPEND));
  TimeTick();
  WriteAll(fd2, "more");
  struct stat p1 = Stat(dir_);
  EXPECT_EQ(Ns(p0.st_mtim), Ns(p1.st_mtim));
}

TEST_F(Times, OTruncMarksEvenAnEmptyFile) {
  WriteFile(P("f"));
  struct stat st0 = Stat(P("f"));
  TimeTick();
  Fd fd(open(P("f"), O_WRONLY | O_TRUNC));
  ASSERT_TRUE(fd.ok());
  struct stat st1 = Fstat(fd);
  EXPECT_GT(Ns(st1.st_mtim), Ns(st0.st_mtim));
  EXPECT_GT(Ns(st1.st_ctim), Ns(st0.st_ctim));
}

TEST_F(Times, MtimeOfExplicitTimeSurvivesLaterReads) {
  WriteFile(P("f"), "x");
  const timespec ts[2] = {{1000, 0}, {2000, 0}};
  ASSERT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
  EXPECT_EQ("x", ReadFile(P("f")));
  struct stat st = Stat(P("f"));
  EXPECT_EQ(2000, st.st_mtim.tv_sec);
  EXPECT_GE(st.st_ctim.tv_sec, 2000);
}

// ===========================================================================
// Extended attributes (user namespace)

std::string GetX(const char* path, const char* name) {
  std::string buf(70000, '\0');
  ssize_t n = getxattr(path, name, buf.data(), buf.size());
  EXPECT_GE(n, 0) << "getxattr " << name << ": " << strerror(errno);
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

std::multiset<std::string> ListX(const char* path) {
  std::string buf(70000, '\0');
  ssize_t n = listxattr(path, buf.data(), buf.size());
  EXPECT_GE(n, 0) << "listxattr: " << strerror(errno);
  std::multiset<std::string> names;
  for (size_t off = 0; n > 0 && off < static_cast<size_t>(n);) {
    std::string name(buf.c_str() + off);
    off += name.size() + 1;
    if (name.rfind("user.", 0) == 0) names.insert(name);  // ignore security.* etc.
  }
  return names;
}

TEST_F(Xattr, SetGetListRemove) {
  WriteFile(P("f"));
  EXPECT_TRUE(ListX(P("f")).empty());
  const std::string binary("a\0b\0\xff\x01", 6);
  const std::string large = Pattern(1024);
  ASSERT_OK(setxattr(P("f"), "user.text", "hello", 5, 0));
  ASSERT_OK(setxattr(P("f"), "user.empty", "", 0, 0));
  ASSERT_OK(setxattr(P("f"), "user.binary", binary.data(), binary.size(), 0));
  ASSERT_OK(setxattr(P("f"), "user.large", large.data(), large.size(), 0));
  EXPECT_EQ("hello", GetX(P("f"), "user.text"));
  EXPECT_EQ("", GetX(P("f"), "user.empty"));
  EXPECT_EQ(binary, GetX(P("f"), "user.binary"));
  EXPECT_EQ(large, GetX(P("f"), "user.large"));
  EXPECT_EQ((std::multiset<std::string>{"user.text", "user.empty", "user.binary", "user.large"}), ListX(P("f")));
  // Overwrite with a shorter value.
  ASSERT_OK(setxattr(P("f"), "user.text", "hi", 2, 0));
  EXPECT_EQ("hi", GetX(P("f"), "user.text"));
  ASSERT_OK(removexattr(P("f"), "user.text"));
  char buf[16];
  EXPECT_ERRNO(ENODATA, getxattr(P("f"), "user.text", buf, sizeof buf));
  EXPECT_EQ((std::multiset<std::string>{"user.empty", "user.binary", "user.large"}), ListX(P("f")));
  EXPECT_ERRNO(ENODATA, removexattr(P("f"), "user.text"));
}

TEST_F(Xattr, CreateAndReplaceFlags) {
  WriteFile(P("f"));
  EXPECT_ERRNO(ENODATA, setxattr(P("f"), "user.a", "1", 1, XATTR_REPLACE));
  char buf[8];
  EXPECT_ERRNO(ENODATA, getxattr(P("f"), "user.a", buf, sizeof buf)) << "a failed REPLACE creates nothing";
  EXPECT_OK(setxattr(P("f"), "user.a", "1", 1, XATTR_CREATE));
  EXPECT_ERRNO(EEXIST, setxattr(P("f"), "user.a", "2", 1, XATTR_CREATE));
  EXPECT_EQ("1", GetX(P("f"), "user.a"));
  EXPECT_OK(setxattr(P("f"), "user.a", "3", 1, XATTR_REPLACE));
  EXPECT_EQ("3", GetX(P("f"), "user.a"));
}

TEST_F(Xattr, BufferSizes) {
  WriteFile(P("f"));
  ASSERT_OK(setxattr(P("f"), "user.k", "0123456789", 10, 0));
  ASSERT_OK(setxattr(P("f"), "user.k2", "x", 1, 0));
  char buf[64];
  EXPECT_EQ(10, getxattr(P("f"), "user.k", nullptr, 0)) << "size query";
  EXPECT_EQ(10, getxattr(P("f"), "user.k", buf, 0)) << "size query";
  EXPECT_ERRNO(ERANGE, getxattr(P("f"), "user.k", buf, 9));
  EXPECT_EQ(10, getxattr(P("f"), "user.k", buf, 10));
  ssize_t list_size = listxattr(P("f"), nullptr, 0);
  EXPECT_GE(list_size, static_cast<ssize_t>(sizeof("user.k") + sizeof("user.k2")));
  EXPECT_ERRNO(ERANGE, listxattr(P("f"), buf, 3));
  EXPECT_EQ(list_size, listxattr(P("f"), buf, sizeof buf));
}

TEST_F(Xattr, ManyAttributes) {
  WriteFile(P("f"));
  std::multiset<std::string> want;
  for (int i = 0; i < 30; ++i) {
    std::string name = "user.attr" + std::to_string(i);
    std::string value = "value" + std::to_string(i * 7);
    ASSERT_OK(setxattr(P("f"), name.c_str(), value.data(), value.size(), XATTR_CREATE));
    want.insert(name);
  }
  EXPECT_EQ(want, ListX(P("f")));
  EXPECT_EQ("value91", GetX(P("f"), "user.attr13"));
  for (int i = 0; i < 30; i += 3) {
    std::string name = "user.attr" + std::to_string(i);
    ASSERT_OK(removexattr(P("f"), name.c_str()));
    want.erase(name);
  }
  EXPECT_EQ(want, ListX(P("f")));
}

TEST_F(Xattr, DirectoriesLinksRenamesDescriptors) {
  MkDir(P("d"));
  ASSERT_OK(setxattr(P("d"), "user.dir", "D", 1, 0));
  EXPECT_EQ("D", GetX(P("d"), "user.dir"));
  WriteFile(P("f"));
  ASSERT_OK(setxattr(P("f"), "user.x", "X", 1, 0));
  ASSERT_OK(link(P("f"), P("hard")));
  EXPECT_EQ("X", GetX(P("hard"), "user.x")) << "hard links share xattrs";
  ASSERT_OK(rename(P("f"), P("d/moved")));
  EXPECT_EQ("X", GetX(P("d/moved"), "user.x")) << "xattrs survive rename";
  ASSERT_OK(symlink("hard", P("sym")));
  EXPECT_EQ("X", GetX(P("sym"), "user.x")) << "getxattr follows symlinks";
  char buf[8];
  EXPECT_ERRNO(ENODATA, lgetxattr(P("sym"), "user.x", buf, sizeof buf));
  // Linux: user.* attributes are not permitted on symlinks.
  EXPECT_ERRNO(EPERM, lsetxattr(P("sym"), "user.x", "L", 1, 0));
  Fd fd(open(P("hard"), O_RDONLY));
  ASSERT_OK(fsetxattr(fd, "user.fd", "F", 1, 0));
  EXPECT_EQ(1, fgetxattr(fd, "user.fd", buf, sizeof buf));
  EXPECT_EQ((std::multiset<std::string>{"user.x", "user.fd"}), ListX(P("d/moved")));
  ASSERT_OK(fremovexattr(fd, "user.fd"));
  EXPECT_ERRNO(ENODATA, fgetxattr(fd, "user.fd", buf, sizeof buf));
}

TEST_F(Xattr, LimitsCheckedByTheKernel) {
  WriteFile(P("f"));
  // Linux VFS: names are limited to XATTR_NAME_MAX (255) bytes, values to
  // XATTR_SIZE_MAX (64 KiB).
  const std::string long_name = "user." + std::string(251, 'n');
  EXPECT_ERRNO(ERANGE, setxattr(P("f"), long_name.c_str(), "v", 1, 0));
  const std::string huge(65537, 'v');
  EXPECT_ERRNO(E2BIG, setxattr(P("f"), "user.huge", huge.data(), huge.size(), 0));
  EXPECT_TRUE(ListX(P("f")).empty());
}

// ===========================================================================
// posix_fallocate / fallocate

TEST_F(Fallocate, PosixFallocateExtendsWithZeros) {
  WriteFile(P("f"), "abc");
  Fd fd(open(P("f"), O_RDWR));
  ASSERT_EQ(0, posix_fallocate(fd, 0, 1 << 20));
  EXPECT_EQ(1 << 20, Fstat(fd).st_size);
  std::string data = Pread(fd, 1 << 20, 0);
  EXPECT_EQ("abc", data.substr(0, 3));
  EXPECT_EQ(std::string::npos, data.find_first_not_of('\0', 3));
  // An offset range past EOF.
  ASSERT_EQ(0, posix_fallocate(fd, 3 << 20, 100));
  EXPECT_EQ((3 << 20) + 100, Fstat(fd).st_size);
  EXPECT_EQ(std::string(100, '\0'), Pread(fd, 100, 3 << 20));
  // Within the file: size and data unchanged.
  PwriteAll(fd, "XYZ", 1000);
  ASSERT_EQ(0, posix_fallocate(fd, 0, 4096));
  EXPECT_EQ((3 << 20) + 100, Fstat(fd).st_size);
  EXPECT_EQ("XYZ", Pread(fd, 3, 1000));
}

TEST_F(Fallocate, PosixFallocateErrors) {
  // posix_fallocate returns the error number instead of setting errno.
  WriteFile(P("f"), "abc");
  Fd rw(open(P("f"), O_RDWR));
  EXPECT_EQ(Errno{EINVAL}, Errno{posix_fallocate(rw, 0, 0)}) << "len 0";
  EXPECT_EQ(Errno{EINVAL}, Errno{posix_fallocate(rw, 0, -1)}) << "negative len";
  EXPECT_EQ(Errno{EINVAL}, Errno{posix_fallocate(rw, -1, 10)}) << "negative offset";
  Fd ro(open(P("f"), O_RDONLY));
  EXPECT_EQ(Errno{EBADF}, Errno{posix_fallocate(ro, 0, 10)}) << "not open for writing";
  EXPECT_EQ(Errno{EBADF}, Errno{posix_fallocate(-1, 0, 10)});
  ASSERT_OK(mkfifo(P("fifo"), 0644));
  Fd fifo(open(P("fifo"), O_RDWR | O_NONBLOCK));
  EXPECT_EQ(Errno{ESPIPE}, Errno{posix_fallocate(fifo, 0, 10)});
  EXPECT_EQ(3, Fstat(rw).st_size);
}

TEST_F(Fallocate, KeepSize) {
  WriteFile(P("f"), "abc");
  Fd fd(open(P("f"), O_RDWR));
  ASSERT_OK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20));
  EXPECT_EQ(3, Fstat(fd).st_size);
  EXPECT_EQ("abc", ReadFile(P("f")));
  // Extending afterwards still reads zeros past the old end.
  ASSERT_OK(ftruncate(fd, 8192));
  std::string data = Pread(fd, 8192, 0);
  EXPECT_EQ(std::string::npos, data.find_first_not_of('\0', 3));
  // Mode 0 extends the size.
  ASSERT_OK(fallocate(fd, 0, 0, 16384));
  EXPECT_EQ(16384, Fstat(fd).st_size);
}

TEST_F(Fallocate, PunchHoleZeroesRange) {
  const std::string data = Pattern(3 << 20);
  WriteFile(P("f"), data);
  Fd fd(open(P("f"), O_RDWR));
  struct Range {
    off_t off, len;
  };
  // Block aligned, unaligned, across a 1 MiB boundary, and past EOF.
  const Range ranges[] = {{4096, 8192}, {100, 50}, {(1 << 20) - 1000, 5000}, {(3 << 20) - 10, 1 << 20}};
  std::string model = data;
  for (const Range& r : ranges) {
    ASSERT_OK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, r.off, r.len)) << r.off;
    size_t end = std::min(model.size(), static_cast<size_t>(r.off + r.len));
    std::fill(model.begin() + r.off, model.begin() + static_cast<off_t>(end), '\0');
    EXPECT_EQ(static_cast<off_t>(data.size()), Fstat(fd).st_size) << "size kept";
  }
  EXPECT_TRUE(model == Pread(fd, data.size(), 0)) << "content differs from the model";
  // Linux VFS: PUNCH_HOLE must be combined with KEEP_SIZE.
  EXPECT_ERRNO(EOPNOTSUPP, fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096));
}

TEST_F(Fallocate, Errors) {
  WriteFile(P("f"), "abc");
  Fd ro(open(P("f"), O_RDONLY));
  EXPECT_ERRNO(EBADF, fallocate(ro, 0, 0, 4096));
  Fd rw(open(P("f"), O_RDWR));
  EXPECT_ERRNO(EINVAL, fallocate(rw, 0, 0, 0));
  EXPECT_ERRNO(EINVAL, fallocate(rw, 0, -1, 4096));
  MkDir(P("d"));
  Fd dfd(open(P("d"), O_RDONLY | O_DIRECTORY));
  EXPECT_ERRNO(EBADF, fallocate(dfd, 0, 0, 4096));
}

// ===========================================================================
// lseek SEEK_DATA / SEEK_HOLE. A file system may report a hole as data (the
// whole file is data, one virtual hole at EOF); the tests accept that.

TEST_F(SeekHole, DenseFile) {
  WriteFile(P("f"), Pattern(10000));
  Fd fd(open(P("f"), O_RDONLY));
  EXPECT_EQ(0, lseek(fd, 0, SEEK_DATA));
  EXPECT_EQ(5000, lseek(fd, 5000, SEEK_DATA));
  EXPECT_EQ(10000, lseek(fd, 0, SEEK_HOLE)) << "the implicit hole at EOF";
  EXPECT_EQ(10000, lseek(fd, 9999, SEEK_HOLE));
  EXPECT_ERRNO(ENXIO, lseek(fd, 10000, SEEK_DATA));
  EXPECT_ERRNO(ENXIO, lseek(fd, 10001, SEEK_DATA));
  EXPECT_ERRNO(ENXIO, lseek(fd, 10001, SEEK_HOLE));
  EXPECT_ERRNO_IN(lseek(fd, -1, SEEK_DATA), ENXIO, EINVAL);
}

TEST_F(SeekHole, SparseFile) {
  const off_t kSize = 64 << 20;
  Fd fd(open(P("f"), O_CREAT | O_RDWR, 0644));
  PwriteAll(fd, "head", 0);
  PwriteAll(fd, "middle", 32 << 20);
  ASSERT_OK(ftruncate(fd, kSize));
  off_t hole = lseek(fd, 0, SEEK_HOLE);
  EXPECT_GE(hole, 4);
  EXPECT_LE(hole, kSize);
  off_t data = lseek(fd, 4096 * 16, SEEK_DATA);
  if (hole < (32 << 20)) {
    // Real holes are reported: the next data is at or before "middle".
    EXPECT_GE(data, 4096 * 16);
    EXPECT_LE(data, 32 << 20);
  }
  off_t h2 = lseek(fd, (32 << 20) + 6, SEEK_HOLE);
  EXPECT_GE(h2, (32 << 20) + 6);
  EXPECT_LE(h2, kSize);
  // The last byte is in a hole (ENXIO) unless holes are reported as data.
  off_t last = -1;
  Errno e = Err(last = lseek(fd, kSize - 1, SEEK_DATA));
  EXPECT_TRUE(e == Errno{ENXIO} || last == kSize - 1) << last << " " << e;
  EXPECT_ERRNO(ENXIO, lseek(fd, kSize, SEEK_DATA));
}

TEST_F(SeekHole, EmptyFile) {
  WriteFile(P("f"));
  Fd fd(open(P("f"), O_RDONLY));
  EXPECT_ERRNO(ENXIO, lseek(fd, 0, SEEK_DATA));
  EXPECT_ERRNO(ENXIO, lseek(fd, 0, SEEK_HOLE));
}

// ===========================================================================
// statvfs

TEST_F(Statfs, SaneNumbers) {
  struct statvfs sv{};
  ASSERT_OK(statvfs(dir_, &sv));
  EXPECT_GT(sv.f_bsize, 0u);
  EXPECT_GT(sv.f_frsize, 0u);
  EXPECT_GT(sv.f_blocks, 0u);
  EXPECT_LE(sv.f_bfree, sv.f_blocks);
  EXPECT_LE(sv.f_bavail, sv.f_bfree);
  EXPECT_LE(sv.f_ffree, sv.f_files);
  EXPECT_LE(sv.f_favail, sv.f_ffree);
  EXPECT_GE(sv.f_namemax, 255u);
  WriteFile(P("f"), "x");
  struct statvfs fsv{};
  Fd fd(open(P("f"), O_RDONLY));
  ASSERT_OK(fstatvfs(fd, &fsv));
  EXPECT_EQ(sv.f_bsize, fsv.f_bsize);
  EXPECT_EQ(sv.f_fsid, fsv.f_fsid);
  struct statfs sf{};
  ASSERT_OK(statfs(P("f"), &sf));
  EXPECT_GT(sf.f_blocks, 0u);
  EXPECT_EQ(Stat(P("f")).st_dev, Stat(dir_).st_dev);
  EXPECT_ERRNO(ENOENT, statvfs(P("missing"), &fsv));
  EXPECT_ERRNO(ENOTDIR, statvfs(P("f/x"), &fsv));
  EXPECT_GE(pathconf(dir_, _PC_NAME_MAX), 255);
}

}  // namespace
}  // namespace posix_e2e
