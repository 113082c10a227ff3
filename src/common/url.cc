#include "common/url.h"

#include <string_view>

namespace tessera {

namespace {

// Replaces the value of every "password=" query parameter with "****" (libpq
// URIs accept the password there too).
std::string RedactPasswordParams(std::string url) {
  const size_t query = url.find('?');
  if (query == std::string::npos) return url;
  for (size_t pos = query; pos < url.size();) {
    const size_t name = pos + 1;
    size_t end = url.find('&', name);
    if (end == std::string::npos) end = url.size();
    constexpr std::string_view kKey = "password=";
    if (url.compare(name, kKey.size(), kKey) == 0) {
      const size_t value = name + kKey.size();
      url.replace(value, end - value, "****");
      end = value + 4;
    }
    pos = end;
  }
  return url;
}

}  // namespace

std::string RedactUrl(const std::string& url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  const std::string redacted = RedactPasswordParams(url);
  size_t auth_start = scheme_end + 3;
  size_t at = redacted.find('@', auth_start);
  size_t slash = redacted.find_first_of("/?", auth_start);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return redacted;
  size_t colon = redacted.find(':', auth_start);
  if (colon == std::string::npos || colon > at) return redacted;
  return redacted.substr(0, colon + 1) + "****" + redacted.substr(at);
}

void HidePasswordsInArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const size_t scheme_end = arg.find("://");
    if (scheme_end == std::string_view::npos) continue;
    const size_t auth = scheme_end + 3;
    const size_t at = arg.find('@', auth);
    const size_t slash = arg.find_first_of("/?", auth);
    if (at == std::string_view::npos || (slash != std::string_view::npos && slash < at)) continue;
    const size_t colon = arg.find(':', auth);
    if (colon == std::string_view::npos || colon > at) continue;
    for (size_t p = colon + 1; p < at; ++p) argv[i][p] = '*';
  }
}

std::string UrlScheme(const std::string& url) {
  auto pos = url.find("://");
  return pos == std::string::npos ? "" : url.substr(0, pos);
}

}  // namespace tessera
