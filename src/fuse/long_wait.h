// Waits of a request handler that last as long as something else takes to
// happen: a blocking lock (until its holder lets go), a read of .accesslog
// (until other requests are logged). The request loops serve requests with a
// bounded set of threads (worker_loop.h; each CPU's queue of uring_loop.h);
// if such waits took all of them, the request that would end the waits (the
// unlock, the requests to log) would find none: a deadlock. So a handler
// marks the wait with a LongWait, and the loop serving it keeps threads free
// of such waits (by starting more).
#pragma once

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

}  // namespace tessera::fuse
