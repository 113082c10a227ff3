// Transaction helpers shared by KvMeta's files (kv_meta.cc, kv_meta_data.cc,
// kv_meta_session.cc, kv_meta_xattr_lock.cc, ...). Internal to src/meta.
#pragma once

#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kv/kv.h"
#include "meta/meta.h"
#include "meta/meta_util.h"

namespace tessera::meta {

Status GetAttrTx(kv::Txn& tx, Ino ino, Attr* attr);
Status PutAttrTx(kv::Txn& tx, Ino ino, const Attr& attr);
// ENOENT when the entry does not exist.
Status GetEntryTx(kv::Txn& tx, Ino parent, const std::string& name, Ino* ino, uint32_t* type);
// Loads a directory's attributes and checks the caller may modify it (w+x).
Status WritableDirTx(kv::Txn& tx, const Context& ctx, Ino parent, Attr* pattr);
Status StickyCheck(const Context& ctx, const Attr& dir, const Attr& child);
Status FreeNameTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Attr* pattr);
Status RemovableEntryTx(kv::Txn& tx, const Context& ctx, Ino parent, const std::string& name, Attr* pattr,
                        Ino* ino, Attr* attr);
// A page of a directory's entries after `after` (attr.mode: the type bits
// only). An entry that does not decode is skipped, or with strict EIO.
Status EntriesPageTx(kv::Txn& tx, Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out,
                     bool* more, bool strict);
Status IncrTx(kv::Txn& tx, const char* name, int64_t delta);
// A counter's value (0 when never set).
Result<int64_t> CounterTx(kv::Txn& tx, const char* name);
Status DeletePrefixTx(kv::Txn& tx, const std::string& prefix);
// A chunk list no longer holds slice (id, size): one reference fewer if
// clones share it (docs/format.md §4), else its objects are queued for
// deletion (not before `not_before`, unix seconds, when not 0). Callers
// release each slice id once per chunk list, however many records of it
// the list held.
Status ReleaseSliceTx(kv::Txn& tx, uint64_t id, uint32_t size, int64_t not_before = 0);
// Releases every real slice of a chunk list (each id once).
Status QueueSlicesTx(kv::Txn& tx, std::string_view chunk_value);
// Appends slices to the chunk list at key (its current value: `value`) and
// drops the records the list then hides completely, old or new, releasing
// their slices. *count (if not null): records in the list after.
Status AppendSlicesTx(kv::Txn& tx, const std::string& key, std::string value, const std::vector<chunk::Slice>& added,
                      uint32_t* count = nullptr);
// Every inode's attributes and every directory entry (fsck); records it
// cannot decode become problems.
Status CollectTreeTx(kv::Txn& tx, std::unordered_map<Ino, Attr>* attrs, std::vector<std::tuple<Ino, std::string, Ino>>* entries,
                     UsageRecords* usage, std::vector<std::string>* problems);
// ESTALE if session sid (0: none) no longer exists (meta.h, Heartbeat).
Status LiveSessionTx(kv::Txn& tx, uint64_t sid);

}  // namespace tessera::meta
