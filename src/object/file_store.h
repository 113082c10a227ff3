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
// Ranged reads keep their object's file open (random 4 KiB reads of a block
// paid an open and a close each: 10% of a mount's CPU): a direct-mapped
// table of open files, each checked with fstat before use, so an object
// deleted or replaced since (in this process or another) is opened again by
// name (its link count is 0). A kept file of an object another process
// deleted keeps its space until its slot is reused or it is idle for
// kIdleSec.
//
// Thread-safe, also across processes sharing the directory.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"

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
  Result<size_t> GetInto(const std::string& key, int64_t off, size_t len, char* dst) override;
  Status Delete(const std::string& key) override;
  // True unless the directory is on a network or FUSE file system (NFS,
  // SMB, Ceph, 9p, Lustre, another FUSE mount...), where a read is a round trip.
  bool cheap_ranges() const override { return local_; }
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<ObjectInfo>* out, bool* more) override;

 private:
  bool local_ = true;  // set by the constructor (statfs of the root)
  std::string Path(const std::string& key) const { return root_ + "/" + key; }
  // Reads [off, off+len) (len < 0: to the end) into room(n), asked once
  // for the n bytes the object has there unless there are none: the bytes read.
  Result<size_t> ReadRange(const std::string& key, int64_t off, int64_t len, const std::function<char*(size_t)>& room);
  // Appends to *keys every object key under directory rel_dir ("" or ending
  // in '/') that starts with prefix and sorts after start_after.
  Status Walk(const std::string& rel_dir, const std::string& prefix, const std::string& start_after,
              std::vector<std::string>* keys) const;

  // The table of open files for ranged reads.
  struct OpenFile {
    std::string key;
    std::shared_ptr<UniqueFd> fd;
    int64_t used_sec = 0;  // steady clock
  };
  static constexpr int64_t kIdleSec = 10;
  std::shared_ptr<UniqueFd> CachedFd(const std::string& key);
  void KeepFd(const std::string& key, std::shared_ptr<UniqueFd> fd);
  void ForgetFd(const std::string& key);
  size_t Slot(const std::string& key) const;
  void DropIdleLocked(int64_t now_sec);  // requires fds_mu_; sweeps at most every kIdleSec

  const std::string root_;
  const bool fsync_;
  std::mutex fds_mu_;
  std::vector<OpenFile> fds_;  // guarded by fds_mu_; fixed size (empty: none kept)
  int64_t swept_sec_ = 0;      // guarded by fds_mu_
};

}  // namespace tessera::object
