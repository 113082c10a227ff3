#include "meta/encoding.h"

#include <algorithm>

#include <sys/stat.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "meta/json_fields.h"

namespace tessera::meta {

namespace keys {
namespace {
std::string InodeKey(Ino ino, char kind) {
  std::string k = "A";
  kv::AppendU64BE(&k, ino);
  k.push_back(kind);
  return k;
}
std::string SidKey(const char* prefix, uint64_t sid) {
  std::string k = prefix;
  kv::AppendU64BE(&k, sid);
  return k;
}
}  // namespace

std::string CounterKey(std::string_view name) { return "C" + std::string(name); }
std::string JobKey(std::string_view name) { return std::string("J").append(name); }
std::string WatcherPrefix() { return "W"; }
std::string WatcherKey(std::string_view origin) { return WatcherPrefix().append(origin); }
std::string DelayedSlicePrefix() { return "K"; }
std::string DelayedSliceKey(int64_t not_before, uint64_t id, uint32_t size) {
  std::string k = DelayedSlicePrefix();
  kv::AppendU64BE(&k, uint64_t(std::max<int64_t>(not_before, 0)));
  kv::AppendU64BE(&k, id);
  kv::AppendU32BE(&k, size);
  return k;
}
std::string AttrKey(Ino ino) { return InodeKey(ino, 'I'); }
std::string EntryPrefix(Ino parent) { return InodeKey(parent, 'D'); }
std::string EntryKey(Ino parent, std::string_view name) { return EntryPrefix(parent).append(name); }
std::string ChunkPrefix(Ino ino) { return InodeKey(ino, 'C'); }
std::string ChunkKey(Ino ino, uint32_t index) {
  std::string k = ChunkPrefix(ino);
  kv::AppendU32BE(&k, index);
  return k;
}
std::string SymlinkKey(Ino ino) { return InodeKey(ino, 'S'); }
std::string XattrPrefix(Ino ino) { return InodeKey(ino, 'X'); }
std::string XattrKey(Ino ino, std::string_view name) { return XattrPrefix(ino).append(name); }
std::string FlockKey(Ino ino) { return InodeKey(ino, 'F'); }
std::string PlockKey(Ino ino) { return InodeKey(ino, 'P'); }
std::string ParentPrefix(Ino ino) { return InodeKey(ino, 'L'); }
std::string ParentKey(Ino ino, Ino parent) {
  std::string k = ParentPrefix(ino);
  kv::AppendU64BE(&k, parent);
  return k;
}
std::string DirStatPrefix() { return "U"; }
std::string DirStatKey(Ino dir) { return SidKey("U", dir); }
std::string FlushMarkKey(uint64_t client) { return SidKey("V", client); }
std::string SliceRefPrefix() { return "R"; }
std::string SliceRefKey(uint64_t id, uint32_t size) {
  std::string k = SidKey("R", id);
  kv::AppendU32BE(&k, size);
  return k;
}
std::string QuotaPrefix() { return "Q"; }
std::string QuotaRecordKey(const QuotaKey& key) {
  std::string k = "Q";
  k.push_back(char(key.kind));
  kv::AppendU64BE(&k, key.id);
  return k;
}
bool ParseQuotaRecordKey(std::string_view k, QuotaKey* key) {
  if (k.size() != 10 || k[0] != 'Q' || k[1] < 1 || k[1] > 3) return false;
  key->kind = QuotaKind(k[1]);
  key->id = kv::ReadU64BE(k.substr(2));
  return true;
}
std::string DeletedPrefix() { return "D"; }
std::string DeletedKey(Ino ino) { return SidKey("D", ino); }
std::string SliceGcPrefix() { return "G"; }
std::string SliceGcKey(uint64_t id, uint32_t size) {
  std::string k = SidKey("G", id);
  kv::AppendU32BE(&k, size);
  return k;
}
std::string SessionPrefix() { return "SE"; }
std::string SessionKey(uint64_t sid) { return SidKey("SE", sid); }
std::string HeartbeatKey(uint64_t sid) { return SidKey("SH", sid); }
std::string SustainedPrefix(uint64_t sid) { return SidKey("SS", sid); }
std::string SustainedKey(uint64_t sid, Ino ino) {
  std::string k = SustainedPrefix(sid);
  kv::AppendU64BE(&k, ino);
  return k;
}
std::string SessionLockPrefix(uint64_t sid) { return SidKey("SL", sid); }
std::string SessionLockKey(uint64_t sid, Ino ino) {
  std::string k = SessionLockPrefix(sid);
  kv::AppendU64BE(&k, ino);
  return k;
}
}  // namespace keys

namespace {
constexpr uint8_t kAttrVersion = 1;

template <typename T>
void Put(std::string* s, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));  // little-endian hosts only (x86-64, arm64)
  s->append(buf, sizeof(T));
}
template <typename T>
T Take(std::string_view* v) {
  T out;
  std::memcpy(&out, v->data(), sizeof(T));
  v->remove_prefix(sizeof(T));
  return out;
}
constexpr size_t kAttrSize = 1 + 4 * 5 + 8 + 8 + 3 * (8 + 4);
}  // namespace

std::string EncodeAttr(const Attr& a) {
  std::string s;
  s.reserve(kAttrSize);
  s.push_back(char(kAttrVersion));
  Put(&s, a.mode);
  Put(&s, a.uid);
  Put(&s, a.gid);
  Put(&s, a.nlink);
  Put(&s, a.rdev);
  Put(&s, a.length);
  Put(&s, a.parent);
  for (const Timespec* t : {&a.atime, &a.mtime, &a.ctime}) {
    Put(&s, t->sec);
    Put(&s, t->nsec);
  }
  return s;
}

