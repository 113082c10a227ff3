// Little-endian integers in byte buffers (file headers of the disk cache and
// the writeback staging packs; docs/format.md).
#pragma once

#include <cstdint>

namespace tessera {

inline void PutLE(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = char((v >> (8 * i)) & 0xff);
}

inline uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

}  // namespace tessera
