// The one retry policy. A request that failed with a transient error
// (Status::transient(): a conflict, a timeout, a dropped connection, a busy
// server) is sent again after a growing, jittered pause, a bounded number of
// times; any other error is the answer and returned at once. Callers retry
// only requests that are safe to send twice (idempotent object store
// requests; Redis calls carrying an operation id, redis_client.h).
//
// Used by the object store wrapper (RetryStore) and the Redis client; the
// layers above them never retry on their own. The staging area's background
// uploads, which must never give up, pause with RetryPolicy::Delay too.
#pragma once

#include <chrono>
#include <string_view>
#include <thread>
#include <utility>

#include "common/status.h"

namespace tessera {

struct RetryPolicy {
  int attempts = 10;  // tries in all (>= 1)
  std::chrono::milliseconds base{20};
  std::chrono::milliseconds max{2000};
  // Gives up early rather than start a try later than this after the first
  // (0 = no limit): bounds the time a caller waits on a server that hangs
  // each try for its full timeout.
  std::chrono::milliseconds max_elapsed{0};

  // The pause before try `attempt` (2, 3, ...): uniform in [cap/2, cap],
  // cap = base * 2^(attempt-2), at most max.
  std::chrono::milliseconds Delay(int attempt) const;
};

namespace retry_internal {
inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const Result<T>& r) {
  return r.ok() ? Status::OK() : r.status();
}
// Logs a retry ("what: error (attempt n), retrying in d ms").
void NoteRetry(std::string_view what, const Status& st, int attempt, std::chrono::milliseconds delay);
// The error after the last try of a transient failure: EIO (the request
// could not be done), keeping the message and the outcome-unknown class.
Status GiveUp(std::string_view what, const Status& last, int attempts);
}  // namespace retry_internal

// Runs fn() (returning Status or Result<T>) until it succeeds, fails with an
// error that is not transient, or policy.attempts tries failed; then the last
// transient error becomes EIO. `what` names the request in log lines.
template <typename Fn>
auto Retry(const RetryPolicy& policy, std::string_view what, Fn&& fn) -> decltype(fn()) {
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    auto r = fn();
    const Status st = retry_internal::StatusOf(r);
    if (st.ok() || !st.transient()) return r;
    if (attempt >= policy.attempts) return retry_internal::GiveUp(what, st, attempt);
    const auto delay = policy.Delay(attempt + 1);
    if (policy.max_elapsed.count() > 0 && std::chrono::steady_clock::now() + delay - start > policy.max_elapsed)
      return retry_internal::GiveUp(what, st, attempt);
    retry_internal::NoteRetry(what, st, attempt, delay);
    std::this_thread::sleep_for(delay);
  }
}

}  // namespace tessera
