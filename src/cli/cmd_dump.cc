// tessera dump / tessera load: the metadata of a volume to and from a JSON
// lines file (meta/dump.h, docs/format.md section 5), for backups and for
// moving a volume between engines. Both stream in bounded memory, show
// progress, and stop cleanly on Ctrl-C: an interrupted dump leaves no file,
// an interrupted load leaves the engine empty again.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/url.h"
#include "meta/dump.h"
#include "object/object_store.h"
#include "vfs/meta_backup.h"

namespace tessera::cli {

namespace {

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

// Ctrl-C (and SIGTERM) ask the command to stop at the next record.
void CatchInterrupts() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Counts(const meta::DumpStats& s, double secs) {
  return fmt::format("{} inodes, {} entries, {} slices ({:.0f} inodes/s)", s.inodes, s.entries, s.slices,
                     secs > 0 ? double(s.inodes) / secs : 0.0);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int DumpMeta(const DumpArgs& o) {
  auto m = OpenMeta(o.meta_url, true);
  if (!m.ok()) return Fail(m.status().message().empty() ? m.status().ToString() : m.status().message());
  const bool gzip = o.gzip || EndsWith(o.file, ".gz");
  auto out = meta::DumpFile::Create(o.file, gzip);
  if (!out.ok()) return Fail(out.status().ToString());
  CatchInterrupts();
  Progress progress;
  auto t0 = std::chrono::steady_clock::now();
  meta::DumpOptions opts;
  opts.subdir = o.subdir;
  opts.cancel = &g_interrupted;
  opts.progress = [&](const meta::DumpStats& s) { progress.Show("dumped " + Counts(s, Since(t0))); };
  meta::DumpStats stats;
  Status st = meta::Dump(m->get(), opts, [&](std::string_view line) { return (*out)->Write(line); }, &stats);
  progress.Done();
  if (st.ok()) st = (*out)->Close();
  if (!st.ok()) {
    if (st.code() == ECANCELED) return Fail("interrupted: no dump was written");
    return Fail(st.With("dumping " + RedactUrl(o.meta_url)).ToString() + (o.file == "-" ? "" : "; no dump was written"));
  }
  std::fprintf(stderr, "dumped %s to %s in %.1f s\n", Counts(stats, Since(t0)).c_str(),
               o.file == "-" ? "stdout" : o.file.c_str(), Since(t0));
  return 0;
}

namespace {

// Copies backup `key` ("-": the newest) of a bucket into a temporary file.
Result<std::string> FetchBackup(const LoadArgs& o, std::string* key) {
  auto store = object::Open(MakeStoreOptions(o.storage, o.from_bucket, &o.store));
  if (!store.ok()) return store.status().With("cannot open the bucket " + RedactUrl(o.from_bucket));
  *key = o.file;
  if (*key == "-") {
    std::vector<object::ObjectInfo> all;
    RETURN_IF_ERROR(vfs::ListBackups(store->get(), &all).With("listing the backups"));
    if (all.empty())
      return Status::Err(ENOENT, "no metadata backup (" + std::string(vfs::kBackupPrefix) + "*) in " +
                                     (*store)->Describe());
    *key = all.back().key;
  }
  auto body = (*store)->Get(*key);
  if (!body.ok()) return body.status().With("reading " + *key + " from " + (*store)->Describe());
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir != nullptr ? tmpdir : "/tmp") + "/tessera-load-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) return Status::Err(errno, "creating a temporary file in " + path);
  size_t done = 0;
  while (done < body->size()) {
    ssize_t n = ::write(fd, body->data() + done, body->size() - done);
    if (n < 0) {
      int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return Status::Err(e, "writing " + path);
    }
    done += size_t(n);
  }
  ::close(fd);
  return path;
}

}  // namespace

int LoadMeta(const LoadArgs& o) {
  std::string source = o.file, fetched;
  if (!o.from_bucket.empty()) {
    std::string key;
    auto path = FetchBackup(o, &key);
    if (!path.ok()) return Fail(path.status().ToString());
    fetched = source = *path;
    std::fprintf(stderr, "loading the backup %s\n", key.c_str());
  }
  struct Unlink {
    std::string path;
    ~Unlink() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } cleanup{fetched};
  auto in = meta::DumpFile::Open(source);
  if (!in.ok()) return Fail(in.status().ToString());
  auto m = OpenMeta(o.meta_url, false);
  if (!m.ok()) return Fail(m.status().message().empty() ? m.status().ToString() : m.status().message());
  CatchInterrupts();
  Progress progress;
  auto t0 = std::chrono::steady_clock::now();
  meta::LoadOptions opts;
  opts.cancel = &g_interrupted;
  opts.progress = [&](const meta::DumpStats& s) { progress.Show("loaded " + Counts(s, Since(t0))); };
  meta::DumpStats stats;
  meta::Format format;
  Status st = meta::Load(m->get(), opts, [&](std::string* line) { return (*in)->Read(line); }, &stats, &format);
  progress.Done();
  if (!st.ok()) {
    if (st.code() == ECANCELED) return Fail("interrupted: nothing was loaded");
    return Fail(st.With("loading into " + RedactUrl(o.meta_url)).ToString());
  }
  std::fprintf(stderr, "loaded %s in %.1f s: volume '%s' (%s), data in %s\n", Counts(stats, Since(t0)).c_str(),
               Since(t0), format.name.c_str(), format.uuid.c_str(), format.bucket.c_str());
  return 0;
}

}  // namespace tessera::cli
