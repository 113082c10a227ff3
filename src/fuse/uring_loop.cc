#include "fuse/uring_loop.h"

#define FUSE_USE_VERSION 314
#include <fuse3/fuse_lowlevel.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "fuse/long_wait.h"

namespace tessera::fuse {

namespace {

// The kernel's io_uring ABI for FUSE (include/uapi/linux/fuse.h, protocol
// 7.42+), not in the headers of Debian 12's linux-libc-dev (6.1).
constexpr uint32_t kCmdRegister = 1;
constexpr uint32_t kCmdCommitAndFetch = 2;
struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;  // the request's unique
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct ReqHeader {
  char in_out[128];  // fuse_in_header on fetch, fuse_out_header on commit
  char op_in[128];   // the opcode's fixed argument (in_args[0])
  EntInOut ent;
};
struct CmdReq {  // in the SQE's 80-byte command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
static_assert(sizeof(ReqHeader) == 288 && sizeof(CmdReq) == 24, "FUSE io_uring ABI");

// Room before the payload for the fuse_in_header and the fixed argument, so
// that a request is one contiguous /dev/fuse-format message (what libfuse
// 3.14 parses) without moving its payload.
constexpr size_t kFront = 256;
static_assert(kFront >= sizeof(fuse_in_header) + sizeof(ReqHeader::op_in));

// One registered entry: its buffers, and the request it holds.
struct Entry {
  ReqHeader* header = nullptr;
  char* mem = nullptr;  // kFront + payload_size
  size_t payload_size = 0;
  char* payload() const { return mem + kFront; }
  uint64_t unique = 0;
  bool replied = false;
};

// The entry whose request this thread is serving (for the writev hook).
thread_local Entry* t_entry = nullptr;

ssize_t HookRead(int fd, void* buf, size_t len, void* /*userdata*/) { return ::read(fd, buf, len); }

// A reply to the request this thread serves from its ring goes into the
// entry; the rest (replies to /dev/fuse requests, notifications) to the fd.
ssize_t HookWritev(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  Entry* e = t_entry;
  if (e == nullptr || count < 1 || iov[0].iov_len != sizeof(fuse_out_header) ||
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique != e->unique) {
    return ::writev(fd, iov, count);
  }
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (iov[i].iov_len > e->payload_size - n) {
      errno = EINVAL;  // libfuse reports it and answers EIO; no reply of Tessera's is that long
      return -1;
    }
    std::memcpy(e->payload() + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  std::memcpy(e->header->in_out, iov[0].iov_base, sizeof(fuse_out_header));
  e->header->ent.payload_sz = uint32_t(n);
  e->replied = true;
  return ssize_t(sizeof(fuse_out_header) + n);
}

}  // namespace

bool KernelUringEnabled() {
  std::ifstream in("/sys/module/fuse/parameters/enable_uring");
  std::string v;
  return bool(in >> v) && (v == "Y" || v == "1");
}

class UringQueues {
 public:
  UringQueues(fuse_session* se, const UringOptions& opts)
      : se_(se),
        opts_(opts),
        served_(metrics::NewCounter("tessera_fuse_uring_requests_total",
                                    "FUSE requests served through io_uring (--io-uring), on their caller's CPU")),
        errors_(metrics::NewCounter("tessera_fuse_uring_errors_total",
                                    "FUSE io_uring entries that failed and were registered again")),
        grown_(metrics::NewCounter("tessera_fuse_uring_entries_added_total",
                                   "FUSE io_uring entries added to a CPU's queue so that requests in long waits "
                                   "(locks, .accesslog) cannot hold all of them")),
        kicks_(metrics::NewCounter("tessera_fuse_uring_kicks_total",
                                   "Requests the client had the kernel queue on a CPU after adding an entry to its "
                                   "queue, so that requests waiting there for an entry are served")) {}
  ~UringQueues() { Stop(); }

