// e2e_concurrency_test: concurrent namespace and data operations from many
// threads against one directory of the file system under test.
//
// Environment:
//   TESSERA_TEST_DIR      (required) a directory on the file system under test;
//                         each test works in its own fresh subdirectory, removed
//                         again when the test passes
//   TESSERA_TEST_THREADS  threads per test (default 8)
//   TESSERA_TEST_ITERS    operations per thread in the churn tests (default 400)
//   TESSERA_TEST_SEED     seed of the per-thread workloads (default 1)
//   TESSERA_TEST_FILE_KIB size of each file in WritersToDistinctFiles (default 2048)
//
// The workloads are designed so that the final state can be checked even
// though the interleaving is not deterministic: every thread owns a private
// name space ("t<thread>.*") whose final content it tracks exactly, and also
// races on a small shared pool ("s.*") whose outcome is checked only through
// invariants (no duplicate names, every entry stats, st_nlink of every inode
// equals the number of names pointing at it, directory st_nlink == 2 +
// subdirectories, contents identify a file that was really created).

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

int EnvInt(const char* name, int def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n > 0 && n < 1'000'000) ? static_cast<int>(n) : def;
}

std::string ErrnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// Names in dir except "." and ".."; *dots counts how many of those were seen.
bool ListDir(const std::string& dir, std::vector<std::string>* names, int* dots, std::string* err) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    *err = "opendir " + dir + ": " + ErrnoText(errno);
    return false;
  }
  names->clear();
  *dots = 0;
  errno = 0;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") ++*dots;
    else names->push_back(name);
    errno = 0;
  }
  const int rerr = errno;
  closedir(d);
  if (rerr != 0) {
    *err = "readdir " + dir + ": " + ErrnoText(rerr);
    return false;
  }
  return true;
}

bool ReadWhole(const std::string& path, std::string* out, std::string* err) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = "open " + path + ": " + ErrnoText(errno);
    return false;
  }
  out->clear();
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *err = "read " + path + ": " + ErrnoText(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

bool WriteAllAt(int fd, const char* data, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = pwrite(fd, data, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
  return true;
}

// Deterministic pseudo-random bytes for file contents.
std::string RandomBytes(uint64_t seed, size_t len) {
  std::mt19937_64 rng(seed);
  std::string s(len, '\0');
  for (size_t i = 0; i < len; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, std::min<size_t>(8, len - i));
  }
  return s;
}

// Offset of the first differing byte, or -1 when equal.
long FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<long>(n);
}

// Collects failures from worker threads (gtest assertions belong on the main thread).
class Failures {
 public:
  void Add(const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    if (msgs_.size() < 50) msgs_.push_back(msg);
  }
  void Report() const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& m : msgs_) ADD_FAILURE() << m;
  }
  bool empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return msgs_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> msgs_;
};

class ConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* root = std::getenv("TESSERA_TEST_DIR");
    ASSERT_TRUE(root != nullptr && *root != '\0')
        << "TESSERA_TEST_DIR must name a directory on the file system under test";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::string(root) + "/concurrency." + info->name() + "." + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << "mkdir " << dir_ << ": " << ErrnoText(errno);
    threads_ = EnvInt("TESSERA_TEST_THREADS", 8);
    iters_ = EnvInt("TESSERA_TEST_ITERS", 400);
    seed_ = static_cast<uint64_t>(EnvInt("TESSERA_TEST_SEED", 1));
  }

  void TearDown() override {
    if (dir_.empty()) return;  // SetUp failed before creating it
    if (HasFailure()) {
      std::fprintf(stderr, "left %s in place for inspection (seed %lu)\n", dir_.c_str(),
                   static_cast<unsigned long>(seed_));
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    EXPECT_FALSE(ec) << "cleanup of " << dir_ << ": " << ec.message();
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Runs fn(thread_index) on threads_ threads released together.
  template <typename Fn>
  void RunThreads(Fn fn) {
    std::latch start(threads_);
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        fn(t);
      });
    }
    for (auto& th : threads) th.join();
  }

  // Checks the invariants every directory must satisfy and returns the
  // lstat of each entry: no duplicates, "." and ".." once each, every entry
  // stats, st_nlink of each non-directory inode equals the number of names
  // with that inode (all links live in this directory), st_nlink of the
  // directory is 2 + subdirectories.
  std::map<std::string, struct stat> CheckDirInvariants(const std::string& dir) {
    std::map<std::string, struct stat> out;
    std::vector<std::string> names;
    int dots = 0;
    std::string err;
    if (!ListDir(dir, &names, &dots, &err)) {
      ADD_FAILURE() << err;
      return out;
    }
    EXPECT_EQ(dots, 2) << dir << ": '.' and '..' must each be listed once";
    std::map<ino_t, int> names_per_inode;
    int subdirs = 0;
    for (const auto& name : names) {
      struct stat st;
      if (lstat((dir + "/" + name).c_str(), &st) != 0) {
        ADD_FAILURE() << "listed entry " << dir << "/" << name << " does not stat: " << ErrnoText(errno);
        continue;
      }
      EXPECT_TRUE(out.emplace(name, st).second) << dir << ": name listed twice: " << name;
      if (S_ISDIR(st.st_mode)) {
        ++subdirs;
        // A directory's own nlink is checked when it is listed itself.
      } else {
        ++names_per_inode[st.st_ino];
      }
    }
    for (const auto& [name, st] : out) {
      if (!S_ISDIR(st.st_mode)) {
        EXPECT_EQ(st.st_nlink, static_cast<nlink_t>(names_per_inode[st.st_ino]))
            << dir << "/" << name << " (inode " << st.st_ino << "): st_nlink " << st.st_nlink << " but "
            << names_per_inode[st.st_ino] << " name(s) in the listing point to it";
      }
    }
    struct stat dst;
    if (stat(dir.c_str(), &dst) != 0) {
      ADD_FAILURE() << "stat " << dir << ": " << ErrnoText(errno);
    } else {
      EXPECT_EQ(dst.st_nlink, static_cast<nlink_t>(2 + subdirs))
          << dir << ": directory st_nlink must be 2 + " << subdirs << " subdirectories";
    }
    return out;
  }

  std::string dir_;
  int threads_ = 8;
  int iters_ = 400;
  uint64_t seed_ = 1;
};

// ------------------------------------------------------------------------
// Files: create / rename / rename over / link / unlink in one directory.

// A file's identity is its content "t<thread>.n<k>", unique per created inode.
bool IsIdentity(const std::string& s) {
  size_t dot = s.find(".n");
  if (s.size() < 4 || s[0] != 't' || dot == std::string::npos || dot == 1 || dot + 2 == s.size()) return false;
  const auto digits = [](const std::string& p) {
    return std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(1, dot - 1)) && digits(s.substr(dot + 2));
}

class ChurnWorker {
 public:
  ChurnWorker(const std::string& dir, int t, uint64_t seed, int pool)
      : dir_(dir), t_(t), rng_(seed * 1000003 + static_cast<uint64_t>(t)), pool_(pool) {}

  // Runs iters operations; returns false with error() set on the first
  // unexpected result.
  bool Run(int iters) {
    for (int i = 0; i < iters; ++i) {
      if (!Step()) return false;
    }
    return true;
  }

  const std::string& error() const { return error_; }
  const std::map<std::string, std::string>& files() const { return files_; }
  const std::set<std::string>& dirs() const { return dirs_; }
  std::string prefix() const { return "t" + std::to_string(t_) + "."; }

 private:
  enum Op {
    kCreate, kRename, kRenameOver, kLink, kUnlink, kMkdir, kRenameDir, kRmdir,
    kLinkShared, kRenameToShared, kRenameShared, kUnlinkShared, kAdopt, kNumOps
  };

