// The mount's FUSE request loop: worker threads that read requests from the
// kernel and answer them (libfuse's fuse_session_loop_mt, with another rule
// for idle workers).
//
// A request that arrives wakes one of the threads blocked reading
// /dev/fuse, and the kernel picks the one that has waited longest. With
// libfuse's loop every idle worker waits there, so requests rotate over all
// of them, each time on the thread whose stack, buffers and caches went
// coldest: with 32 workers a 4 KiB write cost the daemon 7 µs of CPU and
// took 15 µs, against 4.5 µs and 9.5 µs with 10 (2-core VM, fio, requests
// answered at once). Letting idle workers exit (libfuse's max_idle) trades
// that for creating threads over and over: thousands a second under 2 fio
// jobs.
//
// Here at most `readers` workers wait on /dev/fuse. A worker that finishes
// a request while that many are already waiting parks instead, on a stack,
// and the worker that takes the last waiting reader's place wakes the one
// parked most recently (its caches the warmest), or starts a new one up to
// `max_workers`. Workers never exit before the session ends, so a burst of
// slow requests (engine round trips, object fetches) still gets up to
// max_workers threads, and the rest of the time requests rotate over a few
// hot ones. Workers in a long wait (long_wait.h: a blocking lock, a read of
// .accesslog) are not counted against max_workers: the request that ends the
// wait always finds one.
#pragma once

struct fuse_session;

namespace tessera::fuse {

struct WorkerLoopOptions {
  unsigned max_workers = 32;  // threads answering requests at once, at most
  // Of which at most this many wait for a request. Serve makes it 2 per CPU,
  // at least 4: on 2 cores, 4 and 6 did alike under fio's 2-job random
  // writes, 2 was slower (71-73k writes/s against 82-96k).
  unsigned readers = 4;
  // Fault injection for tests (TESSERA_FUSE_FAULTS=drop-interrupts): every
  // FUSE_INTERRUPT is read and ignored, as when the kernel sends none.
  bool drop_interrupts = false;
};

// Serves `se` until it ends (unmounted, or fuse_session_exit, which
// libfuse's signal handlers call) and returns 0, or the negative errno that
// ended it. Call it on the thread that should receive SIGTERM and SIGINT:
// the workers block them, as libfuse's do.
int RunWorkerLoop(fuse_session* se, const WorkerLoopOptions& opts);

}  // namespace tessera::fuse
