// Process-wide metrics: counters, gauges and latency histograms that cost a
// relaxed atomic add on the hot path (no lock, no allocation). Metrics are
// created once, when a component starts (registering takes a lock), and kept
// by pointer; the registry owns them for the life of the process, so a
// pointer never dangles. Exported in the Prometheus text format by
// metrics_export.h (the mount's --metrics port and its .stats file); see
// docs/operations.md "Metrics" for the list.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tessera::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void Add(int64_t d) { v_.fetch_add(d, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Durations in fixed buckets from 50 µs to 10 s (upper bounds in
// kBucketBounds, seconds; one more bucket for everything above).
class Histogram {
 public:
  static constexpr size_t kBuckets = 17;
  static const std::array<double, kBuckets> kBucketBounds;

  void ObserveNs(uint64_t ns) {
    size_t i = 0;
    while (i < kBuckets && double(ns) > kBoundsNs[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
  void Observe(std::chrono::steady_clock::duration d) {
    ObserveNs(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }
  // counts[i]: observations in bucket i (not cumulative); the last is +Inf.
  void Read(std::array<uint64_t, kBuckets + 1>* counts, uint64_t* sum_ns) const;
  uint64_t count() const;

 private:
  static const std::array<double, kBuckets> kBoundsNs;
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Times a scope into a histogram (and counts it, the histogram's count).
class Timer {
 public:
  explicit Timer(Histogram* h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~Timer() {
    if (h_) h_->Observe(std::chrono::steady_clock::now() - start_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  Histogram* h_;
  std::chrono::steady_clock::time_point start_;
};

enum class Type { kCounter, kGauge, kHistogram };

// One sample of a family, read at collection time.
struct Sample {
  Labels labels;
  double value = 0;                                     // counter, gauge
  std::array<uint64_t, Histogram::kBuckets + 1> counts{};  // histogram
  double sum = 0;                                       // histogram, seconds
};

struct FamilySnapshot {
  std::string name, help;
  Type type = Type::kCounter;
  std::vector<Sample> samples;
};

// Values a component already keeps (cache sizes, its own counters), read
// when the metrics are collected: a collector function emits them.
class Emitter {
 public:
  void Counter(const std::string& name, const std::string& help, const Labels& labels, double value) {
    Add(name, help, Type::kCounter, labels, value);
  }
  void Gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
    Add(name, help, Type::kGauge, labels, value);
  }

 private:
  friend class Registry;
  void Add(const std::string& name, const std::string& help, Type type, const Labels& labels, double value);
  std::vector<FamilySnapshot>* out_ = nullptr;
};
using CollectFn = std::function<void(Emitter&)>;

// Unregisters a collector when destroyed.
class Registration {
 public:
  Registration() = default;
  explicit Registration(uint64_t id) : id_(id) {}
  ~Registration();
  Registration(Registration&& o) noexcept : id_(std::exchange(o.id_, 0)) {}
  Registration& operator=(Registration&& o) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  uint64_t id_ = 0;
};

class Registry {
 public:
  static Registry& Global();

  // The same (name, labels) returns the same metric. name: tessera_..., in
  // Prometheus's naming (counters end in _total, durations in _seconds).
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help, const Labels& labels = {});
  // fn runs on every collection, under the registry's lock: it must not
  // create metrics, and must not wait for a lock held by code that does.
  [[nodiscard]] Registration AddCollector(CollectFn fn);

  // Every family, sorted by name, samples in creation order.
  std::vector<FamilySnapshot> Collect() const;
  void Unregister(uint64_t id);

 private:
  struct Entry {
    std::string name, help;
    Type type;
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Entry* Find(const std::string& name, Type type, const Labels& labels);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;              // guarded by mu_
  std::vector<std::pair<uint64_t, CollectFn>> collectors_;  // guarded by mu_
  uint64_t next_id_ = 1;                                     // guarded by mu_
};

// The process's CPU time, resident memory, threads and uptime
// (tessera_process_*), read from /proc/self when collected.
[[nodiscard]] Registration RegisterProcessMetrics();

// Shorthands on the global registry.
inline Counter* NewCounter(const std::string& name, const std::string& help, const Labels& labels = {}) {
  return Registry::Global().GetCounter(name, help, labels);
}
inline Gauge* NewGauge(const std::string& name, const std::string& help, const Labels& labels = {}) {
  return Registry::Global().GetGauge(name, help, labels);
}
inline Histogram* NewHistogram(const std::string& name, const std::string& help, const Labels& labels = {}) {
  return Registry::Global().GetHistogram(name, help, labels);
}

}  // namespace tessera::metrics
