#include "vfs/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/thread_name.h"
#include "meta/summary.h"

namespace tessera::vfs {

namespace {

using Json = nlohmann::json;

// The caller, as the kernel knows it.
Result<Context> PeerContext(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return Status::Err(errno, "SO_PEERCRED");
  Context ctx;
  ctx.uid = cred.uid;
  ctx.gid = cred.gid;
  ctx.pid = uint32_t(cred.pid);
  if (ctx.uid != 0) {  // supplementary groups, for permission checks
    std::ifstream status(fmt::format("/proc/{}/status", cred.pid));
    std::string line;
    while (std::getline(status, line)) {
      if (!line.starts_with("Groups:")) continue;
      std::istringstream in(line.substr(7));
      uint32_t g = 0;
      while (in >> g) ctx.gids.push_back(g);
    }
  }
  return ctx;
}

// One line from the client (the request), at most 64 KiB.
Result<std::string> ReadLine(int fd) {
  std::string line;
  char c = 0;
  while (line.size() < 65536) {
    ssize_t n = read(fd, &c, 1);
    if (n == 0) return Status::Err(ECONNRESET, "the client closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Err(errno, "reading the request");
    }
    if (c == '\n') return line;
    line.push_back(c);
  }
  return Status::Err(EMSGSIZE, "request too long");
}

bool WriteLine(int fd, const Json& j) {
  std::string s = j.dump() + "\n";
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// Has the client gone (closed its end)? Checked between steps of long work.
bool Gone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

// The message without its errno text: the client makes a Status of both again.
Json Error(const Status& st) { return Json{{"error", st.message()}, {"errno", st.code()}}; }

// The last line of an answer: the result, or the error with the partial result.
void Finish(int fd, const Status& st, Json result) {
  if (st.ok()) {
    WriteLine(fd, Json{{"done", std::move(result)}});
    return;
  }
  Json e = Error(st);
  e["result"] = std::move(result);
  WriteLine(fd, e);
}

}  // namespace

Status ControlServer::Start(const std::string& path) {
  path_ = path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Status::Err(ENAMETOOLONG, "control socket path " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::Err(errno, "control socket");
  unlink(path.c_str());  // a stale one of a client that died
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || chmod(path.c_str(), 0666) != 0 ||
      listen(listen_fd_, kMaxClients) != 0) {
    Status st = Status::Err(errno, "control socket " + path);
    close(listen_fd_);
    listen_fd_ = -1;
    return st;
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::OK();
}

void ControlServer::Stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  listen_fd_ = -1;
  unlink(path_.c_str());
  std::unique_lock<std::mutex> lk(mu_);
  for (int fd : client_fds_) shutdown(fd, SHUT_RDWR);  // their work sees Gone() and stops
  idle_.wait(lk, [&] { return active_ == 0; });
}

void ControlServer::AcceptLoop() {
  NameThisThread("ts-control");
  while (!stopping_) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!stopping_) LOG_WARN("control socket: accept: {}", strerror(errno));
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    if (active_ >= kMaxClients || stopping_) {
      WriteLine(fd, Error(Status::Err(EBUSY, "too many control requests at once; try again")));
      close(fd);
      continue;
    }
    active_++;
    client_fds_.push_back(fd);
    std::thread([this, fd] {
      Serve(fd);
      std::lock_guard<std::mutex> g2(mu_);
      std::erase(client_fds_, fd);
      close(fd);
      if (--active_ == 0) idle_.notify_all();
    }).detach();
  }
}

void ControlServer::Serve(int fd) {
  auto ctx = PeerContext(fd);
  if (!ctx.ok()) {
    WriteLine(fd, Error(ctx.status()));
    return;
  }
  auto line = ReadLine(fd);
  if (!line.ok()) return;
  Json req;
  try {
    req = Json::parse(*line);
  } catch (const Json::exception& e) {
    WriteLine(fd, Error(Status::Err(EINVAL, std::string("malformed request: ") + e.what())));
    return;
  }
  const std::string op = req.value("op", "");
  if (op == "ping") {
    WriteLine(fd, Json{{"done", {{"pid", getpid()}, {"uid", ctx->uid}}}});
    return;
  }
  if (op == "warmup") {
    Warmup(fd, *ctx, req);
    return;
  }
  if (op == "clone") {
    Clone(fd, *ctx, req);
    return;
  }
  if (op == "summary") {
    Summary(fd, *ctx, req);
    return;
  }
  if (op != "rmr") {
    WriteLine(fd, Error(Status::Err(EINVAL, "unknown control operation '" + op + "'")));
    return;
  }
  const std::string path = req.value("path", "");
  Ino parent = 0, ino = 0;
  std::string name;
  Attr attr;
  Status st = vfs_->Resolve(*ctx, path, &parent, &name, &ino, &attr);
  if (st.ok() && ino == meta::kRootIno) st = Status::Err(EINVAL, "the root of the mount cannot be removed");
  if (!st.ok()) {
    WriteLine(fd, Error(st.With(path.empty() ? "/" : path)));
    return;
  }
  LOG_INFO("rmr {} (inode {}) for uid {} pid {}", path, ino, ctx->uid, ctx->pid);
  auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](const Vfs::RemoveProgress& p) {
    if (stopping_ || Gone(fd)) return false;
    return WriteLine(fd, Json{{"progress", {{"files", p.files}, {"dirs", p.dirs}, {"failed", p.failed}}}});
  };
  Vfs::RemoveProgress done;
  st = vfs_->RemoveTree(*ctx, parent, name, progress, &done);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LOG_INFO("rmr {}: {} files, {} directories removed in {:.1f} s{}", path, done.files, done.dirs, secs,
           st.ok() ? "" : "; " + st.ToString());
  Finish(fd, st, Json{{"files", done.files}, {"dirs", done.dirs}, {"failed", done.failed}, {"seconds", secs}});
}

