// The global metrics registry (metrics.h) in the Prometheus text format: for
// a mount's .stats file, and served over HTTP at /metrics by --metrics
// (prometheus-cpp's pull exposer). Only this file's .cc includes
// prometheus-cpp.
#pragma once

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace tessera::metrics {

// Every metric, each sample carrying const_labels (volume, mount point and
// the user's --metrics-labels) before its own.
std::string TextFormat(const Labels& const_labels);

// Serves /metrics on addr ("host:port", e.g. "127.0.0.1:9567"; port 0 picks
// a free one) until destroyed.
class Exporter {
 public:
  // EADDRINUSE / EINVAL with a message naming addr when it cannot listen.
  static Result<std::unique_ptr<Exporter>> Start(const std::string& addr, const Labels& const_labels);
  ~Exporter();
  int port() const { return port_; }

 private:
  struct Impl;
  explicit Exporter(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// Parses "k=v,k2=v2" (--metrics-labels): names as Prometheus labels
// ([a-zA-Z_][a-zA-Z0-9_]*), values without ',' or '='.
Result<Labels> ParseLabels(const std::string& text);

}  // namespace tessera::metrics
