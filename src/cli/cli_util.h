// Helpers shared by the commands.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/parallel.h"
#include "common/status.h"
#include "meta/meta.h"
#include "object/object_store.h"

namespace tessera::cli {

// An opened volume: its engine, settings and object store.
struct Volume {
  std::unique_ptr<meta::Meta> meta;
  meta::Format format;
  std::unique_ptr<object::ObjectStore> store;
};
// Opens the volume at META-URL; ENOENT with a clear message when there is none.
Result<Volume> OpenVolume(const std::string& meta_url, const meta::OpenOptions& options = {});

// The object store options for storage/bucket with the s3 flags; region is
// the volume's when flags is null (mount: credentials from the environment).
object::StoreOptions MakeStoreOptions(const std::string& storage, const std::string& bucket,
                                      const StoreFlags* flags, const std::string& region = "");

// Can the volume's bucket be used (by gc, destroy, fsck --check-objects)?
// A local bucket must be an existing directory (it is not made: a bucket
// that vanished is news, not an empty bucket); a server must answer a HEAD
// of a key that does not exist with "not found". The error names the store.
Status CheckBucket(const Volume& v);

// The live sessions of the volume (those of dead clients are cleaned first),
// each named on stderr; tools that need the volume unmounted refuse when
// the list is not empty.
Result<size_t> ListLiveSessions(meta::Meta* m);

// Prints "tessera: MSG" on stderr and returns exit code 1.
int Fail(const std::string& msg);

// Opens the metadata engine of META-URL. With must_exist, a URL naming a
// local database that does not exist yet is ENOENT ("no volume ...") and
// nothing is created.
Result<std::unique_ptr<meta::Meta>> OpenMeta(const std::string& url, bool must_exist,
                                             const meta::OpenOptions& options = {});

// Calls fn for every regular file under `path` (inode root, a directory or
// a file), breadth first, reading directories a page at a time through the
// engine (no mount needed). path is the volume-relative path of root ("/"
// for the root); fn gets each file's path in the volume. An error of fn or
// of the engine stops the walk and is returned.
using FileVisitor = std::function<Status(const std::string& path, meta::Ino ino, const meta::Attr& attr)>;
Status WalkFiles(meta::Meta* m, const std::string& path, meta::Ino root, const FileVisitor& fn);
// The inode at `path` inside the volume ("/" the root).
Result<meta::Ino> ResolvePath(meta::Meta* m, const std::string& path);


// "90", "90s", "30m", "1h", "2d" -> seconds (0 allowed); EINVAL with a
// message otherwise.
Result<int64_t> ParseDuration(const std::string& s);

// "12.3 MiB", "512 bytes".
std::string HumanSize(uint64_t n);

// Progress of a long-running command on stderr: on a terminal a line
// rewritten in place at most once a second; otherwise a plain line every
// 10 seconds (logs of cron jobs stay short). Nothing for the first second
// (or 10): a quick command shows no progress.
class Progress {
 public:
  void Show(const std::string& text, bool force = false);
  // Ends the terminal line.
  void Done();

 private:
  const bool tty_ = IsTty();
  std::chrono::steady_clock::time_point last_{};  // the last line, or the first call
  bool printed_ = false;
  static bool IsTty();
};

}  // namespace tessera::cli
