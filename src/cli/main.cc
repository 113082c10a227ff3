// Argument parsing for every `tessera` command, in the style of JuiceFS's CLI.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>

#include "cli/app_text.h"
#include "cli/build_info.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/system_mount.h"
#include "common/url.h"

using namespace tessera::cli;  // NOLINT

namespace {

// The s3 flags shared by format and objbench.
void AddStoreFlags(CLI::App* cmd, StoreFlags* f) {
  cmd->add_option("--access-key", f->access_key, "s3 access key (default: $AWS_ACCESS_KEY_ID)");
  cmd->add_option("--secret-key", f->secret_key,
                  "s3 secret key (default: $AWS_SECRET_ACCESS_KEY; the environment keeps it out of ps)");
  cmd->add_option("--region", f->region, "s3 signing region (default: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)");
  cmd->add_option("--get-timeout", f->get_timeout_sec, "s3: seconds for each GET/HEAD/LIST/DELETE attempt")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_option("--put-timeout", f->put_timeout_sec, "s3: seconds for each PUT attempt")
      ->capture_default_str()->check(CLI::Range(1, 86400));
  cmd->add_option("--io-retries", f->io_retries, "s3: retries of a request failing with 5xx, 429 or a network error")
      ->capture_default_str()->check(CLI::Range(0, 1000));
}

}  // namespace

