// e2e_persist: writes a deterministic tree and verifies it later, to check
// that everything survives an unmount and a fresh mount:
//
//   e2e_persist write  DIR SEED   # DIR must be missing or empty
//   (unmount, mount again)
//   e2e_persist verify DIR SEED   # same SEED
//
// The tree (all of it derived from SEED) holds nested directories, files of
// sizes 0, 1, 4095, 4096, 65537 and 1 MiB + 3, several-MiB files with
// pseudo-random content, a sparse file, a directory with 300 entries, unusual
// names, symlinks (relative, absolute, dangling, long), hard links across
// directories, a FIFO, user.* xattrs on files and a directory, specific
// permission bits (including setuid/setgid/sticky) and specific mtimes with
// nanoseconds (including 0, before 1970 and after 2038).
//
// verify checks types, sizes, content byte for byte, permission bits, mtimes,
// symlink targets, st_nlink, hard-link inodes, user.* xattrs and that every
// directory lists exactly the expected names. It stops at the first
// difference with a message naming the path and both values.
//
// Exit status: 0 ok, 1 difference or error, 2 bad arguments.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr size_t kIoChunk = kMiB;

void Usage() {
  std::fprintf(stderr,
      "usage: e2e_persist write  DIR SEED   create the tree for SEED in DIR (missing or empty)\n"
      "       e2e_persist verify DIR SEED   check that DIR holds exactly that tree\n"
      "Used to check persistence across a remount: write, unmount, mount, verify.\n"
      "Exit status: 0 ok, 1 difference or error, 2 bad arguments.\n");
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void Die(const char* fmt, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "e2e_persist: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::exit(1);
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& s, uint64_t seed) {
  uint64_t h = SplitMix(seed ^ 0x5eed);
  for (unsigned char c : s) h = SplitMix(h ^ c);
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix(state_++); }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

enum class Kind { kDir, kFile, kSymlink, kHardLink, kFifo };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kDir: return "directory";
    case Kind::kFile: return "regular file";
    case Kind::kSymlink: return "symlink";
    case Kind::kHardLink: return "regular file (hard link)";
    case Kind::kFifo: return "fifo";
  }
  return "?";
}

struct Range {
  uint64_t off;
  uint64_t len;
};

struct Entry {
  Kind kind = Kind::kFile;
  std::string path;  // relative to DIR
  mode_t perm = 0;   // permission bits incl. setuid/setgid/sticky (not for symlinks/hard links)
  timespec mtime{};  // not for hard links (they share the file's)
  uint64_t size = 0;               // regular files
  uint64_t content_seed = 0;       // regular files
  std::vector<Range> data;         // sparse files: the ranges holding data; empty: all of it
  std::string target;              // symlink target; for a hard link the path of the file
  std::map<std::string, std::string> xattrs;  // user.* only
};

// Byte i of a file's content is byte i%8 of SplitMix(content_seed + i/8):
// seekable, so large files need no buffer of their whole content.
void ExpectedContent(const Entry& e, uint64_t off, uint64_t len, uint8_t* out) {
  for (uint64_t i = 0; i < len;) {
    const uint64_t pos = off + i;
    const uint64_t word = SplitMix(e.content_seed + pos / 8);
    const uint64_t skip = pos % 8;
    const uint64_t n = std::min<uint64_t>(8 - skip, len - i);
    std::memcpy(out + i, reinterpret_cast<const uint8_t*>(&word) + skip, n);
    i += n;
  }
  if (e.data.empty()) return;
  // Sparse: zero everything outside the data ranges.
  std::vector<uint8_t> keep(len, 0);
  for (const Range& r : e.data) {
    const uint64_t lo = std::max(off, r.off), hi = std::min(off + len, r.off + r.len);
    for (uint64_t p = lo; p < hi; ++p) keep[p - off] = 1;
  }
  for (uint64_t i = 0; i < len; ++i) {
    if (!keep[i]) out[i] = 0;
  }
}

// The tree for a seed, parents before children.
class TreeBuilder {
 public:
  explicit TreeBuilder(uint64_t seed) : seed_(seed), rng_(SplitMix(seed)) {}

