// The VFS: file handles, reads and writes on top of the metadata engine and
// the chunk store. It knows nothing about FUSE: the adapter in src/fuse calls
// these methods with a meta::Context and turns the Status into a reply.
//
// Concurrency: every public method may be called from many threads at once.
// Per-inode data (FileData) synchronises itself; the file table is guarded by
// table_mu_, never held while calling into a FileData.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chunk/chunk_store.h"
#include "common/metrics.h"
#include "meta/meta.h"
#include "vfs/dir_cache.h"
#include "vfs/file_data.h"
#include "vfs/quota.h"

namespace tessera::vfs {

using meta::Attr;
using meta::Context;
using meta::Ino;

// Every option of a mount, with its default, in one place.
struct Config {
  // Kernel cache timeouts in seconds (see docs/consistency.md).
  double attr_timeout = 1.0;
  double entry_timeout = 1.0;
  double dir_entry_timeout = 1.0;
  double negative_timeout = 0.0;
  // Bytes buffered in memory across all files (--buffer-size) before
  // writers wait for uploads; and per file before it commits on its own.
  size_t buffer_size = 300u << 20;
  size_t file_buffer_limit = 64u << 20;
  // A file's oldest uncommitted write commits after this long even if its
  // writer paused (well within the hour after which gc deletes objects no
  // file references).
  int64_t max_uncommitted_age_ms = 5 * 60 * 1000;
  // Concurrent block uploads (--max-uploads).
  size_t max_uploads = 20;
  // A random partial read of a block loads the whole block in the
  // background (--prefetch).
  bool prefetch = true;
  // Read-ahead window for sequential readers, bytes (--max-readahead; 0 = off).
  uint64_t max_readahead = 32ull << 20;
  // A chunk with this many slices is compacted in the background (0 = never).
  uint32_t compact_threshold = 64;
  // Directory entries fetched from the metadata engine per readdir page: an
  // open directory holds at most one page, however big the directory.
  size_t readdir_page = 1024;
  // Support the security.capability xattr. Off (as JuiceFS's --enable-cap),
  // reading it answers "none" without asking the metadata engine — the
  // kernel asks before every write to a file (to drop capabilities) — and
  // setting it fails with EOPNOTSUPP.
  bool enable_cap = false;
  // Background jobs.
  int cleanup_interval_ms = 1000;
  int heartbeat_interval_s = 10;
  // Sessions without a heartbeat for this long are cleaned by this client
  // (--session-timeout; every client of a volume should use the same).
  int session_timeout_s = int(meta::kSessionTimeoutSec);
  // Metadata backups into the bucket (--backup-meta; 0 = off), by one
  // client of the volume at a time, keeping the newest backup_keep.
  int64_t backup_interval_s = 3600;
  size_t backup_keep = 10;
  // How often one client of the volume purges the trash's expired hours.
  int64_t trash_purge_interval_s = 3600;
  std::string mount_point;
};

struct Handle {
  Ino ino = 0;
  int flags = 0;
  uint64_t session = 0;  // the generation of this client's session it was opened in
  std::shared_ptr<FileData> file;  // regular files
  // Files: the kernel may keep its cached pages (the file did not change
  // since this client last saw it: same mtime and length).
  bool keep_cache = false;
  std::atomic<bool> written{false};  // files: written through this handle
  // Files: the file's error mark this handle has reported up to (errseq;
  // FileData::Commit), taken at open.
  std::atomic<uint64_t> errors_seen{0};
  // The engine's count of lost changes (Meta::LostChanges) this handle has
  // reported up to, taken at open: a close or fsync after changes were lost
  // fails with EIO once.
  std::atomic<uint64_t> lost_seen{0};
  // Files: owner and (first) parent when opened, for quotas.
  uint32_t uid = 0;
  uint32_t gid = 0;
  Ino parent = 0;
  // Directories: a window of the listing. entries[i] has offset dir_base+i
  // ("." and ".." are offsets 0 and 1); the window was fetched after the
  // name in dir_starts.back() ("" = from the start), with attributes if
  // dir_plus.
  std::mutex dir_mu;
  std::vector<meta::Entry> entries;  // guarded by dir_mu
  uint64_t dir_base = 0;             // guarded by dir_mu
  bool dir_plus = false;             // guarded by dir_mu
  bool dir_more = false;             // guarded by dir_mu: entries follow the window
  uint64_t dir_epoch = 0;            // guarded by dir_mu: commit epoch before the window was read
  uint64_t dir_reads = 0;            // guarded by dir_mu: windows (or their attributes) read so far
  uint64_t dir_mark = 0;             // guarded by dir_mu: the caller's mark at the last of those (ReadDir)
  bool listed = false;               // guarded by dir_mu
  // Where each window of the listing began, (offset, name it followed), by
  // offset, the current window last: a seek back into an earlier window
  // reads again from that name, so removals before it move no offset there.
  std::vector<std::pair<uint64_t, std::string>> dir_starts;  // guarded by dir_mu
  // Files: the lock owners that took POSIX locks through this handle (an
  // open file description's own owner for OFD locks); their locks go at
  // Release. Guarded by dir_mu.
  std::vector<uint64_t> lock_owners;
};

class Vfs {
 public:
  Vfs(meta::Meta* meta, chunk::ChunkStore* store, Config config);
  ~Vfs();