Status DecodeAttr(std::string_view v, Attr* a) {
  if (v.size() < kAttrSize || uint8_t(v[0]) != kAttrVersion) return Status::Err(EIO, "bad inode attribute record");
  v.remove_prefix(1);
  a->mode = Take<uint32_t>(&v);
  a->uid = Take<uint32_t>(&v);
  a->gid = Take<uint32_t>(&v);
  a->nlink = Take<uint32_t>(&v);
  a->rdev = Take<uint32_t>(&v);
  a->length = Take<uint64_t>(&v);
  a->parent = Take<uint64_t>(&v);
  for (Timespec* t : {&a->atime, &a->mtime, &a->ctime}) {
    t->sec = Take<int64_t>(&v);
    t->nsec = Take<uint32_t>(&v);
  }
  return Status::OK();
}

std::string EncodeEntry(Ino ino, uint32_t type) {
  std::string s(1, char((type & S_IFMT) >> 12));
  kv::AppendU64BE(&s, ino);
  return s;
}

Status DecodeEntry(std::string_view v, Ino* ino, uint32_t* type) {
  // The type byte is S_IFMT >> 12: anything above 0xF is not a file type.
  if (v.size() != 9 || uint8_t(v[0]) > (S_IFMT >> 12)) return Status::Err(EIO, "bad directory entry record");
  *type = uint32_t(uint8_t(v[0])) << 12;
  *ino = kv::ReadU64BE(v.substr(1));
  return Status::OK();
}

std::string EncodeI64(int64_t v) {
  std::string s;
  Put(&s, v);
  return s;
}

std::string EncodeQuota(const Quota& q) {
  std::string s;
  Put(&s, q.max_space);
  Put(&s, q.max_inodes);
  Put(&s, q.used_space);
  Put(&s, q.used_inodes);
  return s;
}

Quota DecodeQuota(std::string_view v) {
  Quota q;
  if (v.size() < 32) return q;
  q.max_space = Take<int64_t>(&v);
  q.max_inodes = Take<int64_t>(&v);
  q.used_space = Take<int64_t>(&v);
  q.used_inodes = Take<int64_t>(&v);
  return q;
}

std::string EncodeDirStat(const DirStat& d) {
  std::string s;
  Put(&s, d.length);
  Put(&s, d.space);
  Put(&s, d.inodes);
  return s;
}

DirStat DecodeDirStat(std::string_view v) {
  DirStat d;
  if (v.size() < 24) return d;
  d.length = Take<int64_t>(&v);
  d.space = Take<int64_t>(&v);
  d.inodes = Take<int64_t>(&v);
  return d;
}

int64_t DecodeI64(std::string_view v) {
  if (v.size() < 8) return 0;
  return Take<int64_t>(&v);
}

std::string EncodeSession(const SessionInfo& s) {
  nlohmann::json j = {{"Sid", s.sid},   {"Host", s.host},       {"MountPoint", s.mount_point},
                      {"Pid", s.pid},   {"Version", s.version}, {"Started", s.heartbeat}};
  if (!s.pid_scope.empty()) j["PidScope"] = s.pid_scope;
  if (s.load.writeback)
    j["Writeback"] = {{"StagedBlocks", s.load.staged_blocks}, {"StagedBytes", s.load.staged_bytes}};
  // The strings are for display; one that is not UTF-8 (a mount point's name
  // can be any bytes) is stored with U+FFFD in place of its bad bytes rather
  // than make dump() throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status DecodeSession(std::string_view v, SessionInfo* s) {
  auto j = nlohmann::json::parse(v, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Err(EIO, "bad session record");
  SessionInfo out;
  using namespace json_fields;
  if (!Int(j, "Sid", &out.sid) || !Str(j, "Host", &out.host) || !Str(j, "MountPoint", &out.mount_point) ||
      !Int(j, "Pid", &out.pid) || !Str(j, "Version", &out.version) || !Int(j, "Started", &out.heartbeat))
    return Status::Err(EIO, "bad session record: a field of the wrong type or out of range");
  if (j.contains("PidScope") && !Str(j, "PidScope", &out.pid_scope))
    return Status::Err(EIO, "bad session record: a bad PidScope field");
  if (auto w = j.find("Writeback"); w != j.end()) {  // absent: off, or a client that does not report it
    out.load.writeback = true;
    if (!w->is_object() || !Int(*w, "StagedBlocks", &out.load.staged_blocks) ||
        !Int(*w, "StagedBytes", &out.load.staged_bytes))
      return Status::Err(EIO, "bad session record: a bad Writeback field");
  }
  *s = std::move(out);
  return Status::OK();
}

std::string EncodeLocks(const std::vector<LockRecord>& locks) {
  std::string s;
  for (const auto& l : locks) {
    Put(&s, l.sid);
    Put(&s, l.owner);
    Put(&s, l.type);
    Put(&s, l.start);
    Put(&s, l.end);
    Put(&s, l.pid);
  }
  return s;
}

std::vector<LockRecord> DecodeLocks(std::string_view v) {
  constexpr size_t kSize = 8 + 8 + 4 + 8 + 8 + 4;
  std::vector<LockRecord> out;
  while (v.size() >= kSize) {
    LockRecord l;
    l.sid = Take<uint64_t>(&v);
    l.owner = Take<uint64_t>(&v);
    l.type = Take<uint32_t>(&v);
    l.start = Take<uint64_t>(&v);
    l.end = Take<uint64_t>(&v);
    l.pid = Take<uint32_t>(&v);
    out.push_back(l);
  }
  return out;
}

}  // namespace tessera::meta
