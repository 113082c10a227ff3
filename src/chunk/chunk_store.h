// Reads and writes slice data as block objects in an ObjectStore.
// Thread-safe: many readers and writers at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "chunk/compression.h"
#include "chunk/disk_cache.h"
#include "chunk/layout.h"
#include "chunk/mem_cache.h"
#include "chunk/staging.h"
#include "common/metrics.h"
#include "common/status.h"
#include "object/object_store.h"

namespace tessera::chunk {

// Chunk-layer options; the defaults here are the defaults of the mount.
// Every field has a default member initializer so that callers can name only
// the fields they set (StoreConfig{block_size}, StoreConfig{.block_size = n}).
struct StoreConfig {
  // Maximum block size; must be the volume's BlockSize (docs/format.md §1).
  uint32_t block_size = kDefaultBlockSize;
  // Per-block compression; must be the volume's Compression. Objects of a
  // compressed volume are always fetched whole.
  Compression compression = Compression::kNone;

  // Memory cache of whole uncompressed blocks, LRU, bounded by this many
  // bytes; 0 disables it. Holds blocks read and, with cache_written,
  // blocks just written.
  uint64_t mem_cache_bytes = 256ull << 20;
  // Whether blocks this client writes (uploads, stages, compacts) go into the
  // memory cache as well. A mount turns it off for a local-directory bucket:
  // a block file just written is in the OS page cache and read back with one
  // pread, so a second copy only grows the mount (a fresh page of memory per
  // small file written, faulted in: on a VM that is most of a small file's
  // cost). Blocks it reads are cached either way.
  bool cache_written = true;

  // Disk cache root directory; empty disables the disk cache. Blocks live in
  // cache_dir/<cache_volume>/raw/<BlockKey>. A cache directory that cannot be
  // used (permissions, in use by another client) is logged and skipped.
  std::string cache_dir{};
  // Subdirectory of cache_dir for this volume (the mount passes the volume
  // UUID). Required with cache_dir: volumes must never share cache entries,
  // their slice ids overlap.
  std::string cache_volume{};
  // Bytes of cache files (headers included) the disk cache may hold.
  uint64_t cache_size = 100ull << 30;
  // The disk cache evicts, or stops caching, to keep at least this fraction
  // of its file system free. [0, 1); 0 = no check.
  double free_space_ratio = 0.1;
  CacheEviction cache_eviction = CacheEviction::kLru;

  // Writeback (--writeback): StageBlock(s) put blocks in a staging area on
  // the local disk, cache_dir/<cache_volume>/rawstaging (staging.h), and
  // background workers upload them. Needs cache_dir; independent of
  // cache_size (the read cache may be off). Blocks left staged by an earlier
  // client are uploaded from the start.
  bool writeback = false;
  // Background upload workers in writeback mode.
  size_t max_uploads = 20;
  // Writeback: a staged block is uploaded once it is this old, so blocks
  // overwritten and compacted (or deleted) meanwhile are never uploaded.
  uint32_t upload_delay_ms = 0;
  // Delay before retrying a failed background upload, doubling up to the max.
  uint32_t upload_retry_ms = 100;
  uint32_t upload_retry_max_ms = 5000;

  // OK, or EINVAL naming the bad field.
  Status Validate() const;
};

// Counters since the ChunkStore was made, and the caches' current contents.
struct ChunkStats {
  uint64_t mem_hits = 0;
  uint64_t mem_misses = 0;
  uint64_t disk_hits = 0;
  uint64_t disk_misses = 0;
  uint64_t shared_fetches = 0;  // misses served by another reader's fetch of the same block
  uint64_t store_gets = 0;
  uint64_t store_get_bytes = 0;  // object bytes fetched (compressed size)
  uint64_t store_puts = 0;
  uint64_t store_put_bytes = 0;  // object bytes uploaded (compressed size)
  uint64_t prefetches_skipped = 0;  // partial misses not prefetched: prefetching did not pay (PrefetchGuard)

