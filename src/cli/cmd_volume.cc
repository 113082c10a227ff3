// format, status, info, version.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <regex>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chunk/compression.h"
#include "chunk/layout.h"
#include "cli/build_info.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/mount_state.h"
#include "common/log.h"
#include "common/url.h"
#include "meta/meta.h"
#include "object/object_store.h"

namespace tessera::cli {

namespace {

std::string DefaultBucket(const std::string& name) {
  if (geteuid() == 0) return "/var/lib/tessera/" + name;
  const char* home = getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.tessera/local/" + name;
}

// Writes, reads back and deletes a probe object.
Status ProbeStore(object::ObjectStore* store) {
  RETURN_IF_ERROR(store->Create());
  const std::string key = "tessera_probe_" + meta::NewUuid(), body = "tessera probe";
  RETURN_IF_ERROR(store->Put(key, body));
  auto got = store->Get(key);
  if (!got.ok()) return got.status();
  if (*got != body) return Status::Err(EIO, "object store returned different bytes than written");
  return store->Delete(key);
}

}  // namespace

int Format(const FormatOptions& o) {
  static const std::regex kName("^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$");
  if (!std::regex_match(o.name, kName))
    return Fail(fmt::format("invalid volume name '{}': use 3-63 characters of a-z, 0-9 and '-'", o.name));
  if (o.block_size_kib < 64 || o.block_size_kib > 16384)
    return Fail(fmt::format("invalid --block-size {} KiB: must be between 64 and 16384", o.block_size_kib));
  if (!chunk::ParseCompression(o.compress).ok())
    return Fail(fmt::format("unsupported --compress '{}' (supported: none, lz4, zstd)", o.compress));
  if (o.storage != "file" && o.storage != "s3")
    return Fail(fmt::format("unsupported --storage '{}' (supported: file, s3)", o.storage));
  if (o.storage == "s3" && o.bucket.empty())
    return Fail("--storage s3 needs --bucket http(s)://HOST[:PORT]/BUCKET or http(s)://BUCKET.HOST[:PORT]");
  if (o.trash_days < 0) return Fail("--trash-days must not be negative");

  auto m = OpenMeta(o.meta_url, /*must_exist=*/false);
  if (!m.ok()) return Fail(m.status().ToString());
  auto existing = (*m)->Load();
  if (existing.ok() && !o.force)
    return Fail(fmt::format("volume '{}' is already formatted at {}; use --force to overwrite its settings",
                            existing->name, RedactUrl(o.meta_url)));

  meta::Format f;
  f.name = o.name;
  f.uuid = meta::NewUuid();
  f.storage = o.storage;
  f.bucket = o.bucket.empty() ? DefaultBucket(o.name) : o.bucket;
  if (f.storage == "file") {
    char* real = realpath(f.bucket.c_str(), nullptr);
    if (real) {
      f.bucket = real;
      free(real);
    } else if (f.bucket[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof(cwd))) f.bucket = std::string(cwd) + "/" + f.bucket;
    }
  }
  f.block_size = o.block_size_kib * 1024;
  f.compression = o.compress;
  f.trash_days = o.trash_days;
  f.capacity = o.capacity_gib << 30;
  f.inodes = o.inodes;

  const object::StoreOptions so = MakeStoreOptions(f.storage, f.bucket, &o.store);
  if (f.storage == "s3") {
    // The effective signing region is kept, so a mount needs no AWS_REGION.
    const char* env_region = getenv("AWS_REGION") ? getenv("AWS_REGION") : getenv("AWS_DEFAULT_REGION");
    f.region = !so.region.empty() ? so.region : env_region ? env_region : "";
  }
  auto store = object::Open(so);
  if (!store.ok()) return Fail(store.status().ToString());
  // A failing probe ends in one line with the last error; its retries stay quiet.
  SetLogLevel(LogLevel::kError);
  Status st = ProbeStore(store->get());
  if (!st.ok()) return Fail(fmt::format("object storage {} is not usable: {}", (*store)->Describe(), st.ToString()));

  st = (*m)->Init(f, o.force);
  if (!st.ok()) return Fail(st.ToString());
  auto loaded = (*m)->Load();
  if (!loaded.ok()) return Fail(loaded.status().ToString());
  std::printf("%s\n", loaded->ToJson().c_str());
  std::fprintf(stderr, "tessera: volume '%s' formatted (metadata %s, data %s)\n", loaded->name.c_str(),
               RedactUrl(o.meta_url).c_str(), (*store)->Describe().c_str());
  if (f.storage == "s3") {
    std::fprintf(stderr, "tessera: the s3 credentials are not stored in the volume: set AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY for 'tessera mount'\n");
  }
  return 0;
}

