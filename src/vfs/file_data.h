// The data of one inode as seen by this client: writes buffered in memory,
// full blocks of sequential streams uploaded in the background while writing
// goes on, everything committed to the metadata engine in one transaction at
// flush/fsync/close, and reads that see committed data plus what is pending.
//
// Write path. New bytes land in a WriteBuffer (newest bytes win, so random
// writes into one region coalesce). When a write appends to a range that has
// grown past a block, its full blocks are cut off into a FrozenSlice and
// uploaded by the DataPath's upload pool. Bytes still in the WriteBuffer are
// always newer than any frozen slice covering the same positions, so a commit
// appends, per chunk: the frozen slices in creation order, then the buffer's
// ranges. The bytes held in memory (buffer + frozen blocks not yet uploaded)
// count against the DataPath's budget; a writer over budget waits for uploads
// or commits its own file.
//
// A stream commits its uploaded blocks in the background every
// kCommitFrozenBytes (StartBatchLocked without the buffer), so a file kept
// open and overwritten in place does not pile up replaced objects.
//
// Writeback (ChunkStore::writeback()): "uploading" a block means staging it
// on the local disk (the store uploads it later); a commit stages what is
// left in one batch, then makes the staged blocks durable (SyncStaged)
// before committing the slices. A file whose buffer fills up commits in the
// background (CommitBatch) while writing goes on: the batch takes every
// frozen slice there is (sealed: they cannot grow), later writes go to the
// buffer and later frozen slices, and any other commit first waits for the
// batch, so slices still reach the engine in creation order.
//
// Concurrency: FileData::mu_ guards everything below it; a FrozenSlice's
// blocks are guarded by its own mu (upload jobs and background commits never
// take FileData::mu_). Lock order: FileData::mu_ before FrozenSlice::mu
// before DataPath::mu_; FileData::mu_ before CommitBatch::mu.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "chunk/chunk_store.h"
#include "common/metrics.h"
#include "meta/meta.h"
#include "vfs/task_pool.h"
#include "vfs/write_buffer.h"

namespace tessera::vfs {

// What every FileData shares: the engine, the chunk store, upload workers
// and the budget for buffered bytes.
class DataPath {
 public:
  // buffer_limit: bytes buffered across all files before writers wait;
  // file_buffer_limit: buffered bytes of one file before it commits.
  DataPath(meta::Meta* meta, chunk::ChunkStore* store, size_t buffer_limit, size_t file_buffer_limit,
           size_t max_uploads);
  ~DataPath();

  meta::Meta* meta() const { return meta_; }
  chunk::ChunkStore* store() const { return store_; }
  uint32_t block_size() const { return store_->config().block_size; }
  size_t buffer_limit() const { return buffer_limit_; }
  size_t file_buffer_limit() const { return file_buffer_limit_; }

  // Compaction of chunks whose slice lists reach `compact_threshold` slices,
  // one at a time in the background; `on_compacted` runs after each success.
  void ConfigureCompaction(uint32_t threshold, std::function<void(meta::Ino, uint32_t)> on_compacted);
  uint32_t compact_threshold() const { return compact_threshold_; }
  // Queues a chunk for compaction (once, however often it is asked). In
  // writeback mode the compaction waits until the chunk has not been asked
  // about for a few seconds (at most 20 s): rewriting a chunk that random
  // writes keep fragmenting is wasted work, and its fragments cost nothing
  // while they are staged (see ChunkStore's --upload-delay).
  void ScheduleCompaction(meta::Ino ino, uint32_t chunk);
  // After a commit of `writes` whose chunks now hold `counts` records (as
  // Meta::WriteSlices reports them): schedules the chunks at or over the
  // threshold, except those a compaction found not worth rewriting until
  // they hold more records (CompactResult::retry_at).
  void ScheduleCompactions(meta::Ino ino, const std::vector<meta::SliceWrite>& writes,
                           const std::vector<uint32_t>& counts);

  // Read-ahead: loads a block into the block cache in the background (once
  // at a time per block).
  void Prefetch(uint64_t id, uint32_t index, uint32_t block_len);
  // --prefetch: a partial read that missed the caches loads its whole block
  // in the background.
  void EnableBlockPrefetch();
  void set_max_readahead(uint64_t bytes) { max_readahead_ = bytes; }
  uint64_t max_readahead() const { return max_readahead_; }
  // The oldest uncommitted write of a file commits after this long, also
  // when its writer stopped writing: the blocks it uploaded must not look
  // leaked to `tessera gc` (which deletes unreferenced objects an hour old).
  void set_max_uncommitted_age(std::chrono::milliseconds age) { max_uncommitted_age_ = age; }
  std::chrono::milliseconds max_uncommitted_age() const { return max_uncommitted_age_; }

