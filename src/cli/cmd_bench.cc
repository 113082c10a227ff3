// bench: file system throughput and latency, in the style of `juicefs bench`.
//
// In a fresh subdirectory of PATH, N threads run five phases one after the
// other (each phase on all threads at once): every thread writes one big file
// sequentially in block-size calls and reads it back, then writes its small
// files, reads them and stats them. Throughput is the work of all threads over
// the phase's wall time; the cost is the mean time of one operation (a
// block-size call for the big file, a whole file for the small ones), open and
// close included. Written data is incompressible so compression cannot flatter
// the result.
//
// Before each phase that reads, the file system is synced and, as root, the
// kernel's page, dentry and inode caches are dropped, so reads and stats come
// from the file system rather than the kernel cache. Caches inside the file
// system itself (Tessera's memory and disk block caches) are not dropped.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "cli/bench_util.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace tessera::cli {

namespace {

Status Errno(const std::string& what) { return Status::Err(errno, what); }

// Creates (or truncates) path, writes size bytes to it in calls of at most
// data.size() bytes and closes it. With count_calls each call is one
// operation of phase.
Status WriteFile(const std::string& path, uint64_t size, std::string_view data, Phase* phase, bool count_calls) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create " + path);
  Status st;
  for (uint64_t done = 0; done < size && st.ok() && !phase->failed();) {
    const size_t len = size_t(std::min<uint64_t>(data.size(), size - done));
    for (std::string_view rest = data.substr(0, len); !rest.empty();) {
      ssize_t n = write(fd, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        st = Errno("write " + path);
        break;
      }
      rest.remove_prefix(size_t(n));
    }
    done += len;
    if (count_calls && st.ok()) phase->Add(len);
  }
  // close reports a failed write-back (a Tessera mount flushes here).
  if (close(fd) != 0 && st.ok()) st = Errno("close " + path);
  return st;
}

// Reads path to the end in calls of buf->size() bytes and checks it held
// size bytes. With count_calls each call is one operation of phase.
Status ReadFile(const std::string& path, uint64_t size, std::string* buf, Phase* phase, bool count_calls) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path);
  Status st;
  uint64_t total = 0;
  while (!phase->failed()) {
    ssize_t n = read(fd, buf->data(), buf->size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = Errno("read " + path);
      break;
    }
    if (n == 0) break;
    total += uint64_t(n);
    if (count_calls) phase->Add(uint64_t(n));
  }
  close(fd);
  if (st.ok() && !phase->failed() && total != size)
    st = Status::Err(EIO, fmt::format("read {}: got {} bytes, wrote {}", path, total, size));
  return st;
}

// Syncs the file system holding dir and, as root, drops the kernel's clean
// caches. Returns an empty string when dropped, otherwise why not.
std::string DropCaches(const std::string& dir) {
  if (geteuid() != 0) return "not root";
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || syncfs(fd) != 0) {
    std::string why = fmt::format("syncfs {}: {}", dir, strerror(errno));
    if (fd >= 0) close(fd);
    return why;
  }
  close(fd);
  fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "3", 1) != 1) {
    std::string why = fmt::format("/proc/sys/vm/drop_caches: {}", strerror(errno));
    if (fd >= 0) close(fd);
    return why;
  }
  close(fd);
  return "";
}

class Bencher {
 public:
  Bencher(const BenchOptions& o, std::string dir)
      : o_(o), dir_(std::move(dir)), block_(o.block_size_mib << 20), big_(o.big_file_size_mib << 20),
        small_(o.small_file_size_kib << 10), data_(RandomBytes(block_)) {}

