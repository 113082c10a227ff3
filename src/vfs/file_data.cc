#include "vfs/file_data.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/buffer_pool.h"
#include "common/log.h"
#include "vfs/compactor.h"

namespace tessera::vfs {

using chunk::kChunkSize;
using chunk::Slice;

namespace {
constexpr size_t kMaxFrozenSlices = 1024;       // uncommitted slices of one file before it commits
// Bytes of full blocks a stream may upload before they are committed (in the
// background, while writing goes on). Each commit drops the slices it hides,
// so a writer overwriting its own file in place leaves at most about this
// much replaced data in the bucket, however long it keeps the file open.
constexpr uint64_t kCommitFrozenBytes = kChunkSize;
}  // namespace

// ---------------------------------------------------------------- FileData

FileData::FileData(DataPath* dp, meta::Ino ino, uint64_t length) : dp_(dp), ino_(ino), length_(length) {}

FileData::~FileData() {
  {
    std::lock_guard<std::mutex> g(mu_);
    FinishBatchLocked();  // never in flight after a commit; to be safe
    // Whatever was never committed (the last handle's commit failed, or the
    // mount stopped) is abandoned; its objects go.
    if (!buffer_.empty() || !frozen_.empty()) DiscardLocked(Status::Err(EIO, "file closed with uncommitted writes"));
  }
}

Status FileData::Reopen() {
  std::lock_guard<std::mutex> g(mu_);
  views_.clear();
  meta::Attr attr;
  RETURN_IF_ERROR(dp_->meta()->GetAttr(meta::Context::Root(), ino_, &attr));
  length_ = attr.length;
  committed_attr_.reset();
  return Status::OK();
}

bool FileData::LastCommittedAttr(meta::Attr* out) {
  std::lock_guard<std::mutex> g(mu_);
  if (!committed_attr_) return false;
  *out = *committed_attr_;
  return true;
}

Status FileData::RefreshLocked() {
  if (!others_changed_.exchange(false, std::memory_order_acq_rel)) return Status::OK();
  views_.clear();
  meta::Attr attr;
  Status st = dp_->meta()->GetAttr(meta::Context::Root(), ino_, &attr);
  if (!st.ok()) {
    others_changed_.store(true, std::memory_order_release);  // the next read tries again
    return st;
  }
  length_ = attr.length;
  committed_attr_.reset();
  return Status::OK();
}

uint64_t FileData::PendingEndLocked() const {
  uint64_t end = buffer_.End();
  for (const auto& s : frozen_) end = std::max(end, uint64_t(s->chunk) * kChunkSize + s->EndInChunk());
  return end;
}

void FileData::MergePendingLocked(meta::Attr* attr) const {
  if (buffer_.empty() && frozen_.empty()) return;
  attr->length = std::max(attr->length, PendingEndLocked());
  attr->mtime = attr->ctime = last_write_;
}

void FileData::ApplyPending(meta::Attr* attr) {
  std::lock_guard<std::mutex> g(mu_);
  MergePendingLocked(attr);
}

Status FileData::ReadAttr(const meta::Context& ctx, meta::Attr* attr) {
  std::lock_guard<std::mutex> g(mu_);
  RETURN_IF_ERROR(dp_->meta()->GetAttr(ctx, ino_, attr));
  MergePendingLocked(attr);
  return Status::OK();
}

bool FileData::ApplyPendingSince(uint64_t epoch, meta::Attr* attr) {
  std::lock_guard<std::mutex> g(mu_);
  if (changed_.load(std::memory_order_relaxed) > epoch) return false;
  MergePendingLocked(attr);
  return true;
}

uint64_t FileData::Length() {
  std::lock_guard<std::mutex> g(mu_);
  return std::max(length_, PendingEndLocked());
}

// ---------------------------------------------------------------- writes

namespace {

// Uploads a buffered block of s (nothing if it is uploading or uploaded).
// here: on the calling thread (DataPath::UploadHere), else in the background.
void UploadBuffered(DataPath* dp, const std::shared_ptr<FrozenSlice>& s, uint32_t index, bool here = false) {
  std::string_view data;
  {
    std::lock_guard<std::mutex> g(s->mu);
    auto& b = s->blocks[index];
    if (b.state != FrozenSlice::State::kBuffered) return;
    b.state = FrozenSlice::State::kUploading;
    s->inflight++;
    data = b.data;  // immutable until this upload ends
  }
  auto done = [s, index, dp](Status st) {
    int64_t freed = 0;
    {
      std::lock_guard<std::mutex> g(s->mu);
      auto& b = s->blocks[index];
      if (st.ok()) {
        b.state = FrozenSlice::State::kUploaded;
        freed = int64_t(b.data.size());
        // Without writeback the upload left the caches alone: the bytes go
        // there now, without a copy (writeback's staging cached them).
        if (!dp->store()->writeback()) dp->store()->CacheUploaded(s->id, index, std::move(b.data));
        std::string().swap(b.data);
      } else {
        b.state = FrozenSlice::State::kBuffered;
        s->error = st;
      }
      s->inflight--;
    }
    s->cv.notify_all();
    dp->Charge(-freed);
  };
  if (here) dp->UploadHere(s->id, index, data, done);
  else dp->Upload(s->id, index, data, std::move(done));
}

}  // namespace

void FileData::SubmitBlock(const std::shared_ptr<FrozenSlice>& s, uint32_t index) { UploadBuffered(dp_, s, index); }

bool FileData::FreezeLocked(uint32_t chunk, uint32_t pos, std::string data) {
  const uint32_t bs = dp_->block_size();
  // Continue the newest frozen slice of this chunk when the cut follows it.
  std::shared_ptr<FrozenSlice> s;
  for (auto it = frozen_.rbegin(); it != frozen_.rend(); ++it) {
    if ((*it)->chunk != chunk) continue;
    std::lock_guard<std::mutex> g((*it)->mu);
    if ((*it)->pos + (*it)->len == pos && (*it)->len % bs == 0 && !(*it)->sealed) s = *it;
    break;
  }
  if (!s) {
    auto id = dp_->meta()->NewSliceId();
    if (!id.ok()) {  // keep the bytes buffered; the commit will report the error
      LOG_WARN("cannot allocate a slice id: {}", id.status().ToString());
      buffer_.Write(uint64_t(chunk) * kChunkSize + pos, data.data(), data.size());
      return false;
    }
    s = std::make_shared<FrozenSlice>();
    s->chunk = chunk;
    s->pos = pos;
    s->id = *id;
    frozen_.push_back(s);
  }
  uint32_t first;
  {
    std::lock_guard<std::mutex> g(s->mu);
    first = uint32_t(s->blocks.size());
    frozen_unbatched_bytes_ += data.size();
    for (size_t off = 0; off < data.size(); off += bs) {
      size_t n = std::min<size_t>(bs, data.size() - off);
      if (off == 0 && n == data.size()) s->blocks.push_back({std::move(data), FrozenSlice::State::kBuffered});
      else s->blocks.push_back({data.substr(off, n), FrozenSlice::State::kBuffered});
      s->len += uint32_t(n);
    }
  }
  for (uint32_t i = first;; ++i) {
    {
      std::lock_guard<std::mutex> g(s->mu);
      if (i >= s->blocks.size()) break;
    }
    SubmitBlock(s, i);
  }
  return true;
}

Status FileData::Write(const meta::Context& ctx, uint64_t off, const char* data, size_t size) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  if (dp_->buffered() > int64_t(dp_->buffer_limit()) && dp_->WaitForRoom()) {
    std::lock_guard<std::mutex> g(mu_);
    RETURN_IF_ERROR(CommitLocked(ctx));  // nothing is uploading: free memory by committing
  }
  std::lock_guard<std::mutex> g(mu_);
  if (size == 0) return Status::OK();
  ReapBatchLocked();
  // A background commit failed: its writes (and those after it) are gone;
  // writes fail until fsync or close reports it (and clears it).
  if (!unreported_.ok()) return unreported_;
  const bool idle = buffer_.empty() && frozen_.size() == (batch_ ? batch_->count : 0);  // nothing uncommitted yet
  const uint64_t end = off + size;
  // Only a write that appends new bytes at its end (a stream) freezes blocks;
  // one that overwrites buffered bytes may be followed by more overwrites.
  int64_t before = int64_t(buffer_.bytes());
  const bool appends = buffer_.Write(off, data, size);
  last_write_ = meta::Now();
  int64_t cut = 0;
  for (uint64_t c = off / kChunkSize; appends && c <= (end - 1) / kChunkSize; ++c) {
    uint32_t end_pos = uint32_t(std::min<uint64_t>(end, (c + 1) * kChunkSize) - c * kChunkSize);
    uint32_t pos = 0;
    std::string blocks;
    if (buffer_.CutFullBlocks(uint32_t(c), end_pos, dp_->block_size(), &pos, &blocks)) {
      const auto n = int64_t(blocks.size());
      if (FreezeLocked(uint32_t(c), pos, std::move(blocks))) cut += n;  // else buffered again, counted there
    }
  }
  dp_->Charge(int64_t(buffer_.bytes()) - before + cut);
  const size_t unbatched = frozen_.size() - (batch_ ? batch_->count : 0);
  // A writer that goes on for long (a slow stream) commits what it has at
  // least every max_uncommitted_age (one that stops: Tick).
  const auto now = std::chrono::steady_clock::now();
  if (idle) {
    oldest_pending_ = now;
    pending_ctx_ = ctx;
    pending_ctx_.effects = nullptr;  // outlives the request
  }
  const bool stale = now - oldest_pending_ >= dp_->max_uncommitted_age();
  if (buffer_.bytes() >= dp_->file_buffer_limit() || unbatched >= kMaxFrozenSlices || stale) {
    // Commit in the background while writing goes on, one batch at a time.
    // A failure is reported by the next Commit (fsync, close), as for any
    // buffered write. A writer that catches up with the running batch waits
    // for it (that bounds what one file holds: the batch and one buffer),
    // then commits its buffer in the background too, not inline: an inline
    // commit kept the writer (and every other writer of the file) waiting
    // for a whole buffer's uploads and engine commit on top of the batch.
    FinishBatchLocked();
    if (!unreported_.ok()) return unreported_;  // as above: until fsync or close reports it
    return StartBatchLocked(ctx, /*freeze_buffer=*/true);
  }
  // A long stream commits its uploaded blocks in the background, leaving
  // the buffer's partial block to the stream.
  if (frozen_unbatched_bytes_ >= kCommitFrozenBytes) {
    if (!batch_) return StartBatchLocked(ctx, /*freeze_buffer=*/false);
    stream_ctx_ = ctx;  // Tick starts it if the writer stops first
  }
  return Status::OK();
}

