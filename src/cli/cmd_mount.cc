// mount and umount.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "chunk/chunk_store.h"
#include "chunk/compression.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/mount_state.h"
#include "cli/system_mount.h"
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/metrics_export.h"
#include "common/url.h"
#include "fuse/fuse_adapter.h"
#include "meta/meta.h"
#include "meta/metrics_meta.h"
#include "object/object_store.h"
#include "vfs/control.h"
#include "vfs/vfs.h"

namespace tessera::cli {

namespace {

constexpr long kFuseSuperMagic = 0x65735546;
constexpr double kMaxCacheTimeout = 365 * 86400;

std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) ? std::string(cwd) + "/" + path : path;
}

// sqlite3://relative/path made absolute (other URLs are not paths).
std::string AbsoluteLocalUrl(const std::string& url) {
  const std::string prefix = "sqlite3://";
  if (url.rfind(prefix, 0) != 0) return url;
  return prefix + AbsolutePath(url.substr(prefix.size()));
}

std::string DeadMountMessage(const std::string& mp) {
  return fmt::format("{} is a dead mount: its client exited without unmounting (Transport endpoint is not "
                     "connected); unmount it first with 'tessera umount {}'",
                     mp, mp);
}

// Entries of a directory other than "." and ".." (-1 if unreadable).
int CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  closedir(d);
  return n;
}

// "pid 123 (bash: current directory), pid 456 (cat: open file)" for the
// processes that use something under mp, at most `max` of them; "" if none.
std::string ProcessesUsing(const std::string& mp, size_t max = 5) {
  std::vector<std::string> found;
  size_t total = 0;
  auto under = [&](const std::string& link) {
    char buf[4096];
    ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return false;
    std::string_view target(buf, size_t(n));
    return target == mp || (target.size() > mp.size() && target.substr(0, mp.size()) == mp && target[mp.size()] == '/');
  };
  DIR* proc = opendir("/proc");
  if (!proc) return "";
  while (dirent* e = readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string base = "/proc/" + pid;
    std::string why;
    if (under(base + "/cwd")) why = "current directory";
    else if (under(base + "/root")) why = "root directory";
    else if (under(base + "/exe")) why = "running program";
    if (why.empty()) {
      if (DIR* fds = opendir((base + "/fd").c_str())) {
        while (dirent* f = readdir(fds)) {
          if (f->d_name[0] != '.' && under(base + "/fd/" + f->d_name)) {
            why = "open file";
            break;
          }
        }
        closedir(fds);
      }
    }
    if (why.empty()) continue;
    ++total;
    if (found.size() >= max) continue;
    std::string comm;
    if (FILE* f = fopen((base + "/comm").c_str(), "r")) {
      char buf[64] = {0};
      if (fgets(buf, sizeof(buf), f)) comm = buf;
      fclose(f);
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    }
    found.push_back(fmt::format("pid {} ({}: {})", pid, comm, why));
  }
  closedir(proc);
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : ", ") + f;
  if (total > found.size()) out += fmt::format(" and {} more", total - found.size());
  return out;
}

std::string DefaultLogFile() {
  if (geteuid() == 0) return "/var/log/tessera.log";
  const char* home = getenv("HOME");
  std::string dir = std::string(home ? home : "/tmp") + "/.tessera";
  mkdir(dir.c_str(), 0700);
  return dir + "/tessera.log";
}

std::string DefaultCacheDir() {
  if (geteuid() == 0) return "/var/cache/tessera";
  const char* home = getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.tessera/cache";
}

std::string Bytes(uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.1f} GiB", double(n) / double(1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(n) / double(1ull << 20));
  return fmt::format("{} bytes", n);
}