int ShowStatus(const std::string& meta_url) {
  auto m = OpenMeta(meta_url, /*must_exist=*/true);
  if (!m.ok()) return Fail(m.status().ToString());
  auto f = (*m)->Load();
  if (!f.ok()) return Fail(f.status().not_found() ? "no volume at " + RedactUrl(meta_url) + ": run 'tessera format' first"
                                                  : f.status().With(RedactUrl(meta_url)).ToString());
  auto sessions = (*m)->ListSessions();
  if (!sessions.ok()) return Fail(sessions.status().ToString());
  meta::StatFs fs;
  Status st = (*m)->StatFS(meta::Context::Root(), &fs);
  if (!st.ok()) return Fail(st.ToString());
  // Sessions whose client is gone (no heartbeat for the session timeout, or
  // a dead process on this host) are cleaned by the next mount or by any
  // client within a minute; until then they are shown as stale.
  const int64_t now = meta::Now().sec;
  nlohmann::ordered_json out;
  out["Setting"] = nlohmann::ordered_json::parse(f->ToJson());
  out["Usage"] = {{"UsedSpace", fs.total_space - fs.avail_space}, {"UsedInodes", fs.used_inodes}};
  if (f->trash_days > 0) {
    // What the trash holds (counted in the usage above, as df shows it).
    uint64_t files = 0, bytes = 0;
    st = WalkFiles(m->get(), std::string("/") + meta::kTrashName, meta::kTrashIno,
                   [&](const std::string&, meta::Ino, const meta::Attr& a) {
                     ++files;
                     bytes += a.length;
                     return Status::OK();
                   });
    if (st.code() == ENOENT) st = Status::OK();
    if (!st.ok()) return Fail(st.With("reading the trash").ToString());
    out["Trash"] = {{"Days", f->trash_days}, {"Files", files}, {"Bytes", bytes}};
  }
  out["Sessions"] = nlohmann::ordered_json::array();
  char hostbuf[256] = {0};
  gethostname(hostbuf, sizeof(hostbuf) - 1);
  const std::string host = hostbuf;
  for (const auto& s : *sessions) {
    nlohmann::ordered_json j;
    j["Sid"] = s.sid;
    j["Host"] = s.host;
    j["MountPoint"] = s.mount_point;
    j["ProcessID"] = s.pid;
    j["Version"] = s.version;
    j["Heartbeat"] = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time_t(s.heartbeat)));
    j["HeartbeatAge"] = fmt::format("{} s", std::max<int64_t>(0, now - s.heartbeat));
    j["Stale"] = meta::SessionDead(s, now, meta::kSessionTimeoutSec);
    // The writeback backlog (what an unmount would wait for): every client
    // stores it with its heartbeat (when it changes); a mount of this host
    // also publishes it every second (mount_state.h), which is fresher.
    auto ms = s.host == host ? ReadMountState(s.mount_point) : Result<MountState>(Status::Err(ENOENT, ""));
    if (ms.ok() && ms->pid == pid_t(s.pid)) {
      if (auto wb = ReadWritebackState(s.mount_point); wb.ok())
        j["Writeback"] = {{"StagedBlocks", wb->staged_blocks}, {"StagedBytes", wb->staged_bytes},
                          {"Uploaded", wb->uploaded}, {"Draining", wb->draining}};
      else
        j["Writeback"] = "off";
    } else if (s.load.writeback) {
      j["Writeback"] = {{"StagedBlocks", s.load.staged_blocks},
                        {"StagedBytes", s.load.staged_bytes},
                        {"AsOf", "the client's last heartbeat"}};
    } else {
      j["Writeback"] = "off";
    }
    out["Sessions"].push_back(std::move(j));
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int Info(const std::vector<std::string>& paths, bool recursive) {
  int rc = 0;
  for (const auto& path : paths) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      rc = Fail(fmt::format("{}: {}", path, strerror(errno)));
      continue;
    }
    auto state = MountStateOf(path);
    if (!state.ok()) {
      rc = Fail(state.status().ToString());
      continue;
    }
    auto m = OpenMeta(state->meta_url, /*must_exist=*/true);
    if (!m.ok()) return Fail(m.status().ToString());
    auto f = (*m)->Load();
    if (!f.ok()) return Fail(f.status().ToString());
    meta::Attr a;
    Status s = (*m)->GetAttr(meta::Context::Root(), st.st_ino, &a);
    if (!s.ok()) {
      rc = Fail(fmt::format("{}: {}", path, s.ToString()));
      continue;
    }
    std::printf("%s :\n  inode: %llu\n  mode: %o\n  nlink: %u\n  size: %llu\n", path.c_str(),
                (unsigned long long)st.st_ino, a.mode, a.nlink, (unsigned long long)a.length);
    if (auto wb = ReadWritebackState(state->mount_point); wb.ok())
      std::printf("  mount writeback: %llu block(s), %llu bytes staged locally, not uploaded yet\n",
                  (unsigned long long)wb->staged_blocks, (unsigned long long)wb->staged_bytes);
    if (a.IsDir() && recursive && InfoTree(path) != 0) rc = 1;
    if (!a.IsFile()) continue;
    uint64_t chunks = (a.length + chunk::kChunkSize - 1) / chunk::kChunkSize;
    std::printf("  chunks: %llu\n", (unsigned long long)chunks);
    for (uint32_t idx = 0; idx < chunks; ++idx) {
      std::vector<chunk::Slice> slices;
      s = (*m)->Read(st.st_ino, idx, &slices);
      if (!s.ok()) return Fail(s.ToString());
      std::printf("  chunk %u: %zu slice(s)\n", idx, slices.size());
      for (const auto& sl : slices) {
        std::printf("    slice id %llu pos %u size %u off %u len %u\n", (unsigned long long)sl.id, sl.pos, sl.size,
                    sl.off, sl.len);
        if (sl.id == 0) continue;
        for (uint32_t b = 0; b < chunk::BlockCount(sl.size, f->block_size); ++b)
          std::printf("      object %s\n", chunk::BlockKey(sl.id, b, chunk::BlockLen(sl.size, f->block_size, b)).c_str());
      }
    }
  }
  return rc;
}

std::string VersionText() {
  return fmt::format("tessera version {} (commit {}, {} build)", kVersion, kGitCommit, kBuildType);
}

int Version() {
  std::printf("%s\n", VersionText().c_str());
  return 0;
}

}  // namespace tessera::cli