void FileData::Tick() {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return;
  ReapBatchLocked();
  if (batch_) return;
  if ((!buffer_.empty() || !frozen_.empty()) &&
      std::chrono::steady_clock::now() - oldest_pending_ >= dp_->max_uncommitted_age()) {
    stream_ctx_.reset();
    Status started = StartBatchLocked(pending_ctx_, /*freeze_buffer=*/true);
    if (!started.ok() && unreported_.ok()) unreported_ = started;
    return;
  }
  if (!stream_ctx_) return;
  const meta::Context ctx = std::move(*stream_ctx_);
  stream_ctx_.reset();
  if (frozen_unbatched_bytes_ < kCommitFrozenBytes) return;
  // Without freezing the buffer, starting a batch cannot fail: its upload
  // or commit failure comes back through the batch.
  Status started = StartBatchLocked(ctx, /*freeze_buffer=*/false);
  if (!started.ok() && unreported_.ok()) unreported_ = started;
}

Status FileData::Commit(const meta::Context& ctx) {
  InvalidateOnDiscard invalidate(this, /*sync=*/true);
  std::lock_guard<std::mutex> g(mu_);
  return CommitLocked(ctx);
}

Status FileData::Commit(const meta::Context& ctx, std::atomic<uint64_t>* seen) {
  InvalidateOnDiscard invalidate(this, /*sync=*/true);
  std::lock_guard<std::mutex> g(mu_);
  Status st = CommitLocked(ctx);
  // A failure since this handle last looked, reported by another handle's
  // commit or by none, is this handle's too; its own failure counts once.
  if (seen->exchange(errors_) != errors_ && st.ok()) st = last_error_;
  return st;
}

