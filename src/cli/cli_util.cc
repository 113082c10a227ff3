#include "cli/cli_util.h"

#include <sys/stat.h>

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

}  // namespace tessera::cli
