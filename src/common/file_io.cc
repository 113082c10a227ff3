#include "common/file_io.h"

#include <unistd.h>

#include <cerrno>

namespace tessera {

Status PreadFull(int fd, char* buf, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t got = ::pread(fd, buf, n, off_t(off));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::Err(errno, "read");
    }
    if (got == 0) return Status::Err(EIO, "unexpected end of file");
    buf += got;
    n -= size_t(got);
    off += uint64_t(got);
  }
  return Status::OK();
}

}  // namespace tessera
