// KvMeta: sessions, reclaiming deleted inodes and slices, and fsck.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/log.h"
#include "meta/encoding.h"
#include "meta/kv_meta.h"
#include "meta/kv_meta_tx.h"
#include "meta/meta_util.h"

namespace tessera::meta {

using chunk::kChunkSize;
using chunk::Slice;
using namespace keys;  // NOLINT

// ---------------------------------------------------------------- sessions

Status KvMeta::NewSession(const SessionInfo& in) {
  SessionInfo info = CompleteSession(in);
  // A renewal after others cleaned the old session: what this client did in
  // it since, before it noticed (removed a file it had open, took a lock),
  // is cleaned now, or never (no session list names that sid any more).
  if (const uint64_t old = sid_; old != 0) {
    RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
      auto live = tx.Get(SessionKey(old));
      if (live.ok()) return Status::OK();  // not cleaned: not this call's to end
      if (!live.status().not_found()) return live.status();
      return CleanSessionTx(tx, old);
    }));
  }
  Status st = engine_->Run([&](kv::Txn& tx) {
    auto r = tx.Incr(CounterKey(kNextSession), 1);
    if (!r.ok()) return r.status();
    sid_ = uint64_t(*r);
    info.sid = sid_;
    info.heartbeat = Now().sec;
    RETURN_IF_ERROR(tx.Put(SessionKey(sid_), EncodeSession(info)));
    // A session renewed after others cleaned the old one: they dropped this
    // client from the watchers too.
    if (watching_) RETURN_IF_ERROR(RegisterWatcherTx(tx, sid_));
    return tx.Put(HeartbeatKey(sid_), EncodeI64(info.heartbeat));
  });
  if (st.ok()) {
    std::lock_guard g(session_mu_);
    session_ = info;
  }
  // Changes made while the watcher was dropped were not sent here.
  if (st.ok() && watching_) watch_fn_({}, true);
  return st;
}

Status KvMeta::Heartbeat(const SessionLoad& load) {
  const uint64_t sid = sid_;
  if (sid == 0) return Status::OK();
  std::lock_guard g(session_mu_);
  const std::string record = HeartbeatRecord(session_, sid, load);
  std::string settings;
  RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
    RETURN_IF_ERROR(LiveSessionTx(tx, sid));
    auto v = tx.Get(kSettingKey);  // `tessera config` may have changed the limits
    if (v.ok()) settings = std::move(*v);
    if (!record.empty()) RETURN_IF_ERROR(tx.Put(SessionKey(sid), record));
    return tx.Put(HeartbeatKey(sid), EncodeI64(Now().sec));
  }));
  if (!record.empty()) session_.load = load;
  if (auto f = Format::FromJson(settings); f.ok()) limits_.Set(*f);
  return Status::OK();
}

Result<bool> KvMeta::ClaimJob(const std::string& name, int64_t interval_sec) {
  bool claimed = false;
  RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
    claimed = false;
    const int64_t now = Now().sec;
    auto last = tx.Get(JobKey(name));
    // Whole seconds: a difference of interval + 1 means more than interval
    // seconds went by (interval would allow claims 1 s early).
    if (last.ok() && now - DecodeI64(*last) <= interval_sec) return Status::OK();
    if (!last.ok() && !last.status().not_found()) return last.status();
    claimed = last.ok();
    return tx.Put(JobKey(name), EncodeI64(now));
  }));
  return claimed;
}

Status KvMeta::BeginBackup() {
  return engine_->Run([&](kv::Txn& tx) {
    ASSIGN_OR_RETURN(int64_t running, CounterTx(tx, keys::kBackupsRunning));
    RETURN_IF_ERROR(tx.Put(CounterKey(keys::kBackupsRunning), EncodeI64(std::max<int64_t>(running, 0) + 1)));
    RETURN_IF_ERROR(tx.Put(CounterKey(keys::kBackupBegan), EncodeI64(Now().sec)));
    return tx.Put(CounterKey(keys::kBackupMark), EncodeI64(std::numeric_limits<int64_t>::max()));
  });
}

