#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tessera {

void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  const size_t count = std::clamp<size_t>(size_t(std::max(threads, 1)), 1, std::max<size_t>(n, 1));
  std::vector<std::thread> workers;
  for (size_t t = 1; t < count; ++t) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
}

}  // namespace tessera
