#include "fuse/worker_loop.h"

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "fuse/long_wait.h"

namespace tessera::fuse {

namespace {

// The request's opcode, 0 when its header is not in memory.
uint32_t Opcode(const fuse_buf& buf) {
  if ((buf.flags & FUSE_BUF_IS_FD) || buf.mem == nullptr || buf.size < sizeof(fuse_in_header)) return 0;
  return static_cast<const fuse_in_header*>(buf.mem)->opcode;
}
// A FORGET asks for no reply: a worker taking the last reader's place for
// one wakes a parked worker but starts no new thread (a burst of them would
// otherwise start threads, as libfuse also avoids).
bool IsForget(const fuse_buf& buf) { return Opcode(buf) == FUSE_FORGET || Opcode(buf) == FUSE_BATCH_FORGET; }

// Workers in a long wait (long_wait.h: a blocking lock, a read of
// .accesslog) do not count against max_workers, up to this many: else 32
// lock waiters would leave no worker for the request that releases the lock.
constexpr unsigned kMaxLongWaits = 4096;

class WorkerLoop {
 public:
  WorkerLoop(fuse_session* se, const WorkerLoopOptions& opts)
      : se_(se), max_workers_(opts.max_workers > 0 ? opts.max_workers : 1),
        readers_target_(opts.readers > 0 ? opts.readers : 1), drop_interrupts_(opts.drop_interrupts) {
    sem_init(&finished_, 0, 0);
    long_wait_hooks_.begin = [](void* self, uint64_t) { static_cast<WorkerLoop*>(self)->LongWaitStarts(); };
    long_wait_hooks_.end = [](void* self) { static_cast<WorkerLoop*>(self)->long_waits_.fetch_sub(1); };
    long_wait_hooks_.arg = this;
  }
  ~WorkerLoop() { sem_destroy(&finished_); }
  WorkerLoop(const WorkerLoop&) = delete;
  WorkerLoop& operator=(const WorkerLoop&) = delete;

  int Run();

 private:
  struct Worker {
    WorkerLoop* loop = nullptr;
    pthread_t thread{};
    fuse_buf buf{};  // its memory comes from libfuse's first receive; freed once joined
    std::condition_variable cv;
    bool woken = false;  // guarded by loop->mu_: called back to reading (and counted there)
  };

  static void* Entry(void* arg);
  void Work(Worker* w);
  // A new worker, counted as a reader. False if the thread could not start.
  bool StartWorkerLocked();
  // No worker is left reading: the most recently parked one becomes a
  // reader, or (may_start) a new worker while there is room.
  void CallReaderLocked(bool may_start);
  // This worker's request starts a long wait: it leaves the count of
  // max_workers, and if no worker is reading, one is called (it may be the
  // last one that could have served the request ending the wait).
  void LongWaitStarts() {
    long_waits_.fetch_add(1);
    if (reading_.load() > 0) return;
    std::lock_guard<std::mutex> g(mu_);
    CallReaderLocked(/*may_start=*/true);
  }

