#include "meta/redis_client.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/url.h"

namespace tessera::meta::redis {

namespace {

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(char(std::strtol(std::string(s.substr(i + 1, 2)).c_str(), nullptr, 16)));
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
    if (auto at = rest.rfind('@'); at != std::string_view::npos) {
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
    if (auto colon = hostport.rfind(':'); colon != std::string_view::npos && hostport.find(']') == std::string_view::npos) {
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
size_t Reply::size() const { return is_array() ? r_->elements : 0; }
Reply Reply::at(size_t i) const {
  Reply out;
  if (i < size()) {
    out.root_ = root_;
    out.r_ = r_->element[i];
  }
  return out;
}

// ---------------------------------------------------------------- client

Result<std::unique_ptr<Client>> Client::Connect(const Options& opts) {
  std::unique_ptr<Client> client(new Client(opts));
  ASSIGN_OR_RETURN(redisContext * c, client->Dial());
  std::lock_guard<std::mutex> g(client->mu_);
  client->idle_.push_back(c);
  client->open_ = 1;
  return client;
}

Client::~Client() {
  for (redisContext* c : idle_) redisFree(c);
}

Result<redisContext*> Client::Dial() {
  redisContext* c = opts_.socket.empty()
                        ? redisConnectWithTimeout(opts_.host.c_str(), opts_.port, Millis(opts_.connect_timeout_ms))
                        : redisConnectUnixWithTimeout(opts_.socket.c_str(), Millis(opts_.connect_timeout_ms));
  if (c == nullptr) return Status::Err(EIO, "redis " + opts_.display + ": cannot allocate a connection");
  if (c->err) {
    std::string why = c->errstr;
    redisFree(c);
    return Status::Err(EIO, "redis " + opts_.display + ": cannot connect: " + why);
  }
  redisSetTimeout(c, Millis(opts_.io_timeout_ms));
  auto setup = [&](const std::vector<std::string_view>& argv) -> Status {
    auto r = Send(c, argv);
    return r.ok() ? Status::OK() : r.status();
  };
  Status st;
  if (!opts_.password.empty()) {
    st = opts_.user.empty() ? setup({"AUTH", opts_.password}) : setup({"AUTH", opts_.user, opts_.password});
    if (!st.ok()) st = Status::Err(EACCES, "redis " + opts_.display + ": authentication failed");
  }
  if (st.ok() && opts_.db != 0) st = setup({"SELECT", std::to_string(opts_.db)});
  if (!st.ok()) {
    redisFree(c);
    return st;
  }
  return c;
}

Result<redisContext*> Client::Acquire(bool* fresh) {
  {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !idle_.empty() || open_ < opts_.max_connections; });
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      *fresh = false;
      return c;
    }
    ++open_;
  }
  auto c = Dial();
  if (!c.ok()) {
    std::lock_guard<std::mutex> g(mu_);
    --open_;
    cv_.notify_one();
  }
  *fresh = true;
  return c;
}

void Client::Release(redisContext* c, bool broken) {
  std::lock_guard<std::mutex> g(mu_);
  if (broken) {
    redisFree(c);
    --open_;
  } else {
    idle_.push_back(c);
  }
  cv_.notify_one();
}

// One request on one connection; a transport failure leaves c->err set.
Result<Reply> Client::Send(redisContext* c, const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs(argv.size());
  std::vector<size_t> lens(argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    ptrs[i] = argv[i].data();
    lens[i] = argv[i].size();
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), ptrs.data(), lens.data()));
  if (r == nullptr) return Status::Err(EIO, "redis " + opts_.display + ": " + (c->err ? c->errstr : "no reply"));
  Reply reply(r);
  if (r->type == REDIS_REPLY_ERROR) {
    std::string err(r->str, r->len);
    if (err.starts_with("OOM")) return Status::Err(EIO, "redis " + opts_.display + " is out of memory: " + err);
    return Status::Err(Transient(err) ? EAGAIN : EIO, "redis " + opts_.display + ": " + err);
  }
  return reply;
}

Result<Reply> Client::Command(const std::vector<std::string_view>& argv) {
  static thread_local std::minstd_rand rng{std::random_device{}()};
  Status last;
  for (int attempt = 0;; ++attempt) {
    bool fresh = false;
    auto c = Acquire(&fresh);
    if (c.ok()) {
      auto r = Send(*c, argv);
      bool broken = (*c)->err != 0;
      Release(*c, broken);
      if (r.ok()) return r;
      last = r.status();
      // A server error other than a transient one is the answer.
      if (!broken && last.code() != EAGAIN) break;
      // A pooled connection found dead (the server restarted since it was
      // last used) is replaced at once.
      if (broken && !fresh && attempt == 0) continue;
    } else {
      last = c.status();
      if (last.code() == EACCES) break;
    }
    if (attempt >= opts_.max_retries) break;
    int base_ms = std::min(2000, 50 << std::min(attempt, 6));
    std::this_thread::sleep_for(std::chrono::milliseconds(base_ms / 2 + int(rng() % unsigned(base_ms / 2 + 1))));
  }
  if (last.code() == EAGAIN) return Status::Err(EIO, last.message());
  return last;
}

Result<Reply> Client::Call(const std::vector<std::string_view>& argv, const std::vector<std::string_view>& reload) {
  auto r = Command(argv);
  if (r.ok() || r.status().message().find("Function not found") == std::string::npos) return r;
  LOG_WARN("redis {}: functions missing (server restarted without persistence?), loading them again", opts_.display);
  RETURN_IF_ERROR(Command(reload).status());
  return Command(argv);
}

}  // namespace tessera::meta::redis
