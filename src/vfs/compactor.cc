#include "vfs/compactor.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/log.h"

namespace tessera::vfs {

using chunk::Slice;

namespace {
// Data pieces closer than this are merged into one new slice, the gap
// written as zeros; farther apart they become separate slices.
constexpr uint32_t kMaxZeroGap = 64u << 10;
// A background compaction (min_slices > 2) that would rewrite more than this
// many bytes per record in the list waits, unless the slices it holds are at
// least twice the visible data (space to reclaim): a chunk that random small
// writes filled (a record per write, each a piece of a packed slice) is
// rewritten once it holds ~8,192 records, not at every commit (64 MiB
// written again for each 2,000 writes of 4 KiB). Explicit compactions
// (`tessera compact`, `gc --compact`: min_slices 2) always run.
constexpr uint64_t kMaxRewritePerSlice = 8u << 10;
}  // namespace

Status CompactChunk(meta::Meta* meta, chunk::ChunkStore* store, meta::Ino ino, uint32_t chunk_index,
                    uint32_t min_slices, CompactResult* result) {
  *result = CompactResult{};
  std::vector<Slice> slices;
  RETURN_IF_ERROR(meta->Read(ino, chunk_index, &slices));
  result->slices_before = result->slices_after = uint32_t(slices.size());
  if (slices.size() < std::max<uint32_t>(min_slices, 2)) return Status::OK();

  // Runs of visible data; holes and gaps between runs read as zeros anyway
  // once nothing older lies underneath.
  std::vector<Slice> pieces;
  for (const Slice& s : chunk::BuildView(slices))
    if (s.id != 0) pieces.push_back(s);
  struct Run {
    uint32_t pos, end;
    std::vector<Slice> pieces;
  };
  std::vector<Run> runs;
  for (const Slice& p : pieces) {
    if (!runs.empty() && p.pos - runs.back().end <= kMaxZeroGap) {
      runs.back().end = p.pos + p.len;
      runs.back().pieces.push_back(p);
    } else {
      runs.push_back(Run{p.pos, p.pos + p.len, {p}});
    }
  }

  if (min_slices > 2) {
    uint64_t rewrite = 0, visible = 0, held = 0;
    for (const Run& run : runs) rewrite += run.end - run.pos;
    for (const Slice& p : pieces) visible += p.len;
    std::unordered_set<uint64_t> ids;
    for (const Slice& s : slices)
      if (s.id != 0 && ids.insert(s.id).second) held += s.size;
    if (rewrite > kMaxRewritePerSlice * slices.size() && held < 2 * visible) {  // not worth it yet
      // Worth it at rewrite / 8 KiB records, or sooner once the slices held
      // reach twice the visible data, which grows with the records: asking
      // again after a quarter more of them bounds the wasted reads of the
      // list to a geometric series.
      const uint64_t by_rewrite = rewrite / kMaxRewritePerSlice + 1;
      const uint64_t by_growth = slices.size() + slices.size() / 4 + 1;
      result->retry_at = uint32_t(std::min<uint64_t>({by_rewrite, by_growth, UINT32_MAX}));
      return Status::OK();
    }
  }

  const uint32_t bs = store->config().block_size;
  std::vector<Slice> replacement;
  auto abort = [&] {
    for (const Slice& r : replacement) (void)store->DeleteSlice(r.id, r.size);
  };
  std::string data;
  for (const Run& run : runs) {
    uint32_t len = run.end - run.pos;
    data.assign(len, '\0');
    for (const Slice& p : run.pieces) {
      Status st = store->ReadSlice(p.id, p.size, p.off, p.len, data.data() + (p.pos - run.pos));
      if (!st.ok()) {
        abort();
        return st.With("compaction read");
      }
    }
    auto id = meta->NewSliceId();
    if (!id.ok()) {
      abort();
      return id.status();
    }
    for (uint32_t off = 0, k = 0; off < len; off += bs, ++k) {
      Status st = store->UploadBlock(*id, k, std::string_view(data).substr(off, std::min(bs, len - off)));
      if (!st.ok()) {
        (void)store->DeleteSlice(*id, len);
        abort();
        return st.With("compaction upload");
      }
    }
    replacement.push_back(Slice{run.pos, *id, len, 0, len});
  }
  Status st = meta->CompactChunk(ino, chunk_index, slices, replacement);
  if (!st.ok()) {
    // The replacement is certainly unreferenced unless the commit's outcome
    // is unknown: then the file may now read from it, and its objects stay
    // (gc deletes them if nothing references them).
    if (!st.outcome_unknown()) abort();
    return st;
  }
  result->slices_after = uint32_t(replacement.size());
  result->changed = true;
  LOG_DEBUG("compacted inode {} chunk {}: {} -> {} slices", ino, chunk_index, slices.size(), replacement.size());
  return Status::OK();
}

}  // namespace tessera::vfs
