#include "object/s3_store.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "common/log.h"

namespace tessera::object {

namespace {

constexpr size_t kMaxIdleHandles = 64;
constexpr size_t kListPageMax = 1000;  // S3's largest page

using Params = std::vector<std::pair<std::string, std::string>>;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendBody(char* ptr, size_t size, size_t n, void* userdata) {
  static_cast<std::string*>(userdata)->append(ptr, size * n);
  return size * n;
}

struct Upload {
  std::string_view data;
  size_t pos = 0;
};

size_t ReadBody(char* buffer, size_t size, size_t n, void* userdata) {
  auto* up = static_cast<Upload*>(userdata);
  size_t len = std::min(size * n, up->data.size() - up->pos);
  std::copy_n(up->data.data() + up->pos, len, buffer);
  up->pos += len;
  return len;
}

int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* up = static_cast<Upload*>(userdata);
  if (origin != SEEK_SET || offset < 0 || size_t(offset) > up->data.size()) return CURL_SEEKFUNC_CANTSEEK;
  up->pos = size_t(offset);
  return CURL_SEEKFUNC_OK;
}

// Transport failures worth another attempt: the server may answer next time.
bool RetryableCurlError(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
      return true;
    default:
      return false;
  }
}

bool IsIpLiteral(const std::string& host) {
  if (!host.empty() && host[0] == '[') return true;
  return !host.empty() && std::all_of(host.begin(), host.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

}  // namespace

// ---- endpoint ----

std::string S3Endpoint::HostHeader() const { return port ? fmt::format("{}:{}", host, port) : host; }
std::string S3Endpoint::BaseUrl() const { return scheme + "://" + HostHeader(); }
std::string S3Endpoint::BucketPath() const { return virtual_hosted ? "" : "/" + bucket; }
std::string S3Endpoint::Describe() const { return BaseUrl() + BucketPath() + "/"; }

Result<S3Endpoint> ParseS3Endpoint(const std::string& url) {
  auto bad = [](const std::string& why) {
    return Status::Err(EINVAL, "invalid S3 bucket URL: " + why +
                                   " (want http(s)://HOST[:PORT]/BUCKET or http(s)://BUCKET.HOST[:PORT])");
  };
  S3Endpoint ep;
  size_t sep = url.find("://");
  if (sep == std::string::npos) return bad("no scheme");
  ep.scheme = Lower(url.substr(0, sep));
  if (ep.scheme != "http" && ep.scheme != "https") return bad("scheme must be http or https");
  std::string rest = url.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string::npos) return bad("query or fragment not allowed");
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (authority.find('@') != std::string::npos) {
    // Only the reason, never the URL: it holds a secret.
    return Status::Err(EINVAL, "credentials in the S3 bucket URL are not supported: use --access-key/--secret-key "
                               "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY");
  }
  // host, [v6]:port or host:port
  size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    std::string port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return bad("bad port");
    ep.port = std::stoi(port);
    if (ep.port == 0 || ep.port > 65535) return bad("bad port");
    if ((ep.scheme == "http" && ep.port == 80) || (ep.scheme == "https" && ep.port == 443)) ep.port = 0;
    authority.resize(colon);
  }
  ep.host = Lower(authority);
  if (ep.host.empty()) return bad("no host");
  // The host goes into the request URL and the Host header as it is: a name
  // (bytes >= 0x80 for an IDN) or a bracketed IPv6 literal, nothing else.
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  };
  if (ep.host[0] == '[') {  // [v6 address] or [v6 address%zone]
    const bool closed = ep.host.size() >= 3 && ep.host.back() == ']';
    const std::string inner = closed ? ep.host.substr(1, ep.host.size() - 2) : "";
    const size_t zone = inner.find('%');
    const std::string addr = inner.substr(0, zone), id = zone == std::string::npos ? "" : inner.substr(zone + 1);
    auto addr_char = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; };
    auto id_char = [&](char c) { return name_char(c) && c != '.'; };
    if (!closed || addr.find(':') == std::string::npos || !std::all_of(addr.begin(), addr.end(), addr_char) ||
        !std::all_of(id.begin(), id.end(), id_char))
      return bad("bad IPv6 address");
  } else if (!std::all_of(ep.host.begin(), ep.host.end(), name_char)) {
    return bad("the host name has characters other than letters, digits, '.', '-' and '_'");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.empty()) {
    if (path.find('/') != std::string::npos) return bad("the path must be a single bucket name");
    ep.bucket = path;
  } else {
    size_t dot = ep.host.find('.');
    if (IsIpLiteral(ep.host) || dot == std::string::npos || dot == 0)
      return bad("no bucket: give it as the path or as the first label of the host name");
    ep.bucket = ep.host.substr(0, dot);
    ep.virtual_hosted = true;
  }
  if (ep.bucket == "." || ep.bucket == "..")  // curl would resolve it as a path segment
    return bad("bucket name '" + ep.bucket + "'");
  for (char c : ep.bucket) {
    if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) && c != '-' &&
        c != '.' && c != '_')
      return bad("bucket name '" + ep.bucket + "' has characters other than a-z, 0-9, '.', '-' and '_'");
  }
  return ep;
}

