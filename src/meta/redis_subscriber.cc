// Subscriber (redis_client.h): the Redis side of coherent caches. The
// connection is read with poll() and hiredis's reader, so that the thread
// notices both its own stop and a silent server without hiredis's
// blocking timeouts (which leave a context unusable).
#include <hiredis/hiredis.h>
#include <poll.h>

#include <chrono>

#include "common/log.h"
#include "common/thread_name.h"
#include "meta/redis_client.h"

namespace tessera::meta::redis {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using OwnedReply = std::unique_ptr<redisReply, ReplyFree>;

}  // namespace

Subscriber::Subscriber(const Options& opts, std::string channel, std::function<void(std::string_view)> on_message,
                       std::function<void()> on_lost)
    : opts_(opts), channel_(std::move(channel)), on_message_(std::move(on_message)), on_lost_(std::move(on_lost)) {}

Result<std::unique_ptr<Subscriber>> Subscriber::Start(const Options& opts, std::string channel,
                                                      std::function<void(std::string_view)> on_message,
                                                      std::function<void()> on_lost) {
  std::unique_ptr<Subscriber> s(new Subscriber(opts, std::move(channel), std::move(on_message), std::move(on_lost)));
  ASSIGN_OR_RETURN(s->ctx_, s->Connect());
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

Subscriber::~Subscriber() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (ctx_ != nullptr) redisFree(ctx_);
}

// Dials, authenticates and subscribes with blocking requests (bounded by the
// I/O timeout), then leaves the connection to Loop.
Result<redisContext*> Subscriber::Connect() {
  Result<redisContext*> dialed = DialRaw(opts_);
  if (!dialed.ok()) return dialed.status().With("subscribe to changes");
  redisContext* c = *dialed;
  const char* args[] = {"SUBSCRIBE", channel_.data()};
  const size_t lens[] = {9, channel_.size()};
  OwnedReply r(static_cast<redisReply*>(redisCommandArgv(c, 2, args, lens)));
  std::string why;
  if (!r) why = c->errstr[0] != '\0' ? c->errstr : "no reply";
  else if (r->type == REDIS_REPLY_ERROR) why = std::string(r->str, r->len);
  if (why.empty()) return c;
  redisFree(c);
  return Status::Err(EIO, "redis " + opts_.display + ": subscribe to changes: " + why);
}

void Subscriber::Loop() {
  NameThisThread("ts-redis-sub");
  int64_t last_heard = NowMs();
  int64_t last_ping = last_heard;
  bool failing = false;
  while (!stop_) {
    if (ctx_ == nullptr) {
      Result<redisContext*> c = Connect();
      if (!c.ok()) {
        if (!failing) LOG_WARN("{} (caches dropped until it works)", c.status().ToString());
        failing = true;
        on_lost_();
        for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      ctx_ = *c;
      if (failing) LOG_INFO("redis {}: subscribed to changes again", opts_.display);
      failing = false;
      last_heard = last_ping = NowMs();
      on_lost_();  // what was published while nobody listened
    }
    bool broken = false;
    // Replies already read, then the socket.
    for (;;) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) {
        broken = true;
        break;
      }
      if (raw == nullptr) break;
      OwnedReply r(static_cast<redisReply*>(raw));
      last_heard = NowMs();
      // ["message", channel, payload]; subscribe confirmations and PING
      // answers (["pong", ""]) only show the connection lives.
      if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_STRING &&
          std::string_view(r->element[0]->str, r->element[0]->len) == "message" &&
          r->element[2]->type == REDIS_REPLY_STRING) {
        on_message_(std::string_view(r->element[2]->str, r->element[2]->len));
      }
    }
    const int64_t now = NowMs();
    if (!broken && now - last_ping >= 1000) {
      last_ping = now;
      int done = 0;
      broken = redisAppendCommand(ctx_, "PING") != REDIS_OK;
      while (!broken && !done) broken = redisBufferWrite(ctx_, &done) != REDIS_OK;
    }
    if (!broken && now - last_heard > opts_.io_timeout_ms) broken = true;
    if (!broken) {
      pollfd pfd{ctx_->fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, 100);
      if (ready > 0) broken = redisBufferRead(ctx_) != REDIS_OK;
    }
    if (broken) {
      LOG_WARN("redis {}: subscription to changes broke ({}); caches dropped, subscribing again", opts_.display,
               ctx_->errstr[0] != '\0' ? ctx_->errstr : "no answer");
      redisFree(ctx_);
      ctx_ = nullptr;
      failing = true;
      on_lost_();
    }
  }
}

}  // namespace tessera::meta::redis
