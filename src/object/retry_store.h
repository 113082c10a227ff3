// RetryStore: an ObjectStore wrapper that retries requests failing with a
// transient error (Status::transient(): timeouts, dropped connections, 5xx
// and 429 answers of S3, ...) under the one retry policy (common/retry.h);
// after the last try such an error becomes EIO. Not-found, permission and
// argument errors are answers, returned at once. Every store operation is
// idempotent (a Put replaces the whole object, deleting a missing object is
// not an error), so a retry after a lost reply is safe.
//
// object::Open puts it on top of every store (above a FaultStore, so the
// file system is tested against the faults that survive the retries): it is
// the only place object requests are retried. It also counts them: per
// method, every attempt's latency (tessera_object_request_duration_seconds),
// failures, retries and bytes moved. Thread-safe if the inner store is.
#pragma once

#include <array>
#include <memory>

#include "common/metrics.h"
#include "common/retry.h"
#include "object/object_store.h"

namespace tessera::object {

class RetryStore final : public ObjectStore {
 public:
  RetryStore(std::unique_ptr<ObjectStore> inner, RetryPolicy policy);

  std::string Describe() const override { return inner_->Describe(); }
  Status Create() override;
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Result<size_t> GetInto(const std::string& key, int64_t off, size_t len, char* dst) override;
  Status Delete(const std::string& key) override;
  bool cheap_ranges() const override { return inner_->cheap_ranges(); }
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit, std::vector<ObjectInfo>* out,
              bool* more) override;

  const RetryPolicy& policy() const { return policy_; }
  ObjectStore* inner() const { return inner_.get(); }

 private:
  enum Method : size_t { kCreate, kPut, kGet, kDelete, kHead, kList, kMethodCount };
  struct MethodMetrics {
    metrics::Histogram* duration = nullptr;
    metrics::Counter* errors = nullptr;
    metrics::Counter* retries = nullptr;
    metrics::Counter* bytes = nullptr;
  };
  template <typename Fn>
  auto Do(Method method, const std::string& key, Fn&& fn) -> decltype(fn());

  std::array<MethodMetrics, kMethodCount> metrics_;

  const std::unique_ptr<ObjectStore> inner_;
  const RetryPolicy policy_;
};

}  // namespace tessera::object