// ---- XML ----

namespace s3xml {

namespace {

// The text of the first <tag>...</tag> in xml[from, to) and the position after
// it; nullopt when absent.
std::optional<std::string_view> Element(std::string_view xml, std::string_view tag, size_t* pos = nullptr) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t start = xml.find(open, pos ? *pos : 0);
  if (start == std::string_view::npos) return std::nullopt;
  start += open.size();
  size_t end = xml.find(close, start);
  if (end == std::string_view::npos) return std::nullopt;
  if (pos) *pos = end + close.size();
  return xml.substr(start, end - start);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    size_t semi = s[i] == '&' ? s.find(';', i) : std::string_view::npos;
    if (semi == std::string_view::npos || semi - i > 10) {
      out.push_back(s[i]);
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out.push_back('&');
    else if (ent == "lt") out.push_back('<');
    else if (ent == "gt") out.push_back('>');
    else if (ent == "quot") out.push_back('"');
    else if (ent == "apos") out.push_back('\'');
    else if (ent.size() > 1 && ent[0] == '#') {
      bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string digits(ent.substr(hex ? 2 : 1));
      char* end = nullptr;
      unsigned long cp = digits.empty() ? 0 : std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp > 0x10FFFF) {
        out.push_back(s[i]);
        continue;
      }
      AppendUtf8(uint32_t(cp), &out);
    } else {
      out.push_back(s[i]);
      continue;
    }
    i = semi;
  }
  return out;
}

int64_t ParseIso8601(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char* end = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return 0;
  return int64_t(timegm(&tm));
}

Result<ListPage> ParseListV2(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos)
    return Status::Err(EIO, "S3 list reply is not a ListBucketResult");
  ListPage page;
  size_t pos = 0;
  while (auto contents = Element(xml, "Contents", &pos)) {
    auto key = Element(*contents, "Key");
    if (!key) return Status::Err(EIO, "S3 list reply: <Contents> without <Key>");
    ObjectInfo info;
    info.key = Unescape(*key);
    if (auto size = Element(*contents, "Size")) {
      // A byte count: digits only (strtoll would take "-5" or "12abc").
      if (size->empty() || size->size() > 18 ||
          !std::all_of(size->begin(), size->end(), [](char c) { return c >= '0' && c <= '9'; }))
        return Status::Err(EIO, "S3 list reply: bad <Size> of '" + info.key + "'");
      info.size = std::strtoll(std::string(*size).c_str(), nullptr, 10);
    }
    if (auto mtime = Element(*contents, "LastModified")) info.mtime_sec = ParseIso8601(*mtime);
    page.objects.push_back(std::move(info));
  }
  auto truncated = Element(xml, "IsTruncated");
  page.truncated = truncated && *truncated == "true";
  if (auto token = Element(xml, "NextContinuationToken")) page.next_token = Unescape(*token);
  return page;
}

std::pair<std::string, std::string> ParseError(std::string_view xml) {
  auto code = Element(xml, "Code");
  auto msg = Element(xml, "Message");
  return {code ? Unescape(*code) : "", msg ? Unescape(*msg) : ""};
}

}  // namespace s3xml

// ---- requests ----

struct S3Store::Call {
  std::string method{};     // GET PUT HEAD DELETE
  std::string key{};        // "" for the bucket itself
  Params query{};
  Params headers{};         // signed, e.g. Range
  std::string_view body{};  // PUT only
  int timeout_sec = 60;
  size_t expect_bytes = 0;  // GET: the reply's likely size, to size the buffer once
  std::string What() const { return key.empty() ? method + " bucket" : method + " " + key; }
};

struct S3Store::Response {
  long status = 0;
  std::string body;
  int64_t content_length = -1;
  int64_t mtime_sec = 0;
  std::string code;     // S3 error code of a non-2xx reply
  std::string message;  // and its message
  std::string content_range;  // of a 206
};

S3Store::S3Store(S3Config config) : cfg_(std::move(config)) { GlobalInit(); }