// --writeback: publishes the upload backlog (mount_state.h) about once a
// second while the mount is served, for `info` and `umount --flush`.
class WritebackReporter {
 public:
  WritebackReporter(chunk::ChunkStore* chunks, std::string mount_point)
      : chunks_(chunks), mount_point_(std::move(mount_point)) {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu_);
      while (!stop_) {
        lk.unlock();
        Publish(false);
        lk.lock();
        cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; });
      }
    });
  }
  ~WritebackReporter() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Publish(bool draining) {
    chunk::ChunkStats s = chunks_->stats();
    (void)WriteWritebackState(mount_point_, WritebackState{s.staged_blocks, s.staged_bytes, s.staged_uploads, draining});
  }

 private:
  chunk::ChunkStore* const chunks_;
  const std::string mount_point_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// The mount's .config file: its options and volume, secrets masked.
std::string ConfigJson(const MountOptions& o, const std::string& mount_point, const meta::Format& f,
                       const std::string& cache_dir) {
  nlohmann::ordered_json j;
  j["version"] = TESSERA_VERSION;
  j["pid"] = getpid();
  j["meta_url"] = RedactUrl(o.meta_url);
  j["mount_point"] = mount_point;
  j["log_file"] = o.background ? o.log_file : "";
  j["volume"] = {{"name", f.name},
                 {"uuid", f.uuid},
                 {"storage", f.storage},
                 {"bucket", RedactUrl(f.bucket)},
                 {"block_size", f.block_size},
                 {"compression", f.compression},
                 {"trash_days", f.trash_days},
                 {"capacity", f.capacity},
                 {"inodes", f.inodes}};
  j["options"] = {{"attr_cache", o.attr_cache},
                  {"entry_cache", o.entry_cache},
                  {"dir_entry_cache", o.dir_entry_cache},
                  {"negative_entry_cache", o.negative_entry_cache},
                  {"coherent_cache", o.coherent_cache},
                  {"buffer_size_mib", o.buffer_size_mib},
                  {"max_uploads", o.max_uploads},
                  {"cache_dir", cache_dir},
                  {"cache_size_mib", o.cache_size_mib},
                  {"free_space_ratio", o.free_space_ratio},
                  {"cache_eviction", o.cache_eviction},
                  {"mem_cache_size_mib", o.mem_cache_mib},
                  {"max_readahead_mib", o.max_readahead_mib},
                  {"prefetch", o.prefetch},
                  {"compact_threshold", o.compact_threshold},
                  {"writeback", o.writeback},
                  {"upload_delay", o.upload_delay},
                  {"commit_delay_ms", o.commit_delay_ms},
                  {"writeback_cache", o.writeback_cache},
                  {"io_uring", o.io_uring},
                  {"enable_xattr", o.enable_xattr},
                  {"enable_cap", o.enable_cap},
                  {"allow_other", !o.no_allow_other},
                  {"default_permissions", !o.non_default_permission},
                  {"session_timeout", o.session_timeout},
                  {"backup_meta", o.backup_meta},
                  {"backup_keep", o.backup_keep},
                  {"metrics", o.metrics},
                  {"metrics_labels", o.metrics_labels},
                  {"internal_prefix", o.internal_prefix},
                  {"internal_files_public", o.internal_files_public},
                  {"fuse_options", o.fuse_options},
                  {"debug", o.debug}};
  return j.dump(2) + "\n";
}

