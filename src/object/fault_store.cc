#include "object/fault_store.h"

#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace tessera::object {

namespace {

constexpr unsigned kDefaultOps =
    FaultStore::kPut | FaultStore::kGet | FaultStore::kHead | FaultStore::kDelete | FaultStore::kList;

constexpr std::pair<const char*, FaultStore::Op> kOpNames[] = {
    {"put", FaultStore::kPut},       {"get", FaultStore::kGet},   {"head", FaultStore::kHead},
    {"delete", FaultStore::kDelete}, {"list", FaultStore::kList}, {"create", FaultStore::kCreate},
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from 53 bits of h.
double Unit(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }

bool ParseDouble(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0';
}

bool ParseUint(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 10);
  return *end == '\0';
}

}  // namespace

Result<FaultSpec> FaultSpec::Parse(const std::string& text) {
  FaultSpec spec;
  spec.ops = kDefaultOps;
  auto bad = [&](const std::string& why) { return Status::Err(EINVAL, "object fault spec '" + text + "': " + why); };
  std::stringstream in(text);
  std::string field;
  while (std::getline(in, field, ',')) {
    if (field.empty()) continue;
    size_t eq = field.find('=');
    if (eq == std::string::npos) return bad("'" + field + "' is not key=value");
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "seed") {
      if (!ParseUint(value, &spec.seed)) return bad("seed must be an unsigned integer");
      spec.seeded = true;
    } else if (key == "error" || key == "lost_reply" || key == "drop" || key == "delay") {
      double p = 0;
      if (!ParseDouble(value, &p) || p < 0 || p > 1) return bad(key + " must be a probability between 0 and 1");
      (key == "error" ? spec.error : key == "lost_reply" ? spec.lost_reply : key == "drop" ? spec.drop : spec.delay) = p;
    } else if (key == "delay_ms") {
      size_t dash = value.find('-');
      uint64_t lo = 0, hi = 0;
      if (!ParseUint(value.substr(0, dash), &lo) ||
          !ParseUint(dash == std::string::npos ? value : value.substr(dash + 1), &hi) || lo > hi || hi > 600000)
        return bad("delay_ms must be N or MIN-MAX milliseconds (at most 600000)");
      spec.delay_min_ms = int(lo);
      spec.delay_max_ms = int(hi);
    } else if (key == "ops") {
      spec.ops = 0;
      std::stringstream ops(value);
      std::string name;
      while (std::getline(ops, name, '+')) {
        bool found = false;
        for (const auto& [n, op] : kOpNames) {
          if (name == n) {
            spec.ops |= op;
            found = true;
          }
        }
        if (!found) return bad("unknown op '" + name + "' (put, get, head, delete, list, create joined by '+')");
      }
    } else {
      return bad("unknown key '" + key + "' (seed, error, lost_reply, drop, delay_ms, delay, ops)");
    }
  }
  if (spec.error + spec.lost_reply + spec.drop > 1 + 1e-9) return bad("error + lost_reply + drop must be <= 1");
  if (!spec.seeded) spec.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  return spec;
}

std::string FaultSpec::ToString() const {
  std::string s = fmt::format("seed={}", seed);
  if (error > 0) s += fmt::format(",error={}", error);
  if (lost_reply > 0) s += fmt::format(",lost_reply={}", lost_reply);
  if (drop > 0) s += fmt::format(",drop={}", drop);
  if (delay_max_ms > 0) {
    s += delay_min_ms == delay_max_ms ? fmt::format(",delay_ms={}", delay_min_ms)
                                      : fmt::format(",delay_ms={}-{}", delay_min_ms, delay_max_ms);
    if (delay < 1) s += fmt::format(",delay={}", delay);
  }
  if (ops != kDefaultOps) {
    std::string names;
    for (const auto& [n, op] : kOpNames) {
      if (ops & op) names += (names.empty() ? "" : "+") + std::string(n);
    }
    s += ",ops=" + names;
  }
  return s;
}