  fuse_session* const se_;
  const unsigned max_workers_;
  const unsigned readers_target_;
  const bool drop_interrupts_;
  sem_t finished_;  // posted by a worker that saw the session end

  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;  // guarded by mu_; each lives until Run joins it
  std::vector<Worker*> parked_;                   // guarded by mu_; the most recently parked last
  // Workers reading or about to: changed without mu_ on the way of every
  // request (a lock there would make the workers of two CPUs wait on each
  // other), under it when a worker parks or is woken.
  std::atomic<unsigned> reading_{0};
  std::atomic<unsigned> long_waits_{0};  // workers in a LongWait
  std::atomic<bool> exit_{false};        // set under mu_
  LongWaitHooks long_wait_hooks_;
  int error_ = 0;                  // guarded by mu_: what ended the session, if an error
  uint64_t start_failures_ = 0;    // guarded by mu_: workers that could not be started
  std::chrono::steady_clock::time_point last_start_warning_;  // guarded by mu_
};

// Entry and Work are the only instrumented frames on a worker's stack when
// Run cancels it in fuse_session_receive_buf. AddressSanitizer does not
// clear the redzones of frames a cancellation unwinds, and its own cleanup
// at thread exit then trips over them (a false stack-buffer-overflow), so
// these two frames go uninstrumented.
#define TESSERA_CANCELLABLE_FRAME __attribute__((no_sanitize_address))

TESSERA_CANCELLABLE_FRAME void* WorkerLoop::Entry(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  NameThisThread("ts-fuse");
  w->loop->Work(w);
  return nullptr;
}

bool WorkerLoop::StartWorkerLocked() {
  auto w = std::make_unique<Worker>();
  w->loop = this;
  // Signals that end the mount go to the thread in Run (libfuse's
  // handlers), whose wait they interrupt; workers never take them.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  // Counted before it runs: its first request must not take the count
  // below zero (and so call no reader) before this thread counts it.
  reading_.fetch_add(1);
  const int rc = pthread_create(&w->thread, nullptr, &WorkerLoop::Entry, w.get());
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    reading_.fetch_sub(1);
    // The request waits for a worker that is busy now: slower, not lost.
    // Under a thread limit every request may try again, so each failure is
    // counted and the warning repeats at most once a minute.
    static metrics::Counter* const failures =
        metrics::NewCounter("tessera_fuse_worker_start_failures_total",
                            "FUSE request workers that could not be started (the request waited for a busy one)");
    failures->Inc();
    const auto now = std::chrono::steady_clock::now();
    if (start_failures_++ == 0 || now - last_start_warning_ >= std::chrono::minutes(1)) {
      LOG_WARN("FUSE: cannot start another request worker ({} running, {} failed so far): {}", workers_.size(),
               start_failures_, std::strerror(rc));
      last_start_warning_ = now;
    }
    return false;
  }
  workers_.push_back(std::move(w));
  return true;
}

void WorkerLoop::CallReaderLocked(bool may_start) {
  if (reading_.load() > 0 || exit_.load()) return;  // another worker came back meanwhile
  if (!parked_.empty()) {
    Worker* w = parked_.back();
    parked_.pop_back();
    w->woken = true;
    reading_.fetch_add(1);
    w->cv.notify_one();
    return;
  }
  if (may_start && workers_.size() < max_workers_ + std::min(long_waits_.load(), kMaxLongWaits))
    (void)StartWorkerLocked();
}

TESSERA_CANCELLABLE_FRAME void WorkerLoop::Work(Worker* w) {
  SetLongWaitHooks(&long_wait_hooks_);
  while (!fuse_session_exited(se_)) {
    // Cancelled only while waiting for a request (Run, at the end): never
    // in the middle of answering one.
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
    const int res = fuse_session_receive_buf(se_, &w->buf);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
    if (res == -EINTR) continue;
    if (res <= 0) {  // 0: unmounted (libfuse ended the session on ENODEV)
      if (res < 0) {
        std::lock_guard<std::mutex> g(mu_);
        if (error_ == 0) error_ = res;
        fuse_session_exit(se_);
      }
      break;
    }
    if (exit_.load()) break;
    // The last reader took a request: another must wait for the next one.
    if (reading_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> g(mu_);
      CallReaderLocked(/*may_start=*/!IsForget(w->buf));
    }
    if (!drop_interrupts_ || Opcode(w->buf) != FUSE_INTERRUPT) fuse_session_process_buf(se_, &w->buf);
    if (exit_.load()) break;
    if (reading_.load() < readers_target_) {
      reading_.fetch_add(1);
      continue;
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (exit_.load()) break;
    if (reading_.load() < readers_target_) {
      reading_.fetch_add(1);
      continue;
    }
    parked_.push_back(w);
    w->cv.wait(lk, [&] { return w->woken || exit_.load(); });
    if (!w->woken) break;  // the loop ends
    w->woken = false;      // counted as a reader by whoever woke it
  }
  sem_post(&finished_);
}

int WorkerLoop::Run() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!StartWorkerLocked()) return -EAGAIN;
  }
  // The signals that end the mount interrupt the wait (EINTR) when they
  // land on this thread, as the kernel prefers; the timeout notices one that
  // another thread took.
  while (!fuse_session_exited(se_)) {
    timespec until;  // on the monotonic clock: a clock step cannot stretch the poll
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += 1;
    (void)sem_clockwait(&finished_, CLOCK_MONOTONIC, &until);
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    exit_.store(true);
    // Workers waiting for a request are cancelled there; one answering a
    // request finishes it first (cancellation is off meanwhile) and then
    // sees exit_, as a parked one does once woken.
    for (auto& w : workers_) pthread_cancel(w->thread);
    for (Worker* p : parked_) p->cv.notify_one();
  }
  for (auto& w : workers_) {  // no worker is added once exit_ is set
    pthread_join(w->thread, nullptr);
    std::free(w->buf.mem);
  }
  const int err = error_;
  fuse_session_reset(se_);
  return err;
}

}  // namespace

int RunWorkerLoop(fuse_session* se, const WorkerLoopOptions& opts) {
  WorkerLoop loop(se, opts);
  return loop.Run();
}

}  // namespace tessera::fuse