  uint64_t mem_bytes = 0;
  uint64_t mem_blocks = 0;
  bool disk_enabled = false;
  uint64_t disk_bytes = 0;  // cache file bytes, including writes in progress
  uint64_t disk_blocks = 0;
  uint64_t disk_corrupt = 0;         // corrupt cache files found (deleted, refetched)
  uint64_t disk_evictions = 0;
  uint64_t disk_dropped_writes = 0;  // blocks not cached: queue full, no room or write error

  bool writeback_enabled = false;
  uint64_t staged_blocks = 0;          // staged, not uploaded yet
  uint64_t staged_bytes = 0;
  double staged_oldest_wait_seconds = 0;  // see StagingArea::Stats
  uint64_t staged_uploads = 0;         // background uploads done since start
  uint64_t staged_upload_failures = 0; // failed attempts (all retried)
  uint64_t staging_fallbacks = 0;      // blocks uploaded directly: the staging area refused them
};

// Decides whether a partial read that missed the caches should prefetch its
// whole block. Prefetching pays when the blocks stay cached long enough to
// serve later reads; when random reads range over more data than the cache
// holds, each 4 KiB miss would fetch a whole block that is evicted before
// much of it is read. Over each window of partial reads the guard compares
// the bytes served from the cache with the bytes prefetched; below 1/2 it
// lets only one miss per kProbeIntervalUs prefetch (a probe) until a window serves at least as
// many bytes from the cache as it prefetched (or, with no probe in the
// window, half of all bytes read). Lock-free; windows are approximate under
// concurrency.
class PrefetchGuard {
 public:
  static constexpr uint32_t kWindow = 1024;  // partial reads per decision
  static constexpr int64_t kProbeIntervalUs = 20000;