  // Registers the session and starts background jobs.
  Status Start();
  // Flushes every file, stops background jobs and closes the session.
  void Stop();

  const Config& config() const { return config_; }
  // How to drop the kernel's cached pages and attributes of a file whose
  // pending writes were discarded after a failed commit (the FUSE adapter
  // sets it before serving; see DataPath::set_invalidator).
  void SetCacheInvalidator(std::function<void(Ino)> fn) { data_->set_invalidator(std::move(fn)); }
  // Tells the kernel that entry `name` of `parent` (inode child) is gone,
  // for removals the kernel did not ask for (RemoveTree). nullptr: none.
  using EntryInvalidator = std::function<void(Ino parent, const std::string& name, Ino child)>;
  void SetEntryInvalidator(EntryInvalidator fn);
  // Coherent caches (fuse/coherence.h): watching other clients' changes
  // works (after the engine's grace, Meta::WatchGraceMs), so the attributes
  // and names of directories this client changes may be kept (DirCache);
  // what other clients changed, or that changes were missed.
  void WatchStarted(int grace_ms) {
    dirs_.Enable(grace_ms);
    quotas_.WatchStarted(grace_ms);
  }
  // brief_ms: after a loss, how long nothing kept may be used.
  void OthersChanged(const std::vector<meta::Change>& changes, bool lost, int64_t brief_ms);

