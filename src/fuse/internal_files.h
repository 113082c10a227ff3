// The mount's internal files in the root of the volume: PREFIX + "stats"
// (the metrics, Prometheus text format), "accesslog" (access_log.h) and
// "config" (the mount's options as JSON, secrets masked); PREFIX is "." by
// default (--internal-prefix). They are not in the volume: directory
// listings do not show them and a lookup by name finds them. Only root may
// open them, for reading, unless --internal-files-public.
//
// Name clashes: a real entry of the root always wins. A lookup of an
// internal name asks the engine first; only when the volume has no such
// entry is the internal file answered, and to other users than root (unless
// public) not at all, so they can create a file of that name. Their kernel
// cache timeouts are 0, so which one a name means is decided at each lookup.
// Root reaches the internal files under another prefix when a real file
// takes the name (docs/operations.md "Internal files").
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "fuse/access_log.h"
#include "meta/meta.h"

namespace tessera::fuse {

class InternalFiles {
 public:
  enum Kind : meta::Ino { kStats = 1, kAccessLog = 2, kConfig = 3 };
  // Far above any inode number a volume hands out.
  static constexpr meta::Ino kBase = meta::Ino(1) << 62;
  static bool IsInternal(meta::Ino ino) { return ino > kBase && ino <= kBase + kConfig; }

  InternalFiles(std::string prefix, bool everyone, std::function<std::string()> stats, std::string config_json);

  // The inode of the internal file named `name` in the root, or 0.
  meta::Ino Find(const std::string& name) const;
  // Whether ctx sees the internal files at all.
  bool Visible(const meta::Context& ctx) const { return everyone_ || ctx.uid == 0; }
  meta::Attr AttrOf(meta::Ino ino) const;

  struct Handle {
    Kind kind = kStats;
    std::string content;                      // stats, config: a snapshot taken at open
    std::shared_ptr<AccessLog::Reader> reader;  // accesslog
  };
  // EACCES unless Visible(ctx) and read-only.
  Status Open(const meta::Context& ctx, meta::Ino ino, int flags, Handle** out);
  // stats/config: the snapshot's bytes at off; accesslog: the lines logged
  // since the last read, waiting for one ("" when interrupted).
  std::string Read(Handle* h, uint64_t off, size_t size, const std::function<bool()>& interrupted);
  void Release(Handle* h);

  AccessLog& access_log() { return log_; }

 private:
  const std::string prefix_;
  const bool everyone_;
  const std::function<std::string()> stats_;
  const std::string config_json_;
  const meta::Timespec started_;
  AccessLog log_;
};

}  // namespace tessera::fuse
