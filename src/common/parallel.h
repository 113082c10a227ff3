// A bounded fan-out for independent work items (object deletions, checks):
// a few threads, each taking the next index.
#pragma once

#include <cstddef>
#include <functional>

namespace tessera {

// Calls fn(i) for i in [0, n) on `threads` threads (at least one, at most
// n), each taking the next index; returns when all are done.
void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& fn);

}  // namespace tessera
