#include "vfs/write_buffer.h"

#include <algorithm>
#include <cstring>

#include "chunk/layout.h"
#include "common/buffer_pool.h"

namespace tessera::vfs {

using chunk::kChunkSize;

namespace {
// A range that grows by appends to this size is taken for a stream's.
constexpr size_t kStreamBytes = BufferPool::kMinBytes;
}  // namespace

bool WriteBuffer::Write(uint64_t off, const char* data, size_t n) {
  bool extends = false;
  while (n > 0) {
    uint32_t index = uint32_t(off / kChunkSize);
    uint32_t pos = uint32_t(off % kChunkSize);
    uint32_t len = uint32_t(std::min<uint64_t>(n, kChunkSize - pos));
    extends = WriteInChunk(index, pos, data, len);
    off += len;
    data += len;
    n -= len;
  }
  return extends;
}

bool WriteBuffer::WriteInChunk(uint32_t index, uint32_t pos, const char* data, uint32_t n) {
  Ranges& ranges = chunks_[index];
  uint64_t start = pos, end = uint64_t(pos) + n;
  // First range that could touch [start, end]: the one starting at or before start.
  auto it = ranges.upper_bound(pos);
  if (it != ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size() >= start) it = prev;
  }
  if (it != ranges.end() && it->first <= start && it->first + it->second.size() >= end) {
    std::memcpy(it->second.data() + (start - it->first), data, n);  // fully inside: overwrite in place
    return false;
  }
  // Merge every range touching [start, end] into one.
  uint64_t new_start = start, new_end = end;
  auto first = it;
  auto last = it;
  bool covered = false;  // the write's last byte was pending already
  while (last != ranges.end() && last->first <= end) {
    new_start = std::min<uint64_t>(new_start, last->first);
    new_end = std::max<uint64_t>(new_end, last->first + last->second.size());
    covered = covered || (last->first < end && last->first + last->second.size() >= end);
    ++last;
  }
  if (first != last && first->first == new_start && std::next(first) == last &&
      first->first + first->second.size() == start) {
    // A stream's append (the common case): the bytes are copied once, with
    // no zero-fill; a range that reaches kStreamBytes reserves a block's
    // room at once so that it is not reallocated and copied as it grows to
    // a block. Below that it grows as any string does: random
    // small writes that happen to touch (an eighth of them, at 12% of a
    // file's blocks written) would otherwise each take a block buffer from
    // the pool for a few KiB, leaving none for the packing and compaction
    // that need them (pool hits fell under 10%).
    std::string& grown = first->second;
    const size_t size = grown.size() + n;
    if (grown.capacity() < size && size >= kStreamBytes) {  // a kept block buffer: no fresh pages to fault in
      std::string room = BufferPool::Default().Take(std::max<size_t>(size, std::max<size_t>(block_, 2 * grown.size())));
      room.append(grown);
      BufferPool::Default().GiveBlock(std::move(grown), block_);  // a string grown to 64 KiB is freed
      grown = std::move(room);
    }
    grown.append(data, n);
    bytes_ += n;
    return true;
  }
  if (first != last && first->first == new_start) {
    // Grow the first range in place: the common sequential append then costs
    // amortised O(n) instead of copying the whole range every time.
    std::string& grown = first->second;
    bytes_ -= grown.size();
    grown.resize(new_end - new_start);
    for (auto r = std::next(first); r != last; ++r) {
      std::memcpy(grown.data() + (r->first - new_start), r->second.data(), r->second.size());
      bytes_ -= r->second.size();
    }
    std::memcpy(grown.data() + (start - new_start), data, n);
    bytes_ += grown.size();
    ranges.erase(std::next(first), last);
    return !covered;
  }
  if (first == last) {  // touches no range: a new one, the bytes copied once
    bytes_ += n;
    // A big write at a block's start (a stream's, most likely) gets a
    // block's room at once; others only their own.
    std::string bytes;
    if (block_ > 0 && start % block_ == 0 && n >= block_ / 16 && n <= block_) bytes = BufferPool::Default().Take(block_);
    bytes.append(data, n);
    ranges.emplace(uint32_t(start), std::move(bytes));
    return true;
  }
  std::string merged(new_end - new_start, '\0');
  for (auto r = first; r != last; ++r) {
    std::memcpy(merged.data() + (r->first - new_start), r->second.data(), r->second.size());
    bytes_ -= r->second.size();
  }
  std::memcpy(merged.data() + (start - new_start), data, n);
  ranges.erase(first, last);
  bytes_ += merged.size();
  ranges.emplace(uint32_t(new_start), std::move(merged));
  return !covered;
}

