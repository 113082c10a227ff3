#include "vfs/meta_backup.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "meta/dump.h"

namespace tessera::vfs {

Status ListBackups(object::ObjectStore* store, std::vector<object::ObjectInfo>* out) {
  out->clear();
  std::string after;
  for (;;) {
    std::vector<object::ObjectInfo> page;
    bool more = false;
    RETURN_IF_ERROR(store->List(kBackupPrefix, after, 1000, &page, &more));
    for (auto& o : page) out->push_back(std::move(o));
    if (!more || page.empty()) break;
    after = out->back().key;
  }
  return Status::OK();  // keys hold the time: key order is age order
}

Result<std::string> BackupMeta(meta::Meta* meta, object::ObjectStore* store, size_t keep,
                               const std::atomic<bool>* cancel, uint64_t* inodes) {
  const char* tmpdir = std::getenv("TMPDIR");
  static std::atomic<int> seq{0};
  const std::string tmp = fmt::format("{}/tessera-backup-{}-{}.json.gz", tmpdir != nullptr ? tmpdir : "/tmp", getpid(),
                                      seq.fetch_add(1));
  // The temporary file goes whatever happens (a failed or cancelled dump
  // must not leave one per attempt).
  struct RemoveOnExit {
    const std::string& path;
    ~RemoveOnExit() { ::unlink(path.c_str()); }
  } remove_tmp{tmp};
  meta::DumpStats stats;
  {
    ASSIGN_OR_RETURN(auto file, meta::DumpFile::Create(tmp, true));
    meta::DumpOptions opts;
    opts.cancel = cancel;
    RETURN_IF_ERROR(meta::Dump(meta, opts, [&](std::string_view line) { return file->Write(line); }, &stats));
    RETURN_IF_ERROR(file->Close());
  }
  std::string body;
  {
    std::ifstream in(tmp, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    body = std::move(ss).str();
    if (!in.good() && !in.eof()) return Status::Err(EIO, "reading back " + tmp);
  }
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d-%H%M%S", &tm);
  const std::string key = fmt::format("{}{}.json.gz", kBackupPrefix, when);
  RETURN_IF_ERROR(store->Put(key, body).With("storing the backup " + key));
  if (inodes != nullptr) *inodes = stats.inodes;

  std::vector<object::ObjectInfo> all;
  RETURN_IF_ERROR(ListBackups(store, &all).With("listing the backups to prune"));
  for (size_t i = 0; i + keep < all.size(); ++i) {
    if (all[i].key == key) continue;
    RETURN_IF_ERROR(store->Delete(all[i].key).With("removing the old backup " + all[i].key));
  }
  return key;
}

}  // namespace tessera::vfs
