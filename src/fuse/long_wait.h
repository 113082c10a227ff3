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
  void (*begin)(void* arg, uint64_t ino) = nullptr;  // ino: what the request waits on
  void (*end)(void* arg) = nullptr;
  void* arg = nullptr;
};
void SetLongWaitHooks(const LongWaitHooks* hooks);

// Marks a long wait for its lifetime (none when `waits` is false, e.g. a
// lock request that does not block) on inode `ino`, a file its caller has
// open (so the kernel knows the inode while the wait lasts).
class LongWait {
 public:
  LongWait(bool waits, uint64_t ino);
  ~LongWait();
  LongWait(const LongWait&) = delete;
  LongWait& operator=(const LongWait&) = delete;

 private:
  const LongWaitHooks* hooks_ = nullptr;
};

// Whether a request's caller has a signal pending that it does not block,
// read from /proc/TID/status: what makes the kernel send FUSE_INTERRUPT for
// its request. A long wait checks this besides libfuse's interrupted flag,
// because that interrupt does not always come. Over io_uring (Linux 6.14 to
// 6.18) the kernel sends none for a signal that arrives after the request
// went to a ring entry and before the entry's thread took it (it marks the
// request sent without looking for an earlier interrupt, unlike a read of
// /dev/fuse, which does), and an interrupt that libfuse answers "again
// later" (EAGAIN: it came before its request) is not sent again for a
// request of a ring. Found when killed readers of .accesslog on an
// --io-uring mount waited for ever (tests/e2e/uring_suite.sh).
//
// A signal for the calling thread (SigPnd; a signal that ends the process
// puts SIGKILL there in every thread) counts at once. One for the process
// (ShdPnd) counts at once if the process has one thread; else only if it is
// still pending at the next look, since another thread may take it (then
// the kernel interrupts that thread, not this one). Says no when it cannot
// tell: tid 0 (a caller outside the mount's PID namespace), no such thread,
// a /proc that is not of this process's PID namespace, or one mounted with
// hidepid that hides the caller.
class CallerSignals {
 public:
  explicit CallerSignals(uint32_t tid) : tid_(tid) {}
  // Reads the caller's status: call it at most every 100 ms or so.
  bool Pending();

 private:
  const uint32_t tid_;
  uint64_t process_seen_ = 0;  // the process's pending signals at the last look
};

}  // namespace tessera::fuse
