#include "common/file_lock.h"
#include "common/endian.h"
#include "chunk/staging.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include <fmt/format.h>

#include "chunk/layout.h"
#include "common/buffer_pool.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace tessera::chunk {
namespace {

namespace fs = std::filesystem;

// Record header, all integers little-endian (docs/format.md):
//   0  magic     4 bytes: "TSSR" live, "TSSD" done (uploaded or cancelled)
//   4  version   u32 = 1
//   8  key_len   u32
//   12 data_len  u32
//   16 data_sum  u64, XXH64(data, seed 0)
//   24 head_sum  u64, XXH64(bytes 4..23 then the key, seed 0)
//   32 key, then data
constexpr size_t kHeaderSize = 32;
constexpr char kLive[4] = {'T', 'S', 'S', 'R'};
constexpr char kDone[4] = {'T', 'S', 'S', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxKeyLen = 4096;
constexpr uint64_t kMaxDataLen = kChunkSize;  // a block never exceeds a chunk
constexpr std::string_view kPackSuffix = ".pack";

uint64_t HeadSum(const char* header, std::string_view key) {
  std::string buf(header + 4, 20);
  buf.append(key);
  return XXH64(buf.data(), buf.size(), 0);
}

std::string PackName(uint64_t seq) { return fmt::format("{:016x}{}", seq, kPackSuffix); }

// The sequence number of a pack file name, or 0 if the name is not one.
uint64_t PackSeq(std::string_view name) {
  if (name.size() != 16 + kPackSuffix.size() || name.substr(16) != kPackSuffix) return 0;
  uint64_t seq = 0;
  for (char c : name.substr(0, 16)) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return 0;
    seq = seq << 4 | uint64_t(d);
  }
  return seq;
}

// fsync of a directory (its entries), through env.
Status FsyncDir(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(int fd, env->Open(path, O_RDONLY | O_DIRECTORY, 0));
  Status st = env->Fsync(fd);
  (void)env->Close(fd);
  return st.With("fsync " + path);
}

}  // namespace

StagingArea::Pack::~Pack() {
  if (fd >= 0) (void)env->Close(fd);  // nothing to do about a failed close of a read-only or synced pack
}

Result<std::unique_ptr<StagingArea>> StagingArea::Open(StagingOptions opts) {
  if (opts.dir.empty()) return Status::Err(EINVAL, "staging area: empty directory");
  if (!opts.upload) return Status::Err(EINVAL, "staging area: no upload function");
  if (!(opts.free_space_ratio >= 0 && opts.free_space_ratio < 1))
    return Status::Err(EINVAL, "staging area: free space ratio must be in [0, 1)");
  if (!opts.env) opts.env = Env::Posix();
  if (!opts.disk_space) opts.disk_space = [env = opts.env](const std::string& dir) { return env->Space(dir); };
  opts.uploaders = std::max<size_t>(opts.uploaders, 1);
  opts.retry_initial = std::max(opts.retry_initial, std::chrono::milliseconds(1));
  opts.retry_max = std::max(opts.retry_max, opts.retry_initial);
  while (opts.dir.size() > 1 && opts.dir.back() == '/') opts.dir.pop_back();

  bool created = false;
  RETURN_IF_ERROR(opts.env->MakeDirs(opts.dir, &created).With("staging area"));
  if (created) {
    // A new directory: make its entry durable before any pack relies on it.
    // If that fails, the first Sync's fsync of the directory reports it.
    const std::string parent = fs::path(opts.dir).parent_path().string();
    if (Status st = FsyncDir(opts.env, parent); !st.ok()) LOG_WARN("staging area: {}", st.ToString());
  }

  const std::string lock_path = opts.dir + "/.lock";
  ASSIGN_OR_RETURN(int lock_fd, LockFile(lock_path, "staging area", opts.dir, 0600));
  auto dir_fd = opts.env->Open(opts.dir, O_RDONLY | O_DIRECTORY, 0);
  if (!dir_fd.ok()) {
    ::close(lock_fd);
    return dir_fd.status().With("staging area");
  }
  std::unique_ptr<StagingArea> area(new StagingArea(std::move(opts), lock_fd, *dir_fd));
  RETURN_IF_ERROR(area->Scan());
  for (size_t i = 0; i < area->opts_.uploaders; ++i) area->workers_.emplace_back(&StagingArea::Work, area.get());
  return area;
}

StagingArea::StagingArea(StagingOptions opts, int lock_fd, int dir_fd)
    : opts_(std::move(opts)), env_(opts_.env), started_(env_->Now()), lock_fd_(lock_fd), dir_fd_(dir_fd) {}

