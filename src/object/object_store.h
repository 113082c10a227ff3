// Object storage: the narrow backend interface for file data. Objects are
// immutable blobs named by keys ("chunks/0/1/1234_0_4194304"). Backends:
// memory (unit tests), file (local directory, atomic writes via temp+rename),
// s3 (S3 REST API, s3_store.h); FaultStore (fault_store.h) wraps any of them.
// One conformance suite (tests/object/object_conformance_test.cc) runs on all.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::object {

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  int64_t mtime_sec = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Human-readable location without secrets, e.g. "file:///var/lib/tessera/vol/".
  virtual std::string Describe() const = 0;
  // Creates the bucket/directory if needed.
  virtual Status Create() = 0;
  // Stores data under key, replacing any previous object atomically.
  virtual Status Put(const std::string& key, std::string_view data) = 0;
  // Reads [off, off+len) of the object (len < 0: to the end). A range past the
  // end is truncated. ENOENT when the object does not exist.
  virtual Result<std::string> Get(const std::string& key, int64_t off = 0, int64_t len = -1) = 0;
  // Get of [off, off+len) into dst, which has room for len bytes: the bytes
  // read (fewer only at the object's end). The default copies Get's string;
  // a store that can read into dst directly saves that copy.
  virtual Result<size_t> GetInto(const std::string& key, int64_t off, size_t len, char* dst);
  // Deleting a missing object is not an error.
  virtual Status Delete(const std::string& key) = 0;
  // ENOENT when missing.
  virtual Result<ObjectInfo> Head(const std::string& key) = 0;
  // Lists keys with the prefix that sort after start_after, ascending, at most
  // limit of them; *out is replaced and *more (if not null) tells whether
  // further matching keys follow.
  virtual Status List(const std::string& prefix, const std::string& start_after, size_t limit,
                      std::vector<ObjectInfo>* out, bool* more) = 0;
  // True when reading a range of an object costs about what copying it from
  // a block cache does (a local directory, whose file system caches it):
  // then fetching a whole block to serve later partial reads gains nothing.
  virtual bool cheap_ranges() const { return false; }
};

struct StoreOptions {
  std::string storage = "file";  // file | memory | s3
  // file: a directory; memory: a name; s3: the bucket URL,
  // http(s)://HOST[:PORT]/BUCKET or http(s)://BUCKET.HOST[:PORT] (s3_store.h).
  std::string bucket;
  // file: fsync each object (and its directory) before Put returns. Without it
  // a completed Put survives a process crash (the data is in the page cache)
  // but not necessarily a power loss or kernel crash.
  bool fsync = false;

  // s3 only. Empty credentials fall back to AWS_ACCESS_KEY_ID,
  // AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; an empty region to
  // AWS_REGION, AWS_DEFAULT_REGION, then us-east-1. No access key at all means
  // anonymous requests. The secret is never printed or logged.
  std::string access_key{};
  std::string secret_key{};
  std::string session_token{};
  std::string region{};
  int connect_timeout_sec = 10;
  int get_timeout_sec = 60;  // each GET, HEAD, DELETE or LIST attempt
  int put_timeout_sec = 60;  // each PUT attempt
  int io_retries = 10;       // retries of a failed request (5xx, 429, timeouts, dropped connections)

  // Fault injection for tests (fault_store.h), e.g. "seed=7,error=0.05";
  // empty: the environment variable TESSERA_OBJECT_FAULTS, if set; "off":
  // none, whatever the environment says.
  std::string faults{};
  // Tries of a request failing with a transient error (timeouts, dropped
  // connections) before EIO reaches the caller (a RetryStore wraps the store;
  // 1 = no wrapper). s3 uses io_retries + 1 instead.
  int attempts = 10;
};

// Builds a store (without creating it); EINVAL for an unknown storage type,
// an empty bucket for file, a malformed bucket URL for s3 or a malformed fault
// spec. Each memory store is a new, empty, private map.
Result<std::unique_ptr<ObjectStore>> Open(const StoreOptions& opts);

}  // namespace tessera::object
