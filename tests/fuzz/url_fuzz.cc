// META-URLs and the helpers that keep their secrets out of messages and `ps`:
// RedactUrl, HidePasswordsInArgs, UrlScheme (common/url.h), Redis URLs
// (redis::Options::Parse) and PostgreSQL URLs, with libpq's own parser
// (PQconninfoParse) as the judge of what the password is. kv::Open is called
// only where it touches neither disk nor network: URLs without a scheme or
// with an unknown one, sqlite3:// URLs it refuses, memory://, and postgres://
// URLs libpq cannot parse (refused before any connection).
// Invariants:
//   - HidePasswordsInArgs only overwrites characters with '*';
//   - a password libpq finds in the URL (userinfo or ?password=) is gone
//     from RedactUrl's output and from the argv HidePasswordsInArgs leaves;
//   - a Redis URL that parses: port in 1..65535, the display is the URL with
//     exactly the raw userinfo password masked, user and password are the
//     percent-decoded userinfo, and a URL rebuilt from the options parses to
//     the same options;
//   - kv::Open's error messages never hold the userinfo password.
#include <libpq-fe.h>
#include <stdlib.h>

#include <cctype>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "common/url.h"
#include "fuzz_util.h"
#include "kv/kv.h"
#include "meta/redis_client.h"

using namespace tessera;
namespace redis = tessera::meta::redis;

