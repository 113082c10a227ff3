// Compaction: rewrites a chunk whose slice list has grown long (many small
// overwrites) into a few fresh slices that read exactly the same, then swaps
// them in with Meta::CompactChunk. Readers are never blocked: they keep
// reading the old slices until they re-read the list (a reader whose objects
// vanish re-reads it, see FileData::Read); writes that commit meanwhile are
// appended after the compacted prefix and survive.
#pragma once

#include <cstdint>

#include "chunk/chunk_store.h"
#include "meta/meta.h"

namespace tessera::vfs {

struct CompactResult {
  uint32_t slices_before = 0;
  uint32_t slices_after = 0;
  bool changed = false;
  // Set when a background compaction found the chunk not worth rewriting
  // yet: the record count at which asking again may find it worth it.
  uint32_t retry_at = 0;
};

// Compacts chunk `chunk_index` of inode `ino` if it has at least
// `min_slices` slices. EAGAIN if the chunk changed underneath (try later).
Status CompactChunk(meta::Meta* meta, chunk::ChunkStore* store, meta::Ino ino, uint32_t chunk_index,
                    uint32_t min_slices, CompactResult* result);

}  // namespace tessera::vfs
