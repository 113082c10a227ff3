// AWS Signature Version 4 (header-based authentication), as used by S3Store.
// A pure function of its inputs so it can be checked against AWS's published
// examples (tests/object/sigv4_test.cc). The secret key goes in, only derived
// values come out: nothing here prints or keeps it.
//
// Reference: "Authenticating Requests: Using the Authorization Header (AWS
// Signature Version 4)" in the Amazon S3 API documentation.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::object::sigv4 {

// Lowercase hex SHA-256 of data (the x-amz-content-sha256 of a payload).
std::string Sha256Hex(std::string_view data);
// SHA-256 of the empty string, the payload hash of a request without body.
inline constexpr char kEmptySha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Raw (32 byte) HMAC-SHA256.
std::string HmacSha256(std::string_view key, std::string_view data);

// SigV4 URI encoding: every byte except A-Z a-z 0-9 - _ . ~ becomes %XX
// (uppercase hex); '/' is kept when encode_slash is false (object key paths).
std::string UriEncode(std::string_view s, bool encode_slash);

// "20130524T000000Z" for t (UTC).
std::string AmzDate(std::time_t t);

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // sent as x-amz-security-token when set
};

struct Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the path exactly as sent, already URI-encoded ("/bucket/a%20b")
  // Query parameters, not encoded; sorted and encoded by the signer.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, any case and order; must include host and x-amz-date.
  // Values are trimmed and inner runs of spaces squeezed, as the spec says.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash = kEmptySha256;  // Sha256Hex(body) or "UNSIGNED-PAYLOAD"
};

struct Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;       // 64 hex digits
  std::string authorization;   // the Authorization header value
};

// "a=1&b=x%2Fy": parameters sorted by encoded name then value, both encoded.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// Signs req for service in region at amz_date ("YYYYMMDDTHHMMSSZ", the
// request's x-amz-date).
Signed Sign(const Request& req, const Credentials& creds, std::string_view region, std::string_view service,
            std::string_view amz_date);

}  // namespace tessera::object::sigv4