uint64_t FileData::ErrorMark() {
  std::lock_guard<std::mutex> g(mu_);
  return errors_;
}

void FrozenSlice::AppendRecords(std::vector<meta::SliceWrite>* out) const {
  if (runs.empty()) {
    out->push_back({chunk, Slice{pos, id, len, 0, len}});
    return;
  }
  for (const Run& r : runs) out->push_back({chunk, Slice{r.pos, id, len, r.off, r.len}});
}

namespace {

// Ranges shorter than a block are packed into one slice per chunk at commit.
bool Packable(const std::string& range, uint32_t block) { return range.size() < block; }

// Appends a buffer range at `pos` in the chunk to packed slice s (not yet
// shared): its bytes go at the end of the slice's blocks. total: the bytes
// the slice will hold in all. A last, shorter block of at least a quarter
// block takes a whole block's buffer, which the pool mostly holds (pages
// already in memory; 25% fewer page faults in 2-job random 4 KiB writes),
// at most 4x its bytes held until it is uploaded; a smaller one gets only
// its own room.
void PackRange(FrozenSlice* s, uint32_t pos, std::string&& bytes, uint32_t block, size_t total) {
  s->runs.push_back({pos, s->len, uint32_t(bytes.size())});
  s->runs_end = pos + uint32_t(bytes.size());
  for (size_t done = 0; done < bytes.size();) {
    if (s->blocks.empty() || s->blocks.back().data.size() == block)
      s->blocks.push_back({BufferPool::Default().Take(total - s->len >= block / 4 ? block : total - s->len),
                           FrozenSlice::State::kBuffered});
    std::string& b = s->blocks.back().data;
    const size_t n = std::min(bytes.size() - done, block - b.size());
    b.append(bytes, done, n);
    done += n;
  }
  s->len += uint32_t(bytes.size());
  // A range in a block's buffer goes back to the pool; one that grew as a
  // plain string (under 64 KiB, WriteBuffer) is freed.
  BufferPool::Default().GiveBlock(std::move(bytes), block);
}

}  // namespace

