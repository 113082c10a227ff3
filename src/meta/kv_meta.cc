#include "meta/kv_meta.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/log.h"
#include "meta/encoding.h"
#include "meta/kv_meta_tx.h"
#include "meta/meta_util.h"
#include "common/url.h"

namespace tessera::meta {

using chunk::kChunkSize;
using chunk::Slice;
using namespace keys;  // NOLINT

// Transaction helpers shared by the kv_meta*.cc files (kv_meta_tx.h).

Status GetAttrTx(kv::Txn& tx, Ino ino, Attr* attr) {
  auto v = tx.Get(AttrKey(ino));
  if (!v.ok()) return v.status();
  return DecodeAttr(*v, attr);
}

Status PutAttrTx(kv::Txn& tx, Ino ino, const Attr& attr) { return tx.Put(AttrKey(ino), EncodeAttr(attr)); }

// ENOENT when the entry does not exist.
Status GetEntryTx(kv::Txn& tx, Ino parent, const std::string& name, Ino* ino, uint32_t* type) {
  auto v = tx.Get(EntryKey(parent, name));
  if (!v.ok()) return v.status();
  return DecodeEntry(*v, ino, type);
}

// Loads a directory's attributes and checks the caller may modify it (w+x).
Status WritableDirTx(kv::Txn& tx, const Context& ctx, Ino parent, Attr* pattr) {
  RETURN_IF_ERROR(GetAttrTx(tx, parent, pattr));
  if (!pattr->IsDir()) return Status::Err(ENOTDIR);
  RETURN_IF_ERROR(CheckPermission(ctx, *pattr, W_OK | X_OK));
  if (pattr->nlink == 0) return Status::Err(ENOENT);  // removed directory
  return Status::OK();
}

// Sticky directories: only the owner of the entry or of the directory (or
// root) may remove or rename the entry.
Status StickyCheck(const Context& ctx, const Attr& dir, const Attr& child) {
  if ((dir.mode & S_ISVTX) && !ctx.IsRoot() && ctx.uid != dir.uid && ctx.uid != child.uid)
    return Status::Err(EPERM);
  return Status::OK();
}

// Loads a writable parent in which `name` does not exist yet (EEXIST).
Status FreeNameTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Attr* pattr) {
  RETURN_IF_ERROR(WritableDirTx(tx, ctx, parent, pattr));
  Ino existing = 0;
  uint32_t type = 0;
  Status st = GetEntryTx(tx, parent, name, &existing, &type);
  if (st.ok()) return Status::Err(EEXIST);
  return st.not_found() ? Status::OK() : st;
}

// Loads a writable parent, the entry `name` in it and the entry's inode, and
// checks the caller may remove the entry (write+search, sticky bit).
Status RemovableEntryTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Attr* pattr,
                        Ino* ino, Attr* attr) {
  RETURN_IF_ERROR(WritableDirTx(tx, ctx, parent, pattr));
  uint32_t type = 0;
  RETURN_IF_ERROR(GetEntryTx(tx, parent, name, ino, &type));
  RETURN_IF_ERROR(GetAttrTx(tx, *ino, attr));
  return StickyCheck(ctx, *pattr, *attr);
}

namespace {

Status DirEmptyTx(kv::Txn& tx, Ino ino, bool* empty) {
  std::string prefix = EntryPrefix(ino);
  *empty = true;
  return tx.Scan(prefix, kv::PrefixEnd(prefix), 1, [&](std::string_view, std::string_view) {
    *empty = false;
    return false;
  });
}

}  // namespace

Status EntriesPageTx(kv::Txn& tx, Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out,
                     bool* more, bool strict) {
  out->clear();
  *more = false;
  const std::string prefix = EntryPrefix(dir);
  const std::string begin = after.empty() ? prefix : EntryKey(dir, after) + std::string(1, '\0');
  Status bad;
  RETURN_IF_ERROR(tx.Scan(begin, kv::PrefixEnd(prefix), limit + 1, [&](std::string_view k, std::string_view v) {
    if (out->size() == limit) {
      *more = true;
      return false;
    }
    Entry e;
    e.name = std::string(k.substr(prefix.size()));
    uint32_t type = 0;
    Status st = DecodeEntry(v, &e.ino, &type);
    if (!st.ok()) {
      if (!strict) return true;  // listing: skipped (fsck reports it)
      bad = st;
      return false;
    }
    e.attr.mode = type;
    out->push_back(std::move(e));
    return true;
  }));
  return bad.ok() ? Status::OK() : bad.With("entry of directory " + std::to_string(dir));
}

Status IncrTx(kv::Txn& tx, const char* name, int64_t delta) {
  if (delta == 0) return Status::OK();
  auto r = tx.Incr(CounterKey(name), delta);
  return r.ok() ? Status::OK() : r.status();
}

Result<int64_t> CounterTx(kv::Txn& tx, const char* name) {
  auto v = tx.Get(CounterKey(name));
  if (v.ok()) return DecodeI64(*v);
  if (v.status().not_found()) return int64_t(0);
  return v.status();
}

Status DeletePrefixTx(kv::Txn& tx, const std::string& prefix) {
  std::vector<std::string> doomed;
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view) {
    doomed.emplace_back(k);
    return true;
  }));
  for (auto& k : doomed) RETURN_IF_ERROR(tx.Delete(k));
  return Status::OK();
}

