// KvMeta's trash (docs/format.md, "Trash"): /.trash and the hour
// directories removed entries move into while the trash is on.
#include <sys/stat.h>

#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"
#include "meta/meta_util.h"

namespace tessera::meta {

using namespace keys;  // NOLINT

Status KvMeta::EnsureTrash() {
  Timespec now = Now();
  return RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    Attr trash;
    Status st = GetAttrTx(tx, kTrashIno, &trash);
    if (st.ok()) return Status::OK();
    if (!st.not_found()) return st;
    Ino existing = 0;
    uint32_t type = 0;
    if (GetEntryTx(tx, kRootIno, kTrashName, &existing, &type).ok())
      return Status::Err(EEXIST, "the root holds a '.trash' that is not the trash: rename it to turn the trash on");
    Attr root;
    RETURN_IF_ERROR(GetAttrTx(tx, kRootIno, &root));
    trash.mode = S_IFDIR | 0555;
    trash.nlink = 2;
    trash.parent = kRootIno;
    trash.atime = trash.mtime = trash.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, kTrashIno, trash));
    RETURN_IF_ERROR(tx.Put(EntryKey(kRootIno, kTrashName), EncodeEntry(kTrashIno, S_IFDIR)));
    root.nlink++;
    RETURN_IF_ERROR(PutAttrTx(tx, kRootIno, root));
    deltas->emplace_back(kRootIno, EntryUsage(trash));
    deltas->emplace_back(kVolumeUsage, DirStat{0, 0, 1});
    return Status::OK();
  });
}

Result<bool> KvMeta::TrashTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Ino ino,
                             Attr* attr, const Timespec& now, StatDeltas* deltas) {
  if (limits_.TrashDays() == 0 || ctx.no_trash || IsTrashIno(parent)) return false;
  const Ino hour = TrashHourIno(now.sec);
  Attr hattr;
  Status st = GetAttrTx(tx, hour, &hattr);
  const bool made = st.not_found();
  if (made) {  // the first removal this hour (this hour's directory implies /.trash)
    Attr trash;
    st = GetAttrTx(tx, kTrashIno, &trash);
    if (st.not_found()) return false;  // trash on, /.trash not made yet (EnsureTrash): delete
    RETURN_IF_ERROR(st);
    hattr = Attr{};
    hattr.mode = S_IFDIR | 0555;
    hattr.nlink = 2;
    hattr.parent = kTrashIno;
    hattr.atime = hattr.mtime = hattr.ctime = now;
    RETURN_IF_ERROR(tx.Put(EntryKey(kTrashIno, TrashHourName(now.sec)), EncodeEntry(hour, S_IFDIR)));
    trash.nlink++;
    trash.mtime = trash.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, kTrashIno, trash));
    deltas->emplace_back(kVolumeUsage, DirStat{0, 0, 1});
    deltas->emplace_back(kTrashIno, EntryUsage(hattr));
  } else {
    RETURN_IF_ERROR(st);
    // Removed (by root) and still held open by a session: an entry put there
    // would be out of every listing and purge, so this removal is final.
    if (hattr.nlink == 0) return false;
  }
  RETURN_IF_ERROR(tx.Put(EntryKey(hour, TrashEntryName(parent, ino, name)), EncodeEntry(ino, attr->mode & S_IFMT)));
  attr->nlink = attr->IsDir() ? 2 : 1;  // the hour's own count does not follow (CountSubdir)
  attr->parent = hour;
  attr->ctime = now;
  RETURN_IF_ERROR(PutAttrTx(tx, ino, *attr));
  deltas->emplace_back(hour, EntryUsage(*attr));
  // The hour's directory's times move by whole seconds: one write of its
  // record a second instead of one a removal, which concurrent removals
  // would all contend for.
  if (made || hattr.mtime.sec != now.sec) {
    hattr.mtime = hattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, hour, hattr));
  }
  return true;
}

}  // namespace tessera::meta
