// Vfs::RemoveTree and Vfs::Resolve (vfs.h): `tessera rmr`, run by the mount
// through its control channel (control.h).
#include <sys/stat.h>

#include <fmt/format.h>

#include "vfs/vfs.h"

namespace tessera::vfs {

namespace {
constexpr size_t kPage = 256;
constexpr uint64_t kProgressEvery = 256;
}  // namespace

void Vfs::SetEntryInvalidator(EntryInvalidator fn) {
  std::lock_guard<std::mutex> g(inval_mu_);
  entry_invalidator_ = std::move(fn);
}

void Vfs::InvalidateEntry(Ino parent, const std::string& name, Ino child) {
  std::lock_guard<std::mutex> g(inval_mu_);
  if (entry_invalidator_) entry_invalidator_(parent, name, child);
}

Status Vfs::Resolve(const Context& ctx, const std::string& path, Ino* parent, std::string* name, Ino* ino,
                    Attr* attr) {
  *parent = meta::kRootIno;
  name->clear();
  *ino = meta::kRootIno;
  RETURN_IF_ERROR(meta_->GetAttr(ctx, meta::kRootIno, attr));
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return Status::Err(EINVAL, "'..' in a path given to the mount");
    if (!attr->IsDir()) return Status::Err(ENOTDIR);
    Ino next = 0;
    RETURN_IF_ERROR(meta_->Lookup(ctx, *ino, part, &next, attr));
    *parent = *ino;
    *name = std::move(part);
    *ino = next;
  }
  return Status::OK();
}

Status Vfs::RemoveTree(const Context& ctx, Ino parent, const std::string& name,
                       const std::function<bool(const RemoveProgress&)>& progress, RemoveProgress* out) {
  *out = RemoveProgress{};
  Status first;
  auto failed = [&](const Status& st, const std::string& path) {
    out->failed++;
    if (first.ok()) first = st.With("removing " + path);
  };
  uint64_t next_report = kProgressEvery;
  auto tick = [&]() {
    if (out->files + out->dirs + out->failed < next_report) return true;
    next_report += kProgressEvery;
    return progress(*out);
  };

  Ino top = 0;
  Attr attr;
  RETURN_IF_ERROR(meta_->Lookup(ctx, parent, name, &top, &attr));
  if (!attr.IsDir()) {
    RETURN_IF_ERROR(Unlink(ctx, parent, name));
    InvalidateEntry(parent, name, top);
    out->files = 1;
    (void)progress(*out);
    return Status::OK();
  }

  struct Frame {
    Ino dir;
    Ino parent;
    std::string name;
    std::string path;   // from the top, for messages
    std::string after;  // entries up to this name are done (removed, or failed)
  };
  std::vector<Frame> stack;
  stack.push_back(Frame{top, parent, name, name, ""});
  std::vector<meta::Entry> page;
  while (!stack.empty()) {
    if (!tick()) return Status::Err(ECANCELED, "stopped");
    Frame& f = stack.back();
    bool more = false;
    Status st = meta_->ReaddirPage(ctx, f.dir, false, f.after, kPage, &page, &more);
    if (!st.ok()) {  // cannot list it: it stays, and so does everything above it
      failed(st, f.path);
      stack.pop_back();
      continue;
    }
    bool descended = false;
    for (const auto& e : page) {
      f.after = e.name;
      if ((e.attr.mode & S_IFMT) == S_IFDIR) {
        stack.push_back(Frame{e.ino, f.dir, e.name, f.path + "/" + e.name, ""});  // f is invalid from here
        descended = true;
        break;
      }
      Status u = Unlink(ctx, f.dir, e.name);
      if (u.ok()) {
        out->files++;
        InvalidateEntry(f.dir, e.name, e.ino);
      } else if (!u.not_found()) {  // gone meanwhile: fine
        failed(u, f.path + "/" + e.name);
      }
      if (!tick()) return Status::Err(ECANCELED, "stopped");
    }
    if (descended || more) continue;
    // Everything listed is done: the directory itself.
    Status r = Rmdir(ctx, f.parent, f.name);
    if (r.ok()) {
      out->dirs++;
      InvalidateEntry(f.parent, f.name, f.dir);
    } else if (!r.not_found() || stack.size() == 1) {
      failed(r, f.path);
    }
    stack.pop_back();
  }
  (void)progress(*out);
  return first;
}

}  // namespace tessera::vfs
