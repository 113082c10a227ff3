#include "chunk/chunk_store.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log.h"

namespace tessera::chunk {

// Buffers a slice's bytes per block and uploads blocks in index order: blocks
// [0, uploaded_) are in the store and immutable, later ones live in buffers_.
// Thread-safe: one mutex serializes all calls (uploads happen under it).
class SliceWriterImpl final : public SliceWriter {
 public:
  SliceWriterImpl(ChunkStore* chunks, uint32_t block_size, uint64_t id)
      : chunks_(chunks), block_size_(block_size), id_(id) {}

  uint64_t id() const override { return id_; }

  Status WriteAt(const char* data, size_t n, uint32_t off) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": write after Finish or Abort");
    if (uint64_t(off) + n > kChunkSize) return Status::Err(EINVAL, Name() + ": write beyond chunk size");
    if (n > 0 && off < uint64_t(uploaded_) * block_size_) {
      return Status::Err(EINVAL, Name() + ": write at " + std::to_string(off) + " into an uploaded block");
    }
    while (n > 0) {
      const uint32_t index = off / block_size_, in_block = off % block_size_;
      const size_t take = std::min<size_t>(n, block_size_ - in_block);
      std::string& buf = buffers_[index];
      if (buf.size() < in_block + take) buf.resize(in_block + take);  // gaps read as zeros
      std::memcpy(buf.data() + in_block, data, take);
      data += take;
      n -= take;
      off += uint32_t(take);
    }
    return Status::OK();
  }

  Status FlushTo(uint32_t offset) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": flush after Finish or Abort");
    if (offset > kChunkSize) return Status::Err(EINVAL, Name() + ": flush beyond chunk size");
    const uint32_t full = offset / block_size_;
    return UploadUpTo(full, uint64_t(full) * block_size_);
  }

  Status Finish(uint32_t length) override {
    std::lock_guard lock(mu_);
    if (done_) return Status::Err(EINVAL, Name() + ": Finish after Finish or Abort");
    if (length > kChunkSize) return Status::Err(EINVAL, Name() + ": length beyond chunk size");
    if (length < uint64_t(uploaded_) * block_size_) {
      return Status::Err(EINVAL, Name() + ": length " + std::to_string(length) + " is below flushed data");
    }
    RETURN_IF_ERROR(UploadUpTo(BlockCount(length, block_size_), length));
    buffers_.clear();  // bytes written beyond length are dropped
    done_ = true;
    return Status::OK();
  }

  void Abort() override {
    std::lock_guard lock(mu_);
    // Best effort: a block that cannot be deleted is an orphan for GC to find.
    for (const std::string& key : uploaded_keys_) {
      chunks_->ForgetBlock(key);
      Status st = chunks_->store_->Delete(key);
      if (!st.ok()) LOG_WARN("abort {}: cannot delete block {}: {}", Name(), key, st.ToString());
    }
    uploaded_keys_.clear();
    buffers_.clear();
    done_ = true;
  }

 private:
  std::string Name() const { return "slice " + std::to_string(id_); }

  // Uploads blocks [uploaded_, end) of a slice of `size` bytes. Stops at the
  // first failure; a retry resumes there.
  Status UploadUpTo(uint32_t end, uint64_t size) {
    for (; uploaded_ < end; ++uploaded_) {
      const uint32_t len = BlockLen(uint32_t(size), block_size_, uploaded_);
      std::string& buf = buffers_[uploaded_];
      buf.resize(len);
      std::string key = BlockKey(id_, uploaded_, len);
      // On failure buf is kept for a retry.
      RETURN_IF_ERROR(chunks_->PutBlock(key, &buf).With("upload " + Name()));
      uploaded_keys_.push_back(std::move(key));
      buffers_.erase(uploaded_);
    }
    return Status::OK();
  }

  ChunkStore* const chunks_;
  const uint32_t block_size_;
  const uint64_t id_;

  std::mutex mu_;
  std::map<uint32_t, std::string> buffers_;  // guarded by mu_; block index -> bytes so far
  uint32_t uploaded_ = 0;                    // guarded by mu_
  std::vector<std::string> uploaded_keys_;   // guarded by mu_
  bool done_ = false;                        // guarded by mu_; after Finish or Abort
};