Status ReleaseSliceTx(kv::Txn& tx, uint64_t id, uint32_t size, int64_t not_before) {
  const std::string ref = SliceRefKey(id, size);
  auto v = tx.Get(ref);
  if (!v.ok() && !v.status().not_found()) return v.status();
  if (v.ok()) {  // another chunk list (a clone) still holds it
    const int64_t extra = DecodeI64(*v) - 1;
    return extra > 0 ? tx.Put(ref, EncodeI64(extra)) : tx.Delete(ref);
  }
  return tx.Put(not_before > 0 ? DelayedSliceKey(not_before, id, size) : SliceGcKey(id, size), "");
}

Status QueueSlicesTx(kv::Txn& tx, std::string_view chunk_value) {
  std::unordered_set<uint64_t> done;
  for (const Slice& s : chunk::DecodeSlices(chunk_value))
    if (s.id != 0 && done.insert(s.id).second) RETURN_IF_ERROR(ReleaseSliceTx(tx, s.id, s.size));
  return Status::OK();
}

// A session that other clients cleaned (its client was cut off longer than
// the session timeout) may not write: what it held was taken over.
Status LiveSessionTx(kv::Txn& tx, uint64_t sid) {
  if (sid == 0) return Status::OK();
  auto s = tx.Get(SessionKey(sid));
  if (s.ok()) return Status::OK();
  if (!s.status().not_found()) return s.status();
  return Status::Err(ESTALE, "session " + std::to_string(sid) + " expired (other clients cleaned it)");
}

// Appends slices to a chunk's list, then drops the slices the list now hides
// completely, old or just added (queueing their objects for deletion), so
// overwritten data does not linger until compaction: a commit may carry
// several passes of one writer over the same bytes. O(n log n) in the list
// length.
Status AppendSlicesTx(kv::Txn& tx, const std::string& key, std::string value, const std::vector<Slice>& added,
                      uint32_t* count) {
  const size_t old_count = value.size() / chunk::kSliceRecordSize;
  for (const Slice& s : added) chunk::AppendSlice(&value, s);
  // Dropping the slices the new ones hide costs a view of the whole list,
  // so a long list (random writes before compaction catches up) is pruned
  // once per `step` appended records rather than at every commit: 1,024,
  // or half the list's length once that is more, so that the views cost
  // O(log n) per record appended however long the list grows, and the
  // records hidden but kept are at most half the list. The Redis function
  // (append_slices) follows the same rule.
  constexpr size_t kPruneAlways = 256, kPruneEvery = 1024;
  const size_t step = std::max<size_t>(kPruneEvery, std::bit_floor(old_count) / 2);
  const bool prune = old_count + added.size() > 1 &&
                     (old_count < kPruneAlways || old_count / step != (old_count + added.size()) / step);
  if (prune) {
    std::vector<Slice> slices = chunk::DecodeSlices(value);
    // A slice is visible iff its id is in the view. A packed slice has
    // several records (docs/format.md): all stay while one of them shows.
    // Holes (id 0) are kept: they are few and cheap.
    std::unordered_set<uint64_t> visible;
    for (const Slice& v : chunk::BuildView(slices)) visible.insert(v.id);
    std::string kept;
    std::unordered_set<uint64_t> kept_ids;
    std::vector<Slice> dropped;
    for (size_t i = 0; i < slices.size(); ++i) {
      const Slice& s = slices[i];
      if (s.id == 0 || visible.count(s.id)) {
        chunk::AppendSlice(&kept, s);
        kept_ids.insert(s.id);
      } else {
        dropped.push_back(s);
      }
    }
    // Released once per id, and only when no record of it stays (a retried
    // commit appends the same slice again).
    for (const Slice& s : dropped)
      if (kept_ids.insert(s.id).second) RETURN_IF_ERROR(ReleaseSliceTx(tx, s.id, s.size));
    if (!dropped.empty()) value = std::move(kept);
  }
  if (count) *count = uint32_t(value.size() / chunk::kSliceRecordSize);
  return tx.Put(key, value);
}


// ---------------------------------------------------------------- usage

Status KvMeta::RunCharged(const std::function<Status(kv::Txn&, StatDeltas*)>& fn) {
  StatDeltas deltas;
  Status st = engine_->Run([&](kv::Txn& tx) {
    deltas.clear();  // a retried transaction starts over
    return fn(tx, &deltas);
  });
  if (st.ok()) dirstats_.Merge(deltas);
  return st;
}

Status KvMeta::ChargeLengthTx(kv::Txn& tx, Ino ino, const Attr& attr, uint64_t old_len, StatDeltas* deltas) {
  if (attr.length == old_len || attr.nlink == 0) return Status::OK();
  const DirStat d = LengthDelta(old_len, attr.length);
  if (attr.nlink > 1) {
    const std::string prefix = ParentPrefix(ino);
    bool any = false;
    RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
      if (k.size() != prefix.size() + 8) return true;
      const int64_t n = DecodeI64(v);
      deltas->emplace_back(kv::ReadU64BE(k.substr(prefix.size())), DirStat{d.length * n, d.space * n, 0});
      any = true;
      return true;
    }));
    if (any) return Status::OK();  // else: records missing (fsck --repair rebuilds them)
  }
  deltas->emplace_back(attr.parent, d);
  return Status::OK();
}

Status KvMeta::AddParentTx(kv::Txn& tx, Ino ino, const Attr& attr, Ino parent) {
  if (attr.nlink == 1) RETURN_IF_ERROR(tx.Put(ParentKey(ino, attr.parent), EncodeI64(1)));
  return tx.Incr(ParentKey(ino, parent), 1).status();
}

