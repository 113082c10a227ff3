// META-URL and bucket helpers.
#pragma once

#include <string>
#include <vector>

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

// What a URL parser may take for the userinfo password, as written in the
// URL (not percent-decoded), to scrub from messages that quote the URL or the
// password: up to the authority's first '@' after the password's ':' (libpq)
// if there is another '@', then up to its last '@' (Redis, and what
// RedactUrl masks). Empty if the URL has no password.
std::vector<std::string> UrlPasswords(const std::string& url);

// The scheme of "scheme://rest" ("" when there is none).
std::string UrlScheme(const std::string& url);

}  // namespace tessera
