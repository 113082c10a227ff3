// e2e_fsx: random data-integrity exerciser for one file, in the spirit of
// xfstests' fsx. It keeps an in-memory model of the file (and of a second
// scratch file used as a copy_file_range source), performs random operations
// through the file system and checks every result against the model:
//
//   write       pwrite at a random offset/length (may extend the file)
//   read        pread and compare (also past EOF: short reads)
//   truncate    ftruncate up or down
//   punch       fallocate(PUNCH_HOLE | KEEP_SIZE): the range reads as zeros
//   zero        fallocate(ZERO_RANGE): the range reads as zeros; may extend
//   zero_keep   fallocate(ZERO_RANGE | KEEP_SIZE): zeros up to EOF, size kept
//               (the range may start or end past EOF)
//   falloc      fallocate(0): may extend the file with zeros
//   falloc_keep fallocate(KEEP_SIZE): size and content unchanged
//   copy        copy_file_range from the scratch file
//   copy_self   copy_file_range within the file (non-overlapping ranges)
//   map_read    mmap(PROT_READ, MAP_SHARED) and compare; the part of the last
//               page past EOF must read as zeros
//   map_write   mmap(PROT_WRITE, MAP_SHARED) inside the current size + msync
//   fsync       fsync or fdatasync
//   reopen      close and reopen, then compare the whole file; sometimes the
//               new descriptor is opened first and the file grows right after
//               the close (its RELEASE may still be in progress), then fstat
//   full_read   compare the whole file
//               (files over 8 MiB: start, end and two sampled windows; the
//               final check after the last operation always reads everything)
//   src_write   pwrite/ftruncate on the scratch file (feeds "copy")
//
// With -Z a second descriptor of FILE is opened with O_DIRECT and a share of
// the reads and writes go through it, interleaved with the buffered I/O and
// mmap of the first descriptor (offsets, lengths and buffers aligned to 4096):
//
//   dwrite      O_DIRECT pwrite (may extend the file); sometimes preceded by a
//               buffered read that fills the page cache with the old bytes;
//               always followed by a buffered read of the whole range
//   dread       O_DIRECT pread and compare (also across EOF: short reads)
//
// With -A (implies -Z) dwrite and dread are submitted as kernel AIO (io_submit
// / io_getevents through syscall(2), no libaio), and one more operation runs:
//
//   aio_batch   2-4 O_DIRECT reads/writes on disjoint ranges submitted with one
//               io_submit, in flight together, then waited for; reads stay
//               below EOF; then buffered read-back of every written range
//
// Offsets are biased towards multiples of the boundary (-b), towards page
// boundaries and towards EOF so that chunk/block edges get exercised. After
// every operation st_size is checked and the bytes around the edges of a
// modified range are read back. On the first mismatch the program prints the
// seed, the operation number, the last operations, the first bad offset and
// expected/actual bytes, saves the expected content as FILE.fsxgood and exits 1.
//
// Exit status: 0 success, 1 mismatch or unexpected error, 2 bad arguments.
// Run with -h for the flags. Helpers live in headers (every *.cc here is its
// own program): fsx_util.h (sizes, the seeded generator), fsx_options.h
// (operations, flags, usage, log lines), fsx_aio.h (aligned buffers, AIO).

#include <fcntl.h>
#include <getopt.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fsx_aio.h"
#include "fsx_options.h"
#include "fsx_util.h"