Status KvMeta::EndBackup() {
  return engine_->Run([&](kv::Txn& tx) {
    ASSIGN_OR_RETURN(int64_t running, CounterTx(tx, keys::kBackupsRunning));
    ASSIGN_OR_RETURN(int64_t began, CounterTx(tx, keys::kBackupBegan));
    running = std::max<int64_t>(running - 1, 0);
    if (running > 0 && Now().sec - began > kBackupGiveUpSec) running = 0;  // the others died long ago
    RETURN_IF_ERROR(tx.Put(CounterKey(keys::kBackupsRunning), EncodeI64(running)));
    if (running > 0) return Status::OK();  // the mark stays up until the last one ends
    ASSIGN_OR_RETURN(int64_t next, CounterTx(tx, keys::kNextSlice));
    return tx.Put(CounterKey(keys::kBackupMark), EncodeI64(next));
  });
}

Status KvMeta::CloseSession() {
  Status flushed = FlushDirStats();  // not lost with the session: counted in the result
  if (sid_ == 0) return flushed;
  (void)releases_.Flush();
  refs_.Clear();
  Status st = engine_->Run([&](kv::Txn& tx) { return CleanSessionTx(tx, sid_.load()); });
  if (st.ok() && !flushed.ok()) st = flushed.With("writing directory statistics");
  if (st.ok()) sid_ = 0;
  return st;
}

Status KvMeta::CleanSessionTx(kv::Txn& tx, uint64_t sid) {
  // Open-but-unlinked inodes of that session.
  std::vector<Ino> sustained;
  std::string prefix = SustainedPrefix(sid);
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view) {
    sustained.push_back(kv::ReadU64BE(k.substr(prefix.size())));
    return true;
  }));
  for (Ino ino : sustained) {
    Attr attr;
    Status st = GetAttrTx(tx, ino, &attr);
    if (st.ok() && attr.nlink == 0) RETURN_IF_ERROR(DeleteInodeTx(tx, ino, attr, nullptr));
    else if (!st.ok() && !st.not_found()) return st;
    RETURN_IF_ERROR(tx.Delete(SustainedKey(sid, ino)));
  }
  RETURN_IF_ERROR(DropWatchersTx(tx, sid, {}));
  // Locks held by that session.
  std::vector<Ino> locked;
  prefix = SessionLockPrefix(sid);
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view) {
    locked.push_back(kv::ReadU64BE(k.substr(prefix.size())));
    return true;
  }));
  for (Ino ino : locked) {
    for (const std::string& key : {FlockKey(ino), PlockKey(ino)}) {
      auto v = tx.Get(key);
      if (!v.ok()) continue;
      auto locks = DecodeLocks(*v);
      std::erase_if(locks, [&](const LockRecord& l) { return l.sid == sid; });
      if (locks.empty()) RETURN_IF_ERROR(tx.Delete(key));
      else RETURN_IF_ERROR(tx.Put(key, EncodeLocks(locks)));
    }
    RETURN_IF_ERROR(tx.Delete(SessionLockKey(sid, ino)));
  }
  RETURN_IF_ERROR(tx.Delete(SessionKey(sid)));
  return tx.Delete(HeartbeatKey(sid));
}

Result<std::vector<SessionInfo>> KvMeta::ListSessions() {
  std::vector<SessionInfo> out;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        out.clear();
        std::string prefix = SessionPrefix();
        RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view, std::string_view v) {
          SessionInfo s;
          if (DecodeSession(v, &s).ok()) out.push_back(s);
          return true;
        }));
        for (auto& s : out) {
          auto hb = tx.Get(HeartbeatKey(s.sid));
          if (hb.ok()) s.heartbeat = DecodeI64(*hb);
        }
        return Status::OK();
      },
      true));
  return out;
}

Result<int> KvMeta::CleanStaleSessions(int64_t timeout_sec) {
  ASSIGN_OR_RETURN(auto sessions, ListSessions());
  int64_t now = Now().sec;
  int cleaned = 0;
  for (const auto& s : sessions) {
    if (s.sid == sid_ || !SessionDead(s, now, timeout_sec)) continue;
    RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) { return CleanSessionTx(tx, s.sid); }));
    ++cleaned;
  }
  return cleaned;
}

