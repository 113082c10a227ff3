// Differential test of the metadata engines: the same seeded random sequence
// of operations runs on KvMeta over the memory engine (the reference) and on
// the engine under test (sqlite3, Redis, PostgreSQL). Every reply (errno and
// the attributes returned) must match, and so must a full dump of the state,
// walked through the Meta interface (paths, types, modes, owners, link
// counts, lengths, symlink targets, xattrs, slice lists, usage counters),
// taken every 50 operations and at the end.
//
// What it catches: an engine whose operation fails midway but keeps part of
// its writes (a Redis function that writes before it checks), replies that
// differ between engines, and, with TESSERA_REDIS_FAULTS lost replies, a
// resent Redis call that runs twice (a create answering EEXIST, an unlink
// ENOENT). Small limits (capacity, inodes) make ENOSPC paths common.
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../kv/pg_test_util.h"
#include "chunk/layout.h"
#include "meta/meta.h"
#include "meta/redis_client.h"

namespace tessera::meta {
namespace {

using chunk::Slice;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// One step's description and outcome, compared across engines.
struct Outcome {
  std::string op;
  int code = 0;
  std::string attr;  // the attributes an operation returned (no times, no inode numbers)
};

std::string AttrText(const Attr& a) {
  std::ostringstream o;
  o << std::oct << a.mode << std::dec << " uid=" << a.uid << " gid=" << a.gid << " nlink=" << a.nlink
    << " len=" << a.length << " rdev=" << a.rdev;
  return o.str();
}

// Drives one engine with the operations of a seed. Both drivers of a seed
// draw the same random numbers, so they issue the same operations; what an
// operation acts on is named by path, never by inode number.
class Driver {
 public:
  explicit Driver(Meta* m) : m_(m) {}

  static constexpr int kDirs = 3;
  static constexpr int kNames = 6;

  // A random directory: the root ("") or one of its subdirectories (the
  // same on both engines while their states agree: listings are sorted).
  std::string RandomDir(std::mt19937_64& rng) {
    const uint64_t r = rng();
    if (r % 4 == 0) return "";
    std::vector<Entry> entries;
    if (!m_->Readdir(Context::Root(), kRootIno, true, &entries).ok()) return "";
    std::vector<std::string> dirs;
    for (const Entry& e : entries)
      if (e.attr.IsDir()) dirs.push_back(e.name);
    if (dirs.empty()) return "";
    std::sort(dirs.begin(), dirs.end());
    return dirs[(r >> 8) % dirs.size()];
  }
  std::string RandomName(std::mt19937_64& rng) {
    int n = int(rng() % (kNames + kDirs));
    return n < kNames ? "n" + std::to_string(n) : "d" + std::to_string(n - kNames);
  }

  // Resolves a path ("" = root, "d1", "d1/n2", ...) to an inode (0 if absent).
  Ino Resolve(const std::string& path) {
    Ino cur = kRootIno;
    std::stringstream ss(path);
    std::string part;
    while (std::getline(ss, part, '/')) {
      if (part.empty()) continue;
      Ino next = 0;
      Attr a;
      if (!m_->Lookup(Context::Root(), cur, part, &next, &a).ok()) return 0;
      cur = next;
    }
    return cur;
  }

