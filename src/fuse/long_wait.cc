#include "fuse/long_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tessera::fuse {

namespace {
thread_local const LongWaitHooks* t_hooks = nullptr;
}  // namespace

void SetLongWaitHooks(const LongWaitHooks* hooks) { t_hooks = hooks; }

LongWait::LongWait(bool waits) {
  if (!waits || t_hooks == nullptr || t_hooks->begin == nullptr) return;
  hooks_ = t_hooks;
  hooks_->begin(hooks_->arg);
}

LongWait::~LongWait() {
  if (hooks_ != nullptr && hooks_->end != nullptr) hooks_->end(hooks_->arg);
}

namespace {
// The hexadecimal mask after "\nNAME:" in a /proc status text (0 if absent).
uint64_t Mask(const std::string& status, const char* name) {
  const size_t at = status.find(std::string("\n") + name + ":");
  if (at == std::string::npos) return 0;
  return std::strtoull(status.c_str() + at + std::strlen(name) + 2, nullptr, 16);
}
}  // namespace

bool CallerSignalled(uint32_t tid) {
  if (tid == 0) return false;
  const std::string path = "/proc/" + std::to_string(tid) + "/status";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string status(4096, '\0');
  size_t n = 0;
  for (ssize_t r; n < status.size() && (r = ::read(fd, status.data() + n, status.size() - n)) > 0;) n += size_t(r);
  ::close(fd);
  status.resize(n);
  // SigPnd: the thread's own signals. ShdPnd: the process's (kill(2)),
  // which the caller takes only if it is the process's one thread (else
  // another may, and the kernel leaves this one waiting). A signal that ends
  // the process also puts SIGKILL in every thread's SigPnd.
  uint64_t pending = Mask(status, "SigPnd");
  if (const size_t at = status.find("\nThreads:"); at != std::string::npos && std::atoi(status.c_str() + at + 9) == 1)
    pending |= Mask(status, "ShdPnd");
  return (pending & ~Mask(status, "SigBlk")) != 0;
}

}  // namespace tessera::fuse
