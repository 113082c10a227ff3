// The volume settings record (key "setting", JSON; docs/format.md), read by
// every mount and CLI command: Format::FromJson must not throw or hit
// undefined behaviour whatever the stored bytes (a number of the wrong type
// or range is a bad record, EIO); what it accepts is a usable format (a known
// version, a block size not 0) that survives ToJson/FromJson unchanged.
#include "fuzz_util.h"
#include "meta/format.h"

using namespace tessera;
using namespace tessera::meta;

namespace {

bool SameFormat(const Format& a, const Format& b) {
  return a.version == b.version && a.name == b.name && a.uuid == b.uuid && a.storage == b.storage &&
         a.bucket == b.bucket && a.region == b.region && a.block_size == b.block_size &&
         a.compression == b.compression && a.trash_days == b.trash_days && a.capacity == b.capacity &&
         a.inodes == b.inodes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Format> f = Format::FromJson(text);
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == EIO || f.status().code() == EPROTO);
    return 0;
  }
  FUZZ_CHECK(f->version <= kFormatVersion);
  FUZZ_CHECK(f->block_size != 0);
  const std::string json = f->ToJson();
  Result<Format> again = Format::FromJson(json);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameFormat(*f, *again));
  return 0;
}