S3Store::~S3Store() {
  for (void* h : idle_) curl_easy_cleanup(h);
}

void* S3Store::TakeHandle() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Store::GiveHandle(void* curl) {
  {
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdleHandles) {
      idle_.push_back(curl);
      return;
    }
  }
  curl_easy_cleanup(curl);
}

Status S3Store::Attempt(void* curl, const Call& c, const std::string& payload_hash, Response* resp) {
  *resp = Response{};
  curl_easy_reset(curl);  // keeps the handle's live connections

  const std::string uri = cfg_.endpoint.BucketPath() + (c.key.empty() ? (cfg_.endpoint.virtual_hosted ? "/" : "")
                                                                      : "/" + sigv4::UriEncode(c.key, false));
  const std::string query = sigv4::CanonicalQuery(c.query);
  const std::string url = cfg_.endpoint.BaseUrl() + uri + (query.empty() ? "" : "?" + query);

  const std::string amz_date = sigv4::AmzDate(std::time(nullptr));
  sigv4::Request req{c.method, uri, c.query, c.headers, payload_hash};
  req.headers.emplace_back("host", cfg_.endpoint.HostHeader());
  req.headers.emplace_back("x-amz-date", amz_date);
  req.headers.emplace_back("x-amz-content-sha256", payload_hash);
  if (!cfg_.creds.session_token.empty()) req.headers.emplace_back("x-amz-security-token", cfg_.creds.session_token);

  curl_slist* headers = nullptr;
  for (const auto& [name, value] : req.headers) headers = curl_slist_append(headers, (name + ": " + value).c_str());
  if (!cfg_.creds.access_key.empty()) {
    sigv4::Signed s = sigv4::Sign(req, cfg_.creds, cfg_.region, "s3", amz_date);
    headers = curl_slist_append(headers, ("Authorization: " + s.authorization).c_str());
  }
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  headers = curl_slist_append(headers, "Content-Type:");
  headers = curl_slist_append(headers, "Accept:");

  char errbuf[CURL_ERROR_SIZE] = {0};
  Upload upload{c.body, 0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);  // keys with "./" or "../" stay as they are
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, long(cfg_.connect_timeout_sec) * 1000);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, long(c.timeout_sec) * 1000);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_FILETIME, 1L);  // Last-Modified, for Head
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &resp->body);
  if (c.expect_bytes > 0) resp->body.reserve(c.expect_bytes);
  if (!cfg_.ca_bundle.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, cfg_.ca_bundle.c_str());
  if (c.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, curl_off_t(c.body.size()));
  } else if (c.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (c.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, c.method.c_str());
  }

  attempts_.fetch_add(1, std::memory_order_relaxed);
  CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    const int code = rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT
                     : rc == CURLE_COULDNT_CONNECT  ? ECONNREFUSED
                     : RetryableCurlError(rc)       ? ECONNRESET
                                                    : EIO;
    return Status::Err(code, fmt::format("{} {}", cfg_.endpoint.HostHeader(), detail));
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp->status);
  curl_off_t length = -1;
  if (curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK) resp->content_length = length;
  curl_off_t filetime = -1;
  if (curl_easy_getinfo(curl, CURLINFO_FILETIME_T, &filetime) == CURLE_OK && filetime > 0) resp->mtime_sec = filetime;
  if (curl_header* h = nullptr; resp->status == 206 && curl_easy_header(curl, "Content-Range", 0, CURLH_HEADER, -1,
                                                                       &h) == CURLHE_OK)
    resp->content_range = h->value;
  if (resp->status >= 300) std::tie(resp->code, resp->message) = s3xml::ParseError(resp->body);
  return Status::OK();
}

Result<S3Store::Response> S3Store::Do(const Call& c) {
  void* curl = TakeHandle();
  if (!curl) return Status::Err(ENOMEM, "curl_easy_init failed");
  Response resp;
  const std::string payload_hash = c.method == "PUT" ? sigv4::Sha256Hex(c.body) : sigv4::kEmptySha256;
  Status st = Attempt(curl, c, payload_hash, &resp);
  if (st.ok()) {
    const bool retry = resp.status >= 500 || resp.status == 429 || resp.code == "SlowDown" ||
                       resp.code == "RequestTimeout" || resp.code == "InternalError";
    if (!retry) {
      GiveHandle(curl);
      return resp;
    }
    st = Status::Err(EAGAIN, fmt::format("HTTP {} {}", resp.status, resp.code));
  }
  // A handle that just failed may hold a broken connection: drop it.
  curl_easy_cleanup(curl);
  return st.With(fmt::format("s3 {} on {}", c.What(), Describe()));
}