int main(int argc, char** argv) {
  // Run as mount(8)'s and umount(8)'s helpers (links named mount.tessera,
  // umount.tessera): cli/system_mount.h.
  const char* slash = std::strrchr(argv[0], '/');
  const std::string program = slash ? slash + 1 : argv[0];
  if (program == "umount.tessera") return UmountHelper(argc, argv);

  CLI::App app{"Tessera: a distributed POSIX file system on object storage.\n"
               "Metadata lives in an engine given by META-URL (sqlite3://PATH for the embedded default);\n"
               "file data lives as blocks in an object store (a local directory by default)."};
  app.name("tessera");
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", VersionText());

  FormatOptions fo;
  auto* format = app.add_subcommand("format", "Format a volume: write its settings and root directory");
  format->footer("Examples:\n  tessera format sqlite3:///var/lib/tessera/myjfs.db myjfs\n"
                 "  tessera format sqlite3://meta.db vol1 --bucket /data/vol1 --block-size 1024\n"
                 "  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... tessera format sqlite3://meta.db vol2 \\\n"
                 "      --storage s3 --bucket http://127.0.0.1:9000/vol2   # mount with the same AWS_* variables");
  format->add_option("META-URL", fo.meta_url, "metadata engine address (sqlite3://PATH)")->required();
  format->add_option("NAME", fo.name, "volume name: 3-63 characters of a-z, 0-9 and '-'")->required();
  format->add_option("--storage", fo.storage, "object storage type (file or s3)")->capture_default_str();
  format->add_option("--bucket", fo.bucket,
                     "bucket: a directory for file storage (default /var/lib/tessera/NAME), "
                     "for s3 http(s)://HOST[:PORT]/BUCKET or http(s)://BUCKET.HOST");
  AddStoreFlags(format, &fo.store);
  format->add_option("--block-size", fo.block_size_kib, "size of a block in KiB (64 to 16384)")->capture_default_str();
  format->add_option("--compress", fo.compress, "compression of blocks: none, lz4 or zstd")->capture_default_str();
  format->add_option("--trash-days", fo.trash_days,
                     "days removed files stay in /.trash before they are gone for good (0 = removals are final)")
      ->capture_default_str();
  // Unsigned options get explicit ranges: CLI11 would read "-1" as 2^64-1.
  format->add_option("--capacity", fo.capacity_gib, "volume capacity in GiB (0 = unlimited)")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(1) << 30));
  format->add_option("--inodes", fo.inodes, "maximum number of inodes (0 = unlimited)")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(1) << 48));
  format->add_flag("--force", fo.force, "overwrite the settings of an existing volume (data is kept)");

  MountOptions mo;
  auto* mount = app.add_subcommand("mount", "Mount a volume (foreground by default, -d for background)");
  mount->footer("Examples:\n  tessera mount sqlite3:///var/lib/tessera/myjfs.db /mnt/tessera -d\n"
                "  tessera mount sqlite3://meta.db /mnt/t --attr-cache 0 --entry-cache 0");
  mount->add_option("META-URL", mo.meta_url, "metadata engine address")->required();
  mount->add_option("MOUNTPOINT", mo.mount_point, "an existing empty directory (see --nonempty)")->required();
  mount->add_flag("-d,--background", mo.background, "run in the background; returns once the mount answers");
  mount->add_option("--log", mo.log_file, "log file in background mode");
  mount->add_flag("--debug", mo.debug, "debug logging and FUSE request tracing");
  mount->add_option("--attr-cache", mo.attr_cache, "kernel attribute cache timeout, seconds")->capture_default_str();
  mount->add_option("--entry-cache", mo.entry_cache, "kernel file entry cache timeout, seconds")->capture_default_str();
  mount->add_option("--dir-entry-cache", mo.dir_entry_cache, "kernel directory entry cache timeout, seconds")->capture_default_str();
  mount->add_option("--negative-entry-cache", mo.negative_entry_cache, "kernel negative lookup cache timeout, seconds")->capture_default_str();
  mount->add_option("--coherent-cache", mo.coherent_cache,
                    "kernel entry and attribute cache timeout, seconds, while the metadata engine reports other "
                    "clients' changes (invalidated on each change; 0: no watching, the timeouts above)")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  mount->add_option("--buffer-size", mo.buffer_size_mib, "memory for buffered writes, MiB (writers wait beyond it)")
      ->capture_default_str()->check(CLI::Range(16, 1 << 20));
  mount->add_option("--max-uploads", mo.max_uploads, "concurrent block uploads")->capture_default_str()->check(CLI::Range(1, 1000));
  mount->add_option("--cache-dir", mo.cache_dir, "local disk cache directory ('none' disables; default /var/cache/tessera, off for file storage "
                    "except for --writeback staging)");
  mount->add_option("--cache-size", mo.cache_size_mib, "disk cache size, MiB")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(1) << 40));
  mount->add_option("--free-space-ratio", mo.free_space_ratio, "keep this fraction of the cache disk free")
      ->capture_default_str()->check(CLI::Range(0.0, 0.99));
  mount->add_option("--cache-eviction", mo.cache_eviction, "disk cache eviction: lru or 2-random")->capture_default_str();
  mount->add_option("--mem-cache-size", mo.mem_cache_mib, "memory block cache, MiB (0 disables)")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(1) << 24));
  mount->add_option("--max-readahead", mo.max_readahead_mib, "read-ahead window for sequential reads, MiB (0 = off)")
      ->capture_default_str()->check(CLI::Range(uint64_t(0), uint64_t(4096)));
  mount->add_flag("--enable-xattr", mo.enable_xattr,
                  "support extended attributes (off: they fail with ENOTSUP and the kernel sends no xattr request "
                  "before each write)");
  mount->add_flag("--enable-cap", mo.enable_cap,
                  "support the security.capability xattr (file capabilities; implies --enable-xattr); off, the "
                  "kernel's lookup of it before every write is answered at once");
  mount->add_option("--prefetch", mo.prefetch, "load the whole block in the background after a partial read (0 = off; never for a local-directory bucket, whose ranges read as fast)")
      ->capture_default_str()->check(CLI::Range(0, 1));
  mount->add_option("--compact-threshold", mo.compact_threshold, "compact a chunk in the background once it has this many slices (0 = never)")
      ->capture_default_str()->check(CLI::Range(uint32_t(0), uint32_t(1000000)));
  mount->add_flag("--no-allow-other", mo.no_allow_other, "only the mounting user may access the mount");
  mount->add_flag("--non-default-permission", mo.non_default_permission,
                  "do not let the kernel check permissions (the engine still does)");
  mount->add_flag("--writeback-cache", mo.writeback_cache, "enable the kernel writeback cache (weaker close-to-open)");
  mount->add_flag("--io-uring", mo.io_uring,
                  "serve requests over FUSE io_uring, on the CPU of the process that made them (Linux 6.14+; needs the fuse module's enable_uring: echo Y > /sys/module/fuse/parameters/enable_uring)");
  mount->add_flag("--writeback", mo.writeback,
                  "acknowledge writes once staged on the local cache disk, upload in the background "
                  "(other clients see the data once uploaded; see docs/consistency.md)");
  mount->add_option("--upload-delay", mo.upload_delay,
                    "--writeback: seconds a staged block waits before its upload (blocks overwritten and compacted, "
                    "or deleted, meanwhile are never uploaded)")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  mount->add_option("--commit-delay", mo.commit_delay_ms,
                    "sqlite3: milliseconds a metadata change may wait to be committed together with the ones after "
                    "it (e.g. 1), once it is in the client's redo journal (a crash of the client loses none: the "
                    "next process to open the database replays them). close, fsync and the client's own reads "
                    "commit at once; other mounts of the database wait for its lock meanwhile. 0: each change is "
                    "committed before it is answered (docs/consistency.md)")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0));
  mount->add_option("-o", mo.fuse_options,
                    "other FUSE mount options, comma separated (those of libfuse's low-level API and of "
                    "mount(8): ro, noatime, nodev, nosuid, max_read=N, fsname=NAME, ...)")
      ->delimiter(',');
  mount->add_option("--session-timeout", mo.session_timeout,
                    "seconds a client may be cut off from the metadata engine before other clients clean its session "
                    "(its locks go; when it comes back its open files fail and its unwritten data is dropped; use "
                    "the same value on every client)")
      ->capture_default_str()->check(CLI::Range(10, 86400));
  mount->add_option("--backup-meta", mo.backup_meta,
                    "how often one client of the volume writes a gzipped metadata dump into the bucket "
                    "(meta/dump-*.json.gz; tessera load reads it): 30m, 1h, 1d, seconds; 0 = never")
      ->capture_default_str()
      ->check([](const std::string& s) { return ParseDuration(s).ok() ? std::string() : ParseDuration(s).status().message(); });
  mount->add_option("--backup-keep", mo.backup_keep, "metadata backups kept in the bucket (the newest)")
      ->capture_default_str()->check(CLI::Range(1, 10000));
  mount->add_flag("--nonempty", mo.nonempty, "mount over a directory that is not empty (its entries are hidden)");
  mount->add_option("--metrics", mo.metrics,
                    "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9567; default: none; the "
                    "same numbers are always in the file .stats at the mount's root)");
  mount->add_option("--metrics-labels", mo.metrics_labels,
                    "extra labels on every metric, NAME=VALUE[,NAME=VALUE...] (vol_name and mp are always set)");
  mount->add_option("--internal-prefix", mo.internal_prefix,
                    "name prefix of the internal files in the mount's root (PREFIXstats, PREFIXaccesslog, "
                    "PREFIXconfig): use another when the volume has a file of that name")
      ->capture_default_str()
      ->check([](const std::string& s) {
        return s.empty() || s.find('/') != std::string::npos || s.size() > 200
                   ? std::string("must be 1-200 characters without '/'")
                   : std::string();
      });
  mount->add_flag("--internal-files-public", mo.internal_files_public,
                  "every user may read the internal files (.stats, .accesslog, .config); default: root only");
  mount->add_flag("--update-fstab", mo.update_fstab,
                  "also write /etc/fstab's line for this mount, with these options (and make mount.tessera if missing)");
  // Set by mount.tessera (cli/system_mount.h), not by hand.
  mount->add_option("--fs-name", mo.fs_name, "the mount's source as the kernel shows it")->group("");
  mount->add_option("--utab-options", mo.utab_options, "mount(8)'s options, recorded in utab")->group("");

  std::string umount_point;
  bool umount_force = false;
  bool umount_flush = false;
  auto* umount = app.add_subcommand("umount", "Unmount a volume and wait for its client to exit");
  umount->add_option("MOUNTPOINT", umount_point, "mount point")->required();
  umount->add_flag("-f,--force", umount_force, "lazy unmount even if busy");
  umount->add_flag("--flush", umount_flush, "wait until every block staged by --writeback is uploaded");

  std::string status_url;
  auto* status = app.add_subcommand("status", "Show a volume's settings and active sessions");
  status->add_option("META-URL", status_url, "metadata engine address")->required();

  std::vector<std::string> info_paths;
  bool info_recursive = false;
  auto* info = app.add_subcommand("info", "Show the inode, chunks, slices and objects of files in a mount");
  info->add_option("PATH", info_paths, "files or directories inside a Tessera mount")->required();
  info->add_flag("-r,--recursive", info_recursive,
                 "for a directory, also the size, files and directories of its whole tree (from directory statistics)");

  std::vector<std::string> rmr_paths;
  auto* rmr = app.add_subcommand("rmr", "Remove trees inside a mount, fast (into the trash when it is on)");
  rmr->footer(
      "The client serving the mount removes them itself, without a kernel round trip per entry, checking each "
      "removal as rm -rf would for the caller (its user and groups), and tells the kernel what went. Like rm -rf, "
      "entries that cannot be removed are left with what holds them, and reported.\n\n"
      "Examples:\n  tessera rmr /mnt/tessera/build-output\n  tessera rmr /mnt/tessera/tmp/a /mnt/tessera/tmp/b");
  rmr->add_option("PATH", rmr_paths, "files or directories inside a Tessera mount")->required();

  WarmupArgs wa;
  auto* warmup = app.add_subcommand("warmup", "Load files' data into the disk cache of the mount serving them");
  warmup->footer(
      "The client serving the mount does the work, so the cache it fills is the one its reads use. Only files the "
      "caller may read are loaded. With --check, nothing is loaded: it reports how much is cached.\n\n"
      "Examples:\n  tessera warmup /mnt/tessera/datasets/train --threads 20\n"
      "  tessera warmup --check /mnt/tessera/datasets/train\n  tessera warmup --evict /mnt/tessera/old");
  warmup->add_option("PATH", wa.paths, "files or directories inside a Tessera mount")->required();
  warmup->add_option("--threads,-p", wa.threads, "blocks loaded at once")->capture_default_str()->check(CLI::Range(1, 256));
  auto* warmup_evict = warmup->add_flag("--evict", wa.evict, "drop the blocks from the mount's caches instead");
  warmup->add_flag("--check", wa.check, "only report how much of the data is in the cache")->excludes(warmup_evict);

  SummaryArgs sa;
  auto* summary = app.add_subcommand("summary", "Show the size, files and directories of trees in a mount, biggest first");
  summary->footer(
      "Answered from the volume's directory statistics, without walking the tree through the kernel: a million "
      "files summarise in well under a second. Changes made by clients in the last second may not show yet.\n\n"
      "Examples:\n  tessera summary /mnt/tessera\n  tessera summary /mnt/tessera/projects --depth 1 --entries 20\n"
      "  tessera summary /mnt/tessera/home --json");
  summary->add_option("PATH", sa.paths, "directories (or files) inside a Tessera mount")->required();
  summary->add_option("--depth", sa.depth, "levels of entries shown below PATH")->capture_default_str()->check(CLI::Range(0, 100));
  summary->add_option("--entries", sa.entries, "entries shown per directory, biggest first; the rest are one row")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  auto* summary_json = summary->add_flag("--json", sa.json, "print the tree as JSON (sizes in bytes)");
  summary->add_flag("--csv", sa.csv, "print the rows as CSV (sizes in bytes)")->excludes(summary_json);
  summary->add_flag("--bytes", sa.bytes, "sizes in bytes in the table");

  StatsArgs sta;
  auto* stats = app.add_subcommand("stats", "Show a mount's activity live, one line per interval (from its .stats)");
  stats->footer("Columns: usage (cpu%, memory, write buffer), fuse (requests/s, average latency ms, read and write\n"
                "bytes/s), meta (engine calls/s, latency ms, retries/s), blockcache (hit %, size), object (GET/PUT\n"
                "per second and bytes, latency ms, errors/s), staging (--writeback backlog).\n"
                "Example:\n  tessera stats /mnt/tessera --schema fmo --interval 2");
  stats->add_option("MOUNTPOINT", sta.mount_point, "a Tessera mount (or a path in one)")->required();
  stats->add_option("--interval", sta.interval, "seconds between lines")->capture_default_str();
  stats->add_option("--count", sta.count, "lines to print (0 = until interrupted)")->capture_default_str();
  stats->add_option("--schema", sta.schema,
                    "groups to show, in order: u usage, f fuse, m meta, c blockcache, o object, s staging")
      ->capture_default_str();
  stats->add_option("--internal-prefix", sta.internal_prefix, "the mount's --internal-prefix")->capture_default_str();

  ProfileArgs pra;
  auto* profile = app.add_subcommand("profile", "Show which operations, files and processes take a mount's time "
                                                "(from its .accesslog)");
  profile->add_option("MOUNTPOINT", pra.mount_point, "a Tessera mount (or a path in one)")->required();
  profile->add_option("--duration", pra.duration, "seconds to watch (0 = until interrupted)")->capture_default_str();
  profile->add_option("--top", pra.top, "rows per table")->capture_default_str()->check(CLI::Range(1, 100000));
  profile->add_option("--internal-prefix", pra.internal_prefix, "the mount's --internal-prefix")->capture_default_str();

  DebugArgs dba;
  auto* debug = app.add_subcommand("debug", "Collect a mount's versions, options, metrics, access log, log tail and "
                                            "service health into one archive for a bug report (secrets masked)");
  debug->add_option("MOUNTPOINT", dba.mount_point, "a Tessera mount (or a path in one)")->required();
  debug->add_option("--out", dba.out, "directory for the archive")->capture_default_str();
  debug->add_option("--seconds", dba.seconds, "seconds of metrics and access log to collect")->capture_default_str();
  debug->add_option("--internal-prefix", dba.internal_prefix, "the mount's --internal-prefix")->capture_default_str();

  std::vector<std::string> compact_paths;
  auto* compact = app.add_subcommand("compact", "Merge the slices of files' chunks (files and directories in a mount)");
  compact->add_option("PATH", compact_paths, "files or directories inside a Tessera mount")->required();

  CloneOptions clo;
  auto* clone = app.add_subcommand("clone", "Copy a file or directory tree in a mount by metadata only (no data copied)");
  clone->footer(
      "The copy shares the source's blocks (reference-counted): it is made in one metadata transaction whatever "
      "the files' sizes, appears whole or not at all, and writing or removing either side never changes the "
      "other. SRC and DST must be in the same mount; DST must not exist. Hard links inside a tree become separate "
      "files. Up to 100,000 entries at once.\n\n"
      "Examples:\n  tessera clone /mnt/tessera/dataset /mnt/tessera/dataset-v2\n"
      "  tessera clone /mnt/tessera/vm.img /mnt/tessera/vm-snapshot.img --preserve");
  clone->add_option("SRC", clo.src, "a file or directory inside a Tessera mount")->required();
  clone->add_option("DST", clo.dst, "the new name (in the same mount)")->required();
  clone->add_flag("--preserve,-p", clo.preserve,
                  "keep owners, modes and times (root only); by default the copy is yours, with your umask");

  QuotaOptions qo;
  auto* quota = app.add_subcommand("quota", "Set, show, delete and check directory, user and group quotas");
  quota->footer(
      "A directory quota limits everything below the directory (nested quotas all apply); a user or group quota "
      "what that uid or gid owns. Space counts regular files' lengths rounded up to 4 KiB. Mounted clients fail "
      "a change that would pass a limit with EDQUOT, and see a new or changed quota within a second; `df` "
      "inside a directory with a quota shows the quota.\n\n"
      "Examples:\n  tessera quota set redis://host/1 --path /projects/a --capacity 100 --inodes 1000000\n"
      "  tessera quota set sqlite3:///var/lib/tessera/vol.db --uid 1000 --capacity 0.5\n"
      "  tessera quota list redis://host/1\n  tessera quota check redis://host/1 --repair");
  quota->add_option("ACTION", qo.action, "set, get, list, delete or check")
      ->required()
      ->check(CLI::IsMember({"set", "get", "list", "delete", "check"}));
  quota->add_option("META-URL", qo.meta_url, "metadata engine address")->required();
  quota->add_option("--path", qo.path, "a directory inside the volume (from its root, e.g. /projects/a)");
  quota->add_option("--uid", qo.uid, "a user id");
  quota->add_option("--gid", qo.gid, "a group id");
  quota->add_option("--capacity", qo.capacity_gib, "set: space limit in GiB (fractions allowed; 0 = no limit)");
  quota->add_option("--inodes", qo.inodes, "set: inode limit (0 = no limit)");
  quota->add_flag("--repair", qo.repair, "check: set the recorded usage to what the tree holds");

  FsckOptions fko;
  auto* fsck = app.add_subcommand("fsck", "Check the consistency of a volume's metadata (and its objects)");
  fsck->footer("Examples:\n  tessera fsck sqlite3:///var/lib/tessera/vol.db\n"
               "  tessera fsck redis://host:6379/1 --check-objects --path /projects   # names broken files");
  fsck->add_option("META-URL", fko.meta_url, "metadata engine address")->required();
  fsck->add_flag("--check-objects", fko.check_objects,
                 "also check that every block the files reference is in the bucket with its size (HEAD requests)");
  fsck->add_flag("--repair", fko.repair,
                 "fix link counts, directory parents, usage counters, directory statistics and entries of missing "
                 "inodes; move inodes "
                 "without a name to /lost+found; print each change (never deletes file data; volume unmounted)");
  fsck->add_option("--path", fko.path, "with --check-objects: only the files under this path inside the volume");
  fsck->add_option("--threads", fko.threads, "concurrent object checks")->capture_default_str()->check(CLI::Range(1, 256));

  ConfigOptions co;
  auto* config = app.add_subcommand("config", "Show a volume's settings, or change its capacity and inode limit");
  config->footer("Examples:\n  tessera config sqlite3:///var/lib/tessera/vol.db\n"
                 "  tessera config redis://host:6379/1 --capacity 100 --inodes 1000000   # mounted clients "
                 "apply it within 10 s");
  config->add_option("META-URL", co.meta_url, "metadata engine address")->required();
  config->add_option("--capacity", co.capacity_gib, "space limit in GiB (0 = unlimited)");
  config->add_option("--inodes", co.inodes, "inode limit (0 = unlimited)");
  config->add_option("--trash-days", co.trash_days, "days removed files stay in /.trash (0 = removals are final)");
  config->add_flag("--yes,-y", co.yes, "do not ask before a risky change (a limit below the current usage)");
  config->add_option("--block-size", co.block_size, "cannot be changed (shown to say why)")->group("Immutable");
  config->add_option("--compression", co.compression, "cannot be changed (shown to say why)")->group("Immutable");
  config->add_option("--storage", co.storage, "cannot be changed (shown to say why)")->group("Immutable");
  config->add_option("--bucket", co.bucket, "cannot be changed (shown to say why)")->group("Immutable");

  DestroyOptions dso;
  auto* destroy = app.add_subcommand("destroy", "Delete a volume: every object in its bucket, then its metadata");
  destroy->footer("Example:\n  tessera destroy sqlite3:///var/lib/tessera/vol.db 5c1b7e7e-...   # the UUID "
                  "'tessera status' shows");
  destroy->add_option("META-URL", dso.meta_url, "metadata engine address")->required();
  destroy->add_option("UUID", dso.uuid, "the volume's UUID (tessera status), against mistakes")->required();
  destroy->add_flag("--yes,-y", dso.yes, "do not ask for confirmation");
  destroy->add_option("--threads", dso.threads, "concurrent deletions")->capture_default_str()->check(CLI::Range(1, 256));

  GcOptions gco;
  auto* gc = app.add_subcommand("gc", "Find objects no file references (leaked), and delete them with --delete");
  gc->footer("Examples:\n  tessera gc sqlite3:///var/lib/tessera/vol.db\n"
             "  tessera gc redis://host:6379/1 --delete   # safe while the volume is mounted");
  gc->add_option("META-URL", gco.meta_url, "metadata engine address")->required();
  gc->add_flag("--compact", gco.compact,
               "first merge the slices of every fragmented chunk (safe beside clients writing)");
  gc->add_flag("--delete", gco.delete_leaked,
               "delete leaked objects older than one hour and finish pending deletions");
  gc->add_option("--threads", gco.threads, "concurrent deletions")->capture_default_str()->check(CLI::Range(1, 256));

  DumpArgs dua;
  auto* dump = app.add_subcommand("dump", "Write a volume's metadata (settings, whole tree, counters) as JSON lines");
  dump->footer("Examples:\n  tessera dump sqlite3:///var/lib/tessera/vol.db vol.json.gz   # gzipped: name ends with .gz\n"
               "  tessera dump redis://host:6379/1 - --subdir /projects | jq -c .\n"
               "Format: docs/format.md, section 5. One snapshot on sqlite3 and postgres; on Redis each inode is "
               "read atomically (dump a quiet volume).");
  dump->add_option("META-URL", dua.meta_url, "metadata engine address")->required();
  dump->add_option("FILE", dua.file, "where to write the dump (- for stdout)")->capture_default_str();
  dump->add_option("--subdir", dua.subdir, "dump only this directory of the volume (it becomes the root when loaded)");
  dump->add_flag("--gzip", dua.gzip, "compress with gzip (also when FILE ends with .gz)");

  LoadArgs loa;
  auto* load = app.add_subcommand("load", "Create a volume's metadata from a dump, in an empty engine");
  load->footer("Examples:\n  tessera load redis://host:6379/1 vol.json.gz   # plain or gzipped\n"
               "  tessera dump sqlite3://a.db - | tessera load postgres://u@host/db -   # move a volume\n"
               "The engine must be empty. The volume keeps its name, UUID, bucket and inode numbers, so it mounts and "
               "reads the same objects.");
  load->add_option("META-URL", loa.meta_url, "metadata engine address (empty)")->required();
  load->add_option("FILE", loa.file, "the dump (- for stdin); with --from-bucket an object key (- for the newest backup)")
      ->capture_default_str();
  load->add_option("--from-bucket", loa.from_bucket,
                   "load a backup that mount --backup-meta wrote into this bucket (a directory, or an s3 URL)");
  load->add_option("--storage", loa.storage, "with --from-bucket: its storage type (file or s3)")->capture_default_str();
  AddStoreFlags(load, &loa.store);

  RestoreArgs rsa;
  auto* restore = app.add_subcommand("restore", "Put files and directories from the trash back where they were removed");
  restore->footer("Examples:\n  tessera restore sqlite3:///var/lib/tessera/vol.db 2026-12-01-06   # what would move\n"
                  "  tessera restore sqlite3:///var/lib/tessera/vol.db 2026-12-01-06 2026-12-01-07 --put-back\n"
                  "HOUR is a directory of /.trash (UTC). Nothing is ever overwritten: an entry whose name is taken "
                  "stays in the trash and is named.");
  restore->add_option("META-URL", rsa.meta_url, "metadata engine address")->required();
  restore->add_option("HOUR", rsa.hours, "trash hours (YYYY-MM-DD-HH), or all")->required();
  restore->add_flag("--put-back", rsa.put_back, "move the entries back (without it: only list what would move)");

  auto* version = app.add_subcommand("version", "Show the version");

  std::string shell;
  auto* completion = app.add_subcommand("completion", "Print the shell completion script for bash or zsh");
  completion->footer("Examples:\n  source <(tessera completion bash)\n"
                     "  tessera completion zsh > \"${fpath[1]}/_tessera\"\n"
                     "The Debian package installs both.");
  completion->add_option("SHELL", shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));

  std::string man_dir;
  auto* gen_man = app.add_subcommand("gen-man", "Write the man pages into a directory (used by the build)");
  gen_man->group("");
  gen_man->add_option("DIR", man_dir, "output directory")->required();

  BenchOptions bo;
  auto* bench = app.add_subcommand("bench", "Benchmark a file system: big and small file reads and writes, stats");
  bench->footer("Examples:\n  tessera bench /mnt/tessera\n  tessera bench /mnt/tessera -p 4 --big-file-size 256");
  bench->add_option("PATH", bo.path, "an existing writable directory (a fresh subdirectory is used and removed)")->required();
  bench->add_option("--block-size", bo.block_size_mib, "size of each read and write, MiB")
      ->capture_default_str()->check(CLI::Range(1, 64));
  bench->add_option("--big-file-size", bo.big_file_size_mib, "size of the big file of each thread, MiB (0 skips)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  bench->add_option("--small-file-size", bo.small_file_size_kib, "size of each small file, KiB")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  bench->add_option("--small-file-count", bo.small_file_count, "small files per thread (0 skips)")
      ->capture_default_str()->check(CLI::Range(0, 10000000));
  bench->add_option("-p,--threads", bo.threads, "concurrent threads")->capture_default_str()->check(CLI::Range(1, 256));

  ObjbenchOptions ob;
  auto* objbench = app.add_subcommand("objbench", "Check an object store's behaviour, then benchmark it");
  objbench->footer("Examples:\n  tessera objbench --storage file --bucket /data/bucket\n"
                   "  tessera objbench --storage file --bucket /tmp/b --big-object-size 64 -p 8");
  objbench->add_option("--storage", ob.storage, "object storage type (file or s3)")->capture_default_str();
  objbench->add_option("--bucket", ob.bucket, "bucket: a directory for file storage, a URL for s3")->required();
  AddStoreFlags(objbench, &ob.store);
  objbench->add_option("--block-size", ob.block_size_kib, "size of the objects the big object is split into, KiB")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  objbench->add_option("--small-object-size", ob.small_object_size_kib, "size of each small object, KiB")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  objbench->add_option("--big-object-size", ob.big_object_size_mib, "size of the big object, MiB (0 skips)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  objbench->add_option("--small-objects", ob.small_objects, "number of small objects (0 skips)")
      ->capture_default_str()->check(CLI::Range(0, 10000000));
  objbench->add_option("-p,--threads", ob.threads, "concurrent threads")->capture_default_str()->check(CLI::Range(1, 256));
  objbench->add_flag("--drop-caches", ob.drop_caches,
                     "sync and drop the OS page cache before each get phase, so file storage is read cold (root)");

  BenchMetaOptions bm;
  auto* bench_meta = app.add_subcommand("bench-meta", "Benchmark the metadata engine alone (no FUSE, no objects)");
  bench_meta->footer("Examples:\n  tessera bench-meta redis://127.0.0.1:6379/1 -p 4\n"
                     "  tessera bench-meta sqlite3://meta.db --count 2000");
  bench_meta->add_option("META-URL", bm.meta_url, "metadata engine of a formatted volume (a scratch directory is used)")
      ->required();
  bench_meta->add_option("--count", bm.count, "operations per thread and phase")
      ->capture_default_str()->check(CLI::Range(1, 10000000));
  bench_meta->add_option("-p,--threads", bm.threads, "concurrent threads")->capture_default_str()->check(CLI::Range(1, 256));

  // mount.tessera SPEC DIR -o a,b=c: parsed as `tessera mount SPEC DIR -d --a --b=c`.
  std::vector<std::string> helper_args;
  std::vector<char*> helper_argv;
  if (program == "mount.tessera") {
    auto h = TranslateMountHelper(argc, argv, [&](const std::string& name) { return MountOptionKind(*mount, name); });
    if (!h.ok()) {
      std::fprintf(stderr, "mount.tessera: %s\n", h.status().message().c_str());
      return 1;
    }
    helper_args = {"tessera"};
    helper_args.insert(helper_args.end(), h->args.begin(), h->args.end());
    if (h->verbose || h->fake) {
      std::string line;
      for (const auto& a : helper_args) line += (line.empty() ? "" : " ") + tessera::RedactUrl(a);
      std::fprintf(stderr, "mount.tessera: %s\n", line.c_str());
    }
    if (h->fake) return 0;
    for (auto& a : helper_args) helper_argv.push_back(a.data());
    argc = int(helper_argv.size());
    argv = helper_argv.data();
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      std::fprintf(stderr, "tessera: %s\nRun with --help for usage.\n", e.what());
      return 2;
    }
    return app.exit(e);
  }
  tessera::HidePasswordsInArgs(argc, argv);  // CLI11 holds its own copies
  if (*format) return Format(fo);
  if (*mount) {
    mo.cache_timeouts_given = mount->count("--attr-cache") + mount->count("--entry-cache") + mount->count("--dir-entry-cache") > 0;
    if (mo.update_fstab) mo.fstab_options = FstabOptions(*mount);
    return Mount(mo);
  }
  if (*completion) {
    auto script = CompletionScript(app, shell);
    if (!script.ok()) return Fail(script.status().message());
    std::fputs(script->c_str(), stdout);
    return 0;
  }
  if (*gen_man) {
    tessera::Status st = WriteManPages(app, man_dir);
    return st.ok() ? 0 : Fail(st.message());
  }
  if (*umount) return Umount(umount_point, umount_force, umount_flush);
  if (*status) return ShowStatus(status_url);
  if (*info) return Info(info_paths, info_recursive);
  if (*summary) return Summary(sa);
  if (*rmr) return Rmr(rmr_paths);
  if (*warmup) return Warmup(wa);
  if (*fsck) return Fsck(fko);
  if (*config) return Config(co);
  if (*quota) return QuotaCmd(qo);
  if (*clone) return Clone(clo);
  if (*destroy) return Destroy(dso);
  if (*gc) return Gc(gco);
  if (*dump) return DumpMeta(dua);
  if (*restore) return Restore(rsa);
  if (*load) return LoadMeta(loa);
  if (*compact) return Compact(compact_paths);
  if (*stats) return Stats(sta);
  if (*profile) return ProfileCmd(pra);
  if (*debug) return Debug(dba);
  if (*version) return Version();
  if (*bench) return Bench(bo);
  if (*objbench) return Objbench(ob);
  if (*bench_meta) return BenchMeta(bm);
  return 2;
}
