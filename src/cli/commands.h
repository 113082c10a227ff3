// The `tessera` commands. main.cc parses arguments (CLI11) into these option
// structs; each command returns a process exit code and prints one clear
// line on stderr for each failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

// Object storage flags of format and objbench beyond --storage and --bucket
// (s3 only). Empty credentials and region fall back to the AWS_* environment
// variables (object/object_store.h).
struct StoreFlags {
  std::string access_key;
  std::string secret_key;  // never printed, never stored in the volume settings
  std::string region;
  int get_timeout_sec = 60;
  int put_timeout_sec = 60;
  int io_retries = 10;
};

struct FormatOptions {
  std::string meta_url;
  std::string name;
  std::string storage = "file";
  std::string bucket;  // default for file: /var/lib/tessera/NAME (root) or ~/.tessera/local/NAME
  StoreFlags store;
  uint32_t block_size_kib = 4096;
  std::string compress = "none";
  int trash_days = 1;
  uint64_t capacity_gib = 0;
  uint64_t inodes = 0;
  bool force = false;
};
int Format(const FormatOptions& o);

struct MountOptions {
  std::string meta_url;
  std::string mount_point;
  bool background = false;
  std::string log_file;  // background only; default /var/log/tessera.log or ~/.tessera/tessera.log
  bool debug = false;
  double attr_cache = 1.0;
  double entry_cache = 1.0;
  double dir_entry_cache = 1.0;
  double negative_entry_cache = 0.0;
  // Coherent kernel caches (docs/consistency.md): entries and attributes
  // cached this long while the engine reports other clients' changes.
  double coherent_cache = 300.0;
  bool cache_timeouts_given = false;  // --attr-cache/--entry-cache/--dir-entry-cache on the command line
  bool no_allow_other = false;
  bool non_default_permission = false;
  bool writeback_cache = false;
  bool io_uring = false;
  // Stage blocks on the local cache disk and upload them in the background
  // (needs a cache dir; with file storage the default one is used for it).
  bool writeback = false;
  double upload_delay = 0;  // --writeback: seconds a staged block waits before its upload
  // sqlite3: milliseconds a metadata change may wait to be committed with
  // the ones after it, kept meanwhile by the redo journal
  // (kv::SqliteOptions::commit_delay, docs/consistency.md); 0: off. Off by
  // default: two mounts of one database writing at once take turns at
  // SQLite's lock once per delay (bench/sqlite_two_writers.sh).
  double commit_delay_ms = 0.0;
  std::vector<std::string> fuse_options;  // -o a,b,c
  uint64_t buffer_size_mib = 300;
  size_t max_uploads = 20;
  std::string cache_dir;        // empty: default (off for file storage: the data is local already)
  uint64_t cache_size_mib = 100 << 10;
  double free_space_ratio = 0.1;
  std::string cache_eviction = "lru";
  uint64_t mem_cache_mib = 256;
  uint32_t compact_threshold = 64;
  uint64_t max_readahead_mib = 32;
  int prefetch = 1;
  bool enable_xattr = false;  // extended attributes (off: ENOTSUP, and no kernel xattr request per write)
  bool enable_cap = false;  // store security.capability (the kernel asks for it before every write)
  bool nonempty = false;    // mount over a directory that has entries (hidden while mounted)
  int session_timeout = 300;  // seconds without a heartbeat before other clients clean a session
  std::string backup_meta = "1h";  // metadata backup interval (ParseDuration); "0" = off
  size_t backup_keep = 10;
  // Observability (docs/operations.md "Metrics"): the /metrics address
  // ("" = none), extra labels "k=v,...", the internal files' name prefix and
  // whether every user may read them.
  std::string metrics;
  std::string metrics_labels;
  std::string internal_prefix = ".";
  bool internal_files_public = false;
  // System integration (cli/system_mount.h): the source the kernel shows
  // ("" = tessera:NAME), mount(8)'s options to record in utab, and with
  // update_fstab the /etc/fstab options of this mount (main.cc builds them
  // from the options given).
  std::string fs_name;
  std::string utab_options;
  bool update_fstab = false;
  std::string fstab_options;
};
int Mount(const MountOptions& o);


// flush: the client uploads every block staged by --writeback before it
// exits, and Umount waits for that (without it they stay staged on disk).
int Umount(const std::string& mount_point, bool force, bool flush);
int ShowStatus(const std::string& meta_url);
// recursive: for directories, the usage of the whole tree (summary.h).
int Info(const std::vector<std::string>& paths, bool recursive);
// `tessera summary PATH...`: the usage of trees in a mount, from directory
// statistics, as a table of their biggest entries (or JSON, CSV).
struct SummaryArgs {
  std::vector<std::string> paths;
  int depth = 2;
  size_t entries = 10;
  bool json = false;
  bool csv = false;
  bool bytes = false;  // sizes in bytes rather than KiB/MiB/GiB
};
int Summary(const SummaryArgs& a);
// `tessera rmr PATH...`: removes trees through their mount's control channel.
int Rmr(const std::vector<std::string>& paths);
// `tessera warmup PATH...`: the mount serving PATH loads the blocks of its
// files into its disk cache (or evicts them, or counts those cached).
struct WarmupArgs {
  std::vector<std::string> paths;
  int threads = 10;
  bool evict = false;
  bool check = false;
};
int Warmup(const WarmupArgs& a);
// Observability (cmd_stats.cc, cmd_profile.cc, cmd_debug.cc): from a mount's
// internal files (fuse/internal_files.h).
struct StatsArgs {
  std::string mount_point;
  double interval = 1;
  uint64_t count = 0;  // lines to print (0 = until interrupted)
  std::string schema = "ufmco";
  std::string internal_prefix = ".";
};
int Stats(const StatsArgs& a);
struct ProfileArgs {
  std::string mount_point;
  double duration = 0;  // seconds (0 = until interrupted)
  size_t top = 15;
  std::string internal_prefix = ".";
};
int ProfileCmd(const ProfileArgs& a);
struct DebugArgs {
  std::string mount_point;
  std::string out = ".";
  int seconds = 5;
  std::string internal_prefix = ".";
};
int Debug(const DebugArgs& a);
// Prints the usage line of the tree at path for `info -r`.
int InfoTree(const std::string& path);
// `tessera fsck META-URL`: the engine's consistency check; with
// check_objects, also that every block the files (under path) reference is
// in the bucket with its size, broken files named by path.
struct FsckOptions {
  std::string meta_url;
  bool check_objects = false;
  bool repair = false;  // fix what can be fixed safely (needs no client mounted)
  std::string path;  // inside the volume; "" = the whole tree
  int threads = 10;
};
int Fsck(const FsckOptions& o);

