#include "common/retry.h"

#include <algorithm>
#include <random>

#include "common/log.h"

namespace tessera {

std::chrono::milliseconds RetryPolicy::Delay(int attempt) const {
  thread_local std::minstd_rand rng{std::random_device{}()};
  const int64_t base_ms = std::max<int64_t>(1, base.count());
  const int64_t cap = std::min<int64_t>(std::max<int64_t>(max.count(), base_ms), base_ms << std::clamp(attempt - 2, 0, 20));
  return std::chrono::milliseconds(cap / 2 + int64_t(rng() % uint64_t(cap / 2 + 1)));
}

namespace retry_internal {

void NoteRetry(std::string_view what, const Status& st, int attempt, std::chrono::milliseconds delay) {
  // The first retries are routine (a dropped connection); persistent ones are news.
  if (attempt < 3) LOG_INFO("{}: {} (attempt {}), retrying in {} ms", what, st.ToString(), attempt, delay.count());
  else LOG_WARN("{}: {} (attempt {}), retrying in {} ms", what, st.ToString(), attempt, delay.count());
}

Status GiveUp(std::string_view what, const Status& last, int attempts) {
  std::string msg = fmt::format("{}: gave up after {} attempt(s): {}", what, attempts, last.ToString());
  LOG_WARN("{}", msg);
  return last.outcome_unknown() ? Status::Unknown(EIO, std::move(msg)) : Status::Err(EIO, std::move(msg));
}

}  // namespace retry_internal
}  // namespace tessera