  std::vector<Entry> Build() {
    Dir("sizes", 0755);
    const std::pair<const char*, uint64_t> sizes[] = {
        {"empty", 0}, {"one", 1}, {"page-1", 4095}, {"page", 4096}, {"64k+1", 65537}, {"1m+3", kMiB + 3}};
    for (const auto& [name, size] : sizes) File(std::string("sizes/") + name, 0644, size);

    Dir("big", 0755);
    File("big/random-a", 0644, 3 * kMiB + rng_.Below(1000));
    File("big/random-b", 0600, 5 * kMiB + 4097);
    File("big/random-c", 0640, 9 * kMiB - 1 - rng_.Below(4096));
    Entry& sparse = File("big/sparse", 0644, 12 * kMiB + 5);
    sparse.data = {{0, 100000}, {7 * kMiB - 10, 70000}, {12 * kMiB + 2, 3}};

    // Nested directories with different permissions.
    Dir("a", 0755);
    Dir("a/b", 0750);
    Dir("a/b/c", 0711);
    Dir("a/b/c/d", 0700);
    Dir("a/b/c/d/e", 0755);
    File("a/b/c/d/e/deep.txt", 0644, 1234);
    File("a/b/sibling", 0644, 10);
    Dir("a/empty-dir", 0755);

    Dir("many", 0755);
    for (int i = 0; i < 300; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "many/f%03d", i);
      File(name, 0644, static_cast<uint64_t>(i % 50));
    }

    Dir("names", 0755);
    File("names/with space", 0644, 3);
    File("names/\xc3\xbc" "n\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9 \xe2\x9c\x93", 0644, 5);  // "ünïcødé ✓" in UTF-8
    File("names/.hidden", 0644, 7);
    File("names/-dash", 0644, 1);
    File("names/" + std::string(255, 'x'), 0644, 255);

    Dir("links", 0755);
    Symlink("links/rel", "../sizes/one");
    Symlink("links/abs", "/definitely/not/here");
    Symlink("links/dir", "../a/b");
    Symlink("links/dangling", "nowhere");
    std::string long_target;
    while (long_target.size() < 1000) long_target += "long-component/";
    Symlink("links/long", long_target + "end");

    Dir("hard", 0755);
    Entry& orig = File("hard/orig", 0644, 10000);
    orig.xattrs["user.shared"] = "seen through every link";
    HardLink("hard/link1", "hard/orig");
    HardLink("a/b/link2", "hard/orig");

    Dir("special", 0755);
    Add(Kind::kFifo, "special/fifo", 0640);

    Dir("xattr", 0755).xattrs["user.dirattr"] = "on a directory";
    Entry& x = File("xattr/file", 0644, 100);
    x.xattrs["user.small"] = "v";
    x.xattrs["user.empty"] = "";
    static constexpr char kBinary[] = "\0\x01\x02\xff\xfe zero\0inside";
    x.xattrs["user.binary"] = std::string(kBinary, sizeof kBinary - 1);
    x.xattrs["user.seed"] = std::to_string(seed_);
    std::string big(2000, '\0');
    for (auto& ch : big) ch = static_cast<char>('a' + rng_.Below(26));
    x.xattrs["user.big"] = big;

    Dir("modes", 0755);
    File("modes/0000", 0000, 0);
    File("modes/0400", 0400, 17);
    File("modes/0600", 0600, 17);
    File("modes/0755", 0755, 17);
    File("modes/0777", 0777, 17);
    File("modes/4755", 04755, 17);
    File("modes/2755", 02755, 17);
    Dir("modes/d0700", 0700);
    Dir("modes/d1777", 01777);
    Dir("modes/d2755", 02755);