Status KvMeta::DropParentTx(kv::Txn& tx, Ino ino, Attr* attr, Ino parent) {
  ASSIGN_OR_RETURN(int64_t left, tx.Incr(ParentKey(ino, parent), -1));
  if (left <= 0) RETURN_IF_ERROR(tx.Delete(ParentKey(ino, parent)));
  if (attr->nlink != 1) return Status::OK();
  // One name left: its directory becomes the parent, the records go.
  const std::string prefix = ParentPrefix(ino);
  std::vector<std::pair<std::string, int64_t>> records;
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
    records.emplace_back(k, DecodeI64(v));
    return true;
  }));
  for (const auto& [k, n] : records) {
    if (n > 0 && k.size() == prefix.size() + 8) attr->parent = kv::ReadU64BE(std::string_view(k).substr(prefix.size()));
    RETURN_IF_ERROR(tx.Delete(k));
  }
  return Status::OK();
}

Status KvMeta::MoveParentTx(kv::Txn& tx, Ino ino, const Attr& attr, Ino from, Ino to) {
  if (attr.IsDir() || attr.nlink < 2 || from == to) return Status::OK();
  ASSIGN_OR_RETURN(int64_t left, tx.Incr(ParentKey(ino, from), -1));
  if (left <= 0) RETURN_IF_ERROR(tx.Delete(ParentKey(ino, from)));
  return tx.Incr(ParentKey(ino, to), 1).status();
}

Status KvMeta::GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) {
  // Not while a flush is between taking the buffer and committing it: its
  // changes would be in neither.
  std::lock_guard<std::mutex> flushing(flush_mu_);
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        out->assign(dirs.size(), DirStat{});
        for (size_t i = 0; i < dirs.size(); ++i) {
          auto v = tx.Get(DirStatKey(dirs[i]));
          if (v.ok()) (*out)[i] = DecodeDirStat(*v);
          else if (!v.status().not_found()) return v.status();
        }
        return Status::OK();
      },
      true));
  for (size_t i = 0; i < dirs.size(); ++i) (*out)[i] += dirstats_.Pending(dirs[i]);
  return Status::OK();
}

Status KvMeta::FlushDirStats() {
  // One flush at a time: a second caller (Check, unmount) returns once the
  // changes in flight are in the engine too.
  std::lock_guard<std::mutex> flushing(flush_mu_);
  auto pending = dirstats_.Take();
  if (pending.empty() && doubtful_.empty()) return Status::OK();
  const uint64_t seq = ++flush_seq_;
  const std::string mark = FlushMarkKey(client_id_);
  Status st = engine_->Run([&](kv::Txn& tx) {
    auto changes = pending;
    if (!doubtful_.empty()) {  // did the flush whose commit we never heard of land?
      auto v = tx.Get(mark);
      if (!v.ok() && !v.status().not_found()) return v.status();
      if (!v.ok() || uint64_t(DecodeI64(*v)) != doubtful_seq_)
        for (const auto& [dir, d] : doubtful_) changes[dir] += d;
    }
    for (const auto& [dir, d] : changes) {
      if (dir == kVolumeUsage) {
        if (d.space != 0) RETURN_IF_ERROR(IncrTx(tx, kUsedSpace, d.space));
        if (d.inodes != 0) RETURN_IF_ERROR(IncrTx(tx, kTotalInodes, d.inodes));
        continue;
      }
      Attr attr;
      Status a = GetAttrTx(tx, dir, &attr);
      if (a.not_found()) continue;  // removed meanwhile (its record went with it)
      RETURN_IF_ERROR(a);
      const std::string key = DirStatKey(dir);
      auto v = tx.Get(key);
      if (!v.ok() && !v.status().not_found()) return v.status();
      DirStat cur = v.ok() ? DecodeDirStat(*v) : DirStat{};
      cur += d;
      RETURN_IF_ERROR(tx.Put(key, EncodeDirStat(cur)));
    }
    return tx.Put(mark, EncodeI64(int64_t(seq)));  // tells a later flush that this one landed
  });
  SettleFlush(st, pending, seq, &dirstats_, &doubtful_, &doubtful_seq_);
  return st;
}

// ---------------------------------------------------------------- basics

KvMeta::KvMeta(std::unique_ptr<kv::Engine> engine)
    : origin_("k" + std::to_string(NewClientId())),
      attr_hits_(metrics::NewCounter("tessera_meta_attr_cache_hits_total",
                                     "Attribute requests answered from the client's attribute cache")),
      engine_(WatchEngine(std::move(engine), origin_, watching_, &attrs_)),
      inode_ids_(kInodeBatch, [this](uint64_t batch) { return ReserveIds(kNextInode, batch); }),
      slice_ids_(kSliceBatch, [this](uint64_t batch) { return ReserveIds(kNextSlice, batch, true); }) {
  // Changes answered for and then lost may be in every cache: as after
  // missed notifications, drop them all (the kernel's too, when watching).
  engine_->OnLostWrites([this] { OnPayloads({}, true); });
}
KvMeta::~KvMeta() {
  engine_->OnLostWrites(nullptr);  // from now on, a loss is only counted
  StopWatching();
  // A client that ends without crashing loses no statistics (the VFS has
  // flushed already; this covers tools and tests).
  Status st = FlushDirStats();
  if (!st.ok()) LOG_ERROR("writing directory statistics at exit: {} (fsck --repair recomputes them)", st.ToString());
}

