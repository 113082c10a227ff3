#include "vfs/vfs.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "common/buffer_pool.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "vfs/meta_backup.h"
#include "vfs/trash.h"

namespace tessera::vfs {

using chunk::kChunkSize;
using chunk::Slice;

Vfs::Vfs(meta::Meta* meta, chunk::ChunkStore* store, Config config)
    : meta_(meta),
      store_(store),
      config_(std::move(config)),
      data_(std::make_unique<DataPath>(meta, store, config_.buffer_size, config_.file_buffer_limit,
                                       config_.max_uploads)) {
  // Two files' commits pack their buffers into pool blocks at once: keep
  // up to half the write buffer for them (trimmed once writing stops).
  BufferPool::Default().set_limit(config_.buffer_size / 2);
  data_->set_max_readahead(config_.max_readahead);
  data_->set_max_uncommitted_age(std::chrono::milliseconds(config_.max_uncommitted_age_ms));
  // A local-directory bucket reads a range as fast as a cached block is
  // copied: a whole block fetched for a 4 KiB miss is only a 4 MiB copy.
  if (config_.prefetch && !store->store()->cheap_ranges()) data_->EnableBlockPrefetch();
  data_->ConfigureCompaction(config_.compact_threshold, [this](Ino ino, uint32_t chunk) {
    if (auto f = FindFile(ino)) f->InvalidateView(chunk);
  });
  static constexpr const char* kJobs[kJobCount] = {"heartbeat", "cleanup",     "dir_stats", "session_clean",
                                                   "backup",    "trash_purge", "quota_sync"};
  for (size_t i = 0; i < kJobCount; ++i) {
    jobs_[i].runs = metrics::NewCounter("tessera_background_runs_total", "Background job runs", {{"job", kJobs[i]}});
    jobs_[i].errors = metrics::NewCounter("tessera_background_errors_total",
                                          "Background job runs that failed (tried again later)", {{"job", kJobs[i]}});
  }
  used_space_ = metrics::NewGauge("tessera_used_space_bytes", "Space the volume's files use (at the last heartbeat)");
  total_space_ = metrics::NewGauge("tessera_total_space_bytes", "The volume's capacity (or what df shows without one)");
  used_inodes_ = metrics::NewGauge("tessera_used_inodes", "Inodes in the volume (at the last heartbeat)");
  total_inodes_ = metrics::NewGauge("tessera_total_inodes", "The volume's inode limit (or what df shows without one)");
}

void Vfs::RecordUsage(const meta::StatFs& fs) {
  used_space_->Set(int64_t(fs.total_space - fs.avail_space));
  total_space_->Set(int64_t(fs.total_space));
  used_inodes_->Set(int64_t(fs.used_inodes));
  total_inodes_->Set(int64_t(fs.used_inodes + fs.avail_inodes));
}

Vfs::~Vfs() {
  Stop();
  {
    std::lock_guard<std::mutex> g(table_mu_);
    files_.clear();
  }
  data_.reset();
}

Status Vfs::Start() {
  meta::SessionInfo info;
  info.mount_point = config_.mount_point;
  info.version = TESSERA_VERSION;
  RETURN_IF_ERROR(meta_->NewSession(info));
  if (meta::StatFs fs; meta_->StatFS(Context::Root(), &fs).ok()) RecordUsage(fs);
  auto cleaned = meta_->CleanStaleSessions(config_.session_timeout_s);
  if (cleaned.ok() && *cleaned > 0) LOG_INFO("cleaned {} stale session(s)", *cleaned);
  if (Status q = quotas_.Sync(); !q.ok()) LOG_WARN("loading quotas: {} (tried again in the background)", q.ToString());
  bg_thread_ = std::thread([this] { BackgroundLoop(); });
  session_thread_ = std::thread([this] { SessionLoop(); });
  quota_thread_ = std::thread([this] { QuotaLoop(); });
  backup_thread_ = std::thread([this] { BackupLoop(); });
  started_ = true;
  return Status::OK();
}

void Vfs::Stop() {
  if (!started_) return;
  started_ = false;
  std::vector<std::pair<Ino, std::shared_ptr<FileData>>> files;
  {
    std::lock_guard<std::mutex> g(table_mu_);
    files.assign(files_.begin(), files_.end());
  }
  for (auto& [ino, f] : files) {
    Status st = f->Commit(Context::Root());
    if (!st.ok()) LOG_ERROR("flushing inode {} at unmount: {}", ino, st.ToString());
  }
  {
    std::lock_guard<std::mutex> g(bg_mu_);
    stopping_ = true;
  }
  backup_cancel_ = true;
  bg_cv_.notify_all();
  if (bg_thread_.joinable()) bg_thread_.join();
  if (session_thread_.joinable()) session_thread_.join();
  if (backup_thread_.joinable()) backup_thread_.join();
  if (quota_thread_.joinable()) quota_thread_.join();
  if (Status q = quotas_.Sync(); !q.ok()) LOG_ERROR("writing quota usage at unmount: {}", q.ToString());
  Status st = meta_->CloseSession();
  if (!st.ok()) LOG_ERROR("closing session: {}", st.ToString());
}

void Vfs::BackgroundLoop() {
  NameThisThread("ts-background");
  auto deleter = [this](uint64_t id, uint32_t size) { return store_->DeleteSlice(id, size); };
  // While there is deletion work (a writer overwriting in place, a tree
  // removed) the loop comes back after kBusyWait, so that deletion keeps up
  // with the writers instead of taking max_items per interval.
  constexpr int kBusyWaitMs = 50;
  constexpr size_t kDeleteThreads = 8;
  // Block buffers a burst of writes left in the pool go back to the
  // allocator once nothing asked for one for this long.
  constexpr auto kPoolIdle = std::chrono::seconds(10);
  bool busy = false;
  std::unique_lock<std::mutex> lk(bg_mu_);
  while (!stopping_) {
    bg_cv_.wait_for(lk, std::chrono::milliseconds(busy ? std::min(kBusyWaitMs, config_.cleanup_interval_ms)
                                                       : config_.cleanup_interval_ms));
    if (stopping_) break;
    lk.unlock();
    // Directory statistics: at most a second behind (docs/consistency.md).
    Status flushed = meta_->FlushDirStats();
    CountJob(kDirStats, flushed);
    if (!flushed.ok()) LOG_WARN("writing directory statistics: {} (kept, tried again)", flushed.ToString());
    // Object stores answer a DELETE in milliseconds: one at a time would
    // fall behind a writer.
    // Streams that stopped writing while a background commit of theirs ran.
    std::vector<std::shared_ptr<FileData>> open;
    {
      std::lock_guard<std::mutex> g(table_mu_);
      open.reserve(files_.size());
      for (const auto& [ino, file] : files_) open.push_back(file);
    }
    for (const auto& file : open) file->Tick();
    open.clear();
    BufferPool::Default().TrimIdle(kPoolIdle);
    auto r = meta_->CleanupDeleted(deleter, 1000, kDeleteThreads);
    busy = r.ok() && *r > 0;
    CountJob(kCleanup, r.status());
    if (!r.ok()) LOG_WARN("background cleanup: {}", r.status().ToString());
    lk.lock();
  }
}

void Vfs::SessionLoop() {
  NameThisThread("ts-session");
  auto last_heartbeat = std::chrono::steady_clock::now();
  auto last_clean = last_heartbeat;
  const auto period = std::chrono::milliseconds(std::clamp(config_.cleanup_interval_ms, 1, 1000));
  std::unique_lock<std::mutex> lk(bg_mu_);
  while (!stopping_) {
    bg_cv_.wait_for(lk, period, [&] { return stopping_ || renew_; });
    if (stopping_) break;
    bool renew = false;
    std::swap(renew, renew_);
    lk.unlock();
    auto now = std::chrono::steady_clock::now();
    if (renew || now - last_heartbeat >= std::chrono::seconds(config_.heartbeat_interval_s)) {
      const chunk::ChunkStats cs = store_->stats();
      Status st = meta_->Heartbeat(meta::SessionLoad{cs.writeback_enabled, cs.staged_blocks, cs.staged_bytes});
      CountJob(kHeartbeat, st);
      if (st.code() == ESTALE) RenewSession();
      else if (!st.ok()) LOG_WARN("session heartbeat: {}", st.ToString());
      meta::StatFs fs;
      if (meta_->StatFS(Context::Root(), &fs).ok()) RecordUsage(fs);
      last_heartbeat = now;
    }
    // Others' dead sessions: at least twice per timeout, at most once a minute.
    if (now - last_clean >= std::chrono::seconds(std::clamp(config_.session_timeout_s / 2, 1, 60))) {
      auto c = meta_->CleanStaleSessions(config_.session_timeout_s);
      CountJob(kSessionClean, c.status());
      if (!c.ok()) LOG_WARN("stale session cleanup: {}", c.status().ToString());
      last_clean = now;
    }
    lk.lock();
  }
}

void Vfs::BackupLoop() {
  NameThisThread("ts-backup");
  const int64_t backups = config_.backup_interval_s;
  const auto period = std::chrono::seconds(std::clamp<int64_t>(backups > 0 ? backups / 4 : 60, 1, 60));
  std::unique_lock<std::mutex> lk(bg_mu_);
  while (!stopping_) {
    bg_cv_.wait_for(lk, period);
    if (stopping_) break;
    lk.unlock();
    PurgeTrashJob();
    if (backups <= 0) {
      lk.lock();
      continue;
    }
    auto claimed = meta_->ClaimJob("backup", config_.backup_interval_s);
    if (!claimed.ok()) {
      LOG_WARN("metadata backup: claiming the job: {} (trying again in {} s)", claimed.status().ToString(),
               period.count());
    } else if (*claimed) {
      auto t0 = std::chrono::steady_clock::now();
      uint64_t inodes = 0;
      auto key = BackupMeta(meta_, store_->store(), config_.backup_keep, &backup_cancel_, &inodes);
      if (key.status().code() != ECANCELED) CountJob(kBackup, key.status());
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (key.ok()) {
        LOG_INFO("metadata backup: {} inodes in {:.1f} s -> {}", inodes, secs, *key);
      } else if (key.status().code() != ECANCELED) {
        // The claim stands: the next client to try is this one or another,
        // one interval later.
        LOG_ERROR("metadata backup failed: {} (next attempt in {} s)", key.status().ToString(),
                  config_.backup_interval_s);
      }
    }
    lk.lock();
  }
}

void Vfs::PurgeTrashJob() {
  const int days = meta_->TrashDays();  // refreshed at each heartbeat (tessera config)
  if (days <= 0) return;
  auto claimed = meta_->ClaimJob("trash", config_.trash_purge_interval_s);
  if (!claimed.ok()) {
    LOG_WARN("trash purge: claiming the job: {}", claimed.status().ToString());
    return;
  }
  if (!*claimed) return;
  auto removed = PurgeTrash(meta_, days, meta::Now().sec, &backup_cancel_, [this](const std::string& hour, Ino ino) {
    InvalidateEntry(meta::kTrashIno, hour, ino);
  });
  if (removed.status().code() != ECANCELED) CountJob(kTrashPurge, removed.status());
  if (removed.ok()) {
    if (*removed > 0) LOG_INFO("trash: {} expired entries removed", *removed);
  } else if (removed.status().code() != ECANCELED) {
    LOG_ERROR("trash purge failed: {} (next attempt in {} s)", removed.status().ToString(),
              config_.trash_purge_interval_s);
  }
}

void Vfs::RenewSession() {
  const uint64_t gen = session_gen_.fetch_add(1) + 1;
  LOG_ERROR("this client's session expired: other clients cleaned it after {} s without a heartbeat (the "
            "metadata engine was out of reach), and may have taken over its locks and files. Writes not yet "
            "committed are discarded; files opened before fail with EIO; a new session starts (generation {})",
            config_.session_timeout_s, gen);
  std::vector<std::shared_ptr<FileData>> files;
  {
    std::lock_guard<std::mutex> g(table_mu_);
    for (auto& [ino, f] : files_) files.push_back(f);
  }
  for (auto& f : files) f->Abandon(Status::Err(EIO, "session expired"));
  {
    std::lock_guard<std::mutex> g(locks_mu_);
    lock_owners_.clear();  // the cleaner released them
  }
  meta::SessionInfo info;
  info.mount_point = config_.mount_point;
  info.version = TESSERA_VERSION;
  Status st = meta_->NewSession(info);
  if (!st.ok()) LOG_ERROR("starting a new session: {} (retrying at the next heartbeat)", st.ToString());
}

Status Vfs::CheckSession(const Handle* fh) const {
  if (fh->session == session_gen_.load(std::memory_order_relaxed)) return Status::OK();
  return Status::Err(EIO, "file opened in an expired session (this client was cut off from the metadata engine)");
}

Status Vfs::Fenced(Status st) {
  if (st.code() != ESTALE) return st;
  {
    std::lock_guard<std::mutex> g(bg_mu_);
    renew_ = true;
  }
  bg_cv_.notify_all();
  return Status::Err(EIO, st.message());
}

// ---------------------------------------------------------------- file table

Result<std::shared_ptr<FileData>> Vfs::AcquireFile(Ino ino, uint64_t length) {
  std::shared_ptr<FileData> f;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> g(table_mu_);
    auto& slot = files_[ino];
    if (!slot) {
      slot = std::make_shared<FileData>(data_.get(), ino, length);
      fresh = true;
    }
    slot->handles++;
    f = slot;
  }
  if (!fresh) {  // close-to-open: a new open revalidates what the other handles cached
    Status st = f->Reopen();
    if (!st.ok()) {
      ReleaseFile(ino);
      return st;
    }
  }
  return f;
}

