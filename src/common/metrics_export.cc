#include "common/metrics_export.h"

#include <arpa/inet.h>
#include <errno.h>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace tessera::metrics {

namespace {

std::vector<prometheus::MetricFamily> ToPrometheus(const Labels& const_labels) {
  std::vector<prometheus::MetricFamily> out;
  for (FamilySnapshot& f : Registry::Global().Collect()) {
    prometheus::MetricFamily pf;
    pf.name = f.name;
    pf.help = f.help;
    pf.type = f.type == Type::kCounter ? prometheus::MetricType::Counter
              : f.type == Type::kGauge ? prometheus::MetricType::Gauge
                                       : prometheus::MetricType::Histogram;
    for (const Sample& s : f.samples) {
      // A histogram nothing was observed in (an operation never requested)
      // is left out: most of them, most of the time, and 19 lines each.
      if (f.type == Type::kHistogram) {
        uint64_t n = 0;
        for (uint64_t c : s.counts) n += c;
        if (n == 0) continue;
      }
      prometheus::ClientMetric m;
      for (const auto& [k, v] : const_labels) m.label.push_back({k, v});
      for (const auto& [k, v] : s.labels) m.label.push_back({k, v});
      switch (f.type) {
        case Type::kCounter:
          m.counter.value = s.value;
          break;
        case Type::kGauge:
          m.gauge.value = s.value;
          break;
        case Type::kHistogram: {
          uint64_t cumulative = 0;
          for (size_t i = 0; i <= Histogram::kBuckets; ++i) {
            cumulative += s.counts[i];
            m.histogram.bucket.push_back(
                {cumulative, i < Histogram::kBuckets ? Histogram::kBucketBounds[i]
                                                     : std::numeric_limits<double>::infinity()});
          }
          m.histogram.sample_count = cumulative;
          m.histogram.sample_sum = s.sum;
          break;
        }
      }
      pf.metric.push_back(std::move(m));
    }
    if (!pf.metric.empty()) out.push_back(std::move(pf));
  }
  return out;
}

class Collector final : public prometheus::Collectable {
 public:
  explicit Collector(Labels const_labels) : const_labels_(std::move(const_labels)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return ToPrometheus(const_labels_); }

 private:
  const Labels const_labels_;
};

bool ValidLabelName(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return !s.starts_with("__");
}

}  // namespace

std::string TextFormat(const Labels& const_labels) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, ToPrometheus(const_labels));
  return out.str();
}

struct Exporter::Impl {
  std::shared_ptr<Collector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
};

Exporter::Exporter(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}
Exporter::~Exporter() = default;

Result<std::unique_ptr<Exporter>> Exporter::Start(const std::string& addr, const Labels& const_labels) {
  auto bad = [&](const std::string& why) {
    return Status::Err(EINVAL, "--metrics " + addr + ": " + why + " (expected HOST:PORT, e.g. 127.0.0.1:9567)");
  };
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = addr.substr(0, colon);
  const std::string port_text = addr.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535)
    return bad("'" + port_text + "' is not a port number");
  if (host == "localhost") host = "127.0.0.1";
  unsigned char buf[16];
  bool ok = false;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    ok = inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1;
  else
    ok = inet_pton(AF_INET, host.c_str(), buf) == 1;
  if (!ok) return bad("'" + host + "' is not an IP address");

  auto impl = std::make_unique<Impl>();
  impl->collector = std::make_shared<Collector>(const_labels);
  try {
    impl->exposer = std::make_unique<prometheus::Exposer>(host + ":" + port_text, 2);
  } catch (const std::exception& e) {
    return Status::Err(EADDRINUSE, "--metrics " + addr + ": cannot listen (is the port in use by another program?)");
  }
  impl->exposer->RegisterCollectable(impl->collector);
  const std::vector<int> ports = impl->exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports[0];
  return std::unique_ptr<Exporter>(new Exporter(std::move(impl), port));
}

Result<Labels> ParseLabels(const std::string& text) {
  Labels out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return Status::Err(EINVAL, "--metrics-labels: expected NAME=VALUE, got '" + item + "'");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (!ValidLabelName(k))
      return Status::Err(EINVAL, "--metrics-labels: '" + k + "' is not a label name (letters, digits and _, not "
                                                              "starting with a digit or __)");
    for (const char* own : {"vol_name", "mp", "op", "method", "cache", "job", "engine", "le"})
      if (k == own) return Status::Err(EINVAL, "--metrics-labels: '" + k + "' is a label of Tessera's own metrics");
    for (const auto& [name, value] : out)
      if (name == k) return Status::Err(EINVAL, "--metrics-labels: '" + k + "' given twice");
    out.emplace_back(std::move(k), std::move(v));
  }
  return out;
}

}  // namespace tessera::metrics
