// Data layout (docs/format.md): a file is a sequence of chunks of kChunkSize
// bytes; each chunk holds an ordered list of slices, later slices shadowing
// earlier ones where they overlap; each slice's bytes are stored as immutable
// blocks of at most block_size bytes, one object per block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::chunk {

constexpr uint64_t kChunkSize = 64ull << 20;  // 64 MiB
constexpr uint32_t kDefaultBlockSize = 4u << 20;
constexpr size_t kSliceRecordSize = 24;

// One entry of a chunk's slice list.
//   pos  where the visible bytes start, relative to the chunk start
//   id   slice id; 0 means a hole (reads as zeros, no objects)
//   size total length of the slice's data (determines its blocks)
//   off  first visible byte within the slice's data
//   len  number of visible bytes
struct Slice {
  uint32_t pos = 0;
  uint64_t id = 0;
  uint32_t size = 0;
  uint32_t off = 0;
  uint32_t len = 0;
  bool operator==(const Slice&) const = default;
};

// 24-byte big-endian record: pos u32, id u64, size u32, off u32, len u32.
void AppendSlice(std::string* out, const Slice& s);
// Decodes a concatenation of records (trailing partial record ignored).
std::vector<Slice> DecodeSlices(std::string_view data);

// Resolves a slice list (in append order) into the visible, non-overlapping
// pieces, sorted by pos. Gaps between pieces are holes. Pieces with id 0 are
// kept (explicit holes) so callers can tell them apart from nothing written.
std::vector<Slice> BuildView(const std::vector<Slice>& slices);

// Object key of block `index` (of length `len`) of slice `id`:
//   "chunks/{id/1000/1000}/{id/1000}/{id}_{index}_{len}"
std::string BlockKey(uint64_t id, uint32_t index, uint32_t len);
// The reverse: false unless key is exactly BlockKey(*id, *index, *len).
bool ParseBlockKey(const std::string& key, uint64_t* id, uint32_t* index, uint32_t* len);

// Number of blocks of a slice and the length of block i.
inline uint32_t BlockCount(uint32_t size, uint32_t block_size) {
  return size == 0 ? 0 : uint32_t((uint64_t(size) + block_size - 1) / block_size);  // no wrap near 4 GiB
}
inline uint32_t BlockLen(uint32_t size, uint32_t block_size, uint32_t i) {
  uint64_t start = uint64_t(i) * block_size;
  return start >= size ? 0 : uint32_t(std::min<uint64_t>(block_size, size - start));
}

}  // namespace tessera::chunk
