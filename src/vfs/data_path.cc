// DataPath: what the open files of a mount share — the write buffer's
// budget, the upload pool, read-ahead, and compaction scheduling
// (vfs/file_data.h declares it; FileData is in file_data.cc).
#include "vfs/file_data.h"

#include <algorithm>
#include <chrono>

#include "common/buffer_pool.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "vfs/compactor.h"

namespace tessera::vfs {

namespace {
// Writeback: a chunk is compacted once no commit touched it for kCompactQuiet,
// or kCompactMaxDefer after it first asked (bounds its slice list).
constexpr auto kCompactQuiet = std::chrono::seconds(3);
constexpr auto kCompactMaxDefer = std::chrono::seconds(20);
constexpr size_t kMaxCompactRetries = 1 << 16;  // chunks remembered as not worth compacting yet
// A chunk found not worth compacting is checked again after this at the
// latest (its slices held may have grown past twice the visible data).
constexpr auto kCompactRetryAge = std::chrono::seconds(60);
}  // namespace

DataPath::DataPath(meta::Meta* meta, chunk::ChunkStore* store, size_t buffer_limit, size_t file_buffer_limit,
                   size_t max_uploads)
    : meta_(meta),
      store_(store),
      buffer_limit_(buffer_limit),
      file_buffer_limit_(file_buffer_limit),
      m_{metrics::NewCounter("tessera_buffer_waits_total", "Writes that waited for room in the write buffer"),
         metrics::NewCounter("tessera_buffer_wait_nanoseconds_total", "Time writes waited for room in the write buffer"),
         metrics::NewCounter("tessera_readahead_blocks_total", "Blocks read ahead (read-ahead and --prefetch)"),
         metrics::NewCounter("tessera_compactions_total", "Chunks compacted"),
         metrics::NewCounter("tessera_compaction_slices_total", "Slices of the chunks compacted"),
         metrics::NewCounter("tessera_compaction_failures_total", "Compactions that failed (not counting races lost)")},
      pool_(max_uploads, "ts-upload") {
  if (store_->writeback()) deferrer_ = std::thread([this] { DeferLoop(); });
  metrics_ = metrics::Registry::Global().AddCollector([this](metrics::Emitter& e) { EmitMetrics(e); });
}

void DataPath::EmitMetrics(metrics::Emitter& e) const {
  int64_t buffered = 0, inflight = 0;
  size_t deferred = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    buffered = buffered_;
    inflight = inflight_;
    deferred = deferred_.size();
  }
  e.Gauge("tessera_buffer_used_bytes", "Bytes written and not yet uploaded (the write buffer)", {}, double(buffered));
  e.Gauge("tessera_buffer_limit_bytes", "The write buffer's size (--buffer-size)", {}, double(buffer_limit_));
  e.Gauge("tessera_buffer_pool_bytes", "Block buffers kept for reuse (freed beyond 64 MiB after 10 s unused)", {},
          double(BufferPool::Default().kept_bytes()));
  e.Gauge("tessera_uploads_in_flight", "Block uploads submitted and not finished", {}, double(inflight));
  e.Gauge("tessera_compactions_deferred", "Writeback: chunks waiting to go quiet before compaction", {},
          double(deferred));
  e.Counter("tessera_abandoned_objects_total", "Objects of abandoned writes left to gc (their deletion failed)", {},
            double(abandoned_leaks()));
  e.Counter("tessera_compaction_checks_total",
            "Chunks the background compactor examined (compacted, or not worth rewriting yet)", {},
            double(compaction_checks()));
  e.Counter("tessera_readahead_failures_total", "Read-aheads that failed (the reads fetch for themselves)", {},
            double(prefetch_failures()));
}

DataPath::~DataPath() {
  metrics_ = {};
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;  // deferred compactions are dropped: the next commit asks again
  }
  defer_cv_.notify_all();
  if (deferrer_.joinable()) deferrer_.join();
  store_->set_partial_miss_hook(nullptr);
}

void DataPath::EnableBlockPrefetch() {
  store_->set_partial_miss_hook([this](uint64_t id, uint32_t index, uint32_t len) { Prefetch(id, index, len); });
}

void DataPath::Upload(uint64_t id, uint32_t index, std::string_view data, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> g(mu_);
    inflight_++;
  }
  pool_.Submit([this, id, index, data, done = std::move(done)] { RunUpload(id, index, data, done); });
}

void DataPath::UploadHere(uint64_t id, uint32_t index, std::string_view data, const std::function<void(Status)>& done) {
  {
    std::lock_guard<std::mutex> g(mu_);
    inflight_++;
  }
  RunUpload(id, index, data, done);
}

void DataPath::RunUpload(uint64_t id, uint32_t index, std::string_view data, const std::function<void(Status)>& done) {
  // Transient failures were retried below (object::RetryStore); what comes
  // back is the answer. Writeback: staged on the local disk and uploaded in
  // the background.
  Status st = store_->writeback() ? store_->StageBlock(id, index, data) : store_->StoreNewBlock(id, index, data);
  if (!st.ok()) LOG_WARN("upload of block {} of slice {} failed: {}", index, id, st.ToString());
  done(st);
  {
    std::lock_guard<std::mutex> g(mu_);
    inflight_--;
  }
  cv_.notify_all();
}

void DataPath::InvalidateKernelCache(meta::Ino ino, bool sync) {
  auto run = [this, ino] {
    std::shared_lock<std::shared_mutex> g(invalidator_mu_);
    if (invalidator_) invalidator_(ino);
  };
  if (sync) run();
  else notifier_.Submit(run);
}