StagingArea::~StagingArea() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  idle_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  {
    std::lock_guard append(append_mu_);
    std::lock_guard lock(mu_);
    current_.reset();
    std::vector<std::shared_ptr<Pack>> empty;
    for (auto& [seq, pack] : packs_)
      if (pack->live == 0) empty.push_back(pack);
    for (auto& pack : empty) {
      pack->open = false;
      DropPackLocked(pack);
    }
    if (!records_.empty())
      LOG_INFO("staging area {}: {} block(s), {} bytes not uploaded yet; they stay staged for the next mount",
               opts_.dir, records_.size(), pending_bytes_);
  }
  (void)env_->Close(dir_fd_);  // read-only
  ::close(lock_fd_);
}

Status StagingArea::Scan() {
  std::vector<std::pair<uint64_t, std::string>> packs;
  std::error_code ec;
  for (auto it = fs::directory_iterator(opts_.dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const std::string name = it->path().filename().string();
    if (name.find(".tmp") != std::string::npos) {  // never ours to upload: a partial write of some kind
      LOG_WARN("staging area: removing temporary file {}", it->path().string());
      fs::remove(it->path(), fec);
      continue;
    }
    if (uint64_t seq = PackSeq(name); seq != 0) packs.emplace_back(seq, it->path().string());
  }
  if (ec) return Status::Err(ec.value(), "staging area: scan " + opts_.dir + ": " + ec.message());
  std::sort(packs.begin(), packs.end());
  for (const auto& [seq, path] : packs) {
    RETURN_IF_ERROR(ScanPack(path, seq));
    std::lock_guard lock(mu_);
    next_seq_ = std::max(next_seq_, seq + 1);
  }
  std::lock_guard lock(mu_);
  if (!records_.empty())
    LOG_INFO("staging area {}: {} block(s), {} bytes staged by an earlier client; uploading them", opts_.dir,
             records_.size(), pending_bytes_);
  return Status::OK();
}

Status StagingArea::ScanPack(const std::string& path, uint64_t seq) {
  ASSIGN_OR_RETURN(int fd, env_->Open(path, O_RDWR, 0));
  auto pack = std::make_shared<Pack>();
  pack->env = env_;
  pack->seq = seq;
  pack->path = path;
  pack->fd = fd;
  ASSIGN_OR_RETURN(const uint64_t size, env_->FileSize(fd));

  struct Found {
    std::string key;
    Record record;
  };
  std::vector<Found> live;
  uint64_t off = 0;
  std::string why;
  std::string key;
  while (off < size) {
    char header[kHeaderSize];
    if (size - off < kHeaderSize) {
      why = "a partial header";
      break;
    }
    if (Status rs = PreadFull(env_, fd, header, kHeaderSize, off); !rs.ok()) return rs.With("staging area: " + path);
    const bool is_live = std::memcmp(header, kLive, 4) == 0;
    if (!is_live && std::memcmp(header, kDone, 4) != 0) {
      why = "no record magic";
      break;
    }
    const uint32_t version = uint32_t(GetLE(header + 4, 4));
    const uint32_t key_len = uint32_t(GetLE(header + 8, 4));
    const uint32_t len = uint32_t(GetLE(header + 12, 4));
    if (version != kVersion || key_len == 0 || key_len > kMaxKeyLen || len > kMaxDataLen) {
      why = "a bad header";
      break;
    }
    if (size - off - kHeaderSize < uint64_t(key_len) + len) {
      why = "a partial record";
      break;
    }
    key.resize(key_len);
    if (Status rs = PreadFull(env_, fd, key.data(), key_len, off + kHeaderSize); !rs.ok())
      return rs.With("staging area: " + path);
    if (HeadSum(header, key) != GetLE(header + 24, 8)) {
      why = "a header checksum mismatch";
      break;
    }
    if (is_live) live.push_back(Found{key, Record{pack, off, key_len, len, GetLE(header + 16, 8), false, false}});
    off += kHeaderSize + key_len + len;
  }
  if (off < size) {
    // Appends are serial, so only the last record can be torn, and it was
    // never acknowledged (its Sync never returned).
    LOG_WARN("staging area: {}: {} byte(s) from offset {} are not a complete record ({}); ignored", path, size - off,
             off, why);
  }

  std::lock_guard lock(mu_);
  pack->size = off;
  for (Found& f : live) {
    auto [it, inserted] = records_.try_emplace(f.key, std::move(f.record));
    if (!inserted) continue;  // staged twice: the first copy is enough
    ++pack->live;
    pending_bytes_ += it->second.len;
    ++counters_.recovered;
    queue_.emplace_back(f.key, std::chrono::steady_clock::time_point());
  }
  packs_.emplace(seq, pack);
  if (pack->live == 0) DropPackLocked(pack);
  return Status::OK();
}

Result<std::shared_ptr<StagingArea::Pack>> StagingArea::NewPackLocked() {
  auto pack = std::make_shared<Pack>();
  pack->env = env_;
  pack->seq = next_seq_++;
  pack->path = opts_.dir + "/" + PackName(pack->seq);
  ASSIGN_OR_RETURN(pack->fd, env_->Open(pack->path, O_RDWR | O_CREAT | O_EXCL, 0600));
  pack->open = true;
  packs_.emplace(pack->seq, pack);
  dir_dirty_ = true;
  return pack;
}

Status StagingArea::Append(const std::vector<Block>& blocks) {
  if (blocks.empty()) return Status::OK();
  uint64_t total = 0;
  for (const Block& b : blocks) {
    if (b.key.empty() || b.key.size() > kMaxKeyLen || b.data.size() > kMaxDataLen)
      return Status::Err(EINVAL, "staging area: bad block '" + b.key + "'");
    total += kHeaderSize + b.key.size() + b.data.size();
  }
  if (opts_.free_space_ratio > 0) {
    Result<DiskSpace> space = opts_.disk_space(opts_.dir);
    if (space.ok()) {
      const uint64_t keep = uint64_t(std::ceil(opts_.free_space_ratio * double(space->total_bytes)));
      if (space->avail_bytes < keep + total)
        return Status::Err(ENOSPC, fmt::format("staging area {}: {} bytes would leave less than {}% of the disk free",
                                               opts_.dir, total, opts_.free_space_ratio * 100));
    }
  }

  std::lock_guard append(append_mu_);
  std::shared_ptr<Pack> pack;
  uint64_t base = 0;
  std::vector<size_t> take;
  {
    std::lock_guard lock(mu_);
    if (stop_) return Status::Err(EIO, "staging area " + opts_.dir + " is shutting down");
    std::unordered_set<std::string_view> seen;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (records_.count(blocks[i].key) == 0 && seen.insert(blocks[i].key).second) take.push_back(i);
    if (take.empty()) return Status::OK();
    if (!current_ || !current_->open) {
      ASSIGN_OR_RETURN(current_, NewPackLocked());
    }
    pack = current_;
    base = pack->size;
  }

  std::vector<char> headers(take.size() * kHeaderSize);
  std::vector<iovec> iov;
  iov.reserve(take.size() * 3);
  std::vector<uint64_t> sums(take.size());
  for (size_t j = 0; j < take.size(); ++j) {
    const Block& b = blocks[take[j]];
    char* h = headers.data() + j * kHeaderSize;
    std::memcpy(h, kLive, 4);
    PutLE(h + 4, kVersion, 4);
    PutLE(h + 8, b.key.size(), 4);
    PutLE(h + 12, b.data.size(), 4);
    sums[j] = XXH64(b.data.data(), b.data.size(), 0);
    PutLE(h + 16, sums[j], 8);
    PutLE(h + 24, HeadSum(h, b.key), 8);
    iov.push_back({h, kHeaderSize});
    iov.push_back({const_cast<char*>(b.key.data()), b.key.size()});
    iov.push_back({const_cast<char*>(b.data.data()), b.data.size()});
  }
  if (Status st = PwriteFull(env_, pack->fd, std::move(iov), base); !st.ok()) {
    // Cut off what was written of the batch: the next append starts at
    // base. If even that fails, the pack takes no more appends (a scan
    // would stop at the torn record, losing the records after it).
    if (Status ts = env_->Ftruncate(pack->fd, base); !ts.ok()) {
      LOG_WARN("staging area: cannot cut a failed append off {}: {}", pack->path, ts.ToString());
      std::lock_guard lock(mu_);
      pack->open = false;
      if (current_ == pack) current_.reset();
    }
    return st.With("staging area: append to " + pack->path);
  }

  {
    std::lock_guard lock(mu_);
    const auto ready = env_->Now() + opts_.upload_delay;
    uint64_t off = base;
    for (size_t j = 0; j < take.size(); ++j) {
      const Block& b = blocks[take[j]];
      records_.try_emplace(b.key, Record{pack, off, uint32_t(b.key.size()), uint32_t(b.data.size()), sums[j], false,
                                         false});
      queue_.emplace_back(b.key, ready);
      ++pack->live;
      pending_bytes_ += b.data.size();
      off += kHeaderSize + b.key.size() + b.data.size();
    }
    counters_.staged += take.size();
    pack->size = off;
    if (std::find(dirty_.begin(), dirty_.end(), pack) == dirty_.end()) dirty_.push_back(pack);
    ++appended_gen_;
    if (pack->size >= opts_.pack_bytes) {  // full: the next append starts a new pack
      pack->open = false;
      current_.reset();
    }
  }
  work_cv_.notify_all();
  return Status::OK();
}

Status StagingArea::Sync() {
  uint64_t target;
  {
    std::lock_guard lock(mu_);
    target = appended_gen_;
  }
  std::lock_guard sync(sync_mu_);
  if (synced_gen_ >= target) return Status::OK();  // a concurrent Sync covered us
  std::vector<std::shared_ptr<Pack>> packs;
  bool dir = false;
  uint64_t gen = 0;
  {
    std::lock_guard lock(mu_);
    packs.swap(dirty_);
    dir = dir_dirty_;
    dir_dirty_ = false;
    gen = appended_gen_;
  }
  Status st;
  for (const auto& p : packs) {
    Status ps = env_->Fdatasync(p->fd);
    if (!ps.ok() && st.ok()) st = ps.With(p->path);
  }
  if (st.ok() && dir) st = env_->Fsync(dir_fd_).With(opts_.dir);
  std::lock_guard lock(mu_);
  if (!st.ok()) {  // try again next time
    dirty_.insert(dirty_.end(), packs.begin(), packs.end());
    dir_dirty_ = dir_dirty_ || dir;
    return st.With("staging area");
  }
  synced_gen_ = gen;
  ++counters_.syncs;
  return Status::OK();
}

Result<BlockRef> StagingArea::ReadRecord(const Pack& pack, uint64_t offset, uint32_t key_len, uint32_t len,
                                         uint64_t checksum) const {
  std::string data = BufferPool::Default().Sized(len);
  Status st = PreadFull(env_, pack.fd, data.data(), len, offset + kHeaderSize + key_len);
  if (!st.ok()) return st.With("staging area: read " + pack.path + " at " + std::to_string(offset));
  if (XXH64(data.data(), data.size(), 0) != checksum)
    return Status::Err(EIO, "staging area: record at " + std::to_string(offset) + " of " + pack.path +
                                " is corrupt (checksum mismatch)");
  return BufferPool::Default().Share(std::move(data));
}

Result<BlockRef> StagingArea::Get(const std::string& key) {
  Record r;
  {
    std::lock_guard lock(mu_);
    auto it = records_.find(key);
    if (it == records_.end() || it->second.cancelled) return BlockRef();
    r = it->second;
  }
  // The pack stays open while we hold it, even if the record finishes and
  // the pack is deleted meanwhile: its bytes never change.
  auto block = ReadRecord(*r.pack, r.offset, r.key_len, r.len, r.checksum);
  if (!block.ok()) return block.status().With("staged block " + key);
  return block;
}

bool StagingArea::Contains(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(key);
  return it != records_.end() && !it->second.cancelled;
}

void StagingArea::Cancel(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return;
  if (it->second.in_flight) {  // the worker removes the object after its upload
    it->second.cancelled = true;
    work_cv_.notify_all();
    return;
  }
  FinishLocked(it, Outcome::kCancelled);  // its key stays queued; workers skip it
}

void StagingArea::FinishLocked(std::unordered_map<std::string, Record>::iterator it, Outcome outcome) {
  Record& r = it->second;
  // Best effort: a record not marked done is only uploaded again by the next
  // client (or left in place if its slice is gone), never lost.
  iovec done{const_cast<char*>(kDone), sizeof(kDone)};
  if (Status ws = PwriteFull(env_, r.pack->fd, {done}, r.offset); !ws.ok())
    LOG_WARN("staging area: cannot mark {} done in {}: {}", it->first, r.pack->path, ws.ToString());
  switch (outcome) {
    case Outcome::kUploaded:
      ++counters_.uploaded;
      break;
    case Outcome::kCancelled:
      ++counters_.cancelled;
      break;
    case Outcome::kLost:
      ++counters_.lost;
      break;
  }
  std::shared_ptr<Pack> pack = r.pack;
  --pack->live;
  pending_bytes_ -= r.len;
  records_.erase(it);
  if (pack->live == 0 && !pack->open) DropPackLocked(pack);
  idle_cv_.notify_all();
}

void StagingArea::DropPackLocked(const std::shared_ptr<Pack>& pack) {
  if (pack->gone) return;
  if (Status us = env_->Unlink(pack->path); !us.ok() && !us.not_found())
    LOG_WARN("staging area: cannot delete {} (the next mount retries): {}", pack->path, us.ToString());
  pack->gone = true;
  packs_.erase(pack->seq);
  if (current_ == pack) current_.reset();
}

void StagingArea::Work() {
  NameThisThread("ts-stage-up");
  if (opts_.uploader_nice != 0 && ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), opts_.uploader_nice) != 0)
    LOG_DEBUG("staging area: cannot lower the priority of an upload worker: {}", std::strerror(errno));
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const auto ready = queue_.front().second;
    if (const auto now = env_->Now(); draining_ == 0 && ready > now) {  // --upload-delay
      work_cv_.wait_for(lk, ready - now);
      continue;
    }
    const std::string key = std::move(queue_.front().first);
    queue_.pop_front();
    auto it = records_.find(key);
    if (it == records_.end() || it->second.in_flight) continue;  // cancelled meanwhile
    it->second.in_flight = true;
    const Record r = it->second;
    lk.unlock();

    BlockRef block = opts_.cached ? opts_.cached(key) : nullptr;
    Status st;
    if (!block || block->size() != r.len) {
      Result<BlockRef> read = ReadRecord(*r.pack, r.offset, r.key_len, r.len, r.checksum);
      if (read.ok()) block = *read;
      else st = read.status();
    }
    if (!st.ok()) {
      LOG_ERROR("staging area: block {} is lost, its staged copy is unreadable: {}", key, st.ToString());
      lk.lock();
      FinishLocked(records_.find(key), Outcome::kLost);
      continue;
    }

    const RetryPolicy policy{0, opts_.retry_initial, opts_.retry_max};  // never gives up
    bool cancelled = false;
    for (int attempt = 1;; ++attempt) {
      const auto delay = policy.Delay(attempt + 1);
      st = opts_.upload(key, block);
      lk.lock();
      it = records_.find(key);
      cancelled = it->second.cancelled;
      if (st.ok() || cancelled || stop_) break;
      ++counters_.upload_failures;
      if (attempt <= 3 || attempt % 20 == 0)
        LOG_WARN("upload of staged block {} failed (attempt {}), retrying in {} ms: {}", key, attempt,
                 delay.count(), st.ToString());
      work_cv_.wait_for(lk, delay, [&] { return stop_ || records_.find(key)->second.cancelled; });
      it = records_.find(key);
      cancelled = it->second.cancelled;
      if (stop_ || cancelled) break;
      lk.unlock();
    }
    // lk is held here.
    if (cancelled) {
      // The slice was deleted while we uploaded: our object must not outlive
      // the DeleteSlice that raced with it.
      if (opts_.remove) {
        lk.unlock();
        if (Status rs = opts_.remove(key); !rs.ok())
          LOG_WARN("staging area: cannot delete the object of cancelled block {}: {}", key, rs.ToString());
        lk.lock();
      }
      FinishLocked(records_.find(key), Outcome::kCancelled);
    } else if (st.ok()) {
      FinishLocked(it, Outcome::kUploaded);
    } else {  // stopping: it stays staged for the next client
      it->second.in_flight = false;
    }
  }
}

