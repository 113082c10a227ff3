#include "kv/kv.h"

#include <cassert>
#include <cstdlib>
#include <string_view>

#include "common/url.h"
#include "common/log.h"
#include "kv/listen.h"
#include "kv/memory_kv.h"
#include "kv/postgres_kv.h"
#include "kv/sqlite_kv.h"

namespace tessera::kv {

Status Txn::Notify(std::string_view) {
  return Status::Err(ENOTSUP, "kv: this engine cannot notify other clients");
}

Result<std::unique_ptr<Listener>> Engine::Listen(NotifyFn) {
  return Status::Err(ENOTSUP, "kv: " + Name() + " cannot report other clients' changes");
}

PollingListener::PollingListener(PollFn poll, Engine::NotifyFn fn, std::chrono::milliseconds interval)
    : poll_(std::move(poll)), fn_(std::move(fn)), interval_(interval), thread_([this] { Loop(); }) {}

PollingListener::~PollingListener() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PollingListener::Loop() {
  bool failing = false;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, interval_, [&] { return stop_; })) return;
    }
    std::vector<std::string> payloads;
    bool lost = false;
    Status st = poll_(&payloads, &lost);
    if (!st.ok()) {
      if (!failing) LOG_WARN("reading other clients' changes: {} (caches dropped until it works)", st.ToString());
      failing = true;
      fn_({}, true);
      continue;
    }
    if (failing) LOG_INFO("reading other clients' changes works again");
    failing = false;
    if (lost || !payloads.empty()) fn_(payloads, lost);
  }
}

Status Txn::PutMany(const KeyValues& kvs) {
  for (const auto& [k, v] : kvs) RETURN_IF_ERROR(Put(k, v));
  return Status::OK();
}

Result<int64_t> Txn::Incr(std::string_view key, int64_t delta) {
  int64_t value = 0;
  Result<std::string> cur = Get(key);
  if (cur.ok()) {
    if (cur->size() != sizeof(value)) {
      return Status::Err(EINVAL,
                         "kv: Incr on a " + std::to_string(cur->size()) + "-byte value, want an 8-byte counter");
    }
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>((*cur)[i]);
    value = static_cast<int64_t>(u);
  } else if (!cur.status().not_found()) {
    return cur.status();
  }
  if (__builtin_add_overflow(value, delta, &value)) return Status::Err(EOVERFLOW, "kv: Incr overflows int64");
  char buf[sizeof(value)];
  uint64_t u = static_cast<uint64_t>(value);
  for (char& c : buf) {
    c = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  RETURN_IF_ERROR(Put(key, std::string_view(buf, sizeof(buf))));
  return value;
}

Result<std::unique_ptr<Engine>> Open(const std::string& url, const OpenOptions& opts) {
  const std::string expected =
      "expected memory://[NAME], sqlite3://PATH or postgres://[USER[:PASSWORD]@]HOST[:PORT]/DB";
  const size_t sep = url.find("://");
  if (sep == std::string::npos) {
    return Status::Err(EINVAL, "kv: malformed metadata URL '" + RedactUrl(url) + "': " + expected);
  }
  const std::string scheme = url.substr(0, sep);
  const std::string rest = url.substr(sep + 3);
  if (scheme == "memory") return OpenMemory(rest);
  if (scheme == "postgres" || scheme == "postgresql") return OpenPostgres(url);
  if (scheme == "sqlite3") {
    if (rest.empty()) {
      return Status::Err(EINVAL, "kv: metadata URL '" + url + "' has no database path: expected sqlite3://PATH");
    }
    if (rest.front() == ':') {
      // ":memory:" and friends would give every pooled connection its own database.
      return Status::Err(
          EINVAL,
          "kv: metadata URL '" + url +
              "' names a special SQLite database: expected a file path (use memory:// for an in-memory engine)");
    }
    SqliteOptions options;
    options.commit_delay = opts.commit_delay;
    // For side-by-side benchmarks of group commit (bench/md_ab.sh with a
    // wrapper that sets it; docs/benchmarks.md).
    if (const char* g = std::getenv("TESSERA_SQLITE_GROUP_COMMIT"); g != nullptr && std::string_view(g) == "0")
      options.group_commit = false;
    return OpenSqlite(rest, options);
  }
  return Status::Err(EINVAL,
                     "kv: unknown scheme '" + scheme + "' in metadata URL '" + RedactUrl(url) + "': " + expected);
}

void AppendU64BE(std::string* s, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) s->push_back(static_cast<char>((v >> shift) & 0xff));
}

void AppendU32BE(std::string* s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s->push_back(static_cast<char>((v >> shift) & 0xff));
}

uint64_t ReadU64BE(std::string_view s) {
  assert(s.size() >= 8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

uint32_t ReadU32BE(std::string_view s) {
  assert(s.size() >= 4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<uint8_t>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
  return end;
}

}  // namespace tessera::kv
