// Pending writes of one file, kept as non-overlapping byte ranges per chunk.
// Newer writes overwrite older bytes in place, so random small writes into a
// region coalesce into one range (and later one slice) before upload.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessera::vfs {

class WriteBuffer {
 public:
  // block: the volume's block size; a range that grows by appends to 64 KiB
  // (a stream's) reserves room for a whole block then, so it is not copied
  // as it grows further (0: it reserves twice its size instead).
  explicit WriteBuffer(uint32_t block = 0) : block_(block) {}

  // One contiguous range of pending bytes within a chunk.
  using Ranges = std::map<uint32_t, std::string>;  // pos in chunk -> bytes

  // Records `n` bytes written at file offset `off` (may span chunks).
  // Returns whether the last byte written was not pending before (the write
  // extends what is buffered there, as a stream's appends do).
  bool Write(uint64_t off, const char* data, size_t n);
  // Copies pending bytes overlapping [off, off+n) over buf (buf[0] = off).
  void Overlay(uint64_t off, size_t n, char* buf) const;
  // Drops pending bytes at or beyond `length` (after a truncate).
  void TruncateTo(uint64_t length);
  // If a range of chunk `index` ends exactly at `end_pos` (a write just
  // appended to it) and holds at least `block` bytes, removes its first
  // floor(size / block) * block bytes into *out, sets *pos to where they
  // start and returns true: the full blocks of a sequential stream, ready to
  // upload while writing goes on.
  bool CutFullBlocks(uint32_t index, uint32_t end_pos, uint32_t block, uint32_t* pos, std::string* out);
  // Whether the byte at file offset `off` is pending.
  bool Covers(uint64_t off) const;
  // End of the furthest pending byte (0 when empty).
  uint64_t End() const;
  size_t bytes() const { return bytes_; }
  bool empty() const { return chunks_.empty(); }
  const std::map<uint32_t, Ranges>& chunks() const { return chunks_; }
  // Hands over every pending range and leaves the buffer empty.
  std::map<uint32_t, Ranges> Take();
  void Clear();

 private:
  bool WriteInChunk(uint32_t index, uint32_t pos, const char* data, uint32_t n);
  const uint32_t block_;
  std::map<uint32_t, Ranges> chunks_;  // chunk index -> ranges
  size_t bytes_ = 0;
};

}  // namespace tessera::vfs