  Outcome Step(std::mt19937_64& rng, uint64_t* next_slice) {
    Context ctx = Context::Root();
    if (rng() % 5 == 0) {  // an unprivileged caller now and then: EACCES/EPERM paths
      ctx.uid = 1000;
      ctx.gid = 1000;
    }
    const std::string dir = RandomDir(rng);
    const std::string dir2 = RandomDir(rng), name2 = RandomName(rng);
    const Ino parent = Resolve(dir), parent2 = Resolve(dir2);
    // Mostly an entry that exists (the same one on both engines while their
    // states agree: listings are in name order), else any name.
    std::string name = RandomName(rng);
    const uint64_t pick = rng();
    if (parent != 0 && pick % 4 != 0) {
      std::vector<Entry> entries;
      if (m_->Readdir(Context::Root(), parent, false, &entries).ok() && !entries.empty()) {
        std::sort(entries.begin(), entries.end(), [](const Entry& x, const Entry& y) { return x.name < y.name; });
        name = entries[(pick >> 8) % entries.size()].name;
      }
    }
    const std::string path = dir.empty() ? name : dir + "/" + name;
    const Ino target = Resolve(path);
    Outcome out;
    Attr attr;
    Ino ino = 0;
    Status st;
    // Weighted: creations and writes often, so that most operations find
    // their target.
    static const int kOps[] = {0, 0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 7, 8, 8, 9, 10, 11, 12, 13, 14};
    const int op = kOps[rng() % (sizeof(kOps) / sizeof(kOps[0]))];
    const uint64_t r1 = rng(), r2 = rng(), r3 = rng();
    auto no_parent = [&] { return parent == 0 || (op == 3 && parent2 == 0); };
    switch (op) {
      case 0: {  // create: file, directory, symlink or fifo
        static const uint32_t kTypes[] = {S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO};
        const uint32_t type = kTypes[r1 % 4];
        const uint32_t perm = uint32_t(r2 % 01000) | ((r2 >> 20) % 3 == 0 ? S_ISGID : 0);
        out.op = "mknod " + path;
        if (no_parent()) return Skip(out);
        st = m_->Mknod(ctx, parent, name, type | perm, 022, 0, type == S_IFLNK ? "target/" + name2 : "", &ino,
                       &attr);
        break;
      }
      case 1:
        out.op = "unlink " + path;
        if (no_parent()) return Skip(out);
        st = m_->Unlink(ctx, parent, name);
        break;
      case 2:
        out.op = "rmdir " + path;
        if (no_parent()) return Skip(out);
        st = m_->Rmdir(ctx, parent, name);
        break;
      case 3: {
        const uint32_t flags = r1 % 4 == 0 ? kRenameNoReplace : r1 % 4 == 1 ? kRenameExchange : 0;
        out.op = "rename " + path + " -> " + (dir2.empty() ? name2 : dir2 + "/" + name2) + " flags " +
                 std::to_string(flags);
        if (no_parent()) return Skip(out);
        st = m_->Rename(ctx, parent, name, parent2, name2, flags, &ino, &attr);
        break;
      }
      case 4:
        out.op = "link " + path + " -> " + dir2 + "/" + name2;
        if (target == 0 || parent2 == 0) return Skip(out);
        st = m_->Link(ctx, target, parent2, name2, &attr);
        break;
      case 5: {
        uint32_t mask = 0;
        Attr in;
        if (r1 & 1) mask |= kSetMode, in.mode = uint32_t(r2 % 07777);
        if (r1 & 2) mask |= kSetUid, in.uid = uint32_t(r2 % 3) * 500;
        if (r1 & 4) mask |= kSetGid, in.gid = uint32_t(r3 % 3) * 500;
        if (r1 & 8) mask |= kSetMtime | kSetMtimeNow;
        out.op = "setattr " + path + " mask " + std::to_string(mask);
        if (target == 0) return Skip(out);
        st = m_->SetAttr(ctx, target, mask, in, &attr);
        break;
      }
      case 6: {
        const uint64_t length = r1 % 4 == 0 ? 0 : r2 % (96ull << 20);
        out.op = "truncate " + path + " " + std::to_string(length);
        if (target == 0) return Skip(out);
        st = m_->Truncate(ctx, target, length, true, &attr);
        break;
      }
      case 7: {
        static const int kModes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                     FALLOC_FL_ZERO_RANGE, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE};
        const int mode = kModes[r1 % 5];
        // A third of the requests ask for more than the volume holds (ENOSPC
        // after the checks a partial write would have made).
        const uint64_t off = r2 % (80ull << 20), len = 1 + r3 % ((r1 >> 8) % 3 == 0 ? (1ull << 40) : (24ull << 20));
        out.op = "fallocate " + path + " mode " + std::to_string(mode) + " " + std::to_string(off) + "+" +
                 std::to_string(len);
        if (target == 0) return Skip(out);
        st = m_->Fallocate(ctx, target, mode, off, len, &attr);
        break;
      }
      case 8:
      case 9: {  // a commit of one to three slices
        std::vector<SliceWrite> writes;
        const int n = 1 + int(r1 % 3);
        for (int i = 0; i < n; ++i) {
          SliceWrite w;
          w.chunk_index = uint32_t((r2 >> (8 * i)) % 2);
          const uint32_t len = 1 + uint32_t((r3 >> (10 * i)) % (8u << 20));
          w.slice = Slice{uint32_t((r2 >> (16 + 8 * i)) % (56u << 20)), ++*next_slice, len, 0, len};
          writes.push_back(w);
        }
        out.op = "write " + path + " " + std::to_string(n) + " slice(s)";
        if (target == 0) return Skip(out);
        st = m_->WriteSlices(ctx, target, writes, Timespec{1, 0}, &attr, nullptr);
        break;
      }
      case 10: {
        const int flags = r1 % 3 == 0 ? XATTR_CREATE : r1 % 3 == 1 ? XATTR_REPLACE : 0;
        const std::string xname = "user.x" + std::to_string(r2 % 3);
        out.op = "setxattr " + path + " " + xname + " flags " + std::to_string(flags);
        if (target == 0) return Skip(out);
        st = m_->SetXattr(ctx, target, xname, std::string(size_t(r3 % 40), 'v'), flags);
        break;
      }
      case 11: {
        const std::string xname = "user.x" + std::to_string(r2 % 3);
        out.op = "removexattr " + path + " " + xname;
        if (target == 0) return Skip(out);
        st = m_->RemoveXattr(ctx, target, xname);
        break;
      }
      case 12: {  // compaction of chunk 0 into one slice of the same visible bytes
        out.op = "compact " + path;
        if (target == 0) return Skip(out);
        std::vector<Slice> slices;
        st = m_->Read(target, 0, &slices);
        if (st.ok() && slices.size() >= 2) {
          std::vector<Slice> replacement;
          for (const Slice& s : chunk::BuildView(slices))
            if (s.id != 0) replacement.push_back(Slice{s.pos, ++*next_slice, s.len, 0, s.len});
          st = m_->CompactChunk(target, 0, slices, replacement);
        }
        break;
      }
      case 13: {
        out.op = "lookup " + path;
        if (no_parent()) return Skip(out);
        st = m_->Lookup(ctx, parent, name, &ino, &attr);
        break;
      }
      default: {
        std::vector<Entry> entries;
        out.op = "readdir " + dir;
        if (parent == 0) return Skip(out);
        st = m_->Readdir(ctx, parent, true, &entries);
        if (st.ok()) {
          for (const Entry& e : entries) out.attr += e.name + ":" + AttrText(e.attr) + ";";
          return Done(out, st);
        }
        break;
      }
    }
    if (st.ok() && attr.mode != 0) out.attr = AttrText(attr);
    return Done(out, st);
  }