void DataPath::DeleteAbandoned(std::vector<std::pair<uint64_t, uint32_t>> slices) {
  if (slices.empty()) return;
  deleter_.Submit([this, slices = std::move(slices)] {
    for (const auto& [id, size] : slices) {
      Status st = store_->DeleteSlice(id, size);
      if (!st.ok()) {
        abandoned_leaks_.fetch_add(1, std::memory_order_relaxed);
        LOG_WARN("cannot delete the objects of uncommitted slice {} (tessera gc will): {}", id, st.ToString());
      }
    }
  });
}

void DataPath::ConfigureCompaction(uint32_t threshold, std::function<void(meta::Ino, uint32_t)> on_compacted) {
  compact_threshold_ = threshold;
  on_compacted_ = std::move(on_compacted);
}

void DataPath::ScheduleCompaction(meta::Ino ino, uint32_t chunk) {
  // Not deferrer_.joinable(): a background commit may get here while
  // ~DataPath joins that thread (it then only adds to a dropped queue).
  if (store_->writeback()) {  // writeback: wait until the chunk goes quiet
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> g(mu_);
    auto [it, fresh] = deferred_.try_emplace({ino, chunk}, now, now);
    it->second.second = now;
    return;
  }
  SubmitCompaction(ino, chunk);
}

void DataPath::ScheduleCompactions(meta::Ino ino, const std::vector<meta::SliceWrite>& writes,
                                   const std::vector<uint32_t>& counts) {
  const uint32_t threshold = compact_threshold_;
  if (threshold == 0) return;
  std::vector<uint32_t> due;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = 0; i < counts.size() && i < writes.size(); ++i) {
      const uint32_t chunk = writes[i].chunk_index;
      if (counts[i] < threshold || (!due.empty() && due.back() == chunk)) continue;
      auto it = compact_retry_at_.find({ino, chunk});
      if (it != compact_retry_at_.end()) {
        const CompactRetry& r = it->second;
        const bool fell = uint64_t(counts[i]) * 4 < uint64_t(r.seen) * 3;
        if (counts[i] < r.retry_at && !fell && now - r.when < kCompactRetryAge) continue;
        compact_retry_at_.erase(it);
      }
      due.push_back(chunk);
    }
  }
  for (uint32_t chunk : due) ScheduleCompaction(ino, chunk);
}

void DataPath::DeferLoop() {
  NameThisThread("ts-defer");
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    defer_cv_.wait_for(lk, std::chrono::milliseconds(500));
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<meta::Ino, uint32_t>> due;
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      const auto& [first, last] = it->second;
      if (now - last >= kCompactQuiet || now - first >= kCompactMaxDefer) {
        due.push_back(it->first);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
    if (due.empty() || stopping_) continue;
    lk.unlock();
    for (const auto& [ino, chunk] : due) SubmitCompaction(ino, chunk);
    lk.lock();
  }
}

void DataPath::SubmitCompaction(meta::Ino ino, uint32_t chunk) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!compact_queued_.insert({ino, chunk}).second) return;
  }
  compactor_.Submit([this, ino, chunk] {
    {
      std::lock_guard<std::mutex> g(mu_);
      compact_queued_.erase({ino, chunk});
    }
    CompactResult r;
    Status st = CompactChunk(meta_, store_, ino, chunk, compact_threshold_, &r);
    compaction_checks_.fetch_add(1, std::memory_order_relaxed);
    if (st.ok() && r.retry_at > 0) {
      std::lock_guard<std::mutex> g(mu_);
      // Bounded: forgetting the entries costs only early compaction checks.
      if (compact_retry_at_.size() >= kMaxCompactRetries) compact_retry_at_.clear();
      compact_retry_at_[{ino, chunk}] = CompactRetry{r.slices_before, r.retry_at, std::chrono::steady_clock::now()};
    }
    if (st.ok() && r.changed) {
      m_.compactions->Inc();
      m_.compaction_slices->Inc(r.slices_before);
      if (on_compacted_) on_compacted_(ino, chunk);
    }
    if (!st.ok() && st.code() != EAGAIN && st.code() != ENOENT) {
      m_.compaction_failures->Inc();
      LOG_WARN("compacting inode {} chunk {}: {}", ino, chunk, st.ToString());
    }
  });
}

void DataPath::Prefetch(uint64_t id, uint32_t index, uint32_t block_len) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!prefetching_.insert({id, index}).second) return;
  }
  m_.readaheads->Inc();
  prefetcher_.Submit([this, id, index, block_len] {
    Status st = store_->Prefetch(id, index, block_len);
    if (!st.ok()) {
      prefetch_failures_.fetch_add(1, std::memory_order_relaxed);
      LOG_DEBUG("read-ahead of block {} of slice {}: {}", index, id, st.ToString());
    }
    std::lock_guard<std::mutex> g(mu_);
    prefetching_.erase({id, index});
  });
}

void DataPath::Charge(int64_t delta) {
  if (delta == 0) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    buffered_ += delta;
  }
  if (delta < 0) cv_.notify_all();
}

int64_t DataPath::buffered() const {
  std::lock_guard<std::mutex> g(mu_);
  return buffered_;
}

bool DataPath::WaitForRoom() {
  std::unique_lock<std::mutex> lk(mu_);
  if (buffered_ <= int64_t(buffer_limit_)) return false;
  const auto start = std::chrono::steady_clock::now();
  m_.buffer_waits->Inc();
  bool full = false;
  while (buffered_ > int64_t(buffer_limit_)) {
    if (inflight_ == 0) {
      full = true;
      break;
    }
    cv_.wait_for(lk, std::chrono::milliseconds(100));
  }
  m_.buffer_wait_ns->Inc(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - start).count()));
  return full;
}

}  // namespace tessera::vfs