  // Sets up every ring and entry (an error here fails the mount), then
  // starts their threads.
  Status Start() {
    // One queue per possible CPU: the kernel serves the rings only once
    // each has an entry.
    const int cpus = PossibleCpus();
    if (cpus <= 0) return Status::Err(EIO, "cannot read /sys/devices/system/cpu/possible");
    std::lock_guard lock(mu_);
    cpus_ = std::vector<CpuQueue>(size_t(cpus));
    for (int cpu = 0; cpu < cpus; ++cpu) {
      for (unsigned i = 0; i < opts_.threads_per_cpu; ++i) RETURN_IF_ERROR(AddEntryLocked(cpu, false));
    }
    for (auto& q : queues_) q->thread = std::thread([this, q = q.get()] { Serve(q); });
    return Status::OK();
  }

  void Stop() {
    std::vector<std::unique_ptr<Queue>> queues;
    {
      std::lock_guard lock(mu_);  // no entry is added after this
      stop_.store(true);
      queues.swap(queues_);
    }
    for (auto& q : queues)
      if (q->thread.joinable()) q->thread.join();
  }

 private:
  // One thread's share of a CPU's queue: its ring and its one entry.
  struct Queue {
    int cpu = 0;
    UringQueues* owner = nullptr;
    LongWaitHooks long_wait_hooks;  // this thread's, arg = this
    io_uring ring{};
    bool ring_ready = false;
    bool grown = false;  // added by LongWaitStarts, not at the start
    Entry e;
    iovec iov[2]{};
    std::thread thread;

    Status Init(size_t payload_size) {
      const int rc = io_uring_queue_init(4, &ring, IORING_SETUP_SQE128);
      if (rc < 0) return Status::Err(-rc, fmt::format("FUSE io_uring: cannot set up a ring for CPU {}", cpu));
      ring_ready = true;
      void* header = nullptr;
      void* mem = nullptr;
      if (posix_memalign(&header, 4096, sizeof(ReqHeader)) != 0) return Status::Err(ENOMEM, "FUSE io_uring entry");
      e.header = static_cast<ReqHeader*>(header);
      if (posix_memalign(&mem, 4096, kFront + payload_size) != 0) return Status::Err(ENOMEM, "FUSE io_uring entry");
      e.mem = static_cast<char*>(mem);
      e.payload_size = payload_size;
      std::memset(e.header, 0, sizeof(ReqHeader));
      iov[0] = {e.header, sizeof(ReqHeader)};
      iov[1] = {e.payload(), e.payload_size};
      return Status::OK();
    }
    ~Queue() {
      if (ring_ready) io_uring_queue_exit(&ring);  // cancels what the kernel still holds
      std::free(e.header);
      std::free(e.mem);
    }

    // Queues a REGISTER (the entry, again after a failure) or a
    // COMMIT_AND_FETCH (the reply in the entry, and the next request); the
    // serving loop submits it. One at a time: the ring always has room.
    bool Prepare(int fd, uint32_t cmd, uint64_t commit_id) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) return false;
      std::memset(static_cast<void*>(sqe), 0, 128);  // SQE128
      sqe->opcode = IORING_OP_URING_CMD;
      sqe->fd = fd;
      sqe->cmd_op = cmd;
      if (cmd == kCmdRegister) {
        sqe->addr = reinterpret_cast<uint64_t>(iov);
        sqe->len = 2;
      }
      CmdReq req{};
      req.commit_id = commit_id;
      req.qid = uint16_t(cpu);
      std::memcpy(reinterpret_cast<char*>(sqe) + offsetof(io_uring_sqe, cmd), &req, sizeof(req));
      return true;
    }
  };

  static int PossibleCpus() {
    std::ifstream in("/sys/devices/system/cpu/possible");
    std::string s;  // "0-1", "0", "0-3,5"...: the highest number + 1
    if (!(in >> s)) return -1;
    int highest = -1, cur = 0;
    bool digits = false;
    for (char c : s + ",") {
      if (c >= '0' && c <= '9') {
        cur = cur * 10 + (c - '0');
        digits = true;
      } else {
        if (digits) highest = std::max(highest, cur);
        cur = 0;
        digits = false;
      }
    }
    return highest + 1;
  }

