// FUSE over io_uring (Linux 6.14+): requests served on the caller's CPU.
//
// With /dev/fuse, a request wakes whichever daemon thread has waited longest,
// and the scheduler puts it on an idle CPU — on a virtual machine an
// inter-processor interrupt and that CPU's exit from halt for every request,
// and as much again for the reply that wakes the caller. On the 2-core VM of
// docs/benchmarks.md an operation served on the caller's CPU took a third to
// a half of one served on the other. With io_uring the kernel queues each
// request on the queue of the CPU its caller runs on (one queue per possible
// CPU); here each queue is served by threads pinned to that CPU, each with
// its own ring and one registered entry.
//
// The kernel switches to the rings once every queue has an entry; until then,
// and always for INIT, FORGET and INTERRUPT, requests come through /dev/fuse
// (the worker loop keeps reading it), and notifications go there too. Replies
// find their way through libfuse's custom I/O hooks: a reply to the request a
// ring thread is serving goes into that entry's buffers and back to the kernel
// with the next fetch; everything else is written to /dev/fuse.
//
// Needs the fuse module's `enable_uring` parameter (off by default):
//   echo Y > /sys/module/fuse/parameters/enable_uring
// Handlers must reply on the thread that serves the request (all of
// Tessera's do); a handler that blocks holds its thread's entry, and requests
// from that CPU go to the queue's other threads, of which the queue keeps at
// least two free of long waits (long_wait.h: locks, .accesslog) by adding
// entries.
//
// A request made while its CPU's queue has no free entry waits in the
// kernel, and the kernel hands it to an entry only when one commits a reply
// (Linux 6.14 to 6.18: registering a new entry does not). So after adding an
// entry, its thread has the kernel queue one request of its own on that CPU
// (a FUSE_NOTIFY_RETRIEVE of 0 bytes of a file a long wait there waits on
// makes the kernel send a FUSE_NOTIFY_REPLY), which takes the new entry
// and, once answered, hands the entry the oldest waiting request. Without
// it, requests queued while every entry was in a long wait and the new one
// not yet registered waited until another request came from that CPU.
#pragma once

#include <memory>

#include "common/status.h"

struct fuse_session;

namespace tessera::fuse {

struct UringOptions {
  unsigned threads_per_cpu = 8;  // each with one entry: requests of one CPU served at once, at most
  size_t max_write = 1u << 20;   // the mount's max_write: the size of each entry's payload buffer
  // Fault injection (TESSERA_FUSE_FAULTS=slow-ring-growth, faults.h): an
  // added entry registers 2 s late.
  bool slow_growth = false;
};

// Whether the kernel lets FUSE servers use io_uring.
bool KernelUringEnabled();

class UringQueues;
// Destroying the queues stops and joins their threads (after the session
// ended; requests the kernel still holds for the rings fail when the mount
// goes).
struct UringQueuesDeleter {
  void operator()(UringQueues* q) const;
};
using UringHandle = std::unique_ptr<UringQueues, UringQueuesDeleter>;

// Installs the reply hooks on se (call after fuse_session_mount, before the
// first request is read) and starts the queue threads, which register their
// entries once the kernel has the INIT reply.
Result<UringHandle> StartUring(fuse_session* se, const UringOptions& opts);

}  // namespace tessera::fuse
