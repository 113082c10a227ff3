// Shared helpers for the end-to-end POSIX conformance suites (posix_*_test.cc).
//
// The directory under test comes from TESSERA_TEST_DIR (required). Every test
// gets a private, freshly created subdirectory (PosixTest::P() builds paths in
// it) that TearDown removes again, even when the test fails. Tests never
// depend on each other.
//
// Conventions:
//   EXPECT_ERRNO(ENOENT, unlink(P("x")));      call fails with exactly ENOENT
//   EXPECT_ERRNO_IN(rmdir(d), ENOTEMPTY, EEXIST); any of the listed errnos
//   EXPECT_OK(mkdir(P("d"), 0755));             call succeeds (rc >= 0)
//   EXPECT_OPEN_ERRNO(EISDIR, P("d"), O_WRONLY);  open() fails (fd closed if not)
//   AsUser(kAlice, [&] { return Err(unlink(f)); })  runs the lambda in a forked
//       child with the credentials of an unprivileged user and returns the
//       lambda's (trivially copyable) result to the parent.
//
// Everything asserted here must hold on a local kernel file system (ext4,
// tmpfs, ...) run as root; only POSIX-mandated behaviour is checked, plus a
// few Linux VFS behaviours that a FUSE file system inherits from the kernel
// (these are marked "Linux" in the tests).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

namespace posix_e2e {

// ---------------------------------------------------------------------------
// errno handling

// The outcome of a system call: 0 on success, otherwise the errno it set.
struct Errno {
  int value = 0;
  bool operator==(const Errno&) const = default;
};

inline std::string ErrnoName(int e) {
  if (e == 0) return "success";
  const char* name = strerrorname_np(e);
  return std::string(name ? name : "E?") + " (" + std::to_string(e) + ")";
}

inline void PrintTo(const Errno& e, std::ostream* os) { *os << ErrnoName(e.value); }
inline std::ostream& operator<<(std::ostream& os, const Errno& e) { return os << ErrnoName(e.value); }

// Err(rc): Errno of a call returning -1/errno on failure. Must be applied
// directly to the call so that nothing can clobber errno in between.
inline Errno Err(long rc) { return Errno{rc < 0 ? errno : 0}; }

// OpenErr: like Err(open(...)) but closes the descriptor on success.
inline Errno OpenErr(const char* path, int flags, mode_t mode = 0644) {
  int fd = ::open(path, flags, mode);
  if (fd < 0) return Errno{errno};
  ::close(fd);
  return Errno{0};
}

inline ::testing::AssertionResult ErrnoIn(Errno got, std::initializer_list<int> allowed) {
  for (int a : allowed)
    if (got.value == a) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure();
  r << "got " << ErrnoName(got.value) << ", expected one of:";
  for (int a : allowed) r << " " << ErrnoName(a);
  return r;
}

#define EXPECT_ERRNO(err, expr) \
  EXPECT_EQ(::posix_e2e::Errno{err}, ::posix_e2e::Err(expr)) << "  call: " #expr
#define ASSERT_ERRNO(err, expr) \
  ASSERT_EQ(::posix_e2e::Errno{err}, ::posix_e2e::Err(expr)) << "  call: " #expr
#define EXPECT_OK(expr) EXPECT_ERRNO(0, expr)
#define ASSERT_OK(expr) ASSERT_ERRNO(0, expr)
#define EXPECT_ERRNO_IN(expr, ...) \
  EXPECT_TRUE(::posix_e2e::ErrnoIn(::posix_e2e::Err(expr), {__VA_ARGS__})) << "  call: " #expr
#define EXPECT_OPEN_ERRNO(err, path, ...)                                       \
  EXPECT_EQ(::posix_e2e::Errno{err}, ::posix_e2e::OpenErr(path, __VA_ARGS__)) \
      << "  open(" #path ", " #__VA_ARGS__ ")"
#define EXPECT_OPEN_OK(path, ...) EXPECT_OPEN_ERRNO(0, path, __VA_ARGS__)

// ---------------------------------------------------------------------------
// Paths

// A path that converts implicitly to const char*, so it can be passed straight
// to system calls: open(P("a") / "b", O_RDONLY).
class Path {
 public:
  Path() = default;
  Path(std::string s) : s_(std::move(s)) {}  // NOLINT(google-explicit-constructor)
  Path(const char* s) : s_(s) {}             // NOLINT(google-explicit-constructor)
  operator const char*() const { return s_.c_str(); }  // NOLINT
  const std::string& str() const { return s_; }
  Path operator/(std::string_view name) const { return Path(s_ + "/" + std::string(name)); }
  friend std::ostream& operator<<(std::ostream& os, const Path& p) { return os << p.s_; }