Status FileData::FreezeBufferLocked() {
  // Buffered ranges become slices after the frozen ones (they are newer):
  // the small ranges of a chunk one packed slice, each other range a slice.
  // Slice ids first: if the engine fails, the buffer stays as it is.
  const uint32_t bs = dp_->block_size();
  size_t needed = 0;
  std::map<uint32_t, size_t> packed_bytes;  // chunk -> bytes of its packed slice (two small ranges or more)
  for (const auto& [chunk, ranges] : buffer_.chunks()) {
    size_t small = 0, bytes_small = 0;
    for (const auto& [pos, bytes] : ranges) {
      if (Packable(bytes, bs)) ++small, bytes_small += bytes.size();
    }
    needed += ranges.size() - (small > 1 ? small - 1 : 0);
    if (small > 1) packed_bytes[chunk] = bytes_small;
  }
  std::vector<uint64_t> ids(needed);
  for (auto& id : ids) {
    ASSIGN_OR_RETURN(id, dp_->meta()->NewSliceId());
  }
  size_t next = 0;
  for (auto& [chunk, ranges] : buffer_.Take()) {  // the bytes stay charged until their blocks are uploaded
    std::shared_ptr<FrozenSlice> pack;
    const auto packing = packed_bytes.find(chunk);
    for (auto& [pos, bytes] : ranges) {
      if (packing != packed_bytes.end() && Packable(bytes, bs)) {
        if (!pack) {
          pack = std::make_shared<FrozenSlice>();
          pack->chunk = chunk;
          pack->pos = pos;
          pack->id = ids[next++];
          pack->sealed = true;  // never continued by a stream's blocks
        }
        PackRange(pack.get(), pos, std::move(bytes), bs, packing->second);
        continue;
      }
      auto s = std::make_shared<FrozenSlice>();
      s->chunk = chunk;
      s->pos = pos;
      s->id = ids[next++];
      s->len = uint32_t(bytes.size());
      if (bytes.size() <= bs) {  // no copy
        s->blocks.push_back({std::move(bytes), FrozenSlice::State::kBuffered});
      } else {
        for (size_t off = 0; off < s->len; off += bs)
          s->blocks.push_back({bytes.substr(off, std::min<size_t>(bs, s->len - off)), FrozenSlice::State::kBuffered});
      }
      frozen_.push_back(std::move(s));
    }
    if (pack) frozen_.push_back(std::move(pack));
  }
  return Status::OK();
}

namespace {

using BlockRefs = std::vector<std::pair<std::shared_ptr<FrozenSlice>, uint32_t>>;

// Marks every buffered block of the slices as uploading and returns them.
BlockRefs ClaimBuffered(const std::vector<std::shared_ptr<FrozenSlice>>& slices) {
  BlockRefs claimed;
  for (const auto& s : slices) {
    std::lock_guard<std::mutex> g(s->mu);
    for (uint32_t k = 0; k < s->blocks.size(); ++k) {
      if (s->blocks[k].state != FrozenSlice::State::kBuffered) continue;
      s->blocks[k].state = FrozenSlice::State::kUploading;
      s->inflight++;
      claimed.emplace_back(s, k);
    }
  }
  return claimed;
}

// Writeback: stages claimed blocks with one write. Each ends uploaded (its
// bytes handed to the memory cache) or, if staging failed, buffered again
// for the upload pool. Needs no FileData lock: the bytes of an uploading
// block do not change.
void StageClaimed(DataPath* dp, meta::Ino ino, const BlockRefs& claimed) {
  if (claimed.empty()) return;
  std::vector<chunk::ChunkStore::BlockView> views;
  views.reserve(claimed.size());
  int64_t bytes = 0;
  for (const auto& [s, k] : claimed) {
    std::lock_guard<std::mutex> g(s->mu);
    views.push_back({s->id, k, s->blocks[k].data});
    bytes += int64_t(s->blocks[k].data.size());
  }
  Status st = dp->store()->StageBlocks(views);
  if (!st.ok()) LOG_WARN("inode {}: cannot stage {} block(s), uploading them: {}", ino, claimed.size(), st.ToString());
  for (const auto& [s, k] : claimed) {
    {
      std::lock_guard<std::mutex> g(s->mu);
      auto& b = s->blocks[k];
      if (st.ok()) {
        b.state = FrozenSlice::State::kUploaded;
        dp->store()->CacheBlock(s->id, k, std::move(b.data));
        std::string().swap(b.data);
      } else {
        b.state = FrozenSlice::State::kBuffered;
      }
      s->inflight--;
    }
    s->cv.notify_all();
  }
  if (st.ok()) dp->Charge(-bytes);
}

// Waits for the slices' uploads; the first failure if a block is not uploaded.
Status WaitUploaded(const std::vector<std::shared_ptr<FrozenSlice>>& slices) {
  Status failed;
  for (const auto& s : slices) {
    std::unique_lock<std::mutex> lk(s->mu);
    s->cv.wait(lk, [&] { return s->inflight == 0; });
    for (const auto& b : s->blocks)
      if (b.state != FrozenSlice::State::kUploaded && failed.ok())
        failed = s->error.ok() ? Status::Err(EIO, "block upload failed") : s->error;
  }
  return failed;
}

}  // namespace

