#include "common/url.h"

#include <algorithm>
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
  size_t host = npos;      // first byte after the userinfo
  size_t password = npos;  // [password, password_end): the userinfo password, raw
  size_t password_end = npos;
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

// Every secret span of url, in order and disjoint: the userinfo password and
// the value of every "password=" query parameter (libpq URIs accept the
// password there). Such a parameter is "password=" right after a '?' or '&'
// anywhere past the first '?' after "://": where the query starts depends on
// where the userinfo ends, which parsers disagree on ("postgres://@?host=@&
// password=x" has a password for libpq), so this looks everywhere it might.
std::vector<std::pair<size_t, size_t>> SecretSpans(std::string_view url) {
  std::vector<std::pair<size_t, size_t>> spans;
  const std::optional<Secrets> s = Split(url);
  if (!s) return spans;
  if (s->password != npos) spans.emplace_back(s->password, s->password_end);
  const size_t query = url.find('?', url.find("://") + 3);
  if (query == npos) return spans;
  constexpr std::string_view kKey = "password=";
  for (size_t pos = url.find(kKey, query + 1); pos != npos; pos = url.find(kKey, pos + 1)) {
    if (url[pos - 1] != '?' && url[pos - 1] != '&') continue;
    const size_t value = pos + kKey.size();
    spans.emplace_back(value, std::min(url.find('&', value), url.size()));
  }
  // Sorted, overlaps merged (a "password=" inside the userinfo password).
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& [begin, end] : spans) {
    if (!merged.empty() && begin <= merged.back().second) merged.back().second = std::max(merged.back().second, end);
    else merged.emplace_back(begin, end);
  }
  return merged;
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

std::vector<std::string> UrlPasswords(const std::string& url) {
  const std::optional<Secrets> s = Split(url);
  if (!s || s->password == npos) return {};
  std::vector<std::string> out;
  // libpq's userinfo ends at the first '@' (the rest is the host to it).
  if (const size_t first = url.find('@', s->password); first < s->password_end)
    out.push_back(url.substr(s->password, first - s->password));
  out.push_back(url.substr(s->password, s->password_end - s->password));
  return out;
}

std::string UrlScheme(const std::string& url) {
  auto pos = url.find("://");
  return pos == std::string::npos ? "" : url.substr(0, pos);
}

}  // namespace tessera