 private:
  std::string s_;
};

// A file name component of exactly n bytes.
inline std::string Name(size_t n, char c = 'x') { return std::string(n, c); }
constexpr size_t kNameMax = 255;  // NAME_MAX; the file system must report >= 255

// ---------------------------------------------------------------------------
// Timestamps

inline long long Ns(const timespec& t) { return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec; }
inline long long NowNs() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return Ns(t);
}
// Allowed difference between the file system clock and ours when checking
// "set to the current time" (kernel coarse clocks, servers' clocks).
constexpr long long kClockSlackNs = 2'000'000'000LL;

// Sleeps long enough for the file system's timestamps to advance, so that
// "was marked for update" becomes observable. TESSERA_TEST_TIME_TICK_MS
// overrides the default of 20 ms (use 1100 for a file system that stores
// whole seconds only).
inline void TimeTick() {
  static const int ms = [] {
    const char* v = std::getenv("TESSERA_TEST_TIME_TICK_MS");
    return v && *v ? std::atoi(v) : 20;
  }();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// ---------------------------------------------------------------------------
// Unprivileged users (uids/gids need not exist in /etc/passwd)

struct Cred {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;  // supplementary groups
};
inline const Cred kAlice{65534, 65534, {65534}};
inline const Cred kBob{65533, 65533, {65533}};
constexpr gid_t kCarolExtraGroup = 65531;
inline const Cred kCarol{65532, 65532, {65532, kCarolExtraGroup}};
constexpr gid_t kUnrelatedGroup = 65530;  // nobody above is a member

// Runs fn in a forked child that has dropped to `cred` and returns fn's result
// (which must be trivially copyable, e.g. Errno, bool, struct stat, ...).
// gtest assertions must not be used inside fn: return what you want to check.
template <class F>
auto AsUser(const Cred& cred, F&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  static_assert(std::is_trivially_copyable_v<R>, "AsUser result must be trivially copyable");
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return R{};
  }
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return R{};
  }
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(cred.groups.size(), cred.groups.data()) != 0 || setgid(cred.gid) != 0 ||
        setuid(cred.uid) != 0)
      _exit(100);
    R r = fn();
    const char* p = reinterpret_cast<const char*>(&r);
    size_t left = sizeof(R);
    while (left > 0) {
      ssize_t n = write(fds[1], p, left);
      if (n <= 0) _exit(101);
      p += n;
      left -= static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  R r{};
  char* p = reinterpret_cast<char*>(&r);
  size_t got = 0;
  while (got < sizeof(R)) {
    ssize_t n = read(fds[0], p + got, sizeof(R) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof(R)) {
    ADD_FAILURE() << "AsUser(uid " << cred.uid << ") child failed, status " << status
                  << (WIFEXITED(status) && WEXITSTATUS(status) == 100 ? " (could not drop privileges)" : "");
    return R{};
  }
  return r;
}

// ---------------------------------------------------------------------------
// Tree removal (works even when the test left directories without permissions)

inline bool RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return unlink(path.c_str()) == 0 || errno == ENOENT;
  chmod(path.c_str(), 0700);
  bool ok = true;
  if (DIR* d = opendir(path.c_str())) {
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string_view n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
    }
    closedir(d);
    for (const auto& n : names) ok = RemoveTree(path + "/" + n) && ok;
  } else {
    ok = false;
  }
  return (rmdir(path.c_str()) == 0 || errno == ENOENT) && ok;
}

// ---------------------------------------------------------------------------
// Fixture

class PosixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = std::getenv("TESSERA_TEST_DIR");
    ASSERT_TRUE(root && *root) << "TESSERA_TEST_DIR must name the directory under test";
    root_ = root;
    struct stat st;
    ASSERT_EQ(0, stat(root, &st)) << root_ << ": " << strerror(errno);
    ASSERT_TRUE(S_ISDIR(st.st_mode)) << root_ << " is not a directory";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("posix.") + info->test_suite_name() + "." + info->name() + "." +
                       std::to_string(getpid());
    for (char& c : name)
      if (c == '/') c = '_';
    dir_ = Path(root_ + "/" + name);
    RemoveTree(dir_.str());
    old_umask_ = umask(022);
    ASSERT_OK(mkdir(dir_, 0755));
  }

  void TearDown() override {
    umask(old_umask_);
    if (!dir_.str().empty()) {
      EXPECT_TRUE(RemoveTree(dir_.str())) << "cleanup of " << dir_ << " failed";
    }
  }

  // A path inside this test's private directory.
  Path P(std::string_view rel) const { return dir_ / rel; }

  bool IsRoot() const { return geteuid() == 0; }

  std::string root_;
  Path dir_;
  mode_t old_umask_ = 022;
};