Status FileData::CommitLocked(const meta::Context& ctx) {
  FinishBatchLocked();  // commits stay in order
  if (!unreported_.ok()) {  // a background commit failed; its writes are gone
    Status st = std::move(unreported_);
    unreported_ = Status();
    return st;
  }
  if (buffer_.empty() && frozen_.empty()) return Status::OK();
  Status st = CommitPendingLocked(ctx);
  if (!st.ok()) DiscardLocked(st);
  return st;
}

Status FileData::CommitPendingLocked(const meta::Context& ctx) {
  RETURN_IF_ERROR(FreezeBufferLocked());
  if (dp_->store()->writeback()) StageClaimed(dp_, ino_, ClaimBuffered({frozen_.begin(), frozen_.end()}));
  // Uploads the blocks still buffered (the buffer's tail, or what a failed
  // staging left), the last one on this thread, which would only wait.
  for (size_t k = 0; k < frozen_.size(); ++k) {
    const auto& s = frozen_[k];
    size_t n;
    {
      std::lock_guard<std::mutex> g(s->mu);
      n = s->blocks.size();
    }
    for (uint32_t i = 0; i < n; ++i) UploadBuffered(dp_, s, i, /*here=*/k + 1 == frozen_.size() && i + 1 == n);
  }
  Status failed = WaitUploaded({frozen_.begin(), frozen_.end()});
  if (!failed.ok()) return failed.With("uploading data of inode " + std::to_string(ino_));
  // Writeback: the staged blocks must be on disk before the slices that
  // refer to them are committed.
  RETURN_IF_ERROR(dp_->store()->SyncStaged().With("staging data of inode " + std::to_string(ino_)));

  std::vector<meta::SliceWrite> writes;
  writes.reserve(frozen_.size());
  for (const auto& s : frozen_) s->AppendRecords(&writes);
  meta::Attr attr;
  std::vector<uint32_t> counts;
  RETURN_IF_ERROR(dp_->meta()->WriteSlices(ctx, ino_, writes, last_write_, &attr, &counts));
  length_ = attr.length;
  committed_attr_ = attr;
  changed_ = dp_->NextCommitEpoch();
  for (const auto& w : writes) views_.erase(w.chunk_index);
  frozen_.clear();
  frozen_unbatched_bytes_ = 0;
  dp_->ScheduleCompactions(ino_, writes, counts);
  return Status::OK();
}

void FileData::DiscardLocked(const Status& why) {
  if (batch_) FinishBatchLocked();  // a batch that did commit stays committed
  int64_t held = int64_t(buffer_.bytes());
  buffer_.TruncateTo(0);
  std::vector<std::pair<uint64_t, uint32_t>> abandoned;
  for (const auto& s : frozen_) {
    std::unique_lock<std::mutex> lk(s->mu);
    s->cv.wait(lk, [&] { return s->inflight == 0; });
    bool uploaded = false;
    for (const auto& b : s->blocks) {
      if (b.state == FrozenSlice::State::kUploaded) uploaded = true;
      else held += int64_t(b.data.size());
    }
    if (uploaded && !why.outcome_unknown()) abandoned.emplace_back(s->id, s->len);
  }
  const size_t slices = frozen_.size();
  frozen_.clear();
  frozen_unbatched_bytes_ = 0;
  changed_ = dp_->NextCommitEpoch();
  dp_->Charge(-held);
  views_.clear();
  discarded_.store(true);
  errors_++;
  last_error_ = why;
  LOG_WARN("inode {}: {} pending slice(s) and {} buffered byte(s) discarded after a failed commit{}: {}", ino_, slices,
           held, why.outcome_unknown() ? " (outcome unknown: their objects stay for gc)" : "", why.ToString());
  dp_->DeleteAbandoned(std::move(abandoned));
}