  // A partial read of n bytes, served from a cache or not.
  void Read(uint32_t n, bool hit);
  // A partial miss of a block of block_len bytes: prefetch it?
  bool Miss(uint32_t block_len);
  bool throttled() const { return throttled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> reads_{0};
  std::atomic<int64_t> last_probe_us_{0};  // steady clock
  std::atomic<uint64_t> read_bytes_{0}, hit_bytes_{0}, fetch_bytes_{0};
  std::atomic<bool> throttled_{false};
};

// Accumulates the bytes of one new slice and uploads them as blocks: block i
// of a slice of `size` bytes is the object BlockKey(id, i, BlockLen(size, i)).
// Thread-safe (calls are serialized). A writer must end with Finish or Abort;
// one dropped without either leaves its uploaded blocks for GC. Calls after
// Finish or Abort return EINVAL.
class SliceWriter {
 public:
  virtual ~SliceWriter() = default;
  virtual uint64_t id() const = 0;
  // Writes n bytes at offset off within the slice (may overwrite earlier bytes
  // not yet uploaded; bytes never written read as zeros).
  virtual Status WriteAt(const char* data, size_t n, uint32_t off) = 0;
  // Uploads every complete block that lies entirely below `offset`; those
  // blocks can no longer be written (EINVAL), and the slice's final length
  // must be at least their end.
  virtual Status FlushTo(uint32_t offset) = 0;
  // Uploads everything up to `length` (the slice's final size; bytes written
  // beyond it are dropped). After this the slice can be committed to the
  // metadata engine. On failure it may be retried, or the writer aborted.
  virtual Status Finish(uint32_t length) = 0;
  // Deletes whatever was uploaded (the slice will never be committed).
  virtual void Abort() = 0;
};

class SliceWriterImpl;

// Reads go through the memory cache, then the writeback staging area (blocks
// staged, not uploaded yet), then the disk cache, then the object
// store; a block fetched from the store, or uploaded by a writer
// (write-through), is put in both caches (the disk write happens in the
// background). With a cache or compression on, a read that
// needs part of a block fetches the whole block, and concurrent misses of
// one block share a single object read. Without caches and compression, a
// read fetches just the byte range it needs.
//
// `store` must outlive the ChunkStore, and the ChunkStore every writer it
// made (writers upload through it). block_size
// and compression must be the ones the slices were written with.
// Thread-safe. flights_mu_ and a Flight's mu are never held together, nor
// across a cache call or an object store call.
class ChunkStore {
 public:
  // An invalid disk cache configuration (see StoreConfig::Validate) or an
  // unusable cache directory is logged and the disk cache left off. A
  // staging area that cannot be opened leaves writeback off, with the reason
  // in writeback_status().
  ChunkStore(object::ObjectStore* store, StoreConfig config);
  // Stops the background uploads (staged blocks stay on disk), then
  // finishes pending disk cache writes.
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // A writer for a fresh slice id (allocated by the metadata engine).
  std::unique_ptr<SliceWriter> NewWriter(uint64_t id);
  // Reads [off, off+len) of slice (id, size) into buf; EINVAL unless
  // off+len <= size. Id 0 (a hole) reads as zeros. A missing, short or
  // undecodable block is EIO: the slice was committed, so its data is lost.
  Status ReadSlice(uint64_t id, uint32_t size, uint32_t off, uint32_t len, char* buf);
  // Read-ahead: loads block `index` (block_len bytes) of slice id into the
  // caches (shared with any concurrent read of it). A no-op without caches.
  Status Prefetch(uint64_t id, uint32_t index, uint32_t block_len);
  // `tessera warmup`: loads the block into the disk cache (the memory cache
  // when there is none), waiting for room in the cache's write queue rather
  // than dropping it; a block cached already costs nothing. Evict drops it
  // from both caches; Cached tells whether the disk cache (else the memory
  // cache) holds it.
  Status Warm(uint64_t id, uint32_t index, uint32_t block_len);
  void Evict(uint64_t id, uint32_t index, uint32_t block_len);
  bool Cached(uint64_t id, uint32_t index, uint32_t block_len);
  // Called (if set, before any read) when a partial read of an uncompressed
  // block missed the caches and read just its range from the store: the
  // owner may load the whole block in the background (--prefetch).
  void set_partial_miss_hook(std::function<void(uint64_t id, uint32_t index, uint32_t block_len)> hook) {
    partial_miss_hook_ = std::move(hook);
  }
  // Uploads block `index` of slice id (its length is data.size(): the slice's
  // block size except for a slice's last block), compressing it and putting
  // it in the caches (the memory cache with config().cache_written). For
  // writers that manage their own block buffers.
  Status UploadBlock(uint64_t id, uint32_t index, std::string_view data);
  // UploadBlock without the caches, for a writer that owns the bytes: once
  // the upload succeeded it hands them over to CacheUploaded (no copy).
  Status StoreNewBlock(uint64_t id, uint32_t index, std::string_view data);
  void CacheUploaded(uint64_t id, uint32_t index, std::string data);
  // Deletes every block object of slice (id, size), and drops the blocks
  // from the caches (and cancels their staged uploads); missing blocks are
  // fine. Tries every block and returns the first error.
  Status DeleteSlice(uint64_t id, uint32_t size);

  // Writeback. On when config().writeback was set and the staging area
  // opened; writeback_status() says why not otherwise.
  bool writeback() const { return staging_ != nullptr; }
  const Status& writeback_status() const { return writeback_status_; }
  // Stages block `index` of slice id (like UploadBlock) and returns: the
  // block is readable at once, survives a crash of this process, and is
  // uploaded in the background. If the staging area refuses it (disk full,
  // write error) or writeback is off, uploads it directly instead.
  Status StageBlock(uint64_t id, uint32_t index, std::string_view data);
  struct BlockView {
    uint64_t id = 0;
    uint32_t index = 0;
    std::string_view data;  // block `index` of slice id, whole
  };
  // Stages many blocks with one write (a commit of many small slices). On
  // failure nothing is staged (the caller uploads them directly); EINVAL
  // without writeback. Unlike StageBlock, it leaves the memory cache alone:
  // see CacheBlock.
  Status StageBlocks(const std::vector<BlockView>& blocks);
  // Puts a block the caller hands over (just staged) in the memory cache if
  // it is a whole block and config().cache_written; the fragments of random writes are read from their
  // pack (caching each cost more than it saved: hash and LRU churn on every
  // 4 KiB write).
  void CacheBlock(uint64_t id, uint32_t index, std::string data);
  // Makes every block staged so far durable on the local disk (a group
  // commit; call it before committing the slices). OK without writeback.
  Status SyncStaged();
  // Waits until every staged block is uploaded (for `umount --flush`),
  // calling progress about once a second. No-op without writeback.
  void DrainStaged(const std::function<void(const ChunkStats&)>& progress = {});