// `tessera config META-URL`: shows the settings, or changes the mutable ones
// (capacity in GiB, inode limit; 0 = unlimited). The immutable ones are
// accepted only to be refused with the reason.
struct ConfigOptions {
  std::string meta_url;
  std::optional<double> capacity_gib;
  std::optional<uint64_t> inodes;
  std::optional<int> trash_days;
  std::optional<std::string> block_size, compression, storage, bucket;
  bool yes = false;  // no confirmation for a risky change
};
int Config(const ConfigOptions& o);

// `tessera clone SRC DST [--preserve]`.
struct CloneOptions {
  std::string src, dst;
  bool preserve = false;
};
int Clone(const CloneOptions& o);

// `tessera quota ACTION META-URL`: directory (--path), user (--uid) and
// group (--gid) quotas; ACTION is set, get, list, delete or check.
struct QuotaOptions {
  std::string action;
  std::string meta_url;
  std::string path;
  std::optional<uint32_t> uid, gid;
  std::optional<double> capacity_gib;
  std::optional<uint64_t> inodes;
  bool repair = false;
};
int QuotaCmd(const QuotaOptions& o);

// `tessera destroy META-URL UUID`: deletes every object of the volume, then
// its metadata; refuses while clients have it mounted.
struct DestroyOptions {
  std::string meta_url;
  std::string uuid;
  bool yes = false;
  int threads = 10;
};
int Destroy(const DestroyOptions& o);

// `tessera gc META-URL`: leaked objects in the bucket (no metadata references
// them); with delete_leaked, removes those older than an hour and finishes
// the pending deletions.
struct GcOptions {
  std::string meta_url;
  bool delete_leaked = false;
  bool compact = false;  // first compact every chunk of two slices or more
  int threads = 10;
};
int Gc(const GcOptions& o);

// `tessera dump META-URL [FILE]` / `tessera load META-URL [FILE]`: the
// metadata as JSON lines (docs/format.md section 5); "-" is stdout/stdin.
struct DumpArgs {
  std::string meta_url;
  std::string file = "-";
  std::string subdir;
  bool gzip = false;  // also when FILE ends with .gz
};
int DumpMeta(const DumpArgs& o);
struct LoadArgs {
  std::string meta_url;
  std::string file = "-";
  // Read an automatic backup (mount --backup-meta) from this bucket: FILE is
  // its object key ("-": the newest backup).
  std::string from_bucket;
  std::string storage = "file";
  StoreFlags store;
};
int LoadMeta(const LoadArgs& o);

// `tessera restore META-URL HOUR... [--put-back]` ("all": every hour).
struct RestoreArgs {
  std::string meta_url;
  std::vector<std::string> hours;
  bool put_back = false;
};
int Restore(const RestoreArgs& o);
int Compact(const std::vector<std::string>& paths);
// "tessera version 0.1.0 (commit 0123456789ab, RelWithDebInfo build)"
std::string VersionText();
int Version();

// `tessera bench PATH`: file system throughput and latency in a fresh
// subdirectory of PATH (any directory; a Tessera mount is the point).
struct BenchOptions {
  std::string path;
  uint64_t block_size_mib = 1;       // size of each read/write call
  uint64_t big_file_size_mib = 1024;  // per thread; 0 skips the big file
  uint64_t small_file_size_kib = 128;
  uint64_t small_file_count = 100;  // per thread; 0 skips the small files
  int threads = 1;
};
int Bench(const BenchOptions& o);

// `tessera bench-meta META-URL`: operations per second of the metadata
// engine itself, per operation, from N threads.
struct BenchMetaOptions {
  std::string meta_url;
  uint64_t count = 1000;  // per thread and phase
  int threads = 1;
};
int BenchMeta(const BenchMetaOptions& o);

// `tessera objbench`: functional checks, then throughput and latency of an
// object store, on objects under a unique prefix that are removed afterwards.
struct ObjbenchOptions {
  std::string storage = "file";
  std::string bucket;
  StoreFlags store;
  uint64_t block_size_kib = 4096;       // the big object is put as objects of this size
  uint64_t small_object_size_kib = 128;
  uint64_t big_object_size_mib = 1024;  // 0 skips the big object
  uint64_t small_objects = 100;         // 0 skips the small objects
  int threads = 4;
  bool drop_caches = false;  // flush the OS page cache between the put and get phases (root)
};
int Objbench(const ObjbenchOptions& o);

}  // namespace tessera::cli