  bool Step() {
    static constexpr int kWeights[kNumOps] = {20, 12, 8, 10, 12, 3, 2, 2, 6, 5, 5, 5, 5};
    int total = 0;
    for (int w : kWeights) total += w;
    int r = static_cast<int>(rng_() % static_cast<uint64_t>(total));
    int op = 0;
    while (r >= kWeights[op]) r -= kWeights[op++];
    // Keep the population bounded and give the file ops something to act on.
    if (files_.size() > 48 && op == kCreate) op = kUnlink;
    if (files_.empty() && op != kMkdir && op != kRenameDir && op != kRmdir) op = kCreate;
    if (dirs_.empty() && (op == kRenameDir || op == kRmdir)) op = kMkdir;

    switch (op) {
      case kCreate: {
        const std::string name = Fresh('n');
        int fd = open(Path(name).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0) return Fail("create " + name);
        const bool ok = WriteAllAt(fd, name.data(), name.size(), 0);
        close(fd);
        if (!ok) return Fail("write " + name);
        files_[name] = name;  // the first name of a file is its identity
        return true;
      }
      case kRename: {
        const std::string a = PickFile(), b = Fresh('n');
        if (rename(Path(a).c_str(), Path(b).c_str()) != 0) return Fail("rename " + a + " -> " + b);
        files_[b] = files_[a];
        files_.erase(a);
        return true;
      }
      case kRenameOver: {
        if (files_.size() < 2) return true;
        const std::string a = PickFile(), b = PickFile();
        if (a == b) return true;
        if (rename(Path(a).c_str(), Path(b).c_str()) != 0) return Fail("rename over " + a + " -> " + b);
        const bool same_file = files_[a] == files_[b];
        struct stat st;
        const bool a_exists = lstat(Path(a).c_str(), &st) == 0;
        if (same_file != a_exists) {
          // POSIX: renaming one link of a file over another link of the same file does nothing.
          return Fail("rename " + a + " over " + b + (same_file ? " (links of the same file) removed the source"
                                                                : " left the source in place"), 0);
        }
        if (!same_file) {
          files_[b] = files_[a];
          files_.erase(a);
        }
        return true;
      }
      case kLink: {
        const std::string a = PickFile(), b = Fresh('n');
        if (link(Path(a).c_str(), Path(b).c_str()) != 0) return Fail("link " + a + " -> " + b);
        files_[b] = files_[a];
        return true;
      }
      case kUnlink: {
        const std::string a = PickFile();
        if (unlink(Path(a).c_str()) != 0) return Fail("unlink " + a);
        files_.erase(a);
        return true;
      }
      case kMkdir: {
        const std::string d = Fresh('d');
        if (mkdir(Path(d).c_str(), 0755) != 0) return Fail("mkdir " + d);
        dirs_.insert(d);
        return true;
      }
      case kRenameDir: {
        const std::string d = PickDir(), e = Fresh('d');
        if (rename(Path(d).c_str(), Path(e).c_str()) != 0) return Fail("rename dir " + d + " -> " + e);
        dirs_.erase(d);
        dirs_.insert(e);
        return true;
      }
      case kRmdir: {
        const std::string d = PickDir();
        if (rmdir(Path(d).c_str()) != 0) return Fail("rmdir " + d);
        dirs_.erase(d);
        return true;
      }
      case kLinkShared: {
        const std::string a = PickFile(), s = Shared();
        if (link(Path(a).c_str(), Path(s).c_str()) != 0 && errno != EEXIST) return Fail("link " + a + " -> " + s);
        return true;
      }
      case kRenameToShared: {
        const std::string a = PickFile(), s = Shared();
        if (rename(Path(a).c_str(), Path(s).c_str()) != 0) return Fail("rename " + a + " -> " + s);
        // If s was another link of the same file the rename was a no-op.
        struct stat st;
        if (lstat(Path(a).c_str(), &st) != 0) files_.erase(a);
        return true;
      }
      case kRenameShared: {
        const std::string s = Shared(), u = Shared();
        if (s != u && rename(Path(s).c_str(), Path(u).c_str()) != 0 && errno != ENOENT) {
          return Fail("rename " + s + " -> " + u);
        }
        return true;
      }
      case kUnlinkShared: {
        const std::string s = Shared();
        if (unlink(Path(s).c_str()) != 0 && errno != ENOENT) return Fail("unlink " + s);
        return true;
      }
      case kAdopt: {
        // Take a file out of the shared pool into the private name space.
        const std::string s = Shared(), b = Fresh('n');
        if (rename(Path(s).c_str(), Path(b).c_str()) != 0) {
          return errno == ENOENT ? true : Fail("rename " + s + " -> " + b);
        }
        std::string content, err;
        if (!ReadWhole(Path(b), &content, &err)) return Fail(err, 0);
        if (!IsIdentity(content)) return Fail("adopted " + s + " as " + b + " has bad content '" + content + "'", 0);
        files_[b] = content;
        return true;
      }
    }
    return true;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Fresh(char kind) { return prefix() + kind + std::to_string(next_++); }
  std::string Shared() { return "s." + std::to_string(rng_() % static_cast<uint64_t>(pool_)); }
  std::string PickFile() { return std::next(files_.begin(), static_cast<long>(rng_() % files_.size()))->first; }
  std::string PickDir() { return *std::next(dirs_.begin(), static_cast<long>(rng_() % dirs_.size())); }

  bool Fail(const std::string& what, int err = -1) {
    if (err == -1) err = errno;
    error_ = "thread " + std::to_string(t_) + ": " + what + (err ? ": " + ErrnoText(err) : "");
    return false;
  }

  const std::string dir_;
  const int t_;
  std::mt19937_64 rng_;
  const int pool_;
  uint64_t next_ = 0;
  std::map<std::string, std::string> files_;  // private name -> identity of the file
  std::set<std::string> dirs_;                // private subdirectories
  std::string error_;
};

TEST_F(ConcurrencyTest, CreateRenameLinkUnlinkInOneDirectory) {
  constexpr int kPool = 16;
  std::vector<ChurnWorker> workers;
  for (int t = 0; t < threads_; ++t) workers.emplace_back(dir_, t, seed_, kPool);
  Failures failures;
  RunThreads([&](int t) {
    if (!workers[t].Run(iters_)) failures.Add(workers[t].error());
  });
  failures.Report();
  if (!failures.empty()) return;

  const auto entries = CheckDirInvariants(dir_);
  std::map<std::string, ino_t> inode_of_identity;
  std::map<ino_t, std::string> identity_of_inode;
  const auto check_identity = [&](const std::string& name, const std::string& identity, ino_t ino) {
    auto [it, fresh] = inode_of_identity.emplace(identity, ino);
    EXPECT_EQ(it->second, ino) << name << ": file " << identity << " appears under two inodes";
    auto [jt, fresh2] = identity_of_inode.emplace(ino, identity);
    EXPECT_EQ(jt->second, identity) << name << ": inode " << ino << " holds two different files";
  };

  // Private name spaces: exact.
  for (const auto& w : workers) {
    std::set<std::string> expected;
    for (const auto& [name, id] : w.files()) expected.insert(name);
    expected.insert(w.dirs().begin(), w.dirs().end());
    std::set<std::string> listed;
    for (const auto& [name, st] : entries) {
      if (name.rfind(w.prefix(), 0) == 0) listed.insert(name);
    }
    std::vector<std::string> missing, extra;
    std::set_difference(expected.begin(), expected.end(), listed.begin(), listed.end(), std::back_inserter(missing));
    std::set_difference(listed.begin(), listed.end(), expected.begin(), expected.end(), std::back_inserter(extra));
    EXPECT_TRUE(missing.empty()) << "names of " << w.prefix() << "* lost: " << ::testing::PrintToString(missing);
    EXPECT_TRUE(extra.empty()) << "unexpected names " << w.prefix() << "*: " << ::testing::PrintToString(extra);

    for (const auto& d : w.dirs()) {
      auto it = entries.find(d);
      if (it != entries.end()) {
        EXPECT_TRUE(S_ISDIR(it->second.st_mode)) << d << " should be a directory";
      }
    }
    for (const auto& [name, id] : w.files()) {
      auto it = entries.find(name);
      if (it == entries.end()) continue;
      EXPECT_TRUE(S_ISREG(it->second.st_mode)) << name << " should be a regular file";
      std::string content, err;
      if (!ReadWhole(Path(name), &content, &err)) {
        ADD_FAILURE() << err;
        continue;
      }
      EXPECT_EQ(content, id) << name << " points to the wrong file";
      check_identity(name, id, it->second.st_ino);
    }
  }

  // Shared pool: only invariants.
  const auto shared = std::count_if(entries.begin(), entries.end(),
                                    [](const auto& e) { return e.first.rfind("s.", 0) == 0; });
  std::printf("final listing: %zu entries, %td in the shared pool, %zu distinct files\n", entries.size(), shared,
              identity_of_inode.size());
  for (const auto& [name, st] : entries) {
    if (name.rfind("s.", 0) != 0) continue;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << name;
    std::string content, err;
    if (!ReadWhole(Path(name), &content, &err)) {
      ADD_FAILURE() << err;
      continue;
    }
    EXPECT_TRUE(IsIdentity(content)) << name << " has bad content '" << content << "'";
    check_identity(name, content, st.st_ino);
  }
  for (const auto& [name, st] : entries) {
    EXPECT_TRUE(name.rfind("s.", 0) == 0 || name[0] == 't') << "unexpected entry " << name;
  }
}

// ------------------------------------------------------------------------
// Directories: concurrent mkdir / rmdir / rename, also across parents.

class DirWorker {
 public:
  DirWorker(const std::string& dir, int t, uint64_t seed, int pool)
      : dir_(dir), t_(t), rng_(seed * 7919 + static_cast<uint64_t>(t)), pool_(pool) {}