void ControlServer::Clone(int fd, const Context& ctx, const nlohmann::json& req) {
  const std::string src = req.value("src", ""), dst_dir = req.value("dst_dir", ""), name = req.value("name", "");
  const bool preserve = req.value("preserve", false);
  const uint32_t umask = req.value("umask", 022u) & 0777;
  Ino sparent = 0, sino = 0, dparent = 0, dino = 0;
  std::string sname, dname;
  Attr sattr, dattr;
  Status st = vfs_->Resolve(ctx, src, &sparent, &sname, &sino, &sattr);
  if (!st.ok()) {
    WriteLine(fd, Error(st.With(src.empty() ? "/" : src)));
    return;
  }
  st = vfs_->Resolve(ctx, dst_dir, &dparent, &dname, &dino, &dattr);
  if (st.ok() && !dattr.IsDir()) st = Status::Err(ENOTDIR);
  if (!st.ok()) {
    WriteLine(fd, Error(st.With(dst_dir.empty() ? "/" : dst_dir)));
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  Ino ino = 0;
  Attr attr;
  uint64_t entries = 0;
  st = vfs_->Clone(ctx, sino, dino, name, umask, preserve, &ino, &attr, &entries);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LOG_INFO("clone {} -> {}/{} for uid {} pid {}: {} entries in {:.2f} s{}", src.empty() ? "/" : src, dst_dir, name,
           ctx.uid, ctx.pid, entries, secs, st.ok() ? "" : "; " + st.ToString());
  Finish(fd, st, Json{{"entries", entries}, {"ino", ino}, {"seconds", secs}});
}

namespace {
Json SummaryJson(const meta::SummaryNode& n) {
  Json j = {{"name", n.name},          {"ino", n.ino},           {"dir", n.dir},
            {"length", n.usage.length}, {"space", n.usage.space}, {"files", n.usage.files},
            {"dirs", n.usage.dirs}};
  if (!n.children.empty()) {
    j["children"] = Json::array();
    for (const auto& c : n.children) j["children"].push_back(SummaryJson(c));
  }
  return j;
}
}  // namespace

void ControlServer::Summary(int fd, const Context& ctx, const nlohmann::json& req) {
  const std::string path = req.value("path", "");
  meta::SummaryOptions opts;
  opts.depth = std::clamp(req.value("depth", 2), 0, 100);
  opts.entries = std::clamp<size_t>(req.value("entries", size_t(10)), 1, 100000);
  Ino parent = 0, ino = 0;
  std::string name;
  Attr attr;
  Status st = vfs_->Resolve(ctx, path, &parent, &name, &ino, &attr);
  // Like listing it: read permission on a directory (what is below is
  // counted from the statistics, as du would need read on each).
  if (st.ok() && attr.IsDir()) st = vfs_->Access(ctx, ino, R_OK);
  meta::SummaryNode node;
  if (st.ok()) st = meta::Summarize(vfs_->meta(), ino, req.value("name", name), opts, &node);
  if (!st.ok()) {
    WriteLine(fd, Error(st.With(path.empty() ? "/" : path)));
    return;
  }
  Finish(fd, st, Json{{"summary", SummaryJson(node)}});
}

void ControlServer::Warmup(int fd, const Context& ctx, const nlohmann::json& req) {
  const std::string path = req.value("path", "");
  const std::string mode_name = req.value("mode", "load");
  Vfs::WarmupMode mode = Vfs::WarmupMode::kLoad;
  if (mode_name == "evict") mode = Vfs::WarmupMode::kEvict;
  else if (mode_name == "check") mode = Vfs::WarmupMode::kCheck;
  else if (mode_name != "load") {
    WriteLine(fd, Error(Status::Err(EINVAL, "unknown warmup mode '" + mode_name + "'")));
    return;
  }
  const int threads = std::clamp(req.value("threads", 10), 1, 256);
  Ino parent = 0, ino = 0;
  std::string name;
  Attr attr;
  Status st = vfs_->Resolve(ctx, path, &parent, &name, &ino, &attr);
  if (!st.ok()) {
    WriteLine(fd, Error(st.With(path.empty() ? "/" : path)));
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto report = [](const Vfs::WarmupProgress& p) {
    return Json{{"files", p.files},   {"blocks", p.blocks},   {"bytes", p.bytes}, {"cached_blocks", p.cached_blocks},
                {"cached_bytes", p.cached_bytes}, {"failed", p.failed}};
  };
  auto progress = [&](const Vfs::WarmupProgress& p) {
    if (stopping_ || Gone(fd)) return false;
    return WriteLine(fd, Json{{"progress", report(p)}});
  };
  Vfs::WarmupProgress done;
  st = vfs_->Warmup(ctx, ino, mode, threads, progress, &done);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LOG_INFO("warmup ({}) {}: {} files, {} blocks, {} bytes in {:.1f} s{}", mode_name, path.empty() ? "/" : path,
           done.files, done.blocks, done.bytes, secs, st.ok() ? "" : "; " + st.ToString());
  Json result = report(done);
  result["seconds"] = secs;
  result["disk_cache"] = vfs_->DiskCacheOn();
  Finish(fd, st, std::move(result));
}

}  // namespace tessera::vfs