namespace {

// The Status of a reply that is not a success; anonymous: the request was
// not signed (no credentials configured).
Status ReplyError(const std::string& what, const S3Store::Response& r, const std::string& where, bool anonymous) {
  std::string detail = fmt::format("HTTP {}", r.status);
  if (!r.code.empty()) detail += " " + r.code;
  if (!r.message.empty()) detail += ": " + r.message;
  const std::string msg = fmt::format("s3 {} on {}: {}", what, where, detail);
  if (r.status == 404 || r.code == "NoSuchKey" || r.code == "NoSuchBucket") return Status::Err(ENOENT, msg);
  // Servers that allow no anonymous access answer unsigned requests with
  // 401/403, or, when they are not S3 underneath (Swift), with other 4xx.
  if (anonymous && r.status / 100 == 4 && r.status != 409 && r.status != 416) {
    return Status::Err(EACCES, msg + " (no credentials given: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                     "or --access-key and --secret-key)");
  }
  if (r.status == 401 || r.status == 403) {
    return Status::Err(EACCES, msg + " (check the access key, the secret key and the region)");
  }
  if (r.status == 400) return Status::Err(EINVAL, msg);
  return Status::Err(EIO, msg);
}

}  // namespace

Status S3Store::Create() {
  Call c{.method = "PUT", .timeout_sec = cfg_.put_timeout_sec};
  std::string config;
  if (cfg_.region != "us-east-1") {
    config = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>" +
             cfg_.region + "</LocationConstraint></CreateBucketConfiguration>";
    c.body = config;
  }
  ASSIGN_OR_RETURN(Response r, Do(c));
  if (r.status / 100 == 2 || r.code == "BucketAlreadyOwnedByYou") return Status::OK();
  if (r.code == "BucketAlreadyExists") {
    // Some servers say so for a bucket of our own: usable if we may list it.
    ASSIGN_OR_RETURN(Response probe, Do(Call{.method = "GET", .query = {{"list-type", "2"}, {"max-keys", "1"}},
                                             .timeout_sec = cfg_.get_timeout_sec}));
    if (probe.status / 100 == 2) return Status::OK();
    return Status::Err(EEXIST, fmt::format("s3 bucket {} exists and belongs to someone else", Describe()));
  }
  return ReplyError("create bucket", r, Describe(), cfg_.creds.access_key.empty());
}

Status S3Store::DeleteBucket() {
  ASSIGN_OR_RETURN(Response r, Do(Call{.method = "DELETE", .timeout_sec = cfg_.get_timeout_sec}));
  if (r.status / 100 == 2 || r.code == "NoSuchBucket") return Status::OK();
  return ReplyError("delete bucket", r, Describe(), cfg_.creds.access_key.empty());
}

Status S3Store::Put(const std::string& key, std::string_view data) {
  if (key.empty()) return Status::Err(EINVAL, "put: empty key");
  ASSIGN_OR_RETURN(Response r, Do(Call{.method = "PUT", .key = key, .body = data, .timeout_sec = cfg_.put_timeout_sec}));
  if (r.status / 100 == 2) return Status::OK();
  return ReplyError("PUT " + key, r, Describe(), cfg_.creds.access_key.empty());
}

namespace {

// A 206 must carry the range asked for, "bytes off-end/total", and a body of
// its length, shorter than len only where the object ends: a server or proxy
// that answered another range would hand the reader bytes from the wrong
// offset as the file's.
Status CheckRange(const std::string& content_range, size_t body, int64_t off, int64_t len) {
  unsigned long long start = 0, end = 0, total = 0;
  char star = 0;
  const bool known = std::sscanf(content_range.c_str(), "bytes %llu-%llu/%llu", &start, &end, &total) == 3;
  if (!known && std::sscanf(content_range.c_str(), "bytes %llu-%llu/%c", &start, &end, &star) != 3)
    return Status::Err(EIO, "a partial reply without a usable Content-Range ('" + content_range + "')");
  const uint64_t n = end >= start ? end - start + 1 : 0;
  const bool short_at_end = known && end + 1 == total;
  if (start != uint64_t(off) || n == 0 || n != body || (len > 0 && n > uint64_t(len)) ||
      (len > 0 && n < uint64_t(len) && !short_at_end) || (len < 0 && known && !short_at_end))
    return Status::Err(EIO, fmt::format("asked for bytes {}-{}, the server sent '{}' with {} byte(s)", off,
                                        len < 0 ? std::string() : std::to_string(off + len - 1), content_range, body));
  return Status::OK();
}

}  // namespace