Result<int64_t> KvMeta::ReserveIds(const char* counter, uint64_t batch, bool durable) {
  int64_t last = 0;
  RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
    ASSIGN_OR_RETURN(last, tx.Incr(CounterKey(counter), int64_t(batch)));
    return Status::OK();
  }));
  if (durable) RETURN_IF_ERROR(engine_->Sync().With("making a reservation of ids durable"));
  return last;
}

Result<uint64_t> KvMeta::NewSliceId() { return slice_ids_.Next(); }

void KvMeta::AddRef(Ino ino) { refs_.Add(ino); }

Status KvMeta::Init(const Format& format, bool force) {
  Timespec now = Now();
  RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
    auto existing = tx.Get(kSettingKey);
    Format f = format;
    if (existing.ok()) {
      if (!force) return Status::Err(EEXIST, "a volume is already formatted here (use --force to overwrite its settings)");
      auto old = Format::FromJson(*existing);
      if (old.ok()) f.uuid = old->uuid;  // reformatting keeps the volume's identity
    } else if (!existing.status().not_found()) {
      return existing.status();
    }
    RETURN_IF_ERROR(tx.Put(kSettingKey, f.ToJson()));
    Attr root;
    if (GetAttrTx(tx, kRootIno, &root).ok()) return Status::OK();  // keep the existing tree
    root.mode = S_IFDIR | 0777;
    root.nlink = 2;
    root.parent = kRootIno;
    root.atime = root.mtime = root.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, kRootIno, root));
    RETURN_IF_ERROR(tx.Put(CounterKey(kNextInode), EncodeI64(int64_t(kRootIno))));
    RETURN_IF_ERROR(tx.Put(CounterKey(kTotalInodes), EncodeI64(1)));
    return Status::OK();
  }));
  auto loaded = Load();
  if (!loaded.ok()) return loaded.status();
  return loaded->trash_days > 0 ? EnsureTrash() : Status::OK();
}

Result<Format> KvMeta::Load() {
  std::string json;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        auto v = tx.Get(kSettingKey);
        if (!v.ok()) return v.status().not_found() ? Status::Err(ENOENT, "no volume formatted at this META-URL") : v.status();
        json = std::move(*v);
        return Status::OK();
      },
      true));
  ASSIGN_OR_RETURN(format_, Format::FromJson(json));
  limits_.Set(format_);
  return format_;
}

Status KvMeta::StatFS(const Context& ctx, StatFs* out) {
  (void)releases_.Flush();  // counters include released inodes
  // Not while a flush is between taking the buffer and committing it: read
  // before its commit, the engine's counters would miss its changes, and the
  // buffer no longer holds them once it is done (seen in CI: a removed tree
  // still counted).
  std::lock_guard<std::mutex> flushing(flush_mu_);
  int64_t used = 0, inodes = 0;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        auto u = tx.Get(CounterKey(kUsedSpace));
        used = u.ok() ? DecodeI64(*u) : 0;
        auto i = tx.Get(CounterKey(kTotalInodes));
        inodes = i.ok() ? DecodeI64(*i) : 0;
        return Status::OK();
      },
      true));
  const DirStat mine = dirstats_.Pending(kVolumeUsage);  // this client's unflushed changes
  used += mine.space;
  inodes += mine.inodes;
  FillStatFs(limits_.Capacity(), limits_.Inodes(), used, inodes, out);
  return Status::OK();
}

// ---------------------------------------------------------------- namespace

Status KvMeta::Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) {
  if (name.size() > kMaxName) return Status::Err(ENAMETOOLONG);
  return engine_->Run(
      [&](kv::Txn& tx) {
        Attr pattr;
        RETURN_IF_ERROR(GetAttrTx(tx, parent, &pattr));
        if (!pattr.IsDir()) return Status::Err(ENOTDIR);
        RETURN_IF_ERROR(CheckPermission(ctx, pattr, X_OK));
        Ino found = 0;
        if (name == ".") {
          found = parent;
        } else if (name == "..") {
          found = pattr.parent;
        } else {
          uint32_t type = 0;
          RETURN_IF_ERROR(GetEntryTx(tx, parent, name, &found, &type));
        }
        *ino = found;
        return GetAttrTx(tx, found, attr);
      },
      true);
}

Status KvMeta::GetAttr(const Context& ctx, Ino ino, Attr* attr) {
  if (releases_.Pending(ino)) return Status::Err(ENOENT);
  return engine_->Run([&](kv::Txn& tx) { return GetAttrTx(tx, ino, attr); }, true);
}

Status KvMeta::Access(const Context& ctx, Ino ino, int mask) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        Attr attr;
        RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
        return CheckPermission(ctx, attr, mask);
      },
      true);
}

