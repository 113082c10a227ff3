#include "kv/sqlite_batch_vfs.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "kv/sqlite_shim_vfs.h"

namespace tessera::kv {
namespace {

// The WAL format (https://sqlite.org/fileformat2.html#walformat): a 32-byte
// header, then frames of a 24-byte header and a page. Bytes 4..7 of a frame
// header, big-endian, hold the database size after a commit, 0 otherwise.
constexpr int kFrameHeaderSize = 24;
constexpr size_t kMaxBatch = size_t{1} << 20;
// The largest write passed to the base VFS: the unix VFS keeps only the low
// 17 bits of a write's length (it expects pages, at most 64 KiB), so a write
// of 128 KiB or more would be cut short.
constexpr size_t kMaxWrite = 124 << 10;
// The wal-index lock a writer holds for its whole transaction.
constexpr int kWalWriteLock = 0;

bool IsCommitFrameHeader(const void* buf, int n) {
  if (n != kFrameHeaderSize) return false;
  const auto* p = static_cast<const unsigned char*>(buf);
  return (p[4] | p[5] | p[6] | p[7]) != 0;
}

// A file of the batching VFS: the base VFS's file follows this header in the
// same allocation (szOsFile covers both). Constructed in xOpen, destroyed in
// xClose.
struct BatchFile {
  sqlite3_file base;  // pMethods = kMethods
  bool is_wal = false;
  BatchFile* wal = nullptr;  // main database file: its open WAL
  BatchFile* db = nullptr;   // WAL: its main database file
  // WAL: writes not yet passed on, which continue one another from batch_off.
  std::vector<char> batch;
  sqlite3_int64 batch_off = 0;
  // WAL: where the page of the last commit frame header seen goes (-1: none).
  sqlite3_int64 commit_page_off = -1;
  // WAL: the end of what the write transaction in progress passed on.
  sqlite3_int64 flushed_end = 0;

  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }
  const sqlite3_io_methods* rm() { return real()->pMethods; }

  // Passes the batch on, in one write unless it is larger than kMaxWrite. On
  // failure the batch is dropped too: SQLite fails the transaction, and what
  // it writes next starts over.
  int Flush() {
    int rc = SQLITE_OK;
    for (size_t done = 0; done < batch.size() && rc == SQLITE_OK; done += kMaxWrite) {
      const size_t n = std::min(kMaxWrite, batch.size() - done);
      rc = rm()->xWrite(real(), batch.data() + done, int(n), batch_off + sqlite3_int64(done));
    }
    if (rc == SQLITE_OK) flushed_end = std::max(flushed_end, batch_off + sqlite3_int64(batch.size()));
    batch.clear();
    return rc;
  }
};
static_assert(sizeof(BatchFile) % 8 == 0, "the base VFS's file follows, 8-byte aligned");

BatchFile* B(sqlite3_file* f) { return reinterpret_cast<BatchFile*>(f); }

int Close(sqlite3_file* f) {
  BatchFile* b = B(f);
  int rc = b->Flush();
  if (b->db != nullptr && b->db->wal == b) b->db->wal = nullptr;
  if (b->wal != nullptr && b->wal->db == b) b->wal->db = nullptr;
  const int close_rc = b->rm() != nullptr ? b->rm()->xClose(b->real()) : SQLITE_OK;
  b->~BatchFile();
  return rc != SQLITE_OK ? rc : close_rc;
}

int Write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  BatchFile* b = B(f);
  if (!b->is_wal) return b->rm()->xWrite(b->real(), buf, n, off);
  if (!b->batch.empty() && off != b->batch_off + sqlite3_int64(b->batch.size())) {
    if (int rc = b->Flush(); rc != SQLITE_OK) return rc;
  }
  if (b->batch.empty()) b->batch_off = off;
  const auto* p = static_cast<const char*>(buf);
  b->batch.insert(b->batch.end(), p, p + n);
  const bool ends_commit = off == b->commit_page_off;
  if (IsCommitFrameHeader(buf, n)) {
    b->commit_page_off = off + kFrameHeaderSize;
    // The header of a frame whose page is in the file already: SQLite
    // rewrites the checksums of a transaction that changed a page it had
    // spilled, the commit frame's header last, and nothing of that frame
    // follows. Written now, where an error fails the commit, not at the
    // barrier, where it could only stop the process.
    if (b->commit_page_off < b->flushed_end) {
      b->commit_page_off = -1;
      return b->Flush();
    }
  } else if (ends_commit) {
    b->commit_page_off = -1;
  }
  if (ends_commit || b->batch.size() >= kMaxBatch) return b->Flush();
  return SQLITE_OK;
}