// ---------------------------------------------------------------- deletion

Status KvMeta::DeleteInodeTx(kv::Txn& tx, Ino ino, const Attr& attr, StatDeltas* deltas) {
  RETURN_IF_ERROR(tx.Delete(AttrKey(ino)));
  RETURN_IF_ERROR(DeletePrefixTx(tx, XattrPrefix(ino)));
  if (attr.IsSymlink()) RETURN_IF_ERROR(tx.Delete(SymlinkKey(ino)));
  const int64_t space = attr.IsFile() ? -int64_t(Align4K(attr.length)) : 0;
  if (attr.IsFile()) RETURN_IF_ERROR(tx.Put(DeletedKey(ino), EncodeI64(int64_t(attr.length))));
  RETURN_IF_ERROR(tx.Delete(FlockKey(ino)));
  RETURN_IF_ERROR(tx.Delete(PlockKey(ino)));
  if (attr.IsDir()) RETURN_IF_ERROR(tx.Delete(DirStatKey(ino)));
  if (deltas) {
    deltas->emplace_back(kVolumeUsage, DirStat{0, space, -1});
    return Status::OK();
  }
  if (space != 0) RETURN_IF_ERROR(IncrTx(tx, kUsedSpace, space));
  return IncrTx(tx, kTotalInodes, -1);
}

Status KvMeta::ReleaseInodeTx(kv::Txn& tx, Ino ino, const Attr& attr, StatDeltas* deltas) {
  // Marked sustained even if the transaction then rolls back: DropRefs rechecks.
  if (sid_ != 0 && refs_.Sustain(ino)) {
    RETURN_IF_ERROR(PutAttrTx(tx, ino, attr));
    return tx.Put(SustainedKey(sid_, ino), "");
  }
  return DeleteInodeTx(tx, ino, attr, deltas);
}

Result<int> KvMeta::CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel) {
  (void)releases_.Flush();
  // 1. Move the chunks of deleted inodes into the slice queue, a bounded batch
  //    per transaction so huge files do not make huge transactions.
  std::vector<Ino> inodes;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        inodes.clear();
        std::string prefix = DeletedPrefix();
        return tx.Scan(prefix, kv::PrefixEnd(prefix), size_t(max_items), [&](std::string_view k, std::string_view) {
          inodes.push_back(kv::ReadU64BE(k.substr(prefix.size())));
          return true;
        });
      },
      true));
  // Many small files share a transaction; a huge one takes several.
  constexpr size_t kChunksPerTxn = 256;
  for (size_t next = 0; next < inodes.size();) {
    size_t progress = next;
    RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
      size_t i = next, budget = kChunksPerTxn;
      while (i < inodes.size() && budget > 0) {
        std::vector<std::pair<std::string, std::string>> chunks;
        std::string prefix = ChunkPrefix(inodes[i]);
        RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), budget, [&](std::string_view k, std::string_view v) {
          chunks.emplace_back(k, v);
          return true;
        }));
        for (auto& [k, v] : chunks) {
          RETURN_IF_ERROR(QueueSlicesTx(tx, v));
          RETURN_IF_ERROR(tx.Delete(k));
        }
        if (chunks.size() == budget) break;  // maybe more: this inode continues in the next transaction
        budget -= chunks.size();
        RETURN_IF_ERROR(tx.Delete(DeletedKey(inodes[i])));
        ++i;
      }
      progress = i;
      return Status::OK();
    }));
    next = progress;  // unchanged when one huge inode used the whole budget: go on with it
  }
  // 1b. Slices whose deletion was delayed (compaction with the trash on) and
  //     is now due join the queue.
  RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
    std::vector<std::string> due;
    std::string end = DelayedSlicePrefix();
    kv::AppendU64BE(&end, uint64_t(Now().sec) + 1);
    RETURN_IF_ERROR(tx.Scan(DelayedSlicePrefix(), end, size_t(max_items), [&](std::string_view k, std::string_view) {
      due.emplace_back(k);
      return true;
    }));
    for (const auto& k : due) {
      if (k.size() != 21) continue;
      std::string_view rest = std::string_view(k).substr(9);
      RETURN_IF_ERROR(tx.Put(SliceGcKey(kv::ReadU64BE(rest), kv::ReadU32BE(rest.substr(8))), ""));
      RETURN_IF_ERROR(tx.Delete(k));
    }
    return Status::OK();
  }));
  // 2. Delete the objects of queued slices, then forget them.
  std::vector<std::pair<uint64_t, uint32_t>> slices;
  RETURN_IF_ERROR(engine_->Run(
      [&](kv::Txn& tx) {
        slices.clear();
        std::string prefix = SliceGcPrefix();
        return tx.Scan(prefix, kv::PrefixEnd(prefix), size_t(max_items), [&](std::string_view k, std::string_view) {
          auto rest = k.substr(prefix.size());
          slices.emplace_back(kv::ReadU64BE(rest), kv::ReadU32BE(rest.substr(8)));
          return true;
        });
      },
      true));
  // Objects first, then one transaction forgets every slice whose objects
  // are gone (a crash in between only repeats some deletions).
  Status failed;
  const std::vector<size_t> done = DeleteSlices(deleter, slices, parallel, &failed);
  if (!done.empty()) {
    RETURN_IF_ERROR(engine_->Run([&](kv::Txn& tx) {
      for (size_t i : done) RETURN_IF_ERROR(tx.Delete(SliceGcKey(slices[i].first, slices[i].second)));
      return Status::OK();
    }));
  }
  if (!failed.ok()) return failed;
  return int(done.size() + inodes.size());
}