// A mount holds many files open (FUSE worker channels, the bucket's block
// files kept for ranged reads, the disk cache, engine connections): the soft
// limit on open files goes up to the hard one (at most 65,536), as the
// system allows any process to do. A failure leaves the limit as it was.
void RaiseOpenFileLimit() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t want = rl.rlim_max == RLIM_INFINITY ? 65536 : std::min<rlim_t>(rl.rlim_max, 65536);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rl.rlim_cur = want;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Serves the mount; reports the mount result through `report` (once).
int Serve(const MountOptions& o, const std::string& mount_point, const std::function<void(const Status&)>& report) {
  RaiseOpenFileLimit();  // before the stores open (object::FileStore sizes its table of open files by it)
  RemoveWritebackState(mount_point);  // a flush request left by an earlier client
  meta::OpenOptions meta_options;
  meta_options.commit_delay = std::chrono::microseconds(int64_t(o.commit_delay_ms * 1000));
  auto vol = OpenVolume(o.meta_url, meta_options);
  if (!vol.ok()) {
    report(vol.status());
    return 1;
  }
  vol->meta = std::make_unique<meta::MetricsMeta>(std::move(vol->meta));
  auto user_labels = metrics::ParseLabels(o.metrics_labels);
  if (!user_labels.ok()) {
    report(user_labels.status());
    return 1;
  }
  metrics::Labels labels = {{"vol_name", vol->format.name}, {"mp", mount_point}};
  labels.insert(labels.end(), user_labels->begin(), user_labels->end());
  std::unique_ptr<metrics::Exporter> exporter;
  if (!o.metrics.empty()) {
    auto started = metrics::Exporter::Start(o.metrics, labels);
    if (!started.ok()) {
      report(started.status());
      return 1;
    }
    exporter = std::move(started).value();
    LOG_INFO("metrics: http://{}/metrics", o.metrics);
  }
  chunk::StoreConfig sc;
  sc.block_size = vol->format.block_size;
  auto compression = chunk::ParseCompression(vol->format.compression);
  if (!compression.ok()) {
    report(compression.status().With("volume settings"));
    return 1;
  }
  sc.compression = *compression;
  sc.mem_cache_bytes = o.mem_cache_mib << 20;
  // A block file just written to a local bucket is in the OS page cache: the
  // memory cache keeps only blocks read (StoreConfig::cache_written).
  sc.cache_written = vol->format.storage != "file";
  // File storage needs no read cache (the data is local already), so its
  // default cache dir is off, except as --writeback's staging area.
  std::string cache_dir = o.cache_dir;
  const bool read_cache = !cache_dir.empty() || vol->format.storage != "file";
  if (cache_dir.empty() && (vol->format.storage != "file" || o.writeback)) cache_dir = DefaultCacheDir();
  if (o.writeback && cache_dir == "none") {
    report(Status::Err(EINVAL, "--writeback stages blocks in the cache directory: it cannot be used with --cache-dir none"));
    return 1;
  }
  if (cache_dir != "none" && !cache_dir.empty()) {
    mkdir(cache_dir.c_str(), 0755);
    sc.cache_dir = cache_dir;
    sc.cache_volume = vol->format.uuid;
    sc.cache_size = read_cache ? o.cache_size_mib << 20 : 0;
    sc.free_space_ratio = o.free_space_ratio;
    auto eviction = chunk::ParseCacheEviction(o.cache_eviction);
    if (!eviction.ok()) {
      report(Status::Err(EINVAL, "--cache-eviction must be lru or 2-random"));
      return 1;
    }
    sc.cache_eviction = *eviction;
  }
  sc.writeback = o.writeback;
  sc.max_uploads = o.max_uploads;
  sc.upload_delay_ms = uint32_t(o.upload_delay * 1000);
  Status valid = sc.Validate();
  if (!valid.ok()) {
    report(valid);
    return 1;
  }
  chunk::ChunkStore chunks(vol->store.get(), sc);
  std::unique_ptr<WritebackReporter> reporter;
  if (o.writeback) {
    if (!chunks.writeback()) {
      report(chunks.writeback_status().With("--writeback"));
      return 1;
    }
    chunk::ChunkStats cs = chunks.stats();
    LOG_INFO("writeback: blocks are staged in {}/{}/rawstaging, then uploaded by {} workers{}", cache_dir,
             vol->format.uuid, o.max_uploads,
             cs.staged_blocks ? fmt::format(" ({} block(s) staged by an earlier client are uploading)", cs.staged_blocks)
                              : "");
    reporter = std::make_unique<WritebackReporter>(&chunks, mount_point);
  }
  vfs::Config cfg;
  cfg.attr_timeout = o.attr_cache;
  cfg.entry_timeout = o.entry_cache;
  cfg.dir_entry_timeout = o.dir_entry_cache;
  cfg.negative_timeout = o.negative_entry_cache;
  cfg.buffer_size = size_t(o.buffer_size_mib) << 20;
  cfg.file_buffer_limit = std::min(cfg.file_buffer_limit, std::max<size_t>(cfg.buffer_size / 4, 1 << 20));
  cfg.max_uploads = o.max_uploads;
  cfg.compact_threshold = o.compact_threshold;
  cfg.max_readahead = o.max_readahead_mib << 20;
  cfg.prefetch = o.prefetch > 0;
  cfg.enable_cap = o.enable_cap;
  cfg.mount_point = mount_point;
  cfg.session_timeout_s = o.session_timeout;
  auto backup_interval = ParseDuration(o.backup_meta);  // checked by the parser
  cfg.backup_interval_s = backup_interval.ok() ? *backup_interval : 3600;
  cfg.backup_keep = o.backup_keep;
  cfg.heartbeat_interval_s = std::clamp(o.session_timeout / 5, 1, 10);
  if (vol->format.trash_days > 0) {
    Status trash = vol->meta->EnsureTrash();
    if (!trash.ok()) LOG_WARN("the trash is off for this mount's removals: {}", trash.ToString());
  }
  vfs::Vfs vfs(vol->meta.get(), &chunks, cfg);
  Status st = vfs.Start();
  if (!st.ok()) {
    report(st.With("cannot start session"));
    return 1;
  }
  fuse::MountOptions fo;
  fo.mount_point = mount_point;
  fo.fs_name = o.fs_name.empty() ? "tessera:" + vol->format.name : o.fs_name;
  fo.allow_other = !o.no_allow_other;
  fo.default_permissions = !o.non_default_permission;
  fo.debug = o.debug;
  fo.writeback_cache = o.writeback_cache;
  fo.io_uring = o.io_uring;
  fo.xattrs = o.enable_xattr || o.enable_cap;
  auto extra = fuse::CheckOptions(o.fuse_options);  // checked by Mount: the options libfuse takes
  if (extra.ok()) fo.extra = std::move(extra).value();
  fo.internal_prefix = o.internal_prefix;
  fo.internal_files_public = o.internal_files_public;
  fo.config_json = ConfigJson(o, mount_point, vol->format, sc.cache_dir);
  fo.metrics_labels = labels;
  fo.coherent_timeout = o.coherent_cache;
  fo.timeouts_given = o.cache_timeouts_given;
  LOG_INFO("mounting volume {} ({}) at {}; data in {}", vol->format.name, RedactUrl(o.meta_url), mount_point,
           vol->store->Describe());
  LOG_INFO("caches: attributes {}s, entries {}s, directory entries {}s, negative lookups {}s; write buffer {} MiB; "
           "memory block cache {} MiB; disk cache {}; read-ahead {} MiB{}",
           o.attr_cache, o.entry_cache, o.dir_entry_cache, o.negative_entry_cache, o.buffer_size_mib, o.mem_cache_mib,
           sc.cache_dir.empty() ? std::string("off")
                                : fmt::format("{} ({} MiB)", sc.cache_dir, sc.cache_size >> 20),
           o.max_readahead_mib, o.writeback ? "; writeback on" : "");
  vfs::ControlServer control(&vfs);
  st = fuse::Serve(&vfs, fo, [&](const Status& mounted) {
    if (mounted.ok()) {
      Status ws = WriteMountState(MountState{mount_point, getpid(), o.meta_url});
      if (!ws.ok()) LOG_WARN("cannot write client state: {}", ws.ToString());
      auto sock = ControlSocketPath(mount_point);
      Status cs = sock.ok() ? control.Start(*sock) : sock.status();
      if (!cs.ok()) LOG_WARN("{}: tessera rmr cannot reach this mount", cs.ToString());
      // umount(8) then runs umount.tessera, which waits for this client.
      Status us = RegisterUtab(fo.fs_name, mount_point, o.utab_options);
      if (!us.ok()) LOG_WARN("{}: a plain umount will not wait for this client", us.ToString());
    }
    report(mounted);
  });
  control.Stop();
  UnregisterUtab(mount_point);
  RemoveMountState(mount_point);
  vfs.Stop();
  if (reporter) {
    reporter->Stop();
    chunk::ChunkStats cs = chunks.stats();
    if (FlushRequested(mount_point)) {
      LOG_INFO("umount --flush: uploading {} staged block(s), {}", cs.staged_blocks, Bytes(cs.staged_bytes));
      reporter->Publish(true);
      chunks.DrainStaged([&](const chunk::ChunkStats&) { reporter->Publish(true); });
      LOG_INFO("umount --flush: every staged block is uploaded");
    } else if (cs.staged_blocks > 0) {
      LOG_INFO("{} staged block(s), {}, not uploaded yet: they stay in the cache directory and the next mount "
               "uploads them (umount --flush waits for them)",
               cs.staged_blocks, Bytes(cs.staged_bytes));
    }
  }
  RemoveWritebackState(mount_point);
  if (!st.ok()) {
    LOG_ERROR("{}", st.ToString());
    return 1;
  }
  LOG_INFO("unmounted {}", mount_point);
  return 0;
}