  bool Run(int iters) {
    for (int i = 0; i < iters; ++i) {
      if (!Step()) return false;
    }
    return true;
  }

  const std::string& error() const { return error_; }
  // Private top-level directory -> names of its subdirectories.
  const std::map<std::string, std::set<std::string>>& tops() const { return tops_; }
  std::string prefix() const { return "t" + std::to_string(t_) + "."; }

 private:
  bool Step() {
    int op = static_cast<int>(rng_() % 100);
    // Keep the tree small: at most 16 private tops with at most 8 children each.
    if (op < 12 && tops_.size() >= 16) op = 40;
    if (tops_.empty() || op < 12) {  // mkdir a top-level directory
      const std::string d = prefix() + "d" + std::to_string(next_++);
      if (mkdir(Path(d).c_str(), 0755) != 0) return Fail("mkdir " + d);
      tops_[d];
      return true;
    }
    const std::string top = PickTop();
    auto& kids = tops_[top];
    if (op < 32 && kids.size() >= 8) op = 40;
    if (op < 32) {  // mkdir a child
      const std::string c = "c" + std::to_string(next_++);
      if (mkdir(Path(top + "/" + c).c_str(), 0700) != 0) return Fail("mkdir " + top + "/" + c);
      kids.insert(c);
    } else if (op < 52) {  // rmdir a child, or the top (ENOTEMPTY when it has children)
      if (!kids.empty() && rng_() % 2) {
        const std::string c = *kids.begin();
        if (rmdir(Path(top + "/" + c).c_str()) != 0) return Fail("rmdir " + top + "/" + c);
        kids.erase(c);
      } else if (rmdir(Path(top).c_str()) == 0) {
        if (!kids.empty()) return Fail("rmdir of non-empty " + top + " succeeded", 0);
        tops_.erase(top);
      } else if (kids.empty() || (errno != ENOTEMPTY && errno != EEXIST)) {
        return Fail("rmdir " + top);
      }
    } else if (op < 62) {  // rename the top
      const std::string d = prefix() + "d" + std::to_string(next_++);
      if (rename(Path(top).c_str(), Path(d).c_str()) != 0) return Fail("rename " + top + " -> " + d);
      tops_[d] = std::move(kids);
      tops_.erase(top);
    } else if (op < 72) {  // move a child to another top (changes both parents' nlink)
      if (kids.empty() || tops_.size() < 2) return true;
      const std::string other = PickTop();
      if (other == top) return true;
      const std::string c = *std::next(kids.begin(), static_cast<long>(rng_() % kids.size()));
      if (rename(Path(top + "/" + c).c_str(), Path(other + "/" + c).c_str()) != 0) {
        return Fail("rename " + top + "/" + c + " -> " + other + "/" + c);
      }
      tops_[other].insert(c);
      tops_[top].erase(c);
    } else if (op < 82) {  // shared mkdir
      const std::string s = Shared();
      if (mkdir(Path(s).c_str(), 0755) != 0 && errno != EEXIST) return Fail("mkdir " + s);
    } else if (op < 92) {  // shared rmdir
      const std::string s = Shared();
      if (rmdir(Path(s).c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
        return Fail("rmdir " + s);
      }
    } else {  // rename a private top over a shared name (replaces an empty directory)
      const std::string s = Shared();
      if (rename(Path(top).c_str(), Path(s).c_str()) == 0) {
        tops_.erase(top);
      } else if (errno != ENOTEMPTY && errno != EEXIST) {
        return Fail("rename " + top + " -> " + s);
      }
    }
    return true;
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Shared() { return "s." + std::to_string(rng_() % static_cast<uint64_t>(pool_)); }
  std::string PickTop() { return std::next(tops_.begin(), static_cast<long>(rng_() % tops_.size()))->first; }
  bool Fail(const std::string& what, int err = -1) {
    if (err == -1) err = errno;
    error_ = "thread " + std::to_string(t_) + ": " + what + (err ? ": " + ErrnoText(err) : "");
    return false;
  }

  const std::string dir_;
  const int t_;
  std::mt19937_64 rng_;
  const int pool_;
  uint64_t next_ = 0;
  std::map<std::string, std::set<std::string>> tops_;
  std::string error_;
};

TEST_F(ConcurrencyTest, MkdirRmdirRenameSubdirectories) {
  constexpr int kPool = 8;
  std::vector<DirWorker> workers;
  for (int t = 0; t < threads_; ++t) workers.emplace_back(dir_, t, seed_, kPool);
  Failures failures;
  RunThreads([&](int t) {
    if (!workers[t].Run(iters_)) failures.Add(workers[t].error());
  });
  failures.Report();
  if (!failures.empty()) return;

  const auto entries = CheckDirInvariants(dir_);
  std::printf("final listing: %zu directories\n", entries.size());
  for (const auto& [name, st] : entries) {
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << name << " should be a directory";
    if (S_ISDIR(st.st_mode)) CheckDirInvariants(Path(name));  // nlink of every subdirectory
  }
  for (const auto& w : workers) {
    std::set<std::string> listed;
    for (const auto& [name, st] : entries) {
      if (name.rfind(w.prefix(), 0) == 0) listed.insert(name);
    }
    std::set<std::string> expected;
    for (const auto& [top, kids] : w.tops()) expected.insert(top);
    EXPECT_EQ(listed, expected) << "top-level directories of " << w.prefix() << "*";
    for (const auto& [top, kids] : w.tops()) {
      std::vector<std::string> names;
      int dots = 0;
      std::string err;
      if (!ListDir(Path(top), &names, &dots, &err)) {
        ADD_FAILURE() << err;
        continue;
      }
      EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), kids) << "children of " << top;
    }
  }
}

// ------------------------------------------------------------------------
// Data: many writers, then verify.

TEST_F(ConcurrencyTest, WritersToDistinctFiles) {
  const size_t base = static_cast<size_t>(EnvInt("TESSERA_TEST_FILE_KIB", 2048)) * 1024;
  std::vector<std::string> expected(threads_);
  Failures failures;
  RunThreads([&](int t) {
    // Sizes differ per thread and are not block aligned.
    const size_t size = base + static_cast<size_t>(t) * 4099 + 7;
    expected[t] = RandomBytes(seed_ * 31 + static_cast<uint64_t>(t), size);
    const std::string path = Path("w" + std::to_string(t));
    int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return failures.Add("create " + path + ": " + ErrnoText(errno));
    // Random-sized pieces; odd threads write them in shuffled order.
    std::mt19937_64 rng(seed_ + static_cast<uint64_t>(t));
    std::vector<std::pair<size_t, size_t>> pieces;
    for (size_t off = 0; off < size;) {
      const size_t len = std::min<size_t>(size - off, 1 + rng() % (256 * 1024));
      pieces.emplace_back(off, len);
      off += len;
    }
    if (t % 2) std::shuffle(pieces.begin(), pieces.end(), rng);
    for (const auto& [off, len] : pieces) {
      if (!WriteAllAt(fd, expected[t].data() + off, len, static_cast<off_t>(off))) {
        failures.Add("pwrite " + path + " at " + std::to_string(off) + ": " + ErrnoText(errno));
        break;
      }
    }
    if (t % 3 == 0 && fsync(fd) != 0) failures.Add("fsync " + path + ": " + ErrnoText(errno));
    if (close(fd) != 0) failures.Add("close " + path + ": " + ErrnoText(errno));
  });
  failures.Report();

  // Verify through fresh opens, concurrently too.
  Failures mismatches;
  RunThreads([&](int t) {
    const std::string path = Path("w" + std::to_string(t));
    std::string content, err;
    if (!ReadWhole(path, &content, &err)) return mismatches.Add(err);
    const long diff = FirstDifference(content, expected[t]);
    if (diff >= 0) {
      mismatches.Add(path + ": size " + std::to_string(content.size()) + " (expected " +
                   std::to_string(expected[t].size()) + "), first difference at offset " + std::to_string(diff));
    }
  });
  mismatches.Report();
  CheckDirInvariants(dir_);
}

TEST_F(ConcurrencyTest, WritersToDisjointRangesOfOneFile) {
  // Stripes of an odd size, so neighbouring writers share blocks/pages.
  constexpr size_t kStripe = 65536 + 4097;
  const int stripes = threads_ * 8;
  const std::string expected = RandomBytes(seed_ * 17 + 5, kStripe * static_cast<size_t>(stripes));
  const std::string path = Path("shared");
  int fd0 = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd0, 0) << "create " << path << ": " << ErrnoText(errno);
  close(fd0);
  Failures failures;
  RunThreads([&](int t) {
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return failures.Add("open " + path + ": " + ErrnoText(errno));
    for (int k = t; k < stripes; k += threads_) {
      const size_t off = kStripe * static_cast<size_t>(k);
      // Two writes per stripe, second half first, to interleave more.
      const size_t half = kStripe / 2;
      if (!WriteAllAt(fd, expected.data() + off + half, kStripe - half, static_cast<off_t>(off + half)) ||
          !WriteAllAt(fd, expected.data() + off, half, static_cast<off_t>(off))) {
        failures.Add("pwrite " + path + ": " + ErrnoText(errno));
        break;
      }
    }
    close(fd);
  });
  failures.Report();
  std::string content, err;
  ASSERT_TRUE(ReadWhole(path, &content, &err)) << err;
  const long diff = FirstDifference(content, expected);
  EXPECT_EQ(diff, -1) << path << ": size " << content.size() << " (expected " << expected.size()
                      << "), first difference at offset " << diff << " (stripe " << diff / static_cast<long>(kStripe)
                      << ")";
}

