#include "meta/redis_client.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/retry.h"
#include "common/thread_name.h"
#include "common/url.h"

namespace tessera::meta::redis {

namespace {

int HexDigit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// "%HH" is a byte; any other '%' is itself ("50%off" stays as it is).
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 && HexDigit(s[i + 2]) >= 0) {
      out.push_back(char(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool ParseInt(std::string_view s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

timeval Millis(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

// Transient answers: the server is starting (loading its data), busy running
// a script, or failing over. Worth retrying like a lost connection.
bool Transient(std::string_view err) {
  return err.starts_with("LOADING") || err.starts_with("BUSY") || err.starts_with("TRYAGAIN") ||
         err.starts_with("MASTERDOWN");
}

}  // namespace

Result<Options> Options::Parse(const std::string& url) {
  Options o;
  o.display = RedactUrl(url);
  const std::string scheme = UrlScheme(url);
  auto bad = [&](const std::string& why) {
    return Status::Err(EINVAL, "invalid Redis URL \"" + o.display + "\": " + why);
  };
  if (scheme == "rediss") return bad("TLS (rediss://) is not supported by this build; use redis:// or unix://");
  if (scheme != "redis" && scheme != "unix") return bad("expected redis:// or unix://");
  std::string_view rest = std::string_view(url).substr(scheme.size() + 3);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (scheme == "unix") {
    if (rest.empty() || rest[0] != '/') return bad("expected unix:///path/to/redis.sock");
    o.socket = std::string(rest);
  } else {
    // The userinfo: the authority (up to the first '/') up to its last '@',
    // as RedactUrl sees it, so the password it masks is the one used here.
    if (auto at = rest.substr(0, rest.find('/')).rfind('@'); at != std::string_view::npos) {
      std::string_view auth = rest.substr(0, at);
      rest = rest.substr(at + 1);
      auto colon = auth.find(':');
      o.user = PercentDecode(auth.substr(0, colon));
      if (colon != std::string_view::npos) o.password = PercentDecode(auth.substr(colon + 1));
    }
    std::string_view hostport = rest.substr(0, rest.find('/'));
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      std::string_view db = rest.substr(slash + 1);
      if (!db.empty() && !ParseInt(db, &o.db)) return bad("the database must be a number");
    }
    // host:port or [v6]:port; the colons of [v6] alone are no port.
    if (auto colon = hostport.rfind(':'); colon != std::string_view::npos && hostport.find(']', colon) == std::string_view::npos) {
      if (!ParseInt(hostport.substr(colon + 1), &o.port) || o.port <= 0 || o.port > 65535) return bad("bad port");
      hostport = hostport.substr(0, colon);
    }
    if (hostport.starts_with('[') && hostport.ends_with(']')) hostport = hostport.substr(1, hostport.size() - 2);
    o.host = hostport.empty() ? "127.0.0.1" : std::string(hostport);
  }
  // Query parameters: db=N (unix form).
  while (!query.empty()) {
    std::string_view kv = query.substr(0, query.find('&'));
    query = kv.size() < query.size() ? query.substr(kv.size() + 1) : std::string_view();
    if (kv.starts_with("db=")) {
      if (!ParseInt(kv.substr(3), &o.db)) return bad("db must be a number");
    } else if (!kv.empty()) {
      return bad("unknown parameter \"" + std::string(kv.substr(0, kv.find('='))) + "\"");
    }
  }
  if (const char* f = std::getenv("TESSERA_REDIS_FAULTS"); f && *f) {
    std::string_view spec = f;
    while (!spec.empty()) {
      std::string_view kv = spec.substr(0, spec.find(','));
      spec = kv.size() < spec.size() ? spec.substr(kv.size() + 1) : std::string_view();
      if (kv.starts_with("lost_reply=")) o.lost_reply = std::strtod(std::string(kv.substr(11)).c_str(), nullptr);
      else if (kv.starts_with("seed=")) o.fault_seed = std::strtoull(std::string(kv.substr(5)).c_str(), nullptr, 10);
      else return Status::Err(EINVAL, "TESSERA_REDIS_FAULTS: unknown setting \"" + std::string(kv) + "\"");
    }
    if (!(o.lost_reply >= 0 && o.lost_reply <= 1)) return Status::Err(EINVAL, "TESSERA_REDIS_FAULTS: lost_reply must be in [0, 1]");
  }
  if (o.password.empty()) {
    for (const char* env : {"META_PASSWORD", "REDIS_PASSWORD"}) {
      if (const char* p = std::getenv(env); p && *p) {
        o.password = p;
        break;
      }
    }
  }
  return o;
}

// ---------------------------------------------------------------- replies

Reply::Reply(redisReply* r) : root_(r, [](redisReply* p) { freeReplyObject(p); }), r_(r) {}
bool Reply::nil() const { return r_ == nullptr || r_->type == REDIS_REPLY_NIL; }
bool Reply::is_array() const { return r_ && r_->type == REDIS_REPLY_ARRAY; }
int64_t Reply::integer() const {
  if (!r_) return 0;
  if (r_->type == REDIS_REPLY_INTEGER) return r_->integer;
  if (r_->type == REDIS_REPLY_STRING) return std::strtoll(std::string(r_->str, r_->len).c_str(), nullptr, 10);
  return 0;
}
std::string_view Reply::str() const {
  if (!r_ || (r_->type != REDIS_REPLY_STRING && r_->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r_->str, r_->len);
}
size_t Reply::size() const { return is_array() ? r_->elements - std::min(hidden_, r_->elements) : 0; }
Reply Reply::WithoutLast() const {
  Reply out = *this;
  if (size() > 0) ++out.hidden_;
  return out;
}
Reply Reply::at(size_t i) const {
  Reply out;
  if (i < size()) {
    out.root_ = root_;
    out.r_ = r_->element[i];
  }
  return out;
}

// ---------------------------------------------------------------- client

struct Client::Conn {
  redisContext* ctx = nullptr;
  std::string op_key;  // this connection's operation record ("o<client>.<n>")
  uint64_t seq = 0;    // operations sent on it so far
  // Steady-clock milliseconds since the request in progress was sent, 0
  // when idle; read by Watch.
  std::atomic<int64_t> busy_since_ms{0};
  int64_t warned_ms = 0;  // Watch only: when it last warned about this request
};

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string RandomHex() {
  std::random_device rd;
  uint64_t v = (uint64_t(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

// The one retry policy for Redis requests: max_retries after the first try,
// about 10 s of pauses, no try started after retry_window_ms.
RetryPolicy PolicyOf(const Options& o) {
  return RetryPolicy{o.max_retries + 1, std::chrono::milliseconds(50), std::chrono::milliseconds(2000),
                     std::chrono::milliseconds(o.retry_window_ms)};
}

}  // namespace

Client::Client(Options opts) : opts_(std::move(opts)), conn_prefix_("o" + RandomHex() + ".") {}

Result<std::unique_ptr<Client>> Client::Connect(const Options& opts) {
  std::unique_ptr<Client> client(new Client(opts));
  {
    std::lock_guard<std::mutex> g(client->mu_);
    client->open_ = 1;
  }
  auto c = client->Dial();
  // At startup an unreachable server is the answer (EIO, at once): a mount
  // against a wrong address must not hang in retries.
  if (!c.ok()) return c.status().transient() ? Status::Err(EIO, c.status().message()) : c.status();
  // One PING checks what the first real request would find out less clearly
  // (a server needing a password rejects a big unauthenticated request with
  // a protocol error).
  auto pong = client->Send(*c, {"PING"});
  if (!pong.ok()) {
    std::lock_guard<std::mutex> g(client->mu_);
    client->all_.clear();
    client->open_ = 0;
    client->Close(*c);
    return pong.status().transient() ? Status::Err(EIO, pong.status().message()) : pong.status();
  }
  {
    std::lock_guard<std::mutex> g(client->mu_);
    client->idle_.push_back(*c);
  }
  client->watcher_ = std::thread([p = client.get()] { p->Watch(); });
  return client;
}

Client::~Client() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  for (Conn* c : idle_) Close(c);
}

Result<redisContext*> DialRaw(const Options& opts) {
  redisContext* c = opts.socket.empty()
                        ? redisConnectWithTimeout(opts.host.c_str(), opts.port, Millis(opts.connect_timeout_ms))
                        : redisConnectUnixWithTimeout(opts.socket.c_str(), Millis(opts.connect_timeout_ms));
  if (c == nullptr) return Status::Err(ENOMEM, "redis " + opts.display + ": cannot allocate a connection");
  // Not reachable (yet): worth retrying, the server may be restarting.
  if (c->err) {
    const std::string why = c->errstr;
    redisFree(c);
    const int code = why.find("timed out") != std::string::npos  ? ETIMEDOUT
                     : why.find("No route") != std::string::npos ? EHOSTUNREACH
                     : why.find("unreachable") != std::string::npos ? ENETUNREACH
                                                                     : ECONNREFUSED;
    return Status::Err(code, "redis " + opts.display + ": cannot connect: " + why);
  }
  redisSetTimeout(c, Millis(opts.io_timeout_ms));
  if (opts.password.empty()) return c;
  std::vector<const char*> args = {"AUTH"};
  std::vector<size_t> lens = {4};
  if (!opts.user.empty()) {
    args.push_back(opts.user.data());
    lens.push_back(opts.user.size());
  }
  args.push_back(opts.password.data());
  lens.push_back(opts.password.size());
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(args.size()), args.data(), lens.data()));
  if (r == nullptr) {
    const std::string why = c->err ? c->errstr : "no reply";
    redisFree(c);
    return Status::Err(ECONNRESET, "redis " + opts.display + ": authenticate: " + why);
  }
  const bool refused = r->type == REDIS_REPLY_ERROR;  // never quoted: it could repeat the password
  freeReplyObject(r);
  if (refused) {
    redisFree(c);
    return Status::Err(EACCES, "redis " + opts.display +
                                   ": authentication failed: check the password (in the URL, or META_PASSWORD)");
  }
  return c;
}

Result<Client::Conn*> Client::Dial() {
  auto failed = [&](Status st) {
    std::lock_guard<std::mutex> g(mu_);
    --open_;
    cv_.notify_one();
    return st;
  };
  Result<redisContext*> dialed = DialRaw(opts_);
  if (!dialed.ok()) return failed(dialed.status());
  auto conn = std::make_unique<Conn>();
  conn->ctx = *dialed;
  if (opts_.db != 0) {
    auto r = Send(conn.get(), {"SELECT", std::to_string(opts_.db)});
    if (!r.ok()) {
      redisFree(conn->ctx);
      conn->ctx = nullptr;
      return failed(r.status());
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  conn->op_key = conn_prefix_ + std::to_string(next_conn_++);
  all_.push_back(conn.get());
  return conn.release();
}

void Client::Close(Conn* c) {
  redisFree(c->ctx);
  delete c;
}

Result<Client::Conn*> Client::Acquire(bool* fresh) {
  {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !idle_.empty() || open_ < opts_.max_connections; });
    if (!idle_.empty()) {
      Conn* c = idle_.back();
      idle_.pop_back();
      *fresh = false;
      return c;
    }
    ++open_;
  }
  *fresh = true;
  return Dial();
}

void Client::Release(Conn* c, bool broken, bool retired) {
  std::vector<Conn*> dead;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (retired && !broken) {
      all_.erase(std::find(all_.begin(), all_.end(), c));
      --open_;
      dead.push_back(c);
    } else if (broken) {
      // The others idle since before the break are most likely dead too (a
      // server restart): dial anew rather than find out one retry each.
      dead.swap(idle_);
      dead.push_back(c);
      for (Conn* d : dead) all_.erase(std::find(all_.begin(), all_.end(), d));
      open_ -= dead.size();
    } else {
      idle_.push_back(c);
    }
  }
  cv_.notify_all();
  for (Conn* d : dead) Close(d);
}

// One request on one connection; a transport failure leaves c->ctx->err set
// and is ECONNRESET (transient).
Result<Reply> Client::Send(Conn* c, const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs(argv.size());
  std::vector<size_t> lens(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  c->busy_since_ms.store(SteadyMs(), std::memory_order_relaxed);
  auto* r = static_cast<redisReply*>(redisCommandArgv(c->ctx, int(argv.size()), ptrs.data(), lens.data()));
  c->busy_since_ms.store(0, std::memory_order_relaxed);
  if (r == nullptr)
    return Status::Err(ECONNRESET, "redis " + opts_.display + ": " + (c->ctx->err ? c->ctx->errstr : "no reply"));
  Reply reply(r);
  if (r->type == REDIS_REPLY_ERROR) {
    std::string err(r->str, r->len);
    if (err.starts_with("OOM")) return Status::Err(EIO, "redis " + opts_.display + " is out of memory: " + err);
    if (err.starts_with("NOAUTH"))
      return Status::Err(EACCES, "redis " + opts_.display +
                                     " needs a password: give it in the URL (redis://:PASSWORD@host) or in "
                                     "META_PASSWORD");
    return Status::Err(Transient(err) ? EAGAIN : EIO, "redis " + opts_.display + ": " + err);
  }
  return reply;
}

bool Client::LoseReply() {
  if (opts_.lost_reply <= 0) return false;
  // A pure function of (seed, draw number), like the object FaultStore:
  // splitmix64 of their combination.
  uint64_t x = opts_.fault_seed * 0x9E3779B97F4A7C15ull + (faults_drawn_.fetch_add(1) + 1) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) / double(1ull << 53) < opts_.lost_reply;
}

Result<Reply> Client::Run(std::vector<std::string_view> argv, bool mutating) {
  std::string op_key, seq;  // mutating: the operation id, fixed by the first try
  std::string resend;       // "r" + seq: how every later try names it (redis_functions_admin.lua, `wrap`)
  bool maybe_done = false;  // a mutating try lost its connection after sending
  static metrics::Counter* const retries = metrics::NewCounter(
      "tessera_meta_tx_retries_total",
      "Metadata transactions or requests sent again (conflict, busy database, lost connection)", {{"engine", "redis"}});
  int tries = 0;
  auto attempt = [&]() -> Result<Reply> {
    if (tries++ > 0) retries->Inc();
    bool fresh = false;
    ASSIGN_OR_RETURN(Conn * c, Acquire(&fresh));
    if (mutating) {
      if (op_key.empty()) {
        op_key = c->op_key;
        seq = std::to_string(++c->seq);
        resend = "r" + seq;
        argv[4] = seq;
      } else {
        argv[4] = resend;  // the first try may have run: the function checks its record
      }
      argv[3] = op_key;
    }
    auto r = Send(c, argv);
    bool broken = c->ctx->err != 0;
    if (mutating && r.ok() && LoseReply()) {
      broken = true;
      r = Status::Err(ECONNRESET, "redis " + opts_.display + ": injected lost reply");
    }
    // A state-changing call that failed leaves its operation in doubt under
    // this connection's record key until a resend settles it, maybe on
    // another connection: a later call on this one would record over it
    // (redis_functions_admin.lua, `wrap`), so this connection is not used
    // again. Only an error reply gets here with the connection sound (BUSY,
    // LOADING, OOM, ...): rare.
    Release(c, broken, mutating && !r.ok());
    if (broken && mutating) maybe_done = true;
    return r;
  };
  auto r = Retry(PolicyOf(opts_), "redis " + opts_.display, attempt);
  if (!r.ok() && maybe_done && r.status().code() == EIO && !r.status().outcome_unknown())
    return Status::Unknown(EIO, r.status().message() + " (the request may have been applied)");
  return r;
}

Result<Reply> Client::Command(const std::vector<std::string_view>& argv) { return Run(argv, false); }

Result<Reply> Client::Call(std::string_view fn, const std::vector<std::string_view>& args, bool mutating,
                           const std::vector<std::string_view>& reload) {
  std::vector<std::string_view> argv = {"FCALL", fn};
  if (mutating) argv.insert(argv.end(), {"2", "", ""});  // the operation id, filled by Run
  else argv.push_back("0");
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = Run(argv, mutating);
  if (r.ok() || r.status().message().find("Function not found") == std::string::npos) return r;
  LOG_WARN("redis {}: functions missing (server restarted without persistence?), loading them again", opts_.display);
  RETURN_IF_ERROR(Command(reload).status());
  return Run(argv, mutating);
}

void Client::Watch() {
  NameThisThread("ts-redis-watch");
  std::unique_lock<std::mutex> g(mu_);
  while (!stop_) {
    stop_cv_.wait_for(g, std::chrono::seconds(1));
    if (stop_) break;
    const int64_t now = SteadyMs();
    int waiting = 0;
    int64_t oldest = 0;
    bool warn = false;
    for (Conn* c : all_) {
      const int64_t since = c->busy_since_ms.load(std::memory_order_relaxed);
      if (since == 0 || now - since < opts_.warn_after_ms) continue;
      ++waiting;
      oldest = std::max(oldest, now - since);
      if (c->warned_ms < since || now - c->warned_ms >= 10000) {
        c->warned_ms = now;
        warn = true;
      }
    }
    if (warn)
      LOG_WARN("redis {} has not answered for {:.1f} s ({} request(s) waiting; they fail after {} s)", opts_.display,
               double(oldest) / 1000, waiting, opts_.io_timeout_ms / 1000);
  }
}

}  // namespace tessera::meta::redis
