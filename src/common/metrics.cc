#include "common/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

namespace tessera::metrics {

const std::array<double, Histogram::kBuckets> Histogram::kBucketBounds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
const std::array<double, Histogram::kBuckets> Histogram::kBoundsNs = [] {
  std::array<double, kBuckets> ns{};
  for (size_t i = 0; i < kBuckets; ++i) ns[i] = kBucketBounds[i] * 1e9;
  return ns;
}();

void Histogram::Read(std::array<uint64_t, kBuckets + 1>* counts, uint64_t* sum_ns) const {
  for (size_t i = 0; i <= kBuckets; ++i) (*counts)[i] = counts_[i].load(std::memory_order_relaxed);
  *sum_ns = sum_ns_.load(std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

Registration::~Registration() {
  if (id_) Registry::Global().Unregister(id_);
}

Registration& Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    if (id_) Registry::Global().Unregister(id_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

Registry& Registry::Global() {
  static Registry* r = new Registry;  // never destroyed: metrics outlive every static user
  return *r;
}

Registry::Entry* Registry::Find(const std::string& name, Type type, const Labels& labels) {
  for (auto& e : entries_)
    if (e->type == type && e->name == name && e->labels == labels) return e.get();
  return nullptr;
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kCounter, labels)) return e->counter.get();
  auto e = std::make_unique<Entry>(Entry{name, help, Type::kCounter, labels, std::make_unique<Counter>(), {}, {}});
  entries_.push_back(std::move(e));
  return entries_.back()->counter.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kGauge, labels)) return e->gauge.get();
  auto e = std::make_unique<Entry>(Entry{name, help, Type::kGauge, labels, {}, std::make_unique<Gauge>(), {}});
  entries_.push_back(std::move(e));
  return entries_.back()->gauge.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kHistogram, labels)) return e->histogram.get();
  auto e = std::make_unique<Entry>(
      Entry{name, help, Type::kHistogram, labels, {}, {}, std::make_unique<Histogram>()});
  entries_.push_back(std::move(e));
  return entries_.back()->histogram.get();
}

Registration Registry::AddCollector(CollectFn fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  collectors_.emplace_back(id, std::move(fn));
  return Registration(id);
}

void Registry::Unregister(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.erase(std::remove_if(collectors_.begin(), collectors_.end(), [&](const auto& c) { return c.first == id; }),
                    collectors_.end());
}

void Emitter::Add(const std::string& name, const std::string& help, Type type, const Labels& labels, double value) {
  Sample s;
  s.labels = labels;
  s.value = value;
  out_->push_back(FamilySnapshot{name, help, type, {std::move(s)}});
}

std::vector<FamilySnapshot> Registry::Collect() const {
  std::map<std::string, FamilySnapshot> families;
  std::lock_guard<std::mutex> lock(mu_);  // gauge functions run under it: they must not register
  for (const auto& e : entries_) {
    FamilySnapshot& f = families[e->name];
    if (f.name.empty()) f.name = e->name, f.help = e->help, f.type = e->type;
    Sample s;
    s.labels = e->labels;
    switch (e->type) {
      case Type::kCounter:
        s.value = double(e->counter->value());
        break;
      case Type::kGauge:
        s.value = double(e->gauge->value());
        break;
      case Type::kHistogram: {
        uint64_t sum_ns = 0;
        e->histogram->Read(&s.counts, &sum_ns);
        s.sum = double(sum_ns) / 1e9;
        break;
      }
    }
    f.samples.push_back(std::move(s));
  }
  std::vector<FamilySnapshot> emitted;
  Emitter emitter;
  emitter.out_ = &emitted;
  for (const auto& [id, fn] : collectors_) fn(emitter);
  for (FamilySnapshot& e : emitted) {
    FamilySnapshot& f = families[e.name];
    if (f.name.empty()) f.name = e.name, f.help = e.help, f.type = e.type;
    for (Sample& s : e.samples) f.samples.push_back(std::move(s));
  }
  std::vector<FamilySnapshot> out;
  out.reserve(families.size());
  for (auto& [name, f] : families) out.push_back(std::move(f));
  return out;
}

Registration RegisterProcessMetrics() {
  const auto started = std::chrono::steady_clock::now();
  return Registry::Global().AddCollector([started](Emitter& e) {
    e.Gauge("tessera_process_uptime_seconds", "Seconds since the mount started", {},
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    // /proc/self/stat: utime and stime are fields 14 and 15, num_threads 20,
    // rss (pages) 24; the command name (field 2) may hold spaces: skip past ')'.
    FILE* f = std::fopen("/proc/self/stat", "r");
    if (!f) return;
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = 0;
    const char* p = std::strrchr(buf, ')');
    if (!p) return;
    unsigned long long utime = 0, stime = 0, rss = 0;
    long threads = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld %*d %*u %*u %llu",
                    &utime, &stime, &threads, &rss) != 4)
      return;
    const double ticks = double(sysconf(_SC_CLK_TCK));
    e.Counter("tessera_process_cpu_seconds_total", "CPU time of the mount process (user and system)", {},
              double(utime + stime) / ticks);
    e.Gauge("tessera_process_resident_memory_bytes", "Resident memory of the mount process", {},
            double(rss) * double(sysconf(_SC_PAGESIZE)));
    e.Gauge("tessera_process_threads", "Threads of the mount process", {}, double(threads));
  });
}

}  // namespace tessera::metrics