Status KvMeta::SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) {
  Timespec now = Now();
  return engine_->Run([&](kv::Txn& tx) {
    Attr cur;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &cur));
    Attr next = cur;
    bool owner = ctx.IsRoot() || ctx.uid == cur.uid;
    if (mask & (kSetUid | kSetGid)) {
      uint32_t uid = (mask & kSetUid) ? in.uid : cur.uid;
      uint32_t gid = (mask & kSetGid) ? in.gid : cur.gid;
      if (!ctx.IsRoot()) {
        if (ctx.uid != cur.uid || uid != cur.uid) return Status::Err(EPERM);
        if (gid != cur.gid && !ctx.InGroup(gid)) return Status::Err(EPERM);
      }
      if (!cur.IsDir() && (uid != cur.uid || gid != cur.gid || !ctx.IsRoot())) {
        next.mode &= ~uint32_t(S_ISUID);
        if (next.mode & S_IXGRP) next.mode &= ~uint32_t(S_ISGID);
      }
      next.uid = uid;
      next.gid = gid;
    }
    if (mask & kSetMode) {
      uint32_t perm = in.mode & 07777;
      uint32_t cleared = cur.mode & 07777 & ~uint32_t(S_ISUID | S_ISGID);
      // The kernel clears SUID/SGID on behalf of a writer that is not the
      // owner (file_remove_privs): allow a change that only drops those bits
      // for a caller with write permission.
      bool kill_priv_only = perm == cleared || perm == (cur.mode & 07777 & ~uint32_t(S_ISUID));
      if (!owner && !(kill_priv_only && CheckPermission(ctx, cur, W_OK).ok())) return Status::Err(EPERM);
      if (!ctx.IsRoot() && (perm & S_ISGID) && !ctx.InGroup(next.gid) && !cur.IsDir()) perm &= ~uint32_t(S_ISGID);
      next.mode = (cur.mode & S_IFMT) | perm;
    }
    if (mask & (kSetAtime | kSetMtime | kSetAtimeNow | kSetMtimeNow)) {
      bool explicit_time = ((mask & kSetAtime) && !(mask & kSetAtimeNow)) || ((mask & kSetMtime) && !(mask & kSetMtimeNow));
      if (explicit_time) {
        if (!owner) return Status::Err(EPERM);
      } else if (!owner && !CheckPermission(ctx, cur, W_OK).ok()) {
        return Status::Err(EACCES);
      }
      if (mask & kSetAtimeNow) next.atime = now;
      else if (mask & kSetAtime) next.atime = in.atime;
      if (mask & kSetMtimeNow) next.mtime = now;
      else if (mask & kSetMtime) next.mtime = in.mtime;
    }
    next.ctime = (mask & kSetCtime) ? in.ctime : now;
    RETURN_IF_ERROR(PutAttrTx(tx, ino, next));
    *out = next;
    return Status::OK();
  });
}

Status KvMeta::AppendHoleTx(kv::Txn& tx, Ino ino, uint64_t off, uint64_t end) {
  while (off < end) {
    uint32_t idx = uint32_t(off / kChunkSize);
    uint32_t pos = uint32_t(off % kChunkSize);
    uint32_t len = uint32_t(std::min<uint64_t>(kChunkSize - pos, end - off));
    std::string key = ChunkKey(ino, idx);
    auto v = tx.Get(key);
    if (v.ok()) {  // nothing to hide where nothing was ever written
      RETURN_IF_ERROR(AppendSlicesTx(tx, key, std::move(*v), {Slice{pos, 0, len, 0, len}}));
    } else if (!v.status().not_found()) {
      return v.status();
    }
    off += len;
  }
  return Status::OK();
}

Status KvMeta::TruncateChunksTx(kv::Txn& tx, Ino ino, uint64_t old_len, uint64_t new_len) {
  if (new_len >= old_len) return Status::OK();
  // Whole chunks past the new end go away.
  uint32_t first_dead = uint32_t((new_len + kChunkSize - 1) / kChunkSize);
  std::vector<std::pair<std::string, std::string>> dead;
  std::string prefix = ChunkPrefix(ino);
  RETURN_IF_ERROR(tx.Scan(ChunkKey(ino, first_dead), kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
    dead.emplace_back(k, v);
    return true;
  }));
  for (auto& [k, v] : dead) {
    RETURN_IF_ERROR(QueueSlicesTx(tx, v));
    RETURN_IF_ERROR(tx.Delete(k));
  }
  // The tail of the last partial chunk must read as zeros if extended later.
  if (new_len % kChunkSize != 0) {
    uint64_t end = std::min<uint64_t>(old_len, uint64_t(first_dead) * kChunkSize);
    RETURN_IF_ERROR(AppendHoleTx(tx, ino, new_len, end));
  }
  return Status::OK();
}

Status KvMeta::Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) {
  if (length > kMaxFileSize) return Status::Err(EFBIG);
  Timespec now = Now();
  return RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    if (attr.IsDir()) return Status::Err(EISDIR);
    if (!attr.IsFile()) return Status::Err(EINVAL);
    if (check_perm) RETURN_IF_ERROR(CheckPermission(ctx, attr, W_OK));
    int64_t delta = int64_t(Align4K(length)) - int64_t(Align4K(attr.length));
    RETURN_IF_ERROR(CheckSpaceTx(tx, delta));
    RETURN_IF_ERROR(TruncateChunksTx(tx, ino, attr.length, length));
    deltas->emplace_back(kVolumeUsage, DirStat{0, delta, 0});
    const uint64_t old_len = attr.length;
    attr.length = length;
    RETURN_IF_ERROR(ChargeLengthTx(tx, ino, attr, old_len, deltas));
    attr.mtime = attr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, ino, attr));
    *out = attr;
    return Status::OK();
  });
}