void Vfs::ReleaseFile(Ino ino) {
  std::lock_guard<std::mutex> g(table_mu_);
  auto it = files_.find(ino);
  if (it == files_.end() || --it->second->handles > 0) return;
  if (const uint64_t changed = it->second->last_change(); changed > 0) {
    constexpr size_t kMaxClosed = 4096;
    if (closed_.size() >= kMaxClosed) {
      for (const auto& [_, epoch] : closed_) closed_floor_ = std::max(closed_floor_, epoch);
      closed_.clear();
    }
    closed_[ino] = changed;
  }
  files_.erase(it);
}

std::shared_ptr<FileData> Vfs::FindFile(Ino ino) {
  std::lock_guard<std::mutex> g(table_mu_);
  auto it = files_.find(ino);
  return it == files_.end() ? nullptr : it->second;
}

bool Vfs::Saw(Ino ino, const Attr& attr) {
  constexpr size_t kMaxSeen = 1 << 20;
  std::lock_guard<std::mutex> g(table_mu_);
  if (seen_.size() >= kMaxSeen) seen_.clear();
  const SeenFile now{attr.mtime, attr.ctime, attr.length};
  auto [it, fresh] = seen_.try_emplace(ino, now);
  const bool same = !fresh && it->second == now;
  it->second = now;
  return same;
}

