// Usage of a directory tree, from directory statistics (meta.h, DirStat):
// `tessera summary` and `tessera info -r`. Only directories are visited:
// files are counted by their directory's statistics, and a directory whose
// link count says it has no subdirectory is not even listed (except the
// trash's hour directories, whose count does not count them), so a tree of
// a million files in a thousand directories costs about two thousand engine
// reads. The statistics are the engine's: what other clients changed in
// the last second (before their next flush) may not show yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "meta/meta.h"

namespace tessera::meta {

struct TreeUsage {
  int64_t length = 0;  // bytes of the regular files in the tree
  int64_t space = 0;   // the same, each rounded up to 4 KiB
  int64_t files = 0;   // names of non-directories (a hard link counts once per name)
  int64_t dirs = 0;    // directories, the top one included
};

// One row of the summary: a directory (with the rows of its biggest
// entries, down to the requested depth), a file, or the rest of a
// directory's entries folded into one row ("N more entries").
struct SummaryNode {
  std::string name;
  Ino ino = 0;  // 0 for a folded row
  bool dir = false;
  TreeUsage usage;
  std::vector<SummaryNode> children;  // biggest first (by space, then name)
};

struct SummaryOptions {
  int depth = 2;         // levels of entries shown below the top
  size_t entries = 10;   // entries shown per directory (the rest are folded)
  // Files are shown one by one only in directories with at most this many
  // entries (their attributes must be read); in bigger ones they are one
  // folded row, from the statistics.
  size_t file_rows_limit = 10000;
};

// Summarises the tree under directory `top` (or the file `top`).
Status Summarize(Meta* meta, Ino top, const std::string& name, const SummaryOptions& opts, SummaryNode* out);

}  // namespace tessera::meta