Status KvMeta::Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) {
  RETURN_IF_ERROR(CheckFallocateArgs(mode, off, len));
  Timespec now = Now();
  return RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    if (attr.IsDir()) return Status::Err(EISDIR);
    if (!attr.IsFile()) return Status::Err(ENODEV);
    uint64_t end = off + len;
    const bool grows = !(mode & FALLOC_FL_KEEP_SIZE) && end > attr.length;
    const int64_t delta = grows ? int64_t(Align4K(end)) - int64_t(Align4K(attr.length)) : 0;
    if (delta > 0) {
      ASSIGN_OR_RETURN(const uint64_t now_used, UsedSpaceTx(tx));
      if (now_used + uint64_t(delta) > FallocateSpace(limits_.Capacity())) return Status::Err(ENOSPC);
    }
    if (end > kMaxFileSize) return Status::Err(EFBIG);
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))
      RETURN_IF_ERROR(AppendHoleTx(tx, ino, off, std::min(end, attr.length)));
    bool changed = (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) != 0;
    if (grows) {
      deltas->emplace_back(kVolumeUsage, DirStat{0, delta, 0});
      const uint64_t old_len = attr.length;
      attr.length = end;
      RETURN_IF_ERROR(ChargeLengthTx(tx, ino, attr, old_len, deltas));
      changed = true;
    }
    if (changed) {
      attr.mtime = attr.ctime = now;
      RETURN_IF_ERROR(PutAttrTx(tx, ino, attr));
    }
    *out = attr;
    return Status::OK();
  });
}

Status KvMeta::Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t cumask,
                     uint32_t rdev, const std::string& target, Ino* ino, Attr* attr) {
  uint32_t type = 0;
  RETURN_IF_ERROR(CheckMknodArgs(name, mode, target, &type));
  if (const uint64_t limit = limits_.Inodes()) {
    StatFs fs;
    RETURN_IF_ERROR(StatFS(ctx, &fs));
    if (fs.used_inodes >= limit) return Status::Err(ENOSPC);
  }
  ASSIGN_OR_RETURN(Ino new_ino, inode_ids_.Next());
  Timespec now = Now();
  Attr pattr;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    RETURN_IF_ERROR(FreeNameTx(tx, ctx, parent, name, &pattr));

    Attr a;
    uint32_t perm = (type == S_IFLNK) ? 0777 : (mode & 07777 & ~cumask);
    a.uid = ctx.uid;
    a.gid = ctx.gid;
    if (pattr.mode & S_ISGID) {  // BSD group semantics for SGID directories
      a.gid = pattr.gid;
      if (type == S_IFDIR) perm |= S_ISGID;
      else if ((perm & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && !ctx.IsRoot() && !ctx.InGroup(a.gid))
        perm &= ~uint32_t(S_ISGID);
    }
    a.mode = type | perm;
    a.nlink = type == S_IFDIR ? 2 : 1;
    a.rdev = (type == S_IFCHR || type == S_IFBLK) ? rdev : 0;
    a.length = type == S_IFLNK ? target.size() : 0;
    a.parent = parent;
    a.atime = a.mtime = a.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, new_ino, a));
    if (type == S_IFLNK) RETURN_IF_ERROR(tx.Put(SymlinkKey(new_ino), target));
    RETURN_IF_ERROR(tx.Put(EntryKey(parent, name), EncodeEntry(new_ino, type)));
    if (type == S_IFDIR) CountSubdir(parent, &pattr, +1);
    pattr.mtime = pattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, parent, pattr));
    deltas->emplace_back(kVolumeUsage, DirStat{0, 0, 1});
    deltas->emplace_back(parent, EntryUsage(a));
    *ino = new_ino;
    *attr = a;
    return Status::OK();
  }));
  ReportEffects(ctx, {{parent, pattr}});
  return Status::OK();
}

Status KvMeta::Unlink(const Context& ctx, Ino parent, const std::string& name) {
  if (IsDotName(name)) return Status::Err(EISDIR);
  if (TouchesTrashRoot(ctx, parent, name)) return Status::Err(EPERM);
  RETURN_IF_ERROR(ValidName(name));
  Timespec now = Now();
  Attr pattr, before;
  Ino ino = 0;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    RETURN_IF_ERROR(RemovableEntryTx(tx, ctx, parent, name, &pattr, &ino, &before));
    Attr attr = before;
    if (attr.IsDir()) return Status::Err(EISDIR);
    RETURN_IF_ERROR(tx.Delete(EntryKey(parent, name)));
    pattr.mtime = pattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, parent, pattr));
    deltas->emplace_back(parent, Negated(EntryUsage(attr)));
    attr.nlink--;
    attr.ctime = now;
    if (attr.nlink > 0) {
      RETURN_IF_ERROR(DropParentTx(tx, ino, &attr, parent));
      return PutAttrTx(tx, ino, attr);
    }
    ASSIGN_OR_RETURN(bool trashed, TrashTx(tx, ctx, parent, name, ino, &attr, now, deltas));
    return trashed ? Status::OK() : ReleaseInodeTx(tx, ino, attr, deltas);
  }));
  ReportEffects(ctx, {{parent, pattr}});
  ReportRemoved(ctx, ino, before);
  return Status::OK();
}