// ---------------------------------------------------------------- fsck

Status CollectTreeTx(kv::Txn& tx, std::unordered_map<Ino, Attr>* attrs, std::vector<EntryTriple>* entries,
                     UsageRecords* usage, std::vector<std::string>* problems) {
  // Inodes, entries and parent records in one pass over the "A" space.
  RETURN_IF_ERROR(tx.Scan("A", "B", 0, [&](std::string_view k, std::string_view v) {
    if (k.size() < 10) return true;
    Ino ino = kv::ReadU64BE(k.substr(1, 8));
    char kind = k[9];
    if (kind == 'I') {
      Attr a;
      if (DecodeAttr(v, &a).ok()) (*attrs)[ino] = a;
      else problems->push_back(fmt::format("inode {}: undecodable attributes", ino));
    } else if (kind == 'D') {
      Ino child = 0;
      uint32_t type = 0;
      if (DecodeEntry(v, &child, &type).ok()) entries->emplace_back(ino, std::string(k.substr(10)), child);
      else problems->push_back(fmt::format("directory {}: undecodable entry", ino));
    } else if (kind == 'L' && k.size() == 18) {
      usage->parents[ino].emplace_back(kv::ReadU64BE(k.substr(10)), uint32_t(DecodeI64(v)));  // scan order: sorted
    } else if (kind == 'C' && k.size() == 14) {
      HoldSlices(v, &usage->slices);
    }
    return true;
  }));
  const std::string prefix = DirStatPrefix();
  RETURN_IF_ERROR(tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
    if (k.size() == prefix.size() + 8) usage->dirstats[kv::ReadU64BE(k.substr(prefix.size()))] = DecodeDirStat(v);
    return true;
  }));
  // Slices: reference records (id8 size4), the deletion queue (id8 size4)
  // and the delayed deletions (not-before8 id8 size4).
  const std::string refs = SliceRefPrefix(), gc = SliceGcPrefix(), delayed = DelayedSlicePrefix();
  RETURN_IF_ERROR(tx.Scan(refs, kv::PrefixEnd(refs), 0, [&](std::string_view k, std::string_view v) {
    if (k.size() == refs.size() + 12)
      usage->slices[{kv::ReadU64BE(k.substr(refs.size())), kv::ReadU32BE(k.substr(refs.size() + 8))}].extra =
          DecodeI64(v);
    return true;
  }));
  RETURN_IF_ERROR(tx.Scan(gc, kv::PrefixEnd(gc), 0, [&](std::string_view k, std::string_view) {
    if (k.size() == gc.size() + 12)
      usage->slices[{kv::ReadU64BE(k.substr(gc.size())), kv::ReadU32BE(k.substr(gc.size() + 8))}].queued.push_back(0);
    return true;
  }));
  return tx.Scan(delayed, kv::PrefixEnd(delayed), 0, [&](std::string_view k, std::string_view) {
    if (k.size() == delayed.size() + 20)
      usage->slices[{kv::ReadU64BE(k.substr(delayed.size() + 8)), kv::ReadU32BE(k.substr(delayed.size() + 16))}]
          .queued.push_back(int64_t(kv::ReadU64BE(k.substr(delayed.size()))));
    return true;
  });
}