// Like PosixTest, but the private directory is world-writable (0777) and the
// unprivileged test users can reach it. Skips when not run as root.
class PosixPermTest : public PosixTest {
 protected:
  void SetUp() override {
    PosixTest::SetUp();
    if (HasFatalFailure()) return;
    if (!IsRoot()) GTEST_SKIP() << "permission tests need root (to switch users)";
    ASSERT_OK(chmod(root_.c_str(), 0777));
    ASSERT_OK(chmod(dir_, 0777));
    Path d = dir_;
    for (const Cred* c : {&kAlice, &kBob, &kCarol}) {
      Errno e = AsUser(*c, [&] { return Err(access(d, R_OK | W_OK | X_OK)); });
      ASSERT_EQ(Errno{}, e) << "uid " << c->uid << " cannot use " << dir_
                            << " (do all ancestors of TESSERA_TEST_DIR grant search permission?)";
    }
  }
};

// ---------------------------------------------------------------------------
// Small file helpers; failures are reported and the helpers carry on.

inline struct stat Stat(const char* path) {
  struct stat st{};
  EXPECT_EQ(0, ::stat(path, &st)) << "stat " << path << ": " << strerror(errno);
  return st;
}
inline struct stat Lstat(const char* path) {
  struct stat st{};
  EXPECT_EQ(0, ::lstat(path, &st)) << "lstat " << path << ": " << strerror(errno);
  return st;
}
inline struct stat Fstat(int fd) {
  struct stat st{};
  EXPECT_EQ(0, ::fstat(fd, &st)) << "fstat " << fd << ": " << strerror(errno);
  return st;
}
inline bool Exists(const char* path) {
  struct stat st;
  return ::lstat(path, &st) == 0;
}
inline mode_t Mode(const char* path) { return Lstat(path).st_mode & 07777; }
inline mode_t Type(const char* path) { return Lstat(path).st_mode & S_IFMT; }

// RAII file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }
  operator int() const { return fd_; }  // NOLINT
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline Fd OpenFd(const char* path, int flags, mode_t mode = 0644) {
  int fd = ::open(path, flags, mode);
  EXPECT_GE(fd, 0) << "open " << path << ": " << strerror(errno);
  return Fd(fd);
}

inline void WriteAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << "write: " << strerror(errno);
    done += static_cast<size_t>(n);
  }
}

inline void PwriteAll(int fd, std::string_view data, off_t off) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << "pwrite: " << strerror(errno);
    done += static_cast<size_t>(n);
  }
}

// Reads up to len bytes at off (short only at EOF).
inline std::string Pread(int fd, size_t len, off_t off) {
  std::string buf(len, '\0');
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, buf.data() + done, len - done, off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    EXPECT_GE(n, 0) << "pread: " << strerror(errno);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  buf.resize(done);
  return buf;
}

inline std::string ReadFd(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    EXPECT_GE(n, 0) << "read: " << strerror(errno);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Creates (or truncates) a regular file with the given content; the mode is
// then set exactly with chmod, independent of the umask.
inline void WriteFile(const char* path, std::string_view data = {}, mode_t mode = 0644) {
  Fd fd(::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  ASSERT_TRUE(fd.ok()) << "create " << path << ": " << strerror(errno);
  WriteAll(fd, data);
  ASSERT_EQ(0, ::fchmod(fd, mode)) << strerror(errno);
}

inline std::string ReadFile(const char* path) {
  Fd fd(::open(path, O_RDONLY));
  EXPECT_TRUE(fd.ok()) << "open " << path << ": " << strerror(errno);
  if (!fd.ok()) return {};
  return ReadFd(fd);
}

inline void MkDir(const char* path, mode_t mode = 0755) {
  ASSERT_EQ(0, ::mkdir(path, 0700)) << "mkdir " << path << ": " << strerror(errno);
  ASSERT_EQ(0, ::chmod(path, mode)) << strerror(errno);
}

// Root-only: creates a file / directory owned by uid:gid with exactly `mode`
// (chmod after chown, since chown may clear set-id bits).
inline void MakeFileOwned(const char* path, uid_t uid, gid_t gid, mode_t mode, std::string_view data = {}) {
  WriteFile(path, data, 0600);
  ASSERT_EQ(0, ::chown(path, uid, gid)) << strerror(errno);
  ASSERT_EQ(0, ::chmod(path, mode)) << strerror(errno);
}
inline void MakeDirOwned(const char* path, uid_t uid, gid_t gid, mode_t mode) {
  MkDir(path, 0700);
  ASSERT_EQ(0, ::chown(path, uid, gid)) << strerror(errno);
  ASSERT_EQ(0, ::chmod(path, mode)) << strerror(errno);
}

// Names in a directory, without "." and "..".
inline std::multiset<std::string> ListDir(const char* path) {
  std::multiset<std::string> names;
  DIR* d = opendir(path);
  EXPECT_NE(nullptr, d) << "opendir " << path << ": " << strerror(errno);
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace(n);
  }
  closedir(d);
  return names;
}

// A deterministic, non-repeating-looking byte pattern.
inline std::string Pattern(size_t n, unsigned seed = 1) {
  std::string s(n, '\0');
  unsigned x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 16);
  }
  return s;
}

}  // namespace posix_e2e
