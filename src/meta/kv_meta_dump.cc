// KvMeta: raw record access for `tessera dump` and `tessera load`
// (meta.h, TreeReader/TreeWriter). The reader runs inside one read-only
// transaction of the engine, so a dump is one snapshot.
#include <sys/stat.h>

#include <iterator>
#include <map>

#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"

namespace tessera::meta {

using namespace keys;  // NOLINT

namespace {

class KvTreeReader final : public TreeReader {
 public:
  explicit KvTreeReader(kv::Txn& tx) : tx_(tx) {}

  Status Inode(Ino ino, uint32_t type, InodeRecord* out) override {
    *out = InodeRecord{};
    out->ino = ino;
    if (type == S_IFDIR || type == 0) {
      // A directory's keys hold its entries: read the attributes and xattrs only.
      RETURN_IF_ERROR(GetAttrTx(tx_, ino, &out->attr));
      if (out->attr.IsDir()) return ScanXattrs(ino, out);
    }
    // Anything else: one scan of all its keys (chunks, attributes, locks,
    // symlink target, xattrs, in that key order).
    std::string prefix = AttrKey(ino);
    prefix.pop_back();  // "A" ino8
    bool found = false;
    RETURN_IF_ERROR(tx_.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
      std::string_view rest = k.substr(prefix.size());
      if (rest.empty()) return true;
      switch (rest[0]) {
        case 'I':
          found = rest.size() == 1 && DecodeAttr(v, &out->attr).ok();
          break;
        case 'C':
          if (rest.size() == 5) out->chunks.emplace_back(kv::ReadU32BE(rest.substr(1)), chunk::DecodeSlices(v));
          break;
        case 'S':
          out->target = std::string(v);
          break;
        case 'X':
          out->xattrs.emplace_back(std::string(rest.substr(1)), std::string(v));
          break;
        default:
          break;
      }
      return true;
    }));
    if (!found) return Status::Err(ENOENT, "no inode " + std::to_string(ino));
    if (!out->attr.IsFile()) out->chunks.clear();
    if (!out->attr.IsSymlink()) out->target.clear();
    return Status::OK();
  }

  Status Entries(Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out, bool* more) override {
    return EntriesPageTx(tx_, dir, after, limit, out, more, /*strict=*/true);
  }

  Result<int64_t> Counter(const std::string& name) override {
    auto v = tx_.Get(CounterKey(name));
    if (!v.ok()) return v.status().not_found() ? Result<int64_t>(int64_t(0)) : Result<int64_t>(v.status());
    return DecodeI64(*v);
  }

 private:
  Status ScanXattrs(Ino ino, InodeRecord* out) {
    std::string xp = XattrPrefix(ino);
    return tx_.Scan(xp, kv::PrefixEnd(xp), 0, [&](std::string_view k, std::string_view v) {
      out->xattrs.emplace_back(std::string(k.substr(xp.size())), std::string(v));
      return true;
    });
  }

  kv::Txn& tx_;
};

