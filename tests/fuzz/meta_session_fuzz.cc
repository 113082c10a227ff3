// Session records (JSON, docs/format.md), as KvMeta and RedisMeta store them
// and as `tessera status` / stale-session cleanup read them back.
//   1. The whole input as a stored record: DecodeSession must not throw or
//      hit undefined behaviour (numbers of the wrong type or out of range are
//      a bad record, EIO); what it accepts re-encodes and decodes the same.
//   2. A session built from the input (any bytes in its strings, e.g. a mount
//      point that is not UTF-8): EncodeSession must not throw, and its output
//      decodes back to it (strings byte for byte when they are UTF-8).
#include "fuzz_util.h"
#include "meta/encoding.h"

using namespace tessera;
using namespace tessera::meta;

namespace {

bool SameSession(const SessionInfo& a, const SessionInfo& b) {
  return a.sid == b.sid && a.host == b.host && a.mount_point == b.mount_point && a.pid == b.pid &&
         a.pid_scope == b.pid_scope && a.version == b.version && a.heartbeat == b.heartbeat;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw = fuzz::AsView(data, size);
  SessionInfo s;
  if (DecodeSession(raw, &s).ok()) {
    const std::string e = EncodeSession(s);
    SessionInfo again;
    FUZZ_CHECK(DecodeSession(e, &again).ok());
    FUZZ_CHECK(SameSession(s, again));
  }

  fuzz::Input in(data, size);
  SessionInfo t;
  t.sid = in.Take<uint64_t>();
  t.pid = in.Take<uint32_t>();
  t.heartbeat = in.Take<int64_t>();
  t.host = std::string(in.Str());
  t.mount_point = std::string(in.Str());
  t.version = std::string(in.Rest());
  const std::string e = EncodeSession(t);
  SessionInfo back;
  FUZZ_CHECK(DecodeSession(e, &back).ok());
  FUZZ_CHECK(back.sid == t.sid && back.pid == t.pid && back.heartbeat == t.heartbeat);
  if (fuzz::ValidUtf8(t.host)) FUZZ_CHECK(back.host == t.host);
  if (fuzz::ValidUtf8(t.mount_point)) FUZZ_CHECK(back.mount_point == t.mount_point);
  if (fuzz::ValidUtf8(t.version)) FUZZ_CHECK(back.version == t.version);
  return 0;
}
