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

}  // namespace tessera::cli