Status StoreConfig::Validate() const {
  if (block_size == 0 || block_size > kChunkSize) return Status::Err(EINVAL, "block size out of range");
  if (!(free_space_ratio >= 0 && free_space_ratio < 1)) {
    return Status::Err(EINVAL, "free space ratio " + std::to_string(free_space_ratio) + " is not in [0, 1)");
  }
  if (writeback && cache_dir.empty()) return Status::Err(EINVAL, "writeback needs a cache directory");
  if (!cache_dir.empty()) {
    if (cache_volume.empty() || cache_volume == "." || cache_volume == ".." ||
        cache_volume.find('/') != std::string::npos) {
      return Status::Err(EINVAL, "cache volume '" + cache_volume + "' must be one path component (the volume UUID)");
    }
  }
  return Status::OK();
}

namespace {

std::unique_ptr<DiskBlockCache> OpenDiskCache(const StoreConfig& config) {
  if (config.cache_dir.empty() || config.cache_size == 0) return nullptr;
  Status valid = config.Validate();
  if (!valid.ok()) {
    LOG_ERROR("disk cache disabled: {}", valid.ToString());
    return nullptr;
  }
  DiskCacheOptions opts;
  opts.dir = config.cache_dir + "/" + config.cache_volume;
  opts.capacity_bytes = config.cache_size;
  opts.free_space_ratio = config.free_space_ratio;
  opts.eviction = config.cache_eviction;
  Result<std::unique_ptr<DiskBlockCache>> cache = DiskBlockCache::Open(std::move(opts));
  if (!cache.ok()) {
    LOG_WARN("disk cache disabled: {}", cache.status().ToString());
    return nullptr;
  }
  return std::move(cache).value();
}

}  // namespace

ChunkStore::ChunkStore(object::ObjectStore* store, StoreConfig config)
    : store_(store),
      config_(std::move(config)),
      mem_(config_.mem_cache_bytes > 0 ? std::make_unique<MemBlockCache>(config_.mem_cache_bytes) : nullptr),
      disk_(OpenDiskCache(config_)),
      whole_blocks_(mem_ || disk_ || config_.compression != Compression::kNone) {
  if (config_.writeback) OpenStaging();
  metrics_ = metrics::Registry::Global().AddCollector([this](metrics::Emitter& e) { EmitMetrics(e); });
}

void ChunkStore::OpenStaging() {
  writeback_status_ = config_.Validate();
  if (!writeback_status_.ok()) return;
  StagingOptions opts;
  opts.dir = config_.cache_dir + "/" + config_.cache_volume + "/rawstaging";
  opts.uploaders = config_.max_uploads;
  opts.upload_delay = std::chrono::milliseconds(config_.upload_delay_ms);
  opts.free_space_ratio = config_.free_space_ratio;
  opts.retry_initial = std::chrono::milliseconds(config_.upload_retry_ms);
  opts.retry_max = std::chrono::milliseconds(config_.upload_retry_max_ms);
  opts.upload = [this](const std::string& key, const BlockRef& block) { return PutStaged(key, block); };
  opts.remove = [this](const std::string& key) {
    ForgetBlock(key);
    return store_->Delete(key);
  };
  if (mem_) opts.cached = [this](const std::string& key) { return mem_->Get(key); };
  Result<std::unique_ptr<StagingArea>> staging = StagingArea::Open(std::move(opts));
  if (!staging.ok()) {
    writeback_status_ = staging.status();
    return;
  }
  staging_ = std::move(staging).value();
}

ChunkStore::~ChunkStore() {
  metrics_ = {};  // no collection may read staging_ while it goes
  staging_.reset();
}

std::unique_ptr<SliceWriter> ChunkStore::NewWriter(uint64_t id) {
  return std::make_unique<SliceWriterImpl>(this, config_.block_size, id);
}

