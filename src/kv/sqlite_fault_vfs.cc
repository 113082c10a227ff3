#include "kv/sqlite_fault_vfs.h"

#include <cerrno>
#include <cstdint>

#include "kv/sqlite_shim_vfs.h"

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
using P = PassThrough<FaultFile>;
const sqlite3_io_methods kMethods = {
    2,         Close,       Read,         Write,        Truncate,          Sync,           P::FileSize,
    P::Lock,   P::Unlock,   P::CheckReservedLock,       P::FileControl,    P::SectorSize,  P::DeviceCharacteristics,
    P::ShmMap, P::ShmLock,  P::ShmBarrier, P::ShmUnmap, nullptr,           nullptr};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  ShimVfs* shim = Shim(vfs);
  FaultFile* f = F(file);
  f->env = static_cast<FaultEnv*>(shim->state);
  f->base.pMethods = nullptr;
  if (int err = f->env->Decide(FaultEnv::kOpen)) return err == ENOSPC ? SQLITE_FULL : SQLITE_CANTOPEN;
  int rc = shim->base->xOpen(shim->base, name, f->real(), flags, out_flags);
  if (rc == SQLITE_OK) f->base.pMethods = &kMethods;
  return rc;
}

}  // namespace

std::string RegisterFaultVfs(FaultEnv* env) {
  const std::string name = "tessera-fault-" + std::to_string(reinterpret_cast<uintptr_t>(env));
  ConfigureSqliteOnce();
  return RegisterShimVfs(name, sqlite3_vfs_find(nullptr), int(sizeof(FaultFile)), Open, env)->name;
}

}  // namespace tessera::kv