// Every other call on a WAL sees the file as written: the batch goes first.
#define TESSERA_FLUSH_FIRST(b)                           \
  if ((b)->is_wal) {                                     \
    if (int rc = (b)->Flush(); rc != SQLITE_OK) return rc; \
  }

int Read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  BatchFile* b = B(f);
  TESSERA_FLUSH_FIRST(b);
  return b->rm()->xRead(b->real(), buf, n, off);
}
int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  BatchFile* b = B(f);
  TESSERA_FLUSH_FIRST(b);
  return b->rm()->xTruncate(b->real(), size);
}
int Sync(sqlite3_file* f, int flags) {
  BatchFile* b = B(f);
  TESSERA_FLUSH_FIRST(b);
  return b->rm()->xSync(b->real(), flags);
}
int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  BatchFile* b = B(f);
  TESSERA_FLUSH_FIRST(b);
  return b->rm()->xFileSize(b->real(), size);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  BatchFile* b = B(f);
  TESSERA_FLUSH_FIRST(b);
  return b->rm()->xFileControl(b->real(), op, arg);
}
#undef TESSERA_FLUSH_FIRST

// Releasing the write lock ends a write transaction. A commit's frames were
// written with its commit frame, so what is left belongs to a transaction
// that rolled back, beyond the end of the log as readers know it: dropped.
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  BatchFile* b = B(f);
  if (b->wal != nullptr && offset == kWalWriteLock && (flags & SQLITE_SHM_UNLOCK) != 0) {
    b->wal->batch.clear();
    b->wal->commit_page_off = -1;
    b->wal->flushed_end = 0;
  }
  return b->rm()->xShmLock(b->real(), offset, n, flags);
}

// SQLite calls the barrier between the two copies of the wal-index header it
// writes to publish a commit. The commit's frames were written with its
// commit frame; should any still be buffered, they must reach the file before
// the header does. The barrier cannot report an error, and publishing a
// commit whose frames are not in the file would corrupt the database, so a
// failure here stops the process (recovery then ignores the frames).
void ShmBarrier(sqlite3_file* f) {
  BatchFile* b = B(f);
  if (b->wal != nullptr && !b->wal->batch.empty()) {
    if (const int rc = b->wal->Flush(); rc != SQLITE_OK) {
      std::fprintf(stderr, "tessera: cannot write the SQLite WAL before publishing a commit (%s); stopping\n",
                   sqlite3_errstr(rc));
      std::abort();
    }
  }
  b->rm()->xShmBarrier(b->real());
}

// Version 2: no memory-mapped I/O (xFetch/xUnfetch), which would bypass the
// batch; SQLite then reads through xRead.
using P = PassThrough<BatchFile>;
const sqlite3_io_methods kMethods = {
    2,         Close,     Read,       Write,       Truncate,     Sync,          FileSize,
    P::Lock,   P::Unlock, P::CheckReservedLock,    FileControl,  P::SectorSize, P::DeviceCharacteristics,
    P::ShmMap, ShmLock,   ShmBarrier, P::ShmUnmap, nullptr,      nullptr};

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  sqlite3_vfs* base = Shim(vfs)->base;
  auto* b = new (file) BatchFile();
  b->base.pMethods = nullptr;
  const int rc = base->xOpen(base, name, b->real(), flags, out_flags);
  if (b->rm() == nullptr) {  // no xClose will come
    b->~BatchFile();
    file->pMethods = nullptr;
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  b->base.pMethods = &kMethods;
  if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) != 0 && name != nullptr) {
    b->is_wal = true;
    sqlite3_file* db = sqlite3_database_file_object(name);
    if (db != nullptr && db->pMethods == &kMethods) {
      b->db = B(db);
      b->db->wal = b;
    }
  }
  return rc;
}

}  // namespace

std::string RegisterBatchVfs(const std::string& base) {
  ConfigureSqliteOnce();
  sqlite3_vfs* real = sqlite3_vfs_find(base.empty() ? nullptr : base.c_str());
  if (real == nullptr) return base;  // unknown: sqlite3_open_v2 reports it
  const std::string name = "tessera-batch-" + std::string(real->zName);
  return RegisterShimVfs(name, real, int(sizeof(BatchFile)), Open, nullptr)->name;
}

}  // namespace tessera::kv