void Vfs::SawOwnWrites(const Context& ctx, Handle* fh) {
  Attr attr;
  // Our writes went through the kernel's page cache, so it matches the
  // file as our last commit left it: remember that for the next open's
  // keep_cache (a later change by another client then differs from it).
  if (fh->written && (fh->file->LastCommittedAttr(&attr) || meta_->GetAttr(ctx, fh->ino, &attr).ok()))
    Saw(fh->ino, attr);
}

namespace {
// The kernel asked about an inode it looked up earlier, which has been
// deleted since (e.g. replaced by a rename in another thread or client).
// ESTALE makes the kernel look the path up again and retry (open(2),
// stat(2)), so the caller sees the new file instead of a spurious ENOENT.
Status Stale(Status st) { return st.code() == ENOENT ? Status::Err(ESTALE) : st; }
}  // namespace

Status Vfs::MergePending(const Context& ctx, uint64_t epoch, Ino ino, Attr* attr) {
  if (!attr->IsFile()) return Status::OK();
  for (int tries = 0;; ++tries) {
    std::shared_ptr<FileData> f;
    bool closed_since = false;
    {
      std::lock_guard<std::mutex> g(table_mu_);
      if (auto it = files_.find(ino); it != files_.end()) {
        f = it->second;
      } else {
        auto c = closed_.find(ino);
        closed_since = (c != closed_.end() ? c->second : closed_floor_) > epoch;
      }
    }
    if (f != nullptr ? f->ApplyPendingSince(epoch, attr) : !closed_since) return Status::OK();
    // Busy with commits: read under the file's lock (waits for the commit).
    if (f != nullptr && tries >= 2) return Stale(f->ReadAttr(ctx, attr));
    if (f == nullptr && tries >= 2) return Status::OK();  // opened and closed again and again: any answer is as new
    epoch = data_->CommitEpoch();
    RETURN_IF_ERROR(Stale(meta_->GetAttr(ctx, ino, attr)));
  }
}