    Dir("times", 0755);
    File("times/epoch", 0644, 1).mtime = {0, 0};
    File("times/pre-1970", 0644, 1).mtime = {-86400 * 365 - 1, 999999999};
    File("times/y2038+1", 0644, 1).mtime = {INT32_MAX + int64_t{1}, 1};
    File("times/y2100", 0644, 1).mtime = {4102444800, 123456789};
    Symlink("times/link", "epoch").mtime = {1234567890, 987654321};
    Dir("times/dir", 0755).mtime = {1111111111, 111111111};
    return std::move(entries_);
  }

 private:
  Entry& Add(Kind kind, const std::string& path, mode_t perm) {
    Entry e;
    e.kind = kind;
    e.path = path;
    e.perm = perm;
    // A distinct mtime for everything, with nanoseconds.
    e.mtime.tv_sec = static_cast<time_t>(1'500'000'000 + rng_.Below(200'000'000));
    e.mtime.tv_nsec = static_cast<long>(rng_.Below(1'000'000'000));
    entries_.push_back(std::move(e));
    return entries_.back();
  }
  Entry& Dir(const std::string& path, mode_t perm) { return Add(Kind::kDir, path, perm); }
  Entry& File(const std::string& path, mode_t perm, uint64_t size) {
    Entry& e = Add(Kind::kFile, path, perm);
    e.size = size;
    e.content_seed = HashString(path, seed_);
    return e;
  }
  Entry& Symlink(const std::string& path, const std::string& target) {
    Entry& e = Add(Kind::kSymlink, path, 0777);
    e.target = target;
    return e;
  }
  Entry& HardLink(const std::string& path, const std::string& file) {
    Entry& e = Add(Kind::kHardLink, path, 0);
    e.target = file;
    return e;
  }

  const uint64_t seed_;
  Rng rng_;
  std::vector<Entry> entries_;
};

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::string Base(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Hex(const std::string& s, size_t max = 24) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < std::min(s.size(), max); ++i) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(s[i]));
    out += buf;
  }
  if (s.size() > max) out += "...";
  return out + " (" + std::to_string(s.size()) + " bytes)";
}

std::string TimeText(const timespec& t) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%09ld", static_cast<int64_t>(t.tv_sec), t.tv_nsec);
  return buf;
}

class Tree {
 public:
  Tree(std::string root, uint64_t seed) : root_(std::move(root)), entries_(TreeBuilder(seed).Build()) {
    for (const Entry& e : entries_) {
      children_[Parent(e.path)].insert(Base(e.path));
      if (e.kind == Kind::kDir) ++subdirs_[Parent(e.path)];
      if (e.kind == Kind::kHardLink) ++links_[e.target];
    }
  }

