#include "kv/sqlite_shim_vfs.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace tessera::kv {
namespace {

sqlite3_vfs* Base(sqlite3_vfs* vfs) { return Shim(vfs)->base; }

int Delete(sqlite3_vfs* vfs, const char* name, int sync) { return Base(vfs)->xDelete(Base(vfs), name, sync); }
int Access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return Base(vfs)->xAccess(Base(vfs), name, flags, out);
}
int FullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  return Base(vfs)->xFullPathname(Base(vfs), name, n, out);
}
int Randomness(sqlite3_vfs* vfs, int n, char* out) { return Base(vfs)->xRandomness(Base(vfs), n, out); }
int Sleep(sqlite3_vfs* vfs, int us) { return Base(vfs)->xSleep(Base(vfs), us); }
int CurrentTime(sqlite3_vfs* vfs, double* out) { return Base(vfs)->xCurrentTime(Base(vfs), out); }
int GetLastError(sqlite3_vfs* vfs, int n, char* out) { return Base(vfs)->xGetLastError(Base(vfs), n, out); }
int CurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return Base(vfs)->xCurrentTimeInt64(Base(vfs), out);
}

}  // namespace

void ConfigureSqliteOnce() {
  // SQLITE_MISUSE if SQLite already runs (see the header): nothing to undo.
  static const int rc = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  (void)rc;
}

ShimVfs* RegisterShimVfs(const std::string& name, sqlite3_vfs* base, int file_header, ShimOpen open, void* state) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<ShimVfs>> registered;  // live for the process
  std::lock_guard<std::mutex> g(mu);
  auto& slot = registered[name];
  if (slot) return slot.get();
  auto shim = std::make_unique<ShimVfs>();
  shim->base = base;
  shim->state = state;
  shim->name = name;
  std::memset(&shim->vfs, 0, sizeof(shim->vfs));
  shim->vfs.iVersion = 2;
  shim->vfs.szOsFile = file_header + base->szOsFile;
  shim->vfs.mxPathname = base->mxPathname;
  shim->vfs.zName = shim->name.c_str();
  shim->vfs.pAppData = shim.get();
  shim->vfs.xOpen = open;
  shim->vfs.xDelete = Delete;
  shim->vfs.xAccess = Access;
  shim->vfs.xFullPathname = FullPathname;
  shim->vfs.xRandomness = Randomness;
  shim->vfs.xSleep = Sleep;
  shim->vfs.xCurrentTime = CurrentTime;
  shim->vfs.xGetLastError = GetLastError;
  shim->vfs.xCurrentTimeInt64 = CurrentTimeInt64;
  sqlite3_vfs_register(&shim->vfs, 0);
  slot = std::move(shim);
  return slot.get();
}

}  // namespace tessera::kv