  // `tessera rmr` (remove_tree.cc): removes parent/name and everything below
  // it as ctx, checked entry by entry as rm -rf's unlinks and rmdirs would
  // be (into the trash when it is on), depth first, a page of each directory
  // at a time: memory is bounded by the depth times the page, however big
  // the directories. The kernel's entries are invalidated as it goes. An
  // entry that cannot be removed is skipped (with what holds it) and the
  // first such error returned at the end. progress is called every few
  // hundred removals and once at the end; returning false stops the walk
  // (ECANCELED).
  struct RemoveProgress {
    uint64_t files = 0;   // non-directories removed
    uint64_t dirs = 0;    // directories removed
    uint64_t failed = 0;  // entries that could not be removed
  };
  Status RemoveTree(const Context& ctx, Ino parent, const std::string& name,
                    const std::function<bool(const RemoveProgress&)>& progress, RemoveProgress* out);
  // `tessera warmup` (warmup.cc): for every regular file under `top` (or
  // the file `top`) that ctx may read, loads its blocks into the disk cache
  // (kLoad; the memory cache without one), drops them from the caches
  // (kEvict) or counts those cached (kCheck), `threads` blocks at a time.
  // Files ctx may not read are skipped and the first such error returned
  // at the end. Directories are listed a page at a time. progress as for
  // RemoveTree.
  enum class WarmupMode { kLoad, kEvict, kCheck };
  bool DiskCacheOn() const;
  struct WarmupProgress {
    uint64_t files = 0;
    uint64_t blocks = 0;         // blocks visited
    uint64_t bytes = 0;          // their bytes
    uint64_t cached_blocks = 0;  // kCheck: of those, cached
    uint64_t cached_bytes = 0;
    uint64_t failed = 0;         // files skipped (permission) or blocks that failed to load
  };
  Status Warmup(const Context& ctx, Ino top, WarmupMode mode, int threads,
                const std::function<bool(const WarmupProgress&)>& progress, WarmupProgress* out);
  // `tessera clone` (clone.cc): copies `src` to parent/name by metadata
  // only (meta::Meta::Clone), charging the quotas of the destination, and
  // tells the kernel of the new entry. *entries: inodes made.
  Status Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t umask, bool preserve,
               Ino* ino, Attr* attr, uint64_t* entries);
  // The inode at `path` (relative to the root, '/'-separated; "" = the
  // root), looked up as ctx: search permission on every directory on the way.
  Status Resolve(const Context& ctx, const std::string& path, Ino* parent, std::string* name, Ino* ino, Attr* attr);
  meta::Meta* meta() const { return meta_; }