Status FileData::StartBatchLocked(const meta::Context& ctx, bool freeze_buffer) {
  if (freeze_buffer) RETURN_IF_ERROR(FreezeBufferLocked());
  stream_ctx_.reset();
  auto batch = std::make_shared<CommitBatch>();
  std::vector<std::shared_ptr<FrozenSlice>> slices(frozen_.begin(), frozen_.end());
  batch->count = slices.size();
  frozen_unbatched_bytes_ = 0;
  for (const auto& s : slices) {
    std::lock_guard<std::mutex> g(s->mu);
    s->sealed = true;  // committed with its length as it is now
    s->AppendRecords(&batch->writes);
  }
  // Writeback stages what is not uploading yet in one write; otherwise
  // blocks a failed upload left buffered are uploaded again.
  BlockRefs claimed;
  if (dp_->store()->writeback()) {
    claimed = ClaimBuffered(slices);
  } else {
    for (const auto& s : slices) {
      size_t n;
      {
        std::lock_guard<std::mutex> g(s->mu);
        n = s->blocks.size();
      }
      for (uint32_t i = 0; i < n; ++i) SubmitBlock(s, i);
    }
  }
  batch_ = batch;
  DataPath* dp = dp_;
  dp_->SubmitCommit([dp, ino = ino_, ctx, mtime = last_write_, batch, slices = std::move(slices),
                     claimed = std::move(claimed)] {
    StageClaimed(dp, ino, claimed);
    // What the staging area refused (a full or failing disk) is uploaded
    // directly, as a foreground commit does (CommitPendingLocked).
    for (const auto& [s, k] : claimed) UploadBuffered(dp, s, k);
    Status st = WaitUploaded(slices);
    if (st.ok()) st = dp->store()->SyncStaged();
    meta::Attr attr;
    std::vector<uint32_t> counts;
    if (st.ok()) st = dp->meta()->WriteSlices(ctx, ino, batch->writes, mtime, &attr, &counts);
    {
      std::lock_guard<std::mutex> g(batch->mu);
      batch->done = true;
      batch->status = st;
      batch->attr = attr;
    }
    batch->cv.notify_all();
    // Only once the batch is done: a compaction may release its slices'
    // objects, and a reader that then fails on one of them reads again,
    // reaping the batch, from the committed lists (Read). Scheduled
    // before, a compaction could release them while the batch still looked
    // pending, and the retry read them as pending again: EIO (seen under
    // TSan in VfsTest.ConcurrentWritersOnDifferentFiles). batch->writes is
    // not changed once done.
    if (st.ok()) dp->ScheduleCompactions(ino, batch->writes, counts);
  });
  return Status::OK();
}

void FileData::FinishBatchLocked() {
  if (!batch_) return;
  std::shared_ptr<CommitBatch> b = std::move(batch_);
  batch_.reset();
  {
    std::unique_lock<std::mutex> lk(b->mu);
    b->cv.wait(lk, [&] { return b->done; });
  }
  if (!b->status.ok()) {  // every pending write goes; the next Commit reports it
    if (unreported_.ok()) unreported_ = b->status.With("background commit of inode " + std::to_string(ino_));
    DiscardLocked(b->status);
    return;
  }
  frozen_.erase(frozen_.begin(), frozen_.begin() + ptrdiff_t(b->count));
  length_ = b->attr.length;
  committed_attr_ = b->attr;
  changed_ = dp_->NextCommitEpoch();
  for (const auto& w : b->writes) views_.erase(w.chunk_index);
}

void FileData::ReapBatchLocked() {
  if (!batch_) return;
  {
    std::lock_guard<std::mutex> g(batch_->mu);
    if (!batch_->done) return;
  }
  FinishBatchLocked();
}

Status FileData::Truncate(const meta::Context& ctx, uint64_t size, bool check_perm, meta::Attr* out) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::lock_guard<std::mutex> g(mu_);
  int64_t before = int64_t(buffer_.bytes());
  buffer_.TruncateTo(size);  // bytes past the new end never need uploading
  dp_->Charge(int64_t(buffer_.bytes()) - before);
  RETURN_IF_ERROR(CommitLocked(ctx));
  RETURN_IF_ERROR(dp_->meta()->Truncate(ctx, ino_, size, check_perm, out));
  length_ = out->length;
  committed_attr_ = *out;
  changed_ = dp_->NextCommitEpoch();
  views_.clear();
  return Status::OK();
}

Status FileData::Fallocate(const meta::Context& ctx, int mode, uint64_t off, uint64_t len) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::lock_guard<std::mutex> g(mu_);
  RETURN_IF_ERROR(CommitLocked(ctx));
  meta::Attr attr;
  RETURN_IF_ERROR(dp_->meta()->Fallocate(ctx, ino_, mode, off, len, &attr));
  length_ = attr.length;
  committed_attr_ = attr;
  changed_ = dp_->NextCommitEpoch();
  views_.clear();
  return Status::OK();
}

