#include "cli/cli_util.h"

#include <sys/stat.h>

#include <cstdio>

#include <fmt/format.h>

#include "common/url.h"

namespace tessera::cli {

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
  auto s = object::Open(object::StoreOptions{v.format.storage, v.format.bucket});
  if (!s.ok()) return s.status().With("cannot open object storage");
  v.store = std::move(*s);
  return v;
}

}  // namespace tessera::cli
