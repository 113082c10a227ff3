// Binary encodings of KvMeta's keys and values (docs/format.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kv/kv.h"
#include "meta/meta.h"

namespace tessera::meta {

namespace keys {
inline constexpr const char* kSettingKey = "setting";
inline constexpr const char* kNextInode = "nextInode";
inline constexpr const char* kNextSlice = "nextSlice";
inline constexpr const char* kNextSession = "nextSession";
inline constexpr const char* kUsedSpace = "usedSpace";
inline constexpr const char* kTotalInodes = "totalInodes";
// Meta::BeginBackup/EndBackup: slices with ids up to the mark may be in a
// dump; dumps in progress; when the last one began (unix seconds).
inline constexpr const char* kBackupMark = "backupSliceMark";
inline constexpr const char* kBackupsRunning = "backupsRunning";
inline constexpr const char* kBackupBegan = "backupBegan";
// Clients watching for other clients' changes (coherent caches).
inline constexpr const char* kWatchers = "watchers";

std::string CounterKey(std::string_view name);
std::string AttrKey(Ino ino);
std::string EntryPrefix(Ino parent);
std::string EntryKey(Ino parent, std::string_view name);
std::string ChunkPrefix(Ino ino);
std::string ChunkKey(Ino ino, uint32_t index);
std::string SymlinkKey(Ino ino);
std::string XattrPrefix(Ino ino);
std::string XattrKey(Ino ino, std::string_view name);
std::string FlockKey(Ino ino);
std::string PlockKey(Ino ino);
std::string DeletedPrefix();
std::string DeletedKey(Ino ino);
std::string SliceGcPrefix();
std::string SliceGcKey(uint64_t id, uint32_t size);
std::string SessionPrefix();
std::string SessionKey(uint64_t sid);
std::string HeartbeatKey(uint64_t sid);
std::string SustainedPrefix(uint64_t sid);
std::string SustainedKey(uint64_t sid, Ino ino);
std::string SessionLockPrefix(uint64_t sid);
std::string SessionLockKey(uint64_t sid, Ino ino);
std::string JobKey(std::string_view name);
// A watching client (origin as in EncodeChanges) -> its session id (int64).
std::string WatcherPrefix();
std::string WatcherKey(std::string_view origin);
// Directory statistics: "U" ino8 -> EncodeDirStat.
std::string DirStatPrefix();
std::string DirStatKey(Ino dir);
// Extra references of a slice shared by clones: "R" id8 size4 -> int64
// (chunk lists holding it, minus one; absent: one list).
std::string SliceRefPrefix();
std::string SliceRefKey(uint64_t id, uint32_t size);
// Quotas: "Q" kind1 id8 -> EncodeQuota.
std::string QuotaPrefix();
std::string QuotaRecordKey(const QuotaKey& key);
bool ParseQuotaRecordKey(std::string_view k, QuotaKey* key);
// The sequence number of a client's last statistics flush: "V" client8.
std::string FlushMarkKey(uint64_t client);
// Parents of a file with several names: "A" ino8 "L" parent8 -> names (int64).
std::string ParentPrefix(Ino ino);
std::string ParentKey(Ino ino, Ino parent);
// A slice replaced by compaction while the trash is on: deleted not before
// `not_before` (unix seconds), then moved to the "G" queue.
std::string DelayedSlicePrefix();
std::string DelayedSliceKey(int64_t not_before, uint64_t id, uint32_t size);
}  // namespace keys

// Attributes: version byte 1, then fixed little-endian fields.
std::string EncodeAttr(const Attr& a);
Status DecodeAttr(std::string_view v, Attr* a);
// Directory entry value: type (S_IFMT >> 12) byte + ino (8 bytes BE).
std::string EncodeEntry(Ino ino, uint32_t type);
Status DecodeEntry(std::string_view v, Ino* ino, uint32_t* type);

// length, space, inodes: three int64 little-endian.
std::string EncodeDirStat(const DirStat& d);
DirStat DecodeDirStat(std::string_view v);

// max_space, max_inodes, used_space, used_inodes: four int64 little-endian.
std::string EncodeQuota(const Quota& q);
Quota DecodeQuota(std::string_view v);

std::string EncodeI64(int64_t v);
int64_t DecodeI64(std::string_view v);

std::string EncodeSession(const SessionInfo& s);
Status DecodeSession(std::string_view v, SessionInfo* s);

// A lock held by (sid, owner): flock uses the whole range.
struct LockRecord {
  uint64_t sid = 0;
  uint64_t owner = 0;
  uint32_t type = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t pid = 0;
};
std::string EncodeLocks(const std::vector<LockRecord>& locks);
std::vector<LockRecord> DecodeLocks(std::string_view v);

}  // namespace tessera::meta
