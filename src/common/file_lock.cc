#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace tessera {

Result<int> LockFile(const std::string& path, const std::string& what, const std::string& dir, mode_t mode) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return Status::Err(errno, what + ": open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return Status::Err(EBUSY, what + " " + dir + " is in use by another client");
    return Status::Err(err, what + ": lock " + path);
  }
  return fd;
}

}  // namespace tessera
