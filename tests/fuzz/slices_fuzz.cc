// Chunk slice lists (24-byte records, docs/format.md) and the view readers
// and the compactor build from them (chunk::BuildView).
//   - DecodeSlices: every whole record decodes, and re-encodes to its bytes.
//   - BuildView, checked against a reference model over 64-bit positions:
//     pieces sorted, non-overlapping, not empty, within the chunk
//     [0, kChunkSize) (a stored record reaching past it is corrupt: only its
//     part inside the chunk can show); every byte shows the newest slice
//     covering it, at the right offset within that slice's data; a piece
//     showing bytes beyond its slice's data (a corrupt record) still says so
//     (off + len > size, which ChunkStore::ReadSlice refuses) instead of
//     wrapping around to other bytes.
//   - BlockCount/BlockLen cover each slice's data exactly.
#include <algorithm>
#include <map>
#include <vector>

#include "chunk/layout.h"
#include "fuzz_util.h"

using namespace tessera;
using tessera::chunk::Slice;

namespace {

struct Expected {
  bool covered = false;
  uint64_t id = 0;
  uint32_t size = 0;
  uint64_t off = 0;  // offset within the slice's data of the interval's first byte (64-bit: no wrap)
};

void CheckView(const std::vector<Slice>& slices, const std::vector<Slice>& view) {
  constexpr uint64_t kChunk = chunk::kChunkSize;
  // Shape.
  for (size_t i = 0; i < view.size(); ++i) {
    const Slice& p = view[i];
    FUZZ_CHECK(p.len > 0);
    FUZZ_CHECK(uint64_t(p.pos) + p.len <= kChunk);
    if (i > 0) FUZZ_CHECK(uint64_t(view[i - 1].pos) + view[i - 1].len <= p.pos);
  }
  // The model: slices clipped to the chunk, newest wins.
  struct Clip {
    uint64_t begin, end;
    const Slice* s;
  };
  std::vector<Clip> clips;
  std::vector<uint64_t> bounds;
  for (const Slice& s : slices) {
    const uint64_t b = s.pos, e = std::min<uint64_t>(uint64_t(s.pos) + s.len, kChunk);
    if (b >= e) continue;
    clips.push_back({b, e, &s});
    bounds.push_back(b);
    bounds.push_back(e);
  }
  for (const Slice& p : view) {  // so every piece edge is an interval edge too
    bounds.push_back(p.pos);
    bounds.push_back(uint64_t(p.pos) + p.len);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const uint64_t x = bounds[k], y = bounds[k + 1];
    Expected want;
    for (auto it = clips.rbegin(); it != clips.rend(); ++it) {
      if (it->begin <= x && x < it->end) {
        want = {true, it->s->id, it->s->size, uint64_t(it->s->off) + (x - it->begin)};
        break;
      }
    }
    // The piece holding x, if any.
    auto it = std::upper_bound(view.begin(), view.end(), x, [](uint64_t v, const Slice& p) { return v < p.pos; });
    const Slice* got = nullptr;
    if (it != view.begin() && uint64_t(std::prev(it)->pos) + std::prev(it)->len > x) got = &*std::prev(it);
    if (!want.covered) {
      FUZZ_CHECK(got == nullptr);
      continue;
    }
    FUZZ_CHECK(got != nullptr);
    FUZZ_CHECK(uint64_t(got->pos) + got->len >= y);
    FUZZ_CHECK(got->id == want.id && got->size == want.size);
    const uint64_t got_off = uint64_t(got->off) + (x - got->pos);
    if (want.off + (y - x) <= want.size) {
      FUZZ_CHECK(got_off == want.off);  // valid bytes: exactly the right ones
    } else {
      // Bytes beyond the slice's data: the piece must not claim valid ones.
      FUZZ_CHECK(got_off == want.off || got->off == UINT32_MAX);
      FUZZ_CHECK(uint64_t(got->off) + got->len > got->size);
    }
  }
}

void CheckBlocks(const Slice& s, uint32_t bs) {
  if (s.size / bs > 1024) return;  // too many blocks to walk
  const uint32_t n = chunk::BlockCount(s.size, bs);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = chunk::BlockLen(s.size, bs, i);
    FUZZ_CHECK(len > 0 && len <= bs);
    FUZZ_CHECK(i + 1 == n || len == bs);
    total += len;
  }
  FUZZ_CHECK(total == s.size);
  FUZZ_CHECK(chunk::BlockLen(s.size, bs, n) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * chunk::kSliceRecordSize) return 0;  // the model is quadratic
  const std::string_view raw = fuzz::AsView(data, size);
  const std::vector<Slice> slices = chunk::DecodeSlices(raw);
  FUZZ_CHECK(slices.size() == size / chunk::kSliceRecordSize);
  std::string enc;
  for (const Slice& s : slices) chunk::AppendSlice(&enc, s);
  FUZZ_CHECK(enc == raw.substr(0, slices.size() * chunk::kSliceRecordSize));

  const std::vector<Slice> view = chunk::BuildView(slices);
  CheckView(slices, view);
  // Building the view of a view changes nothing.
  FUZZ_CHECK(chunk::BuildView(view) == view);

  for (const Slice& s : slices) {
    // Block sizes a volume can have (64 KiB .. 16 MiB), and a few odd ones.
    for (uint32_t bs : {1u, 4095u, 65536u, 4u << 20, 16u << 20, uint32_t(chunk::kChunkSize)}) CheckBlocks(s, bs);
    if (s.pos % 4096 != 0) CheckBlocks(s, s.pos);
  }
  return 0;
}
