#include "object/object_store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <system_error>

#include "common/log.h"
#include "object/fault_store.h"
#include "object/retry_store.h"
#include "object/file_store.h"
#include "object/memory_store.h"
#include "object/s3_store.h"

namespace tessera::object {

namespace {

// The first non-empty value of the environment variables, or "".
std::string FromEnv(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "";
}

}  // namespace

Result<size_t> ObjectStore::GetInto(const std::string& key, int64_t off, size_t len, char* dst) {
  ASSIGN_OR_RETURN(std::string data, Get(key, off, int64_t(len)));
  const size_t n = std::min(data.size(), len);
  std::memcpy(dst, data.data(), n);
  return n;
}

namespace {

Result<std::unique_ptr<ObjectStore>> OpenS3(const StoreOptions& opts) {
  ASSIGN_OR_RETURN(S3Endpoint endpoint, ParseS3Endpoint(opts.bucket));
  if (opts.connect_timeout_sec <= 0 || opts.get_timeout_sec <= 0 || opts.put_timeout_sec <= 0)
    return Status::Err(EINVAL, "s3 timeouts must be positive");
  if (opts.io_retries < 0 || opts.io_retries > 1000) return Status::Err(EINVAL, "s3 io_retries must be 0 to 1000");
  S3Config cfg;
  cfg.endpoint = std::move(endpoint);
  // Each credential from the options, else from the environment; a session
  // token belongs to the environment's key pair only.
  cfg.creds.access_key = opts.access_key.empty() ? FromEnv({"AWS_ACCESS_KEY_ID"}) : opts.access_key;
  cfg.creds.secret_key = opts.secret_key.empty() ? FromEnv({"AWS_SECRET_ACCESS_KEY"}) : opts.secret_key;
  cfg.creds.session_token = opts.session_token;
  if (opts.session_token.empty() && opts.access_key.empty()) cfg.creds.session_token = FromEnv({"AWS_SESSION_TOKEN"});
  if (!cfg.creds.access_key.empty() && cfg.creds.secret_key.empty())
    return Status::Err(EINVAL, "s3 access key given without a secret key (--secret-key or AWS_SECRET_ACCESS_KEY)");
  cfg.region = opts.region.empty() ? FromEnv({"AWS_REGION", "AWS_DEFAULT_REGION"}) : opts.region;
  if (cfg.region.empty()) cfg.region = "us-east-1";
  cfg.connect_timeout_sec = opts.connect_timeout_sec;
  cfg.get_timeout_sec = opts.get_timeout_sec;
  cfg.put_timeout_sec = opts.put_timeout_sec;
  cfg.ca_bundle = FromEnv({"AWS_CA_BUNDLE"});
  return std::unique_ptr<ObjectStore>(new S3Store(std::move(cfg)));
}

Result<std::unique_ptr<ObjectStore>> OpenBackend(const StoreOptions& opts) {
  if (opts.storage == "memory") return std::unique_ptr<ObjectStore>(new MemoryStore(opts.bucket));
  if (opts.storage == "s3") return OpenS3(opts);
  if (opts.storage != "file") {
    return Status::Err(EINVAL, "unknown storage type '" + opts.storage + "' (expected file, memory or s3)");
  }
  if (opts.bucket.empty()) return Status::Err(EINVAL, "file storage needs a directory as bucket");
  std::error_code ec;
  std::string root = std::filesystem::absolute(opts.bucket, ec).lexically_normal().string();
  if (ec) return Status::Err(ec.value(), "resolve directory " + opts.bucket);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root == "/") return Status::Err(EINVAL, "refusing to use / as the file storage directory");
  return std::unique_ptr<ObjectStore>(new FileStore(std::move(root), opts.fsync));
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> Open(const StoreOptions& opts) {
  ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> store, OpenBackend(opts));
  const std::string faults = opts.faults.empty() ? FromEnv({"TESSERA_OBJECT_FAULTS"}) : opts.faults;
  const bool injecting = !faults.empty() && opts.faults != "off";
  if (injecting) {
    ASSIGN_OR_RETURN(FaultSpec spec, FaultSpec::Parse(faults));
    store = std::unique_ptr<ObjectStore>(new FaultStore(std::move(store), spec));
    LOG_WARN("object store {}: injecting faults", store->Describe());
  }
  // The one place object requests are retried (common/retry.h). S3: io_retries
  // after the first attempt, pauses from 100 ms up to 10 s (a server asking to
  // slow down needs time), no try started 30 s after the first (a store out
  // of reach fails a request with EIO in well under a minute); other stores:
  // `attempts` tries, quick pauses.
  RetryPolicy policy;
  if (opts.storage == "s3") {
    policy = RetryPolicy{opts.io_retries + 1, std::chrono::milliseconds(100), std::chrono::milliseconds(10000),
                         std::chrono::milliseconds(30000)};
  } else {
    policy = RetryPolicy{opts.attempts, std::chrono::milliseconds(20), std::chrono::milliseconds(2000)};
  }
  if (policy.attempts <= 1) return store;
  return std::unique_ptr<ObjectStore>(new RetryStore(std::move(store), policy));
}

}  // namespace tessera::object