// --update-fstab: the line that mounts this volume here at boot, in place of
// any line for this mount point; and the mount(8) helpers it needs.
Status WriteFstabLine(const MountOptions& o, const std::string& mp) {
  if (geteuid() != 0) return Status::Err(EPERM, "--update-fstab changes /etc/fstab: run it as root");
  if (RedactUrl(o.meta_url) != o.meta_url)
    return Status::Err(EINVAL, "--update-fstab writes no password into /etc/fstab (every user can read it): take "
                               "it out of META-URL and put META_PASSWORD=... in a file only root reads, named "
                               "by the mount option env-file=PATH (docs/operations.md)");
  const std::string url = AbsoluteLocalUrl(o.meta_url);
  if (url.find_first_of(" \t") != std::string::npos || mp.find_first_of(" \t") != std::string::npos)
    return Status::Err(EINVAL, "--update-fstab: META-URL and MOUNTPOINT must not contain spaces");
  const std::string opts = "_netdev" + (o.fstab_options.empty() ? "" : "," + o.fstab_options);
  const std::string line = fmt::format("{} {} tessera {} 0 0", url, mp, opts);
  RETURN_IF_ERROR(UpdateFstab("/etc/fstab", mp, line));
  std::fprintf(stderr, "tessera: /etc/fstab: %s\n", line.c_str());
  auto made = EnsureMountHelpers();
  if (!made.ok()) return made.status().With("--update-fstab");
  for (const auto& path : *made) std::fprintf(stderr, "tessera: created %s (mount -t tessera runs it)\n", path.c_str());
  return Status::OK();
}

}  // namespace

