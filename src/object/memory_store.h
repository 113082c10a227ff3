// In-memory ObjectStore for unit tests: a sorted map from key to contents.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "object/object_store.h"

namespace tessera::object {

// Thread-safe. Contents are immutable shared buffers, so Get copies its range
// outside the lock and a concurrent Put replaces the object atomically.
class MemoryStore final : public ObjectStore {
 public:
  explicit MemoryStore(std::string name) : name_(std::move(name)) {}

  std::string Describe() const override { return "memory://" + name_ + "/"; }
  Status Create() override { return Status::OK(); }
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Status Delete(const std::string& key) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<ObjectInfo>* out, bool* more) override;

 private:
  struct Object {
    std::shared_ptr<const std::string> data;
    int64_t mtime_sec = 0;
  };

  const std::string name_;  // immutable
  std::mutex mu_;
  std::map<std::string, Object> objects_;  // guarded by mu_
};

}  // namespace tessera::object