  // How to drop the kernel's cached pages and attributes of an inode (set
  // by the FUSE adapter through Vfs; none in unit tests). Never called while
  // holding a lock of ours: the kernel may wait for one of our replies
  // before it lets the invalidation through. sync: in the caller's thread
  // (flush/fsync, which hold no page of the file); else on a worker (a write
  // holds the pages it is writing until we answer).
  void set_invalidator(std::function<void(meta::Ino)> fn) {
    std::unique_lock<std::shared_mutex> g(invalidator_mu_);
    invalidator_ = std::move(fn);
  }
  void InvalidateKernelCache(meta::Ino ino, bool sync);

  // Commit epochs: a counter bumped (NextCommitEpoch) whenever this client
  // changes a file's length in the engine or drops its pending writes, under
  // that file's lock. Attributes read from the engine after CommitEpoch()
  // returned e, then merged with a file's pending writes, are right unless
  // the file changed after e (FileData::ApplyPendingSince): a commit landing
  // between the read and the merge hides in neither.
  uint64_t CommitEpoch() const { return commit_epoch_.load(std::memory_order_acquire); }
  uint64_t NextCommitEpoch() { return commit_epoch_.fetch_add(1, std::memory_order_acq_rel) + 1; }

  // Runs a background commit (writeback) on a commit worker.
  void SubmitCommit(std::function<void()> job) { committer_.Submit(std::move(job)); }
  // Deletes, in the background, the objects of slices (id, size) that were
  // uploaded for writes that will never be committed. A failure leaves them
  // to `tessera gc` and is counted (abandoned_leaks).
  void DeleteAbandoned(std::vector<std::pair<uint64_t, uint32_t>> slices);
  // Objects of abandoned writes that could not be deleted (left to gc), and
  // read-aheads that failed (their reads fetch the data themselves).
  uint64_t abandoned_leaks() const { return abandoned_leaks_.load(std::memory_order_relaxed); }
  // Chunks the background compactor examined (compacted or not worth it yet).
  uint64_t compaction_checks() const { return compaction_checks_.load(std::memory_order_relaxed); }
  uint64_t prefetch_failures() const { return prefetch_failures_.load(std::memory_order_relaxed); }
  // Uploads a block in the background; `done` runs on a worker with the
  // result. Without writeback the caches are left alone: `done` hands the
  // bytes to ChunkStore::CacheUploaded (so the block is not copied).
  void Upload(uint64_t id, uint32_t index, std::string_view data, std::function<void(Status)> done);
  // The same, on the calling thread, for a caller that would only wait for
  // it: a commit's last block goes without two thread switches.
  void UploadHere(uint64_t id, uint32_t index, std::string_view data, const std::function<void(Status)>& done);

  // Buffered-byte accounting (may go negative transiently; never blocks).
  void Charge(int64_t delta);
  int64_t buffered() const;
  // Waits (bounded) while over budget and uploads are in flight. Returns
  // true when still over budget with nothing in flight: the caller should
  // commit to free memory.
  bool WaitForRoom();

 private:
  void SubmitCompaction(meta::Ino ino, uint32_t chunk);
  void DeferLoop();
  void RunUpload(uint64_t id, uint32_t index, std::string_view data, const std::function<void(Status)>& done);

