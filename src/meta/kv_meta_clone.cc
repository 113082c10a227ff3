// KvMeta::Clone (meta.h): a metadata-only copy of a file or tree in one
// transaction; the copies' chunk lists name the same slices, each slice's
// extra references counted under "R" id8 size4 (docs/format.md, "Clones").
#include <sys/stat.h>
#include <unistd.h>

#include <unordered_set>

#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"

namespace tessera::meta {

using namespace keys;  // NOLINT

namespace {

struct CloneItem {
  Ino src = 0;
  size_t parent = SIZE_MAX;  // index of the item holding it (SIZE_MAX: the destination directory)
  std::string name;
  Attr attr;
  uint32_t subdirs = 0;  // directories: subdirectories copied
};

}  // namespace

Status KvMeta::Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask,
                     bool preserve, Ino* ino, Attr* attr, uint64_t* entries) {
  RETURN_IF_ERROR(CheckCloneArgs(ctx, src, parent, name, preserve));
  const Timespec now = Now();
  Attr pattr;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    RETURN_IF_ERROR(FreeNameTx(tx, ctx, parent, name, &pattr));
    std::vector<CloneItem> items(1);
    items[0].src = src;
    items[0].name = name;
    RETURN_IF_ERROR(GetAttrTx(tx, src, &items[0].attr));
    if (items[0].attr.IsDir()) {  // not into itself
      Ino p = parent;
      for (int depth = 0; depth < 100000; ++depth) {
        if (p == src) return Status::Err(EINVAL, "cannot clone a directory into itself");
        if (p == kRootIno) break;
        Attr a;
        RETURN_IF_ERROR(GetAttrTx(tx, p, &a));
        p = a.parent;
      }
    }
    // Everything below, breadth first, checked as the caller.
    for (size_t i = 0; i < items.size(); ++i) {
      const Attr& a = items[i].attr;
      if (!a.IsSymlink()) RETURN_IF_ERROR(CheckPermission(ctx, a, a.IsDir() ? R_OK | X_OK : R_OK));
      // A device node of one's own would get round mknod's privilege check.
      if (!ctx.IsRoot() && (S_ISCHR(a.mode) || S_ISBLK(a.mode)))
        return Status::Err(EPERM, "only root may clone device nodes");
      if (!a.IsDir()) continue;
      std::string after;
      bool more = true;
      while (more) {
        std::vector<Entry> page;
        RETURN_IF_ERROR(EntriesPageTx(tx, items[i].src, after, 1000, &page, &more, true));
        for (auto& e : page) {
          after = e.name;
          if (IsTrashIno(e.ino)) continue;
          if (items.size() >= kMaxCloneEntries)
            return Status::Err(E2BIG, "more than " + std::to_string(kMaxCloneEntries) + " entries to clone at once");
          CloneItem c;
          c.src = e.ino;
          c.parent = i;
          c.name = std::move(e.name);
          RETURN_IF_ERROR(GetAttrTx(tx, c.src, &c.attr));
          if (c.attr.IsDir()) items[i].subdirs++;
          items.push_back(std::move(c));
        }
      }
    }
    // Limits, then the new inodes' numbers straight from the counter.
    int64_t space = 0;
    for (const auto& c : items)
      if (c.attr.IsFile()) space += int64_t(Align4K(c.attr.length));
    RETURN_IF_ERROR(CheckSpaceTx(tx, space));
    if (const uint64_t limit = limits_.Inodes()) {
      auto used = tx.Get(CounterKey(kTotalInodes));
      if (!used.ok() && !used.status().not_found()) return used.status();
      const int64_t now_used = (used.ok() ? DecodeI64(*used) : 0) + dirstats_.Pending(kVolumeUsage).inodes;
      if (uint64_t(std::max<int64_t>(now_used, 0)) + items.size() > limit) return Status::Err(ENOSPC);
    }
    ASSIGN_OR_RETURN(const int64_t last, tx.Incr(CounterKey(kNextInode), int64_t(items.size())));
    const Ino first = Ino(last) - items.size() + 1;

    for (size_t i = 0; i < items.size(); ++i) {
      const CloneItem& c = items[i];
      const Ino new_ino = first + i;
      const Ino new_parent = c.parent == SIZE_MAX ? parent : first + c.parent;
      Attr a = c.attr;
      a.parent = new_parent;
      a.nlink = a.IsDir() ? 2 + c.subdirs : 1;
      a.ctime = now;
      if (!preserve) {
        a.uid = ctx.uid;
        a.gid = ctx.gid;
        if (!a.IsSymlink()) a.mode = (a.mode & S_IFMT) | (a.mode & 07777 & ~cumask & ~uint32_t(S_ISUID | S_ISGID));
        a.atime = a.mtime = now;
      }
      RETURN_IF_ERROR(PutAttrTx(tx, new_ino, a));
      RETURN_IF_ERROR(tx.Put(EntryKey(new_parent, c.name), EncodeEntry(new_ino, a.mode & S_IFMT)));
      deltas->emplace_back(new_parent, EntryUsage(a));
      if (a.IsSymlink()) {
        ASSIGN_OR_RETURN(std::string target, tx.Get(SymlinkKey(c.src)));
        RETURN_IF_ERROR(tx.Put(SymlinkKey(new_ino), target));
      }
      // Extended attributes and chunk lists, record for record.
      std::vector<std::pair<std::string, std::string>> records;
      for (const std::string& prefix : {XattrPrefix(c.src), ChunkPrefix(c.src)}) {
        RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
          records.emplace_back(std::string(k.substr(prefix.size())), std::string(v));
          return true;
        }));
        const bool chunks = prefix.back() == 'C';
        const std::string to = chunks ? ChunkPrefix(new_ino) : XattrPrefix(new_ino);
        for (const auto& [suffix, value] : records) {
          // Privileges do not pass to a copy the caller owns.
          if (!chunks && !preserve && (suffix == "security.capability" || suffix.rfind("trusted.", 0) == 0)) continue;
          RETURN_IF_ERROR(tx.Put(to + suffix, value));
          if (!chunks) continue;
          std::unordered_set<uint64_t> counted;  // one reference per slice per chunk list
          for (const chunk::Slice& s : chunk::DecodeSlices(value))
            if (s.id != 0 && counted.insert(s.id).second) RETURN_IF_ERROR(tx.Incr(SliceRefKey(s.id, s.size), 1).status());
        }
        records.clear();
      }
    }
    if (items[0].attr.IsDir()) CountSubdir(parent, &pattr, +1);
    pattr.mtime = pattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, parent, pattr));
    RETURN_IF_ERROR(IncrTx(tx, kTotalInodes, int64_t(items.size())));
    if (space > 0) RETURN_IF_ERROR(IncrTx(tx, kUsedSpace, space));
    *ino = first;
    RETURN_IF_ERROR(GetAttrTx(tx, first, attr));
    if (entries) *entries = items.size();
    return Status::OK();
  }));
  ReportEffects(ctx, {{parent, pattr}});
  return Status::OK();
}

}  // namespace tessera::meta
