#include "chunk/chunk_store.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"

namespace tessera::chunk {
namespace {

// Buffers a slice's bytes per block and uploads blocks in index order: blocks
// [0, uploaded_) are in the store and immutable, later ones live in buffers_.
// Thread-safe: one mutex serializes all calls (uploads happen under it).
class SliceWriterImpl final : public SliceWriter {
 public:
  SliceWriterImpl(object::ObjectStore* store, uint32_t block_size, uint64_t id)
      : store_(store), block_size_(block_size), id_(id) {}

  uint64_t id() const override { return id_; }

  Status WriteAt(const char* data, size_t n, uint32_t off) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": write after Finish or Abort");
    if (uint64_t(off) + n > kChunkSize) return Status::Err(EINVAL, Name() + ": write beyond chunk size");
    if (n > 0 && off < uint64_t(uploaded_) * block_size_) {
      return Status::Err(EINVAL, Name() + ": write at " + std::to_string(off) + " into an uploaded block");
    }
    while (n > 0) {
      const uint32_t index = off / block_size_, in_block = off % block_size_;
      const size_t take = std::min<size_t>(n, block_size_ - in_block);
      std::string& buf = buffers_[index];
      if (buf.size() < in_block + take) buf.resize(in_block + take);  // gaps read as zeros
      std::memcpy(buf.data() + in_block, data, take);
      data += take;
      n -= take;
      off += uint32_t(take);
    }
    return Status::OK();
  }

  Status FlushTo(uint32_t offset) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": flush after Finish or Abort");
    if (offset > kChunkSize) return Status::Err(EINVAL, Name() + ": flush beyond chunk size");
    const uint32_t full = offset / block_size_;
    return UploadUpTo(full, uint64_t(full) * block_size_);
  }

  Status Finish(uint32_t length) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": Finish after Finish or Abort");
    if (length > kChunkSize) return Status::Err(EINVAL, Name() + ": length beyond chunk size");
    if (length < uint64_t(uploaded_) * block_size_) {
      return Status::Err(EINVAL, Name() + ": length " + std::to_string(length) + " is below flushed data");
    }
    RETURN_IF_ERROR(UploadUpTo(BlockCount(length, block_size_), length));
    buffers_.clear();  // bytes written beyond length are dropped
    done_ = true;
    return Status::OK();
  }

  void Abort() override {
    std::lock_guard lock(mu_);
    // Best effort: a block that cannot be deleted is an orphan for GC to find.
    for (const std::string& key : uploaded_keys_) {
      Status st = store_->Delete(key);
      if (!st.ok()) LOG_WARN("abort {}: cannot delete block {}: {}", Name(), key, st.ToString());
    }
    uploaded_keys_.clear();
    buffers_.clear();
    done_ = true;
  }

 private:
  std::string Name() const { return "slice " + std::to_string(id_); }

  // Uploads blocks [uploaded_, end) of a slice of `size` bytes. Stops at the
  // first failure; a retry resumes there.
  Status UploadUpTo(uint32_t end, uint64_t size) {
    for (; uploaded_ < end; ++uploaded_) {
      const uint32_t len = BlockLen(uint32_t(size), block_size_, uploaded_);
      std::string& buf = buffers_[uploaded_];
      buf.resize(len);
      std::string key = BlockKey(id_, uploaded_, len);
      RETURN_IF_ERROR(store_->Put(key, buf).With("upload " + Name()));
      uploaded_keys_.push_back(std::move(key));
      buffers_.erase(uploaded_);
    }
    return Status::OK();
  }

  object::ObjectStore* const store_;
  const uint32_t block_size_;
  const uint64_t id_;

  std::mutex mu_;
  std::map<uint32_t, std::string> buffers_;  // guarded by mu_; block index -> bytes so far
  uint32_t uploaded_ = 0;                    // guarded by mu_
  std::vector<std::string> uploaded_keys_;   // guarded by mu_
  bool done_ = false;                        // guarded by mu_; after Finish or Abort
};

}  // namespace

ChunkStore::ChunkStore(object::ObjectStore* store, StoreConfig config) : store_(store), config_(config) {}

ChunkStore::~ChunkStore() = default;

std::unique_ptr<SliceWriter> ChunkStore::NewWriter(uint64_t id) {
  return std::make_unique<SliceWriterImpl>(store_, config_.block_size, id);
}

Status ChunkStore::ReadSlice(uint64_t id, uint32_t size, uint32_t off, uint32_t len, char* buf) {
  if (uint64_t(off) + len > size) {
    return Status::Err(EINVAL, "read [" + std::to_string(off) + ", +" + std::to_string(len) +
                                   ") beyond slice " + std::to_string(id) + " of size " + std::to_string(size));
  }
  if (id == 0) {  // a hole
    std::memset(buf, 0, len);
    return Status::OK();
  }
  const uint32_t bs = config_.block_size;
  while (len > 0) {
    const uint32_t index = off / bs, in_block = off % bs;
    const uint32_t block_len = BlockLen(size, bs, index);
    const uint32_t n = std::min(len, block_len - in_block);
    RETURN_IF_ERROR(ReadBlock(id, index, block_len, in_block, n, buf));
    buf += n;
    off += n;
    len -= n;
  }
  return Status::OK();
}

Status ChunkStore::ReadBlock(uint64_t id, uint32_t index, uint32_t block_len, uint32_t off, uint32_t n,
                             char* buf) {
  const std::string key = BlockKey(id, index, block_len);
  Result<std::string> data = store_->Get(key, off, n);
  if (!data.ok()) {
    // The slice is committed, so a missing block is lost data, not a missing file.
    if (data.status().not_found()) return Status::Err(EIO, "block " + key + " is missing");
    return data.status().With("read block " + key);
  }
  if (data->size() != n) {
    return Status::Err(EIO, "block " + key + " is short: read " + std::to_string(data->size()) + " of " +
                                std::to_string(n) + " bytes at " + std::to_string(off));
  }
  std::memcpy(buf, data->data(), n);
  return Status::OK();
}

Status ChunkStore::DeleteSlice(uint64_t id, uint32_t size) {
  if (id == 0) return Status::OK();
  Status first;
  for (uint32_t i = 0, count = BlockCount(size, config_.block_size); i < count; ++i) {
    Status st = store_->Delete(BlockKey(id, i, BlockLen(size, config_.block_size, i)));
    if (!st.ok() && first.ok()) first = st.With("delete slice " + std::to_string(id));
  }
  return first;
}

}  // namespace tessera::chunk
