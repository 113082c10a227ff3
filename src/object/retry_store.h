// RetryStore: an ObjectStore wrapper that retries requests failing with a
// transient error (EIO, ETIMEDOUT, ECONNRESET, EAGAIN, EBUSY) a bounded number
// of times with exponential backoff and jitter. Not-found, permission and
// argument errors are answers, returned at once. Every store operation is
// idempotent (a Put replaces the whole object, deleting a missing object is
// not an error), so a retry after a lost reply is safe.
//
// object::Open puts it on top of every store (above a FaultStore, so the
// file system is tested against the faults that survive a backend's own
// retries). Thread-safe if the inner store is.
#pragma once

#include <memory>

#include "object/object_store.h"

namespace tessera::object {

class RetryStore final : public ObjectStore {
 public:
  // attempts: how many times a request is tried in all (>= 1).
  RetryStore(std::unique_ptr<ObjectStore> inner, int attempts, int base_delay_ms);

  std::string Describe() const override { return inner_->Describe(); }
  Status Create() override;
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Status Delete(const std::string& key) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit, std::vector<ObjectInfo>* out,
              bool* more) override;

  // Whether a failure with this code is worth another attempt.
  static bool Transient(int code);

 private:
  template <typename Fn>
  auto Retry(const char* what, const std::string& key, Fn&& fn) -> decltype(fn());

  const std::unique_ptr<ObjectStore> inner_;
  const int attempts_;
  const int base_delay_ms_;
};

}  // namespace tessera::object
