// Direct I/O helpers of e2e_fsx (tests/e2e/fsx.cc): page-aligned buffers and
// a minimal kernel AIO context driven through syscall(2) and
// <linux/aio_abi.h> (no libaio). A header, not a .cc: every *.cc in
// tests/e2e is its own program.
#pragma once

#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace fsx {

// O_DIRECT wants offsets, lengths and buffer addresses aligned; 4096 covers
// every page and logical block size fsx runs on.
constexpr uint64_t kDirectAlign = 4096;

inline uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }
inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A heap buffer aligned to kDirectAlign (std::vector cannot promise that).
class AlignedBuf {
 public:
  AlignedBuf() = default;
  explicit AlignedBuf(size_t size) : size_(size) {
    void* p = nullptr;
    if (posix_memalign(&p, kDirectAlign, AlignUp(size == 0 ? 1 : size, kDirectAlign)) != 0) std::abort();
    p_ = static_cast<uint8_t*>(p);
  }
  AlignedBuf(AlignedBuf&& o) noexcept : p_(o.p_), size_(o.size_) { o.p_ = nullptr; }
  AlignedBuf& operator=(AlignedBuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  ~AlignedBuf() { std::free(p_); }
  uint8_t* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
};

// One kernel AIO context. Submit() queues requests (all at once, so several
// are in flight together), Wait() collects the results in submission order.
class Aio {
 public:
  struct Request {
    bool write = false;
    int fd = -1;
    uint8_t* buf = nullptr;
    uint64_t off = 0;
    uint64_t len = 0;
    int64_t res = 0;  // bytes transferred or -errno, after Wait()
  };

  // Returns 0 or an errno.
  int Setup(unsigned max_events) {
    max_ = max_events;
    if (syscall(SYS_io_setup, max_events, &ctx_) != 0) return errno;
    return 0;
  }
  ~Aio() {
    if (ctx_ != 0) syscall(SYS_io_destroy, ctx_);
  }
  bool ready() const { return ctx_ != 0; }

  // Submits every request; returns 0 or an errno (io_submit itself failed:
  // nothing of what was not accepted is in flight, the accepted ones are
  // waited for before returning).
  int Submit(std::vector<Request>* reqs) {
    iocbs_.assign(reqs->size(), iocb{});
    std::vector<iocb*> ptrs;
    for (size_t i = 0; i < reqs->size(); ++i) {
      const Request& r = (*reqs)[i];
      iocb& cb = iocbs_[i];
      cb.aio_data = i;
      cb.aio_lio_opcode = r.write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
      cb.aio_fildes = static_cast<uint32_t>(r.fd);
      cb.aio_buf = reinterpret_cast<uint64_t>(r.buf);
      cb.aio_nbytes = r.len;
      cb.aio_offset = static_cast<int64_t>(r.off);
      ptrs.push_back(&cb);
    }
    size_t done = 0;
    while (done < ptrs.size()) {
      long n = syscall(SYS_io_submit, ctx_, static_cast<long>(ptrs.size() - done), ptrs.data() + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EAGAIN;
        inflight_ = done;
        Wait(reqs);
        return err;
      }
      done += static_cast<size_t>(n);
    }
    inflight_ = done;
    return 0;
  }

  // Waits for everything submitted; fills Request::res. Returns 0 or an errno.
  int Wait(std::vector<Request>* reqs) {
    std::vector<io_event> events(max_);
    size_t got = 0;
    while (got < inflight_) {
      long n = syscall(SYS_io_getevents, ctx_, 1L, static_cast<long>(inflight_ - got), events.data(), nullptr);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      for (long i = 0; i < n; ++i) (*reqs)[events[i].data].res = events[i].res;
      got += static_cast<size_t>(n);
    }
    inflight_ = 0;
    return 0;
  }

 private:
  aio_context_t ctx_ = 0;
  unsigned max_ = 0;
  size_t inflight_ = 0;
  std::vector<iocb> iocbs_;
};

}  // namespace fsx