// ---------------------------------------------------------------- namespace

void Vfs::OthersChanged(const std::vector<meta::Change>& changes, bool lost, int64_t brief_ms) {
  if (lost) dirs_.Lost(int(brief_ms));
  else dirs_.Changed(changes);
  quotas_.OthersChanged(changes, lost, brief_ms);
  // Open files another client changed read their slice lists again.
  std::lock_guard<std::mutex> g(table_mu_);
  if (lost) {
    for (const auto& [ino, file] : files_) file->OthersChanged();
    return;
  }
  for (const auto& c : changes)
    if (c.parent == 0)
      if (auto it = files_.find(c.ino); it != files_.end()) it->second->OthersChanged();
}

Status Vfs::Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) {
  // A name missing from a directory all of whose names this client knows;
  // a caller without search permission gets the engine's EACCES instead.
  if (Attr dir; dirs_.Absent(parent, name, &dir) && meta::CheckPermission(ctx, dir, X_OK).ok())
    return Status::Err(ENOENT);
  const uint64_t epoch = data_->CommitEpoch();
  RETURN_IF_ERROR(meta_->Lookup(ctx, parent, name, ino, attr));
  return MergePending(ctx, epoch, *ino, attr);
}

Status Vfs::GetAttr(const Context& ctx, Ino ino, Attr* attr) {
  if (dirs_.Get(ino, attr)) return Status::OK();  // as this client's last change of it left it
  const uint64_t epoch = data_->CommitEpoch();
  if (!meta_->CachedAttr(ino, attr)) RETURN_IF_ERROR(Stale(meta_->GetAttr(ctx, ino, attr)));
  return MergePending(ctx, epoch, ino, attr);
}

Status Vfs::SetAttr(const Context& ctx, Ino ino, Handle* fh, uint32_t mask, const Attr& in, bool has_size,
                    uint64_t size, Attr* out) {
  const uint64_t epoch = data_->CommitEpoch();
  // Quotas: a truncate changes the owner's and the trees' space, a chown
  // moves the file's usage between owners.
  Attr before;
  const bool chown = (mask & (meta::kSetUid | meta::kSetGid)) != 0;
  QuotaTracker::Change grow, move_to;
  move_to.scope = 0;  // set only by a chown that changes an owner
  if (quotas_.Active() && (has_size || chown)) {
    RETURN_IF_ERROR(GetAttr(ctx, ino, &before));
    const int64_t space = before.IsFile() ? Space(before.length) : 0;
    if (has_size && before.IsFile()) {
      grow = {before.parent, before.uid, before.gid, Space(size) - space, 0, QuotaTracker::kBoth};
      RETURN_IF_ERROR(quotas_.Reserve(grow));
    }
    if (chown) {
      const uint32_t uid = (mask & meta::kSetUid) ? in.uid : before.uid;
      const uint32_t gid = (mask & meta::kSetGid) ? in.gid : before.gid;
      const unsigned scope = (uid != before.uid ? unsigned(QuotaTracker::kUser) : 0u) | (gid != before.gid ? unsigned(QuotaTracker::kGroup) : 0u);
      move_to = {0, uid, gid, has_size && before.IsFile() ? Space(size) : space, 1, scope};
      if (scope != 0) {
        if (Status q = quotas_.Reserve(move_to); !q.ok()) {
          quotas_.Charge(QuotaTracker::Negated(grow));
          return q;
        }
      }
    }
  }
  Status st;
  if (has_size) {
    if (fh) st = CheckSession(fh);
    if (st.ok()) {
      if (auto f = FindFile(ino)) st = Fenced(f->Truncate(ctx, size, fh == nullptr, out));
      else st = AttrChange(ino, [&] { return meta_->Truncate(ctx, ino, size, fh == nullptr, out); });
    }
  }
  if (st.ok() && (mask != 0 || !has_size)) st = AttrChange(ino, [&] { return meta_->SetAttr(ctx, ino, mask, in, out); });
  if (!st.ok()) {
    quotas_.Charge(QuotaTracker::Negated(grow));
    quotas_.Charge(QuotaTracker::Negated(move_to));
    return st;
  }
  if (move_to.scope != 0)  // the old owner's usage goes
    quotas_.Charge({0, before.uid, before.gid, -move_to.space, -1, move_to.scope});
  return MergePending(ctx, epoch, ino, out);
}

Status Vfs::Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask,
                  uint32_t rdev, Ino* ino, Attr* attr) {
  if ((mode & S_IFMT) == S_IFDIR || (mode & S_IFMT) == S_IFLNK) return Status::Err(EINVAL);
  return MknodCharged(ctx, parent, name, mode, umask, rdev, "", ino, attr);
}

Status Vfs::Mkdir(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask, Ino* ino,
                  Attr* attr) {
  return MknodCharged(ctx, parent, name, S_IFDIR | (mode & 07777), umask, 0, "", ino, attr);
}

Status Vfs::Symlink(const Context& ctx, Ino parent, const std::string& name, const std::string& target, Ino* ino,
                    Attr* attr) {
  return MknodCharged(ctx, parent, name, S_IFLNK | 0777, 0, 0, target, ino, attr);
}

Status Vfs::Unlink(const Context& ctx, Ino parent, const std::string& name) {
  return RemoveCharged(ctx, parent, name, false);
}
Status Vfs::Rmdir(const Context& ctx, Ino parent, const std::string& name) {
  return RemoveCharged(ctx, parent, name, true);
}

