#include "chunk/layout.h"

#include <cstdint>
#include <iterator>
#include <map>

namespace tessera::chunk {
namespace {

void PutBE(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t GetBE(std::string_view data, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | uint8_t(data[pos + size_t(i)]);
  return v;
}

uint64_t End(const Slice& s) { return uint64_t(s.pos) + s.len; }

// off + n within a slice's data. Past 2^32 (only a damaged record, whose
// off + len exceeds its size, gets there) it stays at UINT32_MAX, still
// beyond the data, so ChunkStore::ReadSlice refuses the piece rather than
// wrap around to bytes at its start.
uint32_t Advance(uint32_t off, uint64_t n) { return uint32_t(std::min<uint64_t>(uint64_t(off) + n, UINT32_MAX)); }

}  // namespace

void AppendSlice(std::string* out, const Slice& s) {
  PutBE(out, s.pos, 4);
  PutBE(out, s.id, 8);
  PutBE(out, s.size, 4);
  PutBE(out, s.off, 4);
  PutBE(out, s.len, 4);
}

std::vector<Slice> DecodeSlices(std::string_view data) {
  std::vector<Slice> out;
  out.reserve(data.size() / kSliceRecordSize);
  for (size_t p = 0; p + kSliceRecordSize <= data.size(); p += kSliceRecordSize) {
    out.push_back(Slice{uint32_t(GetBE(data, p, 4)), GetBE(data, p + 4, 8), uint32_t(GetBE(data, p + 12, 4)),
                        uint32_t(GetBE(data, p + 16, 4)), uint32_t(GetBE(data, p + 20, 4))});
  }
  return out;
}

std::vector<Slice> BuildView(const std::vector<Slice>& slices) {
  std::map<uint32_t, Slice> view;  // by pos; pieces never overlap
  for (Slice s : slices) {
    // A slice never crosses its chunk's end (docs/format.md): of a damaged
    // record that does, only the part inside the chunk can show.
    if (s.len == 0 || s.pos >= kChunkSize) continue;
    s.len = uint32_t(std::min<uint64_t>(s.len, kChunkSize - s.pos));
    const uint64_t begin = s.pos, end = End(s);
    // First piece ending after begin: the one starting at or before begin, if
    // it reaches past it, else the first one starting after begin.
    auto it = view.upper_bound(s.pos);
    if (it != view.begin() && End(std::prev(it)->second) > begin) --it;
    while (it != view.end() && it->second.pos < end) {
      const Slice old = it->second;
      it = view.erase(it);
      if (old.pos < begin) {  // keep the part left of s
        Slice left = old;
        left.len = uint32_t(begin - old.pos);
        view.emplace(left.pos, left);
      }
      if (End(old) > end) {  // keep the part right of s
        Slice right = old;
        right.pos = uint32_t(end);
        right.off = Advance(old.off, end - old.pos);
        right.len = uint32_t(End(old) - end);
        view.emplace(right.pos, right);
      }
    }
    view.emplace(s.pos, s);
  }
  std::vector<Slice> out;
  out.reserve(view.size());
  for (const auto& [pos, piece] : view) out.push_back(piece);
  return out;
}

std::string BlockKey(uint64_t id, uint32_t index, uint32_t len) {
  return "chunks/" + std::to_string(id / 1000 / 1000) + "/" + std::to_string(id / 1000) + "/" +
         std::to_string(id) + "_" + std::to_string(index) + "_" + std::to_string(len);
}

bool ParseBlockKey(const std::string& key, uint64_t* id, uint32_t* index, uint32_t* len) {
  const size_t slash = key.rfind('/');
  if (key.rfind("chunks/", 0) != 0 || slash == std::string::npos) return false;
  uint64_t v[3] = {0, 0, 0};
  int field = 0;
  bool digits = false;
  for (size_t i = slash + 1; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '_' && digits && field < 2) {
      ++field;
      digits = false;
    } else if (c >= '0' && c <= '9' && v[field] <= (UINT64_MAX - 9) / 10) {
      v[field] = v[field] * 10 + uint64_t(c - '0');
      digits = true;
    } else {
      return false;
    }
  }
  if (field != 2 || !digits || v[1] > UINT32_MAX || v[2] > UINT32_MAX) return false;
  *id = v[0];
  *index = uint32_t(v[1]);
  *len = uint32_t(v[2]);
  return BlockKey(*id, *index, *len) == key;
}

}  // namespace tessera::chunk