// Gathers a batch's records, then writes them in key order with PutMany
// (one statement per thousand rows on postgres).
class KvTreeWriter final : public TreeWriter {
 public:
  Status PutInode(const InodeRecord& rec) override {
    records_[AttrKey(rec.ino)] = EncodeAttr(rec.attr);
    if (rec.attr.IsSymlink()) records_[SymlinkKey(rec.ino)] = rec.target;
    for (const auto& [name, value] : rec.xattrs) records_[XattrKey(rec.ino, name)] = value;
    for (const auto& [index, slices] : rec.chunks) {
      std::string list;
      list.reserve(slices.size() * 24);
      for (const auto& s : slices) chunk::AppendSlice(&list, s);
      records_[ChunkKey(rec.ino, index)] = std::move(list);
    }
    return Status::OK();
  }
  Status PutEntry(Ino parent, const std::string& name, Ino ino, uint32_t mode) override {
    records_[EntryKey(parent, name)] = EncodeEntry(ino, mode & S_IFMT);
    return Status::OK();
  }
  Status PutCounter(const std::string& name, int64_t value) override {
    records_[CounterKey(name)] = EncodeI64(value);
    return Status::OK();
  }
  Status PutAttr(Ino ino, const Attr& attr) override {
    records_[AttrKey(ino)] = EncodeAttr(attr);
    return Status::OK();
  }
  Status DeleteEntry(Ino parent, const std::string& name) override {
    std::string k = EntryKey(parent, name);
    records_.erase(k);
    deletes_.push_back(std::move(k));
    return Status::OK();
  }
  Status PutSetting(const Format& format) override {
    records_[kSettingKey] = format.ToJson();
    return Status::OK();
  }
  Status PutDirStat(Ino dir, const DirStat& stat) override {
    std::string k = DirStatKey(dir);
    if (stat == DirStat{}) {
      records_.erase(k);
      deletes_.push_back(std::move(k));
    } else {
      records_[k] = EncodeDirStat(stat);
    }
    return Status::OK();
  }
  Status PutParents(Ino ino, const ParentCounts& parents) override {
    clear_prefixes_.push_back(ParentPrefix(ino));
    for (const auto& [dir, n] : parents) records_[ParentKey(ino, dir)] = EncodeI64(n);
    return Status::OK();
  }
  Status PutSliceRef(uint64_t id, uint32_t size, int64_t extra) override {
    std::string k = SliceRefKey(id, size);
    if (extra <= 0) {
      records_.erase(k);
      deletes_.push_back(std::move(k));
    } else {
      records_[k] = EncodeI64(extra);
    }
    return Status::OK();
  }
  Status UnqueueSlice(uint64_t id, uint32_t size, int64_t not_before) override {
    deletes_.push_back(not_before > 0 ? DelayedSliceKey(not_before, id, size) : SliceGcKey(id, size));
    return Status::OK();
  }
  Status Flush(kv::Txn& tx) {
    for (const auto& p : clear_prefixes_) RETURN_IF_ERROR(DeletePrefixTx(tx, p));
    clear_prefixes_.clear();
    for (const auto& k : deletes_) RETURN_IF_ERROR(tx.Delete(k));
    deletes_.clear();
    kv::Txn::KeyValues kvs(std::make_move_iterator(records_.begin()), std::make_move_iterator(records_.end()));
    records_.clear();
    return tx.PutMany(kvs);
  }

 private:
  std::map<std::string, std::string> records_;
  std::vector<std::string> deletes_;
  std::vector<std::string> clear_prefixes_;  // emptied before records_ are written
};

}  // namespace

Status KvMeta::ReadTree(const std::function<Status(TreeReader&)>& fn) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        KvTreeReader reader(tx);
        return fn(reader);
      },
      true);
}

Status KvMeta::WriteTree(const std::function<Status(TreeWriter&)>& fn) {
  return engine_->Run([&](kv::Txn& tx) {
    KvTreeWriter writer;
    RETURN_IF_ERROR(fn(writer));
    return writer.Flush(tx);
  });
}

Status KvMeta::Repair(std::vector<std::string>* changes) {
  (void)releases_.Flush();
  RETURN_IF_ERROR(FlushDirStats());
  std::unordered_map<Ino, Attr> attrs;
  std::vector<EntryTriple> entries;
  UsageRecords usage;
  std::vector<std::string> problems;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        attrs.clear();
        entries.clear();
        usage = UsageRecords{};
        problems.clear();
        return CollectTreeTx(tx, &attrs, &entries, &usage, &problems);
      },
      true));
  if (!problems.empty()) return Status::Err(EIO, "cannot repair: " + problems.front());
  return RepairTree(this, std::move(attrs), std::move(entries), std::move(usage), changes);
}

Result<bool> KvMeta::IsEmpty() {
  bool empty = true;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        return tx.Scan("", "", 1, [&](std::string_view, std::string_view) {
          empty = false;
          return false;
        });
      },
      true));
  return empty;
}

}  // namespace tessera::meta
