// The metadata engine interface: inodes, directory entries, chunk slice lists,
// xattrs, locks and sessions. Every method is one atomic operation: either all
// of its effects become visible or none do, so a crash at any point leaves a
// consistent tree. Permission checks (POSIX, for non-root callers) happen here,
// inside the same transaction that performs the operation.
//
// Implementations: KvMeta (src/meta/kv_meta.h) over any kv::Engine (memory,
// sqlite3). One conformance suite (tests/meta/meta_conformance_test.cc) runs on
// every engine.
#pragma once

#include <chrono>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chunk/layout.h"
#include "common/status.h"
#include "meta/format.h"

namespace tessera::meta {

using Ino = uint64_t;
constexpr Ino kRootIno = 1;
constexpr size_t kMaxName = 255;
constexpr size_t kMaxSymlink = 4095;
constexpr uint64_t kMaxFileSize = 1ull << 50;  // 1 PiB

// The trash (docs/format.md, "Trash"): the directory /.trash (inode
// kTrashIno) holds one directory per UTC hour, "YYYY-MM-DD-HH", whose inode
// is kTrashIno + 1 + hours since the epoch; an inode removed for good while
// the volume's trash-days is not 0 goes into the hour's directory as
// "<parent>-<ino>-<name>" instead. kTrashIno is below 2^53: Redis's Lua
// numbers are doubles.
constexpr Ino kTrashIno = 0xF000000000000ull;
constexpr const char* kTrashName = ".trash";
inline bool IsTrashIno(Ino ino) { return ino >= kTrashIno; }
// Is an inode with these attributes in the trash (one of an hour's entries)?
// Such files are shown with st_nlink 0, as POSIX has it after the last unlink.
bool InTrash(const struct Attr& a);
inline Ino TrashHourIno(int64_t unix_sec) { return kTrashIno + 1 + Ino(unix_sec / 3600); }
inline bool IsTrashHourIno(Ino ino) { return ino > kTrashIno; }
std::string TrashHourName(int64_t unix_sec);  // "YYYY-MM-DD-HH", UTC
// "<parent>-<ino>-<name>", at most kMaxName bytes.
std::string TrashEntryName(Ino parent, Ino ino, const std::string& name);

struct Timespec {
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool operator==(const Timespec&) const = default;
};
Timespec Now();

// Inode attributes. `mode` is the full st_mode (S_IFMT type bits + 07777).
struct Attr {
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint32_t rdev = 0;
  uint64_t length = 0;  // bytes; for symlinks the target length
  Ino parent = 0;       // directories: the parent directory; others: first parent
  Timespec atime, mtime, ctime;
  bool IsDir() const;
  bool IsFile() const;
  bool IsSymlink() const;
};

// A directory's link count is 2 plus its subdirectories, which every change
// of its subdirectories follows through this (delta +1 or -1)... except an
// hour's directory in the trash (IsTrashHourIno): its count stays as made,
// 2, as in JuiceFS. Every directory removal of the hour enters it: counting
// them made its record one that every removal rewrites, so concurrent
// removals (of any client) conflicted on it (PostgreSQL's serialization
// failures, docs/benchmarks.md). fsck and summary know not to trust it.
inline void CountSubdir(Ino dir, Attr* a, int delta) {
  if (!IsTrashHourIno(dir)) a->nlink = uint32_t(int64_t(a->nlink) + delta);
}

// Who is calling. Supplementary groups are filled only when needed (non-root).
struct Context {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t pid = 0;
  std::vector<uint32_t> gids;
  // Removals bypass the trash (emptying the trash itself).
  bool no_trash = false;
  // What a namespace change did to directories, for the client's cache of
  // their attributes (vfs/dir_attr_cache.h). When set, Mknod, Link, Unlink,
  // Rmdir, Rename and Clone fill it once their change committed: the
  // attributes they gave the parent directories, and the other inodes whose
  // attributes they changed or removed (the removed directory, the moved and
  // the replaced inode). Directories in the trash may change unreported.
  struct Effects {
    std::vector<std::pair<Ino, Attr>> parents;
    std::vector<Ino> others;
    // Unlink, Rmdir: the inode whose name went, with its attributes before
    // (link count included), for quota accounting without a lookup first.
    Ino removed = 0;
    Attr removed_attr;
    bool reported = false;  // false: unknown (the cache drops everything)
  };
  mutable Effects* effects = nullptr;
  bool IsRoot() const { return uid == 0; }
  bool InGroup(uint32_t g) const;
  static Context Root() { return Context{}; }
};

struct Entry {
  std::string name;
  Ino ino = 0;
  Attr attr;  // filled completely when asked for attributes (readdirplus)
  // Set by the VFS on an entry of a listing window that was removed before
  // its attributes were asked for: it keeps its place (the offsets of the
  // entries after it must not move) and is listed without attributes.
  bool gone = false;
};

// SetAttr mask bits.
enum SetAttrMask : uint32_t {
  kSetMode = 1 << 0,
  kSetUid = 1 << 1,
  kSetGid = 1 << 2,
  kSetAtime = 1 << 3,
  kSetMtime = 1 << 4,
  kSetAtimeNow = 1 << 5,
  kSetMtimeNow = 1 << 6,
  kSetCtime = 1 << 7,
};

// Rename flags (same values as renameat2).
constexpr uint32_t kRenameNoReplace = 1;
constexpr uint32_t kRenameExchange = 2;

// Lock types.
enum LockType : uint32_t { kUnlock = 0, kReadLock = 1, kWriteLock = 2 };

struct PosixLock {
  LockType type = kUnlock;
  uint64_t start = 0;
  uint64_t end = 0;  // inclusive; UINT64_MAX = to EOF
  uint32_t pid = 0;
};

// Usage of one directory's direct entries (docs/format.md, "Directory
// statistics"), kept by every engine: `tessera summary`, quotas.
struct DirStat {
  int64_t length = 0;  // sum of the lengths of the regular files named in it
  int64_t space = 0;   // the same, each rounded up to 4 KiB (as the used-space counter)
  int64_t inodes = 0;  // names it holds (files, directories, links: one each)
  bool operator==(const DirStat&) const = default;
  DirStat& operator+=(const DirStat& o) {
    length += o.length;
    space += o.space;
    inodes += o.inodes;
    return *this;
  }
};

// Quotas (docs/format.md, "Quotas"): limits on the space and inodes of a
// directory's tree (everything below it), or of what a user or group owns.
// The engine stores each quota's limits and usage; clients add their usage
// changes about every 0.4 s and enforce the limits (vfs/quota.h).
enum class QuotaKind : uint8_t { kDir = 1, kUser = 2, kGroup = 3 };
struct QuotaKey {
  QuotaKind kind = QuotaKind::kDir;
  uint64_t id = 0;  // directory inode, uid or gid
  auto operator<=>(const QuotaKey&) const = default;
};
struct Quota {
  int64_t max_space = 0;   // bytes; 0 = no limit
  int64_t max_inodes = 0;  // 0 = no limit
  int64_t used_space = 0;  // regular files' lengths, each rounded up to 4 KiB
  int64_t used_inodes = 0;
};
struct QuotaUsage {
  int64_t space = 0;
  int64_t inodes = 0;
};

struct StatFs {
  uint64_t total_space = 0;
  uint64_t avail_space = 0;
  uint64_t used_inodes = 0;
  uint64_t avail_inodes = 0;
};

// A session without a heartbeat for this long is dead: any client cleans it
// (its locks go, its open-unlinked files are reclaimed).
constexpr int64_t kSessionTimeoutSec = 300;

// What a client tells others of its work at its heartbeats (`tessera
// status`): the --writeback uploads it still holds, which an unmount waits
// for and a lost client machine would lose.
struct SessionLoad {
  bool writeback = false;  // uploads are deferred (--writeback)
  uint64_t staged_blocks = 0;
  uint64_t staged_bytes = 0;
  bool operator==(const SessionLoad&) const = default;
};

struct SessionInfo {
  uint64_t sid = 0;
  std::string host;
  std::string mount_point;
  uint32_t pid = 0;
  // Where pid means this process: the boot and the PID namespace
  // ("<boot id>/<pid namespace>"; empty from clients before it was kept).
  std::string pid_scope;
  std::string version;
  int64_t heartbeat = 0;  // unix seconds
  SessionLoad load;       // as of the heartbeat that last changed it
};

// One slice to append to chunk `chunk_index` of a file.
struct SliceWrite {
  uint32_t chunk_index = 0;
  chunk::Slice slice;
};

// Deletes the objects of one slice; called by background cleanup.
using SliceDeleter = std::function<Status(uint64_t id, uint32_t size)>;
// Coherent caches (docs/consistency.md): what another client changed. An
// entry change (parent != 0) means the name `name` of directory `parent`
// now points elsewhere or nowhere (created, removed, renamed); an inode
// change (parent == 0) means the attributes or data of `ino` changed.
struct Change {
  Ino parent = 0;
  std::string name;
  Ino ino = 0;
};
// Called on the engine's watcher thread with the changes of one or more
// transactions of other clients, in commit order. lost: changes may have
// been missed (the engine connection broke, the log was pruned past this
// reader): the caller must drop every cached entry and attribute. While
// watching is broken, `lost` calls repeat each time the watcher retries.
using ChangeFn = std::function<void(const std::vector<Change>& changes, bool lost)>;
// The wire form of one transaction's changes (Redis functions publish the
// same): origin, then for each change a NUL and "i<ino>" or
// "e<parent>/<name>". origin names the client that made them.
std::string EncodeChanges(std::string_view origin, const std::vector<Change>& changes);
// False when payload is not in that form.
bool DecodeChanges(std::string_view payload, std::string* origin, std::vector<Change>* out);


// ---- copying a volume record by record (tessera dump/load, meta/dump.h) ----
// Everything stored for one inode (not its directory entries).
struct InodeRecord {
  Ino ino = 0;
  Attr attr;
  std::string target;                                          // symlinks
  std::vector<std::pair<std::string, std::string>> xattrs;     // by name
  std::vector<std::pair<uint32_t, std::vector<chunk::Slice>>> chunks;  // by index, slices in append order
};

// Reads a volume's records without permission checks; see Meta::ReadTree.
class TreeReader {
 public:
  virtual ~TreeReader() = default;
  // ENOENT when the inode does not exist. type: its S_IFMT bits when known
  // (from its directory entry), else 0; lets engines read less.
  virtual Status Inode(Ino ino, uint32_t type, InodeRecord* out) = 0;
  // Several inodes at once (one request where the engine can); out[i] is
  // the record of which[i] (ino, type as above).
  virtual Status Inodes(const std::vector<std::pair<Ino, uint32_t>>& which, std::vector<InodeRecord>* out);
  // A page of a directory's entries in name order (bytewise), after `after`;
  // attr.mode holds only the type bits.
  virtual Status Entries(Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out, bool* more) = 0;
  // A counter (nextInode, nextSlice, nextSession, usedSpace, totalInodes); 0 when never set.
  virtual Result<int64_t> Counter(const std::string& name) = 0;
};

// The parents of a file with more than one name: directory -> names in it.
using ParentCounts = std::vector<std::pair<Ino, uint32_t>>;

// Writes records as they are, without checks; see Meta::WriteTree.
class TreeWriter {
 public:
  virtual ~TreeWriter() = default;
  virtual Status PutInode(const InodeRecord& rec) = 0;
  // mode: the entry's type bits (S_IFMT).
  virtual Status PutEntry(Ino parent, const std::string& name, Ino ino, uint32_t mode) = 0;
  virtual Status PutCounter(const std::string& name, int64_t value) = 0;
  // For repairs: an inode's attributes alone; removing one entry.
  virtual Status PutAttr(Ino ino, const Attr& attr) = 0;
  virtual Status DeleteEntry(Ino parent, const std::string& name) = 0;
  virtual Status PutSetting(const Format& format) = 0;
  // Usage records, derived from the tree (load, fsck --repair): a
  // directory's statistics; the parents of a file with several names
  // (empty: the record goes).
  virtual Status PutDirStat(Ino dir, const DirStat& stat) = 0;
  virtual Status PutParents(Ino ino, const ParentCounts& parents) = 0;
  // A slice held by `extra` more chunk lists than one (clones); 0 or less:
  // by one, the record goes.
  virtual Status PutSliceRef(uint64_t id, uint32_t size, int64_t extra) = 0;
  // fsck --repair: takes a slice out of the deletion queue (not_before as
  // queued; 0: queued for deletion at once).
  virtual Status UnqueueSlice(uint64_t id, uint32_t size, int64_t not_before) = 0;
};

class Meta {
 public:
  virtual ~Meta() = default;
  virtual std::string Name() const = 0;

