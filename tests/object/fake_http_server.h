// A scripted HTTP/1.1 server on 127.0.0.1 for S3Store's hermetic tests: each
// request gets the next scripted reply (200 with an empty body once the
// script runs out). Keeps connections alive, records every request.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::object::testing {

class FakeHttpServer {
 public:
  enum class Action { kReply, kClose, kHang };
  struct Reply {
    int status = 200;
    std::string body{};
    std::vector<std::pair<std::string, std::string>> headers{};
    Action action = Action::kReply;
  };
  struct Request {
    std::string method, target;
    std::map<std::string, std::string> headers;  // lowercased names
    std::string body;
  };

  FakeHttpServer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : conns_) t.join();
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Script(Reply r) {
    std::lock_guard lock(mu_);
    script_.push_back(std::move(r));
  }
  std::vector<Request> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int connections() const { return connections_.load(); }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      ++connections_;
      conns_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // Reads until pred(buf) or EOF/stop; false on EOF/stop.
  bool ReadMore(int fd, std::string* buf) {
    char tmp[65536];
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::read(fd, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf->append(tmp, size_t(n));
      return true;
    }
    return false;
  }

  void Serve(int fd) {
    std::string buf;
    while (!stop_) {
      size_t end;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (!ReadMore(fd, &buf)) return Close(fd);
      }
      Request req;
      std::string head = buf.substr(0, end);
      buf.erase(0, end + 4);
      size_t line_end = head.find("\r\n");
      std::string first = head.substr(0, line_end);
      size_t sp1 = first.find(' '), sp2 = first.rfind(' ');
      req.method = first.substr(0, sp1);
      req.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
      size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        size_t e = head.find("\r\n", pos);
        if (e == std::string::npos) e = head.size();
        std::string line = head.substr(pos, e - pos);
        size_t colon = line.find(':');
        if (colon != std::string::npos) {
          std::string name = line.substr(0, colon), value = line.substr(colon + 1);
          for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
          while (!value.empty() && value[0] == ' ') value.erase(0, 1);
          req.headers[name] = value;
        }
        pos = e + 2;
      }
      size_t length = req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
      while (buf.size() < length) {
        if (!ReadMore(fd, &buf)) return Close(fd);
      }
      req.body = buf.substr(0, length);
      buf.erase(0, length);
      Reply reply;
      {
        std::lock_guard lock(mu_);
        requests_.push_back(req);
        if (!script_.empty()) {
          reply = std::move(script_.front());
          script_.pop_front();
        }
      }
      if (reply.action == Action::kClose) return Close(fd);
      if (reply.action == Action::kHang) {
        while (!stop_) ::usleep(10000);
        return Close(fd);
      }
      std::string out = "HTTP/1.1 " + std::to_string(reply.status) + " X\r\n";
      bool has_length = false;
      for (const auto& [k, v] : reply.headers) {
        out += k + ": " + v + "\r\n";
        has_length |= k == "Content-Length";
      }
      if (!has_length) out += "Content-Length: " + std::to_string(req.method == "HEAD" ? 0 : reply.body.size()) + "\r\n";
      out += "\r\n";
      if (req.method != "HEAD") out += reply.body;
      if (::write(fd, out.data(), out.size()) != ssize_t(out.size())) return Close(fd);
    }
    Close(fd);
  }
  static void Close(int fd) { ::close(fd); }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::vector<std::thread> conns_;  // touched by the acceptor thread only, then joined
  std::mutex mu_;
  std::deque<Reply> script_;       // guarded by mu_
  std::vector<Request> requests_;  // guarded by mu_
};

}  // namespace tessera::object::testing
