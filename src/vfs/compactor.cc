#include "vfs/compactor.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log.h"
#include "common/metrics.h"

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

// A piece of a new block: `len` bytes of slice (id, size) at `src`, to go
// at `dst` in the block.
struct Fragment {
  uint64_t id;
  uint32_t size, src, len, dst;
};

// Fragments of one slice block that lie closer than this are read with one
// request and copied apart: a chunk that random 4 KiB writes filled holds a
// piece per write, and a packed slice keeps its pieces in position order,
// so a new block's pieces from one packed block lie close together there
// (one request per piece was 90% of compaction's reads, ~8 us each).
constexpr uint32_t kMaxReadGap = 32u << 10;

// Reads every fragment into block, grouping those of one slice block.
// Reorders *fragments; scratch holds a group's span.
Status ReadFragments(chunk::ChunkStore* store, uint32_t bs, std::vector<Fragment>* fragments, std::string* scratch,
                     char* block) {
  auto& f = *fragments;
  std::sort(f.begin(), f.end(), [](const Fragment& a, const Fragment& b) {
    return a.id != b.id ? a.id < b.id : a.src < b.src;
  });
  for (size_t i = 0; i < f.size();) {
    uint32_t span_end = f[i].src + f[i].len;
    size_t j = i + 1;
    for (; j < f.size() && f[j].id == f[i].id && f[j].src / bs == f[i].src / bs &&
           f[j].src <= span_end + kMaxReadGap;
         ++j)
      span_end = std::max(span_end, f[j].src + f[j].len);
    if (j == i + 1) {
      RETURN_IF_ERROR(store->ReadSlice(f[i].id, f[i].size, f[i].src, f[i].len, block + f[i].dst));
    } else {
      const uint32_t span = span_end - f[i].src;
      if (scratch->size() < span) scratch->resize(span);
      RETURN_IF_ERROR(store->ReadSlice(f[i].id, f[i].size, f[i].src, span, scratch->data()));
      for (size_t x = i; x < j; ++x) std::memcpy(block + f[x].dst, scratch->data() + (f[x].src - f[i].src), f[x].len);
    }
    i = j;
  }
  return Status::OK();
}

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
  std::vector<Fragment> fragments;  // of the block being built
  std::string scratch;               // spans read for several fragments at once
  // The objects of a replacement that will not be committed. One that cannot
  // be deleted is counted and left to `tessera gc`, which finds it unreferenced.
  auto discard = [&](uint64_t id, uint32_t size) {
    static metrics::Counter* const leaks =
        metrics::NewCounter("tessera_compaction_leaks_total",
                            "Slices of failed compactions whose objects could not be deleted (left to tessera gc)");
    Status st = store->DeleteSlice(id, size);
    if (st.ok()) return;
    leaks->Inc();
    LOG_WARN("cannot delete the objects of failed compaction slice {} (tessera gc will): {}", id, st.ToString());
  };
  auto abort = [&] {
    for (const Slice& r : replacement) discard(r.id, r.size);
  };
  for (const Run& run : runs) {
    const uint32_t len = run.end - run.pos;
    auto id = meta->NewSliceId();
    if (!id.ok()) {
      abort();
      return id.status();
    }
    // Block by block, each read into a pooled buffer that is then uploaded
    // and handed to the cache without a copy: no run-sized buffer zeroed
    // and faulted in anew for every compaction (up to a chunk, 64 MiB).
    size_t next = 0;  // the first piece not wholly before this block
    for (uint32_t off = 0, k = 0; off < len; off += bs, ++k) {
      const uint32_t n = std::min(bs, len - off);
      std::string block = BufferPool::Default().Sized(n);  // stale bytes: every byte is written below
      const uint32_t start = run.pos + off, end = start + n;
      uint32_t at = start;  // bytes before `at` are written
      fragments.clear();
      for (size_t i = next; i < run.pieces.size(); ++i) {
        const Slice& p = run.pieces[i];
        if (p.pos >= end) break;
        const uint32_t s = std::max(p.pos, start), e = std::min(p.pos + p.len, end);
        if (e <= s) {
          next = i + 1;
          continue;
        }
        std::memset(block.data() + (at - start), 0, s - at);  // a gap between pieces reads as zeros
        fragments.push_back({p.id, p.size, p.off + (s - p.pos), e - s, s - start});
        at = e;
        if (e == p.pos + p.len) next = i + 1;
      }
      Status st = ReadFragments(store, bs, &fragments, &scratch, block.data());
      if (st.ok()) {
        std::memset(block.data() + (at - start), 0, end - at);
        st = store->StoreNewBlock(*id, k, block);
        if (!st.ok()) st = st.With("compaction upload");
      } else {
        st = st.With("compaction read");
      }
      if (!st.ok()) {
        BufferPool::Default().Give(std::move(block));
        discard(*id, len);
        abort();
        return st;
      }
      store->CacheUploaded(*id, k, std::move(block));
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