FaultStore::FaultStore(std::unique_ptr<ObjectStore> inner, FaultSpec spec)
    : inner_(std::move(inner)), spec_(spec) {}

std::string FaultStore::Describe() const { return inner_->Describe() + " (faults: " + spec_.ToString() + ")"; }

FaultStore::Stats FaultStore::stats() const {
  return Stats{requests_.load(), errors_.load(), lost_.load(), drops_.load(), delays_.load()};
}

FaultStore::Decision FaultStore::Next(Op op) {
  Decision d;
  if (!(spec_.ops & op)) return d;
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  requests_.fetch_add(1, std::memory_order_relaxed);
  // Three independent draws from one request number.
  const uint64_t h1 = SplitMix64(spec_.seed ^ SplitMix64(n));
  const uint64_t h2 = SplitMix64(h1);
  const uint64_t h3 = SplitMix64(h2);
  double u = Unit(h1);
  if (u < spec_.error) {
    d.fault = Fault::kError;
    errors_.fetch_add(1, std::memory_order_relaxed);
  } else if ((u -= spec_.error) < spec_.lost_reply) {
    d.fault = Fault::kLostReply;
    lost_.fetch_add(1, std::memory_order_relaxed);
  } else if (u - spec_.lost_reply < spec_.drop) {
    d.fault = Fault::kDrop;
    drops_.fetch_add(1, std::memory_order_relaxed);
  }
  if (spec_.delay_max_ms > 0 && Unit(h2) < spec_.delay) {
    d.delay_ms = spec_.delay_min_ms + int(h3 % uint64_t(spec_.delay_max_ms - spec_.delay_min_ms + 1));
    if (d.delay_ms > 0) delays_.fetch_add(1, std::memory_order_relaxed);
  }
  return d;
}

template <typename Fn>
auto FaultStore::Run(Op op, bool is_write, const std::string& what, Fn&& call) -> decltype(call()) {
  const Decision d = Next(op);
  auto sleep = [](int ms) {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  switch (d.fault) {
    case Fault::kNone:
      sleep(d.delay_ms);
      return call();
    case Fault::kError:
      sleep(d.delay_ms);
      return Status::Err(ECONNREFUSED, "injected error: " + what);
    case Fault::kLostReply: {
      sleep(d.delay_ms);
      auto result = call();
      (void)result;
      return Status::Unknown(ETIMEDOUT, "injected lost reply: " + what);
    }
    case Fault::kDrop:
      sleep(d.delay_ms / 2);
      if (!is_write) {
        auto result = call();
        (void)result;
      }
      return Status::Err(ECONNRESET, "injected dropped connection: " + what);
  }
  return call();
}

Status FaultStore::Create() {
  return Run(kCreate, true, "create " + inner_->Describe(), [&] { return inner_->Create(); });
}

Status FaultStore::Put(const std::string& key, std::string_view data) {
  return Run(kPut, true, "put " + key, [&] { return inner_->Put(key, data); });
}

Result<std::string> FaultStore::Get(const std::string& key, int64_t off, int64_t len) {
  return Run(kGet, false, "get " + key, [&] { return inner_->Get(key, off, len); });
}

Status FaultStore::Delete(const std::string& key) {
  return Run(kDelete, true, "delete " + key, [&] { return inner_->Delete(key); });
}

Result<ObjectInfo> FaultStore::Head(const std::string& key) {
  return Run(kHead, false, "head " + key, [&] { return inner_->Head(key); });
}

Status FaultStore::List(const std::string& prefix, const std::string& start_after, size_t limit,
                        std::vector<ObjectInfo>* out, bool* more) {
  Status st = Run(kList, false, "list " + prefix, [&]() -> Status {
    return inner_->List(prefix, start_after, limit, out, more);
  });
  if (!st.ok()) out->clear();  // a lost reply's listing never arrived
  return st;
}

}  // namespace tessera::object