  // ---- volume ----
  // Writes the settings record and the root directory. EEXIST if a volume is
  // already there (unless force, which keeps the data but rewrites settings).
  virtual Status Init(const Format& format, bool force) = 0;
  // ENOENT when no volume was formatted here.
  virtual Result<Format> Load() = 0;
  // Removes every record of the volume (`tessera destroy`): SQL engines
  // empty their table, Redis its database (which must be the volume's own,
  // as for JuiceFS).
  virtual Status Reset() = 0;
  virtual Status StatFS(const Context& ctx, StatFs* out) = 0;
  // Creates /.trash if it does not exist (format, mount and `config
  // --trash-days` call it when the trash is on). EEXIST when the root holds
  // something else under that name.
  virtual Status EnsureTrash() = 0;
  // The volume's trash-days as this client knows it (loaded, refreshed at
  // each heartbeat).
  virtual int TrashDays() const = 0;

  // ---- sessions (one per mount) ----
  // Starts this client's session (again after it expired: the old one's
  // records were cleaned by another client).
  virtual Status NewSession(const SessionInfo& info) = 0;
  // ESTALE when the session no longer exists: other clients cleaned it
  // after the session timeout (this client was cut off); WriteSlices then
  // refuses with ESTALE too, so a client coming back cannot write over what
  // others wrote meanwhile. The caller starts a new session. `load` is
  // stored with the session when it differs from the last one stored.
  virtual Status Heartbeat(const SessionLoad& load) = 0;
  virtual Status CloseSession() = 0;
  virtual Result<std::vector<SessionInfo>> ListSessions() = 0;
  // Cleans sessions whose heartbeat is older than timeout_sec, or whose
  // process is known dead (same host): their open-unlinked inodes are
  // reclaimed and their locks released. Returns how many were cleaned.
  virtual Result<int> CleanStaleSessions(int64_t timeout_sec) = 0;
  // Background jobs that one client of a volume at a time runs (metadata
  // backups): true when this client claims job `name` now because no client
  // claimed it in the last interval_sec; the claim is the engine's record of
  // when. The first call on a volume only starts the clock (false).
  virtual Result<bool> ClaimJob(const std::string& name, int64_t interval_sec) = 0;
  // Metadata dumps (backups, `tessera dump`) and the objects they refer to.
  // With the trash on, the slices a compaction replaces are kept for
  // trash-days only when a dump may refer to them: those created before the
  // newest dump finished (their ids are at most the "backup mark"), and all
  // of them while a dump is being taken. Slices created and replaced between
  // two dumps are in none, and go at once: a writer that keeps rewriting a
  // file does not pile up objects for days. BeginBackup before a dump reads
  // anything, EndBackup after it finished (or failed). A dump that never
  // ends (its process died) keeps everything delayed for a day at most.
  virtual Status BeginBackup() = 0;
  virtual Status EndBackup() = 0;
  // Background work: removes data of deleted inodes and deletes the objects of
  // unreferenced slices (up to max_items of each per call). Returns how many
  // inodes and slices it handled: 0 when there was nothing to do. Up to
  // `parallel` deleter calls run at once (from as many threads).
  virtual Result<int> CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel = 1) = 0;
  // Starts delivering other clients' changes to fn (on a thread of the
  // engine) until StopWatching; changes this client makes are not
  // delivered. While nobody else watches, clients record no changes at all.
  // ENOTSUP when the engine cannot (then kernel caches must stay short).
  virtual Status WatchChanges(ChangeFn fn) {
    (void)fn;
    return Status::Err(ENOTSUP, "this metadata engine cannot report other clients' changes");
  }
  virtual void StopWatching() {}
  // How long after WatchChanges (or a lost call) other clients may still
  // commit changes without reporting them to this client: engines that
  // check for watchers in every transaction say 0; one that checks once a
  // second (PostgreSQL, where the check costs a round trip) more. A
  // watcher keeps kernel caches short that long.
  virtual int WatchGraceMs() const { return 0; }

