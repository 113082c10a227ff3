// End-to-end POSIX conformance: permissions and ownership as seen by
// unprivileged users (the mount uses allow_other). Every check runs the call
// in a forked child that switched to one of these users (see posix_util.h):
//   alice  65534:65534            bob  65533:65533
//   carol  65532:65532, also in group 65531 (kCarolExtraGroup)
// Needs root (to switch users); skipped otherwise.
#include <sys/xattr.h>

#include <array>

#include "posix_util.h"

namespace posix_e2e {
namespace {

// Runs `expr` as `cred` and expects errno `err` (0 = success).
#define EXPECT_AS(cred, err, expr)                                                    \
  EXPECT_EQ(::posix_e2e::Errno{err}, ::posix_e2e::AsUser(cred, [&] { return Err(expr); })) \
      << "as uid " << (cred).uid << ": " #expr
// Runs `expr` as `cred` and expects any of the listed errnos.
#define EXPECT_AS_IN(cred, expr, ...)                                                          \
  EXPECT_TRUE(::posix_e2e::ErrnoIn(::posix_e2e::AsUser(cred, [&] { return Err(expr); }), {__VA_ARGS__})) \
      << "as uid " << (cred).uid << ": " #expr
// open() as `cred`, closing the descriptor on success.
#define EXPECT_OPEN_AS(cred, err, path, ...)                                                               \
  EXPECT_EQ(::posix_e2e::Errno{err}, ::posix_e2e::AsUser(cred, [&] { return OpenErr(path, __VA_ARGS__); })) \
      << "as uid " << (cred).uid << ": open(" #path ", " #__VA_ARGS__ ")"

// POSIX allows either errno for violations of the sticky-directory rule
// (Linux reports EPERM).
#define EXPECT_STICKY_DENIED(cred, expr) EXPECT_AS_IN(cred, expr, EPERM, EACCES)

class OpenPerm : public PosixPermTest {};
class Access : public PosixPermTest {};
class SearchPerm : public PosixPermTest {};
class DirWritePerm : public PosixPermTest {};
class Sticky : public PosixPermTest {};
class ChmodPerm : public PosixPermTest {};
class ChownPerm : public PosixPermTest {};
class SetId : public PosixPermTest {};
class SgidDir : public PosixPermTest {};
class UtimensatPerm : public PosixPermTest {};
class TruncatePerm : public PosixPermTest {};
class XattrPerm : public PosixPermTest {};
class MknodPerm : public PosixPermTest {};
class RootPerm : public PosixPermTest {};

constexpr uid_t kAliceUid = 65534, kBobUid = 65533, kCarolUid = 65532;  // == kAlice.uid, ...
constexpr gid_t kAliceGid = 65534, kBobGid = 65533, kCarolGid = 65532;

// ===========================================================================
// open

TEST_F(OpenPerm, OwnerGroupOtherClasses) {
  struct Case {
    mode_t mode;
    uid_t uid;
    gid_t gid;
    const Cred* who;
    int flags;
    int err;
  };
  const Case cases[] = {
      // Other class.
      {0600, kBobUid, kBobGid, &kAlice, O_RDONLY, EACCES},
      {0600, kBobUid, kBobGid, &kAlice, O_WRONLY, EACCES},
      {0600, kBobUid, kBobGid, &kAlice, O_RDWR, EACCES},
      {0600, kBobUid, kBobGid, &kBob, O_RDWR, 0},
      {0604, kBobUid, kBobGid, &kAlice, O_RDONLY, 0},
      {0604, kBobUid, kBobGid, &kAlice, O_WRONLY, EACCES},
      {0604, kBobUid, kBobGid, &kAlice, O_RDWR, EACCES},
      {0602, kBobUid, kBobGid, &kAlice, O_WRONLY, 0},
      {0602, kBobUid, kBobGid, &kAlice, O_RDONLY, EACCES},
      {0606, kBobUid, kBobGid, &kAlice, O_RDWR, 0},
      {0666, kBobUid, kBobGid, &kAlice, O_WRONLY | O_TRUNC, 0},
      {0644, kBobUid, kBobGid, &kAlice, O_WRONLY | O_TRUNC, EACCES},
      {0644, kBobUid, kBobGid, &kAlice, O_WRONLY | O_APPEND, EACCES},
      // Group class, primary and supplementary group.
      {0060, kBobUid, kAliceGid, &kAlice, O_RDWR, 0},
      {0040, kBobUid, kAliceGid, &kAlice, O_RDONLY, 0},
      {0040, kBobUid, kAliceGid, &kAlice, O_WRONLY, EACCES},
      {0060, kBobUid, kCarolExtraGroup, &kCarol, O_RDWR, 0},
      {0060, kBobUid, kCarolExtraGroup, &kAlice, O_RDWR, EACCES},
      // Only the first matching class counts: owner, then group, then other.
      {0077, kAliceUid, kAliceGid, &kAlice, O_RDONLY, EACCES},
      {0077, kAliceUid, kAliceGid, &kAlice, O_WRONLY, EACCES},
      {0707, kBobUid, kAliceGid, &kAlice, O_RDONLY, EACCES},
      {0407, kBobUid, kCarolExtraGroup, &kCarol, O_RDONLY, EACCES},
      // Owner class.
      {0400, kAliceUid, kBobGid, &kAlice, O_RDONLY, 0},
      {0400, kAliceUid, kBobGid, &kAlice, O_WRONLY, EACCES},
      {0200, kAliceUid, kBobGid, &kAlice, O_WRONLY, 0},
      {0200, kAliceUid, kBobGid, &kAlice, O_RDONLY, EACCES},
      {0444, kAliceUid, kAliceGid, &kAlice, O_WRONLY | O_TRUNC, EACCES},
      {0444, kAliceUid, kAliceGid, &kAlice, O_RDWR, EACCES},
      {0000, kAliceUid, kAliceGid, &kAlice, O_RDONLY, EACCES},
  };
  int i = 0;
  for (const Case& c : cases) {
    Path f = P("f" + std::to_string(i++));
    MakeFileOwned(f, c.uid, c.gid, c.mode, "content");
    Errno got = AsUser(*c.who, [&] { return OpenErr(f, c.flags); });
    EXPECT_EQ(Errno{c.err}, got) << "mode " << std::oct << c.mode << std::dec << " owner " << c.uid << ":" << c.gid
                                 << " as uid " << c.who->uid << " flags 0x" << std::hex << c.flags;
    if (c.err != 0) {
      EXPECT_EQ("content", ReadFile(f)) << "a refused O_TRUNC must not truncate";
    }
  }
}

TEST_F(OpenPerm, WriteToReadOnlyFileAsOwner) {
  MakeFileOwned(P("f"), kAliceUid, kAliceGid, 0444, "keep");
  Path f = P("f");
  EXPECT_AS(kAlice, EACCES, open(f, O_WRONLY));
  EXPECT_AS(kAlice, EACCES, open(f, O_RDWR | O_APPEND));
  EXPECT_EQ("keep", ReadFile(f));
}

TEST_F(OpenPerm, CreatOnExistingFileChecksOnlyTheAccessMode) {
  MakeFileOwned(P("f"), kBobUid, kBobGid, 0444, "x");
  Path f = P("f");
  EXPECT_OPEN_AS(kAlice, 0, f, O_CREAT | O_RDONLY, 0666);
  EXPECT_OPEN_AS(kAlice, EACCES, f, O_CREAT | O_WRONLY, 0666);
  EXPECT_OPEN_AS(kAlice, EEXIST, f, O_CREAT | O_EXCL | O_RDONLY, 0666);
  EXPECT_EQ(kBobUid, Stat(f).st_uid);
}

TEST_F(OpenPerm, NewFilesBelongToTheCaller) {
  // dir_ is owned by root:root; without a set-gid parent the group is the
  // caller's egid or the parent's group (POSIX leaves the choice open).
  Path f = P("f"), d = P("d"), l = P("l"), p = P("p");
  EXPECT_OPEN_AS(kAlice, 0, f, O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, 0, mkdir(d, 0755));
  EXPECT_AS(kAlice, 0, symlink("f", l));
  EXPECT_AS(kAlice, 0, mkfifo(p, 0644));
  const gid_t parent_gid = Stat(dir_).st_gid;
  for (const Path* path : {&f, &d, &l, &p}) {
    struct stat st = Lstat(*path);
    EXPECT_EQ(kAliceUid, st.st_uid) << *path;
    EXPECT_TRUE(st.st_gid == kAliceGid || st.st_gid == parent_gid) << *path << " gid " << st.st_gid;
  }
}

TEST_F(OpenPerm, DescriptorKeepsItsAccessAfterChmod) {
  Path f = P("f");
  auto r = AsUser(kAlice, [&] {
    std::array<Errno, 5> out{};
    int fd = open(f, O_CREAT | O_RDWR, 0644);
    out[0] = Err(fd);
    out[1] = Err(fchmod(fd, 0));
    out[2] = Err(pwrite(fd, "data", 4, 0));
    char buf[4];
    out[3] = Err(pread(fd, buf, 4, 0));
    out[4] = OpenErr(f, O_RDONLY);
    return out;
  });
  EXPECT_EQ(Errno{}, r[0]) << "create";
  EXPECT_EQ(Errno{}, r[1]) << "fchmod 0";
  EXPECT_EQ(Errno{}, r[2]) << "write through the open descriptor";
  EXPECT_EQ(Errno{}, r[3]) << "read through the open descriptor";
  EXPECT_EQ(Errno{EACCES}, r[4]) << "a new open is refused";
  EXPECT_EQ("data", ReadFile(f));
}

TEST_F(OpenPerm, CreateWithReadOnlyModeGivesWritableDescriptor) {
  Path f = P("f");
  auto r = AsUser(kAlice, [&] {
    std::array<Errno, 3> out{};
    int fd = open(f, O_CREAT | O_EXCL | O_WRONLY, 0444);
    out[0] = Err(fd);
    out[1] = Err(write(fd, "abc", 3));
    out[2] = Err(ftruncate(fd, 10));
    return out;
  });
  EXPECT_EQ((std::array<Errno, 3>{}), r);
  EXPECT_EQ(10, Stat(f).st_size);
  EXPECT_EQ(0444u, Mode(f));
}

// ===========================================================================
// access()

TEST_F(Access, ReportsPermissionsOfTheCaller) {
  struct Case {
    mode_t mode;
    uid_t uid;
    gid_t gid;
    const Cred* who;
    int amode;
    int err;
  };
  const Case cases[] = {
      {0700, kBobUid, kBobGid, &kAlice, F_OK, 0},
      {0700, kBobUid, kBobGid, &kAlice, R_OK, EACCES},
      {0700, kBobUid, kBobGid, &kAlice, W_OK, EACCES},
      {0700, kBobUid, kBobGid, &kAlice, X_OK, EACCES},
      {0700, kBobUid, kBobGid, &kBob, R_OK | W_OK | X_OK, 0},
      {0004, kBobUid, kBobGid, &kAlice, R_OK, 0},
      {0004, kBobUid, kBobGid, &kAlice, W_OK, EACCES},
      {0004, kBobUid, kBobGid, &kAlice, R_OK | W_OK, EACCES},
      {0002, kBobUid, kBobGid, &kAlice, W_OK, 0},
      {0001, kBobUid, kBobGid, &kAlice, X_OK, 0},
      {0001, kBobUid, kBobGid, &kAlice, R_OK, EACCES},
      {0500, kAliceUid, kAliceGid, &kAlice, R_OK | X_OK, 0},
      {0500, kAliceUid, kAliceGid, &kAlice, W_OK, EACCES},
      {0644, kAliceUid, kAliceGid, &kAlice, X_OK, EACCES},
      {0070, kBobUid, kCarolExtraGroup, &kCarol, R_OK | W_OK | X_OK, 0},
      {0070, kBobUid, kCarolExtraGroup, &kAlice, R_OK, EACCES},
      {0077, kAliceUid, kAliceGid, &kAlice, R_OK, EACCES},
      {0000, kAliceUid, kAliceGid, &kAlice, F_OK, 0},
  };
  int i = 0;
  for (const Case& c : cases) {
    Path f = P("f" + std::to_string(i++));
    MakeFileOwned(f, c.uid, c.gid, c.mode);
    EXPECT_EQ(Errno{c.err}, AsUser(*c.who, [&] { return Err(access(f, c.amode)); }))
        << "mode " << std::oct << c.mode << std::dec << " owner " << c.uid << " as uid " << c.who->uid << " amode "
        << c.amode;
  }
}

TEST_F(Access, Directories) {
  MakeDirOwned(P("d"), kBobUid, kBobGid, 0751);
  Path d = P("d");
  EXPECT_AS(kAlice, 0, access(d, X_OK));
  EXPECT_AS(kAlice, EACCES, access(d, R_OK));
  EXPECT_AS(kAlice, EACCES, access(d, W_OK));
  EXPECT_AS(kBob, 0, access(d, R_OK | W_OK | X_OK));
}

// ===========================================================================
// Search (execute) permission on directories

TEST_F(SearchPerm, NoSearchPermissionBlocksLookupsBelow) {
  MakeDirOwned(P("d"), kBobUid, kBobGid, 0755);
  MakeFileOwned(P("d/f"), kBobUid, kBobGid, 0666, "x");
  MakeDirOwned(P("d/sub"), kBobUid, kBobGid, 0777);
  ASSERT_OK(chmod(P("d"), 0776));  // read and write, but no search for others
  Path f = P("d/f"), sub = P("d/sub"), d = P("d");
  struct stat st;
  EXPECT_AS(kAlice, EACCES, stat(f, &st));
  EXPECT_AS(kAlice, EACCES, access(f, F_OK));
  EXPECT_OPEN_AS(kAlice, EACCES, f, O_RDONLY);
  EXPECT_OPEN_AS(kAlice, EACCES, P("d/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, EACCES, mkdir(P("d/sub/x"), 0755));
  EXPECT_AS(kAlice, EACCES, unlink(f));
  EXPECT_AS(kAlice, EACCES, chmod(f, 0644));
  EXPECT_AS(kAlice, EACCES, stat(P("d/sub/.."), &st));
  EXPECT_AS(kAlice, EACCES, rename(f, P("moved")));
  EXPECT_AS(kAlice, EACCES, truncate(f, 0));
  // The directory itself can still be listed (read permission).
  EXPECT_AS(kAlice, 0, stat(d, &st));
  EXPECT_EQ(Errno{}, AsUser(kAlice, [&] {
              DIR* dir = opendir(d);
              if (!dir) return Errno{errno};
              closedir(dir);
              return Errno{};
            }));
  EXPECT_AS(kBob, 0, stat(f, &st)) << "the owner still has search permission";
  EXPECT_TRUE(Exists(sub));
}

TEST_F(SearchPerm, SearchWithoutRead) {
  MakeDirOwned(P("d"), kBobUid, kBobGid, 0711);
  MakeFileOwned(P("d/f"), kBobUid, kBobGid, 0644, "visible");
  Path d = P("d"), f = P("d/f");
  struct stat st;
  EXPECT_AS(kAlice, 0, stat(f, &st));
  EXPECT_OPEN_AS(kAlice, 0, f, O_RDONLY);
  EXPECT_OPEN_AS(kAlice, EACCES, d, O_RDONLY | O_DIRECTORY);
  EXPECT_AS(kAlice, ENOENT, stat(P("d/missing"), &st));
}

TEST_F(SearchPerm, GroupSearchPermission) {
  MakeDirOwned(P("d"), kBobUid, kCarolExtraGroup, 0710);
  MakeFileOwned(P("d/f"), kBobUid, kBobGid, 0644);
  Path f = P("d/f");
  struct stat st;
  EXPECT_AS(kCarol, 0, stat(f, &st));
  EXPECT_AS(kAlice, EACCES, stat(f, &st));
}

TEST_F(SearchPerm, DeepPathNeedsSearchOnEveryComponent) {
  MakeDirOwned(P("a"), kAliceUid, kAliceGid, 0755);
  MakeDirOwned(P("a/b"), kAliceUid, kAliceGid, 0755);
  MakeDirOwned(P("a/b/c"), kAliceUid, kAliceGid, 0755);
  MakeFileOwned(P("a/b/c/f"), kAliceUid, kAliceGid, 0644);
  Path f = P("a/b/c/f");
  struct stat st;
  EXPECT_AS(kBob, 0, stat(f, &st));
  ASSERT_OK(chmod(P("a/b"), 0750));
  EXPECT_AS(kBob, EACCES, stat(f, &st));
  EXPECT_AS(kAlice, 0, stat(f, &st));
}

// ===========================================================================
// Write permission on the parent directory

TEST_F(DirWritePerm, EveryNameChangeNeedsIt) {
  MakeDirOwned(P("ro"), kAliceUid, kAliceGid, 0755);
  MakeFileOwned(P("ro/f"), kAliceUid, kAliceGid, 0644, "data");
  MakeDirOwned(P("ro/sub"), kAliceUid, kAliceGid, 0755);
  MakeFileOwned(P("own"), kAliceUid, kAliceGid, 0644);
  ASSERT_OK(chmod(P("ro"), 0555));
  Path ro = P("ro"), f = P("ro/f"), sub = P("ro/sub"), own = P("own");
  EXPECT_OPEN_AS(kAlice, EACCES, P("ro/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, EACCES, mkdir(P("ro/newdir"), 0755));
  EXPECT_AS(kAlice, EACCES, mkfifo(P("ro/fifo"), 0644));
  EXPECT_AS(kAlice, EACCES, mknod(P("ro/sock"), S_IFSOCK | 0644, 0));
  EXPECT_AS(kAlice, EACCES, symlink("x", P("ro/sym")));
  EXPECT_AS(kAlice, EACCES, link(own, P("ro/hard")));
  EXPECT_AS(kAlice, EACCES, unlink(f));
  EXPECT_AS(kAlice, EACCES, rmdir(sub));
  EXPECT_AS(kAlice, EACCES, rename(f, P("ro/g")));
  EXPECT_AS(kAlice, EACCES, rename(f, P("out")));
  EXPECT_AS(kAlice, EACCES, rename(own, P("ro/own")));
  EXPECT_AS(kAlice, EACCES, rename(own, f)) << "replacing an entry also needs write permission";
  EXPECT_EQ((std::multiset<std::string>{"f", "sub"}), ListDir(ro));
  // Content of existing files is not protected by the directory.
  EXPECT_OPEN_AS(kAlice, 0, f, O_WRONLY | O_APPEND);
  // With write permission the same operations succeed.
  ASSERT_OK(chmod(ro, 0755));
  EXPECT_OPEN_AS(kAlice, 0, P("ro/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, 0, mkdir(P("ro/newdir"), 0755));
  EXPECT_AS(kAlice, 0, link(own, P("ro/hard")));
  EXPECT_AS(kAlice, 0, rename(f, P("ro/g")));
  EXPECT_AS(kAlice, 0, unlink(P("ro/g")));
  EXPECT_AS(kAlice, 0, rmdir(sub));
}

TEST_F(DirWritePerm, WriteWithoutSearchIsNotEnough) {
  MakeDirOwned(P("d"), kAliceUid, kAliceGid, 0666);
  EXPECT_OPEN_AS(kAlice, EACCES, P("d/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, EACCES, mkdir(P("d/x"), 0755));
  EXPECT_TRUE(ListDir(P("d")).empty());
}

TEST_F(DirWritePerm, OtherUsersDirectory) {
  MakeDirOwned(P("d"), kBobUid, kBobGid, 0755);
  MakeFileOwned(P("d/f"), kAliceUid, kAliceGid, 0666);
  Path f = P("d/f");
  EXPECT_OPEN_AS(kAlice, EACCES, P("d/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, EACCES, unlink(f)) << "owning the file is not enough";
  EXPECT_AS(kBob, 0, unlink(f)) << "write permission on the directory is enough";
}

// ===========================================================================
// Sticky directories

TEST_F(Sticky, OnlyOwnersMayRemoveOrRename) {
  MakeDirOwned(P("t"), 0, 0, 01777);
  MakeFileOwned(P("t/bobs"), kBobUid, kBobGid, 0666, "bob");
  MakeDirOwned(P("t/bobdir"), kBobUid, kBobGid, 0777);
  MakeFileOwned(P("t/alices"), kAliceUid, kAliceGid, 0644, "alice");
  Path bobs = P("t/bobs"), bobdir = P("t/bobdir"), alices = P("t/alices");
  EXPECT_STICKY_DENIED(kAlice, unlink(bobs));
  EXPECT_STICKY_DENIED(kAlice, rename(bobs, P("t/stolen")));
  EXPECT_STICKY_DENIED(kAlice, rename(bobs, P("out")));
  EXPECT_STICKY_DENIED(kAlice, rename(alices, bobs)) << "replacing another user's file";
  EXPECT_STICKY_DENIED(kAlice, rmdir(bobdir));
  EXPECT_EQ("bob", ReadFile(bobs));
  EXPECT_EQ("alice", ReadFile(alices));
  // The sticky bit protects names, not contents.
  EXPECT_OPEN_AS(kAlice, 0, bobs, O_WRONLY | O_APPEND);
  // New files can still be created, and owners remove their own.
  EXPECT_OPEN_AS(kAlice, 0, P("t/new"), O_CREAT | O_EXCL | O_WRONLY, 0644);
  EXPECT_AS(kAlice, 0, rename(P("t/new"), P("t/new2")));
  EXPECT_AS(kAlice, 0, unlink(P("t/new2")));
  EXPECT_AS(kAlice, 0, unlink(alices));
  EXPECT_AS(kBob, 0, rename(bobs, P("t/bobs2")));
  EXPECT_AS(kBob, 0, unlink(P("t/bobs2")));
  EXPECT_AS(kBob, 0, rmdir(bobdir));
}

TEST_F(Sticky, DirectoryOwnerMayRemoveAnything) {
  MakeDirOwned(P("t"), kCarolUid, kCarolGid, 01777);
  MakeFileOwned(P("t/bobs"), kBobUid, kBobGid, 0644);
  MakeFileOwned(P("t/bobs2"), kBobUid, kBobGid, 0644);
  Path bobs = P("t/bobs"), bobs2 = P("t/bobs2");
  EXPECT_STICKY_DENIED(kAlice, unlink(bobs));
  EXPECT_AS(kCarol, 0, unlink(bobs));
  EXPECT_AS(kCarol, 0, rename(bobs2, P("t/renamed")));
  EXPECT_OK(unlink(P("t/renamed"))) << "and root";
}

TEST_F(Sticky, NonOwnerMaySetStickyOnOwnDirectory) {
  MakeDirOwned(P("d"), kAliceUid, kAliceGid, 0755);
  Path d = P("d");
  EXPECT_AS(kAlice, 0, chmod(d, 01777));
  EXPECT_EQ(01777u, Mode(d));
}

// ===========================================================================
// chmod

TEST_F(ChmodPerm, OnlyTheOwnerMayChmod) {
  MakeFileOwned(P("f"), kBobUid, kBobGid, 0666);
  MakeDirOwned(P("d"), kBobUid, kBobGid, 0777);
  Path f = P("f"), d = P("d");
  EXPECT_AS(kAlice, EPERM, chmod(f, 0777));
  EXPECT_AS(kAlice, EPERM, chmod(d, 0700));
  EXPECT_AS(kAlice, EPERM, chmod(f, 0666)) << "even when nothing would change";
  EXPECT_EQ(Errno{EPERM}, AsUser(kAlice, [&] {
              int fd = open(f, O_RDWR);
              if (fd < 0) return Errno{-1};
              Errno e = Err(fchmod(fd, 0600));
              close(fd);
              return e;
            })) << "an open read/write descriptor does not grant ownership";
  EXPECT_EQ(0666u, Mode(f));
  EXPECT_EQ(0777u, Mode(d));
  EXPECT_AS(kBob, 0, chmod(f, 0600));
  EXPECT_EQ(0600u, Mode(f));
  EXPECT_AS(kBob, 0, chmod(f, 04700)) << "the owner may set set-user-ID";
  EXPECT_EQ(04700u, Mode(f));
}

TEST_F(ChmodPerm, SetGidClearedWhenOwnerIsNotInTheFilesGroup) {
  MakeFileOwned(P("foreign"), kAliceUid, kCarolExtraGroup, 0644);  // alice not in 65531
  MakeFileOwned(P("member"), kCarolUid, kCarolExtraGroup, 0644);   // carol is in 65531
  MakeFileOwned(P("own"), kAliceUid, kAliceGid, 0644);
  Path foreign = P("foreign"), member = P("member"), own = P("own");
  EXPECT_AS(kAlice, 0, chmod(foreign, 02755));
  EXPECT_EQ(0755u, Mode(foreign)) << "S_ISGID must be cleared";
  EXPECT_AS(kAlice, 0, chmod(foreign, 06755));
  EXPECT_EQ(04755u, Mode(foreign)) << "S_ISUID stays";
  EXPECT_AS(kCarol, 0, chmod(member, 02755));
  EXPECT_EQ(02755u, Mode(member));
  EXPECT_AS(kAlice, 0, chmod(own, 02755));
  EXPECT_EQ(02755u, Mode(own));
}

// ===========================================================================
// chown

TEST_F(ChownPerm, UnprivilegedOwnerRules) {
  MakeFileOwned(P("a"), kAliceUid, kAliceGid, 0644);
  MakeFileOwned(P("c"), kCarolUid, kCarolGid, 0644);
  Path a = P("a"), c = P("c");
  const uid_t keep_u = static_cast<uid_t>(-1);
  const gid_t keep_g = static_cast<gid_t>(-1);
  EXPECT_AS(kAlice, EPERM, chown(a, kBobUid, keep_g)) << "giving a file away";
  EXPECT_AS(kAlice, EPERM, chown(a, kBobUid, kAliceGid));
  EXPECT_AS(kAlice, EPERM, chown(a, keep_u, kUnrelatedGroup)) << "chgrp to a group one is not in";
  EXPECT_AS(kAlice, EPERM, chown(a, keep_u, kBobGid));
  EXPECT_EQ(kAliceUid, Stat(a).st_uid);
  EXPECT_EQ(kAliceGid, Stat(a).st_gid);
  EXPECT_AS(kAlice, 0, chown(a, kAliceUid, kAliceGid)) << "no-op to own ids";
  EXPECT_AS(kAlice, 0, chown(a, keep_u, keep_g));
  EXPECT_AS(kCarol, 0, chown(c, keep_u, kCarolExtraGroup)) << "chgrp to a supplementary group";
  EXPECT_EQ(kCarolExtraGroup, Stat(c).st_gid);
  EXPECT_AS(kCarol, 0, chown(c, kCarolUid, kCarolGid)) << "and back to the primary group";
  EXPECT_EQ(kCarolGid, Stat(c).st_gid);
  EXPECT_AS(kCarol, EPERM, chown(c, keep_u, kUnrelatedGroup));
  EXPECT_AS(kCarol, EPERM, chown(c, 0, keep_g));
}

TEST_F(ChownPerm, NonOwnerMayNotChangeGroup) {
  MakeFileOwned(P("a"), kAliceUid, kAliceGid, 0666);
  Path a = P("a");
  EXPECT_AS(kBob, EPERM, chown(a, static_cast<uid_t>(-1), kBobGid));
  EXPECT_AS(kBob, EPERM, chown(a, kBobUid, kBobGid));
  EXPECT_EQ(kAliceUid, Stat(a).st_uid);
  EXPECT_EQ(kAliceGid, Stat(a).st_gid);
}

TEST_F(ChownPerm, SymlinksAndDirectories) {
  MakeFileOwned(P("target"), kCarolUid, kCarolGid, 0644);
  Path l = P("l"), d = P("d");
  EXPECT_AS(kCarol, 0, symlink("target", l));
  EXPECT_AS(kCarol, 0, mkdir(d, 0755));
  EXPECT_AS(kCarol, 0, lchown(l, static_cast<uid_t>(-1), kCarolExtraGroup));
  EXPECT_EQ(kCarolExtraGroup, Lstat(l).st_gid);
  EXPECT_EQ(kCarolGid, Stat(P("target")).st_gid);
  EXPECT_AS(kCarol, 0, chown(d, static_cast<uid_t>(-1), kCarolExtraGroup));
  EXPECT_EQ(kCarolExtraGroup, Stat(d).st_gid);
  EXPECT_AS(kAlice, EPERM, lchown(l, static_cast<uid_t>(-1), kAliceGid));
}

// ===========================================================================
// Clearing of set-user-ID / set-group-ID bits

TEST_F(SetId, UnprivilegedChownClearsSetIdBits) {
  MakeFileOwned(P("both"), kCarolUid, kCarolGid, 06755);
  MakeFileOwned(P("suid"), kCarolUid, kCarolGid, 04755);
  Path both = P("both"), suid = P("suid");
  EXPECT_AS(kCarol, 0, chown(both, static_cast<uid_t>(-1), kCarolExtraGroup));
  EXPECT_EQ(0755u, Mode(both));
  EXPECT_AS(kCarol, 0, chown(suid, kCarolUid, kCarolExtraGroup));
  EXPECT_EQ(0755u, Mode(suid));
  EXPECT_EQ(kCarolExtraGroup, Stat(suid).st_gid);
}

TEST_F(SetId, WriteByNonOwnerClearsSetIdBits) {
  // POSIX permits clearing on write; Linux clears unless the writer has
  // CAP_FSETID, and a FUSE mount must do the same (handle_killpriv).
  MakeFileOwned(P("suid"), 0, 0, 04777, "data");
  MakeFileOwned(P("both"), 0, 0, 06777, "data");
  Path suid = P("suid"), both = P("both");
  EXPECT_EQ(Errno{}, AsUser(kAlice, [&] {
              int fd = open(suid, O_WRONLY);
              if (fd < 0) return Errno{errno};
              Errno e = Err(pwrite(fd, "X", 1, 0));
              close(fd);
              return e;
            }));
  EXPECT_EQ(0777u, Mode(suid));
  EXPECT_EQ("Xata", ReadFile(suid));
  EXPECT_EQ(Errno{}, AsUser(kAlice, [&] {
              int fd = open(both, O_WRONLY | O_APPEND);
              if (fd < 0) return Errno{errno};
              Errno e = Err(write(fd, "more", 4));
              close(fd);
              return e;
            }));
  EXPECT_EQ(0777u, Mode(both));
}

TEST_F(SetId, RootWriteAndChmodKeepBits) {
  MakeFileOwned(P("f"), kAliceUid, kAliceGid, 06755, "x");
  {
    Fd fd(open(P("f"), O_WRONLY | O_APPEND));
    WriteAll(fd, "root");
  }
  EXPECT_EQ(06755u, Mode(P("f"))) << "root (CAP_FSETID) keeps the bits";
}

// ===========================================================================
// Set-group-ID directories

TEST_F(SgidDir, NewEntriesInheritTheGroup) {
  MakeDirOwned(P("s"), 0, kCarolExtraGroup, 02777);
  Path f = P("s/f"), d = P("s/d"), p = P("s/p"), l = P("s/l"), rootfile = P("s/root");
  EXPECT_OPEN_AS(kAlice, 0, f, O_CREAT | O_WRONLY, 0644);
  EXPECT_AS(kAlice, 0, mkdir(d, 0755));
  EXPECT_AS(kAlice, 0, mkfifo(p, 0644));
  EXPECT_AS(kAlice, 0, symlink("f", l));
  WriteFile(rootfile);
  for (const Path* path : {&f, &d, &p, &l, &rootfile}) EXPECT_EQ(kCarolExtraGroup, Lstat(*path).st_gid) << *path;
  EXPECT_EQ(kAliceUid, Stat(f).st_uid);
  EXPECT_TRUE(Stat(d).st_mode & S_ISGID) << "subdirectories inherit S_ISGID";
  EXPECT_FALSE(Stat(f).st_mode & S_ISGID);
  // And recursively.
  Path dd = P("s/d/dd");
  EXPECT_AS(kBob, EACCES, mkdir(dd, 0755)) << "s/d is 0755 & ~umask, owned by alice";
  EXPECT_AS(kAlice, 0, mkdir(dd, 0755));
  EXPECT_EQ(kCarolExtraGroup, Stat(dd).st_gid);
  EXPECT_TRUE(Stat(dd).st_mode & S_ISGID);
}

TEST_F(SgidDir, PlainDirectoryDoesNotPropagate) {
  MakeDirOwned(P("plain"), 0, kCarolExtraGroup, 0777);
  Path d = P("plain/d");
  EXPECT_AS(kAlice, 0, mkdir(d, 0755));
  EXPECT_FALSE(Stat(d).st_mode & S_ISGID);
}

// ===========================================================================
// utimensat

TEST_F(UtimensatPerm, ExplicitTimesNeedOwnership) {
  MakeFileOwned(P("w"), kBobUid, kBobGid, 0666);   // alice may write
  MakeFileOwned(P("r"), kBobUid, kBobGid, 0644);   // alice may not write
  MakeFileOwned(P("own"), kAliceUid, kAliceGid, 0444);
  Path w = P("w"), r = P("r"), own = P("own");
  const timespec explicit_ts[2] = {{1000, 1}, {2000, 2}};
  const timespec now_now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  const timespec omit_omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
  const timespec now_explicit[2] = {{0, UTIME_NOW}, {3000, 3}};
  // Non-owner with write permission: "now" only.
  EXPECT_AS(kAlice, EPERM, utimensat(AT_FDCWD, w, explicit_ts, 0));
  EXPECT_AS(kAlice, EPERM, utimensat(AT_FDCWD, w, now_explicit, 0));
  EXPECT_AS(kAlice, 0, utimensat(AT_FDCWD, w, nullptr, 0));
  EXPECT_AS(kAlice, 0, utimensat(AT_FDCWD, w, now_now, 0));
  EXPECT_AS(kAlice, 0, utimensat(AT_FDCWD, w, omit_omit, 0));
  EXPECT_NE(2000, Stat(w).st_mtim.tv_sec);
  // Non-owner without write permission: nothing.
  EXPECT_AS(kAlice, EPERM, utimensat(AT_FDCWD, r, explicit_ts, 0));
  EXPECT_AS(kAlice, EACCES, utimensat(AT_FDCWD, r, nullptr, 0));
  EXPECT_AS(kAlice, EACCES, utimensat(AT_FDCWD, r, now_now, 0));
  // The owner may do anything, even without write permission.
  EXPECT_AS(kAlice, 0, utimensat(AT_FDCWD, own, explicit_ts, 0));
  EXPECT_EQ(2000, Stat(own).st_mtim.tv_sec);
  EXPECT_EQ(2, Stat(own).st_mtim.tv_nsec);
  EXPECT_AS(kAlice, 0, utimensat(AT_FDCWD, own, nullptr, 0));
  EXPECT_NE(2000, Stat(own).st_mtim.tv_sec);
}

TEST_F(UtimensatPerm, ThroughDescriptor) {
  MakeFileOwned(P("w"), kBobUid, kBobGid, 0666);
  Path w = P("w");
  auto r = AsUser(kAlice, [&] {
    std::array<Errno, 2> out{};
    int fd = open(w, O_RDWR);
    const timespec explicit_ts[2] = {{1000, 1}, {2000, 2}};
    out[0] = Err(futimens(fd, explicit_ts));
    out[1] = Err(futimens(fd, nullptr));
    close(fd);
    return out;
  });
  EXPECT_EQ(Errno{EPERM}, r[0]);
  EXPECT_EQ(Errno{}, r[1]);
}

// ===========================================================================
// truncate

TEST_F(TruncatePerm, NeedsWritePermission) {
  MakeFileOwned(P("bobs"), kBobUid, kBobGid, 0644, "0123456789");
  MakeFileOwned(P("open"), kBobUid, kBobGid, 0666, "0123456789");
  MakeFileOwned(P("own"), kAliceUid, kAliceGid, 0444, "0123456789");
  Path bobs = P("bobs"), open_f = P("open"), own = P("own");
  EXPECT_AS(kAlice, EACCES, truncate(bobs, 0));
  EXPECT_AS(kAlice, EACCES, truncate(own, 0)) << "ownership is not write permission";
  EXPECT_AS(kAlice, 0, truncate(open_f, 3));
  EXPECT_EQ(10, Stat(bobs).st_size);
  EXPECT_EQ(10, Stat(own).st_size);
  EXPECT_EQ(3, Stat(open_f).st_size);
  // ftruncate checks the descriptor, not the mode.
  MakeFileOwned(P("own2"), kAliceUid, kAliceGid, 0644, "0123456789");
  Path own2 = P("own2");
  auto r = AsUser(kAlice, [&] {
    std::array<Errno, 3> out{};
    int fd = open(own2, O_WRONLY);
    out[0] = Err(fd);
    out[1] = Err(fchmod(fd, 0444));
    out[2] = Err(ftruncate(fd, 1));
    close(fd);
    return out;
  });
  EXPECT_EQ((std::array<Errno, 3>{}), r);
  EXPECT_EQ(1, Stat(own2).st_size);
  EXPECT_EQ(0444u, Mode(own2));
}

// ===========================================================================
// Extended attributes

TEST_F(XattrPerm, UserAttributesFollowFilePermissions) {
  MakeFileOwned(P("readable"), kBobUid, kBobGid, 0644);
  MakeFileOwned(P("private"), kBobUid, kBobGid, 0600);
  MakeFileOwned(P("writable"), kBobUid, kBobGid, 0666);
  for (const char* n : {"readable", "private", "writable"}) ASSERT_OK(setxattr(P(n), "user.a", "v", 1, 0));
  Path readable = P("readable"), priv = P("private"), writable = P("writable");
  char buf[8];
  EXPECT_AS(kAlice, 0, getxattr(readable, "user.a", buf, sizeof buf));
  EXPECT_AS(kAlice, EACCES, setxattr(readable, "user.b", "v", 1, 0));
  EXPECT_AS(kAlice, EACCES, removexattr(readable, "user.a"));
  EXPECT_AS(kAlice, EACCES, getxattr(priv, "user.a", buf, sizeof buf));
  EXPECT_AS(kAlice, 0, setxattr(writable, "user.b", "w", 1, 0));
  EXPECT_AS(kAlice, 0, removexattr(writable, "user.a"));
  EXPECT_AS(kBob, 0, setxattr(readable, "user.b", "v", 1, 0));
  EXPECT_EQ(1, getxattr(writable, "user.b", buf, sizeof buf));
  EXPECT_ERRNO(ENODATA, getxattr(writable, "user.a", buf, sizeof buf));
  EXPECT_EQ(1, getxattr(readable, "user.a", buf, sizeof buf));
}

// ===========================================================================
// mknod

TEST_F(MknodPerm, DevicesNeedPrivilege) {
  Path c = P("c"), b = P("b"), fifo = P("fifo"), sock = P("sock");
  EXPECT_AS(kAlice, EPERM, mknod(c, S_IFCHR | 0644, makedev(1, 3)));
  EXPECT_AS(kAlice, EPERM, mknod(b, S_IFBLK | 0644, makedev(7, 0)));
  EXPECT_AS(kAlice, 0, mknod(fifo, S_IFIFO | 0644, 0));
  EXPECT_AS(kAlice, 0, mknod(sock, S_IFSOCK | 0644, 0));
  EXPECT_FALSE(Exists(c));
  EXPECT_FALSE(Exists(b));
  EXPECT_EQ(kAliceUid, Lstat(fifo).st_uid);
}

// ===========================================================================
// Root is not subject to the permission bits (file system mounted with
// allow_other; with default_permissions the kernel grants this, otherwise
// the file system must).

TEST_F(RootPerm, RootBypassesPermissionBits) {
  MakeFileOwned(P("f"), kAliceUid, kAliceGid, 0000, "secret");
  MakeDirOwned(P("d"), kAliceUid, kAliceGid, 0000);
  EXPECT_EQ("secret", ReadFile(P("f")));
  EXPECT_OPEN_OK(P("f"), O_RDWR);
  EXPECT_OPEN_OK(P("d/new"), O_CREAT | O_WRONLY, 0644);
  EXPECT_OK(unlink(P("d/new")));
  EXPECT_OK(chmod(P("f"), 0644));
  EXPECT_OK(chown(P("f"), kBobUid, kBobGid));
  const timespec ts[2] = {{1, 0}, {2, 0}};
  EXPECT_OK(utimensat(AT_FDCWD, P("f"), ts, 0));
  EXPECT_OK(truncate(P("f"), 0));
}

}  // namespace
}  // namespace posix_e2e