Status KvMeta::Check(std::vector<std::string>* problems) {
  (void)releases_.Flush();
  RETURN_IF_ERROR(FlushDirStats());
  return engine_->Run(
      [&](kv::Txn& tx) {
        problems->clear();
        std::unordered_map<Ino, Attr> attrs;
        std::vector<EntryTriple> entries;
        UsageRecords usage;
        RETURN_IF_ERROR(CollectTreeTx(tx, &attrs, &entries, &usage, problems));
        CheckTree(attrs, entries, problems);
        CheckUsage(attrs, entries, usage, problems);
        CheckSlices(usage.slices, problems);
        int64_t counters[2] = {0, 0};
        for (int i = 0; i < 2; ++i) {
          auto v = tx.Get(CounterKey(i == 0 ? kUsedSpace : kTotalInodes));
          if (v.ok()) counters[i] = DecodeI64(*v);
          else if (!v.status().not_found()) return v.status();
        }
        CheckCounters(attrs, counters[0], counters[1], problems);
        return Status::OK();
      },
      true);
}

// ---------------------------------------------------------------- gc

Status KvMeta::ScanAllSlices(const SliceVisitor& visit) {
  // Chunk lists ("A" ino8 "C" idx4) among all inode records, then the
  // deletion queue ("G" id8 size4), in pages of one read-only transaction each.
  constexpr size_t kPage = 4096;
  auto pages = [&](const std::string& prefix, const std::function<void(std::string_view, std::string_view)>& fn) {
    std::string from = prefix;
    const std::string end = kv::PrefixEnd(prefix);
    for (;;) {
      std::vector<std::pair<std::string, std::string>> rows;
      RETURN_IF_ERROR(engine_->Run(
          [&](kv::Txn& tx) {
            rows.clear();
            return tx.Scan(from, end, kPage, [&](std::string_view k, std::string_view v) {
              rows.emplace_back(k, v);
              return true;
            });
          },
          true));
      for (const auto& [k, v] : rows) fn(k, v);
      if (rows.size() < kPage) return Status::OK();
      from = rows.back().first;
      from.push_back('\0');
    }
  };
  RETURN_IF_ERROR(pages("A", [&](std::string_view k, std::string_view v) {
    if (k.size() != 1 + 8 + 1 + 4 || k[9] != 'C') return;
    for (const Slice& s : chunk::DecodeSlices(v))
      if (s.id != 0) visit(s.id, s.size, false);
  }));
  const std::string gc = SliceGcPrefix();
  RETURN_IF_ERROR(pages(gc, [&](std::string_view k, std::string_view) {
    if (k.size() != gc.size() + 12) return;
    visit(kv::ReadU64BE(k.substr(gc.size())), kv::ReadU32BE(k.substr(gc.size() + 8)), true);
  }));
  const std::string delayed = DelayedSlicePrefix();  // pending too, only later
  return pages(delayed, [&](std::string_view k, std::string_view) {
    if (k.size() != delayed.size() + 20) return;
    visit(kv::ReadU64BE(k.substr(delayed.size() + 8)), kv::ReadU32BE(k.substr(delayed.size() + 16)), true);
  });
}

}  // namespace tessera::meta