int Mount(const MountOptions& o) {
  char* real = realpath(o.mount_point.c_str(), nullptr);
  if (!real && errno == ENOTCONN) return Fail(DeadMountMessage(o.mount_point));
  if (!real) return Fail(fmt::format("mount point {} does not exist", o.mount_point));
  std::string mp = real;
  free(real);
  struct stat st;
  if (stat(mp.c_str(), &st) != 0) {
    if (errno == ENOTCONN) return Fail(DeadMountMessage(mp));
    return Fail(fmt::format("mount point {}: {}", mp, strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return Fail(fmt::format("mount point {} is not a directory", mp));
  if (IsMountPoint(mp)) return Fail(fmt::format("{} is already a mount point (unmount it first)", mp));
  if (!o.nonempty) {
    const int entries = CountEntries(mp);
    if (entries > 0)
      return Fail(fmt::format("mount point {} is not empty: its {} entr{} would be hidden while the volume is "
                              "mounted; use an empty directory, or --nonempty to mount over them",
                              mp, entries, entries == 1 ? "y" : "ies"));
  }
  for (auto [name, value] : {std::pair{"--attr-cache", o.attr_cache}, {"--entry-cache", o.entry_cache},
                             {"--dir-entry-cache", o.dir_entry_cache}, {"--negative-entry-cache", o.negative_entry_cache}}) {
    // Finite, and within what the kernel can represent (a year is plenty).
    if (!std::isfinite(value) || value < 0 || value > kMaxCacheTimeout)
      return Fail(fmt::format("{} must be a finite, non-negative number of seconds (at most {}), not {}", name,
                              kMaxCacheTimeout, value));
  }
  if (auto checked = fuse::CheckOptions(o.fuse_options); !checked.ok()) return Fail(checked.status().message());
  if (o.cache_eviction != "lru" && o.cache_eviction != "2-random")
    return Fail(fmt::format("--cache-eviction must be lru or 2-random, not '{}'", o.cache_eviction));
  if (o.upload_delay > 0 && !o.writeback) return Fail("--upload-delay needs --writeback");
  if (o.writeback && o.cache_dir == "none")
    return Fail("--writeback stages blocks in the cache directory: it cannot be used with --cache-dir none");
  if (auto labels = metrics::ParseLabels(o.metrics_labels); !labels.ok()) return Fail(labels.status().message());
  if (o.debug) SetLogLevel(LogLevel::kDebug);
  if (o.update_fstab) {
    Status fstab = WriteFstabLine(o, mp);
    if (!fstab.ok()) return Fail(fstab.message());
  }
  {
    // Fail fast, in the foreground, on a bad URL, a missing volume, or object
    // storage that is not usable: a local bucket directory that cannot be
    // made, or a server that cannot be reached or refuses the credentials (a
    // HEAD of a key that does not exist must answer "not found").
    auto vol = OpenVolume(o.meta_url);
    if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
    SetLogLevel(LogLevel::kError);  // retries stay quiet; a failure is one line
    Status usable = vol->format.storage == "file" ? vol->store->Create() : Status::OK();
    if (usable.ok()) {
      auto head = vol->store->Head("tessera_mount_check_" + meta::NewUuid());
      if (!head.ok() && !head.status().not_found()) usable = head.status();
    }
    SetLogLevel(o.debug ? LogLevel::kDebug : LogLevel::kInfo);
    if (!usable.ok())
      return Fail(fmt::format("object storage {} is not usable: {}", vol->store->Describe(), usable.ToString()));
  }
  if (!o.background) {
    return Serve(o, mp, [&](const Status& s) {
      if (!s.ok()) std::fprintf(stderr, "tessera: %s\n", s.ToString().c_str());
      else LOG_INFO("volume ready at {}", mp);
    });
  }

  // The client runs from "/": a daemon must not keep the caller's current
  // directory busy (inside another mount, that one could not be unmounted).
  // So relative paths are resolved first.
  MountOptions daemon = o;
  daemon.meta_url = AbsoluteLocalUrl(o.meta_url);
  daemon.log_file = AbsolutePath(o.log_file.empty() ? DefaultLogFile() : o.log_file);
  if (!daemon.cache_dir.empty() && daemon.cache_dir != "none") daemon.cache_dir = AbsolutePath(daemon.cache_dir);
  int fds[2];
  if (pipe(fds) != 0) return Fail(fmt::format("pipe: {}", strerror(errno)));
  std::string log_file = AbsolutePath(o.log_file.empty() ? DefaultLogFile() : o.log_file);
  pid_t pid = fork();
  if (pid < 0) return Fail(fmt::format("fork: {}", strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    setsid();
    if (chdir("/") != 0) _exit(1);
    int null_fd = open("/dev/null", O_RDWR);
    int log_fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    // Never keep the caller's terminal or pipes open (a caller waiting for
    // EOF on them would wait for the whole life of the mount).
    int out_fd = log_fd >= 0 ? log_fd : null_fd;
    if (out_fd >= 0) {
      dup2(out_fd, STDOUT_FILENO);
      dup2(out_fd, STDERR_FILENO);
    }
    bool reported = false;
    int rc = Serve(daemon, mp, [&](const Status& s) {
      if (reported) return;
      reported = true;
      std::string msg = s.ok() ? "OK" : s.ToString();
      (void)!write(fds[1], msg.data(), msg.size());
      close(fds[1]);
    });
    _exit(rc);
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) msg.append(buf, size_t(n));
  close(fds[0]);
  if (msg != "OK") {
    int status = 0;
    waitpid(pid, &status, 0);
    return Fail(msg.empty() ? fmt::format("mount failed; see {}", log_file) : msg);
  }
  // The mount exists; wait until the file system answers.
  for (int i = 0; i < 100; ++i) {
    struct statfs sfs;
    if (statfs(mp.c_str(), &sfs) == 0 && sfs.f_type == kFuseSuperMagic) {
      std::fprintf(stderr, "tessera: volume is ready at %s (log: %s)\n", mp.c_str(), log_file.c_str());
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Fail(fmt::format("mounted at {} but the file system does not answer; see {}", mp, log_file));
}

int Umount(const std::string& mount_point, bool force, bool flush) {
  char* real = realpath(mount_point.c_str(), nullptr);
  std::string mp = real ? real : mount_point;
  free(real);
  auto state = ReadMountState(mp);
  if (flush) {
    if (!state.ok()) return Fail(fmt::format("{} is not a Tessera mount of this host: nothing to flush", mp));
    Status st = RequestFlush(mp);
    if (!st.ok()) return Fail(fmt::format("cannot ask the client to flush: {}", st.ToString()));
  }
  auto failed = [&](const std::string& msg) {
    if (flush) RemoveWritebackState(mp);
    return Fail(msg);
  };
  int rc;
  if (geteuid() == 0) {
    rc = umount2(mp.c_str(), force ? MNT_DETACH : 0);
    if (rc != 0) {
      if (errno == EINVAL) return failed(fmt::format("{} is not mounted", mp));
      if (errno == EBUSY) {
        const std::string users = ProcessesUsing(mp);
        return failed(fmt::format("{} is busy{}; stop them, or use --force for a lazy unmount", mp,
                                  users.empty() ? "" : ": used by " + users));
      }
      return failed(fmt::format("umount {}: {}", mp, strerror(errno)));
    }
  } else {
    std::string cmd = fmt::format("fusermount3 -u {} '{}'", force ? "-z" : "", mp);
    if (std::system(cmd.c_str()) != 0) return failed(fmt::format("cannot unmount {}", mp));
  }
  if (!state.ok() || state->pid <= 0) return 0;
  if (!flush) {
    // Wait for the client to finish its session (bounded). Blocks staged by
    // --writeback and not uploaded yet stay on its cache disk. After a lazy
    // unmount (--force) of a busy mount, the client serves the processes
    // that still use it until they let go: say so rather than wait silently.
    for (int i = 0; i < 600 && kill(state->pid, 0) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (force && i == 20) {
        const std::string users = ProcessesUsing(mp);
        std::fprintf(stderr,
                     "tessera: %s is detached; its client (pid %d) exits once the processes still using it are "
                     "done%s\n",
                     mp.c_str(), int(state->pid), users.empty() ? "" : (": " + users).c_str());
        return 0;
      }
    }
    if (kill(state->pid, 0) == 0)
      std::fprintf(stderr, "tessera: %s is unmounted; its client (pid %d) is still finishing (see its log)\n",
                   mp.c_str(), int(state->pid));
    return 0;
  }
  // --flush: the client exits once every staged block is uploaded (it
  // retries failed uploads for as long as it takes).
  auto next_report = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (kill(state->pid, 0) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() < next_report) continue;
    next_report += std::chrono::seconds(5);
    auto wb = ReadWritebackState(mp);
    if (wb.ok() && wb->staged_blocks > 0)
      std::fprintf(stderr, "tessera: waiting for %llu staged block(s), %s, to upload\n",
                   (unsigned long long)wb->staged_blocks, Bytes(wb->staged_bytes).c_str());
  }
  // The client clears the request once everything is uploaded.
  if (FlushRequested(mp)) {
    RemoveWritebackState(mp);
    return Fail("the client exited before every staged block was uploaded; they stay staged and the next "
                "mount with --writeback uploads them");
  }
  return 0;
}

}  // namespace tessera::cli
