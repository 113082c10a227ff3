#include "meta/format.h"

#include <nlohmann/json.hpp>
#include <random>

#include <fmt/format.h>

#include "meta/json_fields.h"

namespace tessera::meta {

std::string Format::ToJson() const {
  nlohmann::json j = {
      {"Version", version},   {"Name", name},           {"UUID", uuid},
      {"Storage", storage},   {"Bucket", bucket},       {"BlockSize", block_size},
      {"Compression", compression}, {"TrashDays", trash_days}, {"Capacity", capacity},
      {"Inodes", inodes},
  };
  if (!region.empty()) j["Region"] = region;
  return j.dump(2);
}

Result<Format> Format::FromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Err(EIO, "volume settings record is not valid JSON");
  Format f;
  f.version = 0;  // when the field is absent, as before (Format{} has the current version)
  using namespace json_fields;
  // Each field absent keeps its default; present, it must have its type and
  // range (a number of the wrong kind is a damaged record, not a cast).
  if (!Int(j, "Version", &f.version) || !Str(j, "Name", &f.name) || !Str(j, "UUID", &f.uuid) ||
      !Str(j, "Storage", &f.storage) || !Str(j, "Bucket", &f.bucket) || !Str(j, "Region", &f.region) ||
      !Int(j, "BlockSize", &f.block_size) || !Str(j, "Compression", &f.compression) ||
      !Int(j, "TrashDays", &f.trash_days) || !Int(j, "Capacity", &f.capacity) || !Int(j, "Inodes", &f.inodes))
    return Status::Err(EIO, "volume settings record: a field of the wrong type or out of range");
  if (f.version > kFormatVersion)
    return Status::Err(EPROTO, fmt::format("volume format version {} is newer than this client supports ({})",
                                           f.version, kFormatVersion));
  if (f.block_size == 0) return Status::Err(EIO, "volume settings record: block size 0");
  return f;
}

std::string NewUuid() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t(rd()) << 32) ^ rd());
  uint64_t a = gen(), b = gen();
  a = (a & ~0xF000ull) | 0x4000ull;                       // version 4
  b = (b & ~(0xC000000000000000ull)) | 0x8000000000000000ull;  // variant
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", uint32_t(a >> 32), uint32_t((a >> 16) & 0xFFFF),
                     uint32_t(a & 0xFFFF), uint32_t(b >> 48), b & 0xFFFFFFFFFFFFull);
}

}  // namespace tessera::meta
