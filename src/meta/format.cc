#include "meta/format.h"

#include <nlohmann/json.hpp>
#include <random>

#include <fmt/format.h>

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
  try {
    f.version = j.value("Version", 0);
    f.name = j.value("Name", "");
    f.uuid = j.value("UUID", "");
    f.storage = j.value("Storage", "file");
    f.bucket = j.value("Bucket", "");
    f.region = j.value("Region", "");
    f.block_size = j.value("BlockSize", 4u << 20);
    f.compression = j.value("Compression", "none");
    f.trash_days = j.value("TrashDays", 0);
    f.capacity = j.value("Capacity", uint64_t{0});
    f.inodes = j.value("Inodes", uint64_t{0});
  } catch (const std::exception& e) {
    return Status::Err(EIO, std::string("volume settings record: ") + e.what());
  }
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
