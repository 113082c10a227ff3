// Operations, options and the usage text of e2e_fsx (tests/e2e/fsx.cc). A
// header, not a .cc: every *.cc in tests/e2e is its own program.
#pragma once

#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fsx_util.h"

namespace fsx {

inline void Usage(FILE* out) {
  std::fprintf(out,
      "usage: e2e_fsx [options] FILE\n"
      "Random data-integrity exerciser: runs random operations on FILE (created or\n"
      "truncated) and on the scratch file FILE.fsxsrc, checking each result against\n"
      "an in-memory model.\n"
      "\n"
      "  -N ops       number of operations (default 10000)\n"
      "  -S seed      random seed (default: from the clock; always printed)\n"
      "  -l maxlen    maximum file size (default 4M)\n"
      "  -o maxoplen  maximum length of one operation (default 256K)\n"
      "  -b boundary  bias offsets to just before/after multiples of this size,\n"
      "               e.g. the volume's block size (default 64K; 0 disables)\n"
      "  -c           no copy_file_range (ops copy and copy_self)\n"
      "  -m           no mmap (ops map_read and map_write)\n"
      "  -p           no fallocate(PUNCH_HOLE)\n"
      "  -z           no fallocate(ZERO_RANGE) (ops zero and zero_keep)\n"
      "  -F           no fallocate at all (implies -p and -z)\n"
      "  -Z           also O_DIRECT reads/writes through a second descriptor\n"
      "               (ops dwrite and dread; needs -l and -o of 4K or more)\n"
      "  -A           submit the O_DIRECT I/O as kernel AIO, several requests in\n"
      "               flight at once (op aio_batch); implies -Z\n"
      "  -k           keep FILE and FILE.fsxsrc on success (default: remove them)\n"
      "  -v           print every operation\n"
      "  -q           quiet: only the seed, failures and the summary\n"
      "  -h           this help\n"
      "Sizes accept a K, M or G suffix (binary). Exit status: 0 ok, 1 failure,\n"
      "2 bad arguments. On failure FILE is kept and FILE.fsxgood holds the\n"
      "expected content.\n");
}

enum Op {
  kWrite,
  kRead,
  kTruncate,
  kPunchHole,
  kFallocate,
  kFallocKeepSize,
  kCopy,
  kCopySelf,
  kMapRead,
  kMapWrite,
  kFsync,
  kReopen,
  kFullRead,
  kSrcWrite,
  kZeroRange,
  kZeroKeepSize,
  kDirectWrite,
  kDirectRead,
  kAioBatch,
  kNumOps,
};

constexpr std::array<const char*, kNumOps> kOpNames = {
    "write", "read",     "truncate", "punch", "falloc",    "falloc_keep", "copy",
    "copy_self", "map_read", "map_write", "fsync", "reopen", "full_read", "src_write",
    "zero",  "zero_keep", "dwrite",   "dread",   "aio_batch"};

// Relative frequencies; disabled operations get weight 0.
constexpr std::array<unsigned, kNumOps> kDefaultWeights = {
    /*write*/ 20, /*read*/ 15, /*truncate*/ 5, /*punch*/ 5, /*falloc*/ 3, /*falloc_keep*/ 2,
    /*copy*/ 6, /*copy_self*/ 4, /*map_read*/ 6, /*map_write*/ 6, /*fsync*/ 2, /*reopen*/ 1,
    /*full_read*/ 1, /*src_write*/ 3, /*zero*/ 3, /*zero_keep*/ 3,
    /*dwrite, dread, aio_batch: with -Z / -A only*/ 12, 10, 6};

struct Options {
  uint64_t num_ops = 10000;
  uint64_t seed = 0;
  bool seed_given = false;
  uint64_t max_len = 4 * kMiB;
  uint64_t max_op_len = 256 * kKiB;
  uint64_t boundary = 64 * kKiB;
  bool copy_range = true;
  bool mmap = true;
  bool punch_hole = true;
  bool fallocate = true;
  bool zero_range = true;
  bool direct = false;  // -Z
  bool aio = false;     // -A
  bool keep = false;
  bool verbose = false;
  bool quiet = false;
  std::string path;
};

// One executed operation, for the failure report.
struct LogEntry {
  uint64_t op_no = 0;
  Op op = kWrite;
  uint64_t off = 0;        // target offset (new size for truncate)
  uint64_t len = 0;        // requested length
  uint64_t src_off = 0;    // copy source offset
  uint64_t size_before = 0;
  uint64_t size_after = 0;
  uint64_t touch_lo = 0;   // byte range of FILE whose content the op may have changed
  uint64_t touch_hi = 0;
  const char* note = "";
  std::string detail;      // aio_batch: the requests
};

// One line of the operation log.
inline void PrintEntry(FILE* out, const LogEntry& e) {
  std::fprintf(out, "  %7" PRIu64 " %-11s ", e.op_no, kOpNames[e.op]);
  switch (e.op) {
    case kTruncate:
      std::fprintf(out, "to %" PRIu64, e.off);
      break;
    case kCopy:
    case kCopySelf:
      std::fprintf(out, "src %" PRIu64 " -> dst %" PRIu64 " len %" PRIu64, e.src_off, e.off, e.len);
      break;
    case kReopen:
      if (e.len > 0) std::fprintf(out, "then write at %" PRIu64 " len %" PRIu64, e.off, e.len);
      break;
    case kFsync:
    case kFullRead:
    case kAioBatch:
      break;
    default:
      std::fprintf(out, "off %" PRIu64 " len %" PRIu64 " (end %" PRIu64 ")", e.off, e.len,
                   e.off + e.len);
      break;
  }
  std::fprintf(out, "  size %" PRIu64 " -> %" PRIu64 "%s%s%s\n", e.size_before, e.size_after,
               *e.note ? "  " : "", e.note, e.detail.c_str());
}

}  // namespace fsx
