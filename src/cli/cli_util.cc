#include "cli/cli_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

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

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera: %s\n", msg.c_str());
  return 1;
}

Result<std::unique_ptr<meta::Meta>> OpenMeta(const std::string& url, bool must_exist) {
  if (must_exist && UrlScheme(url) == "sqlite3") {
    std::string path = url.substr(std::string("sqlite3://").size());
    auto q = path.find('?');
    if (q != std::string::npos) path.resize(q);
    struct stat st;
    if (!path.empty() && stat(path.c_str(), &st) != 0)
      return Status::Err(ENOENT, fmt::format("no volume at {}: run 'tessera format' first", RedactUrl(url)));
  }
  auto m = meta::Open(url);
  if (!m.ok()) return m.status().With("cannot open metadata engine " + RedactUrl(url));
  return m;
}

Result<Volume> OpenVolume(const std::string& meta_url) {
  Volume v;
  ASSIGN_OR_RETURN(v.meta, OpenMeta(meta_url, /*must_exist=*/true));
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