namespace {

using namespace fsx;  // the helpers of this one program (fsx_*.h)

constexpr size_t kLogSize = 20;          // operations shown on failure
constexpr uint64_t kEdgeWindow = 64;     // bytes read back around a modified range's edges
constexpr uint64_t kFullReadChunk = kMiB;
constexpr uint64_t kMaxWholeCompare = 8 * kMiB;  // larger files are compared by samples
constexpr size_t kMaxAio = 4;            // requests of one aio_batch

class Fsx;
Fsx* g_fsx = nullptr;  // for the crash report of the signal handler

class Fsx {
 public:
  explicit Fsx(const Options& opt)
      : opt_(opt),
        rng_(opt.seed),
        page_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))),
        src_path_(opt.path + ".fsxsrc"),
        buf_(std::max(opt.max_op_len, kFullReadChunk) + 2 * kEdgeWindow),
        buf2_(buf_.size()) {
    weights_ = kDefaultWeights;
    if (!opt_.copy_range) weights_[kCopy] = weights_[kCopySelf] = weights_[kSrcWrite] = 0;
    if (!opt_.mmap) weights_[kMapRead] = weights_[kMapWrite] = 0;
    if (!opt_.punch_hole || !opt_.fallocate) weights_[kPunchHole] = 0;
    if (!opt_.fallocate) weights_[kFallocate] = weights_[kFallocKeepSize] = 0;
    if (!opt_.zero_range || !opt_.fallocate) weights_[kZeroRange] = weights_[kZeroKeepSize] = 0;
    if (!opt_.direct) weights_[kDirectWrite] = weights_[kDirectRead] = 0;
    if (!opt_.aio) weights_[kAioBatch] = 0;
    if (opt_.direct) {
      for (size_t i = 0; i < kMaxAio; ++i) dbufs_.emplace_back(AlignUp(opt_.max_op_len, kDirectAlign));
    }
    for (unsigned w : weights_) total_weight_ += w;
  }

  int Run() {
    fd_ = OpenFile(opt_.path, O_TRUNC);
    if (opt_.copy_range) src_fd_ = OpenFile(src_path_, O_TRUNC);
    if (opt_.direct) dfd_ = OpenFile(opt_.path, O_DIRECT);
    if (opt_.aio) {
      errno = aio_.Setup(kMaxAio);
      if (errno != 0) SysFail("io_setup", "");
    }
    const auto start = std::chrono::steady_clock::now();

    for (op_no_ = 1; op_no_ <= opt_.num_ops; ++op_no_) {
      DoOp(PickOp());
      FinishLogEntry();
      CheckSize();
      if (!opt_.quiet && opt_.num_ops >= 20000 && op_no_ % 10000 == 0) {
        std::printf("fsx: %" PRIu64 " ops done, size %zu\n", op_no_, model_.size());
        std::fflush(stdout);
      }
    }
    --op_no_;

    // Final persistence check of both files through fresh descriptors.
    final_check_ = true;
    Reopen(/*also_src=*/true);
    CheckRange(0, model_.size());
    if (src_fd_ >= 0) CheckSrcFile(/*whole=*/true);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    PrintSummary(secs);

    CloseFile(&fd_);
    CloseFile(&src_fd_);
    CloseFile(&dfd_);
    if (!opt_.keep) {
      unlink(opt_.path.c_str());
      if (opt_.copy_range) unlink(src_path_.c_str());
    }
    return 0;
  }

  // Best effort from a signal handler (SIGBUS on an mmap access, ...).
  void CrashReport(int sig) {
    std::fprintf(stderr, "\nfsx: FAILED: caught signal %d (%s) during op %" PRIu64 " (seed %" PRIu64 ")\n",
                 sig, strsignal(sig), op_no_, opt_.seed);
    DumpLog(UINT64_MAX);
  }

 private:
  // ---------------------------------------------------------------- helpers

  int OpenFile(const std::string& path, int extra_flags) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | extra_flags, 0644);
    if (fd < 0) SysFail("open", path.c_str());
    return fd;
  }

  void CloseFile(int* fd) {
    if (*fd >= 0 && close(*fd) != 0) SysFail("close", "");
    *fd = -1;
  }

  Op PickOp() {
    uint64_t r = rng_.Below(total_weight_);
    for (int op = 0; op < kNumOps; ++op) {
      if (r < weights_[op]) return static_cast<Op>(op);
      r -= weights_[op];
    }
    return kRead;
  }

  // An offset in [0, limit), biased towards boundary multiples, page edges
  // and the current EOF.
  uint64_t PickOffset(uint64_t limit) {
    if (limit <= 1) return 0;
    uint64_t off = 0;
    switch (rng_.Below(8)) {
      case 0:
      case 1:
        if (opt_.boundary > 0) {
          off = NearMultiple(opt_.boundary, limit);
          break;
        }
        [[fallthrough]];
      case 2:
        off = NearMultiple(page_, limit);
        break;
      case 3: {
        const uint64_t eof = model_.size();
        off = eof + rng_.Range(0, 2 * kEdgeWindow);
        off = off > kEdgeWindow ? off - kEdgeWindow : 0;
        break;
      }
      default:
        off = rng_.Below(limit);
        break;
    }
    return std::min(off, limit - 1);
  }

  // k*unit + small delta (often exactly k*unit or one byte off).
  uint64_t NearMultiple(uint64_t unit, uint64_t limit) {
    const uint64_t k = rng_.Below(limit / unit + 1);
    const uint64_t base = k * unit;
    static constexpr int64_t kDeltas[] = {-4097, -4096, -17, -1, 0, 0, 0, 1, 17, 4095, 4096};
    int64_t delta = kDeltas[rng_.Below(std::size(kDeltas))];
    if (rng_.OneIn(4)) delta = static_cast<int64_t>(rng_.Below(64)) - 32;
    if (delta < 0 && static_cast<uint64_t>(-delta) > base) return 0;
    return base + delta;
  }

  // A length in [1, max]: tiny, page-sized or up to -o.
  uint64_t PickLen(uint64_t max) {
    if (max <= 1) return 1;
    uint64_t len = 0;
    switch (rng_.Below(8)) {
      case 0: len = rng_.Range(1, 16); break;
      case 1: len = rng_.Range(1, page_); break;
      case 2: len = page_ * rng_.Range(1, 4); break;
      case 3:
        // Sized to cross a boundary when the offset is just before one.
        len = opt_.boundary > 0 ? rng_.Range(1, 2 * opt_.boundary) : rng_.Range(1, opt_.max_op_len);
        break;
      default: len = rng_.Range(1, opt_.max_op_len); break;
    }
    return std::clamp<uint64_t>(std::min(len, opt_.max_op_len), 1, max);
  }

  // Records an operation before it is carried out, so that a failure or a
  // crash inside it shows its parameters; the main loop fills in size_after.
  void Log(Op op, uint64_t off, uint64_t len, uint64_t touch_lo, uint64_t touch_hi, uint64_t src_off = 0,
           const char* note = "") {
    LogEntry& e = log_[log_next_++ % kLogSize];
    e = LogEntry{op_no_, op, off, len, src_off, model_.size(), model_.size(), touch_lo, touch_hi, note, {}};
    ++counts_[op];
  }

  void FinishLogEntry() {
    if (log_next_ == 0) return;
    LogEntry& e = log_[(log_next_ - 1) % kLogSize];
    e.size_after = model_.size();
    if (opt_.verbose) PrintEntry(stdout, e);
  }

  // Prints the last operations; marks those that changed bad_off.
  void DumpLog(uint64_t bad_off) {
    const size_t n = std::min<uint64_t>(log_next_, kLogSize);
    std::fprintf(stderr, "last %zu operations (oldest first%s):\n", n,
                 bad_off == UINT64_MAX ? "" : "; '*' = may have modified the first bad byte");
    for (size_t i = log_next_ - n; i < log_next_; ++i) {
      const LogEntry& e = log_[i % kLogSize];
      const bool touched = bad_off >= e.touch_lo && bad_off < e.touch_hi;
      std::fputc(touched ? '*' : ' ', stderr);
      PrintEntry(stderr, e);
    }
  }

  [[noreturn]] __attribute__((format(printf, 3, 4))) void Fail(uint64_t bad_off, const char* fmt, ...) {
    std::fflush(stdout);
    if (final_check_) {
      std::fprintf(stderr, "\nfsx: FAILED in the final check after reopening (seed %" PRIu64 "): ", opt_.seed);
    } else {
      std::fprintf(stderr, "\nfsx: FAILED at op %" PRIu64 " (%s), seed %" PRIu64 ": ", op_no_,
                   kOpNames[current_op_], opt_.seed);
    }
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\n");
    DumpLog(bad_off);
    SaveGood();
    std::fprintf(stderr, "rerun: e2e_fsx -S %" PRIu64 " -N %" PRIu64 " -l %" PRIu64 " -o %" PRIu64
                         " -b %" PRIu64 "%s%s%s%s%s%s %s\n",
                 opt_.seed, opt_.num_ops, opt_.max_len, opt_.max_op_len, opt_.boundary,
                 opt_.copy_range ? "" : " -c", opt_.mmap ? "" : " -m",
                 opt_.punch_hole ? "" : " -p", opt_.zero_range ? "" : " -z", opt_.fallocate ? "" : " -F",
                 opt_.aio ? " -A" : opt_.direct ? " -Z" : "", opt_.path.c_str());
    std::exit(1);
  }

  [[noreturn]] void SysFail(const char* call, const char* detail) {
    const int err = errno;
    const char* hint = "";
    if (err == EOPNOTSUPP || err == ENOSYS || err == EXDEV || err == EINVAL) {
      if (std::strncmp(call, "fallocate", 9) == 0)
        hint = " (if the file system lacks this fallocate mode, rerun with -p, -z or -F)";
      else if (std::strcmp(call, "copy_file_range") == 0)
        hint = " (if the file system lacks copy_file_range, rerun with -c)";
      else if (std::strncmp(call, "mmap", 4) == 0 || std::strcmp(call, "msync") == 0)
        hint = " (if the file system lacks shared mmap, rerun with -m)";
      else if (std::strncmp(call, "open", 4) == 0 && dfd_ < 0 && opt_.direct)
        hint = " (if the file system lacks O_DIRECT, rerun without -Z/-A)";
    }
    Fail(UINT64_MAX, "%s%s%s failed: %s%s", call, *detail ? " " : "", detail, std::strerror(err), hint);
  }

  void SaveGood() {
    const std::string good = opt_.path + ".fsxgood";
    int fd = open(good.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < model_.size();) {
      ssize_t n = write(fd, model_.data() + done, model_.size() - done);
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
    if (fd >= 0) close(fd);
    std::fprintf(stderr, "expected content %s %s; actual file kept at %s\n",
                 ok ? "saved to" : "could NOT be saved to", good.c_str(), opt_.path.c_str());
  }

  // Compares actual bytes of [off, off+len) with the model and fails on a difference.
  void Compare(const uint8_t* actual, uint64_t off, uint64_t len, const char* how) {
    if (len == 0) return;
    const uint8_t* expected = model_.data() + off;
    if (std::memcmp(actual, expected, len) == 0) return;
    uint64_t first = 0;
    while (actual[first] == expected[first]) ++first;
    uint64_t bad = 0;
    for (uint64_t i = first; i < len; ++i) bad += actual[i] != expected[i];
    const uint64_t bad_off = off + first;
    std::string exp_hex, act_hex;
    char hex[4];
    for (uint64_t i = first; i < std::min(len, first + 16); ++i) {
      std::snprintf(hex, sizeof hex, " %02x", expected[i]);
      exp_hex += hex;
      std::snprintf(hex, sizeof hex, " %02x", actual[i]);
      act_hex += hex;
    }
    std::string where;
    if (opt_.boundary > 0) {
      where = " = " + std::to_string(bad_off / opt_.boundary) + "*" + std::to_string(opt_.boundary) +
              " + " + std::to_string(bad_off % opt_.boundary);
    }
    Fail(bad_off,
         "data mismatch (%s of [%" PRIu64 ", %" PRIu64 "), file size %zu)\n"
         "  first bad byte at offset %" PRIu64 "%s; %" PRIu64 " bad byte(s) in the range\n"
         "  expected:%s\n"
         "  actual:  %s",
         how, off, off + len, model_.size(), bad_off, where.c_str(), bad, exp_hex.c_str(),
         act_hex.c_str());
  }

  // Reads up to len bytes at off (looping over short reads); returns the count.
  uint64_t ReadFully(int fd, uint8_t* buf, uint64_t off, uint64_t len) {
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = pread(fd, buf + done, len - done, static_cast<off_t>(off + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        SysFail("pread", "");
      }
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    return done;
  }

  void WriteFully(int fd, const uint8_t* buf, uint64_t off, uint64_t len) {
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = pwrite(fd, buf + done, len - done, static_cast<off_t>(off + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        SysFail("pwrite", "");
      }
      if (n == 0) Fail(UINT64_MAX, "pwrite returned 0 at offset %" PRIu64, off + done);
      done += static_cast<uint64_t>(n);
    }
  }

  // Reads [lo, hi) of FILE (clipped to the model size) and compares.
  void CheckRange(uint64_t lo, uint64_t hi, const char* how = "read back") {
    hi = std::min<uint64_t>(hi, model_.size());
    while (lo < hi) {
      const uint64_t len = std::min(hi - lo, kFullReadChunk);
      const uint64_t got = ReadFully(fd_, buf2_.data(), lo, len);
      if (got != len) {
        Fail(lo + got, "short read: %" PRIu64 " of %" PRIu64 " bytes at offset %" PRIu64 " (file size %zu)",
             got, len, lo, model_.size());
      }
      Compare(buf2_.data(), lo, len, how);
      lo += len;
    }
  }

  // Compares the whole file, or for files larger than kMaxWholeCompare (big
  // -l) a sample: the start, the end and windows at a random offset and at a
  // boundary, so that frequent whole-file checks stay affordable.
  void CheckWhole(const char* how) {
    const uint64_t size = model_.size();
    if (size <= kMaxWholeCompare) return CheckRange(0, size, how);
    const uint64_t w = kMaxWholeCompare / 4;
    CheckRange(0, w, how);
    CheckRange(size - w, size, how);
    const uint64_t random = rng_.Below(size - w);
    CheckRange(random, random + w, how);
    const uint64_t near = PickOffset(size);
    CheckRange(near > w / 2 ? near - w / 2 : 0, near + w / 2, how);
  }

  // Reads back the bytes around both edges of a modified range.
  void CheckEdges(uint64_t lo, uint64_t hi) {
    const auto window = [&](uint64_t at) {
      CheckRange(at > kEdgeWindow ? at - kEdgeWindow : 0, at + kEdgeWindow, "edge read-back");
    };
    window(lo);
    if (hi > lo + 2 * kEdgeWindow) window(hi);
    else CheckRange(lo, hi + kEdgeWindow, "edge read-back");
  }

  void CheckSize() {
    struct stat st;
    if (fstat(fd_, &st) != 0) SysFail("fstat", "");
    if (static_cast<uint64_t>(st.st_size) != model_.size()) {
      Fail(UINT64_MAX, "st_size is %jd, expected %zu", static_cast<intmax_t>(st.st_size), model_.size());
    }
  }

  // Checks the scratch file's size and content (whole, or a window of
  // kMaxWholeCompare bytes when it is larger and !whole).
  void CheckSrcFile(bool whole) {
    struct stat st;
    if (fstat(src_fd_, &st) != 0) SysFail("fstat", src_path_.c_str());
    if (static_cast<uint64_t>(st.st_size) != src_model_.size()) {
      Fail(UINT64_MAX, "scratch file %s: st_size is %jd, expected %zu", src_path_.c_str(),
           static_cast<intmax_t>(st.st_size), src_model_.size());
    }
    uint64_t lo = 0, hi = src_model_.size();
    if (!whole && hi > kMaxWholeCompare) {
      lo = rng_.Below(hi - kMaxWholeCompare + 1);
      hi = lo + kMaxWholeCompare;
    }
    for (uint64_t off = lo; off < hi; off += kFullReadChunk) {
      const uint64_t len = std::min<uint64_t>(kFullReadChunk, hi - off);
      if (ReadFully(src_fd_, buf2_.data(), off, len) != len ||
          std::memcmp(buf2_.data(), src_model_.data() + off, len) != 0) {
        Fail(UINT64_MAX, "scratch file %s differs from its model in [%" PRIu64 ", %" PRIu64 ")",
             src_path_.c_str(), off, off + len);
      }
    }
  }

  void Reopen(bool also_src) {
    CloseFile(&fd_);
    fd_ = OpenFile(opt_.path, 0);
    if (dfd_ >= 0 && (also_src || final_check_)) {
      CloseFile(&dfd_);
      dfd_ = OpenFile(opt_.path, O_DIRECT);
    }
    if (also_src && src_fd_ >= 0) {
      CloseFile(&src_fd_);
      src_fd_ = OpenFile(src_path_, 0);
    }
  }

  // Maps [off, off+len) of FILE; *delta is the offset of off inside the mapping.
  uint8_t* Map(uint64_t off, uint64_t len, int prot, uint64_t* delta, uint64_t* map_len) {
    const uint64_t pg = off & ~(page_ - 1);
    *delta = off - pg;
    *map_len = *delta + len;
    void* p = mmap(nullptr, *map_len, prot, MAP_SHARED, fd_, static_cast<off_t>(pg));
    if (p == MAP_FAILED) SysFail(prot & PROT_WRITE ? "mmap(PROT_WRITE)" : "mmap(PROT_READ)", "");
    return static_cast<uint8_t*>(p);
  }

  // ------------------------------------------------------------- operations

  void DoOp(Op op) {
    // Operations that need a non-empty file fall back to a write on an empty one.
    if (model_.empty() && (op == kPunchHole || op == kCopySelf || op == kMapRead || op == kMapWrite)) {
      op = kWrite;
    }
    current_op_ = op;
    switch (op) {
      case kWrite: OpWrite(); break;
      case kRead: OpRead(); break;
      case kTruncate: OpTruncate(); break;
      case kPunchHole: OpPunchHole(); break;
      case kFallocate: OpFallocate(false); break;
      case kFallocKeepSize: OpFallocate(true); break;
      case kCopy: OpCopy(); break;
      case kCopySelf: OpCopySelf(); break;
      case kMapRead: OpMapRead(); break;
      case kMapWrite: OpMapWrite(); break;
      case kFsync: OpFsync(); break;
      case kReopen: OpReopen(); break;
      case kFullRead: OpFullRead(); break;
      case kSrcWrite: OpSrcWrite(); break;
      case kZeroRange: OpZeroRange(false); break;
      case kZeroKeepSize: OpZeroRange(true); break;
      case kDirectWrite: OpDirectWrite(); break;
      case kDirectRead: OpDirectRead(); break;
      case kAioBatch: OpAioBatch(); break;
      case kNumOps: break;
    }
  }

  void OpWrite() {
    const uint64_t off = PickOffset(opt_.max_len);
    const uint64_t len = PickLen(opt_.max_len - off);
    rng_.Fill(buf_.data(), len);
    Log(kWrite, off, len, off, off + len);
    WriteFully(fd_, buf_.data(), off, len);
    if (off + len > model_.size()) model_.resize(off + len);
    std::memcpy(model_.data() + off, buf_.data(), len);
    CheckEdges(off, off + len);
  }

  void OpRead() {
    const uint64_t size = model_.size();
    // Mostly inside the file; sometimes straddling or past EOF.
    const uint64_t off = rng_.OneIn(8) ? PickOffset(opt_.max_len) : PickOffset(size);
    const uint64_t len = PickLen(opt_.max_op_len);
    Log(kRead, off, len, 0, 0);
    const uint64_t expect = off < size ? std::min(len, size - off) : 0;
    const uint64_t got = ReadFully(fd_, buf2_.data(), off, len);
    if (got != expect) {
      Fail(off + std::min(got, expect), "pread of %" PRIu64 " bytes at %" PRIu64 " returned %" PRIu64
           ", expected %" PRIu64 " (file size %" PRIu64 ")", len, off, got, expect, size);
    }
    Compare(buf2_.data(), off, got, "pread");
  }

  void OpTruncate() {
    const uint64_t before = model_.size();
    const uint64_t to = PickOffset(opt_.max_len + 1);
    Log(kTruncate, to, 0, std::min(before, to), std::max(before, to));
    if (ftruncate(fd_, static_cast<off_t>(to)) != 0) SysFail("ftruncate", "");
    model_.resize(to);  // growing fills with zeros
    CheckEdges(std::min(before, to), std::max(before, to));
  }

  void OpPunchHole() {
    const uint64_t size = model_.size();
    const uint64_t off = PickOffset(size);
    // May extend past EOF: KEEP_SIZE keeps the size and there is nothing to zero there.
    const uint64_t len = PickLen(opt_.max_len);
    const uint64_t end = std::min(size, off + len);
    Log(kPunchHole, off, len, off, end);
    if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                  static_cast<off_t>(len)) != 0) {
      SysFail("fallocate(PUNCH_HOLE|KEEP_SIZE)", "");
    }
    std::memset(model_.data() + off, 0, end - off);
    CheckEdges(off, end);
  }

  void OpFallocate(bool keep_size) {
    const uint64_t before = model_.size();
    const uint64_t off = PickOffset(opt_.max_len);
    const uint64_t len = PickLen(opt_.max_len - off);
    const int mode = keep_size ? FALLOC_FL_KEEP_SIZE : 0;
    const uint64_t new_size = keep_size ? before : std::max(before, off + len);
    Log(keep_size ? kFallocKeepSize : kFallocate, off, len, before, new_size);
    if (fallocate(fd_, mode, static_cast<off_t>(off), static_cast<off_t>(len)) != 0) {
      SysFail(keep_size ? "fallocate(KEEP_SIZE)" : "fallocate(0)", "");
    }
    model_.resize(new_size);
    CheckEdges(off, off + len);
  }

  // copy_file_range until len bytes are copied or it reports EOF; returns the count.
  uint64_t CopyRange(int in_fd, uint64_t in_off, uint64_t out_off, uint64_t len) {
    loff_t in = static_cast<loff_t>(in_off), out = static_cast<loff_t>(out_off);
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = copy_file_range(in_fd, &in, fd_, &out, len - done, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        SysFail("copy_file_range", "");
      }
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    return done;
  }

  void OpCopy() {
    const uint64_t src_size = src_model_.size();
    // Source offset mostly inside the scratch file, sometimes past its end.
    const uint64_t src_off = rng_.OneIn(10) ? src_size + rng_.Below(page_) : rng_.Below(src_size);
    const uint64_t dst_off = PickOffset(opt_.max_len);
    const uint64_t len = PickLen(opt_.max_len - dst_off);
    const uint64_t expect = src_off < src_size ? std::min(len, src_size - src_off) : 0;
    Log(kCopy, dst_off, len, dst_off, dst_off + expect, src_off);
    const uint64_t got = CopyRange(src_fd_, src_off, dst_off, len);
    if (expect > 0 && dst_off + expect > model_.size()) model_.resize(dst_off + expect);
    if (expect > 0) std::memcpy(model_.data() + dst_off, src_model_.data() + src_off, expect);
    if (got != expect) {
      Fail(UINT64_MAX, "copy_file_range copied %" PRIu64 " bytes, expected %" PRIu64
           " (scratch size %" PRIu64 ")", got, expect, src_size);
    }
    CheckEdges(dst_off, dst_off + expect);
  }

  void OpCopySelf() {
    const uint64_t before = model_.size();
    if (before < 2) return OpWrite();
    const uint64_t len = PickLen(before / 2);
    const uint64_t src_off = rng_.Below(before - len + 1);
    // Destination must not overlap [src_off, src_off + len) (EINVAL otherwise).
    uint64_t dst_off = UINT64_MAX;
    for (int attempt = 0; attempt < 8 && dst_off == UINT64_MAX; ++attempt) {
      const uint64_t d = PickOffset(opt_.max_len - len + 1);
      if (d + len <= src_off || d >= src_off + len) dst_off = d;
    }
    if (dst_off == UINT64_MAX) {
      // Uniform over [0, src_off - len] U [src_off + len, max_len - len].
      const uint64_t low = src_off >= len ? src_off - len + 1 : 0;
      const uint64_t high = opt_.max_len - len + 1 > src_off + len ? opt_.max_len - len + 1 - (src_off + len) : 0;
      const uint64_t r = rng_.Below(low + high);
      dst_off = r < low ? r : src_off + len + (r - low);
    }
    Log(kCopySelf, dst_off, len, dst_off, dst_off + len, src_off);
    const uint64_t got = CopyRange(fd_, src_off, dst_off, len);
    if (dst_off + len > model_.size()) model_.resize(dst_off + len);
    std::memcpy(model_.data() + dst_off, model_.data() + src_off, len);
    if (got != len) Fail(UINT64_MAX, "copy_file_range copied %" PRIu64 " bytes, expected %" PRIu64, got, len);
    CheckEdges(dst_off, dst_off + len);
  }

  void OpMapRead() {
    const uint64_t size = model_.size();
    uint64_t off = 0, len = 0;
    if (rng_.OneIn(4)) {  // run to EOF so that the tail-page check fires
      len = PickLen(std::min(size, opt_.max_op_len));
      off = size - len;
    } else {
      off = PickOffset(size);
      len = PickLen(size - off);
    }
    Log(kMapRead, off, len, 0, 0);
    uint64_t delta = 0, map_len = 0;
    uint8_t* p = Map(off, len, PROT_READ, &delta, &map_len);
    Compare(p + delta, off, len, "mmap read");
    // The rest of the page holding EOF must read as zeros.
    const uint64_t eof_page_end = (size + page_ - 1) & ~(page_ - 1);
    if (off + len == size && eof_page_end > size) {
      const uint8_t* tail = p + delta + len;
      for (uint64_t i = 0; i < eof_page_end - size; ++i) {
        if (tail[i] != 0) {
          Fail(size + i, "mmap: byte %" PRIu64 " past EOF (offset %" PRIu64 ") in the last page is 0x%02x, "
               "expected 0 (stale data past EOF)", i, size + i, tail[i]);
        }
      }
    }
    if (munmap(p, map_len) != 0) SysFail("munmap", "");
  }

  void OpMapWrite() {
    const uint64_t size = model_.size();
    const uint64_t off = PickOffset(size);
    const uint64_t len = PickLen(size - off);
    Log(kMapWrite, off, len, off, off + len);
    uint64_t delta = 0, map_len = 0;
    uint8_t* p = Map(off, len, PROT_READ | PROT_WRITE, &delta, &map_len);
    rng_.Fill(buf_.data(), len);
    std::memcpy(p + delta, buf_.data(), len);
    if (msync(p, map_len, MS_SYNC) != 0) SysFail("msync", "");
    if (munmap(p, map_len) != 0) SysFail("munmap", "");
    std::memcpy(model_.data() + off, buf_.data(), len);
    CheckEdges(off, off + len);
  }

  void OpFsync() {
    const bool data_only = rng_.OneIn(2);
    Log(kFsync, 0, 0, 0, 0, 0, data_only ? "fdatasync" : "fsync");
    if ((data_only ? fdatasync(fd_) : fsync(fd_)) != 0) SysFail(data_only ? "fdatasync" : "fsync", "");
  }

  void OpReopen() {
    const bool also_src = rng_.OneIn(2) && src_fd_ >= 0;
    // Sometimes the file grows at once: the RELEASE of close(2) goes in the
    // background, and the file system may still be handling it (committing
    // what is pending) when the write and the fstat after it arrive.
    const uint64_t size = model_.size();
    const uint64_t grow = rng_.OneIn(2) && size < opt_.max_len ? rng_.Range(1, std::min(page_, opt_.max_len - size)) : 0;
    static constexpr const char* kNotes[] = {"", "both files", "new fd first", "both files, new fd first"};
    Log(kReopen, size, grow, size, size + grow, 0, kNotes[(also_src ? 1 : 0) + (grow > 0 ? 2 : 0)]);
    if (grow > 0) {  // open before closing, so that the write follows the close at once
      const int old_fd = fd_;
      fd_ = OpenFile(opt_.path, 0);
      if (close(old_fd) != 0) SysFail("close", "");
      rng_.Fill(buf_.data(), grow);
      WriteFully(fd_, buf_.data(), size, grow);
      model_.resize(size + grow);
      std::memcpy(model_.data() + size, buf_.data(), grow);
      CheckSize();
      if (also_src) {
        CloseFile(&src_fd_);
        src_fd_ = OpenFile(src_path_, 0);
      }
    } else {
      Reopen(also_src);
    }
    CheckSize();
    CheckWhole("read after reopen");
    if (also_src) CheckSrcFile(/*whole=*/false);
  }

  void OpFullRead() {
    Log(kFullRead, 0, 0, 0, 0);
    CheckWhole("full read");
  }

  void OpSrcWrite() {
    const uint64_t before = src_model_.size();
    if (before > 0 && rng_.OneIn(8)) {
      const uint64_t to = rng_.Below(opt_.max_len + 1);
      Log(kSrcWrite, to, 0, 0, 0, 0, "scratch truncate");
      if (ftruncate(src_fd_, static_cast<off_t>(to)) != 0) SysFail("ftruncate", src_path_.c_str());
      src_model_.resize(to);
    } else {
      const uint64_t off = rng_.Below(std::min(opt_.max_len, before + page_));
      const uint64_t len = PickLen(opt_.max_len - off);
      rng_.Fill(buf_.data(), len);
      Log(kSrcWrite, off, len, 0, 0, 0, "scratch write");
      WriteFully(src_fd_, buf_.data(), off, len);
      if (off + len > src_model_.size()) src_model_.resize(off + len);
      std::memcpy(src_model_.data() + off, buf_.data(), len);
    }
    struct stat st;
    if (fstat(src_fd_, &st) != 0) SysFail("fstat", src_path_.c_str());
    if (static_cast<uint64_t>(st.st_size) != src_model_.size()) {
      Fail(UINT64_MAX, "scratch file st_size is %jd, expected %zu", static_cast<intmax_t>(st.st_size),
           src_model_.size());
    }
  }

  void OpZeroRange(bool keep_size) {
    const uint64_t before = model_.size();
    // KEEP_SIZE: mostly inside the file, sometimes starting past EOF.
    const uint64_t off = keep_size && !rng_.OneIn(4) ? PickOffset(std::max<uint64_t>(before, 1))
                                                     : PickOffset(opt_.max_len);
    const uint64_t len = PickLen(opt_.max_len - off);
    const uint64_t new_size = keep_size ? before : std::max(before, off + len);
    const uint64_t zero_end = std::min(new_size, off + len);
    Log(keep_size ? kZeroKeepSize : kZeroRange, off, len, std::min(off, new_size), zero_end);
    const int mode = FALLOC_FL_ZERO_RANGE | (keep_size ? FALLOC_FL_KEEP_SIZE : 0);
    if (fallocate(fd_, mode, static_cast<off_t>(off), static_cast<off_t>(len)) != 0) {
      SysFail(keep_size ? "fallocate(ZERO_RANGE|KEEP_SIZE)" : "fallocate(ZERO_RANGE)", "");
    }
    model_.resize(new_size);
    if (off < zero_end) std::memset(model_.data() + off, 0, zero_end - off);
    CheckEdges(std::min(off, new_size), std::max(zero_end, std::min(off, new_size)));
  }

  // An O_DIRECT range inside [0, limit): offset from PickOffset rounded down,
  // length from PickLen rounded up, both multiples of kDirectAlign. False
  // when limit holds no aligned block.
  bool PickDirectRange(uint64_t limit, uint64_t* off, uint64_t* len) {
    limit = AlignDown(limit, kDirectAlign);
    if (limit == 0) return false;
    *off = AlignDown(PickOffset(limit), kDirectAlign);
    const uint64_t max = std::min(limit - *off, AlignDown(opt_.max_op_len, kDirectAlign));
    *len = AlignUp(PickLen(max), kDirectAlign);
    return true;
  }

  // Runs requests on the O_DIRECT descriptor: one synchronous pread/pwrite
  // each, or (-A) all submitted at once as AIO and then waited for.
  void DirectIo(std::vector<Aio::Request>* reqs) {
    if (!opt_.aio) {
      for (auto& r : *reqs) {
        ssize_t n;
        do {
          n = r.write ? pwrite(dfd_, r.buf, r.len, static_cast<off_t>(r.off))
                      : pread(dfd_, r.buf, r.len, static_cast<off_t>(r.off));
        } while (n < 0 && errno == EINTR);
        r.res = n < 0 ? -errno : n;
      }
      return;
    }
    if ((errno = aio_.Submit(reqs)) != 0) SysFail("io_submit", "");
    if ((errno = aio_.Wait(reqs)) != 0) SysFail("io_getevents", "");
  }

  // Fails unless request r transferred `expect` bytes.
  void CheckDirectResult(const Aio::Request& r, uint64_t expect) {
    const char* what = opt_.aio ? (r.write ? "AIO O_DIRECT write" : "AIO O_DIRECT read")
                                : (r.write ? "O_DIRECT pwrite" : "O_DIRECT pread");
    if (r.res < 0) {
      errno = static_cast<int>(-r.res);
      SysFail(what, ("at " + std::to_string(r.off) + " len " + std::to_string(r.len)).c_str());
    }
    if (static_cast<uint64_t>(r.res) != expect) {
      Fail(r.off + std::min<uint64_t>(static_cast<uint64_t>(r.res), expect),
           "%s of %" PRIu64 " bytes at %" PRIu64 " returned %" PRId64 ", expected %" PRIu64 " (file size %zu)",
           what, r.len, r.off, r.res, expect, model_.size());
    }
  }

  // Applies completed direct writes to the model, then reads every written
  // range back through the page cache (buffered descriptor) and its edges.
  void FinishDirectWrites(const std::vector<Aio::Request>& reqs) {
    for (const auto& r : reqs) {
      if (!r.write) continue;
      if (r.off + r.len > model_.size()) model_.resize(r.off + r.len);
      std::memcpy(model_.data() + r.off, r.buf, r.len);
    }
    for (const auto& r : reqs) {
      if (!r.write) continue;
      CheckRange(r.off, r.off + r.len, "buffered read after O_DIRECT write");
      CheckEdges(r.off, r.off + r.len);
    }
  }

  void OpDirectWrite() {
    uint64_t off = 0, len = 0;
    PickDirectRange(opt_.max_len, &off, &len);
    // Sometimes the page cache holds the old bytes first: the write must
    // invalidate them.
    const bool prime = rng_.OneIn(3);
    std::vector<Aio::Request> reqs{{true, dfd_, dbufs_[0].data(), off, len, 0}};
    rng_.Fill(reqs[0].buf, len);
    Log(kDirectWrite, off, len, off, off + len, 0, prime ? "page cache filled first" : "");
    if (prime) CheckRange(off, off + len, "buffered read before O_DIRECT write");
    DirectIo(&reqs);
    CheckDirectResult(reqs[0], len);
    FinishDirectWrites(reqs);
  }

  void OpDirectRead() {
    const uint64_t size = model_.size();
    // Mostly inside the file (the page holding EOF included); sometimes anywhere.
    const uint64_t limit = size == 0 || rng_.OneIn(8) ? opt_.max_len : AlignUp(size, kDirectAlign);
    uint64_t off = 0, len = 0;
    PickDirectRange(limit, &off, &len);
    Log(kDirectRead, off, len, 0, 0);
    std::vector<Aio::Request> reqs{{false, dfd_, dbufs_[0].data(), off, len, 0}};
    DirectIo(&reqs);
    const uint64_t expect = off < size ? std::min(len, size - off) : 0;
    CheckDirectResult(reqs[0], expect);
    Compare(reqs[0].buf, off, expect, "O_DIRECT read");
  }

  // 2-4 AIO O_DIRECT requests on disjoint ranges, in flight together. Reads
  // end below EOF, so that a write extending the file cannot change what
  // they return.
  void OpAioBatch() {
    const uint64_t size = model_.size();
    const size_t want = rng_.Range(2, kMaxAio);
    std::vector<Aio::Request> reqs;
    std::string detail = " [";
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < want; ++i) {
      const bool write = rng_.OneIn(2) || AlignDown(size, kDirectAlign) == 0;
      uint64_t off = 0, len = 0;
      PickDirectRange(write ? opt_.max_len : AlignDown(size, kDirectAlign), &off, &len);
      bool overlaps = false;
      for (const auto& r : reqs) overlaps |= off < r.off + r.len && r.off < off + len;
      if (overlaps) continue;
      reqs.push_back({write, dfd_, dbufs_[reqs.size()].data(), off, len, 0});
      if (write) {
        rng_.Fill(reqs.back().buf, len);
        lo = std::min(lo, off);
        hi = std::max(hi, off + len);
      }
      detail += (reqs.size() > 1 ? " " : "") + std::string(write ? "w" : "r") + std::to_string(off) + "+" +
                std::to_string(len);
    }
    detail += "]";
    const bool prime = rng_.OneIn(3);
    Log(kAioBatch, 0, 0, lo == UINT64_MAX ? 0 : lo, hi, 0, prime ? "page cache filled first" : "");
    log_[(log_next_ - 1) % kLogSize].detail = detail;
    if (prime) {
      for (const auto& r : reqs)
        if (r.write) CheckRange(r.off, r.off + r.len, "buffered read before AIO write");
    }
    DirectIo(&reqs);
    for (const auto& r : reqs) CheckDirectResult(r, r.len);
    for (const auto& r : reqs)
      if (!r.write) Compare(r.buf, r.off, r.len, "AIO O_DIRECT read in a batch");
    FinishDirectWrites(reqs);
  }

  void PrintSummary(double secs) {
    std::printf("fsx: OK: %" PRIu64 " ops in %.1fs, seed %" PRIu64 ", final size %zu\n", op_no_, secs,
                opt_.seed, model_.size());
    std::printf("fsx: ops:");
    for (int op = 0; op < kNumOps; ++op) {
      if (weights_[op] > 0 || counts_[op] > 0) std::printf(" %s=%" PRIu64, kOpNames[op], counts_[op]);
    }
    std::printf("\n");
  }

  const Options opt_;
  Rng rng_;
  const uint64_t page_;
  const std::string src_path_;
  std::array<unsigned, kNumOps> weights_{};
  uint64_t total_weight_ = 0;
  int fd_ = -1;
  int src_fd_ = -1;
  int dfd_ = -1;                    // FILE opened with O_DIRECT (-Z)
  Aio aio_;                         // -A
  std::vector<AlignedBuf> dbufs_;   // O_DIRECT buffers, one per request in flight
  std::vector<uint8_t> model_;      // expected content of FILE
  std::vector<uint8_t> src_model_;  // expected content of FILE.fsxsrc
  std::vector<uint8_t> buf_;        // data to write
  std::vector<uint8_t> buf2_;       // data read back
  uint64_t op_no_ = 0;
  Op current_op_ = kWrite;
  bool final_check_ = false;
  std::array<LogEntry, kLogSize> log_{};
  uint64_t log_next_ = 0;
  std::array<uint64_t, kNumOps> counts_{};
};