  meta::Meta* const meta_;
  chunk::ChunkStore* const store_;
  const size_t buffer_limit_;
  const size_t file_buffer_limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t buffered_ = 0;  // guarded by mu_
  int inflight_ = 0;      // guarded by mu_: uploads submitted, not finished
  uint32_t compact_threshold_ = 0;  // set before use; 0 = never
  uint64_t max_readahead_ = 0;      // set before use; 0 = off
  std::chrono::milliseconds max_uncommitted_age_{std::chrono::minutes(5)};  // set before use
  std::set<std::pair<uint64_t, uint32_t>> prefetching_;  // guarded by mu_
  TaskPool prefetcher_{4, "ts-prefetch"};
  std::atomic<uint64_t> abandoned_leaks_{0}, prefetch_failures_{0}, compaction_checks_{0};
  std::atomic<uint64_t> commit_epoch_{0};
  std::function<void(meta::Ino, uint32_t)> on_compacted_;
  std::shared_mutex invalidator_mu_;  // held shared while invalidator_ runs
  std::function<void(meta::Ino)> invalidator_;  // guarded by invalidator_mu_
  std::set<std::pair<meta::Ino, uint32_t>> compact_queued_;  // guarded by mu_
  // Chunks found not worth compacting yet: asked again once they hold
  // retry_at records, or a quarter fewer than seen (truncated, compacted by
  // another client, pruned), or kCompactRetryAge after the check.
  struct CompactRetry {
    uint32_t seen = 0, retry_at = 0;
    std::chrono::steady_clock::time_point when;
  };
  std::map<std::pair<meta::Ino, uint32_t>, CompactRetry> compact_retry_at_;  // guarded by mu_
  // Writeback: chunks waiting to go quiet -> (first, last) request times.
  std::map<std::pair<meta::Ino, uint32_t>,
           std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>>
      deferred_;           // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::condition_variable defer_cv_;  // stopping_ was set
  std::thread deferrer_;   // writeback only: runs DeferLoop
  // Metrics (docs/operations.md "Metrics").
  struct Metrics {
    metrics::Counter* buffer_waits;        // writers that waited for the buffer budget
    metrics::Counter* buffer_wait_ns;      // and how long, in total
    metrics::Counter* readaheads;          // blocks read ahead
    metrics::Counter* compactions;         // chunks compacted
    metrics::Counter* compaction_slices;   // slices they had
    metrics::Counter* compaction_failures;
  };
  const Metrics m_;
  TaskPool deleter_{1, "ts-delete"};
  TaskPool notifier_{1, "ts-notify"};
  TaskPool compactor_{1, "ts-compact"};  // last four: their workers finish before the rest goes
  TaskPool pool_;
  TaskPool committer_{2, "ts-commit"};  // background commits wait for uploads in pool_

  void EmitMetrics(metrics::Emitter& e) const;
  metrics::Registration metrics_;  // last: stops first
};

// A slice whose blocks are uploading or uploaded, not yet committed: the
// full blocks cut from a sequential stream, or a buffer range at commit.
struct FrozenSlice {
  // kUploaded: in the object store, or staged in writeback mode.
  enum class State { kBuffered, kUploading, kUploaded };
  struct Block {
    std::string data;  // the bytes until uploaded, then empty
    State state = State::kBuffered;
  };
  // A packed slice: the small ranges of one chunk's buffer, written at
  // commit as one object and committed as one record per range (all with
  // this id; docs/format.md, "Packed slices"), instead of an object each.
  struct Run {
    uint32_t pos;  // in the chunk
    uint32_t off;  // in the slice
    uint32_t len;
  };
  uint32_t chunk = 0;  // immutable
  uint32_t pos = 0;    // immutable: position in the chunk (packed: of the first run)
  uint64_t id = 0;     // immutable
  std::vector<Run> runs;  // immutable once frozen, sorted by pos; empty: one run [pos, pos + len) at 0
  uint32_t runs_end = 0;  // immutable: packed, the end of the last run in the chunk
  std::mutex mu;
  std::condition_variable cv;
  bool sealed = false;        // guarded by mu: in a background commit, its length may not grow
  uint32_t len = 0;           // guarded by mu (and FileData::mu_ to change)
  std::deque<Block> blocks;   // guarded by mu; a deque keeps block bytes in place as it grows
  int inflight = 0;           // guarded by mu
  Status error;               // guarded by mu: last upload failure

  // Where the slice's bytes end in the chunk (mu or FileData::mu_ held).
  uint32_t EndInChunk() const { return runs.empty() ? pos + len : runs_end; }
  // Appends its commit records to *out (as for EndInChunk).
  void AppendRecords(std::vector<meta::SliceWrite>* out) const;
};

// A background commit (writeback): the first `count` entries of a file's
// frozen_ list, committed by a DataPath worker.
struct CommitBatch {
  size_t count = 0;                      // immutable
  std::vector<meta::SliceWrite> writes;  // immutable
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  Status status;      // guarded by mu
  meta::Attr attr;    // guarded by mu: the inode after the commit
};

class FileData {
 public:
  FileData(DataPath* dp, meta::Ino ino, uint64_t length);
  ~FileData();

