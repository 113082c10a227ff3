// KvMeta's open files and file data: references that keep unlinked inodes
// alive, chunk slice lists (read, list, write with space checks, compact).
// The namespace is in kv_meta.cc.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "common/log.h"
#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"
#include "meta/meta_util.h"

namespace tessera::meta {

using chunk::kChunkSize;
using chunk::Slice;
using namespace keys;  // NOLINT

// ---------------------------------------------------------------- open files

Status KvMeta::Open(const Context& ctx, Ino ino, int flags, Attr* attr) {
  if (releases_.Pending(ino)) return Status::Err(ENOENT);
  refs_.Add(ino);
  Status st = engine_->Run(
      [&](kv::Txn& tx) {
        RETURN_IF_ERROR(GetAttrTx(tx, ino, attr));
        return CheckOpen(ctx, *attr, flags);
      },
      true);
  if (!st.ok()) (void)DropRefs(ino, 1);
  return st;
}

Status KvMeta::Close(const Context& ctx, Ino ino) { return DropRefs(ino, 1); }
Status KvMeta::Forget(Ino ino, uint64_t n) { return DropRefs(ino, n); }

Status KvMeta::DropRefs(Ino ino, uint64_t n) {
  if (refs_.Drop(ino, n) && sid_ != 0) releases_.Push(ino);
  return Status::OK();
}

Status KvMeta::ReleaseSustained(const std::vector<Ino>& inodes) {
  return engine_->Run([&](kv::Txn& tx) {
    for (Ino ino : inodes) {
      auto v = tx.Get(SustainedKey(sid_, ino));
      if (!v.ok()) {
        if (v.status().not_found()) continue;
        return v.status();
      }
      RETURN_IF_ERROR(tx.Delete(SustainedKey(sid_, ino)));
      Attr attr;
      Status st = GetAttrTx(tx, ino, &attr);
      if (st.not_found()) continue;
      RETURN_IF_ERROR(st);
      if (attr.nlink == 0) RETURN_IF_ERROR(DeleteInodeTx(tx, ino, attr, nullptr));
    }
    return Status::OK();
  });
}

// ---------------------------------------------------------------- data

Status KvMeta::Read(Ino ino, uint32_t chunk_index, std::vector<Slice>* slices) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        auto v = tx.Get(ChunkKey(ino, chunk_index));
        if (v.ok()) {
          *slices = chunk::DecodeSlices(*v);
          return Status::OK();
        }
        if (!v.status().not_found()) return v.status();
        slices->clear();
        Attr attr;  // distinguish "no data here" from "no such inode"
        return GetAttrTx(tx, ino, &attr);
      },
      true);
}

Status KvMeta::ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) {
  out->clear();
  const std::string prefix = ChunkPrefix(ino);
  return engine_->Run(
      [&](kv::Txn& tx) {
        out->clear();
        return tx.Scan(ChunkKey(ino, from), kv::PrefixEnd(prefix), limit, [&](std::string_view key, std::string_view) {
          if (key.size() == prefix.size() + 4) out->push_back(kv::ReadU32BE(key.substr(prefix.size())));
          return true;
        });
      },
      true);
}

Result<uint64_t> KvMeta::UsedSpaceTx(kv::Txn& tx) {
  auto used = tx.Get(CounterKey(kUsedSpace));  // absent until the first byte is written
  if (!used.ok() && !used.status().not_found()) return used.status();
  const int64_t engine = used.ok() ? DecodeI64(*used) : 0;
  return uint64_t(std::max<int64_t>(engine + dirstats_.Pending(kVolumeUsage).space, 0));
}

Status KvMeta::CheckSpaceTx(kv::Txn& tx, int64_t delta) {
  const uint64_t capacity = limits_.Capacity();
  if (capacity == 0 || delta <= 0) return Status::OK();
  ASSIGN_OR_RETURN(const uint64_t now_used, UsedSpaceTx(tx));
  return now_used + uint64_t(delta) > capacity ? Status::Err(ENOSPC) : Status::OK();
}

