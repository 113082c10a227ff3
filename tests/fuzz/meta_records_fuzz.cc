// The fixed-layout metadata records of KvMeta/RedisMeta (docs/format.md):
// inode attributes (DecodeAttr), directory entries (DecodeEntry), int64
// counters (DecodeI64) and lock lists (DecodeLocks), each decoded from the
// whole input. Invariants: a record is accepted only in its documented shape,
// what is accepted re-encodes to the bytes it came from, and decoded values
// are within their bounds (a directory entry's type fits in S_IFMT).
#include <sys/stat.h>

#include "fuzz_util.h"
#include "meta/encoding.h"

using namespace tessera;
using namespace tessera::meta;

namespace {

constexpr size_t kAttrSize = 1 + 4 * 5 + 8 + 8 + 3 * (8 + 4);
constexpr size_t kLockSize = 8 + 8 + 4 + 8 + 8 + 4;

bool SameAttr(const Attr& a, const Attr& b) {
  return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.nlink == b.nlink && a.rdev == b.rdev &&
         a.length == b.length && a.parent == b.parent && a.atime == b.atime && a.mtime == b.mtime &&
         a.ctime == b.ctime;
}

void CheckAttr(std::string_view v) {
  Attr a;
  const bool ok = DecodeAttr(v, &a).ok();
  FUZZ_CHECK(ok == (v.size() >= kAttrSize && uint8_t(v[0]) == 1));
  if (!ok) return;
  const std::string e = EncodeAttr(a);
  FUZZ_CHECK(e.size() == kAttrSize);
  FUZZ_CHECK(e == v.substr(0, kAttrSize));  // trailing bytes (a later version's fields) are ignored
  Attr b;
  FUZZ_CHECK(DecodeAttr(e, &b).ok() && SameAttr(a, b));
}

void CheckEntry(std::string_view v) {
  Ino ino = 0;
  uint32_t type = 0;
  if (!DecodeEntry(v, &ino, &type).ok()) return;
  FUZZ_CHECK(v.size() == 9);
  FUZZ_CHECK((type & ~uint32_t(S_IFMT)) == 0);  // a file type, nothing else
  FUZZ_CHECK(EncodeEntry(ino, type) == v);
  Ino ino2 = 0;
  uint32_t type2 = 0;
  FUZZ_CHECK(DecodeEntry(EncodeEntry(ino, type), &ino2, &type2).ok() && ino2 == ino && type2 == type);
}

void CheckI64(std::string_view v) {
  const int64_t n = DecodeI64(v);
  if (v.size() < 8) {
    FUZZ_CHECK(n == 0);
    return;
  }
  FUZZ_CHECK(EncodeI64(n) == v.substr(0, 8));
  FUZZ_CHECK(DecodeI64(EncodeI64(n)) == n);
}

void CheckLocks(std::string_view v) {
  const std::vector<LockRecord> locks = DecodeLocks(v);
  FUZZ_CHECK(locks.size() == v.size() / kLockSize);  // a torn record at the end is dropped
  const std::string e = EncodeLocks(locks);
  FUZZ_CHECK(e == v.substr(0, locks.size() * kLockSize));
  const std::vector<LockRecord> again = DecodeLocks(e);
  FUZZ_CHECK(again.size() == locks.size());
  for (size_t i = 0; i < locks.size(); ++i) {
    const LockRecord &x = locks[i], &y = again[i];
    FUZZ_CHECK(x.sid == y.sid && x.owner == y.owner && x.type == y.type && x.start == y.start && x.end == y.end &&
               x.pid == y.pid);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view v = fuzz::AsView(data, size);
  CheckAttr(v);
  CheckEntry(v);
  CheckI64(v);
  CheckLocks(v);
  // The keys these records live under decode back to their parts.
  fuzz::Input in(data, size);
  const uint64_t a = in.Take<uint64_t>(), b = in.Take<uint64_t>();
  const uint32_t idx = in.Take<uint32_t>();
  const std::string ck = keys::ChunkKey(a, idx);
  FUZZ_CHECK(ck.size() == 14 && kv::ReadU64BE(ck.substr(1)) == a && ck[9] == 'C' && kv::ReadU32BE(ck.substr(10)) == idx);
  const std::string gk = keys::SliceGcKey(a, idx);
  FUZZ_CHECK(gk.size() == 13 && kv::ReadU64BE(gk.substr(1)) == a && kv::ReadU32BE(gk.substr(9)) == idx);
  const std::string sk = keys::SustainedKey(a, b);
  FUZZ_CHECK(sk.starts_with(keys::SustainedPrefix(a)) && kv::ReadU64BE(sk.substr(sk.size() - 8)) == b);
  return 0;
}
