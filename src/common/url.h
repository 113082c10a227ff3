// META-URL and bucket helpers.
#pragma once

#include <string>

namespace tessera {

// Replaces the password of "scheme://user:password@host/..." and of a
// "password=" query parameter with "****" so the URL can be printed or logged.
// The userinfo is the authority (up to the first '/') up to its last '@', so
// a raw '@' or '?' in a password is masked too.
std::string RedactUrl(const std::string& url);

// Overwrites, in place, the passwords of every URL among the process's
// arguments (what RedactUrl masks) with '*', so `ps` does not show them (the
// parsed copies are kept).
void HidePasswordsInArgs(int argc, char** argv);

// The userinfo password of the URL as it is written there (not
// percent-decoded), "" if none: what RedactUrl masks in the userinfo.
std::string UrlPassword(const std::string& url);

// The scheme of "scheme://rest" ("" when there is none).
std::string UrlScheme(const std::string& url);

}  // namespace tessera