void StagingArea::Drain(const std::function<void(const Stats&)>& progress) {
  {
    std::unique_lock lk(mu_);
    ++draining_;
    work_cv_.notify_all();  // delayed uploads go now
    while (!records_.empty() && !stop_) {
      if (idle_cv_.wait_for(lk, std::chrono::seconds(1), [&] { return records_.empty() || stop_; })) break;
      if (progress) {
        lk.unlock();
        progress(stats());
        lk.lock();
      }
    }
    --draining_;
  }
  std::lock_guard append(append_mu_);
  std::lock_guard lock(mu_);
  if (current_) {
    auto pack = current_;
    pack->open = false;
    current_.reset();
    if (pack->live == 0) DropPackLocked(pack);
  }
}

StagingArea::Stats StagingArea::stats() const {
  std::lock_guard lock(mu_);
  Stats s = counters_;
  s.pending_blocks = records_.size();
  s.pending_bytes = pending_bytes_;
  s.packs = packs_.size();
  if (!queue_.empty()) {
    // Blocks recovered at open are queued ready at the clock's epoch: count
    // them from this area's start.
    const auto ready = std::max(queue_.front().second, started_);
    s.oldest_wait_seconds = std::max(0.0, std::chrono::duration<double>(env_->Now() - ready).count());
  }
  return s;
}

}  // namespace tessera::chunk
