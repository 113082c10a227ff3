// KvMeta: raw record access for `tessera dump` and `tessera load`
// (meta.h, TreeReader/TreeWriter). The reader runs inside one read-only
// transaction of the engine, so a dump is one snapshot.
#include <sys/stat.h>

#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"

namespace tessera::meta {

using namespace keys;  // NOLINT

namespace {

class KvTreeReader final : public TreeReader {
 public:
  explicit KvTreeReader(kv::Txn& tx) : tx_(tx) {}

  Status Inode(Ino ino, InodeRecord* out) override {
    *out = InodeRecord{};
    out->ino = ino;
    RETURN_IF_ERROR(GetAttrTx(tx_, ino, &out->attr));
    if (out->attr.IsSymlink()) {
      auto t = tx_.Get(SymlinkKey(ino));
      if (!t.ok()) return t.status().With("reading the target of symlink " + std::to_string(ino));
      out->target = std::move(*t);
    }
    std::string xp = XattrPrefix(ino);
    RETURN_IF_ERROR(tx_.Scan(xp, kv::PrefixEnd(xp), 0, [&](std::string_view k, std::string_view v) {
      out->xattrs.emplace_back(std::string(k.substr(xp.size())), std::string(v));
      return true;
    }));
    if (!out->attr.IsFile()) return Status::OK();
    std::string cp = ChunkPrefix(ino);
    return tx_.Scan(cp, kv::PrefixEnd(cp), 0, [&](std::string_view k, std::string_view v) {
      if (k.size() == cp.size() + 4) out->chunks.emplace_back(kv::ReadU32BE(k.substr(cp.size())), chunk::DecodeSlices(v));
      return true;
    });
  }

  Status Entries(Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out, bool* more) override {
    out->clear();
    *more = false;
    std::string prefix = EntryPrefix(dir);
    std::string begin = after.empty() ? prefix : EntryKey(dir, after) + std::string(1, '\0');
    Status bad;
    RETURN_IF_ERROR(tx_.Scan(begin, kv::PrefixEnd(prefix), limit + 1, [&](std::string_view k, std::string_view v) {
      if (out->size() == limit) {
        *more = true;
        return false;
      }
      Entry e;
      e.name = std::string(k.substr(prefix.size()));
      uint32_t type = 0;
      bad = DecodeEntry(v, &e.ino, &type);
      if (!bad.ok()) return false;
      e.attr.mode = type;
      out->push_back(std::move(e));
      return true;
    }));
    return bad.ok() ? Status::OK() : bad.With("entry of directory " + std::to_string(dir));
  }

  Result<int64_t> Counter(const std::string& name) override {
    auto v = tx_.Get(CounterKey(name));
    if (!v.ok()) return v.status().not_found() ? Result<int64_t>(int64_t(0)) : Result<int64_t>(v.status());
    return DecodeI64(*v);
  }

 private:
  kv::Txn& tx_;
};

class KvTreeWriter final : public TreeWriter {
 public:
  explicit KvTreeWriter(kv::Txn& tx) : tx_(tx) {}

  Status PutInode(const InodeRecord& rec) override {
    RETURN_IF_ERROR(PutAttrTx(tx_, rec.ino, rec.attr));
    if (rec.attr.IsSymlink()) RETURN_IF_ERROR(tx_.Put(SymlinkKey(rec.ino), rec.target));
    for (const auto& [name, value] : rec.xattrs) RETURN_IF_ERROR(tx_.Put(XattrKey(rec.ino, name), value));
    for (const auto& [index, slices] : rec.chunks) {
      std::string list;
      list.reserve(slices.size() * 24);
      for (const auto& s : slices) chunk::AppendSlice(&list, s);
      RETURN_IF_ERROR(tx_.Put(ChunkKey(rec.ino, index), list));
    }
    return Status::OK();
  }
  Status PutEntry(Ino parent, const std::string& name, Ino ino, uint32_t mode) override {
    return tx_.Put(EntryKey(parent, name), EncodeEntry(ino, mode & S_IFMT));
  }
  Status PutCounter(const std::string& name, int64_t value) override {
    return tx_.Put(CounterKey(name), EncodeI64(value));
  }
  Status PutSetting(const Format& format) override { return tx_.Put(kSettingKey, format.ToJson()); }

 private:
  kv::Txn& tx_;
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
    KvTreeWriter writer(tx);
    return fn(writer);
  });
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
