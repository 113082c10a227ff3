#include "chunk/compression.h"

#include <lz4.h>
#include <zstd.h>

#include <limits>

namespace tessera::chunk {
namespace {

constexpr int kZstdLevel = 1;

Status Corrupt(const std::string& key, std::string_view algo, const std::string& why) {
  return Status::Err(EIO, "block " + key + ": cannot " + std::string(algo) + "-decompress: " + why);
}

}  // namespace

Result<Compression> ParseCompression(std::string_view name) {
  if (name == "none") return Compression::kNone;
  if (name == "lz4") return Compression::kLz4;
  if (name == "zstd") return Compression::kZstd;
  return Status::Err(EINVAL, "unknown compression '" + std::string(name) + "' (none, lz4, zstd)");
}

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kLz4:
      return "lz4";
    case Compression::kZstd:
      return "zstd";
  }
  return "unknown";
}

Result<std::string> CompressBlock(Compression c, std::string_view block) {
  switch (c) {
    case Compression::kNone:
      return std::string(block);
    case Compression::kLz4: {
      if (block.size() > size_t(LZ4_MAX_INPUT_SIZE)) return Status::Err(EINVAL, "block too large for lz4");
      const int src_len = int(block.size());
      std::string out(size_t(LZ4_compressBound(src_len)), '\0');
      const int n = LZ4_compress_default(block.data(), out.data(), src_len, int(out.size()));
      if (n <= 0) return Status::Err(EIO, "lz4 compression failed");
      out.resize(size_t(n));
      return out;
    }
    case Compression::kZstd: {
      std::string out(ZSTD_compressBound(block.size()), '\0');
      const size_t n = ZSTD_compress(out.data(), out.size(), block.data(), block.size(), kZstdLevel);
      if (ZSTD_isError(n)) return Status::Err(EIO, std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
      out.resize(n);
      return out;
    }
  }
  return Status::Err(EINVAL, "unknown compression");
}

Result<std::string> DecompressBlock(Compression c, std::string_view body, uint32_t raw_len,
                                    const std::string& key) {
  switch (c) {
    case Compression::kNone:
      if (body.size() != raw_len) {
        return Status::Err(EIO, "block " + key + " has " + std::to_string(body.size()) + " bytes, want " +
                                    std::to_string(raw_len));
      }
      return std::string(body);
    case Compression::kLz4: {
      if (body.size() > size_t(std::numeric_limits<int>::max()) || raw_len > uint32_t(LZ4_MAX_INPUT_SIZE)) {
        return Corrupt(key, "lz4", "sizes out of range");
      }
      std::string out(raw_len, '\0');
      // Safe against malformed input: never writes past raw_len bytes.
      const int n = LZ4_decompress_safe(body.data(), out.data(), int(body.size()), int(raw_len));
      if (n < 0) return Corrupt(key, "lz4", "malformed data");
      if (uint32_t(n) != raw_len) {
        return Corrupt(key, "lz4", "decoded " + std::to_string(n) + " bytes, want " + std::to_string(raw_len));
      }
      return out;
    }
    case Compression::kZstd: {
      const unsigned long long content = ZSTD_getFrameContentSize(body.data(), body.size());
      if (content == ZSTD_CONTENTSIZE_ERROR) return Corrupt(key, "zstd", "not a zstd frame");
      if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != raw_len) {
        return Corrupt(key, "zstd",
                       "frame holds " + std::to_string(content) + " bytes, want " + std::to_string(raw_len));
      }
      std::string out(raw_len, '\0');
      const size_t n = ZSTD_decompress(out.data(), out.size(), body.data(), body.size());
      if (ZSTD_isError(n)) return Corrupt(key, "zstd", ZSTD_getErrorName(n));
      if (n != raw_len) {
        return Corrupt(key, "zstd", "decoded " + std::to_string(n) + " bytes, want " + std::to_string(raw_len));
      }
      return out;
    }
  }
  return Status::Err(EINVAL, "unknown compression");
}

}  // namespace tessera::chunk