  meta::Ino ino() const { return ino_; }
  // Quotas (vfs/quota.h): held while a write's growth is reserved and made,
  // so that concurrent writes past EOF charge it once; and set when the
  // file's last name went in this client (its later growth is no one's).
  std::mutex quota_mu;
  std::atomic<bool> quota_detached{false};
  int handles = 0;  // guarded by Vfs::table_mu_
  // A new open: forget cached chunk views and re-read the engine's length
  // (close-to-open consistency). Read under the file lock, so that it cannot
  // race with this client's own commits.
  Status Reopen();
  // Adds pending length/mtime to attributes read from the engine.
  void ApplyPending(meta::Attr* attr);
  // The same for attributes read after DataPath::CommitEpoch() returned
  // `epoch`; false (attr untouched) if the file's engine length changed or
  // its pending writes went since: the caller must read again.
  bool ApplyPendingSince(uint64_t epoch, meta::Attr* attr);
  // Reads the attributes from the engine and adds the pending writes under
  // the file's lock: always consistent, but waits for a commit in progress.
  Status ReadAttr(const meta::Context& ctx, meta::Attr* attr);
  // Commit epoch of the last change to the engine's length or the pending
  // writes (0 if none since the file was opened).
  uint64_t last_change() const { return changed_.load(std::memory_order_acquire); }
  // Length including pending writes.
  uint64_t Length();
  // The attributes the engine returned for this client's last commit,
  // truncate or fallocate of the file: false if none since it was opened or
  // since another client's change was seen.
  bool LastCommittedAttr(meta::Attr* out);

  Result<size_t> Read(uint64_t off, size_t size, char* buf);
  Status Write(const meta::Context& ctx, uint64_t off, const char* data, size_t size);
  // Uploads everything pending and commits it in one transaction. If that
  // fails, every pending write is discarded (see DiscardLocked) and the
  // error returned: the caller must then invalidate the kernel's cache of
  // the file (its pages and size show the discarded writes). An error of a
  // background commit that no caller saw is returned by the next Commit.
  Status Commit(const meta::Context& ctx);
  // Commit through a handle. Errors are reported as Linux reports writeback
  // errors (errseq): every failure that discarded writes is returned once to
  // each handle that was open when it happened, at its next Commit through
  // that handle, whichever handle's commit (or background batch) failed.
  // seen: the handle's mark, from ErrorMark() at open.
  Status Commit(const meta::Context& ctx, std::atomic<uint64_t>* seen);
  // The current error mark, for a handle being opened.
  uint64_t ErrorMark();
  Status Truncate(const meta::Context& ctx, uint64_t size, bool check_perm, meta::Attr* out);
  Status Fallocate(const meta::Context& ctx, int mode, uint64_t off, uint64_t len);
  // The background loop's visit (Vfs::BackgroundLoop): a stream that froze
  // kCommitFrozenBytes while a background commit was running, then stopped
  // writing (the file kept open), commits them now rather than at close.
  // Skipped while another thread holds the file. A batch's failure is
  // reported as any background commit's (by the next Commit).
  // So does a file whose oldest uncommitted write is older than
  // DataPath::max_uncommitted_age (a writer that paused with the file open).
  void Tick();
  // Drops every pending write, never to be committed (the session expired):
  // their objects are deleted, the kernel's cache of the file invalidated.
  void Abandon(const Status& why);
  // Forgets the cached view of a chunk (it was compacted).
  void InvalidateView(uint32_t chunk);
  // Another client changed the file (its change reported, coherent caches):
  // the slice views and the length are read again before the next read.
  void OthersChanged() { others_changed_.store(true, std::memory_order_release); }
  // SEEK_DATA / SEEK_HOLE.
  Result<uint64_t> Lseek(const meta::Context& ctx, uint64_t off, int whence);