  // ---- namespace ----
  virtual Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) = 0;
  virtual Status GetAttr(const Context& ctx, Ino ino, Attr* attr) = 0;
  // For the kernel's own attribute requests: the attributes a cache kept
  // coherent while watching holds (KvMeta, attr_cache.h), without an engine
  // request; false: ask GetAttr. A change of another client shows there
  // within the report delay, as in the kernel's caches. Whatever must see
  // the engine's latest (an open's close-to-open check, a refresh after a
  // reported change) calls GetAttr.
  virtual bool CachedAttr(Ino ino, Attr* attr) { return false; }
  virtual Status SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) = 0;
  // check_perm=false for ftruncate on a descriptor already open for writing.
  virtual Status Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) = 0;
  // mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE|KEEP_SIZE, FALLOC_FL_ZERO_RANGE[|KEEP_SIZE].
  virtual Status Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) = 0;
  // mask: R_OK|W_OK|X_OK (F_OK = 0 checks existence only).
  virtual Status Access(const Context& ctx, Ino ino, int mask) = 0;
  // Creates a file, directory, device, FIFO, socket or symlink (target set).
  // `mode` has the S_IFMT bits; cumask is applied to the permission bits.
  virtual Status Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode,
                       uint32_t cumask, uint32_t rdev, const std::string& target, Ino* ino, Attr* attr) = 0;
  virtual Status Unlink(const Context& ctx, Ino parent, const std::string& name) = 0;
  virtual Status Rmdir(const Context& ctx, Ino parent, const std::string& name) = 0;
  virtual Status Rename(const Context& ctx, Ino parent_src, const std::string& name_src, Ino parent_dst,
                        const std::string& name_dst, uint32_t flags, Ino* ino, Attr* attr) = 0;
  virtual Status Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* attr) = 0;
  virtual Status ReadLink(const Context& ctx, Ino ino, std::string* target) = 0;
  // Lists a directory (without "." and "..") one page at a time: up to
  // `limit` entries whose names sort after `after` (bytewise; "" = from the
  // start), in name order; *more tells whether entries follow. Attributes
  // filled when plus. Memory is bounded by the page, however big the
  // directory.
  virtual Status ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                             std::vector<Entry>* entries, bool* more) = 0;
  // The whole directory, page by page (tools and tests).
  Status Readdir(const Context& ctx, Ino ino, bool plus, std::vector<Entry>* entries);

  // ---- open files ----
  // Checks permission for the open flags and counts the open in this client
  // (an open file that is unlinked keeps its data until the last Close).
  virtual Status Open(const Context& ctx, Ino ino, int flags, Attr* attr) = 0;
  virtual Status Close(const Context& ctx, Ino ino) = 0;
  // The kernel gained one reference (a lookup reply) / dropped n of them
  // (forget). An inode unlinked while this client still references
  // it (open or looked up) stays readable until the last reference goes.
  virtual void AddRef(Ino ino) = 0;
  virtual Status Forget(Ino ino, uint64_t n) = 0;

  // ---- data: chunk slice lists ----
  virtual Status Read(Ino ino, uint32_t chunk_index, std::vector<chunk::Slice>* slices) = 0;
  // Indexes of the file's chunks that have a slice list, from `from` on,
  // ascending, at most `limit` of them: lets SEEK_DATA skip a hole of
  // millions of chunks in one request.
  virtual Status ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) = 0;
  // Appends slices to their chunks in the given order (later ones shadow
  // earlier ones), extends the length to cover them and sets mtime/ctime to
  // `mtime` (when the data was written), all in one transaction. ENOSPC when
  // over the volume capacity. *slice_counts (if given) receives, per entry
  // of `slices`, the length of that chunk's slice list afterwards (a hint
  // for compaction).
  virtual Status WriteSlices(const Context& ctx, Ino ino, const std::vector<SliceWrite>& slices,
                             const Timespec& mtime, Attr* attr, std::vector<uint32_t>* slice_counts) = 0;
  Status Write(const Context& ctx, Ino ino, uint32_t chunk_index, const chunk::Slice& slice, const Timespec& mtime,
               Attr* attr) {
    return WriteSlices(ctx, ino, {SliceWrite{chunk_index, slice}}, mtime, attr, nullptr);
  }
  // Compaction: if the chunk's slice list still begins with `expected`,
  // replaces those slices with `replacement` (already uploaded; it must read
  // exactly like `expected`) and queues the replaced slices' objects for
  // deletion. Slices appended after `expected` are kept. EAGAIN when the list
  // no longer begins with `expected` (a truncate or another compaction won).
  virtual Status CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<chunk::Slice>& expected,
                              const std::vector<chunk::Slice>& replacement) = 0;
  virtual Result<uint64_t> NewSliceId() = 0;
  // gc: visits every slice a chunk list references (of live files, and of
  // deleted ones whose data is not reclaimed yet: pending = false) and every
  // slice queued for the deletion of its objects (pending = true), a page at
  // a time. Not a snapshot: gc runs beside live clients and protects objects
  // younger than an upload could take to be committed.
  using SliceVisitor = std::function<void(uint64_t id, uint32_t size, bool pending)>;
  virtual Status ScanAllSlices(const SliceVisitor& visit) = 0;

  // ---- xattrs ----
  virtual Status GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) = 0;
  // flags: XATTR_CREATE, XATTR_REPLACE.
  virtual Status SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) = 0;
  virtual Status ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) = 0;
  virtual Status RemoveXattr(const Context& ctx, Ino ino, const std::string& name) = 0;

  // ---- locks (owner: the kernel's lock owner; scoped to this session) ----
  // BSD flock. EAGAIN when it conflicts (the caller retries for blocking locks).
  virtual Status Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) = 0;
  // POSIX record lock query: on return lock->type is kUnlock if none conflicts.
  virtual Status GetLk(const Context& ctx, Ino ino, uint64_t owner, PosixLock* lock) = 0;
  // EAGAIN on conflict.
  virtual Status SetLk(const Context& ctx, Ino ino, uint64_t owner, const PosixLock& lock) = 0;

  // ---- copying a volume (tessera dump/load) ----
  // Runs fn with a reader of the volume's records. Engines with snapshots
  // (sqlite3, postgres) run it in one read-only transaction: fn sees one
  // consistent state however long it takes, and may be called again from
  // the start if the engine aborts the snapshot. Redis has none: each
  // Inode() is read atomically, nothing more (docs/format.md, section 5).
  virtual Status ReadTree(const std::function<Status(TreeReader&)>& fn) = 0;
  // Runs fn as one batch of raw writes: one transaction where the engine has
  // them (fn may be run again after a conflict), one atomic function call in
  // Redis. For loading an empty engine only: nothing is checked.
  virtual Status WriteTree(const std::function<Status(TreeWriter&)>& fn) = 0;
  // Does the engine hold no record at all (not even one of another volume)?
  virtual Result<bool> IsEmpty() = 0;

  // ---- directory statistics (docs/format.md, "Directory statistics") ----
  // The statistics of each of `dirs` (out[i] for dirs[i]; zeros for a
  // directory without a record): what the engine holds plus this client's
  // changes not flushed yet. Changes of other clients show once they flush.
  virtual Status GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) = 0;
  // Writes this client's pending changes to the engine (a background thread
  // calls it about once a second; unmount, Check and Repair too). Engines
  // that update the statistics inside each operation have nothing to flush.
  virtual Status FlushDirStats() { return Status::OK(); }

  // ---- delayed commits (sqlite3 with a commit delay, OpenOptions) ----
  // Commits every change this client has answered for. An error if some
  // could not be: they are gone, and LostChanges counts them. Engines that
  // commit each change before answering have nothing to do.
  virtual Status CommitPending() { return Status::OK(); }
  // Changes answered for and then lost (their delayed commit failed);
  // only grows. Handles compare it at close and fsync (errseq-like).
  virtual uint64_t LostChanges() const { return 0; }

  // ---- clone (tessera clone) ----
  // Copies `src` (a file, symlink, special file or a directory tree) to
  // parent/name by metadata only: the copies share the originals' slices,
  // reference-counted (docs/format.md, "Clones"), so no data is copied and
  // writing or removing either side never changes the other. One
  // transaction (one function call in Redis): the copy appears whole or not
  // at all. ctx needs read permission on what it copies (and search on
  // directories) and write+search on parent; with `preserve` the copies keep
  // owner, mode and times (owner: root only, else EPERM), else they belong
  // to ctx, with mode & ~cumask and the current time. Hard links inside a
  // tree become separate files; the trash is not copied. EINVAL for a
  // directory into itself; E2BIG past kMaxCloneEntries entries.
  static constexpr uint64_t kMaxCloneEntries = 100000;
  virtual Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask,
                       bool preserve, Ino* ino, Attr* attr, uint64_t* entries) = 0;

  // ---- quotas ----
  virtual Status ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) = 0;
  // Creates a quota or changes its limits; its usage is written too when
  // with_usage (a new quota, `quota check --repair`), else kept.
  virtual Status SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) = 0;
  // ENOENT when there is none.
  virtual Status DeleteQuota(const QuotaKey& key) = 0;
  // Adds usage changes to the quotas that exist (others are ignored), in
  // one atomic step.
  virtual Status AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) = 0;

  // ---- statistics ----
  // Requests sent to the engine's server, per operation ("lookup", "mknod",
  // ...), for engines that count them (empty otherwise).
  virtual std::vector<std::pair<std::string, uint64_t>> RequestStats() const { return {}; }

  // ---- tools ----
  // Checks the tree's invariants (entries point to inodes, nlink counts,
  // directory parents); returns problems found as text lines.
  virtual Status Check(std::vector<std::string>* problems) = 0;
  // Fixes what Check finds, where that is safe (meta_util.h, RepairTree);
  // returns the changes made as text lines. For a volume no client has
  // mounted: it reads the tree, then writes, without a transaction around.
  virtual Status Repair(std::vector<std::string>* changes) = 0;
};

// Is a session dead: no heartbeat for timeout_sec, or its process is gone
// (a session of this host)?
bool SessionDead(const SessionInfo& s, int64_t now, int64_t timeout_sec);

struct OpenOptions {
  // sqlite3: how long a change may wait to be committed with the ones after
  // it (kv::SqliteOptions::commit_delay; 0: committed before it is
  // answered). Other engines: ignored.
  std::chrono::microseconds commit_delay{0};
};

// Opens a metadata engine from a META-URL (sqlite3://PATH, memory://NAME,
// redis://..., unix://..., postgres://...). With the environment variable
// TESSERA_META_FAULTS set to a spec, the engine injects faults (fault_meta.h).
Result<std::unique_ptr<Meta>> Open(const std::string& url, const OpenOptions& options = {});

// POSIX permission check of `mask` (R_OK|W_OK|X_OK) against attr for ctx.
Status CheckPermission(const Context& ctx, const Attr& attr, int mask);

}  // namespace tessera::meta