  Status Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr);
  Status GetAttr(const Context& ctx, Ino ino, Attr* attr);
  // mask: meta::SetAttrMask bits; size applies when has_size.
  Status SetAttr(const Context& ctx, Ino ino, Handle* fh, uint32_t mask, const Attr& in, bool has_size,
                 uint64_t size, Attr* out);
  Status Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask,
               uint32_t rdev, Ino* ino, Attr* attr);
  Status Mkdir(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask, Ino* ino,
               Attr* attr);
  Status Symlink(const Context& ctx, Ino parent, const std::string& name, const std::string& target, Ino* ino,
                 Attr* attr);
  Status Unlink(const Context& ctx, Ino parent, const std::string& name);
  Status Rmdir(const Context& ctx, Ino parent, const std::string& name);
  Status Rename(const Context& ctx, Ino parent, const std::string& name, Ino new_parent,
                const std::string& new_name, uint32_t flags);
  Status Link(const Context& ctx, Ino ino, Ino new_parent, const std::string& new_name, Attr* attr);
  Status ReadLink(const Context& ctx, Ino ino, std::string* target);
  Status Access(const Context& ctx, Ino ino, int mask);
  // The volume's usage, or inside a directory quota's tree that quota's
  // (ino: the inode statfs(2) was called on).
  Status StatFS(const Context& ctx, Ino ino, meta::StatFs* out);
  QuotaTracker& quotas() { return quotas_; }

  // Kernel lookup references (see meta::Meta::AddRef): the adapter counts
  // every entry it hands to the kernel and every forget.
  void AddRef(Ino ino) { meta_->AddRef(ino); }
  Status Forget(Ino ino, uint64_t n) { return meta_->Forget(ino, n); }

  Status Open(const Context& ctx, Ino ino, int flags, Handle** fh, Attr* attr);
  Status Create(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask, int flags,
                Handle** fh, Ino* ino, Attr* attr);
  Result<size_t> Read(const Context& ctx, Handle* fh, uint64_t off, size_t size, char* buf);
  Result<size_t> Write(const Context& ctx, Handle* fh, uint64_t off, const char* data, size_t size);
  // A close(2) of a descriptor of fh by the process whose POSIX lock owner
  // is lock_owner: commits, and releases that owner's POSIX locks on the
  // file (closing any descriptor of a file drops the process's locks on it).
  Status Flush(const Context& ctx, Handle* fh, uint64_t lock_owner);
  Status Fsync(const Context& ctx, Handle* fh);
  Status Release(const Context& ctx, Handle* fh);
  // fsync(2) of a directory: commits delayed metadata changes.
  Status FsyncDir(Handle* fh);
  Status Fallocate(const Context& ctx, Handle* fh, int mode, uint64_t off, uint64_t len);
  Result<size_t> CopyFileRange(const Context& ctx, Handle* in, uint64_t off_in, Handle* out, uint64_t off_out,
                               size_t len);
  // whence: SEEK_DATA or SEEK_HOLE.
  Result<uint64_t> Lseek(const Context& ctx, Handle* fh, uint64_t off, int whence);

  Status OpenDir(const Context& ctx, Ino ino, int flags, Handle** fh);
  // Returns a window of the listing ("." and ".." first) holding the entry
  // at `offset` (unless offset is past the end): (*out)[i] has offset
  // *base + i. Offset 0 re-reads the directory; a later offset continues the
  // listing page by page (Config::readdir_page entries at a time).
  // mark, if given: the caller's clock before this call (any count that only
  // grows); on return, the caller's clock before the call that read the
  // window's attributes. Later calls answer from a window read earlier, and
  // its attributes are as old as that read (fuse/coherence.h: a change
  // reported since must not let them be cached for long).
  Status ReadDir(const Context& ctx, Handle* fh, uint64_t offset, bool plus, const std::vector<meta::Entry>** out,
                 uint64_t* base, uint64_t* mark = nullptr);
  Status ReleaseDir(Handle* fh);

  Status GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value);
  Status SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags);
  Status ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names);
  Status RemoveXattr(const Context& ctx, Ino ino, const std::string& name);

  // Locks; `interrupted` is polled while a blocking request waits.
  Status Flock(const Context& ctx, Ino ino, uint64_t owner, meta::LockType type, bool block,
               const std::function<bool()>& interrupted);
  Status GetLk(const Context& ctx, Ino ino, uint64_t owner, meta::PosixLock* lock);
  // fh: the handle the lock request came through (its Release drops the
  // locks of owners that took one through it: OFD locks).
  Status SetLk(const Context& ctx, Handle* fh, uint64_t owner, const meta::PosixLock& lock, bool block,
               const std::function<bool()>& interrupted);

 private:
  Result<std::shared_ptr<FileData>> AcquireFile(Ino ino, uint64_t length);
  void ReleaseFile(Ino ino);
  std::shared_ptr<FileData> FindFile(Ino ino);
  // Adds this client's pending writes of ino to attributes read from the
  // engine after data_->CommitEpoch() returned `epoch`. If the file changed
  // in between (a commit of its pending writes landed, or it was truncated
  // or closed), reads them again: such a commit shows in neither the read
  // nor the pending writes, and the kernel would take the older, shorter
  // length (an O_APPEND write would then land inside acknowledged data).
  Status MergePending(const Context& ctx, uint64_t epoch, Ino ino, Attr* attr);
  // Loads the window of fh's listing that follows name `from` ("" = the
  // first window, with "." and ".."), at offset `base`.
  Status FetchDirWindow(const Context& ctx, Handle* fh, const std::string& from, uint64_t base, bool plus);
  // Adds attributes to the entries of fh's window (read without them),
  // keeping the window's entries and their offsets.
  Status AddWindowAttrs(const Context& ctx, Handle* fh);
  // MergePending for a listed entry; one removed since is marked gone.
  Status MergeListed(const Context& ctx, uint64_t epoch, meta::Entry* e);
  // Directory statistics, stalled streams' commits, deletions of released
  // slices' objects.
  void BackgroundLoop();
  // Heartbeats, renewals of an expired session and the cleanup of others'
  // dead sessions, on a thread of their own: the background loop can be held
  // for minutes by an object store slow to delete, and a client whose
  // heartbeat stops is declared dead by the others (its locks and its files
  // open but unlinked go).
  void SessionLoop();
  // Metadata backups (meta_backup.h): claims the job once a minute at most
  // and writes a backup when the claim succeeds.
  void BackupLoop();
  // Removes the trash's expired hours when this client claims the job.
  void PurgeTrashJob();
  // The session expired: other clients cleaned it after the session timeout
  // (this client was cut off). Pending writes are discarded, never committed
  // over what others wrote since; handles opened before fail with EIO (reads
  // excepted); a new session starts for what comes next.
  void RenewSession();
  // EIO for a handle opened in an expired session.
  Status CheckSession(const Handle* fh) const;
  // A commit refused by the engine because the session expired (ESTALE)
  // asks for a renewal and becomes EIO; other results pass.
  Status Fenced(Status st);
  // Commits the file's pending writes for a close (flush, release) or an
  // fsync through fh. A handle open for writing hears of every failure that
  // discarded writes since it last looked, whichever commit failed; a
  // read-only one only at fsync, as close(2) of a read-only file on NFS
  // (the failure stays marked for the file's writers).
  // Commits the engine's delayed changes (Meta::CommitPending); EIO once
  // per handle after changes were lost since it was opened.
  Status CommitMeta(Handle* fh);
  Status CommitThrough(const Context& ctx, Handle* fh, bool fsync);

  meta::Meta* const meta_;
  chunk::ChunkStore* const store_;
  const Config config_;
  QuotaTracker quotas_{meta_};
  DirCache dirs_;
  // Runs fn, a namespace change of directories a and b through the engine,
  // keeping dirs_ with what it reports (meta::Context::Effects) and what it
  // did to names (filled by fn). A report the caller asked for (ctx.effects
  // already set) is filled too.
  template <typename Fn>
  Status DirChange(const Context& ctx, Ino a, Ino b, DirCache::Names* names, Fn&& fn) {
    if (!dirs_.enabled()) return fn();
    meta::Context::Effects effects;
    meta::Context::Effects* const outer = ctx.effects;
    ctx.effects = &effects;
    const DirCache::Ticket t = dirs_.Begin(a, b);
    Status st = fn();
    ctx.effects = outer;
    dirs_.End(t, st.ok() ? &effects : nullptr, *names);
    if (outer != nullptr) *outer = std::move(effects);
    return st;
  }
  // What a rename does to names (an exchange: nothing).
  static DirCache::Names RenamedNames(Ino parent, const std::string& name, Ino new_parent, const std::string& new_name,
                                      uint32_t flags) {
    if (flags & meta::kRenameExchange) return DirCache::Names();
    DirCache::Names n = DirCache::Names::Removed(parent, name);
    n.added_to = new_parent;
    n.added = new_name;
    return n;
  }
  // Runs fn, a change of inode ino's attributes the engine does not report
  // (setattr, xattrs): forgets ino in dirs_.
  template <typename Fn>
  Status AttrChange(Ino ino, Fn&& fn) {
    if (!dirs_.enabled()) return fn();
    const DirCache::Ticket t = dirs_.Begin(ino);
    Status st = fn();
    dirs_.End(t, nullptr);
    return st;
  }
  // Space a file's length takes in quotas' usage.
  static int64_t Space(uint64_t length) { return int64_t((length + 4095) & ~uint64_t(4095)); }
  // Reserves the growth of fh's file from its length to `end` (writes,
  // fallocate); *charged receives what was reserved, to give back if the
  // change fails.
  Status ReserveGrowth(Handle* fh, uint64_t end, int64_t* charged);
  // The usage a rename moves between trees: a file's space and 1 inode, a
  // directory's whole tree.
  Status TreeUsageOf(Ino ino, const Attr& attr, meta::QuotaUsage* out);
  // Namespace changes that charge quotas (when any exists).
  Status MknodCharged(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask,
                      uint32_t rdev, const std::string& target, Ino* ino, Attr* attr);
  Status RemoveCharged(const Context& ctx, Ino parent, const std::string& name, bool dir);
  Status RenameWithQuotas(const Context& ctx, Ino parent, const std::string& name, Ino new_parent,
                          const std::string& new_name, uint32_t flags);
  void QuotaLoop();
  std::thread quota_thread_;
  // Outlives nothing it points into: the destructor drops the files first,
  // then this (its workers may still call back into the file table).
  std::unique_ptr<DataPath> data_;

  std::mutex table_mu_;
  std::unordered_map<Ino, std::shared_ptr<FileData>> files_;  // guarded by table_mu_
  // Files closed lately -> the commit epoch of their last change, for
  // MergePending; bounded: when it is cleared, closed_floor_ stands for
  // every entry it held. Guarded by table_mu_.
  std::unordered_map<Ino, uint64_t> closed_;
  uint64_t closed_floor_ = 0;
  // What the kernel's page cache of each file reflects: its mtime, ctime and
  // length at this client's last open or close of it (ctime too: a rewrite
  // that puts the old mtime back, as `cp -p` does, still changes it).
  // Guarded by table_mu_.
  struct SeenFile {
    meta::Timespec mtime, ctime;
    uint64_t length = 0;
    bool operator==(const SeenFile&) const = default;
  };
  std::unordered_map<Ino, SeenFile> seen_;
  // Records attr as what the kernel caches of ino; returns whether it
  // matches what was recorded before (the cached pages are still valid).
  bool Saw(Ino ino, const Attr& attr);
  // After a commit at close: what this handle wrote is what the kernel's
  // pages of the file hold (Saw).
  void SawOwnWrites(const Context& ctx, Handle* fh);

  // POSIX locks: the owners holding (or having held) one per inode, so that
  // a close drops them with one engine call, and costs none when the file
  // was never locked (the common case).
  std::mutex locks_mu_;
  std::unordered_map<Ino, std::vector<uint64_t>> lock_owners_;  // guarded by locks_mu_
  // Unlocks every POSIX lock of owner on ino if it may hold one.
  Status DropPosixLocks(const Context& ctx, Ino ino, uint64_t owner);

  std::mutex inval_mu_;
  EntryInvalidator entry_invalidator_;  // guarded by inval_mu_
  void InvalidateEntry(Ino parent, const std::string& name, Ino child);

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stopping_ = false;  // guarded by bg_mu_
  bool renew_ = false;     // guarded by bg_mu_: a commit found the session expired
  std::atomic<uint64_t> session_gen_{1};
  std::thread bg_thread_;
  std::thread session_thread_;
  std::thread backup_thread_;
  std::atomic<bool> backup_cancel_{false};  // Stop: an ongoing backup gives up
  bool started_ = false;

  // Background jobs' runs and failures (tessera_background_runs_total{job},
  // tessera_background_errors_total{job}): a failure a job logs and tries
  // again later is counted here too.
  enum Job : size_t { kHeartbeat, kCleanup, kDirStats, kSessionClean, kBackup, kTrashPurge, kQuotaSync, kJobCount };
  struct JobCounters {
    metrics::Counter* runs = nullptr;
    metrics::Counter* errors = nullptr;
  };
  std::array<JobCounters, kJobCount> jobs_{};
  void CountJob(Job job, const Status& st) {
    jobs_[job].runs->Inc();
    if (!st.ok()) jobs_[job].errors->Inc();
  }
  // The volume's usage, read at every heartbeat and every statfs.
  metrics::Gauge* used_space_ = nullptr;
  metrics::Gauge* total_space_ = nullptr;
  metrics::Gauge* used_inodes_ = nullptr;
  metrics::Gauge* total_inodes_ = nullptr;
  void RecordUsage(const meta::StatFs& fs);
};

}  // namespace tessera::vfs
