// Reads and writes slice data as block objects in an ObjectStore.
// Thread-safe: many readers and writers at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "chunk/layout.h"
#include "common/status.h"
#include "object/object_store.h"

namespace tessera::chunk {

struct StoreConfig {
  uint32_t block_size = kDefaultBlockSize;
};

// Accumulates the bytes of one new slice and uploads them as blocks: block i
// of a slice of `size` bytes is the object BlockKey(id, i, BlockLen(size, i)).
// Thread-safe (calls are serialized). A writer must end with Finish or Abort;
// one dropped without either leaves its uploaded blocks for GC. Calls after
// Finish or Abort return EINVAL.
class SliceWriter {
 public:
  virtual ~SliceWriter() = default;
  virtual uint64_t id() const = 0;
  // Writes n bytes at offset off within the slice (may overwrite earlier bytes
  // not yet uploaded; bytes never written read as zeros).
  virtual Status WriteAt(const char* data, size_t n, uint32_t off) = 0;
  // Uploads every complete block that lies entirely below `offset`; those
  // blocks can no longer be written (EINVAL), and the slice's final length
  // must be at least their end.
  virtual Status FlushTo(uint32_t offset) = 0;
  // Uploads everything up to `length` (the slice's final size; bytes written
  // beyond it are dropped). After this the slice can be committed to the
  // metadata engine. On failure it may be retried, or the writer aborted.
  virtual Status Finish(uint32_t length) = 0;
  // Deletes whatever was uploaded (the slice will never be committed).
  virtual void Abort() = 0;
};

// Stateless apart from its configuration; `store` must outlive it and every
// writer it made. block_size must be the one the slices were written with.
class ChunkStore {
 public:
  ChunkStore(object::ObjectStore* store, StoreConfig config);
  ~ChunkStore();

  // A writer for a fresh slice id (allocated by the metadata engine).
  std::unique_ptr<SliceWriter> NewWriter(uint64_t id);
  // Reads [off, off+len) of slice (id, size) into buf; EINVAL unless
  // off+len <= size. Id 0 (a hole) reads as zeros. A missing or short block
  // is EIO: the slice was committed, so its data is lost.
  Status ReadSlice(uint64_t id, uint32_t size, uint32_t off, uint32_t len, char* buf);
  // Deletes every block object of slice (id, size); missing blocks are fine.
  // Tries every block and returns the first error.
  Status DeleteSlice(uint64_t id, uint32_t size);

  const StoreConfig& config() const { return config_; }
  object::ObjectStore* store() const { return store_; }

 private:
  // Reads bytes [off, off+n) of block `index` (block_len bytes) of slice id:
  // the single point where a block cache would go.
  Status ReadBlock(uint64_t id, uint32_t index, uint32_t block_len, uint32_t off, uint32_t n, char* buf);

  object::ObjectStore* store_;
  StoreConfig config_;
};

}  // namespace tessera::chunk
