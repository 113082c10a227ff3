#include "object/retry_store.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "common/log.h"

namespace tessera::object {

namespace {
// Status of a Status or of a Result<T>.
const Status& StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.ok() ? Status::OK() : r.status();
}
}  // namespace

RetryStore::RetryStore(std::unique_ptr<ObjectStore> inner, int attempts, int base_delay_ms)
    : inner_(std::move(inner)), attempts_(std::max(1, attempts)), base_delay_ms_(std::max(1, base_delay_ms)) {}

bool RetryStore::Transient(int code) {
  return code == EIO || code == ETIMEDOUT || code == ECONNRESET || code == EAGAIN || code == EBUSY ||
         code == ECONNREFUSED || code == EPIPE;
}

template <typename Fn>
auto RetryStore::Retry(const char* what, const std::string& key, Fn&& fn) -> decltype(fn()) {
  static thread_local std::minstd_rand rng{std::random_device{}()};
  for (int attempt = 1;; ++attempt) {
    auto r = fn();
    const Status st = StatusOf(r);
    if (st.ok() || !Transient(st.code()) || attempt >= attempts_) {
      if (!st.ok() && attempt > 1) LOG_WARN("object {} {}: giving up after {} attempts: {}", what, key, attempt, st.ToString());
      return r;
    }
    int cap = std::min(2000, base_delay_ms_ << std::min(attempt - 1, 10));
    int delay = cap / 2 + int(rng() % unsigned(cap / 2 + 1));
    LOG_INFO("object {} {}: {} (attempt {}), retrying in {} ms", what, key, st.ToString(), attempt, delay);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
}

Status RetryStore::Create() {
  return Retry("create", "", [&] { return inner_->Create(); });
}
Status RetryStore::Put(const std::string& key, std::string_view data) {
  return Retry("put", key, [&] { return inner_->Put(key, data); });
}
Result<std::string> RetryStore::Get(const std::string& key, int64_t off, int64_t len) {
  return Retry("get", key, [&] { return inner_->Get(key, off, len); });
}
Status RetryStore::Delete(const std::string& key) {
  return Retry("delete", key, [&] { return inner_->Delete(key); });
}
Result<ObjectInfo> RetryStore::Head(const std::string& key) {
  return Retry("head", key, [&] { return inner_->Head(key); });
}
Status RetryStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                        std::vector<ObjectInfo>* out, bool* more) {
  return Retry("list", prefix, [&] { return inner_->List(prefix, start_after, limit, out, more); });
}

}  // namespace tessera::object
