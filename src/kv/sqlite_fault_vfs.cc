#include "kv/sqlite_fault_vfs.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace tessera::kv {
namespace {

// A file of the fault VFS: the real file follows this header in the same
// allocation (szOsFile covers both).
struct FaultFile {
  sqlite3_file base;  // pMethods = the fault methods
  FaultEnv* env;
  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }
};

FaultFile* F(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f); }

int Injected(FaultFile* f, FaultEnv::Op op, int ioerr) {
  const int err = f->env->Decide(op);
  if (err == 0) return SQLITE_OK;
  return err == ENOSPC ? SQLITE_FULL : ioerr;
}

int Close(sqlite3_file* f) {
  int rc = F(f)->real()->pMethods ? F(f)->real()->pMethods->xClose(F(f)->real()) : SQLITE_OK;
  return rc;
}
int Read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  if (int rc = Injected(F(f), FaultEnv::kRead, SQLITE_IOERR_READ)) return rc;
  return F(f)->real()->pMethods->xRead(F(f)->real(), buf, n, off);
}
int Write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  if (int rc = Injected(F(f), FaultEnv::kWrite, SQLITE_IOERR_WRITE)) return rc;
  return F(f)->real()->pMethods->xWrite(F(f)->real(), buf, n, off);
}
int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (int rc = Injected(F(f), FaultEnv::kTruncate, SQLITE_IOERR_TRUNCATE)) return rc;
  return F(f)->real()->pMethods->xTruncate(F(f)->real(), size);
}
int Sync(sqlite3_file* f, int flags) {
  if (int rc = Injected(F(f), FaultEnv::kSync, SQLITE_IOERR_FSYNC)) return rc;
  return F(f)->real()->pMethods->xSync(F(f)->real(), flags);
}
// The rest pass through.
int FileSize(sqlite3_file* f, sqlite3_int64* size) { return F(f)->real()->pMethods->xFileSize(F(f)->real(), size); }
int Lock(sqlite3_file* f, int l) { return F(f)->real()->pMethods->xLock(F(f)->real(), l); }
int Unlock(sqlite3_file* f, int l) { return F(f)->real()->pMethods->xUnlock(F(f)->real(), l); }
int CheckReservedLock(sqlite3_file* f, int* out) {
  return F(f)->real()->pMethods->xCheckReservedLock(F(f)->real(), out);
}
int FileControl(sqlite3_file* f, int op, void* arg) { return F(f)->real()->pMethods->xFileControl(F(f)->real(), op, arg); }
int SectorSize(sqlite3_file* f) { return F(f)->real()->pMethods->xSectorSize(F(f)->real()); }
int DeviceCharacteristics(sqlite3_file* f) {
  return F(f)->real()->pMethods->xDeviceCharacteristics(F(f)->real());
}
int ShmMap(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
  return F(f)->real()->pMethods->xShmMap(F(f)->real(), page, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return F(f)->real()->pMethods->xShmLock(F(f)->real(), offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) { F(f)->real()->pMethods->xShmBarrier(F(f)->real()); }
int ShmUnmap(sqlite3_file* f, int del) { return F(f)->real()->pMethods->xShmUnmap(F(f)->real(), del); }

const sqlite3_io_methods kMethods = {
    2,          Close,       Read,      Write,       Truncate,   Sync,   FileSize, Lock,  Unlock, CheckReservedLock,
    FileControl, SectorSize, DeviceCharacteristics, ShmMap, ShmLock, ShmBarrier, ShmUnmap, nullptr, nullptr};

struct FaultVfs {
  sqlite3_vfs vfs;
  sqlite3_vfs* real;
  FaultEnv* env;
  std::string name;
};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  FaultFile* f = F(file);
  f->env = fv->env;
  f->base.pMethods = nullptr;
  if (int err = fv->env->Decide(FaultEnv::kOpen)) return err == ENOSPC ? SQLITE_FULL : SQLITE_CANTOPEN;
  int rc = fv->real->xOpen(fv->real, name, f->real(), flags, out_flags);
  if (rc == SQLITE_OK) f->base.pMethods = &kMethods;
  return rc;
}
int Delete(sqlite3_vfs* vfs, const char* name, int sync) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xDelete(fv->real, name, sync);
}
int Access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xAccess(fv->real, name, flags, out);
}
int FullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xFullPathname(fv->real, name, n, out);
}
int Randomness(sqlite3_vfs* vfs, int n, char* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xRandomness(fv->real, n, out);
}
int Sleep(sqlite3_vfs* vfs, int us) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xSleep(fv->real, us);
}
int CurrentTime(sqlite3_vfs* vfs, double* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xCurrentTime(fv->real, out);
}
int GetLastError(sqlite3_vfs* vfs, int n, char* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xGetLastError(fv->real, n, out);
}
int CurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  auto* fv = static_cast<FaultVfs*>(vfs->pAppData);
  return fv->real->xCurrentTimeInt64(fv->real, out);
}

}  // namespace

std::string RegisterFaultVfs(FaultEnv* env) {
  static std::mutex mu;
  static std::map<FaultEnv*, std::unique_ptr<FaultVfs>> registered;  // live for the process
  std::lock_guard<std::mutex> g(mu);
  auto& slot = registered[env];
  if (slot) return slot->name;
  sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
  auto fv = std::make_unique<FaultVfs>();
  fv->real = real;
  fv->env = env;
  fv->name = "tessera-fault-" + std::to_string(reinterpret_cast<uintptr_t>(env));
  std::memset(&fv->vfs, 0, sizeof(fv->vfs));
  fv->vfs.iVersion = 2;
  fv->vfs.szOsFile = int(sizeof(FaultFile)) + real->szOsFile;
  fv->vfs.mxPathname = real->mxPathname;
  fv->vfs.zName = fv->name.c_str();
  fv->vfs.pAppData = fv.get();
  fv->vfs.xOpen = Open;
  fv->vfs.xDelete = Delete;
  fv->vfs.xAccess = Access;
  fv->vfs.xFullPathname = FullPathname;
  fv->vfs.xRandomness = Randomness;
  fv->vfs.xSleep = Sleep;
  fv->vfs.xCurrentTime = CurrentTime;
  fv->vfs.xGetLastError = GetLastError;
  fv->vfs.xCurrentTimeInt64 = CurrentTimeInt64;
  sqlite3_vfs_register(&fv->vfs, 0);
  slot = std::move(fv);
  return slot->name;
}

}  // namespace tessera::kv