Status KvMeta::WriteSlices(const Context& ctx, Ino ino, const std::vector<SliceWrite>& slices, const Timespec& mtime,
                           Attr* out, std::vector<uint32_t>* slice_counts) {
  for (const auto& w : slices)
    if (uint64_t(w.slice.pos) + w.slice.len > kChunkSize) return Status::Err(EINVAL, "slice crosses a chunk boundary");
  const uint64_t sid = sid_;
  return RunCharged([&](kv::Txn& tx, StatDeltas* deltas) {
    RETURN_IF_ERROR(LiveSessionTx(tx, sid));
    Attr attr;
    RETURN_IF_ERROR(GetAttrTx(tx, ino, &attr));
    if (!attr.IsFile()) return Status::Err(EPERM);
    uint64_t end = attr.length;
    for (const auto& w : slices) end = std::max(end, uint64_t(w.chunk_index) * kChunkSize + w.slice.pos + w.slice.len);
    if (end > attr.length) {
      int64_t delta = int64_t(Align4K(end)) - int64_t(Align4K(attr.length));
      RETURN_IF_ERROR(CheckSpaceTx(tx, delta));
      deltas->emplace_back(kVolumeUsage, DirStat{0, delta, 0});
      const uint64_t old_len = attr.length;
      attr.length = end;
      RETURN_IF_ERROR(ChargeLengthTx(tx, ino, attr, old_len, deltas));
    }
    // One read-modify-write per chunk, however many slices it gets.
    std::map<uint32_t, std::vector<Slice>> by_chunk;  // keeps each chunk's order
    for (const auto& w : slices) by_chunk[w.chunk_index].push_back(w.slice);
    std::map<uint32_t, uint32_t> counts;
    for (const auto& [index, added] : by_chunk) {
      std::string key = ChunkKey(ino, index);
      auto v = tx.Get(key);
      std::string value;
      if (v.ok()) value = std::move(*v);
      else if (!v.status().not_found()) return v.status();
      RETURN_IF_ERROR(AppendSlicesTx(tx, key, std::move(value), added, &counts[index]));
    }
    if (slice_counts) {
      slice_counts->clear();
      for (const auto& w : slices) slice_counts->push_back(counts[w.chunk_index]);
    }
    attr.mtime = attr.ctime = mtime;
    RETURN_IF_ERROR(PutAttrTx(tx, ino, attr));
    *out = attr;
    return Status::OK();
  });
}

Status KvMeta::CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<Slice>& expected,
                            const std::vector<Slice>& replacement) {
  // With the trash on, the objects of replaced slices that a metadata dump
  // may refer to stay for trash-days (Meta::BeginBackup).
  const int days = limits_.TrashDays();
  const int64_t not_before = days > 0 ? Now().sec + int64_t(days) * 86400 : 0;
  return engine_->Run([&](kv::Txn& tx) {
    int64_t mark = 0;
    if (not_before > 0) {
      ASSIGN_OR_RETURN(mark, CounterTx(tx, keys::kBackupMark));
    }
    std::string key = ChunkKey(ino, chunk_index);
    auto v = tx.Get(key);
    if (!v.ok()) return v.status().not_found() ? Status::Err(EAGAIN, "chunk is gone") : v.status();
    std::vector<Slice> current = chunk::DecodeSlices(*v);
    if (current.size() < expected.size() || !std::equal(expected.begin(), expected.end(), current.begin()))
      return Status::Err(EAGAIN, "chunk changed during compaction");
    std::string value;
    for (const Slice& s : replacement) chunk::AppendSlice(&value, s);
    for (size_t i = expected.size(); i < current.size(); ++i) chunk::AppendSlice(&value, current[i]);
    // Ids that stay: the replacement's, and those still in the list after
    // the replaced part (a commit retried after compaction read the list).
    // A set, not a scan per record: a list that random writes filled holds
    // ~8,000 records, and commits append more while compaction runs, all
    // inside this write transaction.
    std::unordered_set<uint64_t> kept;
    for (const Slice& r : replacement) kept.insert(r.id);
    for (size_t i = expected.size(); i < current.size(); ++i) kept.insert(current[i].id);
    std::unordered_set<uint64_t> released;
    for (const Slice& s : expected) {
      if (s.id != 0 && !kept.count(s.id) && released.insert(s.id).second)
        RETURN_IF_ERROR(ReleaseSliceTx(tx, s.id, s.size, int64_t(s.id) <= mark ? not_before : 0));
    }
    if (value.empty()) return tx.Delete(key);
    return tx.Put(key, value);
  });
}

}  // namespace tessera::meta
