// fsck --repair (meta_util.h, RepairTree): one implementation for every
// engine, over the raw writer each engine offers for dump/load.
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "meta/encoding.h"
#include "meta/meta_util.h"

namespace tessera::meta {

namespace {
constexpr const char* kLostFound = "lost+found";
constexpr size_t kBatch = 500;
}  // namespace

Status RepairTree(Meta* meta, std::unordered_map<Ino, Attr> attrs, std::vector<EntryTriple> entries,
                  UsageRecords stored, std::vector<std::string>* changes) {
  changes->clear();
  std::vector<std::pair<Ino, std::string>> drop;  // dangling entries
  std::unordered_map<Ino, uint32_t> names;
  std::unordered_map<Ino, Ino> container;  // a directory -> the directory holding its (first) name
  for (const auto& [parent, name, child] : entries) {
    if (attrs.count(child) == 0 || attrs.count(parent) == 0) {
      drop.emplace_back(parent, name);
      changes->push_back(attrs.count(parent) == 0
                             ? fmt::format("removed entry '{}' of directory {}, which does not exist", name, parent)
                             : fmt::format("removed entry '{}' of directory {}: inode {} does not exist", name, parent,
                                           child));
      continue;
    }
    names[child]++;
    container.emplace(child, parent);
  }

  // Orphans: a link count but no name.
  std::vector<Ino> orphans;
  for (const auto& [ino, a] : attrs)
    if (ino != kRootIno && a.nlink > 0 && names[ino] == 0) orphans.push_back(ino);
  std::sort(orphans.begin(), orphans.end());
  // Dangling entries go first: /lost+found itself may be one.
  for (size_t from = 0; from < drop.size(); from += kBatch) {
    RETURN_IF_ERROR(meta->WriteTree([&](TreeWriter& w) -> Status {
      for (size_t i = from; i < std::min(drop.size(), from + kBatch); ++i)
        RETURN_IF_ERROR(w.DeleteEntry(drop[i].first, drop[i].second));
      return Status::OK();
    }));
  }
  Ino lost = 0;
  if (!orphans.empty()) {
    Attr la;
    Status st = meta->Lookup(Context::Root(), kRootIno, kLostFound, &lost, &la);
    if (st.code() == ENOENT) {
      RETURN_IF_ERROR(meta->Mknod(Context::Root(), kRootIno, kLostFound, S_IFDIR | 0700, 0, 0, "", &lost, &la)
                          .With("creating /lost+found"));
      changes->push_back(fmt::format("created /lost+found (inode {})", lost));
      attrs[lost] = la;
      names[lost] = 1;
      container[lost] = kRootIno;
      entries.emplace_back(kRootIno, kLostFound, lost);
      // The root's link count and statistics were changed by Mknod itself.
      Attr root;
      RETURN_IF_ERROR(meta->GetAttr(Context::Root(), kRootIno, &root));
      attrs[kRootIno] = root;
      RETURN_IF_ERROR(meta->FlushDirStats());
      std::vector<DirStat> rs;
      RETURN_IF_ERROR(meta->GetDirStats({kRootIno}, &rs));
      stored.dirstats[kRootIno] = rs.at(0);
    } else if (!st.ok()) {
      return st.With("looking up /lost+found");
    } else if (!la.IsDir()) {
      return Status::Err(ENOTDIR, "/lost+found is not a directory: rename it, then repair again");
    }
  }
  std::vector<EntryTriple> added;
  for (Ino ino : orphans) {
    std::string name = fmt::format("#{}", ino);
    added.emplace_back(lost, name, ino);
    names[ino] = 1;
    container[ino] = lost;
    changes->push_back(fmt::format("moved inode {} (no name, link count {}) to /lost+found/{}", ino, attrs[ino].nlink,
                                   name));
  }

  // Link counts and parents, from the names as they are now.
  std::unordered_map<Ino, uint32_t> subdirs;
  for (const auto& [ino, a] : attrs)
    if (a.IsDir() && ino != kRootIno && names[ino] > 0) subdirs[container[ino]]++;
  std::map<Ino, Attr> fixed;  // ordered: the changes print in inode order
  for (auto& [ino, a] : attrs) {
    if (a.nlink == 0 && names[ino] == 0) continue;  // open and unlinked: its client's
    Attr b = a;
    if (a.IsDir()) {
      // An hour's directory in the trash does not count its subdirectories
      // (CountSubdir): left as it is, unless below 2.
      b.nlink = IsTrashHourIno(ino) ? std::max(a.nlink, 2u) : 2 + subdirs[ino];
      if (ino != kRootIno) b.parent = container[ino];
    } else {
      b.nlink = names[ino];
    }
    if (b.nlink != a.nlink)
      changes->push_back(fmt::format("inode {}: link count {} -> {}", ino, a.nlink, b.nlink));
    if (b.parent != a.parent)
      changes->push_back(fmt::format("directory {}: parent {} -> {}", ino, a.parent, b.parent));
    if (b.nlink != a.nlink || b.parent != a.parent) fixed[ino] = b;
  }
  for (const auto& [ino, a] : attrs)
    if (a.IsDir() && names[ino] > 1)
      changes->push_back(fmt::format("not repaired: directory {} has {} names (remove the wrong ones by hand)", ino,
                                     names[ino]));

  // Counters.
  uint64_t used = 0;
  for (const auto& [ino, a] : attrs)
    if (a.IsFile()) used += Align4K(a.length);
  int64_t old_used = 0, old_inodes = 0;
  RETURN_IF_ERROR(meta->ReadTree([&](TreeReader& r) -> Status {
    ASSIGN_OR_RETURN(old_used, r.Counter(keys::kUsedSpace));
    ASSIGN_OR_RETURN(old_inodes, r.Counter(keys::kTotalInodes));
    return Status::OK();
  }));
  const bool fix_used = old_used != int64_t(used), fix_inodes = old_inodes != int64_t(attrs.size());
  if (fix_used) changes->push_back(fmt::format("used space counter {} -> {}", old_used, used));
  if (fix_inodes) changes->push_back(fmt::format("inode counter {} -> {}", old_inodes, attrs.size()));

  // Usage records, from the tree as it is now.
  std::vector<std::function<Status(TreeWriter&)>> ops;
  {
    std::erase_if(entries, [&](const EntryTriple& e) {
      return attrs.count(std::get<0>(e)) == 0 || attrs.count(std::get<2>(e)) == 0;
    });
    std::vector<EntryTriple> all = entries;
    all.insert(all.end(), added.begin(), added.end());
    std::unordered_map<Ino, Attr> now = attrs;
    for (const auto& [ino, a] : fixed) now[ino] = a;
    RepairUsage(now, all, stored, &fixed, &ops, changes);
    RepairSlices(stored.slices, &ops, changes);
  }

  // Apply, in batches.
  for (const auto& [parent, name, child] : added)
    ops.push_back([p = parent, n = name, c = child, m = attrs[child].mode](TreeWriter& w) {
      return w.PutEntry(p, n, c, m & S_IFMT);
    });
  for (const auto& [ino, a] : fixed) ops.push_back([i = ino, b = a](TreeWriter& w) { return w.PutAttr(i, b); });
  if (fix_used) ops.push_back([used](TreeWriter& w) { return w.PutCounter(keys::kUsedSpace, int64_t(used)); });
  if (fix_inodes)
    ops.push_back([n = attrs.size()](TreeWriter& w) { return w.PutCounter(keys::kTotalInodes, int64_t(n)); });
  for (size_t from = 0; from < ops.size(); from += kBatch) {
    RETURN_IF_ERROR(meta->WriteTree([&](TreeWriter& w) -> Status {
      for (size_t i = from; i < std::min(ops.size(), from + kBatch); ++i) RETURN_IF_ERROR(ops[i](w));
      return Status::OK();
    }));
  }
  return Status::OK();
}

}  // namespace tessera::meta
