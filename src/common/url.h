// META-URL and bucket helpers.
#pragma once

#include <string>

namespace tessera {

// Replaces the password of "scheme://user:password@host/..." and of a
// "password=" query parameter with "****" so the URL can be printed or logged.
std::string RedactUrl(const std::string& url);

// Overwrites, in place, the password of every URL among the process's
// arguments with '*', so `ps` does not show it (the parsed copies are kept).
void HidePasswordsInArgs(int argc, char** argv);

// The scheme of "scheme://rest" ("" when there is none).
std::string UrlScheme(const std::string& url);

}  // namespace tessera