  Status Run() {
    if (big_ > 0) {
      RETURN_IF_ERROR(RunPhase("Write big file", uint64_t(o_.threads) * big_, "MiB", "op", [&](Phase* p, int t) {
        return WriteFile(BigPath(t), big_, data_, p, /*count_calls=*/true);
      }));
      DropBeforeReading();
      RETURN_IF_ERROR(RunPhase("Read big file", uint64_t(o_.threads) * big_, "MiB", "op", [&](Phase* p, int t) {
        std::string buf(block_, '\0');
        return ReadFile(BigPath(t), big_, &buf, p, /*count_calls=*/true);
      }));
    }
    if (o_.small_file_count == 0) return Status::OK();
    const uint64_t files = uint64_t(o_.threads) * o_.small_file_count;
    RETURN_IF_ERROR(RunPhase("Write small files", files, "files", "file", [&](Phase* p, int t) {
      for (uint64_t i = 0; i < o_.small_file_count && !p->failed(); ++i) {
        RETURN_IF_ERROR(WriteFile(SmallPath(t, i), small_, data_, p, /*count_calls=*/false));
        p->Add(1);
      }
      return Status::OK();
    }));
    DropBeforeReading();
    RETURN_IF_ERROR(RunPhase("Read small files", files, "files", "file", [&](Phase* p, int t) {
      std::string buf(block_, '\0');
      for (uint64_t i = 0; i < o_.small_file_count && !p->failed(); ++i) {
        RETURN_IF_ERROR(ReadFile(SmallPath(t, i), small_, &buf, p, /*count_calls=*/false));
        p->Add(1);
      }
      return Status::OK();
    }));
    DropBeforeReading();
    return RunPhase("Stat small files", files, "files", "file", [&](Phase* p, int t) {
      for (uint64_t i = 0; i < o_.small_file_count && !p->failed(); ++i) {
        struct stat st;
        if (stat(SmallPath(t, i).c_str(), &st) != 0) return Errno("stat " + SmallPath(t, i));
        p->Add(1);
      }
      return Status::OK();
    });
  }

  // The result table: one row per phase run.
  const Table& table() const { return table_; }
  // Empty when the caches were dropped before every reading phase.
  const std::string& not_dropped() const { return not_dropped_; }

 private:
  using Worker = std::function<Status(Phase*, int thread)>;

  Status RunPhase(const std::string& title, uint64_t total, const std::string& unit, const std::string& per,
                  const Worker& worker) {
    Phase phase(title, total, unit);
    RETURN_IF_ERROR(phase.Run(o_.threads, [&](int t) { return worker(&phase, t); }));
    table_.AddRow({title, phase.Rate(), phase.Latency(per)});
    return Status::OK();
  }

  void DropBeforeReading() {
    std::string why = DropCaches(dir_);
    if (!why.empty() && not_dropped_.empty()) not_dropped_ = why;
  }

  std::string BigPath(int t) const { return fmt::format("{}/big.{}", dir_, t); }
  std::string SmallPath(int t, uint64_t i) const { return fmt::format("{}/small.{}.{}", dir_, t, i); }

  const BenchOptions& o_;
  const std::string dir_;
  const uint64_t block_, big_, small_;
  const std::string data_;  // one block of random bytes, shared read-only by the writers
  Table table_{{"ITEM", "VALUE", "COST"}};
  std::string not_dropped_;
};

}  // namespace

int Bench(const BenchOptions& o) {
  struct stat st;
  if (stat(o.path.c_str(), &st) != 0) return Fail(fmt::format("{}: {}", o.path, strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return Fail(fmt::format("{}: not a directory", o.path));
  std::string templ = o.path + "/__tessera_bench_XXXXXX";
  if (mkdtemp(templ.data()) == nullptr)
    return Fail(fmt::format("cannot write in {}: {}", o.path, strerror(errno)));
  const std::string dir = templ;

  std::printf("BlockSize: %llu MiB, BigFileSize: %llu MiB, SmallFileSize: %llu KiB, SmallFileCount: %llu, "
              "NumThreads: %d\n",
              (unsigned long long)o.block_size_mib, (unsigned long long)o.big_file_size_mib,
              (unsigned long long)o.small_file_size_kib, (unsigned long long)o.small_file_count, o.threads);
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  Bencher bencher(o, dir);
  Status result = bencher.Run();

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!result.ok()) return Fail(result.ToString());
  if (ec) return Fail(fmt::format("cleaning up {}: {}", dir, ec.message()));

  const double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("Benchmark finished in %s (page cache %s)\n", FormatDuration(used).c_str(),
              bencher.not_dropped().empty() ? "dropped before each read phase"
                                            : ("NOT dropped: " + bencher.not_dropped()).c_str());
  bencher.table().Print(stdout);
  return 0;
}

}  // namespace tessera::cli
