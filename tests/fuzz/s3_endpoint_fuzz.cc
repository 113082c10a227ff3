// Bucket URLs (object::ParseS3Endpoint): given by the user and stored in the
// volume settings record. Invariants for what it accepts: http or https; a
// port in 1..65535 that is not the scheme's default; a non-empty lower-case
// host made only of characters a host name or an IP literal can have (no
// space, control character, '/', '?', '#', '@', '\\', stray ':' or
// brackets: the host goes into the Host header and the request URL as it is); a bucket of a-z, 0-9, '.',
// '-', '_' that is not "." or ".." (curl would resolve those as path
// segments); no credentials; and Describe() parses back to the same endpoint.
// Refusals are EINVAL and never quote a userinfo password.
#include "fuzz_util.h"
#include "object/s3_store.h"

using namespace tessera;
using namespace tessera::object;

namespace {

// A host name (letters, digits, '.', '-', '_'; bytes >= 0x80 for an IDN) or
// a bracketed IPv6 literal (hex digits, ':', '.', then an optional %zone).
bool ValidHost(std::string_view h) {
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || uint8_t(c) >= 0x80;
  };
  if (h.empty()) return false;
  if (h[0] != '[') {
    for (char c : h)
      if (!name_char(c)) return false;
    return true;
  }
  if (h.size() < 3 || h.back() != ']') return false;
  std::string_view in = h.substr(1, h.size() - 2);
  const size_t pct = in.find('%');
  if (in.substr(0, pct).find(':') == std::string_view::npos) return false;
  for (char c : in.substr(0, pct))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == ':' || c == '.')) return false;
  if (pct != std::string_view::npos)
    for (char c : in.substr(pct + 1))
      if (!name_char(c) || c == '.') return false;
  return true;
}

bool Same(const S3Endpoint& a, const S3Endpoint& b) {
  return a.scheme == b.scheme && a.host == b.host && a.port == b.port && a.bucket == b.bucket &&
         a.virtual_hosted == b.virtual_hosted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string url(reinterpret_cast<const char*>(data), size);
  Result<S3Endpoint> ep = ParseS3Endpoint(url);
  if (!ep.ok()) {
    FUZZ_CHECK(ep.status().code() == EINVAL);
    // "scheme://user:password@host/...": the password is never quoted back.
    const size_t sep = url.find("://");
    if (sep != std::string::npos) {
      const std::string authority = url.substr(sep + 3, url.find('/', sep + 3) - (sep + 3));
      const size_t at = authority.rfind('@'), colon = authority.find(':');
      if (at != std::string::npos && colon < at && at - colon > 4) {
        const size_t begin = sep + 3 + colon + 1, len = at - colon - 1;
        const std::string secret = url.substr(begin, len);
        // Unless the message's own text has it ("--secret-key"): then it is
        // there with the password starred out of the URL too.
        std::string starred = url;
        starred.replace(begin, len, std::string(len, '*'));
        Result<S3Endpoint> other = ParseS3Endpoint(starred);
        if (url.find(secret) == url.rfind(secret) && ep.status().message().find(secret) != std::string::npos)
          FUZZ_CHECK(!other.ok() && other.status().message().find(secret) != std::string::npos);
      }
    }
    return 0;
  }
  FUZZ_CHECK(ep->scheme == "http" || ep->scheme == "https");
  FUZZ_CHECK(ep->port >= 0 && ep->port <= 65535);
  FUZZ_CHECK(!(ep->scheme == "http" && ep->port == 80) && !(ep->scheme == "https" && ep->port == 443));
  FUZZ_CHECK(ValidHost(ep->host));
  FUZZ_CHECK(!ep->bucket.empty());
  for (char c : ep->bucket)
    FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_');
  FUZZ_CHECK(ep->bucket != "." && ep->bucket != "..");
  if (ep->virtual_hosted) FUZZ_CHECK(ep->host.starts_with(ep->bucket + "."));
  FUZZ_CHECK(ep->Describe() == ep->BaseUrl() + ep->BucketPath() + "/");
  Result<S3Endpoint> again = ParseS3Endpoint(ep->Describe());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(Same(*ep, *again));
  return 0;
}
