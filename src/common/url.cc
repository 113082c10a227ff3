#include "common/url.h"

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera {

namespace {

constexpr size_t npos = std::string_view::npos;

// The parts of "scheme://[user[:password]@]host..." that hold secrets. The
// authority runs from "://" to the first '/' ('?' does not end it: libpq
// reads "postgres://u:p?x@h/db" as password "p?x"), its userinfo to the
// authority's last '@' (redis::Options::Parse takes a raw '@' in a password).
// So the span covers whatever libpq or the Redis client reads as the
// password, sometimes a little more.
struct Secrets {
  size_t host = npos;                     // first byte after the userinfo
  size_t password = npos, password_end = npos;  // [password, password_end) in the URL, raw
};

std::optional<Secrets> Split(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == npos) return std::nullopt;
  const size_t begin = sep + 3;
  const size_t slash = url.find('/', begin);
  const std::string_view authority = url.substr(begin, slash == npos ? npos : slash - begin);
  Secrets s;
  const size_t at = authority.rfind('@');
  if (at == npos) {
    s.host = begin;
    return s;
  }
  s.host = begin + at + 1;
  if (const size_t colon = authority.find(':'); colon < at) {
    s.password = begin + colon + 1;
    s.password_end = begin + at;
  }
  return s;
}

// Every secret span of url, in order: the userinfo password and the value of
// every "password=" query parameter (libpq URIs accept the password there).
std::vector<std::pair<size_t, size_t>> SecretSpans(std::string_view url) {
  std::vector<std::pair<size_t, size_t>> spans;
  const std::optional<Secrets> s = Split(url);
  if (!s) return spans;
  if (s->password != npos) spans.emplace_back(s->password, s->password_end);
  const size_t query = url.find('?', s->host);
  if (query == npos) return spans;
  constexpr std::string_view kKey = "password=";
  for (size_t pos = query; pos < url.size();) {
    const size_t name = pos + 1;
    size_t end = url.find('&', name);
    if (end == npos) end = url.size();
    if (url.substr(name, end - name).starts_with(kKey)) spans.emplace_back(name + kKey.size(), end);
    pos = end;
  }
  return spans;
}

}  // namespace

std::string RedactUrl(const std::string& url) {
  std::string out;
  size_t done = 0;
  for (const auto& [begin, end] : SecretSpans(url)) {
    out.append(url, done, begin - done);
    out += "****";
    done = end;
  }
  out.append(url, done);
  return out;
}

void HidePasswordsInArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const auto& [begin, end] : SecretSpans(argv[i]))
      for (size_t p = begin; p < end; ++p) argv[i][p] = '*';
  }
}

std::string UrlPassword(const std::string& url) {
  const std::optional<Secrets> s = Split(url);
  if (!s || s->password == npos) return "";
  return url.substr(s->password, s->password_end - s->password);
}

std::string UrlScheme(const std::string& url) {
  auto pos = url.find("://");
  return pos == std::string::npos ? "" : url.substr(0, pos);
}

}  // namespace tessera
