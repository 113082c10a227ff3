// Vfs::Clone: `tessera clone` inside the mount's process (vfs.h).
#include "vfs/vfs.h"

namespace tessera::vfs {

Status Vfs::Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t umask, bool preserve,
                  Ino* ino, Attr* attr, uint64_t* entries) {
  // Pending writes of the source become part of what is copied.
  if (auto f = FindFile(src)) RETURN_IF_ERROR(Fenced(f->Commit(ctx)));
  QuotaTracker::Change c;
  if (quotas_.Active()) {
    Attr sattr;
    RETURN_IF_ERROR(meta_->GetAttr(ctx, src, &sattr));
    meta::QuotaUsage u;
    RETURN_IF_ERROR(TreeUsageOf(src, sattr, &u));
    // The copies are the caller's (with --preserve their owners' usage is
    // set right by `quota check --repair`).
    c = {parent, ctx.uid, ctx.gid, u.space, u.inodes, preserve ? unsigned(QuotaTracker::kDirs) : QuotaTracker::kBoth};
    RETURN_IF_ERROR(quotas_.Reserve(c));
  }
  DirCache::Names names = DirCache::Names::Added(parent, name);
  Status st = DirChange(ctx, parent, 0, &names,
                        [&] { return meta_->Clone(ctx, src, parent, name, umask, preserve, ino, attr, entries); });
  if (!st.ok()) {
    quotas_.Charge(QuotaTracker::Negated(c));
    return st;
  }
  InvalidateEntry(parent, name, 0);
  return Status::OK();
}

}  // namespace tessera::vfs