// O_APPEND records with an fdatasync every few, while another thread only
// calls fstat(): a GETATTR answered while a commit landed once carried the
// length from before it, the kernel took it as the file's size, and the next
// append overwrote records that write() had acknowledged.
TEST_F(ConcurrencyTest, AppendsRacingFstatLoseNothing) {
  const int records = iters_ * 4;
  constexpr size_t kRecord = 4096;
  const std::string path = Path("appended");
  int fd = open(path.c_str(), O_CREAT | O_RDWR | O_APPEND | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << "create " << path << ": " << ErrnoText(errno);
  std::atomic<bool> stop{false};
  std::thread stater([&] {
    struct stat st;
    while (!stop.load()) (void)fstat(fd, &st);
  });
  std::string rec(kRecord, '\0');
  int written = 0;
  for (; written < records; ++written) {
    std::fill(rec.begin(), rec.end(), '\0');
    std::snprintf(rec.data(), rec.size(), "record %d", written);
    if (write(fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size())) break;
    if (written % 4 == 3 && fdatasync(fd) != 0) break;
  }
  stop = true;
  stater.join();
  EXPECT_EQ(written, records) << "write/fdatasync " << path << ": " << ErrnoText(errno);
  close(fd);
  std::string content, err;
  ASSERT_TRUE(ReadWhole(path, &content, &err)) << err;
  EXPECT_EQ(content.size(), size_t(written) * kRecord);
  int lost = 0, first_lost = -1;
  for (size_t i = 0; i < size_t(written) && (i + 1) * kRecord <= content.size(); ++i) {
    // Each record is its text, NUL-padded to kRecord.
    if (std::string(content.data() + i * kRecord) != "record " + std::to_string(i)) {
      if (first_lost < 0) first_lost = int(i);
      ++lost;
    }
  }
  EXPECT_EQ(lost, 0) << lost << " acknowledged records overwritten, the first at offset " << first_lost * long(kRecord);
}

// ------------------------------------------------------------------------
// Exclusive creation: exactly one winner per name.

TEST_F(ConcurrencyTest, ExclusiveCreateHasOneWinnerPerName) {
  const int names = 32;
  const int rounds = 3;
  // Each thread owns one file that it hard-links into the "l.*" race.
  for (int t = 0; t < threads_; ++t) {
    const std::string own = Path("own" + std::to_string(t));
    int fd = open(own.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << own << ": " << ErrnoText(errno);
    const std::string id = std::to_string(t);
    ASSERT_TRUE(WriteAllAt(fd, id.data(), id.size(), 0));
    close(fd);
  }
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // wins[kind][name] = winning threads
    enum Kind { kCreate, kMkdir, kLink, kSymlink, kKinds };
    static const char* const kPrefix[kKinds] = {"x.", "m.", "l.", "y."};
    std::vector<std::vector<std::vector<int>>> wins(kKinds, std::vector<std::vector<int>>(names));
    std::mutex mu;
    Failures failures;
    RunThreads([&](int t) {
      std::mt19937_64 rng(seed_ * 101 + static_cast<uint64_t>(t * 7 + round));
      std::vector<int> order(static_cast<size_t>(names * kKinds));
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::shuffle(order.begin(), order.end(), rng);
      const std::string id = std::to_string(t);
      for (int item : order) {
        const Kind kind = static_cast<Kind>(item % kKinds);
        const int n = item / kKinds;
        const std::string path = Path(kPrefix[kind] + std::to_string(n));
        int rc = -1;
        switch (kind) {
          case kCreate: {
            int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
            if (fd >= 0) {
              rc = WriteAllAt(fd, id.data(), id.size(), 0) ? 0 : -1;
              close(fd);
              if (rc != 0) failures.Add("write " + path + ": " + ErrnoText(errno));
            }
            break;
          }
          case kMkdir: rc = mkdir(path.c_str(), 0755); break;
          case kLink: rc = link(Path("own" + id).c_str(), path.c_str()); break;
          case kSymlink: rc = symlink(("target-" + id).c_str(), path.c_str()); break;
          case kKinds: break;
        }
        if (rc == 0) {
          std::lock_guard<std::mutex> lock(mu);
          wins[kind][n].push_back(t);
        } else if (errno != EEXIST) {
          failures.Add(path + ": " + ErrnoText(errno));
        }
      }
    });
    failures.Report();

    for (int n = 0; n < names; ++n) {
      for (int kind = 0; kind < kKinds; ++kind) {
        const std::string name = kPrefix[kind] + std::to_string(n);
        ASSERT_EQ(wins[kind][n].size(), 1u) << name << ": winners " << ::testing::PrintToString(wins[kind][n]);
        const std::string winner = std::to_string(wins[kind][n][0]);
        if (kind == kCreate || kind == kLink) {
          std::string content, err;
          ASSERT_TRUE(ReadWhole(Path(name), &content, &err)) << err;
          EXPECT_EQ(content, winner) << name << " holds another thread's file";
        } else if (kind == kSymlink) {
          char buf[64];
          ssize_t len = readlink(Path(name).c_str(), buf, sizeof buf);
          ASSERT_GT(len, 0) << name << ": " << ErrnoText(errno);
          EXPECT_EQ(std::string(buf, static_cast<size_t>(len)), "target-" + winner) << name;
        }
      }
    }
    // own<t> has 1 + (links won) names.
    const auto entries = CheckDirInvariants(dir_);
    EXPECT_EQ(entries.size(), static_cast<size_t>(threads_ + kKinds * names));

    // Remove everything but the own files for the next round (re-creation
    // after removal must work, whatever the file system caches).
    for (int n = 0; n < names; ++n) {
      for (int kind = 0; kind < kKinds; ++kind) {
        const std::string path = Path(kPrefix[kind] + std::to_string(n));
        EXPECT_EQ(kind == kMkdir ? rmdir(path.c_str()) : unlink(path.c_str()), 0) << path << ": " << ErrnoText(errno);
      }
    }
  }
}

// ------------------------------------------------------------------------
// Rename is atomic: many threads rename their file onto one name while
// readers open it; the name never disappears and ends up holding one file.

TEST_F(ConcurrencyTest, RenamesOntoOneNameAreAtomic) {
  const std::string target = Path("target");
  const int rounds = std::max(1, iters_ / 20);
  std::atomic<bool> done{false};
  std::atomic<long> reads{0};
  Failures failures;
  {
    int fd = open(target.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << ErrnoText(errno);
    ASSERT_TRUE(WriteAllAt(fd, "init", 4, 0));
    close(fd);
  }
  // Readers: the target must always exist and hold a complete identity.
  std::vector<std::thread> readers;
  struct StopReaders {  // also on an early return from a failed ASSERT
    std::atomic<bool>& done;
    std::vector<std::thread>& readers;
    ~StopReaders() {
      done = true;
      for (auto& th : readers) th.join();
    }
  } stop_readers{done, readers};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        std::string content, err;
        if (!ReadWhole(target, &content, &err)) {
          failures.Add("reader: " + err + " while renames replace it");
          return;
        }
        if (content != "init" && content.rfind("r.", 0) != 0) {
          failures.Add("reader: target holds '" + content + "'");
          return;
        }
        ++reads;
      }
    });
  }
  for (int round = 0; round < rounds && failures.empty(); ++round) {
    const auto source = [&](int t) { return "r." + std::to_string(round) + "." + std::to_string(t); };
    for (int t = 0; t < threads_; ++t) {
      int fd = open(Path(source(t)).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      ASSERT_GE(fd, 0) << ErrnoText(errno);
      ASSERT_TRUE(WriteAllAt(fd, source(t).data(), source(t).size(), 0));
      close(fd);
    }
    RunThreads([&](int t) {
      if (rename(Path(source(t)).c_str(), target.c_str()) != 0) {
        failures.Add("rename " + source(t) + " -> target: " + ErrnoText(errno));
      }
    });
    std::vector<std::string> names;
    int dots = 0;
    std::string err;
    ASSERT_TRUE(ListDir(dir_, &names, &dots, &err)) << err;
    EXPECT_EQ(names, std::vector<std::string>{"target"}) << "round " << round;
    struct stat st;
    ASSERT_EQ(stat(target.c_str(), &st), 0) << ErrnoText(errno);
    EXPECT_EQ(st.st_nlink, 1u);
    std::string content;
    ASSERT_TRUE(ReadWhole(target, &content, &err)) << err;
    EXPECT_EQ(content.rfind("r." + std::to_string(round) + ".", 0), 0u) << "target holds '" << content << "'";
  }
  done = true;
  for (auto& th : readers) th.join();
  readers.clear();
  failures.Report();
  EXPECT_GT(reads.load(), 0);
}

}  // namespace