  // The whole tree, by path, with everything but times and inode numbers.
  std::string Dump() {
    std::ostringstream o;
    std::map<Ino, std::string> seen;  // hard links: the first path of each inode
    std::function<void(Ino, const std::string&)> walk = [&](Ino dir, const std::string& prefix) {
      std::vector<Entry> entries;
      Status st = m_->Readdir(Context::Root(), dir, true, &entries);
      if (!st.ok()) {
        o << prefix << ": readdir " << st.ToString() << "\n";
        return;
      }
      std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
      for (const Entry& e : entries) {
        const std::string path = prefix + "/" + e.name;
        auto [it, fresh] = seen.try_emplace(e.ino, path);
        if (!fresh) {
          o << path << " = " << it->second << "\n";
          continue;
        }
        Attr a;
        Status gs = m_->GetAttr(Context::Root(), e.ino, &a);
        o << path << " " << (gs.ok() ? AttrText(a) : gs.ToString());
        if (a.IsSymlink()) {
          std::string t;
          (void)m_->ReadLink(Context::Root(), e.ino, &t);
          o << " -> " << t;
        }
        std::vector<std::string> xattrs;
        if (m_->ListXattr(Context::Root(), e.ino, &xattrs).ok()) {
          for (const auto& x : xattrs) {
            std::string v;
            (void)m_->GetXattr(Context::Root(), e.ino, x, &v);
            o << " " << x << "=" << v.size();
          }
        }
        if (a.IsFile()) {
          for (uint32_t c = 0; c < 3; ++c) {
            std::vector<Slice> slices;
            if (!m_->Read(e.ino, c, &slices).ok() || slices.empty()) continue;
            o << " c" << c << "[";
            for (const Slice& s : slices) o << s.pos << ":" << s.id << ":" << s.size << ":" << s.off << ":" << s.len << ",";
            o << "]";
          }
        }
        o << "\n";
        if (a.IsDir()) walk(e.ino, path);
      }
    };
    walk(kRootIno, "");
    StatFs fs;
    if (m_->StatFS(Context::Root(), &fs).ok())
      o << "statfs avail=" << fs.avail_space << " inodes=" << fs.used_inodes << "\n";
    return o.str();
  }