void WriteBuffer::Overlay(uint64_t off, size_t n, char* buf) const {
  uint64_t end = off + n;
  for (auto cit = chunks_.lower_bound(uint32_t(off / kChunkSize)); cit != chunks_.end(); ++cit) {
    uint64_t base = uint64_t(cit->first) * kChunkSize;
    if (base >= end) break;
    for (const auto& [pos, bytes] : cit->second) {
      uint64_t rs = base + pos, re = rs + bytes.size();
      uint64_t s = std::max(rs, off), e = std::min(re, end);
      if (s < e) std::memcpy(buf + (s - off), bytes.data() + (s - rs), e - s);
    }
  }
}

void WriteBuffer::TruncateTo(uint64_t length) {
  for (auto cit = chunks_.begin(); cit != chunks_.end();) {
    uint64_t base = uint64_t(cit->first) * kChunkSize;
    Ranges& ranges = cit->second;
    for (auto it = ranges.begin(); it != ranges.end();) {
      uint64_t rs = base + it->first, re = rs + it->second.size();
      if (rs >= length) {
        bytes_ -= it->second.size();
        it = ranges.erase(it);
        continue;
      }
      if (re > length) {
        bytes_ -= re - length;
        it->second.resize(length - rs);
      }
      ++it;
    }
    cit = ranges.empty() ? chunks_.erase(cit) : std::next(cit);
  }
}

bool WriteBuffer::CutFullBlocks(uint32_t index, uint32_t end_pos, uint32_t block, uint32_t* pos, std::string* out) {
  auto cit = chunks_.find(index);
  if (cit == chunks_.end() || end_pos == 0) return false;
  Ranges& ranges = cit->second;
  auto it = ranges.upper_bound(end_pos - 1);
  if (it == ranges.begin()) return false;
  --it;
  uint32_t start = it->first;
  size_t size = it->second.size();
  if (start + size != end_pos || size < block) return false;
  size_t n = size / block * block;
  *pos = start;
  if (n == size) {
    *out = std::move(it->second);
    ranges.erase(it);
  } else {
    std::string rest = BufferPool::Default().Take(std::max<size_t>(block, size - n));
    rest.append(it->second, n);
    it->second.resize(n);
    *out = std::move(it->second);
    ranges.erase(it);
    ranges.emplace(uint32_t(start + n), std::move(rest));
  }
  if (ranges.empty()) chunks_.erase(cit);
  bytes_ -= n;
  return true;
}

bool WriteBuffer::Covers(uint64_t off) const {
  auto cit = chunks_.find(uint32_t(off / kChunkSize));
  if (cit == chunks_.end()) return false;
  uint32_t pos = uint32_t(off % kChunkSize);
  auto it = cit->second.upper_bound(pos);
  if (it == cit->second.begin()) return false;
  --it;
  return pos < it->first + it->second.size();
}

uint64_t WriteBuffer::End() const {
  if (chunks_.empty()) return 0;
  const auto& [index, ranges] = *chunks_.rbegin();
  const auto& [pos, bytes] = *ranges.rbegin();
  return uint64_t(index) * kChunkSize + pos + bytes.size();
}

std::map<uint32_t, WriteBuffer::Ranges> WriteBuffer::Take() {
  std::map<uint32_t, Ranges> out;
  out.swap(chunks_);
  bytes_ = 0;
  return out;
}

void WriteBuffer::Clear() {
  chunks_.clear();
  bytes_ = 0;
}

}  // namespace tessera::vfs
