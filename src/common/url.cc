#include "common/url.h"

namespace tessera {

std::string RedactUrl(const std::string& url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  size_t auth_start = scheme_end + 3;
  size_t at = url.find('@', auth_start);
  size_t slash = url.find('/', auth_start);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  size_t colon = url.find(':', auth_start);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "****" + url.substr(at);
}

std::string UrlScheme(const std::string& url) {
  auto pos = url.find("://");
  return pos == std::string::npos ? "" : url.substr(0, pos);
}

}  // namespace tessera