  void Write() {
    struct stat st;
    if (stat(root_.c_str(), &st) != 0) {
      if (mkdir(root_.c_str(), 0755) != 0) Die("mkdir %s: %s", root_.c_str(), std::strerror(errno));
    } else if (!children_of(root_).empty()) {
      Die("%s is not empty; write needs a missing or empty directory", root_.c_str());
    }
    uint64_t bytes = 0;
    for (const Entry& e : entries_) {
      const std::string p = Abs(e.path);
      switch (e.kind) {
        case Kind::kDir:
          if (mkdir(p.c_str(), 0755) != 0) Die("mkdir %s: %s", p.c_str(), std::strerror(errno));
          break;
        case Kind::kFile:
          WriteFile(e);
          bytes += e.size;
          break;
        case Kind::kSymlink:
          if (symlink(e.target.c_str(), p.c_str()) != 0) Die("symlink %s: %s", p.c_str(), std::strerror(errno));
          break;
        case Kind::kHardLink:
          if (link(Abs(e.target).c_str(), p.c_str()) != 0) Die("link %s: %s", p.c_str(), std::strerror(errno));
          break;
        case Kind::kFifo:
          if (mkfifo(p.c_str(), 0600) != 0) Die("mkfifo %s: %s", p.c_str(), std::strerror(errno));
          break;
      }
      for (const auto& [name, value] : e.xattrs) {
        if (lsetxattr(p.c_str(), name.c_str(), value.data(), value.size(), XATTR_CREATE) != 0) {
          Die("setxattr %s %s: %s", p.c_str(), name.c_str(), std::strerror(errno));
        }
      }
    }
    // Permissions after all content (writes may clear setuid), mtimes last and
    // children before parents (creating an entry changes its parent's mtime).
    for (const Entry& e : entries_) {
      if (e.kind == Kind::kDir || e.kind == Kind::kFile || e.kind == Kind::kFifo) {
        if (chmod(Abs(e.path).c_str(), e.perm) != 0) Die("chmod %s: %s", e.path.c_str(), std::strerror(errno));
      }
    }
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->kind == Kind::kHardLink) continue;
      const timespec times[2] = {it->mtime, it->mtime};  // atime, mtime
      if (utimensat(AT_FDCWD, Abs(it->path).c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
        Die("utimensat %s: %s", it->path.c_str(), std::strerror(errno));
      }
    }
    int fd = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || syncfs(fd) != 0) Die("syncfs %s: %s", root_.c_str(), std::strerror(errno));
    close(fd);
    std::printf("e2e_persist: wrote %zu entries (%" PRIu64 " bytes of file data) under %s\n", entries_.size(), bytes,
                root_.c_str());
  }

  void Verify() {
    CheckListing("");
    for (const Entry& e : entries_) {
      if (e.kind == Kind::kDir) CheckListing(e.path);
    }
    uint64_t bytes = 0;
    for (const Entry& e : entries_) {
      VerifyEntry(e);
      if (e.kind == Kind::kFile) bytes += e.size;
    }
    std::printf("e2e_persist: verified %zu entries (%" PRIu64 " bytes of file data) under %s: OK\n", entries_.size(),
                bytes, root_.c_str());
  }

 private:
  std::string Abs(const std::string& rel) const { return rel.empty() ? root_ : root_ + "/" + rel; }

  std::set<std::string> children_of(const std::string& dir) const {
    std::set<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) Die("opendir %s: %s", dir.c_str(), std::strerror(errno));
    while (struct dirent* de = readdir(d)) {
      const std::string name = de->d_name;
      if (name != "." && name != "..") {
        if (!names.insert(name).second) Die("%s: name listed twice: %s", dir.c_str(), name.c_str());
      }
    }
    closedir(d);
    return names;
  }

  void CheckListing(const std::string& rel) const {
    const std::set<std::string> actual = children_of(Abs(rel));
    auto it = children_.find(rel);
    const std::set<std::string> expected = it == children_.end() ? std::set<std::string>{} : it->second;
    for (const auto& name : expected) {
      if (!actual.count(name)) Die("%s: missing entry '%s'", Abs(rel).c_str(), name.c_str());
    }
    for (const auto& name : actual) {
      if (!expected.count(name)) Die("%s: unexpected entry '%s'", Abs(rel).c_str(), name.c_str());
    }
  }

  void WriteFile(const Entry& e) {
    const std::string p = Abs(e.path);
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) Die("create %s: %s", p.c_str(), std::strerror(errno));
    std::vector<uint8_t> buf(kIoChunk);
    std::vector<Range> ranges = e.data;
    if (ranges.empty()) ranges.push_back({0, e.size});
    else if (ftruncate(fd, static_cast<off_t>(e.size)) != 0) Die("ftruncate %s: %s", p.c_str(), std::strerror(errno));
    for (const Range& r : ranges) {
      for (uint64_t off = r.off; off < r.off + r.len;) {
        const uint64_t len = std::min<uint64_t>(kIoChunk, r.off + r.len - off);
        ExpectedContent(e, off, len, buf.data());
        ssize_t n = pwrite(fd, buf.data(), len, static_cast<off_t>(off));
        if (n <= 0) Die("write %s at %" PRIu64 ": %s", p.c_str(), off, n < 0 ? std::strerror(errno) : "wrote 0");
        off += static_cast<uint64_t>(n);
      }
    }
    if (close(fd) != 0) Die("close %s: %s", p.c_str(), std::strerror(errno));
  }

  void VerifyEntry(const Entry& e) const {
    const std::string p = Abs(e.path);
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) Die("%s: lstat: %s", p.c_str(), std::strerror(errno));

    // Hard links: same inode as the file; everything else is checked there.
    if (e.kind == Kind::kHardLink) {
      struct stat ost;
      if (lstat(Abs(e.target).c_str(), &ost) != 0) Die("%s: lstat: %s", e.target.c_str(), std::strerror(errno));
      if (!S_ISREG(st.st_mode) || st.st_ino != ost.st_ino || st.st_dev != ost.st_dev) {
        Die("%s: should be a hard link of %s (inode %ju) but is inode %ju, mode %o", p.c_str(), e.target.c_str(),
            static_cast<uintmax_t>(ost.st_ino), static_cast<uintmax_t>(st.st_ino), st.st_mode);
      }
      return;
    }

    const mode_t type = st.st_mode & S_IFMT;
    const mode_t want_type = e.kind == Kind::kDir       ? S_IFDIR
                             : e.kind == Kind::kSymlink ? S_IFLNK
                             : e.kind == Kind::kFifo    ? S_IFIFO
                                                        : S_IFREG;
    if (type != want_type) Die("%s: should be a %s but st_mode is 0%o", p.c_str(), KindName(e.kind), st.st_mode);

    if (e.kind != Kind::kSymlink && (st.st_mode & 07777) != e.perm) {
      Die("%s: permission bits %04o, expected %04o", p.c_str(), st.st_mode & 07777, e.perm);
    }
    if (st.st_mtim.tv_sec != e.mtime.tv_sec || st.st_mtim.tv_nsec != e.mtime.tv_nsec) {
      Die("%s: mtime %s, expected %s", p.c_str(), TimeText(st.st_mtim).c_str(), TimeText(e.mtime).c_str());
    }

    nlink_t want_nlink = 1;
    if (e.kind == Kind::kDir) {
      auto it = subdirs_.find(e.path);
      want_nlink = 2 + (it == subdirs_.end() ? 0 : it->second);
    } else if (auto it = links_.find(e.path); it != links_.end()) {
      want_nlink = 1 + it->second;
    }
    if (st.st_nlink != want_nlink) {
      Die("%s: st_nlink %ju, expected %ju", p.c_str(), static_cast<uintmax_t>(st.st_nlink),
          static_cast<uintmax_t>(want_nlink));
    }

    if (e.kind == Kind::kSymlink) {
      std::string target(e.target.size() + 2, '\0');
      const ssize_t n = readlink(p.c_str(), target.data(), target.size());
      if (n < 0) Die("%s: readlink: %s", p.c_str(), std::strerror(errno));
      target.resize(static_cast<size_t>(n));
      if (target != e.target) Die("%s: symlink target '%s', expected '%s'", p.c_str(), target.c_str(), e.target.c_str());
      if (static_cast<uint64_t>(st.st_size) != e.target.size()) {
        Die("%s: symlink st_size %jd, expected %zu", p.c_str(), static_cast<intmax_t>(st.st_size), e.target.size());
      }
    }

    if (e.kind == Kind::kFile) VerifyContent(e, st);
    if (e.kind != Kind::kSymlink) VerifyXattrs(e);
  }

  void VerifyContent(const Entry& e, const struct stat& st) const {
    const std::string p = Abs(e.path);
    if (static_cast<uint64_t>(st.st_size) != e.size) {
      Die("%s: size %jd, expected %" PRIu64, p.c_str(), static_cast<intmax_t>(st.st_size), e.size);
    }
    if ((e.perm & S_IRUSR) == 0 && geteuid() != 0) return;  // unreadable for us (modes/0000 is empty anyway)
    int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("%s: open: %s", p.c_str(), std::strerror(errno));
    std::vector<uint8_t> want(kIoChunk), got(kIoChunk);
    uint64_t off = 0;
    for (;;) {
      // Ask for one byte more than expected at the end to see EOF where it belongs.
      const uint64_t len = std::min<uint64_t>(kIoChunk, e.size - off + 1);
      uint64_t n = 0;
      while (n < len) {
        const ssize_t r = pread(fd, got.data() + n, len - n, static_cast<off_t>(off + n));
        if (r < 0) Die("%s: read at %" PRIu64 ": %s", p.c_str(), off + n, std::strerror(errno));
        if (r == 0) break;
        n += static_cast<uint64_t>(r);
      }
      const uint64_t want_len = std::min<uint64_t>(len, e.size - off);
      ExpectedContent(e, off, want_len, want.data());
      for (uint64_t i = 0; i < std::min(n, want_len); ++i) {
        if (got[i] != want[i]) {
          std::string exp_hex, act_hex;
          char hex[4];
          for (uint64_t j = i; j < std::min({n, want_len, i + 16}); ++j) {
            std::snprintf(hex, sizeof hex, " %02x", want[j]);
            exp_hex += hex;
            std::snprintf(hex, sizeof hex, " %02x", got[j]);
            act_hex += hex;
          }
          Die("%s: content differs at offset %" PRIu64 " (file size %" PRIu64 ")\n  expected:%s\n  actual:  %s",
              p.c_str(), off + i, e.size, exp_hex.c_str(), act_hex.c_str());
        }
      }
      if (n != want_len) {
        Die("%s: read returned %s at offset %" PRIu64 " (file size %" PRIu64 ")", p.c_str(),
            n < want_len ? "EOF early" : "data past the end", off + std::min(n, want_len), e.size);
      }
      off += want_len;
      if (off == e.size) break;
    }
    close(fd);
  }

  void VerifyXattrs(const Entry& e) const {
    const std::string p = Abs(e.path);
    ssize_t n = llistxattr(p.c_str(), nullptr, 0);
    if (n < 0) {
      if ((errno == ENOTSUP || errno == ENOSYS) && e.xattrs.empty()) return;
      Die("%s: listxattr: %s", p.c_str(), std::strerror(errno));
    }
    std::string list(static_cast<size_t>(n), '\0');
    n = llistxattr(p.c_str(), list.data(), list.size());
    if (n < 0) Die("%s: listxattr: %s", p.c_str(), std::strerror(errno));
    list.resize(static_cast<size_t>(n));
    std::set<std::string> names;  // user.* only: security.* / system.* may come from the host
    for (size_t pos = 0; pos < list.size();) {
      const std::string name = list.c_str() + pos;
      pos += name.size() + 1;
      if (name.rfind("user.", 0) == 0) names.insert(name);
    }
    for (const auto& [name, value] : e.xattrs) {
      if (!names.count(name)) Die("%s: xattr %s is missing", p.c_str(), name.c_str());
      std::string got(value.size() + 16, '\0');
      const ssize_t len = lgetxattr(p.c_str(), name.c_str(), got.data(), got.size());
      if (len < 0) Die("%s: getxattr %s: %s", p.c_str(), name.c_str(), std::strerror(errno));
      got.resize(static_cast<size_t>(len));
      if (got != value) {
        Die("%s: xattr %s is %s, expected %s", p.c_str(), name.c_str(), Hex(got).c_str(), Hex(value).c_str());
      }
    }
    for (const auto& name : names) {
      if (!e.xattrs.count(name)) Die("%s: unexpected xattr %s", p.c_str(), name.c_str());
    }
  }

  const std::string root_;
  const std::vector<Entry> entries_;
  std::map<std::string, std::set<std::string>> children_;  // dir ("" = root) -> names
  std::map<std::string, int> subdirs_;                     // dir -> number of subdirectories
  std::map<std::string, int> links_;                       // file -> number of extra hard links
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    Usage();
    return 2;
  }
  const std::string cmd = argv[1];
  char* end = nullptr;
  errno = 0;
  const unsigned long long seed = std::strtoull(argv[3], &end, 10);
  if (errno != 0 || end == argv[3] || *end != '\0' || argv[3][0] == '-') {
    std::fprintf(stderr, "e2e_persist: SEED must be a non-negative integer, got '%s'\n", argv[3]);
    Usage();
    return 2;
  }
  std::string dir = argv[2];
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  Tree tree(dir, seed);
  if (cmd == "write") {
    tree.Write();
  } else if (cmd == "verify") {
    tree.Verify();
  } else {
    std::fprintf(stderr, "e2e_persist: unknown command '%s'\n", cmd.c_str());
    Usage();
    return 2;
  }
  return 0;
}
