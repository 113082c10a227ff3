// Whole-buffer positional reads on file descriptors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace tessera {

// Reads exactly n bytes at offset off (retrying EINTR and short reads); EIO
// at end of file, errno otherwise.
Status PreadFull(int fd, char* buf, size_t n, uint64_t off);

}  // namespace tessera
