#include "object/retry_store.h"

#include <fmt/format.h>

namespace tessera::object {

namespace {
constexpr const char* kMethodNames[] = {"create", "put", "get", "delete", "head", "list"};
const Status& StatusOf(const Status& st) { return st; }
template <typename T>
Status StatusOf(const Result<T>& r) { return r.status(); }
}  // namespace

RetryStore::RetryStore(std::unique_ptr<ObjectStore> inner, RetryPolicy policy)
    : inner_(std::move(inner)), policy_(policy) {
  for (size_t i = 0; i < kMethodCount; ++i) {
    const metrics::Labels labels = {{"method", kMethodNames[i]}};
    metrics_[i].duration = metrics::NewHistogram("tessera_object_request_duration_seconds",
                                                 "Object store requests (every attempt): latency", labels);
    metrics_[i].errors = metrics::NewCounter("tessera_object_request_errors_total",
                                             "Object store requests that failed (not counting not-found)", labels);
    metrics_[i].retries = metrics::NewCounter("tessera_object_request_retries_total",
                                              "Object store requests sent again after a transient error", labels);
    metrics_[i].bytes = metrics::NewCounter("tessera_object_request_bytes_total",
                                            "Bytes sent (put) or received (get) by object store requests", labels);
  }
}

template <typename Fn>
auto RetryStore::Do(Method method, const std::string& key, Fn&& fn) -> decltype(fn()) {
  const MethodMetrics& m = metrics_[method];
  int attempts = 0;
  return Retry(policy_, fmt::format("object {} {}", kMethodNames[method], key), [&] {
    if (attempts++ > 0) m.retries->Inc();
    const auto start = std::chrono::steady_clock::now();
    auto r = fn();
    m.duration->Observe(std::chrono::steady_clock::now() - start);
    if (const Status& st = StatusOf(r); !st.ok() && !st.not_found()) m.errors->Inc();
    return r;
  });
}

Status RetryStore::Create() {
  return Do(kCreate, "", [&] { return inner_->Create(); });
}
Status RetryStore::Put(const std::string& key, std::string_view data) {
  Status st = Do(kPut, key, [&] { return inner_->Put(key, data); });
  if (st.ok()) metrics_[kPut].bytes->Inc(data.size());
  return st;
}
Result<std::string> RetryStore::Get(const std::string& key, int64_t off, int64_t len) {
  auto r = Do(kGet, key, [&] { return inner_->Get(key, off, len); });
  if (r.ok()) metrics_[kGet].bytes->Inc(r->size());
  return r;
}
Result<size_t> RetryStore::GetInto(const std::string& key, int64_t off, size_t len, char* dst) {
  auto r = Do(kGet, key, [&] { return inner_->GetInto(key, off, len, dst); });
  if (r.ok()) metrics_[kGet].bytes->Inc(*r);
  return r;
}
Status RetryStore::Delete(const std::string& key) {
  return Do(kDelete, key, [&] { return inner_->Delete(key); });
}
Result<ObjectInfo> RetryStore::Head(const std::string& key) {
  return Do(kHead, key, [&] { return inner_->Head(key); });
}
Status RetryStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                        std::vector<ObjectInfo>* out, bool* more) {
  return Do(kList, prefix, [&] { return inner_->List(prefix, start_after, limit, out, more); });
}

}  // namespace tessera::object
