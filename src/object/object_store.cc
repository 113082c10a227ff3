#include "object/object_store.h"

#include <filesystem>
#include <system_error>

#include "object/file_store.h"
#include "object/memory_store.h"

namespace tessera::object {

Result<std::unique_ptr<ObjectStore>> Open(const StoreOptions& opts) {
  if (opts.storage == "memory") return std::unique_ptr<ObjectStore>(new MemoryStore(opts.bucket));
  if (opts.storage != "file") {
    return Status::Err(EINVAL, "unknown storage type '" + opts.storage + "' (expected file or memory)");
  }
  if (opts.bucket.empty()) return Status::Err(EINVAL, "file storage needs a directory as bucket");
  std::error_code ec;
  std::string root = std::filesystem::absolute(opts.bucket, ec).lexically_normal().string();
  if (ec) return Status::Err(ec.value(), "resolve directory " + opts.bucket);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (root == "/") return Status::Err(EINVAL, "refusing to use / as the file storage directory");
  return std::unique_ptr<ObjectStore>(new FileStore(std::move(root), opts.fsync));
}

}  // namespace tessera::object
