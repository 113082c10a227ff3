// The control channel of a mount: how `tessera rmr`, warmup, clone and
// summary ask the client that serves a path to do work inside its own
// process, with its caches. A Unix stream socket per mount, next to the
// mount's state file (cli/mount_state.h, ControlSocketPath), mode 0666 in a
// directory others may traverse but not list. The caller is known by the
// kernel (SO_PEERCRED: uid, gid, pid; supplementary groups from /proc), and
// every operation runs as that caller: the engine checks each step as it
// would for the same system calls (docs/operations.md, "The control
// channel"). Unlike a virtual file in the mount it takes no name from the
// user's tree and no FUSE request per message.
//
// Operations: {"op": "rmr", "path": P} (Vfs::RemoveTree), {"op": "warmup",
// "path": P, "mode": "load"|"evict"|"check", "threads": N} (Vfs::Warmup),
// {"op": "clone", "src": P, "dst_dir": D, "name": N, "preserve": B,
// "umask": M} (Vfs::Clone), {"op": "summary", "path": P, "depth": N,
// "entries": N} (meta::Summarize; read permission on a directory P),
// {"op": "ping"}.
//
// Protocol: the client sends one request, a JSON object on one line
// ({"op": "rmr", "path": "dir/sub"}, paths relative to the mount's root);
// the server answers with JSON lines: zero or more {"progress": {...}} and
// then one {"done": {...}} or {"error": "text", "errno": N}. A client that
// closes the connection cancels the work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "vfs/vfs.h"

namespace tessera::vfs {

class ControlServer {
 public:
  explicit ControlServer(Vfs* vfs) : vfs_(vfs) {}
  ~ControlServer() { Stop(); }
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Listens at path (replacing a stale socket file there).
  Status Start(const std::string& path);
  // Stops listening, cancels the work in progress and waits for it.
  void Stop();

  static constexpr int kMaxClients = 16;

 private:
  void AcceptLoop();
  void Serve(int fd);
  void Clone(int fd, const Context& ctx, const nlohmann::json& req);
  void Summary(int fd, const Context& ctx, const nlohmann::json& req);
  void Warmup(int fd, const Context& ctx, const nlohmann::json& req);

  Vfs* const vfs_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;               // guarded by mu_: connections being served (detached threads)
  std::vector<int> client_fds_;  // guarded by mu_: shut down by Stop
};

}  // namespace tessera::vfs
