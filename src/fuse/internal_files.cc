#include "fuse/internal_files.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "fuse/long_wait.h"

namespace tessera::fuse {

InternalFiles::InternalFiles(std::string prefix, bool everyone, std::function<std::string()> stats,
                             std::string config_json)
    : prefix_(std::move(prefix)),
      everyone_(everyone),
      stats_(std::move(stats)),
      config_json_(std::move(config_json)),
      started_(meta::Now()) {}

meta::Ino InternalFiles::Find(const std::string& name) const {
  if (name.size() <= prefix_.size() || name.compare(0, prefix_.size(), prefix_) != 0) return 0;
  const std::string rest = name.substr(prefix_.size());
  if (rest == "stats") return kBase + kStats;
  if (rest == "accesslog") return kBase + kAccessLog;
  if (rest == "config") return kBase + kConfig;
  return 0;
}

meta::Attr InternalFiles::AttrOf(meta::Ino) const {
  meta::Attr a;
  a.mode = S_IFREG | (everyone_ ? 0444 : 0400);
  a.nlink = 1;
  a.uid = 0;
  a.gid = 0;
  a.length = 0;  // read with direct I/O: the size is what a read returns
  a.atime = a.mtime = a.ctime = started_;
  a.parent = meta::kRootIno;
  return a;
}

Status InternalFiles::Open(const meta::Context& ctx, meta::Ino ino, int flags, Handle** out) {
  if (!Visible(ctx)) return Status::Err(EACCES);
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) return Status::Err(EACCES);
  auto h = std::make_unique<Handle>();
  h->kind = Kind(ino - kBase);
  switch (h->kind) {
    case kStats:
      h->content = stats_();
      break;
    case kConfig:
      h->content = config_json_;
      break;
    case kAccessLog:
      h->reader = log_.Open();
      if (!h->reader) return Status::Err(EBUSY, "too many readers of the access log");
      break;
  }
  *out = h.release();
  return Status::OK();
}

std::string InternalFiles::Read(Handle* h, uint64_t off, size_t size, const std::function<bool()>& interrupted) {
  if (h->kind == kAccessLog) {
    LongWait wait(true, kBase + kAccessLog);  // until other requests are logged
    return log_.Read(h->reader.get(), size, interrupted);
  }
  if (off >= h->content.size()) return "";
  return h->content.substr(size_t(off), size);
}

void InternalFiles::Release(Handle* h) {
  if (h->reader) log_.Close(h->reader);
  delete h;
}

}  // namespace tessera::fuse
