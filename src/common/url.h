// META-URL and bucket helpers.
#pragma once

#include <string>

namespace tessera {

// Replaces the password of "scheme://user:password@host/..." with "****" so
// the URL can be printed or logged.
std::string RedactUrl(const std::string& url);

// The scheme of "scheme://rest" ("" when there is none).
std::string UrlScheme(const std::string& url);

}  // namespace tessera
