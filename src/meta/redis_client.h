// A small Redis client over hiredis for RedisMeta: URL parsing (secrets kept
// out of every message), a pool of blocking connections shared by the FUSE
// threads, reconnects with bounded retries, and a request counter. Internal
// to src/meta.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct redisContext;
struct redisReply;

namespace tessera::meta::redis {

// redis://[user[:password]@]host[:port][/db] or unix:///path/to/socket[?db=N].
// The password may also come from $META_PASSWORD or $REDIS_PASSWORD.
struct Options {
  std::string host;
  int port = 6379;
  std::string socket;  // unix socket path (then host/port unused)
  int db = 0;
  std::string user;
  std::string password;
  int connect_timeout_ms = 3000;
  int io_timeout_ms = 30000;
  size_t max_connections = 64;
  // A request that cannot reach the server is retried this many times with
  // growing pauses (about 10 s in total) before it fails with EIO.
  int max_retries = 8;
  // The URL with the password masked, for messages.
  std::string display;

  static Result<Options> Parse(const std::string& url);
};

// A reply: a tree of values. Errors never appear here (they become Status).
class Reply {
 public:
  Reply() = default;
  explicit Reply(redisReply* r);
  bool nil() const;
  bool is_array() const;
  int64_t integer() const;  // INTEGER replies (STRING parsed as decimal)
  std::string_view str() const;  // STRING/STATUS replies ("" for nil)
  size_t size() const;           // ARRAY elements
  Reply at(size_t i) const;      // a view into this reply's element i

 private:
  std::shared_ptr<redisReply> root_;  // owns the whole tree
  redisReply* r_ = nullptr;           // the node this view shows
};

class Client {
 public:
  // Connects once to check the server answers (and that AUTH/SELECT work).
  static Result<std::unique_ptr<Client>> Connect(const Options& opts);
  ~Client();

  // One request (one round trip). Errors: EIO when the server cannot be
  // reached after the retries, or answers an error (out of memory, ...).
  Result<Reply> Command(const std::vector<std::string_view>& argv);
  // Like Command for FCALL-style scripts: when the server has lost the
  // functions (restarted without persistence), `reload` (one request that
  // loads them) runs and the command is retried once.
  Result<Reply> Call(const std::vector<std::string_view>& argv, const std::vector<std::string_view>& reload);

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  const Options& options() const { return opts_; }

 private:
  explicit Client(Options opts) : opts_(std::move(opts)) {}
  Result<redisContext*> Acquire(bool* fresh);
  void Release(redisContext* c, bool broken);
  Result<redisContext*> Dial();
  Result<Reply> Send(redisContext* c, const std::vector<std::string_view>& argv);

  const Options opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<redisContext*> idle_;  // guarded by mu_
  size_t open_ = 0;                  // guarded by mu_: connections in existence
  std::atomic<uint64_t> requests_{0};
};

}  // namespace tessera::meta::redis