  // Has the kernel queue a request on the calling thread's CPU, `cpu`
  // (uring_loop.h): a FUSE_NOTIFY_RETRIEVE of 0 bytes of a file, which the
  // kernel answers with a FUSE_NOTIFY_REPLY request, served by Process like
  // any other. The file is the one the CPU's latest long wait waits on: its
  // caller has it open, so the kernel knows the inode (6.18 takes only
  // regular files, not the root).
  void Kick(int fd, int cpu) {
    struct {
      fuse_out_header out;
      fuse_notify_retrieve_out arg;
    } msg{};
    static_assert(sizeof(msg) == sizeof(fuse_out_header) + sizeof(fuse_notify_retrieve_out));
    msg.out.len = sizeof(msg);
    msg.out.error = FUSE_NOTIFY_RETRIEVE;  // unique 0: a notification
    msg.arg.notify_unique = next_kick_.fetch_add(2);  // odd: the kernel's own request ids are even
    msg.arg.nodeid = cpus_[size_t(cpu)].wait_ino.load();
    if (msg.arg.nodeid == 0) msg.arg.nodeid = FUSE_ROOT_ID;  // (no long wait yet: an entry registered again)
    if (::write(fd, &msg, sizeof(msg)) == ssize_t(sizeof(msg))) {
      kicks_->Inc();
      return;
    }
    const int err = errno;
    errors_->Inc();
    // ENOENT: the kernel forgot the inode, so its wait ended, and that
    // request's reply handed its entry a waiting request.
    if (err != ENOENT && !kick_warned_.exchange(true))
      LOG_WARN("FUSE io_uring: cannot have the kernel queue a request after adding an entry ({}): a request made "
               "while its CPU's entries were all in long waits may wait for the next request from that CPU",
               std::strerror(err));
  }

  // Turns the request in the entry into /dev/fuse's format (the header, the
  // fixed argument and the payload, one after the other) and has libfuse
  // serve it; the writev hook puts the reply into the entry.
  void Process(Entry& e) {
    fuse_in_header in;
    std::memcpy(&in, e.header->in_out, sizeof(in));
    const uint32_t payload = e.header->ent.payload_sz;
    e.unique = in.unique;
    e.replied = false;
    const size_t op_in = in.len - sizeof(in) - payload;
    if (in.opcode == FUSE_NOTIFY_REPLY) {
      // A Kick's: nothing to do but commit it (with an error: it carries no
      // data), which hands this entry the oldest waiting request.
      const fuse_out_header out{uint32_t(sizeof(fuse_out_header)), -ECANCELED, in.unique};
      std::memcpy(e.header->in_out, &out, sizeof(out));
      e.header->ent.payload_sz = 0;
      return;
    }
    if (in.len >= sizeof(in) + payload && op_in <= sizeof(e.header->op_in) && payload <= e.payload_size) {
      char* start = e.payload() - op_in - sizeof(in);
      std::memcpy(start, &in, sizeof(in));
      std::memcpy(start + sizeof(in), e.header->op_in, op_in);
      fuse_buf buf{};
      buf.size = in.len;
      buf.mem = start;
      buf.fd = -1;
      t_entry = &e;
      fuse_session_process_buf(se_, &buf);
      t_entry = nullptr;
      served_->Inc();
    } else {
      LOG_ERROR("FUSE io_uring: malformed request (opcode {}, length {}, payload {}): answered EIO", in.opcode, in.len,
                payload);
      errors_->Inc();
    }
    if (!e.replied) {  // malformed, or (no handler of Tessera's does this) left unanswered
      const fuse_out_header out{uint32_t(sizeof(fuse_out_header)), -EIO, in.unique};
      std::memcpy(e.header->in_out, &out, sizeof(out));
      e.header->ent.payload_sz = 0;
    }
  }

