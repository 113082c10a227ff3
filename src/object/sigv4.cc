#include "object/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace tessera::object::sigv4 {

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string HexOf(std::string_view raw) {
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims the value and squeezes inner runs of spaces to one (canonical headers).
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return Hex(md, sizeof(md));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(data.data()), data.size(), md,
       &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (c == '/' && !encode_slash)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

Signed Sign(const Request& req, const Credentials& creds, std::string_view region, std::string_view service,
            std::string_view amz_date) {
  // Lowercased names, sorted; repeated headers join their values with ','.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : req.headers) {
    std::string& v = headers[Lower(name)];
    if (!v.empty()) v.push_back(',');
    v += CanonicalValue(value);
  }
  Signed s;
  std::string canonical_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    if (!s.signed_headers.empty()) s.signed_headers.push_back(';');
    s.signed_headers += name;
  }
  s.canonical_request = req.method + "\n" + req.canonical_uri + "\n" + CanonicalQuery(req.query) + "\n" +
                        canonical_headers + "\n" + s.signed_headers + "\n" + req.payload_hash;

  const std::string date(amz_date.substr(0, 8));
  const std::string scope = date + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  s.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope + "\n" + Sha256Hex(s.canonical_request);

  std::string key = HmacSha256("AWS4" + creds.secret_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  s.signature = HexOf(HmacSha256(key, s.string_to_sign));
  s.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" + scope +
                    ",SignedHeaders=" + s.signed_headers + ",Signature=" + s.signature;
  return s;
}

}  // namespace tessera::object::sigv4