void OnFatalSignal(int sig) {
  if (g_fsx != nullptr) g_fsx->CrashReport(sig);
  _exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  int c;
  while ((c = getopt(argc, argv, "N:S:l:o:b:cmpzFZAkvqh")) != -1) {
    bool ok = true;
    switch (c) {
      case 'N': ok = ParseSize(optarg, &opt.num_ops); break;
      case 'S': ok = ParseSize(optarg, &opt.seed); opt.seed_given = true; break;
      case 'l': ok = ParseSize(optarg, &opt.max_len) && opt.max_len > 0; break;
      case 'o': ok = ParseSize(optarg, &opt.max_op_len) && opt.max_op_len > 0; break;
      case 'b': ok = ParseSize(optarg, &opt.boundary); break;
      case 'c': opt.copy_range = false; break;
      case 'm': opt.mmap = false; break;
      case 'p': opt.punch_hole = false; break;
      case 'z': opt.zero_range = false; break;
      case 'F': opt.fallocate = false; break;
      case 'Z': opt.direct = true; break;
      case 'A': opt.aio = opt.direct = true; break;
      case 'k': opt.keep = true; break;
      case 'v': opt.verbose = true; break;
      case 'q': opt.quiet = true; break;
      case 'h': Usage(stdout); return 0;
      default: Usage(stderr); return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "e2e_fsx: bad value for -%c: %s\n", c, optarg);
      Usage(stderr);
      return 2;
    }
  }
  if (optind != argc - 1) {
    std::fprintf(stderr, "e2e_fsx: expected exactly one FILE argument\n");
    Usage(stderr);
    return 2;
  }
  opt.path = argv[optind];
  if (opt.max_len > (uint64_t{1} << 34)) {
    std::fprintf(stderr, "e2e_fsx: -l is limited to 16G (the model lives in memory)\n");
    return 2;
  }
  opt.max_op_len = std::min(opt.max_op_len, opt.max_len);
  if (opt.direct && (opt.max_len < 2 * kDirectAlign || opt.max_op_len < kDirectAlign)) {
    std::fprintf(stderr, "e2e_fsx: -Z/-A need -l of 8K or more and -o of 4K or more\n");
    return 2;
  }
  if (!opt.seed_given) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    opt.seed = (static_cast<uint64_t>(ts.tv_sec) * 1000003u) ^ static_cast<uint64_t>(ts.tv_nsec) ^
               (static_cast<uint64_t>(getpid()) << 20);
    opt.seed %= 1000000000;  // short enough to retype
  }

  std::printf("fsx: seed %" PRIu64 " file %s ops %" PRIu64 " maxlen %" PRIu64 " maxoplen %" PRIu64
              " boundary %" PRIu64 "%s%s%s%s%s%s\n",
              opt.seed, opt.path.c_str(), opt.num_ops, opt.max_len, opt.max_op_len, opt.boundary,
              opt.copy_range ? "" : " [no copy_file_range]", opt.mmap ? "" : " [no mmap]",
              opt.punch_hole ? "" : " [no punch hole]", opt.zero_range ? "" : " [no zero range]",
              opt.fallocate ? "" : " [no fallocate]",
              opt.aio ? " [O_DIRECT + AIO]" : opt.direct ? " [O_DIRECT]" : "");
  std::fflush(stdout);

  Fsx fsx(opt);
  g_fsx = &fsx;
  signal(SIGBUS, OnFatalSignal);
  signal(SIGSEGV, OnFatalSignal);
  return fsx.Run();
}
