// The frame of Tessera's SQLite VFSes that wrap another one (the batching
// VFS, sqlite_batch_vfs.h; the tests' fault VFS, sqlite_fault_vfs.h): a VFS
// whose files are a header of the wrapper's followed by the base VFS's file,
// opened by the wrapper's xOpen, and whose other VFS methods pass through.
// Private to src/kv (it includes sqlite3.h).
#pragma once

#include <sqlite3.h>

#include <string>

namespace tessera::kv {

// Process-wide SQLite settings, applied once before SQLite starts; every
// path in src/kv that may be the first to touch SQLite (opening an engine,
// registering a VFS) calls it first. It turns SQLite's memory statistics
// off: with them on (the library's default) each allocation SQLite makes
// takes one process-wide mutex to keep counters nothing here reads, which
// serialises the pool's connections (4 threads' engine lookups ran at half
// the rate). SQLite takes settings only before it initializes; if code
// outside src/kv started it first, the defaults stay (slower, not wrong).
void ConfigureSqliteOnce();

struct ShimVfs {
  sqlite3_vfs vfs;  // pAppData = this
  sqlite3_vfs* base = nullptr;
  void* state = nullptr;  // the wrapper's
  std::string name;
};

inline ShimVfs* Shim(sqlite3_vfs* vfs) { return static_cast<ShimVfs*>(vfs->pAppData); }

using ShimOpen = int (*)(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags);

// Registers, once per name and for the life of the process, a VFS `name`
// over `base` whose files are file_header bytes (a multiple of 8) followed by
// base's file, opened by `open`; returns it.
ShimVfs* RegisterShimVfs(const std::string& name, sqlite3_vfs* base, int file_header, ShimOpen open, void* state);

// I/O methods that pass straight to the base file, for a wrapper's file type
// F whose real() is the base's file.
template <class F>
struct PassThrough {
  static sqlite3_file* R(sqlite3_file* f) { return reinterpret_cast<F*>(f)->real(); }
  static int Lock(sqlite3_file* f, int l) { return R(f)->pMethods->xLock(R(f), l); }
  static int Unlock(sqlite3_file* f, int l) { return R(f)->pMethods->xUnlock(R(f), l); }
  static int CheckReservedLock(sqlite3_file* f, int* out) { return R(f)->pMethods->xCheckReservedLock(R(f), out); }
  static int FileControl(sqlite3_file* f, int op, void* arg) { return R(f)->pMethods->xFileControl(R(f), op, arg); }
  static int FileSize(sqlite3_file* f, sqlite3_int64* size) { return R(f)->pMethods->xFileSize(R(f), size); }
  static int SectorSize(sqlite3_file* f) { return R(f)->pMethods->xSectorSize(R(f)); }
  static int DeviceCharacteristics(sqlite3_file* f) { return R(f)->pMethods->xDeviceCharacteristics(R(f)); }
  static int ShmMap(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
    return R(f)->pMethods->xShmMap(R(f), page, size, extend, out);
  }
  static int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
    return R(f)->pMethods->xShmLock(R(f), offset, n, flags);
  }
  static void ShmBarrier(sqlite3_file* f) { R(f)->pMethods->xShmBarrier(R(f)); }
  static int ShmUnmap(sqlite3_file* f, int del) { return R(f)->pMethods->xShmUnmap(R(f), del); }
};

}  // namespace tessera::kv
