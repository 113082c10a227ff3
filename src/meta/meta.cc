#include "meta/meta.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

namespace tessera::meta {

Timespec Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return Timespec{ts.tv_sec, uint32_t(ts.tv_nsec)};
}

bool Attr::IsDir() const { return S_ISDIR(mode); }
bool Attr::IsFile() const { return S_ISREG(mode); }
bool Attr::IsSymlink() const { return S_ISLNK(mode); }

Status Meta::Readdir(const Context& ctx, Ino ino, bool plus, std::vector<Entry>* entries) {
  constexpr size_t kPage = 4096;
  entries->clear();
  std::string after;
  for (;;) {
    std::vector<Entry> page;
    bool more = false;
    RETURN_IF_ERROR(ReaddirPage(ctx, ino, plus, after, kPage, &page, &more));
    if (!page.empty()) after = page.back().name;
    for (auto& e : page) entries->push_back(std::move(e));
    if (!more || page.empty()) return Status::OK();
  }
}

bool Context::InGroup(uint32_t g) const {
  return g == gid || std::find(gids.begin(), gids.end(), g) != gids.end();
}

Status CheckPermission(const Context& ctx, const Attr& attr, int mask) {
  mask &= R_OK | W_OK | X_OK;
  if (mask == 0) return Status::OK();
  if (ctx.IsRoot()) {
    // root may execute only what someone may execute; directories are searchable.
    if ((mask & X_OK) && !attr.IsDir() && !(attr.mode & 0111)) return Status::Err(EACCES);
    return Status::OK();
  }
  uint32_t perm;
  if (ctx.uid == attr.uid) perm = (attr.mode >> 6) & 7;
  else if (ctx.InGroup(attr.gid)) perm = (attr.mode >> 3) & 7;
  else perm = attr.mode & 7;
  if ((perm & uint32_t(mask)) != uint32_t(mask)) return Status::Err(EACCES);
  return Status::OK();
}

}  // namespace tessera::meta
