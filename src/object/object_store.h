// Object storage: the narrow backend interface for file data. Objects are
// immutable blobs named by keys ("chunks/0/1/1234_0_4194304"). Backends:
// memory (unit tests), file (local directory, atomic writes via temp+rename).
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
  // Deleting a missing object is not an error.
  virtual Status Delete(const std::string& key) = 0;
  // ENOENT when missing.
  virtual Result<ObjectInfo> Head(const std::string& key) = 0;
  // Lists keys with the prefix that sort after start_after, ascending, at most
  // limit of them; *out is replaced and *more (if not null) tells whether
  // further matching keys follow.
  virtual Status List(const std::string& prefix, const std::string& start_after, size_t limit,
                      std::vector<ObjectInfo>* out, bool* more) = 0;
};

struct StoreOptions {
  std::string storage = "file";  // file | memory
  std::string bucket;            // directory for file; name for memory
  // file: fsync each object (and its directory) before Put returns. Without it
  // a completed Put survives a process crash (the data is in the page cache)
  // but not necessarily a power loss or kernel crash.
  bool fsync = false;
};

// Builds a store (without creating it); EINVAL for an unknown storage type or
// an empty bucket for file. Each memory store is a new, empty, private map.
Result<std::unique_ptr<ObjectStore>> Open(const StoreOptions& opts);

}  // namespace tessera::object