 private:
  static Outcome Skip(Outcome out) {
    out.code = -1;
    return out;
  }
  static Outcome Done(Outcome out, const Status& st) {
    out.code = st.code();
    if (!st.ok()) out.attr.clear();
    return out;
  }

  Meta* const m_;
};

class MetaDifferentialTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgres") {
      if (kv::testing::PgEnv("TESSERA_TEST_PG_URL").empty()) GTEST_SKIP() << kv::testing::kPgSkipMessage;
    } else if (GetParam() == "redis") {
      if (Env("TESSERA_TEST_REDIS_URL").empty())
        GTEST_SKIP() << "TESSERA_TEST_REDIS_URL not set (ctest unit_meta_redis sets it)";
    }
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-diff-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // A freshly formatted volume on the engine `kind`.
  std::unique_ptr<Meta> Fresh(const std::string& kind, int seed) {
    std::string url;
    if (kind == "memory") {
      url = "memory://diff-" + std::to_string(getpid()) + "-" + std::to_string(seed) + "-" + std::to_string(counter_++);
    } else if (kind == "sqlite3") {
      url = "sqlite3://" + dir_ + "/diff-" + std::to_string(seed) + ".db";
    } else if (kind == "postgres") {
      schemas_.push_back(std::make_unique<kv::testing::PgSchema>(kv::testing::PgEnv("TESSERA_TEST_PG_URL")));
      url = schemas_.back()->url();
    } else {
      url = Env("TESSERA_TEST_REDIS_URL");
      auto opts = redis::Options::Parse(url);
      EXPECT_TRUE(opts.ok());
      auto admin = redis::Client::Connect(*opts);
      EXPECT_TRUE(admin.ok()) << admin.status().ToString();
      if (!admin.ok()) return nullptr;
      EXPECT_TRUE((*admin)->Command({"FLUSHDB"}).ok());
    }
    auto m = Open(url);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return nullptr;
    Format f;
    f.name = "diff";
    f.uuid = NewUuid();
    f.capacity = 160ull << 20;  // small limits: ENOSPC paths are common
    f.inodes = 40;
    EXPECT_TRUE((*m)->Init(f, false).ok());
    SessionInfo s;
    s.mount_point = "/mnt/diff";
    EXPECT_TRUE((*m)->NewSession(s).ok());
    return std::move(*m);
  }

  // Runs `ops` operations of `seed` on the reference and the engine under
  // test side by side.
  void Run(int seed, int ops) {
    auto ref = Fresh("memory", seed);
    auto test = Fresh(GetParam(), seed);
    ASSERT_NE(ref, nullptr);
    ASSERT_NE(test, nullptr);
    Driver a(ref.get()), b(test.get());
    for (Meta* m : {ref.get(), test.get()}) {  // a tree to start from
      for (int d = 0; d < Driver::kDirs; ++d) {
        Ino ino = 0;
        Attr attr;
        ASSERT_TRUE(m->Mknod(Context::Root(), kRootIno, "d" + std::to_string(d), S_IFDIR | 0777, 0, 0, "", &ino, &attr)
                        .ok());
      }
    }
    std::mt19937_64 rng_a{uint64_t(seed)}, rng_b{uint64_t(seed)};
    uint64_t slice_a = 1u << 20, slice_b = 1u << 20;
    int skipped = 0, failed = 0;
    for (int i = 0; i < ops; ++i) {
      Outcome oa = a.Step(rng_a, &slice_a);
      Outcome ob = b.Step(rng_b, &slice_b);
      ASSERT_EQ(oa.op, ob.op) << "seed " << seed << " step " << i << ": the drivers diverged";
      ASSERT_EQ(oa.code, ob.code) << "seed " << seed << " step " << i << " " << oa.op << ": memory says "
                                  << (oa.code > 0 ? std::strerror(oa.code) : "OK") << ", " << GetParam() << " says "
                                  << (ob.code > 0 ? std::strerror(ob.code) : "OK");
      ASSERT_EQ(oa.attr, ob.attr) << "seed " << seed << " step " << i << " " << oa.op;
      if (!Env("TESSERA_TEST_DIFF_VERBOSE").empty()) std::printf("%d %s -> %d %s\n", i, oa.op.c_str(), oa.code, oa.attr.c_str());
      skipped += oa.code < 0;
      failed += oa.code > 0;
      if (i % 50 == 49 || i == ops - 1) {
        ASSERT_EQ(a.Dump(), b.Dump()) << "seed " << seed << " after step " << i << " " << oa.op;
        // Statistics written on the way (with Redis's lost replies: retried,
        // counted once).
        ASSERT_TRUE(test->FlushDirStats().ok()) << "seed " << seed << " step " << i;
      }
    }
    // The engine's own invariants hold: directory statistics and parent
    // records, usage counters, slices' holders.
    std::vector<std::string> problems;
    ASSERT_TRUE(test->Check(&problems).ok());
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    EXPECT_TRUE(problems.empty()) << "seed " << seed << ":\n" << all;
    // The sequence must mean something: most operations ran, many failed.
    EXPECT_LT(skipped, ops / 2) << "seed " << seed;
    EXPECT_GT(failed, ops / 20) << "seed " << seed;
    EXPECT_LT(failed, ops - ops / 5) << "seed " << seed;
  }

  std::string dir_;
  int counter_ = 0;
  std::vector<std::unique_ptr<kv::testing::PgSchema>> schemas_;
};

TEST_P(MetaDifferentialTest, SeededRandomOperations) {
  const int seeds = Env("TESSERA_TEST_QUICK").empty() ? 6 : 2;
  for (int seed = 1; seed <= seeds; ++seed) ASSERT_NO_FATAL_FAILURE(Run(seed, 600));
}

// Redis with replies lost after the server ran the call (TESSERA_REDIS_FAULTS):
// every resend must answer from the operation record, exactly as if the reply
// had arrived; nothing may run twice.
TEST_P(MetaDifferentialTest, RedisLostRepliesChangeNothing) {
  if (GetParam() != "redis") GTEST_SKIP() << "Redis only";
  struct Faults {
    Faults() { setenv("TESSERA_REDIS_FAULTS", "lost_reply=0.2,seed=11", 1); }
    ~Faults() { unsetenv("TESSERA_REDIS_FAULTS"); }
  } faults;
  for (int seed = 21; seed <= 23; ++seed) ASSERT_NO_FATAL_FAILURE(Run(seed, 400));
}

INSTANTIATE_TEST_SUITE_P(Engines, MetaDifferentialTest, ::testing::Values("sqlite3", "redis", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tessera::meta
