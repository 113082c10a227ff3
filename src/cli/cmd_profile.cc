// `tessera profile MOUNTPOINT`: reads the mount's .accesslog for a while and
// shows where the time goes: operations, inodes (and names) and processes
// by total time.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/observe_util.h"

namespace tessera::cli {

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Tally {
  uint64_t count = 0;
  uint64_t errors = 0;
  double seconds = 0;
};

struct Profile {
  std::map<std::string, Tally> ops, targets, processes;
  // What the log's entry replies taught: inode -> (parent, name).
  std::map<std::string, std::pair<std::string, std::string>> names;
  uint64_t lines = 0;

  // The path of an inode as far as the log has shown it, else "inode N".
  std::string PathOf(const std::string& ino, int depth = 0) const {
    if (ino == "1") return "/";
    auto it = names.find(ino);
    if (it == names.end() || depth > 64) return "inode " + ino;
    const std::string parent = PathOf(it->second.first, depth + 1);
    return (parent == "/" ? "" : parent) + "/" + it->second.second;
  }
};

// "2026.12.01 21:50:03.123456 [uid:0,gid:0,pid:1234] lookup (1,"a"): OK <0.000012>"
bool ParseLine(const std::string& line, Profile* p) {
  const size_t pid_at = line.find(",pid:");
  const size_t close = line.find("] ");
  if (pid_at == std::string::npos || close == std::string::npos || pid_at > close) return false;
  const std::string pid = line.substr(pid_at + 5, close - pid_at - 5);
  const size_t op_end = line.find(" (", close + 2);
  const size_t lt = line.rfind(" <");
  const size_t colon = line.rfind("): ", lt);
  if (op_end == std::string::npos || lt == std::string::npos || colon == std::string::npos || colon < op_end)
    return false;
  const std::string op = line.substr(close + 2, op_end - close - 2);
  const std::string args = line.substr(op_end + 2, colon - op_end - 2);
  const std::string result = line.substr(colon + 3, lt - colon - 3);
  const double secs = std::strtod(line.c_str() + lt + 2, nullptr);
  // The target: a path when the log taught it (entry replies name their
  // inode: "OK [ino N]"), else the inode; with the name for name operations.
  const std::string first = args.substr(0, args.find(','));
  std::string target = p->PathOf(first);
  if (op == "lookup" || op == "create" || op == "mknod" || op == "mkdir" || op == "unlink" || op == "rmdir" ||
      op == "rename" || op == "symlink" || op == "link") {
    const size_t q = args.find('"');
    const size_t q2 = q == std::string::npos ? q : args.find('"', q + 1);
    if (q2 != std::string::npos) {
      const std::string name = args.substr(q + 1, q2 - q - 1);
      // link's first argument is the inode; its new parent comes second.
      const std::string parent = op == "link" ? args.substr(first.size() + 1, args.find(',', first.size() + 1) - first.size() - 1) : first;
      target = (op == "link" ? p->PathOf(parent) : target);
      target = (target == "/" ? "" : target) + "/" + name;
      if (result.starts_with("OK [ino ")) {
        const std::string ino = result.substr(8, result.size() - 9);
        p->names[ino] = {parent, name};
      }
    }
  }
  const bool error = !result.starts_with("OK");
  for (auto* t : {&p->ops[op], &p->targets[target], &p->processes[pid]}) {
    ++t->count;
    t->errors += error;
    t->seconds += secs;
  }
  ++p->lines;
  return true;
}

void PrintTop(const char* title, const std::map<std::string, Tally>& m, size_t top) {
  std::vector<std::pair<std::string, Tally>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  size_t width = 24;
  for (size_t i = 0; i < v.size() && i < top; ++i) width = std::max(width, std::min<size_t>(v[i].first.size(), 60));
  std::printf("%-*s %10s %8s %12s %10s\n", int(width), title, "count", "errors", "total (s)", "avg (ms)");
  for (size_t i = 0; i < v.size() && i < top; ++i) {
    const Tally& t = v[i].second;
    std::string name = v[i].first;
    if (name.size() > width) name = "..." + name.substr(name.size() - width + 3);  // keep the end of a long path
    std::printf("%-*s %10llu %8llu %12.3f %10.3f\n", int(width), name.c_str(), (unsigned long long)t.count,
                (unsigned long long)t.errors, t.seconds, t.count ? t.seconds * 1000 / double(t.count) : 0.0);
  }
  std::printf("\n");
}

}  // namespace

int ProfileCmd(const ProfileArgs& a) {
  if (a.duration < 0 || a.duration > 86400) return Fail("--duration must be between 0 and 86400 seconds");
  auto mp = TesseraMountOf(a.mount_point);
  if (!mp.ok()) return Fail(mp.status().message());
  const std::string path = InternalFile(*mp, a.internal_prefix, "accesslog");
  auto fd = OpenInternalFile(path);
  if (!fd.ok()) return Fail(fd.status().message());
  // Shared with the reader thread, which may outlive this function.
  struct Shared {
    std::mutex mu;
    Profile profile;      // guarded by mu
    std::string pending;  // reader thread only: a partial line
    std::atomic<bool> done{false};
  };
  auto shared = std::make_shared<Shared>();
  FollowInBackground(
      *fd,
      [shared](std::string_view data) {
        shared->pending.append(data);
        std::lock_guard<std::mutex> g(shared->mu);
        size_t start = 0;
        for (size_t nl; (nl = shared->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          if (shared->pending[start] != '#') ParseLine(shared->pending.substr(start, nl - start), &shared->profile);
        }
        shared->pending.erase(0, start);
      },
      [shared] { shared->done = true; });
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::fprintf(stderr, "tessera: profiling %s%s\n", mp->c_str(),
               a.duration > 0 ? fmt::format(" for {} s", a.duration).c_str() : " until Ctrl-C");
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.duration);
  while (!g_stop && !shared->done && (a.duration == 0 || std::chrono::steady_clock::now() < end))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> g(shared->mu);
  const Profile& profile = shared->profile;
  std::printf("%llu requests\n\n", (unsigned long long)profile.lines);
  PrintTop("operation", profile.ops, a.top);
  PrintTop("path", profile.targets, a.top);
  PrintTop("process id", profile.processes, a.top);
  std::fflush(stdout);
  std::_Exit(0);  // the reader may be blocked in read(): the kernel interrupts it
}

}  // namespace tessera::cli