  // A thread serving one entry of CPU q->cpu's queue, bound to that CPU.
  void Serve(Queue* q) {
    NameThisThread("ts-fuse-ring");
    sigset_t block;  // as the /dev/fuse workers: signals go to the main thread
    sigemptyset(&block);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(q->cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // offline CPU: any CPU serves its queue
    SetLongWaitHooks(&q->long_wait_hooks);

    const int fd = fuse_session_fd(se_);
    bool fetched = false;  // the kernel took the entry (it has the INIT reply)
    int failures = 0;      // in a row: the pause before trying again doubles
    auto failed = [&](const char* what, int err) {
      errors_->Inc();
      if ((failures & (failures - 1)) == 0)  // the 1st, 2nd, 4th, 8th... in a row
        LOG_WARN("FUSE io_uring: CPU {}'s ring: {}: {}; trying again", q->cpu, what, std::strerror(err));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10 << std::min(failures, 7), 1000)));
      ++failures;
    };
    auto prepare = [&](uint32_t cmd, uint64_t commit_id) {
      while (!q->Prepare(fd, cmd, commit_id) && !stop_.load()) {  // room for 4, at most 1 queued: never
        failed("no room in the ring", EBUSY);
        (void)io_uring_submit(&q->ring);
      }
    };
    prepare(kCmdRegister, 0);
    // A Kick once the entry is registered, if requests may be waiting for
    // one: for an added entry, and for one registered again after a failure.
    bool kick = q->grown;
    if (q->grown && opts_.slow_growth)
      for (int i = 0; i < 20 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    while (!stop_.load()) {
      // Submits what is queued; after a failure it stays queued. A REGISTER
      // is done when this returns (the kernel registers the entry inline).
      if (int rc = io_uring_submit(&q->ring); rc < 0 && rc != -EINTR) {
        failed("cannot submit", -rc);
        continue;
      }
      if (kick) {
        kick = false;
        Kick(fd, q->cpu);
      }
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec wait{0, 100 * 1000 * 1000};  // to see stop_
      if (int rc = io_uring_wait_cqe_timeout(&q->ring, &cqe, &wait); rc < 0) {
        if (rc != -ETIME && rc != -EINTR) failed("cannot wait", -rc);
        continue;
      }
      const int res = cqe->res;
      io_uring_cqe_seen(&q->ring, cqe);
      if (res == -ENOTCONN || res == -ECONNABORTED) break;  // unmounted, or the connection aborted
      if (res == -EAGAIN && !fetched) {  // the kernel has no INIT reply yet
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        prepare(kCmdRegister, 0);
        continue;
      }
      if (res < 0) {  // the entry is gone (a failed commit is not re-armed): a new one
        failed("the entry failed", -res);
        prepare(kCmdRegister, 0);
        kick = fetched || q->grown;  // (before the ring is ready, requests go to /dev/fuse)
        continue;
      }
      fetched = true;
      failures = 0;
      Process(q->e);
      prepare(kCmdCommitAndFetch, q->e.header->ent.commit_id);
    }
  }

  // A new entry (and its thread, if start) on CPU cpu's queue.
  Status AddEntryLocked(int cpu, bool start) {
    auto q = std::make_unique<Queue>();
    q->cpu = cpu;
    q->owner = this;
    q->long_wait_hooks.begin = [](void* self, uint64_t ino) {
      auto* me = static_cast<Queue*>(self);
      me->owner->LongWaitStarts(me->cpu, ino);
    };
    q->long_wait_hooks.end = [](void* self) {
      auto* me = static_cast<Queue*>(self);
      me->owner->LongWaitEnds(me->cpu);
    };
    q->long_wait_hooks.arg = q.get();
    q->grown = start;
    RETURN_IF_ERROR(q->Init(std::max<size_t>(opts_.max_write, 8192)));
    if (start) q->thread = std::thread([this, q = q.get()] { Serve(q); });
    queues_.push_back(std::move(q));
    cpus_[size_t(cpu)].entries.fetch_add(1);
    return Status::OK();
  }