Status Vfs::Rename(const Context& ctx, Ino parent, const std::string& name, Ino new_parent,
                   const std::string& new_name, uint32_t flags) {
  if (quotas_.Active()) return RenameWithQuotas(ctx, parent, name, new_parent, new_name, flags);
  Ino ino = 0;
  Attr attr;
  DirCache::Names names = RenamedNames(parent, name, new_parent, new_name, flags);
  return DirChange(ctx, parent, new_parent, &names,
                   [&] { return meta_->Rename(ctx, parent, name, new_parent, new_name, flags, &ino, &attr); });
}

Status Vfs::Link(const Context& ctx, Ino ino, Ino new_parent, const std::string& new_name, Attr* attr) {
  const uint64_t epoch = data_->CommitEpoch();
  QuotaTracker::Change c;
  if (quotas_.Active()) {  // a new name charges the trees above it (not the owner: same inode)
    Attr a;
    RETURN_IF_ERROR(GetAttr(ctx, ino, &a));
    c = {new_parent, a.uid, a.gid, a.IsFile() ? Space(a.length) : 0, 1, QuotaTracker::kDirs};
    RETURN_IF_ERROR(quotas_.Reserve(c));
  }
  DirCache::Names names = DirCache::Names::Added(new_parent, new_name);
  if (Status st = DirChange(ctx, new_parent, 0, &names, [&] { return meta_->Link(ctx, ino, new_parent, new_name, attr); });
      !st.ok()) {
    quotas_.Charge(QuotaTracker::Negated(c));
    return st;
  }
  return MergePending(ctx, epoch, ino, attr);
}

Status Vfs::ReadLink(const Context& ctx, Ino ino, std::string* target) { return meta_->ReadLink(ctx, ino, target); }
Status Vfs::Access(const Context& ctx, Ino ino, int mask) { return meta_->Access(ctx, ino, mask); }

// ---------------------------------------------------------------- files

Status Vfs::Open(const Context& ctx, Ino ino, int flags, Handle** fh, Attr* attr) {
  const uint64_t epoch = data_->CommitEpoch();
  const uint64_t lost = meta_->LostChanges();
  RETURN_IF_ERROR(Stale(meta_->Open(ctx, ino, flags, attr)));
  auto h = std::make_unique<Handle>();
  h->ino = ino;
  h->flags = flags;
  h->lost_seen = lost;
  h->session = session_gen_.load(std::memory_order_relaxed);
  h->uid = attr->uid;
  h->gid = attr->gid;
  h->parent = attr->parent;
  if (attr->IsFile()) {
    auto f = AcquireFile(ino, attr->length);
    if (!f.ok()) {
      (void)meta_->Close(ctx, ino);
      return f.status();
    }
    h->file = std::move(*f);
    h->errors_seen = h->file->ErrorMark();
    if (Status st = MergePending(ctx, epoch, ino, attr); !st.ok()) {
      h->file.reset();
      ReleaseFile(ino);
      (void)meta_->Close(ctx, ino);
      return st;
    }
    h->keep_cache = Saw(ino, *attr);
  }
  *fh = h.release();
  return Status::OK();
}

Status Vfs::Create(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask, int flags,
                   Handle** fh, Ino* ino, Attr* attr) {
  const uint64_t lost = meta_->LostChanges();
  Status st = MknodCharged(ctx, parent, name, S_IFREG | (mode & 07777), umask, 0, "", ino, attr);
  if (st.code() == EEXIST && !(flags & O_EXCL)) {
    // Created meanwhile by someone else: open it like open(2) without O_EXCL.
    RETURN_IF_ERROR(meta_->Lookup(ctx, parent, name, ino, attr));
    if (attr->IsDir()) return Status::Err(EISDIR);
    RETURN_IF_ERROR(Open(ctx, *ino, flags, fh, attr));
    if (flags & O_TRUNC) {
      Attr out;
      Status tst = SetAttr(ctx, *ino, *fh, 0, Attr{}, true, 0, &out);
      if (!tst.ok()) {
        (void)Release(ctx, *fh);
        return tst;
      }
      *attr = out;
    }
    return Status::OK();
  }
  RETURN_IF_ERROR(st);
  // The creator may open the new file whatever its mode says: no permission
  // check, just count the open (Release's Close drops it).
  meta_->AddRef(*ino);
  auto h = std::make_unique<Handle>();
  h->ino = *ino;
  h->flags = flags;
  h->lost_seen = lost;
  h->session = session_gen_.load(std::memory_order_relaxed);
  h->uid = attr->uid;
  h->gid = attr->gid;
  h->parent = parent;
  auto f = AcquireFile(*ino, 0);
  if (!f.ok()) {
    (void)meta_->Close(ctx, *ino);
    return f.status();
  }
  h->file = std::move(*f);
  h->errors_seen = h->file->ErrorMark();
  Saw(*ino, *attr);
  *fh = h.release();
  return Status::OK();
}

Result<size_t> Vfs::Read(const Context& ctx, Handle* fh, uint64_t off, size_t size, char* buf) {
  if (!fh->file) return Status::Err(EISDIR);
  if ((fh->flags & O_ACCMODE) == O_WRONLY) return Status::Err(EBADF);
  return fh->file->Read(off, size, buf);
}

Result<size_t> Vfs::Write(const Context& ctx, Handle* fh, uint64_t off, const char* data, size_t size) {
  if (!fh->file) return Status::Err(EISDIR);
  if ((fh->flags & O_ACCMODE) == O_RDONLY) return Status::Err(EBADF);
  if (size > meta::kMaxFileSize || off > meta::kMaxFileSize - size) return Status::Err(EFBIG);
  RETURN_IF_ERROR(CheckSession(fh));
  int64_t charged = 0;
  std::unique_lock<std::mutex> quota_lock(fh->file->quota_mu, std::defer_lock);
  if (quotas_.Active()) quota_lock.lock();
  RETURN_IF_ERROR(ReserveGrowth(fh, off + size, &charged));
  if (Status st = Fenced(fh->file->Write(ctx, off, data, size)); !st.ok()) {
    quotas_.Charge({fh->parent, fh->uid, fh->gid, -charged, 0, QuotaTracker::kBoth});
    return st;
  }
  fh->written.store(true, std::memory_order_relaxed);
  return size;
}

