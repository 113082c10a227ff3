// The volume settings record (docs/format.md), stored under key "setting" as
// JSON. `version` is the layout version; readers refuse newer versions.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera::meta {

constexpr int kFormatVersion = 1;

struct Format {
  int version = kFormatVersion;
  std::string name;
  std::string uuid;
  std::string storage = "file";
  std::string bucket;
  std::string region;  // s3 only ("" = from the environment, else us-east-1); credentials are never stored
  uint32_t block_size = 4u << 20;  // bytes
  std::string compression = "none";
  int trash_days = 0;
  uint64_t capacity = 0;  // bytes, 0 = unlimited
  uint64_t inodes = 0;    // 0 = unlimited

  std::string ToJson() const;
  static Result<Format> FromJson(const std::string& json);
};

// A random RFC 4122 version-4 UUID.
std::string NewUuid();

}  // namespace tessera::meta
