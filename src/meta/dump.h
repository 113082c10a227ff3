// The metadata dump: a volume's settings, counters and whole tree as JSON
// lines (docs/format.md, section 5), written and read as a stream in bounded
// memory. `tessera dump`/`load` use it to back up a volume and to move it
// between engines (SQLite, Redis, PostgreSQL) with the same inode numbers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "meta/meta.h"

namespace tessera::meta {

constexpr int kDumpVersion = 1;

struct DumpStats {
  uint64_t inodes = 0;
  uint64_t entries = 0;
  uint64_t slices = 0;
  uint64_t lines = 0;
};
using DumpProgress = std::function<void(const DumpStats&)>;

// Receives one line (without its newline).
using LineWriter = std::function<Status(std::string_view line)>;
// Gives the next line (without its newline); false at the end of the input.
using LineReader = std::function<Result<bool>(std::string* line)>;

struct DumpOptions {
  std::string subdir;  // a directory inside the volume to dump instead of the root ("" or "/": all)
  const std::atomic<bool>* cancel = nullptr;  // set: stop with ECANCELED
  DumpProgress progress;                      // called every few thousand records
};

// Writes the dump of `meta` to out. One snapshot on sqlite3 and postgres;
// on Redis each inode is read atomically (docs/format.md, section 5).
Status Dump(Meta* meta, const DumpOptions& opts, const LineWriter& out, DumpStats* stats);

struct LoadOptions {
  const std::atomic<bool>* cancel = nullptr;
  DumpProgress progress;
  size_t batch_records = 1000;  // records per write transaction
};

// Loads a dump into an empty engine. Fails (EEXIST) if the engine holds any
// record; on any error after the first write the engine is emptied again, so
// a failed load leaves nothing behind. The settings are written last: until
// the load succeeds there is no volume at META-URL. *format receives them.
Status Load(Meta* meta, const LoadOptions& opts, const LineReader& in, DumpStats* stats, Format* format);

// A dump file or stream: gzip-compressed when `gzip` (writing) or when its
// content is (reading: detected, so plain and gzipped dumps both load).
// path "-" is stdout / stdin. A file is written under a temporary name and
// renamed when Close succeeds, so a failed dump leaves no file.
class DumpFile {
 public:
  static Result<std::unique_ptr<DumpFile>> Create(const std::string& path, bool gzip);
  static Result<std::unique_ptr<DumpFile>> Open(const std::string& path);
  ~DumpFile();  // without a successful Close: the temporary file is removed
  Status Write(std::string_view line);  // appends line + '\n'
  Result<bool> Read(std::string* line);
  Status Close();

 private:
  DumpFile() = default;
  void* gz_ = nullptr;  // gzFile
  std::string path_, tmp_;
  bool writing_ = false;
  std::string buf_;
};

}  // namespace tessera::meta
