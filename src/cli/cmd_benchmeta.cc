// bench-meta: the metadata engine alone, no FUSE and no object storage. N
// threads (one engine client shared by all, as the FUSE threads of a mount
// share it) each work in their own directory under a fresh scratch directory
// of the volume and run every phase together: mkdir, create, getattr,
// lookup, setattr, write (a slice commit), read (a chunk's slice list),
// readdir (a page of 100 entries with attributes), rename, link, unlink,
// rmdir. Each phase reports operations per second over its wall time, the
// mean latency, and (for engines that count them) requests per operation.
// The scratch directory is removed at the end (its fake slices, which have
// no objects, are queued for deletion like any others).
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace tessera::cli {

namespace {

using meta::Attr;
using meta::Context;
using meta::Ino;

struct PhaseResult {
  std::string name;
  uint64_t ops = 0;
  double seconds = 0;
  double requests_per_op = -1;
};

uint64_t TotalRequests(meta::Meta* m) {
  uint64_t n = 0;
  for (auto& [op, count] : m->RequestStats()) n += count;
  return n;
}

}  // namespace

int BenchMeta(const BenchMetaOptions& o) {
  auto opened = OpenMeta(o.meta_url, /*must_exist=*/true);
  if (!opened.ok()) return Fail(opened.status().ToString());
  std::unique_ptr<meta::Meta> m = std::move(*opened);
  auto format = m->Load();
  if (!format.ok()) return Fail(format.status().ToString());
  meta::SessionInfo session;
  session.mount_point = "(bench-meta)";
  session.version = TESSERA_VERSION;
  if (Status st = m->NewSession(session); !st.ok()) return Fail(st.ToString());

  const Context root = Context::Root();
  const std::string scratch = fmt::format(".bench-meta-{}", getpid());
  Ino top = 0;
  Attr attr;
  if (Status st = m->Mknod(root, meta::kRootIno, scratch, S_IFDIR | 0755, 0, 0, "", &top, &attr); !st.ok())
    return Fail("cannot create the scratch directory: " + st.ToString());

  const int threads = o.threads;
  const uint64_t n = o.count;
  std::vector<Ino> dirs(size_t(threads), 0);
  std::vector<std::vector<Ino>> files(size_t(threads), std::vector<Ino>(n, 0));
  std::vector<std::vector<Ino>> subdirs(size_t(threads), std::vector<Ino>(n, 0));
  for (int t = 0; t < threads; ++t) {
    if (Status st = m->Mknod(root, top, "t" + std::to_string(t), S_IFDIR | 0755, 0, 0, "", &dirs[size_t(t)], &attr);
        !st.ok())
      return Fail(st.ToString());
  }

  std::atomic<bool> failed{false};
  std::string first_error;
  std::mutex error_mu;
  std::vector<PhaseResult> results;
  // Runs op(thread, i) for i in [0, count) on every thread at once.
  auto phase = [&](const std::string& name, uint64_t count, const std::function<Status(int, uint64_t)>& op) {
    if (failed) return;
    uint64_t before = TotalRequests(m.get());
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (uint64_t i = 0; i < count && !failed; ++i) {
          Status st = op(t, i);
          if (!st.ok()) {
            std::lock_guard<std::mutex> g(error_mu);
            if (!failed.exchange(true)) first_error = name + ": " + st.ToString();
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    PhaseResult r{name, count * uint64_t(threads), secs, -1};
    uint64_t after = TotalRequests(m.get());
    if (after > before) r.requests_per_op = double(after - before) / double(r.ops);
    results.push_back(r);
    std::fprintf(stderr, "  %-8s %9.0f ops/s\n", name.c_str(), double(r.ops) / secs);
  };
  auto name = [](const char* prefix, uint64_t i) { return prefix + std::to_string(i); };

  std::fprintf(stderr, "bench-meta: %s, %d thread(s), %llu operations per thread and phase\n",
               m->Name().c_str(), threads, (unsigned long long)n);
  phase("mkdir", n, [&](int t, uint64_t i) {
    Attr a;
    return m->Mknod(root, dirs[size_t(t)], name("d", i), S_IFDIR | 0755, 0, 0, "", &subdirs[size_t(t)][i], &a);
  });
  phase("create", n, [&](int t, uint64_t i) {
    Attr a;
    return m->Mknod(root, dirs[size_t(t)], name("f", i), S_IFREG | 0644, 0, 0, "", &files[size_t(t)][i], &a);
  });
  phase("getattr", n, [&](int t, uint64_t i) {
    Attr a;
    return m->GetAttr(root, files[size_t(t)][i], &a);
  });
  phase("lookup", n, [&](int t, uint64_t i) {
    Attr a;
    Ino ino = 0;
    return m->Lookup(root, dirs[size_t(t)], name("f", i), &ino, &a);
  });
  phase("setattr", n, [&](int t, uint64_t i) {
    Attr in, out;
    in.mode = 0600;
    return m->SetAttr(root, files[size_t(t)][i], meta::kSetMode, in, &out);
  });
  phase("write", n, [&](int t, uint64_t i) {
    auto id = m->NewSliceId();
    if (!id.ok()) return id.status();
    Attr a;
    return m->Write(root, files[size_t(t)][i], 0, chunk::Slice{0, *id, 4096, 0, 4096}, meta::Now(), &a);
  });
  phase("read", n, [&](int t, uint64_t i) {
    std::vector<chunk::Slice> slices;
    return m->Read(files[size_t(t)][i], 0, &slices);
  });
  phase("readdir", std::max<uint64_t>(1, n / 10), [&](int t, uint64_t) {
    std::vector<meta::Entry> entries;
    bool more = false;
    return m->ReaddirPage(root, dirs[size_t(t)], true, "", 100, &entries, &more);
  });
  phase("rename", n, [&](int t, uint64_t i) {
    Attr a;
    Ino ino = 0;
    return m->Rename(root, dirs[size_t(t)], name("f", i), dirs[size_t(t)], name("r", i), 0, &ino, &a);
  });
  phase("link", n, [&](int t, uint64_t i) {
    Attr a;
    return m->Link(root, files[size_t(t)][i], dirs[size_t(t)], name("l", i), &a);
  });
  // Removal as the kernel does it: it holds a reference on what it removes,
  // dropped (forget) afterwards; the forget is not counted in unlink.
  phase("unlink", n, [&](int t, uint64_t i) {
    m->AddRef(files[size_t(t)][i]);
    Status st = m->Unlink(root, dirs[size_t(t)], name("l", i));
    if (st.ok()) st = m->Unlink(root, dirs[size_t(t)], name("r", i));
    return st;
  });
  if (!results.empty() && results.back().name == "unlink") {
    results.back().ops *= 2;  // two names per iteration
    if (results.back().requests_per_op > 0) results.back().requests_per_op /= 2;
  }
  for (int t = 0; t < threads && !failed; ++t)
    for (uint64_t i = 0; i < n; ++i) (void)m->Forget(files[size_t(t)][i], 1);
  for (int t = 0; t < threads; ++t)
    for (uint64_t i = 0; i < n; ++i) m->AddRef(subdirs[size_t(t)][i]);
  phase("rmdir", n, [&](int t, uint64_t i) { return m->Rmdir(root, dirs[size_t(t)], name("d", i)); });
  for (int t = 0; t < threads; ++t)
    for (uint64_t i = 0; i < n; ++i) (void)m->Forget(subdirs[size_t(t)][i], 1);

  // Clean up whatever is left (also after a failure).
  for (int t = 0; t < threads; ++t) {
    std::vector<meta::Entry> entries;
    if (m->Readdir(root, dirs[size_t(t)], false, &entries).ok()) {
      for (auto& e : entries) {
        if (e.attr.IsDir()) (void)m->Rmdir(root, dirs[size_t(t)], e.name);
        else (void)m->Unlink(root, dirs[size_t(t)], e.name);
      }
    }
    (void)m->Rmdir(root, top, "t" + std::to_string(t));
  }
  (void)m->Rmdir(root, meta::kRootIno, scratch);
  (void)m->CloseSession();
  if (failed) return Fail(first_error);

  std::printf("| operation | ops | ops/s | mean latency (us) | requests/op |\n|---|---:|---:|---:|---:|\n");
  for (const auto& r : results) {
    double qps = double(r.ops) / r.seconds;
    std::string req = r.requests_per_op < 0 ? "-" : fmt::format("{:.2f}", r.requests_per_op);
    std::printf("| %s | %llu | %.0f | %.1f | %s |\n", r.name.c_str(), (unsigned long long)r.ops, qps,
                r.seconds * 1e6 * threads / double(r.ops), req.c_str());
  }
  return 0;
}

}  // namespace tessera::cli
