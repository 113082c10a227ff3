// Per-block compression (docs/format.md, "Block encoding"). A volume picks one
// algorithm at format time; every block object is then the compressed bytes
// of the whole block, with no header: the uncompressed length is known from
// the object key (BlockKey's last field).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::chunk {

enum class Compression : uint8_t {
  kNone,  // the object is the raw block
  kLz4,   // LZ4 block format (LZ4_compress_default), no frame
  kZstd,  // one zstd frame, level 1
};

// "none" | "lz4" | "zstd"; EINVAL otherwise.
Result<Compression> ParseCompression(std::string_view name);
std::string_view CompressionName(Compression c);

// The object body for a block. Never fails for kNone; lz4/zstd fail only on
// an internal library error (EIO).
Result<std::string> CompressBlock(Compression c, std::string_view block);

// The block from an object body; the result is exactly raw_len bytes. A body
// that does not decode, or decodes to another length, is EIO naming `key`.
Result<std::string> DecompressBlock(Compression c, std::string_view body, uint32_t raw_len,
                                    const std::string& key);

}  // namespace tessera::chunk