Status Vfs::CommitThrough(const Context& ctx, Handle* fh, bool fsync) {
  if ((fh->flags & O_ACCMODE) != O_RDONLY || fsync) return Fenced(fh->file->Commit(ctx, &fh->errors_seen));
  // A reader's close commits its writers' data too (close-to-open); if that
  // fails, the file's error mark tells them.
  (void)Fenced(fh->file->Commit(ctx));
  return Status::OK();
}

Status Vfs::CommitMeta(Handle* fh) {
  Status st = meta_->CommitPending();
  const uint64_t lost = meta_->LostChanges();
  uint64_t seen = fh->lost_seen.load(std::memory_order_relaxed);
  if (lost != seen && fh->lost_seen.compare_exchange_strong(seen, lost) && st.ok()) {
    return Status::Err(EIO, std::to_string(lost - seen) +
                                " metadata change(s) this client answered for could not be committed and are gone "
                                "(see its log)");
  }
  return st;
}

Status Vfs::Flush(const Context& ctx, Handle* fh, uint64_t lock_owner) {
  Status st = fh->file ? CheckSession(fh) : Status::OK();
  if (st.ok() && fh->file) st = CommitThrough(ctx, fh, false);
  // close(2) returns once the file's changes are committed (with a commit
  // delay, they may not be yet).
  if (st.ok()) st = CommitMeta(fh);
  // close(2) waits for FLUSH but not for RELEASE: an open right after the
  // close may come before the release.
  if (st.ok() && fh->file) SawOwnWrites(ctx, fh);
  Status lst = DropPosixLocks(ctx, fh->ino, lock_owner);
  return st.ok() ? lst : st;
}

Status Vfs::Fsync(const Context& ctx, Handle* fh) {
  if (!fh->file) return CommitMeta(fh);
  RETURN_IF_ERROR(CheckSession(fh));
  RETURN_IF_ERROR(CommitThrough(ctx, fh, true));
  return CommitMeta(fh);
}

Status Vfs::FsyncDir(Handle* fh) { return CommitMeta(fh); }

Status Vfs::Release(const Context& ctx, Handle* fh) {
  std::unique_ptr<Handle> h(fh);
  Status st;
  std::vector<uint64_t> owners;
  {
    std::lock_guard<std::mutex> g(h->dir_mu);
    owners.swap(h->lock_owners);
  }
  for (uint64_t owner : owners) {  // OFD locks live as long as their open file description
    Status lst = DropPosixLocks(ctx, h->ino, owner);
    if (!lst.ok()) LOG_WARN("inode {}: releasing the locks of a closed file: {}", h->ino, lst.ToString());
  }
  if (h->file) {
    st = CheckSession(h.get());
    if (st.ok()) st = CommitThrough(ctx, h.get(), false);
    if (!st.ok()) LOG_ERROR("inode {}: data written but not committed at close: {}", h->ino, st.ToString());
    if (st.ok()) SawOwnWrites(ctx, h.get());
    ReleaseFile(h->ino);
  }
  Status cst = meta_->Close(ctx, h->ino);
  return st.ok() ? cst : st;
}

Status Vfs::Fallocate(const Context& ctx, Handle* fh, int mode, uint64_t off, uint64_t len) {
  if (!fh->file) return Status::Err(ENODEV);
  if ((fh->flags & O_ACCMODE) == O_RDONLY) return Status::Err(EBADF);
  RETURN_IF_ERROR(CheckSession(fh));
  int64_t charged = 0;
  std::unique_lock<std::mutex> quota_lock(fh->file->quota_mu, std::defer_lock);
  if (quotas_.Active()) quota_lock.lock();
  if (!(mode & FALLOC_FL_KEEP_SIZE) && off + len > off) RETURN_IF_ERROR(ReserveGrowth(fh, off + len, &charged));
  Status st = Fenced(fh->file->Fallocate(ctx, mode, off, len));
  if (!st.ok()) quotas_.Charge({fh->parent, fh->uid, fh->gid, -charged, 0, QuotaTracker::kBoth});
  return st;
}

Result<size_t> Vfs::CopyFileRange(const Context& ctx, Handle* in, uint64_t off_in, Handle* out, uint64_t off_out,
                                  size_t len) {
  if (!in->file || !out->file) return Status::Err(EISDIR);
  if ((in->flags & O_ACCMODE) == O_WRONLY || (out->flags & O_ACCMODE) == O_RDONLY) return Status::Err(EBADF);
  RETURN_IF_ERROR(CheckSession(out));
  if (in->ino == out->ino) {
    // Like copy_file_range(2): shorten the copy to the source's EOF first,
    // then refuse overlapping ranges (a copy from past EOF copies nothing).
    uint64_t length = in->file->Length();
    len = off_in >= length ? 0 : size_t(std::min<uint64_t>(len, length - off_in));
    if (off_in < off_out + len && off_out < off_in + len) return Status::Err(EINVAL);
  }
  constexpr size_t kStep = 4u << 20;
  std::string buf;
  size_t copied = 0;
  while (copied < len) {
    size_t want = std::min(kStep, len - copied);
    buf.resize(want);
    ASSIGN_OR_RETURN(size_t n, in->file->Read(off_in + copied, want, buf.data()));
    if (n == 0) break;
    auto w = Write(ctx, out, off_out + copied, buf.data(), n);
    if (!w.ok()) {
      if (copied > 0) break;  // a short copy, as copy_file_range(2) reports
      return w.status();
    }
    copied += n;
    if (n < want) break;
  }
  return copied;
}

