// `tessera rmr PATH...`: removes trees inside the mount's own process,
// through its control channel (vfs/control.h), without a kernel round trip
// per entry.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/mount_state.h"
#include "common/unique_fd.h"

namespace tessera::cli {

namespace {

using Json = nlohmann::json;

// The mount containing path's parent directory, and path relative to its
// root (symlinks on the way resolved; the last component kept as is, so a
// symlink is removed itself, not its target).
Status Locate(const std::string& path, std::string* mount_point, std::string* rel) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  if (base == "." || base == "..") return Status::Err(EINVAL, path + ": refusing to remove '.' or '..'");
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return Status::Err(errno, path);
  char* real = realpath(dir.c_str(), nullptr);
  if (real == nullptr) return Status::Err(errno, dir);
  std::string full = real;
  free(real);
  ASSIGN_OR_RETURN(*mount_point, FindMountPoint(full));
  if (IsMountPoint(path) && S_ISDIR(st.st_mode))
    return Status::Err(EINVAL, path + " is the root of a mount: remove what is inside it");
  std::string inside = full.substr(mount_point->size());
  while (!inside.empty() && inside.front() == '/') inside.erase(0, 1);
  *rel = inside.empty() ? base : inside + "/" + base;
  return Status::OK();
}

// A connected socket (the caller closes it).
Result<int> Connect(const std::string& mount_point, const std::string& path) {
  Status last = Status::Err(ENOENT, path + " is not inside a Tessera mount of this host");
  for (const auto& sock : ControlSocketCandidates(mount_point)) {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return Status::Err(errno, "socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (sock.size() >= sizeof(addr.sun_path)) continue;
    std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      int kept = dup(fd.get());
      if (kept < 0) return Status::Err(errno, "dup");
      return kept;
    }
    if (errno != ENOENT) last = Status::Err(errno, "cannot reach the Tessera client of " + mount_point + " at " + sock);
  }
  return last;
}

// Sends one request; calls on_progress for each progress line; returns the
// "done" object, or the error as a Status.
Result<Json> Call(const std::string& mount_point, const std::string& path, const Json& request,
                  const std::function<void(const Json&)>& on_progress) {
  ASSIGN_OR_RETURN(int raw, Connect(mount_point, path));
  UniqueFd fd(raw);
  const std::string line = request.dump() + "\n";
  if (send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size()))
    return Status::Err(errno, "sending the request to the client of " + mount_point);
  std::string buf;
  char chunk[4096];
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      Json reply;
      try {
        reply = Json::parse(buf.substr(0, nl));
      } catch (const Json::exception& e) {
        return Status::Err(EPROTO, std::string("malformed reply from the client: ") + e.what());
      }
      buf.erase(0, nl + 1);
      if (reply.contains("progress")) {
        on_progress(reply["progress"]);
        continue;
      }
      if (reply.contains("done")) return reply["done"];
      Status st = Status::Err(reply.value("errno", EIO), reply.value("error", std::string("failed")));
      if (reply.contains("result")) on_progress(reply["result"]);
      return st;
    }
    ssize_t n = read(fd.get(), chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Err(ECONNRESET, "the client of " + mount_point + " closed the connection (unmounted?)");
    buf.append(chunk, size_t(n));
  }
}

}  // namespace

int Rmr(const std::vector<std::string>& paths) {
  int rc = 0;
  for (const auto& path : paths) {
    std::string mount_point, rel;
    Status st = Locate(path, &mount_point, &rel);
    if (!st.ok()) {
      rc = Fail(st.ToString());
      continue;
    }
    Progress progress;
    auto t0 = std::chrono::steady_clock::now();
    uint64_t files = 0, dirs = 0, failed = 0;
    auto show = [&](const Json& p) {
      files = p.value("files", uint64_t(0));
      dirs = p.value("dirs", uint64_t(0));
      failed = p.value("failed", uint64_t(0));
      progress.Show(fmt::format("removing {}: {} files, {} directories", path, files, dirs));
    };
    auto done = Call(mount_point, path, Json{{"op", "rmr"}, {"path", rel}}, show);
    progress.Done();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!done.ok()) {
      rc = Fail(fmt::format("{}{}", done.status().ToString(),
                            files + dirs + failed > 0
                                ? fmt::format(" ({} files and {} directories removed, {} entries left)", files, dirs,
                                              failed)
                                : ""));
      continue;
    }
    std::fprintf(stderr, "removed %s: %llu files, %llu directories in %.1f s\n", path.c_str(),
                 (unsigned long long)done->value("files", uint64_t(0)), (unsigned long long)done->value("dirs", uint64_t(0)),
                 secs);
  }
  return rc;
}

}  // namespace tessera::cli
