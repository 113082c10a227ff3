#include "meta/meta.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "common/log.h"
#include "common/url.h"
#include "kv/kv.h"
#include "meta/fault_meta.h"
#include "meta/kv_meta.h"
#include "meta/redis_meta.h"

namespace tessera::meta {

std::string EncodeChanges(std::string_view origin, const std::vector<Change>& changes) {
  std::string out(origin);
  for (const Change& c : changes) {
    out.push_back('\0');
    if (c.parent == 0) {
      out += 'i' + std::to_string(c.ino);
    } else {
      out += 'e' + std::to_string(c.parent);
      out += '/';
      out += c.name;
    }
  }
  return out;
}

bool DecodeChanges(std::string_view payload, std::string* origin, std::vector<Change>* out) {
  size_t pos = payload.find('\0');
  *origin = std::string(payload.substr(0, pos));
  while (pos != std::string_view::npos) {
    const size_t next = payload.find('\0', pos + 1);
    const std::string_view rec = payload.substr(pos + 1, next == std::string_view::npos ? next : next - pos - 1);
    pos = next;
    if (rec.size() < 2 || (rec[0] != 'i' && rec[0] != 'e')) return false;
    const size_t slash = rec[0] == 'e' ? rec.find('/') : rec.size();
    if (slash == std::string_view::npos || slash < 2) return false;
    uint64_t n = 0;
    for (char ch : rec.substr(1, slash - 1)) {
      if (ch < '0' || ch > '9') return false;
      n = n * 10 + uint64_t(ch - '0');
    }
    Change c;
    if (rec[0] == 'i') {
      c.ino = n;
    } else {
      c.parent = n;
      c.name = std::string(rec.substr(slash + 1));
      if (c.name.empty() || n == 0) return false;
    }
    out->push_back(std::move(c));
  }
  return true;
}

Timespec Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return Timespec{ts.tv_sec, uint32_t(ts.tv_nsec)};
}

bool Attr::IsDir() const { return S_ISDIR(mode); }
bool Attr::IsFile() const { return S_ISREG(mode); }
bool Attr::IsSymlink() const { return S_ISLNK(mode); }

bool InTrash(const Attr& a) { return a.parent > kTrashIno; }

std::string TrashHourName(int64_t unix_sec) {
  std::time_t t = std::time_t(unix_sec);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d-%H", &tm);
  return buf;
}

std::string TrashEntryName(Ino parent, Ino ino, const std::string& name) {
  std::string s = std::to_string(parent) + "-" + std::to_string(ino) + "-" + name;
  if (s.size() > kMaxName) s.resize(kMaxName);
  return s;
}

Status TreeReader::Inodes(const std::vector<std::pair<Ino, uint32_t>>& which, std::vector<InodeRecord>* out) {
  out->resize(which.size());
  for (size_t i = 0; i < which.size(); ++i) RETURN_IF_ERROR(Inode(which[i].first, which[i].second, &(*out)[i]));
  return Status::OK();
}

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

// ---------------------------------------------------------------- factory

namespace {
Result<std::unique_ptr<Meta>> OpenEngine(const std::string& url, const OpenOptions& options) {
  const std::string scheme = UrlScheme(url);
  if (scheme == "redis" || scheme == "rediss" || scheme == "unix") return RedisMeta::Open(url);
  if (scheme != "sqlite3" && scheme != "memory" && scheme != "postgres" && scheme != "postgresql") {
    return Status::Err(EINVAL, "unsupported META-URL '" + RedactUrl(url) +
                                   "': expected sqlite3://PATH, redis://[USER:PASSWORD@]HOST[:PORT]/DB, "
                                   "unix:///PATH/redis.sock?db=N, postgres://[USER[:PASSWORD]@]HOST[:PORT]/DB or "
                                   "memory://[NAME]");
  }
  kv::OpenOptions kv_options;
  kv_options.commit_delay = options.commit_delay;
  ASSIGN_OR_RETURN(auto engine, kv::Open(url, kv_options));
  return std::unique_ptr<Meta>(new KvMeta(std::move(engine)));
}
}  // namespace

Result<std::unique_ptr<Meta>> Open(const std::string& url, const OpenOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Meta> meta, OpenEngine(url, options));
  if (const char* faults = std::getenv("TESSERA_META_FAULTS"); faults && *faults) {
    ASSIGN_OR_RETURN(FaultMeta::Spec spec, FaultMeta::Spec::Parse(faults));
    LOG_WARN("metadata engine {}: injecting faults ({})", meta->Name(), spec.ToString());
    meta = std::make_unique<FaultMeta>(std::move(meta), spec);
  }
  return meta;
}


}  // namespace tessera::meta
