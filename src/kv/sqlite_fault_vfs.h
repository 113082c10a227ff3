// A SQLite VFS that wraps the default one and asks a FaultEnv
// (common/fault_env.h) before each read, write, sync and truncate of the
// database and its WAL: the fault it names fails the call the way a disk
// would (EIO: SQLITE_IOERR_*, ENOSPC: SQLITE_FULL). Tests open an engine with
// SqliteOptions::vfs = RegisterFaultVfs(env) to reach the metadata engine's
// handling of local disk failures. Not for production use.
#pragma once

#include <string>

#include "common/fault_env.h"

namespace tessera::kv {

// Registers (once per env) a VFS named after env and returns its name.
std::string RegisterFaultVfs(FaultEnv* env);

}  // namespace tessera::kv
