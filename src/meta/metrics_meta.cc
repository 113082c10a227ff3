#include "meta/metrics_meta.h"

namespace tessera::meta {

MetricsMeta::MetricsMeta(std::unique_ptr<Meta> inner) : inner_(std::move(inner)) {
  static constexpr const char* kNames[kOpCount] = {
      "lookup", "getattr", "setattr", "truncate", "fallocate", "access",   "mknod",     "unlink",  "rmdir",
      "rename", "link",    "readlink", "readdir", "open",      "close",    "read",      "write",   "compact",
      "new_slice", "xattr", "lock",    "statfs",  "session",   "cleanup",  "dir_stats", "clone",   "quota"};
  for (size_t i = 0; i < kOpCount; ++i) {
    const metrics::Labels labels = {{"op", kNames[i]}};
    ops_[i].duration = metrics::NewHistogram("tessera_meta_op_duration_seconds",
                                             "Metadata engine calls by operation: latency (count: calls)", labels);
    ops_[i].errors = metrics::NewCounter("tessera_meta_op_errors_total",
                                         "Metadata engine calls that failed (I/O errors, lost replies)", labels);
  }
}

}  // namespace tessera::meta