// ---------------------------------------------------------------- reads

Status FileData::ViewLocked(uint32_t chunk, std::vector<Slice>** view) {
  auto it = views_.find(chunk);
  if (it == views_.end()) {
    std::vector<Slice> slices;
    RETURN_IF_ERROR(dp_->meta()->Read(ino_, chunk, &slices));
    it = views_.emplace(chunk, chunk::BuildView(slices)).first;
  }
  *view = &it->second;
  return Status::OK();
}

Status FileData::ReadCommitted(uint64_t off, size_t size, char* buf,
                               const std::vector<std::pair<uint32_t, std::vector<Slice>>>& views) {
  std::memset(buf, 0, size);
  const uint64_t end = off + size;
  for (const auto& [chunk, view] : views) {
    uint64_t base = uint64_t(chunk) * kChunkSize;
    for (const Slice& s : view) {
      if (s.id == 0) continue;
      uint64_t ps = base + s.pos, pe = ps + s.len;
      uint64_t rs = std::max(ps, off), re = std::min(pe, end);
      if (rs >= re) continue;
      RETURN_IF_ERROR(dp_->store()->ReadSlice(s.id, s.size, uint32_t(s.off + (rs - ps)), uint32_t(re - rs),
                                              buf + (rs - off)));
    }
  }
  return Status::OK();
}

Status FileData::OverlayLocked(uint64_t off, size_t size, char* buf) {
  const uint64_t end = off + size;
  const uint32_t bs = dp_->block_size();
  for (const auto& s : frozen_) {
    const uint64_t base = uint64_t(s->chunk) * kChunkSize;
    if (base >= end || base + kChunkSize <= off) continue;
    std::lock_guard<std::mutex> g(s->mu);
    // Copies the slice's bytes [soff, soff + n) to dst, block by block.
    auto copy = [&](uint32_t soff, uint32_t n, char* dst) -> Status {
      while (n > 0) {
        const uint32_t k = soff / bs, in = soff % bs, m = std::min(n, bs - in);
        const auto& b = s->blocks[k];
        if (b.state != FrozenSlice::State::kUploaded) {
          std::memcpy(dst, b.data.data() + in, m);
        } else {
          RETURN_IF_ERROR(dp_->store()->ReadSlice(s->id, s->len, soff, m, dst)
                              .With("reading pending slice " + std::to_string(s->id)));
        }
        soff += m;
        dst += m;
        n -= m;
      }
      return Status::OK();
    };
    auto overlay = [&](const FrozenSlice::Run& r) -> Status {
      const uint64_t rs = std::max(base + r.pos, off), re = std::min(base + r.pos + r.len, end);
      return rs < re ? copy(uint32_t(r.off + (rs - base - r.pos)), uint32_t(re - rs), buf + (rs - off)) : Status::OK();
    };
    if (s->runs.empty()) {
      RETURN_IF_ERROR(overlay({s->pos, 0, s->len}));
      continue;
    }
    // The runs that can meet [off, end): from the last one starting at or before off.
    const uint64_t from = off > base ? off - base : 0;
    auto it = std::upper_bound(s->runs.begin(), s->runs.end(), from,
                               [](uint64_t p, const FrozenSlice::Run& r) { return p < r.pos; });
    if (it != s->runs.begin()) --it;
    for (; it != s->runs.end() && base + it->pos < end; ++it) RETURN_IF_ERROR(overlay(*it));
  }
  buffer_.Overlay(off, size, buf);
  return Status::OK();
}

Result<size_t> FileData::Read(uint64_t off, size_t size, char* buf) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::vector<std::pair<uint32_t, std::vector<Slice>>> views;
  for (int attempt = 0;; ++attempt) {
    std::unique_lock<std::mutex> lk(mu_);
    // A finished background commit's slices are read as committed, never
    // from objects a compaction since may have released.
    ReapBatchLocked();
    // A truncate or write by another client: the kernel dropped its pages
    // of the file, and the views cached here must not serve them again.
    RETURN_IF_ERROR(RefreshLocked());
    uint64_t length = std::max(length_, PendingEndLocked());
    if (off >= length || size == 0) return size_t(0);
    size = size_t(std::min<uint64_t>(size, length - off));
    views.clear();
    for (uint64_t c = off / kChunkSize; c <= (off + size - 1) / kChunkSize; ++c) {
      std::vector<Slice>* view = nullptr;
      RETURN_IF_ERROR(ViewLocked(uint32_t(c), &view));
      views.emplace_back(uint32_t(c), *view);
    }
    bool pending = !buffer_.empty() || !frozen_.empty();
    if (attempt == 0) ReadAheadLocked(off, size, length);
    if (!pending) lk.unlock();  // committed data only: read objects without the lock
    Status st = ReadCommitted(off, size, buf, views);
    if (st.ok()) {
      if (!pending) return size;
      // Pending bytes overlay the committed ones: a failure here is the
      // read's failure, never bytes that are not the file's.
      st = OverlayLocked(off, size, buf);
      if (st.ok()) return size;
    }
    // The view may be stale (another client overwrote and the old slices
    // were reclaimed), or a background commit that looked pending landed
    // and a compaction since released its slices' objects: wait for that
    // commit and read the slice lists again, once.
    if (attempt > 0) return st;
    if (!lk.owns_lock()) lk.lock();
    FinishBatchLocked();
    views_.clear();
  }
}