Result<uint64_t> Vfs::Lseek(const Context& ctx, Handle* fh, uint64_t off, int whence) {
  if (!fh->file) return Status::Err(EINVAL);
  auto r = fh->file->Lseek(ctx, off, whence);
  if (!r.ok()) return Fenced(r.status());
  return r;
}

// ---------------------------------------------------------------- directories

Status Vfs::OpenDir(const Context& ctx, Ino ino, int flags, Handle** fh) {
  const uint64_t lost = meta_->LostChanges();
  Attr attr;
  RETURN_IF_ERROR(Stale(meta_->GetAttr(ctx, ino, &attr)));
  if (!attr.IsDir()) return Status::Err(ENOTDIR);
  RETURN_IF_ERROR(meta::CheckPermission(ctx, attr, R_OK));
  auto h = std::make_unique<Handle>();
  h->ino = ino;
  h->flags = flags;
  h->lost_seen = lost;
  *fh = h.release();
  return Status::OK();
}

Status Vfs::FetchDirWindow(const Context& ctx, Handle* fh, const std::string& from, uint64_t base, bool plus) {
  const uint64_t epoch = data_->CommitEpoch();
  std::vector<meta::Entry> page;
  bool more = false;
  RETURN_IF_ERROR(meta_->ReaddirPage(ctx, fh->ino, plus, from, config_.readdir_page, &page, &more));
  fh->entries.clear();
  if (from.empty()) {
    Attr self;
    RETURN_IF_ERROR(meta_->GetAttr(ctx, fh->ino, &self));
    meta::Entry dot{".", fh->ino, self};
    meta::Entry dotdot{"..", self.parent, Attr{}};
    dotdot.attr.mode = S_IFDIR;
    if (plus && self.parent != fh->ino) (void)meta_->GetAttr(ctx, self.parent, &dotdot.attr);
    else if (plus) dotdot.attr = self;
    fh->entries.reserve(page.size() + 2);
    fh->entries.push_back(std::move(dot));
    fh->entries.push_back(std::move(dotdot));
  }
  for (auto& e : page) fh->entries.push_back(std::move(e));
  if (plus)
    for (auto& e : fh->entries) RETURN_IF_ERROR(MergeListed(ctx, epoch, &e));
  fh->dir_epoch = epoch;
  fh->dir_base = base;
  fh->dir_plus = plus;
  fh->dir_more = more;
  fh->listed = true;
  ++fh->dir_reads;
  // Later windows are read again after this one (their names may differ now).
  while (!fh->dir_starts.empty() && fh->dir_starts.back().first >= base) fh->dir_starts.pop_back();
  fh->dir_starts.emplace_back(base, from);
  return Status::OK();
}

Status Vfs::MergeListed(const Context& ctx, uint64_t epoch, meta::Entry* e) {
  if (e->gone) return Status::OK();
  Status st = MergePending(ctx, epoch, e->ino, &e->attr);
  if (st.code() != ESTALE && st.code() != ENOENT) return st;
  e->gone = true;  // removed since it was listed: listed on without attributes
  return Status::OK();
}

Status Vfs::AddWindowAttrs(const Context& ctx, Handle* fh) {
  // The kernel switches between READDIR and READDIRPLUS within one listing.
  // Reading the window again from its first name would give other entries
  // at the same offsets once some were removed (rm -rf removes what it read
  // before it reads on: entries after the window's end were skipped). So
  // the window keeps its entries: those still there get their attributes
  // from pages read from the same name, those removed meanwhile are listed
  // without attributes, and names added meanwhile are not listed (readdir(3)
  // may or may not show entries added after opendir).
  const uint64_t epoch = data_->CommitEpoch();
  std::unordered_map<std::string_view, meta::Entry*> want;
  for (auto& e : fh->entries)
    if (e.name != "." && e.name != "..") want.emplace(e.name, &e);
  // Names added inside the window push its later names to further pages: a
  // few more are read for them; what is still not found is listed without
  // attributes (the kernel looks it up if it needs it).
  constexpr int kMaxPages = 4;
  std::vector<meta::Entry> page;
  bool more = true;
  std::string from = fh->dir_starts.back().second;  // the window's own start
  size_t found = 0;
  for (int pages = 0; pages < kMaxPages && more && found < want.size(); ++pages) {
    RETURN_IF_ERROR(meta_->ReaddirPage(ctx, fh->ino, true, from, config_.readdir_page, &page, &more));
    for (auto& p : page) {
      auto it = want.find(p.name);
      if (it == want.end()) continue;
      it->second->ino = p.ino;  // the name may name another inode now (a rename over it)
      it->second->attr = p.attr;
      want.erase(it);
      ++found;
    }
    if (page.empty()) break;
    from = page.back().name;
  }
  for (auto& [name, e] : want) e->gone = true;  // removed, or not found in the pages read
  for (auto& e : fh->entries) {
    if (e.name == "." || e.name == "..") {
      Attr a;
      if (meta_->GetAttr(ctx, e.ino, &a).ok()) e.attr = a;
      else e.gone = true;
      continue;
    }
    RETURN_IF_ERROR(MergeListed(ctx, epoch, &e));
  }
  fh->dir_epoch = epoch;
  fh->dir_plus = true;
  ++fh->dir_reads;
  return Status::OK();
}

