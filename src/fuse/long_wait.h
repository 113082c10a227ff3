// Waits of a request handler that last as long as something else takes to
// happen: a blocking lock (until its holder lets go), a read of .accesslog
// (until other requests are logged). The request loops serve requests with a
// bounded set of threads (worker_loop.h; each CPU's queue of uring_loop.h);
// if such waits took all of them, the request that would end the waits (the
// unlock, the requests to log) would find none: a deadlock. So a handler
// marks the wait with a LongWait, and the loop serving it keeps threads free
// of such waits (by starting more).
#pragma once

#include <cstdint>

namespace tessera::fuse {

// What the loop that serves this thread's requests does when one of them
// starts and ends a long wait; set on each of its threads.
struct LongWaitHooks {
  void (*begin)(void* arg) = nullptr;
  void (*end)(void* arg) = nullptr;
  void* arg = nullptr;
};
void SetLongWaitHooks(const LongWaitHooks* hooks);

// Marks a long wait for its lifetime (none when `waits` is false, e.g. a
// lock request that does not block).
class LongWait {
 public:
  explicit LongWait(bool waits = true);
  ~LongWait();
  LongWait(const LongWait&) = delete;
  LongWait& operator=(const LongWait&) = delete;

 private:
  const LongWaitHooks* hooks_ = nullptr;
};

// Whether thread `tid`, a request's caller, has a signal pending that it
// does not block (read from /proc/TID/status; one sent to its process counts
// if the process has no other thread to take it): what makes the kernel
// send FUSE_INTERRUPT for its request. A long wait checks this besides libfuse's
// interrupted flag, because that interrupt does not always come. Over
// io_uring the kernel sends none for a signal that arrives after the request
// went to a ring entry and before the entry's thread took it (it marks the
// request sent without looking for an earlier interrupt, as a read of
// /dev/fuse does), and an interrupt that libfuse answers "again later"
// (EAGAIN: it came before its request) is not sent again for a request of a
// ring. Found when killed readers of .accesslog on an --io-uring mount waited
// for ever (tests/e2e/uring_suite.sh). False when it cannot tell (tid 0: a
// caller outside the mount's PID namespace; no such thread).
bool CallerSignalled(uint32_t tid);

}  // namespace tessera::fuse