void FileData::Abandon(const Status& why) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::lock_guard<std::mutex> g(mu_);
  if (batch_ || !buffer_.empty() || !frozen_.empty()) DiscardLocked(why);
}

void FileData::InvalidateView(uint32_t chunk) {
  std::lock_guard<std::mutex> g(mu_);
  views_.erase(chunk);
}

void FileData::ReadAheadLocked(uint64_t off, size_t size, uint64_t length) {
  const uint64_t max = dp_->max_readahead();
  const uint64_t bs = dp_->block_size();
  const uint64_t end = off + size;
  if (max == 0) return;
  if (off != last_read_end_) {  // a jump: start over
    last_read_end_ = end;
    readahead_ = 0;
    prefetched_end_ = end;
    return;
  }
  last_read_end_ = end;
  readahead_ = readahead_ == 0 ? bs : std::min(max, readahead_ * 2);
  uint64_t from = std::max(prefetched_end_, end);
  uint64_t to = std::min(length, end + readahead_);
  if (from >= to) return;
  prefetched_end_ = to;
  for (uint64_t c = from / kChunkSize; c <= (to - 1) / kChunkSize; ++c) {
    std::vector<Slice>* view = nullptr;
    if (!ViewLocked(uint32_t(c), &view).ok()) return;
    uint64_t base = c * kChunkSize;
    for (const Slice& s : *view) {
      if (s.id == 0) continue;
      uint64_t ps = base + s.pos, pe = ps + s.len;
      uint64_t rs = std::max(ps, from), re = std::min(pe, to);
      if (rs >= re) continue;
      // Blocks of the slice's data that hold [rs, re).
      uint64_t first = (s.off + (rs - ps)) / bs, last = (s.off + (re - ps) - 1) / bs;
      for (uint64_t k = first; k <= last; ++k)
        dp_->Prefetch(s.id, uint32_t(k), chunk::BlockLen(s.size, uint32_t(bs), uint32_t(k)));
    }
  }
}

Result<uint64_t> FileData::Lseek(const meta::Context& ctx, uint64_t off, int whence) {
  InvalidateOnDiscard invalidate(this, /*sync=*/false);
  std::lock_guard<std::mutex> g(mu_);
  RETURN_IF_ERROR(CommitLocked(ctx));
  if (off >= length_) return Status::Err(ENXIO);
  // Data = bytes covered by a real slice; everything else is a hole.
  uint64_t pos = off;
  while (pos < length_) {
    uint32_t chunk = uint32_t(pos / kChunkSize);
    if (whence == SEEK_DATA) {  // chunks without a slice list are holes: skip them all at once
      std::vector<uint32_t> next;
      RETURN_IF_ERROR(dp_->meta()->ListChunks(ino_, chunk, 1, &next));
      if (next.empty()) return Status::Err(ENXIO);
      if (next[0] != chunk) {
        chunk = next[0];
        pos = uint64_t(chunk) * kChunkSize;
        if (pos >= length_) return Status::Err(ENXIO);
      }
    }
    uint64_t base = uint64_t(chunk) * kChunkSize;
    uint64_t chunk_end = std::min<uint64_t>(length_, base + kChunkSize);
    std::vector<Slice>* view = nullptr;
    RETURN_IF_ERROR(ViewLocked(chunk, &view));
    for (const Slice& s : *view) {
      uint64_t ps = base + s.pos, pe = std::min(ps + s.len, chunk_end);
      if (pe <= pos) continue;
      if (whence == SEEK_DATA && s.id != 0) return std::max(pos, ps);
      if (whence == SEEK_HOLE) {
        if (ps > pos || s.id == 0) return pos;  // a gap or an explicit hole
        pos = pe;                               // data: keep looking after it
      }
    }
    if (whence == SEEK_HOLE && pos < chunk_end) return pos;  // gap at the chunk tail
    pos = chunk_end;
  }
  if (whence == SEEK_HOLE) return length_;
  return Status::Err(ENXIO);
}

}  // namespace tessera::vfs
