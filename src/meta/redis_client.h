// A small Redis client over hiredis for RedisMeta: URL parsing (secrets kept
// out of every message), a pool of blocking connections shared by the FUSE
// threads, reconnects and retries under the one retry policy
// (common/retry.h), a warning when the server stops answering, and a request
// counter. Internal to src/meta.
//
// Retries are safe because every request is: reads and plain commands are
// idempotent, and a function call that changes state (Call with mutating)
// carries an operation id, (connection key, sequence number), fixed at its
// first attempt. The function records its reply under the connection key
// (src/meta/redis_functions_admin.lua, `wrap`); every call reads that record
// first, so a resend of the same operation (after a connection broke with the
// reply lost), or a late copy of its first try, answers from the record
// instead of running again, and a copy older than the record does not run. A
// connection runs one request at a time, so only its last operation can be in
// doubt, and a connection that broke or whose call failed is never used
// again: one record per connection suffices.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
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
  // A request unanswered this long has lost its connection (and is retried).
  int io_timeout_ms = 10000;
  size_t max_connections = 64;
  // A request that cannot reach the server is retried this many times with
  // growing pauses (about 10 s in total), no try starting later than
  // retry_window_ms after the first, before it fails with EIO: a server that
  // vanished costs a caller at most about io_timeout + retry_window.
  int max_retries = 8;
  int retry_window_ms = 15000;
  // A request unanswered this long is logged as a warning (and again every
  // 10 s), naming the server: a stall is visible before the I/O timeout.
  int warn_after_ms = 3000;
  // Fault injection for tests (TESSERA_REDIS_FAULTS="lost_reply=P[,seed=N]"):
  // with probability P a state-changing call is performed by the server,
  // then its reply is thrown away and its connection closed, as if the
  // network had lost it.
  double lost_reply = 0;
  uint64_t fault_seed = 0;
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
  // This ARRAY without its last element (a view; nothing is copied).
  Reply WithoutLast() const;

 private:
  std::shared_ptr<redisReply> root_;  // owns the whole tree
  redisReply* r_ = nullptr;           // the node this view shows
  size_t hidden_ = 0;                 // trailing ARRAY elements this view leaves out
};

// Connects to opts' server and authenticates, blocking (bounded by its
// timeouts): the caller owns the context (redisFree). Transient codes when
// the server is not reachable; EACCES when it refuses the password.
Result<redisContext*> DialRaw(const Options& opts);

class Client {
 public:
  // Connects once to check the server answers (and that AUTH/SELECT work).
  static Result<std::unique_ptr<Client>> Connect(const Options& opts);
  ~Client();

  // One idempotent request (one round trip, more if retried). Errors: EIO
  // when the server cannot be reached after the retries, or answers an
  // error (out of memory, ...); EACCES when it refuses the credentials.
  Result<Reply> Command(const std::vector<std::string_view>& argv);
  // FCALL of function `fn` with args. A mutating call carries an operation
  // id as its two keys (see the header comment); others pass no keys. When
  // the server has lost the functions (restarted without persistence),
  // `reload` (one request that loads them) runs and the call is retried. A
  // mutating call whose every try lost its connection is outcome-unknown EIO.
  Result<Reply> Call(std::string_view fn, const std::vector<std::string_view>& args, bool mutating,
                     const std::vector<std::string_view>& reload);

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  const Options& options() const { return opts_; }
  // This client's connection keys start with it: the Redis functions name
  // the caller of a change with it (redis_functions_admin.lua, `publish`).
  const std::string& origin() const { return conn_prefix_; }

 private:
  struct Conn;
  explicit Client(Options opts);
  Result<Conn*> Acquire(bool* fresh);
  // Back to the pool, or closed: broken (the connection failed; the other
  // idle ones are closed too, most likely dead as well) or retired (it works,
  // but its operation record key must not be used again).
  void Release(Conn* c, bool broken, bool retired = false);
  Result<Conn*> Dial();
  void Close(Conn* c);
  Result<Reply> Send(Conn* c, const std::vector<std::string_view>& argv);
  // Sends argv under the retry policy. op (mutating calls): its id is taken
  // from the first connection used, argv[3] and argv[4] then point to it.
  Result<Reply> Run(std::vector<std::string_view> argv, bool mutating);
  bool LoseReply();
  void Watch();

  const Options opts_;
  const std::string conn_prefix_;  // "o<random hex>.": this client's connection keys
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Conn*> idle_;  // guarded by mu_
  std::vector<Conn*> all_;   // guarded by mu_: every open connection (for Watch)
  size_t open_ = 0;          // guarded by mu_: connections in existence or being dialled
  uint64_t next_conn_ = 0;   // guarded by mu_
  bool stop_ = false;        // guarded by mu_
  std::condition_variable stop_cv_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> faults_drawn_{0};
  std::thread watcher_;  // last: started after everything above
};

// SUBSCRIBE on a connection of its own (redis_subscriber.cc): calls
// on_message with every message published on the channel, from a thread of
// its own, until destroyed. A connection that breaks or stops answering its
// PINGs (every second; silent for io_timeout_ms) calls on_lost and is
// dialled again; on_lost is called again once subscribed anew (messages
// published meanwhile were missed) and every retry while that fails.
class Subscriber {
 public:
  static Result<std::unique_ptr<Subscriber>> Start(const Options& opts, std::string channel,
                                                    std::function<void(std::string_view)> on_message,
                                                    std::function<void()> on_lost);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

 private:
  Subscriber(const Options& opts, std::string channel, std::function<void(std::string_view)> on_message,
             std::function<void()> on_lost);
  Result<redisContext*> Connect();
  void Loop();

  const Options opts_;
  const std::string channel_;
  const std::function<void(std::string_view)> on_message_;
  const std::function<void()> on_lost_;
  redisContext* ctx_ = nullptr;  // the thread's once started
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::meta::redis
