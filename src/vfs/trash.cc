#include "vfs/trash.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <unordered_set>

#include <fmt/format.h>

namespace tessera::vfs {

using meta::Context;
using meta::Entry;
using meta::Ino;

namespace {

Context TrashRoot() {
  Context c = Context::Root();
  c.no_trash = true;  // what leaves the trash is gone
  return c;
}

// Removes everything below dir (not dir itself), depth first, a page at a time.
Status RemoveBelow(meta::Meta* m, Ino dir, uint64_t* removed, const std::atomic<bool>* cancel) {
  const Context ctx = TrashRoot();
  for (;;) {
    std::vector<Entry> page;
    bool more = false;
    RETURN_IF_ERROR(m->ReaddirPage(Context::Root(), dir, false, "", 1024, &page, &more));
    if (page.empty()) return Status::OK();
    // An entry gone meanwhile (ENOENT) was removed by someone else; but a
    // page none of whose entries could be removed would be read again for
    // ever (a directory that answers ENOENT for all of them).
    size_t gone = 0;
    for (const auto& e : page) {
      if (cancel != nullptr && cancel->load()) return Status::Err(ECANCELED, "interrupted");
      Status st;
      if ((e.attr.mode & S_IFMT) == S_IFDIR) {
        RETURN_IF_ERROR(RemoveBelow(m, e.ino, removed, cancel));
        st = m->Rmdir(ctx, dir, e.name);
      } else {
        st = m->Unlink(ctx, dir, e.name);
      }
      if (!st.ok() && st.code() != ENOENT) return st.With("removing '" + e.name + "' from the trash");
      if (st.ok()) ++*removed;
      else ++gone;
    }
    if (gone == page.size())
      return Status::Err(EIO, fmt::format("directory {} of the trash lists {} entries that cannot be removed (ENOENT): "
                                          "run tessera fsck",
                                          dir, gone));
  }
}

}  // namespace

Result<int64_t> ParseTrashHour(const std::string& name) {
  std::tm tm{};
  char extra = 0;
  if (name.size() != 13 ||
      std::sscanf(name.c_str(), "%4d-%2d-%2d-%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &extra) != 4)
    return Status::Err(EINVAL, "'" + name + "' is not a trash hour (YYYY-MM-DD-HH)");
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return int64_t(timegm(&tm));
}

Status ListTrashHours(meta::Meta* m, std::vector<Entry>* hours) {
  Status st = m->Readdir(Context::Root(), meta::kTrashIno, false, hours);
  if (st.code() == ENOENT) {
    hours->clear();
    return Status::OK();  // no trash yet
  }
  return st;
}

Result<uint64_t> PurgeTrash(meta::Meta* m, int days, int64_t now, const std::atomic<bool>* cancel,
                            const std::function<void(const std::string&, meta::Ino)>& gone) {
  std::vector<Entry> hours;
  RETURN_IF_ERROR(ListTrashHours(m, &hours));
  uint64_t removed = 0;
  for (const auto& h : hours) {
    auto start = ParseTrashHour(h.name);
    if (!start.ok() || *start + 3600 + int64_t(days) * 86400 > now) continue;
    RETURN_IF_ERROR(RemoveBelow(m, h.ino, &removed, cancel));
    Status st = m->Rmdir(TrashRoot(), meta::kTrashIno, h.name);
    if (!st.ok() && st.code() != ENOENT && st.code() != ENOTEMPTY) return st.With("removing trash hour " + h.name);
    if (st.ok() && gone) gone(h.name, h.ino);
  }
  return removed;
}

Result<uint64_t> RestoreTrashHour(meta::Meta* m, const std::string& hour, bool put_back,
                                  const std::function<void(const std::string&)>& report) {
  Ino hino = 0;
  meta::Attr hattr;
  RETURN_IF_ERROR(m->Lookup(Context::Root(), meta::kTrashIno, hour, &hino, &hattr).With("trash hour " + hour));
  std::vector<Entry> entries;
  RETURN_IF_ERROR(m->Readdir(Context::Root(), hino, false, &entries));
  struct Item {
    std::string tname;
    Ino parent = 0;
    Ino ino = 0;
    std::string name;
    bool dir = false;
  };
  std::vector<Item> items;
  for (const auto& e : entries) {
    Item it;
    it.tname = e.name;
    it.ino = e.ino;
    it.dir = (e.attr.mode & S_IFMT) == S_IFDIR;
    unsigned long long p = 0, i = 0;
    int used = 0;
    if (std::sscanf(e.name.c_str(), "%llu-%llu-%n", &p, &i, &used) != 2 || used == 0 || Ino(i) != e.ino) {
      report(fmt::format("'{}': not a name the trash gave, left alone", e.name));
      continue;
    }
    it.parent = Ino(p);
    it.name = e.name.substr(size_t(used));
    items.push_back(std::move(it));
  }
  // Directories first (parents before children: a directory's parent may be
  // in this hour too), passes until nothing more can move.
  std::stable_partition(items.begin(), items.end(), [](const Item& a) { return a.dir; });
  std::vector<bool> done(items.size(), false);
  uint64_t restored = 0;
  std::unordered_set<Ino> back;  // directories put back (or that would be) in this run
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t k = 0; k < items.size(); ++k) {
      if (done[k]) continue;
      const Item& it = items[k];
      meta::Attr pattr;
      Status st = m->GetAttr(Context::Root(), it.parent, &pattr);
      const bool live = st.ok() && pattr.IsDir() && pattr.nlink > 0 && (!meta::InTrash(pattr) || back.count(it.parent));
      if (!live) continue;  // maybe once its directory is back
      done[k] = true;
      progress = true;
      if (!put_back) {
        report(fmt::format("would put back '{}' into directory {} as '{}'", it.tname, it.parent, it.name));
        if (it.dir) back.insert(it.ino);
        ++restored;
        continue;
      }
      Ino ino = 0;
      meta::Attr attr;
      st = m->Rename(Context::Root(), hino, it.tname, it.parent, it.name, meta::kRenameNoReplace, &ino, &attr);
      if (st.code() == EEXIST) {
        report(fmt::format("'{}': directory {} already has a '{}': left in the trash (nothing overwritten)", it.tname,
                           it.parent, it.name));
        continue;
      }
      if (!st.ok()) return st.With("putting back '" + it.tname + "'");
      if (it.dir) back.insert(it.ino);
      ++restored;
    }
  }
  for (size_t k = 0; k < items.size(); ++k)
    if (!done[k])
      report(fmt::format("'{}': its directory {} is gone: left in the trash", items[k].tname, items[k].parent));
  return restored;
}

}  // namespace tessera::vfs