  const StoreConfig& config() const { return config_; }
  object::ObjectStore* store() const { return store_; }
  ChunkStats stats() const;
  // The above as metrics (tessera_blockcache_*, tessera_block_*, tessera_staging_*).
  void EmitMetrics(metrics::Emitter& e) const;
  // Waits until the disk cache has written every block handed to it so far
  // (for tests and orderly shutdown). No-op without a disk cache.
  void WaitForCacheWrites();
  // nullptr when the disk cache is off.
  DiskBlockCache* disk_cache() const { return disk_.get(); }

 private:
  friend class SliceWriterImpl;

  // One fetch of a block from the disk cache or the store, shared by every
  // reader that missed the memory cache meanwhile.
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;                      // guarded by mu
    std::optional<Result<BlockRef>> result;  // guarded by mu; set with done
  };

  // Reads bytes [off, off+n) of block `index` (block_len bytes) of slice id.
  Status ReadBlock(uint64_t id, uint32_t index, uint32_t block_len, uint32_t off, uint32_t n, char* buf);
  // The whole block: memory cache, else one shared Load.
  Result<BlockRef> GetBlock(const std::string& key, uint32_t len);
  // Disk cache, else the object store (then both caches are filled).
  Result<BlockRef> Load(const std::string& key, uint32_t len);
  // Uploads one block (compressing it); on success moves *block into the
  // caches (CachePut; leaving it unspecified), on failure leaves it alone.
  Status PutBlock(const std::string& key, std::string* block);
  // Compresses (per the volume) and puts one block object, counting it.
  Status StoreBlock(const std::string& key, std::string_view block);
  // A block just written: to the disk cache, and to the memory cache with
  // config().cache_written; back to the buffer pool if neither takes it.
  void CachePut(const std::string& key, std::string data);
  // Uploads a staged block (compressing it) and offers it to the disk cache.
  Status PutStaged(const std::string& key, const BlockRef& block);
  // The staged block if key is staged (then also put in the memory cache);
  // nullptr if not; EIO if its staged copy is lost.
  Result<BlockRef> GetStaged(const std::string& key);
  void ForgetBlock(const std::string& key);

  object::ObjectStore* const store_;
  const StoreConfig config_;
  // Self-synchronised (the pointers themselves are immutable).
  const std::unique_ptr<MemBlockCache> mem_;    // null when off
  const std::unique_ptr<DiskBlockCache> disk_;  // null when off
  const bool whole_blocks_;  // fetch whole blocks: a cache or compression is on
  std::function<void(uint64_t, uint32_t, uint32_t)> partial_miss_hook_;  // set before use
  PrefetchGuard prefetch_guard_;
  Status writeback_status_;  // immutable after construction

  std::mutex flights_mu_;
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;  // guarded by flights_mu_

  struct Counters {
    std::atomic<uint64_t> mem_hits{0}, mem_misses{0}, disk_hits{0}, disk_misses{0}, shared_fetches{0};
    std::atomic<uint64_t> store_gets{0}, store_get_bytes{0}, store_puts{0}, store_put_bytes{0};
    std::atomic<uint64_t> staging_fallbacks{0}, prefetches_skipped{0};
  };
  mutable Counters counters_;
  void OpenStaging();  // constructor: writeback on

  // Its upload workers use everything above, so it goes before them.
  std::unique_ptr<StagingArea> staging_;  // self-synchronised; null without writeback
  // Last: collection reads everything above, so it stops first.
  metrics::Registration metrics_;
};

}  // namespace tessera::chunk