  // A request in a long wait (long_wait.h: a blocking lock, a read of
  // .accesslog) holds its entry all the while. If such waits on one CPU could
  // take every entry of its queue, the request that ends them, made on that
  // CPU, would find none: a deadlock. So a CPU's queue keeps kFreeOfWaits
  // entries that no long wait holds, and grows by half its entries (and
  // their threads) when a wait would take one of them. By half, not by one:
  // requests that came while the queue had no free entry are handed to new
  // entries one per Kick, so a run of long waits among them would otherwise
  // be served one growth (a thread start and a registration) at a time.
  // Entries stay until unmount.
  static constexpr int kFreeOfWaits = 2;
  static constexpr int kMaxEntriesPerCpu = 4096;

  void LongWaitStarts(int cpu, uint64_t ino) {
    CpuQueue& c = cpus_[size_t(cpu)];
    c.wait_ino.store(ino);
    const int waits = c.long_waits.fetch_add(1) + 1;
    if (waits <= c.entries.load() - kFreeOfWaits) return;
    std::lock_guard lock(mu_);
    if (stop_.load() || waits <= c.entries.load() - kFreeOfWaits) return;
    if (c.entries.load() >= kMaxEntriesPerCpu) {
      errors_->Inc();
      LOG_WARN("FUSE io_uring: CPU {}'s queue has {} entries and {} requests in long waits (locks, .accesslog): "
               "no more entries are added; what would end those waits, if made on this CPU, waits for one of them "
               "to be interrupted",
               cpu, c.entries.load(), waits);
      return;
    }
    const int add = std::min(std::max(1, c.entries.load() / 2), kMaxEntriesPerCpu - c.entries.load());
    for (int i = 0; i < add; ++i) {
      if (Status st = AddEntryLocked(cpu, true); !st.ok()) {
        errors_->Inc();
        LOG_WARN("FUSE io_uring: CPU {}'s queue: cannot add an entry for {} requests in long waits: {}", cpu, waits,
                 st.ToString());
        return;
      }
      grown_->Inc();
    }
  }
  void LongWaitEnds(int cpu) { cpus_[size_t(cpu)].long_waits.fetch_sub(1); }

  // What the threads of one CPU's queue share.
  struct CpuQueue {
    std::atomic<int> entries{0};       // registered (or being registered), one thread each
    std::atomic<int> long_waits{0};    // entries whose request is in a LongWait
    std::atomic<uint64_t> wait_ino{0}; // what the latest of them waits on (a Kick's inode)
  };

  fuse_session* const se_;
  const UringOptions opts_;
  metrics::Counter* const served_;
  metrics::Counter* const errors_;
  metrics::Counter* const grown_;
  metrics::Counter* const kicks_;
  std::atomic<uint64_t> next_kick_{1};   // a Kick's notify_unique: odd
  std::atomic<bool> kick_warned_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;                               // guards queues_ once threads run, and stop_'s setting
  std::vector<CpuQueue> cpus_;                  // by CPU number; sized once by Start
  std::vector<std::unique_ptr<Queue>> queues_;  // every entry's thread
};

Result<UringHandle> StartUring(fuse_session* se, const UringOptions& opts) {
  if (!KernelUringEnabled()) {
    return Status::Err(EOPNOTSUPP,
                       "the kernel's FUSE io_uring is off: as root, echo Y > /sys/module/fuse/parameters/enable_uring "
                       "(Linux 6.14 or later), then mount again");
  }
  static const fuse_custom_io kIo = {HookWritev, HookRead, nullptr, nullptr};
  if (int rc = fuse_session_custom_io(se, &kIo, fuse_session_fd(se)); rc != 0)
    return Status::Err(-rc, "cannot install the FUSE reply hooks");
  UringHandle q(new UringQueues(se, opts));
  RETURN_IF_ERROR(q->Start());
  return q;
}

void UringQueuesDeleter::operator()(UringQueues* q) const { delete q; }

}  // namespace tessera::fuse
