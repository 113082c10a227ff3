// `tessera debug MOUNTPOINT`: collects what a bug report needs into one
// archive: versions, the mount's options (.config), two .stats snapshots
// some seconds apart, the access log of those seconds, the tail of the
// mount's log and the health of its metadata engine and object store.
// Secrets are masked (the files it reads mask them already; the log tail
// is scrubbed of URL passwords again).
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/build_info.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/mount_state.h"
#include "cli/observe_util.h"
#include "common/url.h"
#include "meta/meta.h"
#include "object/object_store.h"

namespace tessera::cli {

namespace {

Status WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path);
  out << data;
  out.close();
  if (!out) return Status::Err(EIO, "cannot write " + path);
  return Status::OK();
}

// The last `lines` lines of a file, URL passwords masked.
std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  if (!in) return fmt::format("(cannot read {}: {})\n", path, strerror(errno));
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(std::move(line));
    if (last.size() > lines) last.pop_front();
  }
  // user:password@ up to the last '@' before the host (a password may hold
  // '@'), and password=... in a query string.
  static const std::regex kUserinfo(R"(://([^:/@\s]*):[^/\s]*@)");
  static const std::regex kQuery(R"(([?&](password|passwd|secret|sk)=)[^&\s]*)", std::regex::icase);
  std::string out;
  for (auto& l : last) out += std::regex_replace(std::regex_replace(l, kUserinfo, "://$1:****@"), kQuery, "$1****") + "\n";
  return out;
}

// Times one request to each of the volume's services.
nlohmann::ordered_json Health(const std::string& meta_url) {
  nlohmann::ordered_json h;
  h["meta_url"] = RedactUrl(meta_url);
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return fmt::format("{:.3f} ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  };
  auto t0 = std::chrono::steady_clock::now();
  auto vol = OpenVolume(meta_url);
  if (!vol.ok()) {
    h["error"] = vol.status().ToString();
    return h;
  }
  h["open"] = since(t0);
  t0 = std::chrono::steady_clock::now();
  meta::StatFs fs;
  Status st = vol->meta->StatFS(meta::Context::Root(), &fs);
  h["meta_statfs"] = st.ok() ? since(t0) : st.ToString();
  t0 = std::chrono::steady_clock::now();
  auto sessions = vol->meta->ListSessions();
  h["meta_sessions"] = sessions.ok() ? fmt::format("{} session(s) in {}", sessions->size(), since(t0))
                                     : sessions.status().ToString();
  h["object_store"] = vol->store->Describe();
  t0 = std::chrono::steady_clock::now();
  auto head = vol->store->Head("tessera_debug_check_" + meta::NewUuid());
  h["object_head"] = head.ok() || head.status().not_found() ? since(t0) : head.status().ToString();
  return h;
}

// tar czf ARCHIVE -C DIR NAME, without a shell.
Status RunTar(const std::string& archive, const std::string& dir, const std::string& name) {
  const pid_t pid = fork();
  if (pid < 0) return Status::Err(errno, "fork");
  if (pid == 0) {
    execlp("tar", "tar", "czf", archive.c_str(), "-C", dir.c_str(), name.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return Status::Err(errno, "waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Status::Err(EIO, "tar failed");
  return Status::OK();
}

void RemoveTree(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace

int Debug(const DebugArgs& a) {
  if (a.seconds < 1 || a.seconds > 600) return Fail("--seconds must be between 1 and 600");
  auto mp = TesseraMountOf(a.mount_point);
  if (!mp.ok()) return Fail(mp.status().message());
  const std::string config_path = InternalFile(*mp, a.internal_prefix, "config");
  auto config = ReadInternalFile(config_path);
  if (!config.ok()) return Fail(config.status().message());
  umask(077);  // the archive holds every user's file names (the access log)
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  const std::string name = fmt::format("tessera-debug-{}", stamp);
  const std::string dir = a.out + "/" + name;
  if (mkdir(dir.c_str(), 0700) != 0) return Fail(fmt::format("cannot create {}: {}", dir, strerror(errno)));
  auto put = [&](const std::string& file, const std::string& data) {
    Status st = WriteFile(dir + "/" + file, data);
    if (!st.ok()) std::fprintf(stderr, "tessera: %s\n", st.message().c_str());
  };

  struct utsname u;
  uname(&u);
  put("version.txt", fmt::format("{}\nkernel: {} {} {} {}\nmount point: {}\n", VersionText(), u.sysname, u.release,
                                 u.version, u.machine, *mp));
  put("config.json", *config);
  std::fprintf(stderr, "tessera: collecting %d s of metrics and access log from %s\n", a.seconds, mp->c_str());

  const std::string stats_path = InternalFile(*mp, a.internal_prefix, "stats");
  auto stats0 = ReadInternalFile(stats_path);
  put("stats-start.txt", stats0.ok() ? *stats0 : stats0.status().message());
  // The access log of those seconds (a reader thread; left behind if idle).
  auto fd = OpenInternalFile(InternalFile(*mp, a.internal_prefix, "accesslog"));
  auto log = std::make_shared<std::string>();
  auto log_mu = std::make_shared<std::mutex>();
  if (fd.ok()) {
    FollowInBackground(
        *fd,
        [log, log_mu](std::string_view data) {
          std::lock_guard<std::mutex> g(*log_mu);
          if (log->size() < (64u << 20)) log->append(data);
        },
        [] {});
  }
  std::this_thread::sleep_for(std::chrono::seconds(a.seconds));
  auto stats1 = ReadInternalFile(stats_path);
  put(fmt::format("stats-after-{}s.txt", a.seconds), stats1.ok() ? *stats1 : stats1.status().message());
  {
    std::lock_guard<std::mutex> g(*log_mu);
    put("accesslog.txt", fd.ok() ? *log : fd.status().message() + "\n");
  }

  // The mount's log, and its engine and object store (the mount's state
  // file names its META-URL; root only).
  std::string log_file;
  try {
    log_file = nlohmann::json::parse(*config).value("log_file", "");
  } catch (const std::exception&) {
  }
  put("log-tail.txt", log_file.empty() ? "(the mount runs in the foreground: its log went to its terminal)\n"
                                       : Tail(log_file, 2000));
  auto state = ReadMountState(*mp);
  nlohmann::ordered_json health;
  if (state.ok()) health = Health(state->meta_url);
  else health["error"] = state.status().message() + " (run as root)";
  put("health.json", health.dump(2) + "\n");

  const std::string archive = fmt::format("{}/{}.tar.gz", a.out, name);
  if (Status st = RunTar(archive, a.out, name); !st.ok())
    return Fail(fmt::format("cannot write {}: {} (the files are in {})", archive, st.message(), dir));
  RemoveTree(dir);
  std::printf("%s\n", archive.c_str());
  std::fflush(stdout);
  std::_Exit(0);  // the access log reader may be blocked in read()
}

}  // namespace tessera::cli
