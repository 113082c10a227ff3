#include "cli/control_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "cli/mount_state.h"
#include "common/unique_fd.h"

namespace tessera::cli {

using Json = nlohmann::json;

namespace {

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

}  // namespace

Result<Json> ControlCall(const std::string& mount_point, const std::string& path, const Json& request,
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

}  // namespace tessera::cli
