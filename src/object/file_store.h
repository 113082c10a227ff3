// ObjectStore over a local directory: key "a/b/c" is the file ROOT/a/b/c.
//
// Put writes a temp file ".tmp.<basename>.<random>" in the target's directory
// and renames it over the target, so readers see the old or the new object,
// never a partial one; a crash leaves at most a stray temp file, which List
// ignores. Durability is set by StoreOptions::fsync.
//
// Keys are relative paths: non-empty components other than "." and "..",
// none starting with ".tmp." (EINVAL otherwise). Since keys are paths, one key
// cannot be a directory prefix of another ("a" and "a/b"): the second Put
// fails with ENOTDIR or EISDIR. Delete leaves empty directories behind.
//
// Thread-safe, also across processes sharing the directory: the only state
// is the immutable root path.
#pragma once

#include <string>
#include <vector>

#include "object/object_store.h"

namespace tessera::object {

class FileStore final : public ObjectStore {
 public:
  // root: absolute, normalized, without trailing '/', not "/" itself.
  FileStore(std::string root, bool fsync);

  std::string Describe() const override { return "file://" + root_ + "/"; }
  Status Create() override;
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Status Delete(const std::string& key) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<ObjectInfo>* out, bool* more) override;

 private:
  std::string Path(const std::string& key) const { return root_ + "/" + key; }
  // Appends to *keys every object key under directory rel_dir ("" or ending
  // in '/') that starts with prefix and sorts after start_after.
  Status Walk(const std::string& rel_dir, const std::string& prefix, const std::string& start_after,
              std::vector<std::string>* keys) const;

  const std::string root_;
  const bool fsync_;
};

}  // namespace tessera::object
