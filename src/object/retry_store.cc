#include "object/retry_store.h"

#include <fmt/format.h>

namespace tessera::object {

RetryStore::RetryStore(std::unique_ptr<ObjectStore> inner, RetryPolicy policy)
    : inner_(std::move(inner)), policy_(policy) {}

template <typename Fn>
auto RetryStore::Do(const char* what, const std::string& key, Fn&& fn) -> decltype(fn()) {
  return Retry(policy_, fmt::format("object {} {}", what, key), std::forward<Fn>(fn));
}

Status RetryStore::Create() {
  return Do("create", "", [&] { return inner_->Create(); });
}
Status RetryStore::Put(const std::string& key, std::string_view data) {
  return Do("put", key, [&] { return inner_->Put(key, data); });
}
Result<std::string> RetryStore::Get(const std::string& key, int64_t off, int64_t len) {
  return Do("get", key, [&] { return inner_->Get(key, off, len); });
}
Status RetryStore::Delete(const std::string& key) {
  return Do("delete", key, [&] { return inner_->Delete(key); });
}
Result<ObjectInfo> RetryStore::Head(const std::string& key) {
  return Do("head", key, [&] { return inner_->Head(key); });
}
Status RetryStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                        std::vector<ObjectInfo>* out, bool* more) {
  return Do("list", prefix, [&] { return inner_->List(prefix, start_after, limit, out, more); });
}

}  // namespace tessera::object
