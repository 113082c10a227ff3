#include "object/memory_store.h"

#include <algorithm>
#include <ctime>

namespace tessera::object {

Status MemoryStore::Put(const std::string& key, std::string_view data) {
  Object obj{std::make_shared<const std::string>(data), int64_t(std::time(nullptr))};
  std::lock_guard lock(mu_);
  objects_[key] = std::move(obj);
  return Status::OK();
}

Result<std::string> MemoryStore::Get(const std::string& key, int64_t off, int64_t len) {
  if (off < 0) return Status::Err(EINVAL, "get " + key + ": negative offset");
  std::shared_ptr<const std::string> data;
  {
    std::lock_guard lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return Status::Err(ENOENT, "object " + key + " not found");
    data = it->second.data;
  }
  int64_t size = int64_t(data->size());
  if (off >= size) return std::string();
  int64_t n = len < 0 ? size - off : std::min(len, size - off);
  return data->substr(size_t(off), size_t(n));
}

Status MemoryStore::Delete(const std::string& key) {
  std::lock_guard lock(mu_);
  objects_.erase(key);
  return Status::OK();
}

Result<ObjectInfo> MemoryStore::Head(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::Err(ENOENT, "object " + key + " not found");
  return ObjectInfo{key, int64_t(it->second.data->size()), it->second.mtime_sec};
}

Status MemoryStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                         std::vector<ObjectInfo>* out, bool* more) {
  out->clear();
  bool has_more = false;
  std::lock_guard lock(mu_);
  auto it = start_after < prefix ? objects_.lower_bound(prefix) : objects_.upper_bound(start_after);
  for (; it != objects_.end() && it->first.starts_with(prefix); ++it) {
    if (out->size() == limit) {
      has_more = true;
      break;
    }
    out->push_back(ObjectInfo{it->first, int64_t(it->second.data->size()), it->second.mtime_sec});
  }
  if (more) *more = has_more;
  return Status::OK();
}

}  // namespace tessera::object