Result<std::string> S3Store::Get(const std::string& key, int64_t off, int64_t len) {
  if (key.empty()) return Status::Err(EINVAL, "get: empty key");
  if (off < 0) return Status::Err(EINVAL, "get " + key + ": negative offset");
  if (len == 0) {
    RETURN_IF_ERROR(Head(key).status());
    return std::string();
  }
  Call c{.method = "GET", .key = key, .timeout_sec = cfg_.get_timeout_sec};
  if (len > 0) c.expect_bytes = size_t(std::min<int64_t>(len, 64 << 20));
  if (off > 0 || len > 0) {
    c.headers.emplace_back("range", len < 0 ? fmt::format("bytes={}-", off) : fmt::format("bytes={}-{}", off, off + len - 1));
  }
  ASSIGN_OR_RETURN(Response r, Do(c));
  if (r.status == 206) {
    RETURN_IF_ERROR(CheckRange(r.content_range, r.body.size(), off, len).With("GET " + key + " on " + Describe()));
    return std::move(r.body);
  }
  if (r.status == 200) {  // the whole object: no range asked, or the server ignored it
    if (c.headers.empty()) return std::move(r.body);
    if (size_t(off) >= r.body.size()) return std::string();
    return r.body.substr(size_t(off), len < 0 ? std::string::npos : size_t(len));
  }
  if (r.status == 416) return std::string();  // the range starts at or after the end
  return ReplyError("GET " + key, r, Describe(), cfg_.creds.access_key.empty());
}

Status S3Store::Delete(const std::string& key) {
  if (key.empty()) return Status::Err(EINVAL, "delete: empty key");
  ASSIGN_OR_RETURN(Response r, Do(Call{.method = "DELETE", .key = key, .timeout_sec = cfg_.get_timeout_sec}));
  if (r.status / 100 == 2 || r.status == 404) return Status::OK();
  return ReplyError("DELETE " + key, r, Describe(), cfg_.creds.access_key.empty());
}

Result<ObjectInfo> S3Store::Head(const std::string& key) {
  if (key.empty()) return Status::Err(EINVAL, "head: empty key");
  ASSIGN_OR_RETURN(Response r, Do(Call{.method = "HEAD", .key = key, .timeout_sec = cfg_.get_timeout_sec}));
  if (r.status / 100 != 2) return ReplyError("HEAD " + key, r, Describe(), cfg_.creds.access_key.empty());
  return ObjectInfo{key, std::max<int64_t>(r.content_length, 0), r.mtime_sec};
}

Status S3Store::List(const std::string& prefix, const std::string& start_after, size_t limit,
                     std::vector<ObjectInfo>* out, bool* more) {
  out->clear();
  std::string token;
  bool has_more = false;
  for (;;) {
    // limit 0 still asks for one key, to tell whether more would follow.
    const size_t want = limit == 0 ? 1 : std::min(limit - out->size(), kListPageMax);
    Call c{.method = "GET", .timeout_sec = cfg_.get_timeout_sec};
    c.query = {{"list-type", "2"}, {"max-keys", std::to_string(want)}};
    if (!prefix.empty()) c.query.emplace_back("prefix", prefix);
    if (!start_after.empty()) c.query.emplace_back("start-after", start_after);
    if (!token.empty()) c.query.emplace_back("continuation-token", token);
    ASSIGN_OR_RETURN(Response r, Do(c));
    if (r.status / 100 != 2) return ReplyError("list " + prefix, r, Describe(), cfg_.creds.access_key.empty());
    ASSIGN_OR_RETURN(s3xml::ListPage page, s3xml::ParseListV2(r.body));
    if (limit == 0) {
      has_more = !page.objects.empty() || page.truncated;
      break;
    }
    // A server that ignored max-keys: what is cut off comes with the next
    // call (after the last key kept), so there is more.
    const bool cut = page.objects.size() > want;
    if (cut) page.objects.resize(want);
    for (auto& info : page.objects) out->push_back(std::move(info));
    if (cut) {
      has_more = true;
      break;
    }
    if (!page.truncated) break;
    if (out->size() >= limit) {
      has_more = true;
      break;
    }
    if (page.next_token.empty() || page.objects.empty())
      return Status::Err(EIO, fmt::format("s3 list {} on {}: truncated reply without a continuation token", prefix, Describe()));
    token = page.next_token;
  }
  if (more) *more = has_more;
  return Status::OK();
}

}  // namespace tessera::object
