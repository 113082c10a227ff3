#include "cli/cli_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <thread>
#include <cstdio>
#include <deque>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/url.h"

namespace tessera::cli {

object::StoreOptions MakeStoreOptions(const std::string& storage, const std::string& bucket,
                                      const StoreFlags* flags, const std::string& region) {
  object::StoreOptions so;
  so.storage = storage;
  so.bucket = bucket;
  so.region = region;
  if (flags) {
    so.access_key = flags->access_key;
    so.secret_key = flags->secret_key;
    if (!flags->region.empty()) so.region = flags->region;
    so.get_timeout_sec = flags->get_timeout_sec;
    so.put_timeout_sec = flags->put_timeout_sec;
    so.io_retries = flags->io_retries;
  }
  return so;
}

Status CheckBucket(const Volume& v) {
  Status st;
  if (v.format.storage == "file") {
    struct stat sb;
    if (::stat(v.format.bucket.c_str(), &sb) != 0) {
      st = Status::Err(errno, fmt::format("{}: {}", v.format.bucket, std::strerror(errno)));
    } else if (!S_ISDIR(sb.st_mode)) {
      st = Status::Err(ENOTDIR, v.format.bucket + ": not a directory");
    }
  }
  if (st.ok()) {
    auto head = v.store->Head("tessera_check_" + meta::NewUuid());
    if (!head.ok() && !head.status().not_found()) st = head.status();
  }
  if (st.ok()) return st;
  return Status::Err(st.code(), fmt::format("object storage {} is not usable: {}", v.store->Describe(), st.ToString()));
}

Result<size_t> ListLiveSessions(meta::Meta* m) {
  (void)m->CleanStaleSessions(meta::kSessionTimeoutSec);
  auto sessions = m->ListSessions();
  if (!sessions.ok()) return sessions.status().With("listing the sessions");
  for (const auto& s : *sessions)
    std::fprintf(stderr, "tessera: mounted: session %llu on %s (pid %u) at %s\n", (unsigned long long)s.sid,
                 s.host.c_str(), s.pid, s.mount_point.c_str());
  return sessions->size();
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera: %s\n", msg.c_str());
  return 1;
}

Result<std::unique_ptr<meta::Meta>> OpenMeta(const std::string& url, bool must_exist,
                                             const meta::OpenOptions& options) {
  if (must_exist && UrlScheme(url) == "sqlite3") {
    std::string path = url.substr(std::string("sqlite3://").size());
    auto q = path.find('?');
    if (q != std::string::npos) path.resize(q);
    struct stat st;
    if (!path.empty() && stat(path.c_str(), &st) != 0)
      return Status::Err(ENOENT, fmt::format("no volume at {}: run 'tessera format' first", RedactUrl(url)));
  }
  auto m = meta::Open(url, options);
  if (!m.ok()) return m.status().With("cannot open metadata engine " + RedactUrl(url));
  return m;
}

Result<Volume> OpenVolume(const std::string& meta_url, const meta::OpenOptions& options) {
  Volume v;
  ASSIGN_OR_RETURN(v.meta, OpenMeta(meta_url, /*must_exist=*/true, options));
  auto f = v.meta->Load();
  if (!f.ok()) {
    if (f.status().not_found())
      return Status::Err(ENOENT, fmt::format("no volume at {}: run 'tessera format' first", RedactUrl(meta_url)));
    return f.status().With(RedactUrl(meta_url));
  }
  v.format = *f;
  // s3 credentials come from the environment (AWS_ACCESS_KEY_ID, ...): the
  // settings never hold the secret.
  auto s = object::Open(MakeStoreOptions(v.format.storage, v.format.bucket, nullptr, v.format.region));
  if (!s.ok()) return s.status().With("cannot open object storage");
  v.store = std::move(*s);
  return v;
}

Status WalkFiles(meta::Meta* m, const std::string& path, meta::Ino root, const FileVisitor& fn) {
  const meta::Context ctx = meta::Context::Root();
  meta::Attr attr;
  RETURN_IF_ERROR(m->GetAttr(ctx, root, &attr));
  if (!attr.IsDir()) return attr.IsFile() ? fn(path, root, attr) : Status::OK();
  std::deque<std::pair<std::string, meta::Ino>> dirs{{path == "/" ? "" : path, root}};
  while (!dirs.empty()) {
    auto [dir, dino] = std::move(dirs.front());
    dirs.pop_front();
    std::string after;
    for (bool more = true; more;) {
      std::vector<meta::Entry> page;
      RETURN_IF_ERROR(m->ReaddirPage(ctx, dino, true, after, 1000, &page, &more));
      if (page.empty()) break;
      after = page.back().name;
      for (auto& e : page) {
        std::string p = dir + "/" + e.name;
        if (e.attr.IsDir()) dirs.emplace_back(std::move(p), e.ino);
        else if (e.attr.IsFile()) RETURN_IF_ERROR(fn(p, e.ino, e.attr));
      }
    }
  }
  return Status::OK();
}

Result<meta::Ino> ResolvePath(meta::Meta* m, const std::string& path) {
  meta::Ino ino = meta::kRootIno;
  size_t pos = 0;
  while (pos < path.size()) {
    const size_t next = std::min(path.find('/', pos), path.size());
    const std::string name = path.substr(pos, next - pos);
    pos = next + 1;
    if (name.empty() || name == ".") continue;
    meta::Attr attr;
    meta::Ino child = 0;
    RETURN_IF_ERROR(m->Lookup(meta::Context::Root(), ino, name, &child, &attr).With(path));
    ino = child;
  }
  return ino;
}

Result<int64_t> ParseDuration(const std::string& s) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  const std::string unit = s.substr(digits);
  int64_t scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
  if (digits == 0 || digits > 9 || scale == 0)
    return Status::Err(EINVAL, "'" + s + "' is not a duration (examples: 90, 90s, 30m, 1h, 2d; 0 = off)");
  return std::stoll(s.substr(0, digits)) * scale;
}

std::string HumanSize(uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.1f} GiB", double(n) / double(1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(n) / double(1ull << 20));
  if (n >= (1ull << 10)) return fmt::format("{:.1f} KiB", double(n) / double(1ull << 10));
  return fmt::format("{} bytes", n);
}

bool Progress::IsTty() { return isatty(STDERR_FILENO) != 0; }

void Progress::Show(const std::string& text, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (last_ == std::chrono::steady_clock::time_point{}) last_ = now;  // the first call starts the clock
  const auto every = tty_ ? std::chrono::seconds(1) : std::chrono::seconds(10);
  // Forced (a final count): only where earlier lines were shown, so that a
  // quick command prints nothing.
  if (force ? !printed_ : now - last_ < every) return;
  last_ = now;
  printed_ = true;
  std::fprintf(stderr, tty_ ? "\r%s   " : "tessera: %s\n", text.c_str());
  std::fflush(stderr);
}

void Progress::Done() {
  if (tty_ && printed_) std::fprintf(stderr, "\n");
  printed_ = false;
}

}  // namespace tessera::cli
