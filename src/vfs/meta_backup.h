// Automatic metadata backups (mount option --backup-meta): one client of a
// volume at a time (meta::Meta::ClaimJob) writes a gzipped dump of the
// metadata (meta/dump.h) into the volume's bucket as
//   meta/dump-YYYY-MM-DD-HHMMSS.json.gz   (UTC)
// and removes all but the newest `keep`. `tessera load` reads them back.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "meta/meta.h"
#include "object/object_store.h"

namespace tessera::vfs {

inline constexpr const char* kBackupPrefix = "meta/dump-";

// Writes one backup now (through a temporary file in $TMPDIR or /tmp) and
// prunes the old ones; returns the new object's key.
Result<std::string> BackupMeta(meta::Meta* meta, object::ObjectStore* store, size_t keep,
                               const std::atomic<bool>* cancel, uint64_t* inodes = nullptr);

// The backups in the bucket, oldest first.
Status ListBackups(object::ObjectStore* store, std::vector<object::ObjectInfo>* out);

}  // namespace tessera::vfs
