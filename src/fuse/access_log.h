// The .accesslog file: while at least one reader has it open, every FUSE
// request served is written to each reader as one line
//   2026.12.01 21:50:03.123456 [uid:0,gid:0,pid:1234] lookup (1,"a.txt"): OK <0.000012>
// (time of the reply, caller, operation, arguments, result — "OK [ino N]"
// for replies naming an inode — and seconds taken).
// With no reader, a request costs one relaxed atomic load. A reader that
// falls behind by more than kMaxBuffered bytes loses lines; the next read
// says how many.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "common/metrics.h"

namespace tessera::fuse {

class AccessLog {
 public:
  AccessLog();
  static constexpr size_t kMaxBuffered = 4u << 20;

  struct Reader {
    std::string buf;        // guarded by AccessLog::mu_
    uint64_t dropped = 0;   // lines lost since the last read; guarded by mu_
  };

  // Readers at once: each one waiting holds a FUSE request thread (a
  // LongWait: the request loops add threads beside it).
  static constexpr int kMaxReaders = 8;

  bool active() const { return readers_count_.load(std::memory_order_relaxed) > 0; }
  // nullptr when kMaxReaders readers have it open already.
  std::shared_ptr<Reader> Open();
  void Close(const std::shared_ptr<Reader>& reader);
  // Appends line (with its '\n') for every reader.
  void Write(const std::string& line);
  // Up to `size` bytes of whole lines, waiting while there are none;
  // returns "" only when interrupted() says the request was interrupted
  // (or the mount is going away).
  std::string Read(Reader* reader, size_t size, const std::function<bool()>& interrupted);

 private:
  std::atomic<int> readers_count_{0};
  metrics::Gauge* const readers_gauge_;  // tessera_accesslog_readers
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<Reader>> readers_;  // guarded by mu_
};

}  // namespace tessera::fuse
