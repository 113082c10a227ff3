// An exclusive, non-blocking flock on a lock file: one client per cache or
// staging directory.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace tessera {

// Opens (creating) path and takes an exclusive flock; returns the fd, which
// holds the lock until closed. EBUSY "<what> <dir> is in use by another
// client" when someone else holds it.
Result<int> LockFile(const std::string& path, const std::string& what, const std::string& dir, mode_t mode);

}  // namespace tessera