namespace {

int Hex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// RFC 3986 percent-decoding: "%HH" is a byte, any other '%' is itself.
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out.push_back(char(Hex(s[i + 1]) * 16 + Hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    const auto u = uint8_t(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

// The userinfo of a redis:// URL as Options::Parse reads it: the authority
// (up to the first '/', without the query) up to its last '@'.
struct UserInfo {
  size_t begin = 0, at = 0;                 // [begin, at) is the userinfo
  std::optional<size_t> colon;              // user:password separator
};
std::optional<UserInfo> RedisUserInfo(const std::string& url) {
  if (url.find("://") == std::string::npos) return std::nullopt;
  const size_t begin = url.find("://") + 3;
  size_t end = url.find_first_of("/?", begin);
  if (end == std::string::npos) end = url.size();
  const size_t at = url.rfind('@', end == 0 ? 0 : end - 1);
  if (at == std::string::npos || at < begin) return std::nullopt;
  UserInfo u{begin, at, std::nullopt};
  if (size_t c = url.find(':', begin); c < at) u.colon = c;
  return u;
}

// libpq's password for a postgres URL (nullopt: none, or not parseable).
std::optional<std::string> LibpqPassword(const std::string& url, bool* parsed) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (err) PQfreemem(err);
  *parsed = opts != nullptr;
  if (!opts) return std::nullopt;
  std::optional<std::string> out;
  for (PQconninfoOption* o = opts; o->keyword; ++o)
    if (std::strcmp(o->keyword, "password") == 0 && o->val) out = o->val;
  PQconninfoFree(opts);
  return out;
}

bool AllStars(std::string_view s) { return s.find_first_not_of('*') == std::string_view::npos; }

size_t Count(std::string_view hay, std::string_view needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// The message `message` gives for url must not hold the password at
// [begin, end) of it, when that is long enough to tell and not also a
// legitimate part of the URL elsewhere. Text of the message that stays when
// the password is starred out of the URL is the message's own (help such as
// "[USER[:PASSWORD]@]"), not a leak.
void CheckNoSecret(const std::string& url, size_t begin, size_t end,
                   const std::function<std::string(const std::string&)>& message) {
  const std::string secret = url.substr(begin, end - begin);
  if (secret.size() < 4 || Count(url, secret) != 1) return;
  const std::string msg = message(url);
  if (msg.find(secret) == std::string::npos) return;
  const std::string starred = url.substr(0, begin) + std::string(end - begin, '*') + url.substr(end);
  if (message(starred).find(secret) != std::string::npos) return;
  std::fprintf(stderr, "secret '%s' of '%s' in message: %s\n", secret.c_str(), url.c_str(), msg.c_str());
  FUZZ_CHECK(msg.find(secret) == std::string::npos);
}

std::string RedisMessage(const std::string& url) {
  Result<redis::Options> o = redis::Options::Parse(url);
  return o.ok() ? "" : o.status().message();
}

// kv::Open's message, but never for a URL on which it would connect or
// create a file.
std::string KvMessage(const std::string& url) {
  const std::string scheme = UrlScheme(url);
  if (scheme == "postgres" || scheme == "postgresql") {
    bool parsed = false;
    (void)LibpqPassword(url, &parsed);
    if (parsed) return "";
  }
  if (scheme == "sqlite3") {
    const std::string rest = url.substr(url.find("://") + 3);
    if (!rest.empty() && rest[0] != ':') return "";
  }
  Result<std::unique_ptr<kv::Engine>> e = kv::Open(url);
  return e.ok() ? "" : e.status().message();
}

void CheckRedis(const std::string& url, const std::string& hidden) {
  Result<redis::Options> o = redis::Options::Parse(url);
  if (!o.ok()) {
    FUZZ_CHECK(o.status().code() == EINVAL);
    if (auto u = RedisUserInfo(url); u && u->colon) CheckNoSecret(url, *u->colon + 1, u->at, RedisMessage);
    return;
  }
  FUZZ_CHECK(o->port >= 1 && o->port <= 65535);
  FUZZ_CHECK(o->db >= 0);
  if (!o->socket.empty()) {
    FUZZ_CHECK(o->socket[0] == '/');
    FUZZ_CHECK(o->display == url);
    return;
  }
  std::optional<UserInfo> u = UrlScheme(url) == "redis" ? RedisUserInfo(url) : std::nullopt;
  if (u && u->colon) {
    const size_t s = *u->colon + 1, e = u->at;
    FUZZ_CHECK(o->user == PercentDecode(std::string_view(url).substr(u->begin, *u->colon - u->begin)));
    FUZZ_CHECK(o->password == PercentDecode(std::string_view(url).substr(s, e - s)));
    FUZZ_CHECK(o->display == url.substr(0, s) + "****" + url.substr(e));
    if (!hidden.empty()) FUZZ_CHECK(hidden == url.substr(0, s) + std::string(e - s, '*') + url.substr(e));
  } else {
    if (u) FUZZ_CHECK(o->user == PercentDecode(std::string_view(url).substr(u->begin, u->at - u->begin)));
    FUZZ_CHECK(o->password.empty());
    FUZZ_CHECK(o->display == url);
  }
  // Rebuilt from the options, the URL means the same.
  std::string again = "redis://";
  if (!o->user.empty() || !o->password.empty())
    again += PercentEncode(o->user) + (o->password.empty() ? "" : ":" + PercentEncode(o->password)) + "@";
  again += "[" + o->host + "]:" + std::to_string(o->port) + "/" + std::to_string(o->db);
  Result<redis::Options> p = redis::Options::Parse(again);
  if (!p.ok()) std::fprintf(stderr, "%s -> %s: %s\n", url.c_str(), again.c_str(), p.status().ToString().c_str());
  FUZZ_CHECK(p.ok());
  if (p->host != o->host || p->port != o->port)
    std::fprintf(stderr, "%s -> %s: host '%s' port %d, then '%s' %d\n", url.c_str(), again.c_str(), o->host.c_str(),
                 o->port, p->host.c_str(), p->port);
  FUZZ_CHECK(p->host == o->host && p->port == o->port && p->db == o->db);
  FUZZ_CHECK(p->user == o->user && p->password == o->password && p->socket.empty());
}

void CheckPostgres(const std::string& url, const std::string& redacted, const std::string& hidden) {
  bool parsed = false;
  const std::optional<std::string> password = LibpqPassword(url, &parsed);
  if (parsed) {
    if (password && !password->empty()) {
      bool reparsed = false;
      const std::optional<std::string> after = LibpqPassword(redacted, &reparsed);
      if (reparsed && after && !AllStars(*after))
        std::fprintf(stderr, "'%s' redacted as '%s' still has password '%s'\n", url.c_str(), redacted.c_str(),
                     after->c_str());
      if (reparsed) FUZZ_CHECK(!after || AllStars(*after));
      if (!hidden.empty()) {
        const std::optional<std::string> left = LibpqPassword(hidden, &reparsed);
        if (reparsed) FUZZ_CHECK(!left || AllStars(*left));
      }
    }
    return;  // kv::Open would connect
  }
  // libpq's own notion of the userinfo: up to the first '@', unless a '/'
  // comes first.
  const size_t begin = url.find("://") + 3;
  const size_t stop = url.find_first_of("@/", begin);
  Result<std::unique_ptr<kv::Engine>> e = kv::Open(url);
  FUZZ_CHECK(!e.ok() && e.status().code() == EINVAL);
  if (stop != std::string::npos && url[stop] == '@') {
    const size_t colon = url.find(':', begin);
    if (colon < stop) CheckNoSecret(url, colon + 1, stop, KvMessage);
  }
}

void CheckKvOpen(const std::string& url) {
  const std::string scheme = UrlScheme(url);
  const size_t sep = url.find("://");
  if (scheme == "postgres" || scheme == "postgresql") return;  // CheckPostgres
  if (scheme == "sqlite3") {
    const std::string rest = url.substr(sep + 3);
    if (!rest.empty() && rest[0] != ':') return;  // would create the file
  }
  Result<std::unique_ptr<kv::Engine>> e = kv::Open(url);
  if (scheme == "memory" && sep != std::string::npos) {
    FUZZ_CHECK(e.ok());
    return;
  }
  FUZZ_CHECK(!e.ok() && e.status().code() == EINVAL);
  if (scheme == "sqlite3") return;  // a path: no credentials to keep secret
  if (auto u = RedisUserInfo(url); u && u->colon) CheckNoSecret(url, *u->colon + 1, u->at, KvMessage);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* env : {"TESSERA_REDIS_FAULTS", "META_PASSWORD", "REDIS_PASSWORD", "PGPASSWORD", "PGSERVICE",
                          "PGSERVICEFILE", "PGSYSCONFDIR", "PGPASSFILE"})
    unsetenv(env);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string url(reinterpret_cast<const char*>(data), size);
  const size_t sep = url.find("://");
  FUZZ_CHECK(UrlScheme(url) == (sep == std::string::npos ? "" : url.substr(0, sep)));

  const std::string redacted = RedactUrl(url);
  if (sep == std::string::npos) FUZZ_CHECK(redacted == url);

  // argv cannot hold a NUL: only NUL-free URLs are checked in argv.
  std::string hidden;
  if (url.find('\0') == std::string::npos) {
    std::string buf = url;
    char prog[] = "tessera";
    char* argv[] = {prog, buf.data(), nullptr};
    HidePasswordsInArgs(2, argv);
    FUZZ_CHECK(buf.size() == url.size());
    for (size_t i = 0; i < url.size(); ++i) FUZZ_CHECK(buf[i] == url[i] || buf[i] == '*');
    // Which characters: CheckRedis and CheckPostgres (the password is gone).
    hidden = buf;
  }

  CheckRedis(url, hidden);
  // libpq reads C strings: a NUL would make it judge another URL.
  if ((url.starts_with("postgres://") || url.starts_with("postgresql://")) && url.find('\0') == std::string::npos)
    CheckPostgres(url, redacted, hidden);
  CheckKvOpen(url);
  return 0;
}