Status ChunkStore::ReadSlice(uint64_t id, uint32_t size, uint32_t off, uint32_t len, char* buf) {
  if (uint64_t(off) + len > size) {
    return Status::Err(EINVAL, "read [" + std::to_string(off) + ", +" + std::to_string(len) +
                                   ") beyond slice " + std::to_string(id) + " of size " + std::to_string(size));
  }
  if (id == 0) {  // a hole
    std::memset(buf, 0, len);
    return Status::OK();
  }
  const uint32_t bs = config_.block_size;
  while (len > 0) {
    const uint32_t index = off / bs, in_block = off % bs;
    const uint32_t block_len = BlockLen(size, bs, index);
    const uint32_t n = std::min(len, block_len - in_block);
    RETURN_IF_ERROR(ReadBlock(id, index, block_len, in_block, n, buf));
    buf += n;
    off += n;
    len -= n;
  }
  return Status::OK();
}

Status ChunkStore::ReadBlock(uint64_t id, uint32_t index, uint32_t block_len, uint32_t off, uint32_t n,
                             char* buf) {
  const std::string key = BlockKey(id, index, block_len);
  if (whole_blocks_ && n < block_len && config_.compression == Compression::kNone) {
    // A partial read: from a cache if the block is there, else just the
    // range from the store (a random 4 KiB read must not wait for 4 MiB),
    // leaving the whole block to the background prefetcher.
    BlockRef block = mem_ ? mem_->Get(key) : nullptr;
    if (block) counters_.mem_hits.fetch_add(1, std::memory_order_relaxed);
    if (!block && staging_) {
      ASSIGN_OR_RETURN(block, GetStaged(key));
    }
    if (!block && disk_) {
      block = disk_->Get(key, block_len);
      if (block) {
        counters_.disk_hits.fetch_add(1, std::memory_order_relaxed);
        if (mem_) mem_->Put(key, block);
      }
    }
    prefetch_guard_.Read(n, block != nullptr);
    if (block) {
      std::memcpy(buf, block->data() + off, n);
      return Status::OK();
    }
    if (mem_) counters_.mem_misses.fetch_add(1, std::memory_order_relaxed);
    if (partial_miss_hook_) {
      if (prefetch_guard_.Miss(block_len)) partial_miss_hook_(id, index, block_len);
      else counters_.prefetches_skipped.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (whole_blocks_) {
    ASSIGN_OR_RETURN(BlockRef block, GetBlock(key, block_len));
    std::memcpy(buf, block->data() + off, n);
    return Status::OK();
  } else if (staging_) {
    ASSIGN_OR_RETURN(BlockRef staged, GetStaged(key));
    if (staged) {
      std::memcpy(buf, staged->data() + off, n);
      return Status::OK();
    }
  }
  counters_.store_gets.fetch_add(1, std::memory_order_relaxed);
  Result<size_t> got = store_->GetInto(key, off, n, buf);  // straight into the reader's buffer
  if (!got.ok()) {
    // The slice is committed, so a missing block is lost data, not a missing file.
    if (got.status().not_found()) return Status::Err(EIO, "block " + key + " is missing");
    return got.status().With("read block " + key);
  }
  counters_.store_get_bytes.fetch_add(*got, std::memory_order_relaxed);
  if (*got != n) {
    return Status::Err(EIO, "block " + key + " is short: read " + std::to_string(*got) + " of " +
                                std::to_string(n) + " bytes at " + std::to_string(off));
  }
  return Status::OK();
}

void PrefetchGuard::Read(uint32_t n, bool hit) {
  read_bytes_.fetch_add(n, std::memory_order_relaxed);
  if (hit) hit_bytes_.fetch_add(n, std::memory_order_relaxed);
  // The kWindow-th reader closes the window; reads past it count in the next.
  if (reads_.fetch_add(1, std::memory_order_relaxed) + 1 != kWindow) return;
  reads_.fetch_sub(kWindow, std::memory_order_relaxed);
  const uint64_t read = read_bytes_.exchange(0, std::memory_order_relaxed);
  const uint64_t hits = hit_bytes_.exchange(0, std::memory_order_relaxed);
  const uint64_t fetched = fetch_bytes_.exchange(0, std::memory_order_relaxed);
  // Hysteresis: prefetching stops when the cache serves less than half the
  // bytes it prefetched, and resumes when it serves at least as many, or,
  // in a window without probes, at least half of all bytes read.
  const bool throttle = !throttled() ? hits * 2 < fetched : fetched > 0 ? hits < fetched : hits * 2 < read;
  if (throttle != throttled_.exchange(throttle, std::memory_order_relaxed)) {
    LOG_DEBUG("block prefetch {}: {} of {} KiB read from cached blocks, {} KiB prefetched in the last {} partial reads",
              throttle ? "throttled" : "resumed", hits >> 10, read >> 10, fetched >> 10, kWindow);
  }
}

bool PrefetchGuard::Miss(uint32_t block_len) {
  if (throttled()) {
    const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    int64_t last = last_probe_us_.load(std::memory_order_relaxed);
    if (now - last < kProbeIntervalUs || !last_probe_us_.compare_exchange_strong(last, now)) return false;
  }
  fetch_bytes_.fetch_add(block_len, std::memory_order_relaxed);
  return true;
}

Result<BlockRef> ChunkStore::GetBlock(const std::string& key, uint32_t len) {
  if (mem_) {
    if (BlockRef block = mem_->Get(key)) {
      counters_.mem_hits.fetch_add(1, std::memory_order_relaxed);
      return block;
    }
    counters_.mem_misses.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    std::lock_guard lock(flights_mu_);
    auto [it, inserted] = flights_.try_emplace(key);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (!leader) {
    counters_.shared_fetches.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock lock(flight->mu);
    flight->cv.wait(lock, [&] { return flight->done; });
    return *flight->result;
  }
  // A fetch that finished between our miss and taking the lead has filled
  // the memory cache already.
  BlockRef cached = mem_ ? mem_->Get(key) : nullptr;
  Result<BlockRef> result = cached ? Result<BlockRef>(std::move(cached)) : Load(key, len);
  {
    std::lock_guard lock(flights_mu_);
    flights_.erase(key);
  }
  {
    std::lock_guard lock(flight->mu);
    flight->result = result;
    flight->done = true;
  }
  flight->cv.notify_all();
  return result;
}

Result<BlockRef> ChunkStore::Load(const std::string& key, uint32_t len) {
  if (staging_) {
    ASSIGN_OR_RETURN(BlockRef staged, GetStaged(key));
    if (staged) return staged;
  }
  if (disk_) {
    if (BlockRef block = disk_->Get(key, len)) {
      counters_.disk_hits.fetch_add(1, std::memory_order_relaxed);
      if (mem_) mem_->Put(key, block);
      return block;
    }
    counters_.disk_misses.fetch_add(1, std::memory_order_relaxed);
  }
  counters_.store_gets.fetch_add(1, std::memory_order_relaxed);
  Result<std::string> body = store_->Get(key);
  if (!body.ok()) {
    // The slice is committed, so a missing block is lost data, not a missing file.
    if (body.status().not_found()) return Status::Err(EIO, "block " + key + " is missing");
    return body.status().With("read block " + key);
  }
  counters_.store_get_bytes.fetch_add(body->size(), std::memory_order_relaxed);
  BlockRef block;
  if (config_.compression == Compression::kNone) {
    if (body->size() != len) {
      return Status::Err(EIO, "block " + key + " is " + (body->size() < len ? "short" : "too long") + ": " +
                                  std::to_string(body->size()) + " bytes, want " + std::to_string(len));
    }
    block = BufferPool::Default().Share(std::move(body).value());
  } else {
    ASSIGN_OR_RETURN(std::string raw, DecompressBlock(config_.compression, *body, len, key));
    BufferPool::Default().Give(std::move(body).value());
    block = BufferPool::Default().Share(std::move(raw));
  }
  if (mem_) mem_->Put(key, block);
  if (disk_) disk_->Put(key, block);
  return block;
}

Status ChunkStore::StoreBlock(const std::string& key, std::string_view block) {
  std::string compressed;
  if (config_.compression != Compression::kNone) {
    ASSIGN_OR_RETURN(compressed, CompressBlock(config_.compression, block));
  }
  const std::string_view body = config_.compression == Compression::kNone ? block : std::string_view(compressed);
  RETURN_IF_ERROR(store_->Put(key, body));
  counters_.store_puts.fetch_add(1, std::memory_order_relaxed);
  counters_.store_put_bytes.fetch_add(body.size(), std::memory_order_relaxed);
  return Status::OK();
}

Status ChunkStore::PutBlock(const std::string& key, std::string* block) {
  RETURN_IF_ERROR(StoreBlock(key, *block));
  CachePut(key, std::move(*block));
  return Status::OK();
}

void ChunkStore::CachePut(const std::string& key, std::string data) {
  MemBlockCache* mem = config_.cache_written ? mem_.get() : nullptr;
  if (!mem && !disk_) return BufferPool::Default().Give(std::move(data));
  auto ref = BufferPool::Default().Share(std::move(data));
  if (mem) mem->Put(key, ref);
  if (disk_) disk_->Put(key, ref);
}

Status ChunkStore::PutStaged(const std::string& key, const BlockRef& block) {
  RETURN_IF_ERROR(StoreBlock(key, *block));
  if (disk_) disk_->Put(key, block);
  return Status::OK();
}

Result<BlockRef> ChunkStore::GetStaged(const std::string& key) {
  if (!staging_) return BlockRef();
  ASSIGN_OR_RETURN(BlockRef block, staging_->Get(key));
  if (block && mem_) mem_->Put(key, block);
  return block;
}

Status ChunkStore::StageBlock(uint64_t id, uint32_t index, std::string_view data) {
  const std::string key = BlockKey(id, index, uint32_t(data.size()));
  if (staging_) {
    Status st = staging_->Append({StagingArea::Block{key, data}});
    if (st.ok()) {
      if (mem_ && config_.cache_written) mem_->Put(key, BufferPool::Default().Share(BufferPool::Default().Copy(data)));
      return Status::OK();
    }
    counters_.staging_fallbacks.fetch_add(1, std::memory_order_relaxed);
    LOG_WARN("cannot stage block {}, uploading it directly: {}", key, st.ToString());
  }
  std::string block = BufferPool::Default().Copy(data);
  return PutBlock(key, &block);
}

Status ChunkStore::StageBlocks(const std::vector<BlockView>& blocks) {
  if (!staging_) return Status::Err(EINVAL, "writeback is off");
  std::vector<StagingArea::Block> batch;
  batch.reserve(blocks.size());
  for (const BlockView& b : blocks) batch.push_back({BlockKey(b.id, b.index, uint32_t(b.data.size())), b.data});
  Status st = staging_->Append(batch);
  if (!st.ok()) counters_.staging_fallbacks.fetch_add(blocks.size(), std::memory_order_relaxed);
  return st;
}

void ChunkStore::CacheBlock(uint64_t id, uint32_t index, std::string data) {
  if (!mem_ || !config_.cache_written || data.size() != config_.block_size) {
    return BufferPool::Default().Give(std::move(data));
  }
  const std::string key = BlockKey(id, index, uint32_t(data.size()));
  mem_->Put(key, BufferPool::Default().Share(std::move(data)));
}

Status ChunkStore::SyncStaged() { return staging_ ? staging_->Sync() : Status::OK(); }

void ChunkStore::DrainStaged(const std::function<void(const ChunkStats&)>& progress) {
  if (!staging_) return;
  staging_->Drain([&](const StagingArea::Stats&) {
    if (progress) progress(stats());
  });
}

void ChunkStore::ForgetBlock(const std::string& key) {
  if (mem_) mem_->Erase(key);
  if (disk_) disk_->Erase(key);
}

ChunkStats ChunkStore::stats() const {
  ChunkStats s;
  s.mem_hits = counters_.mem_hits.load(std::memory_order_relaxed);
  s.mem_misses = counters_.mem_misses.load(std::memory_order_relaxed);
  s.prefetches_skipped = counters_.prefetches_skipped.load(std::memory_order_relaxed);
  s.disk_hits = counters_.disk_hits.load(std::memory_order_relaxed);
  s.disk_misses = counters_.disk_misses.load(std::memory_order_relaxed);
  s.shared_fetches = counters_.shared_fetches.load(std::memory_order_relaxed);
  s.store_gets = counters_.store_gets.load(std::memory_order_relaxed);
  s.store_get_bytes = counters_.store_get_bytes.load(std::memory_order_relaxed);
  s.store_puts = counters_.store_puts.load(std::memory_order_relaxed);
  s.store_put_bytes = counters_.store_put_bytes.load(std::memory_order_relaxed);
  if (mem_) {
    s.mem_bytes = mem_->bytes();
    s.mem_blocks = mem_->blocks();
  }
  if (disk_) {
    const DiskBlockCache::Stats d = disk_->stats();
    s.disk_enabled = true;
    s.disk_bytes = d.bytes;
    s.disk_blocks = d.blocks;
    s.disk_corrupt = d.corrupt;
    s.disk_evictions = d.evictions;
    s.disk_dropped_writes = d.dropped_writes;
  }
  s.staging_fallbacks = counters_.staging_fallbacks.load(std::memory_order_relaxed);
  if (staging_) {
    const StagingArea::Stats w = staging_->stats();
    s.writeback_enabled = true;
    s.staged_blocks = w.pending_blocks;
    s.staged_bytes = w.pending_bytes;
    s.staged_oldest_wait_seconds = w.oldest_wait_seconds;
    s.staged_uploads = w.uploaded;
    s.staged_upload_failures = w.upload_failures;
  }
  return s;
}

void ChunkStore::EmitMetrics(metrics::Emitter& e) const {
  const ChunkStats s = stats();
  const metrics::Labels mem = {{"cache", "memory"}}, disk = {{"cache", "disk"}};
  e.Counter("tessera_blockcache_hits_total", "Block reads served by a cache", mem, double(s.mem_hits));
  e.Counter("tessera_blockcache_misses_total", "Block reads a cache could not serve", mem, double(s.mem_misses));
  e.Gauge("tessera_blockcache_bytes", "Bytes held by a block cache", mem, double(s.mem_bytes));
  e.Gauge("tessera_blockcache_blocks", "Blocks held by a block cache", mem, double(s.mem_blocks));
  if (s.disk_enabled) {
    e.Counter("tessera_blockcache_hits_total", "Block reads served by a cache", disk, double(s.disk_hits));
    e.Counter("tessera_blockcache_misses_total", "Block reads a cache could not serve", disk, double(s.disk_misses));
    e.Gauge("tessera_blockcache_bytes", "Bytes held by a block cache", disk, double(s.disk_bytes));
    e.Gauge("tessera_blockcache_blocks", "Blocks held by a block cache", disk, double(s.disk_blocks));
    e.Counter("tessera_blockcache_evictions_total", "Blocks evicted from the disk cache", disk,
              double(s.disk_evictions));
    e.Counter("tessera_blockcache_corrupt_total", "Corrupt disk cache files found (deleted and fetched again)", disk,
              double(s.disk_corrupt));
    e.Counter("tessera_blockcache_dropped_writes_total",
              "Blocks not written to the disk cache: queue full, no room or a write error", disk,
              double(s.disk_dropped_writes));
  }
  e.Counter("tessera_block_fetches_total", "Blocks fetched from the object store for reads", {},
            double(s.store_gets));
  e.Counter("tessera_block_fetch_bytes_total", "Object bytes fetched for reads (compressed size)", {},
            double(s.store_get_bytes));
  e.Counter("tessera_block_shared_fetches_total", "Misses served by another reader's fetch of the same block", {},
            double(s.shared_fetches));
  e.Counter("tessera_block_uploads_total", "Blocks uploaded to the object store", {}, double(s.store_puts));
  e.Counter("tessera_block_upload_bytes_total", "Object bytes uploaded (compressed size)", {},
            double(s.store_put_bytes));
  e.Counter("tessera_prefetches_skipped_total", "Partial misses not prefetched (prefetching did not pay)", {},
            double(s.prefetches_skipped));
  if (s.writeback_enabled) {
    e.Gauge("tessera_staging_blocks", "Writeback: blocks staged on disk, not uploaded yet", {},
            double(s.staged_blocks));
    e.Gauge("tessera_staging_bytes", "Writeback: bytes staged on disk, not uploaded yet", {}, double(s.staged_bytes));
    e.Gauge("tessera_staging_oldest_wait_seconds",
            "Writeback: how long the oldest staged block has waited for an upload worker", {},
            s.staged_oldest_wait_seconds);
    e.Counter("tessera_staging_uploads_total", "Writeback: staged blocks uploaded", {}, double(s.staged_uploads));
    e.Counter("tessera_staging_upload_failures_total", "Writeback: failed upload attempts (each retried)", {},
              double(s.staged_upload_failures));
    e.Counter("tessera_staging_fallbacks_total", "Writeback: blocks uploaded directly (staging refused them)", {},
              double(s.staging_fallbacks));
  }
}

void ChunkStore::WaitForCacheWrites() {
  if (disk_) disk_->Drain();
}

Status ChunkStore::Prefetch(uint64_t id, uint32_t index, uint32_t len) {
  // Into the memory cache, and the disk cache: with only a disk cache, the
  // blocks partial reads fetch must still land somewhere.
  if ((!mem_ && !disk_) || len == 0) return Status::OK();
  auto block = GetBlock(BlockKey(id, index, len), len);
  return block.ok() ? Status::OK() : block.status();
}

Status ChunkStore::Warm(uint64_t id, uint32_t index, uint32_t len) {
  if (len == 0) return Status::OK();
  if (!disk_) return Prefetch(id, index, len);
  const std::string key = BlockKey(id, index, len);
  if (disk_->Contains(key)) return Status::OK();
  disk_->WaitForRoom(len);
  ASSIGN_OR_RETURN(BlockRef block, GetBlock(key, len));
  disk_->Put(key, std::move(block));  // a memory hit is not on disk yet; a fetch queued it already (no-op)
  return Status::OK();
}

void ChunkStore::Evict(uint64_t id, uint32_t index, uint32_t len) { ForgetBlock(BlockKey(id, index, len)); }

bool ChunkStore::Cached(uint64_t id, uint32_t index, uint32_t len) {
  const std::string key = BlockKey(id, index, len);
  if (disk_) return disk_->Contains(key);
  return mem_ && mem_->Get(key) != nullptr;
}

Status ChunkStore::StoreNewBlock(uint64_t id, uint32_t index, std::string_view data) {
  return StoreBlock(BlockKey(id, index, uint32_t(data.size())), data);
}

void ChunkStore::CacheUploaded(uint64_t id, uint32_t index, std::string data) {
  const std::string key = BlockKey(id, index, uint32_t(data.size()));
  CachePut(key, std::move(data));
}

Status ChunkStore::UploadBlock(uint64_t id, uint32_t index, std::string_view data) {
  std::string block = BufferPool::Default().Copy(data);
  return PutBlock(BlockKey(id, index, uint32_t(data.size())), &block);
}

Status ChunkStore::DeleteSlice(uint64_t id, uint32_t size) {
  if (id == 0) return Status::OK();
  Status first;
  for (uint32_t i = 0, count = BlockCount(size, config_.block_size); i < count; ++i) {
    const std::string key = BlockKey(id, i, BlockLen(size, config_.block_size, i));
    ForgetBlock(key);
    if (staging_) staging_->Cancel(key);
    Status st = store_->Delete(key);
    if (!st.ok() && first.ok()) first = st.With("delete slice " + std::to_string(id));
  }
  return first;
}

}  // namespace tessera::chunk
