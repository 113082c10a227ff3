// fsck's view of slices (meta_util.h, SliceHolds): which chunk lists hold
// each, what its reference record says, whether it is queued for deletion.
// The invariant (docs/format.md, "Clones"): a slice held by n >= 1 chunk
// lists has a reference record of n - 1 (none when n = 1) and is not queued;
// a queued slice is held by no list.
#include <unordered_set>

#include <fmt/format.h>

#include "chunk/layout.h"
#include "meta/meta_util.h"

namespace tessera::meta {

void HoldSlices(std::string_view chunk_list, SliceHolds* holds) {
  std::unordered_set<uint64_t> seen;
  for (const chunk::Slice& s : chunk::DecodeSlices(chunk_list))
    if (s.id != 0 && seen.insert(s.id).second) (*holds)[{s.id, s.size}].lists++;
}

void CheckSlices(const SliceHolds& holds, std::vector<std::string>* problems) {
  for (const auto& [key, h] : holds) {
    const auto [id, size] = key;
    if (h.lists > 0 && !h.queued.empty())
      problems->push_back(fmt::format("slice {}_{}: queued for deletion while {} chunk list(s) hold it", id, size,
                                      h.lists));
    if (h.lists > 0 && int64_t(h.lists) != 1 + h.extra)
      problems->push_back(fmt::format("slice {}_{}: held by {} chunk list(s), its reference record says {}", id, size,
                                      h.lists, 1 + h.extra));
    if (h.lists == 0 && h.extra != 0)
      problems->push_back(fmt::format("slice {}_{}: a reference record ({}) but no chunk list holds it", id, size,
                                      1 + h.extra));
  }
}

void RepairSlices(const SliceHolds& holds, std::vector<std::function<Status(TreeWriter&)>>* ops,
                  std::vector<std::string>* changes) {
  for (const auto& [key, h] : holds) {
    const auto [id, size] = key;
    if (h.lists > 0) {
      for (int64_t not_before : h.queued) {
        ops->push_back([id, size, not_before](TreeWriter& w) { return w.UnqueueSlice(id, size, not_before); });
        changes->push_back(fmt::format("slice {}_{}: taken out of the deletion queue ({} chunk list(s) hold it)", id,
                                       size, h.lists));
      }
    }
    const int64_t want = h.lists > 0 ? int64_t(h.lists) - 1 : 0;
    if (h.extra != want) {
      ops->push_back([id, size, want](TreeWriter& w) { return w.PutSliceRef(id, size, want); });
      changes->push_back(h.lists == 0 ? fmt::format("slice {}_{}: removed its reference record (no chunk list holds it)",
                                                    id, size)
                                      : fmt::format("slice {}_{}: reference record {} -> {} holder(s)", id, size,
                                                    1 + h.extra, h.lists));
    }
  }
}

}  // namespace tessera::meta
