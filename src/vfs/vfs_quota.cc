// The VFS's side of quotas (vfs/quota.h): the namespace and data changes
// that charge them, statfs inside a quota'd tree, and the sync loop. With no
// quota on the volume each of these is the plain engine call.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "common/log.h"
#include "common/thread_name.h"
#include "meta/summary.h"
#include "vfs/vfs.h"

namespace tessera::vfs {

namespace {
std::vector<Ino> Minus(const std::vector<Ino>& a, const std::vector<Ino>& b) {
  std::vector<Ino> out;
  for (Ino x : a)
    if (std::find(b.begin(), b.end(), x) == b.end()) out.push_back(x);
  return out;
}
}  // namespace

void Vfs::QuotaLoop() {
  NameThisThread("ts-quota");
  uint64_t failures = 0;
  std::unique_lock<std::mutex> lk(bg_mu_);
  while (!stopping_) {
    bg_cv_.wait_for(lk, std::chrono::milliseconds(QuotaTracker::kSyncMs));
    if (stopping_) break;
    lk.unlock();
    Status st = quotas_.Sync();
    CountJob(kQuotaSync, st);
    if (st.ok()) {
      if (failures > 0) LOG_INFO("quotas: synced again after {} failed attempt(s)", failures);
      failures = 0;
    } else if (failures++ % 150 == 0) {  // once a minute while it lasts
      LOG_WARN("quotas: syncing usage with the metadata engine: {} (kept, tried again)", st.ToString());
    }
    lk.lock();
  }
}

Status Vfs::StatFS(const Context& ctx, Ino ino, meta::StatFs* out) {
  RETURN_IF_ERROR(meta_->StatFS(ctx, out));
  RecordUsage(*out);
  if (!quotas_.HasDirQuotas()) return Status::OK();
  Ino dir = ino;
  if (ino != meta::kRootIno) {
    Attr attr;
    RETURN_IF_ERROR(meta_->GetAttr(ctx, ino, &attr));
    if (!attr.IsDir()) dir = attr.parent;
  }
  return quotas_.Limit(dir, out);
}

Status Vfs::ReserveGrowth(Handle* fh, uint64_t end, int64_t* charged) {
  *charged = 0;
  if (!quotas_.Active() || fh->file->quota_detached.load(std::memory_order_relaxed)) return Status::OK();
  const uint64_t length = fh->file->Length();
  if (end <= length) return Status::OK();
  const int64_t grow = Space(end) - Space(length);
  if (grow == 0) return Status::OK();
  RETURN_IF_ERROR(quotas_.Reserve({fh->parent, fh->uid, fh->gid, grow, 0, QuotaTracker::kBoth}));
  *charged = grow;
  return Status::OK();
}

Status Vfs::TreeUsageOf(Ino ino, const Attr& attr, meta::QuotaUsage* out) {
  if (!attr.IsDir()) {
    uint64_t length = attr.length;
    if (auto f = FindFile(ino)) length = f->Length();  // with this client's pending writes
    *out = {attr.IsFile() ? Space(length) : 0, 1};
    return Status::OK();
  }
  meta::SummaryOptions opts;
  opts.depth = 0;
  opts.entries = 0;
  meta::SummaryNode top;
  RETURN_IF_ERROR(meta::Summarize(meta_, ino, "", opts, &top));
  *out = {top.usage.space, top.usage.files + top.usage.dirs};
  return Status::OK();
}

Status Vfs::MknodCharged(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t umask,
                         uint32_t rdev, const std::string& target, Ino* ino, Attr* attr) {
  const QuotaTracker::Change c{parent, ctx.uid, ctx.gid, 0, 1, QuotaTracker::kBoth};
  RETURN_IF_ERROR(quotas_.Reserve(c));
  DirCache::Names names = DirCache::Names::Added(parent, name);
  Status st = DirChange(ctx, parent, 0, &names, [&] {
    RETURN_IF_ERROR(meta_->Mknod(ctx, parent, name, mode, umask, rdev, target, ino, attr));
    if ((mode & S_IFMT) == S_IFDIR) {
      names.made_dir = *ino;
      names.made_attr = *attr;
    }
    return Status::OK();
  });
  if (!st.ok()) {
    quotas_.Charge(QuotaTracker::Negated(c));
    return st;
  }
  if ((mode & S_IFMT) == S_IFDIR) quotas_.DirectoryMade(*ino, parent);
  if (attr->gid != ctx.gid) {  // a set-group-ID directory gave it its group
    quotas_.Charge({parent, ctx.uid, ctx.gid, 0, -1, QuotaTracker::kGroup});
    quotas_.Charge({parent, ctx.uid, attr->gid, 0, 1, QuotaTracker::kGroup});
  }
  return Status::OK();
}

Status Vfs::RemoveCharged(const Context& ctx, Ino parent, const std::string& name, bool dir) {
  auto remove = [&] {
    DirCache::Names names = DirCache::Names::Removed(parent, name);
    return DirChange(ctx, parent, 0, &names,
                     [&] { return dir ? meta_->Rmdir(ctx, parent, name) : meta_->Unlink(ctx, parent, name); });
  };
  if (!quotas_.Active()) return remove();
  if (dir && !quotas_.HasOwnerQuotas()) {  // an empty directory: one inode, no lookup needed
    RETURN_IF_ERROR(remove());
    quotas_.Charge({parent, 0, 0, 0, -1, QuotaTracker::kDirs});
    return Status::OK();
  }
  // The engine reports what it removed (meta::Context::Effects), read in
  // the removal's own transaction: no lookup before, no race with it.
  meta::Context::Effects removal;
  meta::Context::Effects* const outer = ctx.effects;
  ctx.effects = &removal;
  Status st = remove();
  ctx.effects = outer;
  RETURN_IF_ERROR(st);
  if (removal.removed == 0) {  // an engine that does not say (a library of an older client): quota check --repair
    LOG_WARN("quotas: the engine did not report what removing '{}' in directory {} removed; run tessera quota check",
             name, parent);
    return Status::OK();
  }
  const Ino ino = removal.removed;
  const Attr& attr = removal.removed_attr;
  uint64_t length = attr.length;
  if (auto f = FindFile(ino)) length = f->Length();  // with this client's pending writes
  // A removed directory was empty: itself only.
  const meta::QuotaUsage u{attr.IsFile() ? Space(length) : 0, 1};
  quotas_.Charge({parent, attr.uid, attr.gid, -u.space, -1, QuotaTracker::kDirs});
  if (dir || attr.nlink <= 1) {  // the inode goes (or into the trash, which no quota covers)
    quotas_.Charge({parent, attr.uid, attr.gid, -u.space, -1, QuotaTracker::kOwner});
    if (auto f = FindFile(ino)) f->quota_detached.store(true, std::memory_order_relaxed);  // open, unlinked
  }
  return Status::OK();
}

Status Vfs::RenameWithQuotas(const Context& ctx, Ino parent, const std::string& name, Ino new_parent,
                             const std::string& new_name, uint32_t flags) {
  Ino ino = 0, dst = 0;
  Attr a, b;
  RETURN_IF_ERROR(meta_->Lookup(ctx, parent, name, &ino, &a));
  const bool dst_found = meta_->Lookup(ctx, new_parent, new_name, &dst, &b).ok();
  if (dst_found && dst == ino) {  // two names of one inode: rename(2) changes nothing, nor may the quotas
    Ino moved = 0;
    Attr attr;
    DirCache::Names names = RenamedNames(parent, name, new_parent, new_name, flags);
    return DirChange(ctx, parent, new_parent, &names,
                     [&] { return meta_->Rename(ctx, parent, name, new_parent, new_name, flags, &moved, &attr); });
  }
  const bool has_dst = dst_found;
  if (has_dst && (flags & meta::kRenameNoReplace)) return Status::Err(EEXIST);
  const bool exchange = (flags & meta::kRenameExchange) != 0;
  std::vector<Ino> qa, qb;
  RETURN_IF_ERROR(quotas_.QuotaDirs(parent, &qa));
  RETURN_IF_ERROR(quotas_.QuotaDirs(new_parent, &qb));
  const auto only_a = Minus(qa, qb), only_b = Minus(qb, qa), common = Minus(qb, only_b);
  // u moves from the source's trees to the destination's; v (what the
  // destination name held) goes, or moves the other way in an exchange.
  meta::QuotaUsage u, v;
  if (!only_a.empty() || !only_b.empty()) RETURN_IF_ERROR(TreeUsageOf(ino, a, &u));
  if (has_dst) RETURN_IF_ERROR(TreeUsageOf(dst, b, &v));
  RETURN_IF_ERROR(quotas_.ReserveDirs(only_b, u.space - v.space, u.inodes - v.inodes));
  if (exchange) {
    if (Status st = quotas_.ReserveDirs(only_a, v.space - u.space, v.inodes - u.inodes); !st.ok()) {
      quotas_.ChargeDirs(only_b, v.space - u.space, v.inodes - u.inodes);
      return st;
    }
  }
  Ino moved = 0;
  Attr attr;
  DirCache::Names names = RenamedNames(parent, name, new_parent, new_name, flags);
  Status st = DirChange(ctx, parent, new_parent, &names,
                        [&] { return meta_->Rename(ctx, parent, name, new_parent, new_name, flags, &moved, &attr); });
  if (!st.ok()) {
    quotas_.ChargeDirs(only_b, v.space - u.space, v.inodes - u.inodes);
    if (exchange) quotas_.ChargeDirs(only_a, u.space - v.space, u.inodes - v.inodes);
    return st;
  }
  if (a.IsDir()) quotas_.DirectoryMoved(ino);
  if (exchange) {
    if (b.IsDir()) quotas_.DirectoryMoved(dst);
    return Status::OK();
  }
  quotas_.ChargeDirs(only_a, -u.space, -u.inodes);
  if (has_dst) {
    quotas_.ChargeDirs(common, -v.space, -v.inodes);
    if (b.IsDir() || b.nlink <= 1) quotas_.Charge({0, b.uid, b.gid, -v.space, -1, QuotaTracker::kOwner});
  }
  return Status::OK();
}

}  // namespace tessera::vfs