 private:
  Status CommitLocked(const meta::Context& ctx);
  // Uploads (or stages) and commits buffer_ and frozen_; on failure they are
  // left for DiscardLocked.
  Status CommitPendingLocked(const meta::Context& ctx);
  // After a failed commit: drops the buffer, the frozen slices and any
  // background batch, reverting to what the engine holds. The objects those
  // writes uploaded or staged are deleted (DataPath::DeleteAbandoned) unless
  // the commit's outcome is unknown: the engine may reference them then, so
  // they stay (gc deletes them if it does not).
  void DiscardLocked(const Status& why);
  // Turns the buffer's ranges into frozen slices (after the existing ones).
  Status FreezeBufferLocked();
  // Commits every frozen slice in the background (batch_): (writeback:
  // stage, sync,) wait for the uploads, WriteSlices. With freeze_buffer the
  // buffer's ranges are frozen first and go too. Requires !batch_.
  Status StartBatchLocked(const meta::Context& ctx, bool freeze_buffer);
  // Waits for batch_ (if any) and applies it: its slices leave frozen_. A
  // failed batch discards every pending write and leaves its error in
  // unreported_.
  void FinishBatchLocked();
  // FinishBatchLocked if batch_ is done; never waits.
  void ReapBatchLocked();
  // False if it could not (no slice id): the bytes went back to the buffer.
  bool FreezeLocked(uint32_t chunk, uint32_t pos, std::string data);
  void SubmitBlock(const std::shared_ptr<FrozenSlice>& s, uint32_t index);
  uint64_t PendingEndLocked() const;
  // Adds the pending length and mtime to attr. Requires mu_.
  void MergePendingLocked(meta::Attr* attr) const;
  // The resolved slice view of a chunk, from cache or engine. Requires mu_.
  Status ViewLocked(uint32_t chunk, std::vector<chunk::Slice>** view);
  // Reads committed bytes of [off, off+size) given chunk views (zeros for holes).
  Status ReadCommitted(uint64_t off, size_t size, char* buf,
                       const std::vector<std::pair<uint32_t, std::vector<chunk::Slice>>>& views);
  Status OverlayLocked(uint64_t off, size_t size, char* buf);
  // Sequential readers: prefetch the blocks after [off, off+size).
  void ReadAheadLocked(uint64_t off, size_t size, uint64_t length);

  // Invalidates the kernel's cache of the file, after mu_ is released, if a
  // discard happened meanwhile (declared before the lock of a public method).
  class InvalidateOnDiscard {
   public:
    InvalidateOnDiscard(FileData* f, bool sync) : f_(f), sync_(sync) {}
    ~InvalidateOnDiscard() {
      if (f_->discarded_.exchange(false)) f_->dp_->InvalidateKernelCache(f_->ino_, sync_);
    }

   private:
    FileData* const f_;
    const bool sync_;
  };

  DataPath* const dp_;
  const meta::Ino ino_;
  std::atomic<bool> discarded_{false};  // set by DiscardLocked, taken by InvalidateOnDiscard
  std::atomic<bool> others_changed_{false};  // set by OthersChanged, taken by RefreshLocked
  // If another client changed the file: drops the views, reads the length.
  Status RefreshLocked();

  std::mutex mu_;
  uint64_t length_;                                     // guarded by mu_: length known to the engine
  std::optional<meta::Attr> committed_attr_;            // guarded by mu_: LastCommittedAttr
  // Commit epoch of the last change to length_ or the pending writes:
  // written under mu_, read anywhere.
  std::atomic<uint64_t> changed_{0};
  WriteBuffer buffer_{dp_->block_size()};               // guarded by mu_
  std::vector<std::shared_ptr<FrozenSlice>> frozen_;    // guarded by mu_: creation order
  uint64_t frozen_unbatched_bytes_ = 0;                 // guarded by mu_: bytes frozen since the last batch or commit
  std::optional<meta::Context> stream_ctx_;              // guarded by mu_: the writer, when a batch was due but one ran
  meta::Context pending_ctx_;                           // guarded by mu_: the writer of the oldest uncommitted write
  std::shared_ptr<CommitBatch> batch_;                  // guarded by mu_: commits frozen_'s first slices
  Status unreported_;  // guarded by mu_: a background commit's failure, for the next Commit to return
  // guarded by mu_: failures that discarded writes, counted (the error mark)
  // and the last one, for the handles open when they happened (Commit).
  uint64_t errors_ = 0;
  Status last_error_;
  meta::Timespec last_write_;                           // guarded by mu_
  // guarded by mu_: when the oldest write not committed yet was buffered
  std::chrono::steady_clock::time_point oldest_pending_{};
  std::unordered_map<uint32_t, std::vector<chunk::Slice>> views_;  // guarded by mu_
  uint64_t last_read_end_ = 0;   // guarded by mu_: where the previous read ended
  uint64_t readahead_ = 0;       // guarded by mu_: current window (grows while sequential)
  uint64_t prefetched_end_ = 0;  // guarded by mu_: read-ahead issued up to here
};

}  // namespace tessera::vfs