Status KvMeta::Rmdir(const Context& ctx, Ino parent, const std::string& name) {
  if (name == ".") return Status::Err(EINVAL);
  if (TouchesTrashRoot(ctx, parent, name)) return Status::Err(EPERM);
  if (name == "..") return Status::Err(ENOTEMPTY);
  RETURN_IF_ERROR(ValidName(name));
  Timespec now = Now();
  Attr pattr, before;
  Ino ino = 0;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    RETURN_IF_ERROR(RemovableEntryTx(tx, ctx, parent, name, &pattr, &ino, &before));
    Attr attr = before;
    if (!attr.IsDir()) return Status::Err(ENOTDIR);
    bool empty = false;
    RETURN_IF_ERROR(DirEmptyTx(tx, ino, &empty));
    if (!empty) return Status::Err(ENOTEMPTY);
    RETURN_IF_ERROR(tx.Delete(EntryKey(parent, name)));
    CountSubdir(parent, &pattr, -1);
    pattr.mtime = pattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, parent, pattr));
    deltas->emplace_back(parent, Negated(EntryUsage(attr)));
    attr.nlink = 0;
    attr.ctime = now;
    ASSIGN_OR_RETURN(bool trashed, TrashTx(tx, ctx, parent, name, ino, &attr, now, deltas));
    return trashed ? Status::OK() : ReleaseInodeTx(tx, ino, attr, deltas);
  }));
  ReportEffects(ctx, {{parent, pattr}}, {ino});
  ReportRemoved(ctx, ino, before);
  return Status::OK();
}

// Rename, POSIX semantics (rename(2), renameat2(2)):
//  - the source entry must exist; both parents must be writable+searchable
//    directories; sticky directories restrict who may move or replace entries;
//  - a directory may not move below itself (EINVAL);
//  - if the target exists it is replaced atomically: a directory only by a
//    directory and only if empty (ENOTEMPTY), a non-directory only by a
//    non-directory (EISDIR / ENOTDIR); if both names are links to the same
//    inode nothing happens;
//  - RENAME_NOREPLACE fails with EEXIST if the target exists; RENAME_EXCHANGE
//    swaps two existing entries (of any types);
//  - a directory moved to another parent needs write permission on itself
//    (its ".." changes), and both parents' nlink follow the move.
Status KvMeta::Rename(const Context& ctx, Ino psrc, const std::string& nsrc, Ino pdst, const std::string& ndst,
                      uint32_t flags, Ino* out_ino, Attr* out_attr) {
  RETURN_IF_ERROR(CheckRenameArgs(nsrc, ndst, flags));
  if (TouchesTrashRoot(ctx, psrc, nsrc) || TouchesTrashRoot(ctx, pdst, ndst)) return Status::Err(EPERM);
  Timespec now = Now();
  Attr sp, dp_storage;
  Ino replaced = 0;
  bool changed = false;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    Attr& dp = pdst == psrc ? sp : dp_storage;  // one record when both parents are the same
    changed = false;
    RETURN_IF_ERROR(WritableDirTx(tx, ctx, psrc, &sp));
    if (pdst != psrc) RETURN_IF_ERROR(WritableDirTx(tx, ctx, pdst, &dp));
    Ino sino = 0, dino = 0;
    uint32_t stype = 0, dtype = 0;
    RETURN_IF_ERROR(GetEntryTx(tx, psrc, nsrc, &sino, &stype));
    Attr sattr, dattr;
    RETURN_IF_ERROR(GetAttrTx(tx, sino, &sattr));
    Status dst = GetEntryTx(tx, pdst, ndst, &dino, &dtype);
    bool dexists = dst.ok();
    if (!dexists && !dst.not_found()) return dst;
    if (dexists) RETURN_IF_ERROR(GetAttrTx(tx, dino, &dattr));
    if ((flags & kRenameExchange) && !dexists) return Status::Err(ENOENT);
    if ((flags & kRenameNoReplace) && dexists) return Status::Err(EEXIST);
    if (dexists && dino == sino) {  // same file: nothing to do
      *out_ino = sino;
      *out_attr = sattr;
      return Status::OK();
    }
    RETURN_IF_ERROR(StickyCheck(ctx, sp, sattr));
    if (dexists) RETURN_IF_ERROR(StickyCheck(ctx, dp, dattr));

    // A directory may not become its own descendant.
    auto would_loop = [&](Ino moved, Ino new_parent) -> Result<bool> {
      Ino cur = new_parent;
      for (int depth = 0; cur != kRootIno && depth < 100000; ++depth) {
        if (cur == moved) return true;
        Attr a;
        RETURN_IF_ERROR(GetAttrTx(tx, cur, &a));
        cur = a.parent;
      }
      return cur == moved;
    };
    if (sattr.IsDir() && psrc != pdst) {
      ASSIGN_OR_RETURN(bool loop, would_loop(sino, pdst));
      if (loop) return Status::Err(EINVAL);
      RETURN_IF_ERROR(CheckPermission(ctx, sattr, W_OK));
    }

    if (flags & kRenameExchange) {
      if (dattr.IsDir() && psrc != pdst) {
        ASSIGN_OR_RETURN(bool loop, would_loop(dino, psrc));
        if (loop) return Status::Err(EINVAL);
        RETURN_IF_ERROR(CheckPermission(ctx, dattr, W_OK));
      }
      RETURN_IF_ERROR(tx.Put(EntryKey(psrc, nsrc), EncodeEntry(dino, dtype)));
      RETURN_IF_ERROR(tx.Put(EntryKey(pdst, ndst), EncodeEntry(sino, stype)));
      if (psrc != pdst) {
        DirStat moved = EntryUsage(sattr);
        moved += Negated(EntryUsage(dattr));
        deltas->emplace_back(psrc, Negated(moved));
        deltas->emplace_back(pdst, moved);
        RETURN_IF_ERROR(MoveParentTx(tx, sino, sattr, psrc, pdst));
        RETURN_IF_ERROR(MoveParentTx(tx, dino, dattr, pdst, psrc));
        if (sattr.IsDir()) {
          CountSubdir(psrc, &sp, -1);
          CountSubdir(pdst, &dp, +1);
        }
        if (dattr.IsDir()) {
          CountSubdir(pdst, &dp, -1);
          CountSubdir(psrc, &sp, +1);
        }
        sattr.parent = pdst;
        dattr.parent = psrc;
      }
      sattr.ctime = dattr.ctime = now;
      RETURN_IF_ERROR(PutAttrTx(tx, sino, sattr));
      RETURN_IF_ERROR(PutAttrTx(tx, dino, dattr));
    } else {
      if (dexists) {
        if (sattr.IsDir() && !dattr.IsDir()) return Status::Err(ENOTDIR);
        if (!sattr.IsDir() && dattr.IsDir()) return Status::Err(EISDIR);
        if (dattr.IsDir()) {
          bool empty = false;
          RETURN_IF_ERROR(DirEmptyTx(tx, dino, &empty));
          if (!empty) return Status::Err(ENOTEMPTY);
        }
      }
      RETURN_IF_ERROR(tx.Delete(EntryKey(psrc, nsrc)));
      RETURN_IF_ERROR(tx.Put(EntryKey(pdst, ndst), EncodeEntry(sino, stype)));
      if (psrc != pdst) {
        deltas->emplace_back(psrc, Negated(EntryUsage(sattr)));
        deltas->emplace_back(pdst, EntryUsage(sattr));
        RETURN_IF_ERROR(MoveParentTx(tx, sino, sattr, psrc, pdst));
      }
      if (dexists) {
        deltas->emplace_back(pdst, Negated(EntryUsage(dattr)));
        if (dattr.IsDir()) {
          CountSubdir(pdst, &dp, -1);
          dattr.nlink = 0;
        } else {
          dattr.nlink--;
        }
        dattr.ctime = now;
        if (dattr.nlink > 0) {
          RETURN_IF_ERROR(DropParentTx(tx, dino, &dattr, pdst));
          RETURN_IF_ERROR(PutAttrTx(tx, dino, dattr));
        } else {
          ASSIGN_OR_RETURN(bool trashed, TrashTx(tx, ctx, pdst, ndst, dino, &dattr, now, deltas));
          if (!trashed) RETURN_IF_ERROR(ReleaseInodeTx(tx, dino, dattr, deltas));
        }
      }
      if (sattr.IsDir() && psrc != pdst) {
        CountSubdir(psrc, &sp, -1);
        CountSubdir(pdst, &dp, +1);
      }
      sattr.parent = pdst;
      sattr.ctime = now;
      RETURN_IF_ERROR(PutAttrTx(tx, sino, sattr));
    }
    sp.mtime = sp.ctime = dp.mtime = dp.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, psrc, sp));
    if (pdst != psrc) RETURN_IF_ERROR(PutAttrTx(tx, pdst, dp));
    *out_ino = sino;
    *out_attr = sattr;
    replaced = dexists ? dino : 0;
    changed = true;
    return Status::OK();
  }));
  if (!changed) ReportEffects(ctx, {});
  else if (pdst == psrc) ReportEffects(ctx, {{psrc, sp}}, {*out_ino, replaced});
  else ReportEffects(ctx, {{psrc, sp}, {pdst, dp_storage}}, {*out_ino, replaced});
  return Status::OK();
}

