#include "fuse/long_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace tessera::fuse {

namespace {
thread_local const LongWaitHooks* t_hooks = nullptr;
}  // namespace

void SetLongWaitHooks(const LongWaitHooks* hooks) { t_hooks = hooks; }

LongWait::LongWait(bool waits, uint64_t ino) {
  if (!waits || t_hooks == nullptr || t_hooks->begin == nullptr) return;
  hooks_ = t_hooks;
  hooks_->begin(hooks_->arg, ino);
}

LongWait::~LongWait() {
  if (hooks_ != nullptr && hooks_->end != nullptr) hooks_->end(hooks_->arg);
}

namespace {

// The number after "\nNAME:" in a /proc status text, in `base`; false
// if absent or not ended by a newline.
template <typename T>
bool Field(const std::string& status, std::string_view name, int base, T* out) {
  const size_t at = status.find("\n" + std::string(name) + ":");
  if (at == std::string::npos) return false;
  const size_t from = at + name.size() + 2;
  const size_t eol = status.find('\n', from);
  if (eol == std::string::npos) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(status.c_str() + from, &end, base);
  if (end == status.c_str() + from) return false;
  *out = T(v);
  return true;
}

// Whether /proc is this process's PID namespace's (thread numbers in FUSE
// requests are in the mount's namespace: the mounting process's).
bool ProcIsOurs() {
  static const bool ours = [] {
    char buf[32] = {};
    const ssize_t n = ::readlink("/proc/self", buf, sizeof(buf) - 1);
    return n > 0 && std::strtol(buf, nullptr, 10) == long(::getpid());
  }();
  return ours;
}

bool ReadAll(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  ssize_t r;
  while ((r = ::read(fd, buf, sizeof(buf))) > 0) out->append(buf, size_t(r));
  ::close(fd);
  return r == 0;
}

}  // namespace

bool CallerSignals::Pending() {
  if (tid_ == 0 || !ProcIsOurs()) return false;
  std::string status;
  if (!ReadAll("/proc/" + std::to_string(tid_) + "/status", &status)) return false;
  uint64_t own = 0, process = 0, blocked = 0;
  unsigned threads = 0;
  if (!Field(status, "SigPnd", 16, &own) || !Field(status, "ShdPnd", 16, &process) ||
      !Field(status, "SigBlk", 16, &blocked) || !Field(status, "Threads", 10, &threads))
    return false;
  own &= ~blocked;
  process &= ~blocked;
  const bool still = (process & process_seen_) != 0;
  process_seen_ = process;
  return own != 0 || (process != 0 && threads == 1) || still;
}

}  // namespace tessera::fuse