Status Vfs::ReadDir(const Context& ctx, Handle* fh, uint64_t offset, bool plus, const std::vector<meta::Entry>** out,
                    uint64_t* base, uint64_t* mark) {
  std::lock_guard<std::mutex> g(fh->dir_mu);
  const uint64_t reads = fh->dir_reads;
  if (offset == 0 || !fh->listed) {
    RETURN_IF_ERROR(FetchDirWindow(ctx, fh, "", 0, plus));
  } else if (offset < fh->dir_base) {  // seekdir back: the window holding offset, read again
    auto it = std::upper_bound(fh->dir_starts.begin(), fh->dir_starts.end(), offset,
                               [](uint64_t off, const auto& start) { return off < start.first; });
    // dir_starts begins with offset 0, so it != begin()
    const auto [start, from] = *std::prev(it);
    RETURN_IF_ERROR(FetchDirWindow(ctx, fh, from, start, plus));
  } else if (plus && !fh->dir_plus && offset < fh->dir_base + fh->entries.size()) {
    RETURN_IF_ERROR(AddWindowAttrs(ctx, fh));  // the same window, now with attributes
  }
  while (offset >= fh->dir_base + fh->entries.size() && fh->dir_more) {
    if (fh->entries.empty()) break;  // cannot happen: a window with more is never empty
    std::string last = fh->entries.back().name;
    RETURN_IF_ERROR(FetchDirWindow(ctx, fh, last == ".." ? "" : last, fh->dir_base + fh->entries.size(), plus));
  }
  // A window read a while ago: attributes of files this client committed
  // since are read again (the kernel would take their older lengths).
  if (const uint64_t now = data_->CommitEpoch(); plus && now != fh->dir_epoch) {
    for (auto& e : fh->entries) RETURN_IF_ERROR(MergeListed(ctx, fh->dir_epoch, &e));
    fh->dir_epoch = now;
  }
  // (Attributes merged from this client's commits above are newer: the
  // window's mark stays the older, safe side.)
  if (mark != nullptr) {
    if (fh->dir_reads != reads) fh->dir_mark = *mark;
    *mark = fh->dir_mark;
  }
  *out = &fh->entries;
  *base = fh->dir_base;
  return Status::OK();
}

Status Vfs::ReleaseDir(Handle* fh) {
  delete fh;
  return Status::OK();
}

// ---------------------------------------------------------------- xattrs

namespace {
constexpr const char* kCapabilityXattr = "security.capability";
}  // namespace

Status Vfs::GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) {
  if (!config_.enable_cap && name == kCapabilityXattr) return Status::Err(ENODATA);
  return meta_->GetXattr(ctx, ino, name, value);
}
Status Vfs::SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) {
  if (!config_.enable_cap && name == kCapabilityXattr)
    return Status::Err(EOPNOTSUPP, "security.capability needs mount option --enable-cap");
  return AttrChange(ino, [&] { return meta_->SetXattr(ctx, ino, name, value, flags); });
}
Status Vfs::ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) {
  return meta_->ListXattr(ctx, ino, names);
}
Status Vfs::RemoveXattr(const Context& ctx, Ino ino, const std::string& name) {
  return AttrChange(ino, [&] { return meta_->RemoveXattr(ctx, ino, name); });
}

// ---------------------------------------------------------------- locks

namespace {
// Retries a lock request that conflicts until it succeeds or the caller is
// interrupted (the kernel turns EINTR into a restart or a signal return).
Status RetryLock(bool block, const std::function<bool()>& interrupted, const std::function<Status()>& attempt) {
  int delay_ms = 1;
  for (;;) {
    Status st = attempt();
    if (st.code() != EAGAIN || !block) return st;
    if (interrupted && interrupted()) return Status::Err(EINTR);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 50);
  }
}
}  // namespace

Status Vfs::Flock(const Context& ctx, Ino ino, uint64_t owner, meta::LockType type, bool block,
                  const std::function<bool()>& interrupted) {
  return RetryLock(block, interrupted, [&] { return meta_->Flock(ctx, ino, owner, type); });
}

Status Vfs::GetLk(const Context& ctx, Ino ino, uint64_t owner, meta::PosixLock* lock) {
  return meta_->GetLk(ctx, ino, owner, lock);
}

Status Vfs::SetLk(const Context& ctx, Handle* fh, uint64_t owner, const meta::PosixLock& lock, bool block,
                  const std::function<bool()>& interrupted) {
  const Ino ino = fh->ino;
  if (lock.type != meta::kUnlock) {  // recorded first: a close racing with the lock still drops it
    {
      std::lock_guard<std::mutex> g(locks_mu_);
      auto& owners = lock_owners_[ino];
      if (std::find(owners.begin(), owners.end(), owner) == owners.end()) owners.push_back(owner);
    }
    std::lock_guard<std::mutex> g(fh->dir_mu);
    if (std::find(fh->lock_owners.begin(), fh->lock_owners.end(), owner) == fh->lock_owners.end())
      fh->lock_owners.push_back(owner);
  }
  return RetryLock(block, interrupted, [&] { return meta_->SetLk(ctx, ino, owner, lock); });
}

Status Vfs::DropPosixLocks(const Context& ctx, Ino ino, uint64_t owner) {
  {
    std::lock_guard<std::mutex> g(locks_mu_);
    auto it = lock_owners_.find(ino);
    if (it == lock_owners_.end()) return Status::OK();
    auto o = std::find(it->second.begin(), it->second.end(), owner);
    if (o == it->second.end()) return Status::OK();
    it->second.erase(o);
    if (it->second.empty()) lock_owners_.erase(it);
  }
  meta::PosixLock all;
  all.type = meta::kUnlock;
  all.start = 0;
  all.end = UINT64_MAX;
  return meta_->SetLk(ctx, ino, owner, all);
}

}  // namespace tessera::vfs
