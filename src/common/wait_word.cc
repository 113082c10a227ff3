#include "common/wait_word.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace tessera {

namespace {
uint32_t* Addr(const std::atomic<uint32_t>& word) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint32_t>*>(&word));
}
}  // namespace

uint32_t WaitWord::WaitWhile(uint32_t old) const {
  for (;;) {
    const uint32_t now = word_.load(std::memory_order_acquire);
    if (now != old) return now;
    // Returns at once (EAGAIN) if the word no longer holds old; EINTR and
    // spurious wake-ups loop back to the check.
    syscall(SYS_futex, Addr(word_), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
  }
}

void WaitWord::StoreAndWake(uint32_t value) {
  word_.store(value, std::memory_order_release);
  syscall(SYS_futex, Addr(word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace tessera