Status KvMeta::Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* out) {
  if (IsDotName(name)) return Status::Err(EEXIST);
  RETURN_IF_ERROR(ValidName(name));
  Timespec now = Now();
  Attr pattr;
  RETURN_IF_ERROR(RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    if (attr.IsDir()) return Status::Err(EPERM);
    if (attr.nlink == 0) return Status::Err(ENOENT);
    RETURN_IF_ERROR(FreeNameTx(tx, ctx, parent, name, &pattr));
    RETURN_IF_ERROR(tx.Put(EntryKey(parent, name), EncodeEntry(ino, attr.mode & S_IFMT)));
    RETURN_IF_ERROR(AddParentTx(tx, ino, attr, parent));
    deltas->emplace_back(parent, EntryUsage(attr));
    pattr.mtime = pattr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, parent, pattr));
    attr.nlink++;
    attr.ctime = now;
    RETURN_IF_ERROR(PutAttrTx(tx, ino, attr));
    *out = attr;
    return Status::OK();
  }));
  ReportEffects(ctx, {{parent, pattr}});
  return Status::OK();
}

Status KvMeta::ReadLink(const Context& ctx, Ino ino, std::string* target) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        Attr attr;
        RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
        if (!attr.IsSymlink()) return Status::Err(EINVAL);
        auto v = tx.Get(SymlinkKey(ino));
        if (!v.ok()) return v.status().not_found() ? Status::Err(EIO, "symlink target missing") : v.status();
        *target = std::move(*v);
        return Status::OK();
      },
      true);
}

Status KvMeta::ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                           std::vector<Entry>* entries, bool* more) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        entries->clear();
        *more = false;
        Attr attr;
        RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
        if (!attr.IsDir()) return Status::Err(ENOTDIR);
        RETURN_IF_ERROR(CheckPermission(ctx, attr, R_OK));
        RETURN_IF_ERROR(EntriesPageTx(tx, ino, after, limit, entries, more, /*strict=*/false));
        if (plus) {
          for (auto& e : *entries) {
            Status st = GetAttrTx(tx, e.ino, &e.attr);
            if (!st.ok() && !st.not_found()) return st;
          }
        }
        return Status::OK();
      },
      true);
}

}  // namespace tessera::meta
