// ObjectStore over the S3 REST API (libcurl + AWS Signature Version 4), for
// Amazon S3 and compatible servers (MinIO, Ceph RGW, Swift s3api, ...).
//
// The bucket is given as a URL, and its shape picks the addressing style:
//   http(s)://HOST[:PORT]/BUCKET[/]   path style: requests go to HOST/BUCKET/KEY
//   http(s)://BUCKET.HOST[:PORT][/]   virtual-hosted style (no path): the first
//                                     label of the host is the bucket,
//                                     requests go to BUCKET.HOST/KEY
// A path of more than one segment, a query, or credentials in the URL
// ("user:secret@host") are EINVAL: credentials come from StoreOptions or the
// AWS_* environment variables (object_store.h), never from the URL, so the
// bucket URL can be stored and printed as it is.
//
// Requests: Put = PUT object (payload signed with its real SHA-256), Get =
// GET with a Range header, Head = HEAD, Delete = DELETE (a missing object is
// fine), List = ListObjectsV2 (list-type=2, prefix, start-after, max-keys,
// continuation-token; pages of at most 1000 keys are followed up to limit),
// Create = PUT bucket (an existing bucket we can access is fine).
//
// Errors (errno-style Status, messages name the operation and key, never a
// credential):
//   404 / NoSuchKey / NoSuchBucket                  ENOENT
//   401, 403 (AccessDenied, SignatureDoesNotMatch,
//     InvalidAccessKeyId, RequestTimeTooSkewed...)   EACCES
//   any other 4xx to an unsigned request (no
//     credentials configured)                       EACCES, saying so
//   other 4xx                                       EINVAL (400) or EIO
//   5xx, 429, SlowDown, RequestTimeout              EAGAIN (transient)
//   timeouts                                        ETIMEDOUT (transient)
//   refused/dropped connections                     ECONNRESET (transient)
// Each call is one HTTP attempt: object::Open wraps the store in a RetryStore
// (the one retry policy, common/retry.h), which retries the transient errors
// io_retries times and then reports EIO; a 4xx other than 429/RequestTimeout
// is never retried. Every attempt is bounded by connect_timeout_sec and
// get/put_timeout_sec, so a dead endpoint costs at most about
// (io_retries + 1) * timeout + the backoff sum, never a hang.
//
// Thread-safe: the configuration is immutable after construction; requests
// take a CURL easy handle from a pool (guarded by mu_) and give it back, so
// each handle's keep-alive connections are reused by later requests.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "object/object_store.h"
#include "object/sigv4.h"

namespace tessera::object {

// The parts of a bucket URL (see the header comment).
struct S3Endpoint {
  std::string scheme;       // "http" or "https"
  std::string host;         // as in the URL, e.g. "127.0.0.1", "bucket.s3.amazonaws.com", "[::1]"
  int port = 0;             // 0: the scheme's default
  std::string bucket;
  bool virtual_hosted = false;

  // "host" or "host:port" (the Host header; default ports are left out).
  std::string HostHeader() const;
  // "scheme://host[:port]", without a path.
  std::string BaseUrl() const;
  // The URI path of the bucket: "/BUCKET" (path style) or "" (virtual hosted).
  std::string BucketPath() const;
  // The bucket URL without credentials, ending in '/'.
  std::string Describe() const;
};

// Parses and checks a bucket URL; EINVAL with the reason otherwise.
Result<S3Endpoint> ParseS3Endpoint(const std::string& url);

struct S3Config {
  S3Endpoint endpoint;
  sigv4::Credentials creds;  // empty access key: anonymous (unsigned) requests
  std::string region = "us-east-1";
  int connect_timeout_sec = 10;
  int get_timeout_sec = 60;  // whole request: GET, HEAD, DELETE, LIST
  int put_timeout_sec = 60;  // whole request: PUT object, PUT bucket
  std::string ca_bundle;     // CA certificates file for https ("": system default)
};

class S3Store final : public ObjectStore {
 public:
  explicit S3Store(S3Config config);
  ~S3Store() override;
  S3Store(const S3Store&) = delete;
  S3Store& operator=(const S3Store&) = delete;

  std::string Describe() const override { return cfg_.endpoint.Describe(); }
  Status Create() override;
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Status Delete(const std::string& key) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<ObjectInfo>* out, bool* more) override;

  // Deletes the bucket, which must be empty (tests clean up with it); a
  // missing bucket is fine.
  Status DeleteBucket();

  // HTTP attempts made so far, retries included (for tests and metrics).
  uint64_t attempts() const { return attempts_.load(std::memory_order_relaxed); }

  // One HTTP exchange; public so the implementation's helpers can name it.
  struct Call;
  struct Response;

 private:
  // Sends c once. Returns the HTTP response whatever its status (the caller
  // maps it), or a transient error (see the header comment) when no usable
  // response came back.
  Result<Response> Do(const Call& c);
  // One attempt; a non-OK Status is a transport failure (curl error).
  Status Attempt(void* curl, const Call& c, const std::string& payload_hash, Response* resp);
  void* TakeHandle();
  void GiveHandle(void* curl);

  const S3Config cfg_;  // immutable
  std::atomic<uint64_t> attempts_{0};
  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* easy handles; guarded by mu_
};

// Parsed pieces of S3 XML replies, exposed for tests.
namespace s3xml {
// Replaces the five XML entities and numeric character references (&#38; &#x26;).
std::string Unescape(std::string_view s);
struct ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;
};
// Parses a ListObjectsV2 result; EIO if it is not one.
Result<ListPage> ParseListV2(std::string_view xml);
// The Code and Message of an <Error> body ("" when absent).
std::pair<std::string, std::string> ParseError(std::string_view xml);
// "2009-10-12T17:50:30.000Z" -> seconds since the epoch (0 if malformed).
int64_t ParseIso8601(std::string_view s);
}  // namespace s3xml

}  // namespace tessera::object
