// The trash's housekeeping (meta.h, kTrashIno; docs/operations.md, "Trash"):
// purging hour directories older than the volume's trash-days, and putting
// entries back where they came from (`tessera restore`). Both work through
// the metadata engine's ordinary operations, as root.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "meta/meta.h"

namespace tessera::vfs {

// The hour directories of the trash, by name (oldest first).
Status ListTrashHours(meta::Meta* m, std::vector<meta::Entry>* hours);

// "YYYY-MM-DD-HH" -> unix seconds of the hour's start; EINVAL otherwise.
Result<int64_t> ParseTrashHour(const std::string& name);

// Removes, for good, every hour directory whose whole hour ended more than
// `days` days before `now` (unix seconds), with what is in it; the data
// goes through the ordinary deletion path. Returns the entries removed.
// gone(name, ino) is called for each hour directory removed (a mount tells
// its kernel: its own changes are not reported back to it).
Result<uint64_t> PurgeTrash(meta::Meta* m, int days, int64_t now, const std::atomic<bool>* cancel = nullptr,
                            const std::function<void(const std::string&, meta::Ino)>& gone = {});

// Puts the entries of trash hour directory `hour` back under their original
// directories, directories first, never replacing anything: an entry whose
// name is taken, or whose directory is gone, stays in the trash and is
// reported through `report` (one line each). Without put_back nothing
// moves: `report` says what would. Returns the entries put back (or that
// would be).
Result<uint64_t> RestoreTrashHour(meta::Meta* m, const std::string& hour, bool put_back,
                                  const std::function<void(const std::string&)>& report);

}  // namespace tessera::vfs
