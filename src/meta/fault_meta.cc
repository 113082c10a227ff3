#include "meta/fault_meta.h"

#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "common/log.h"

namespace tessera::meta {

namespace {

struct OpName {
  const char* name;
  FaultMeta::Op op;
};
constexpr OpName kOps[] = {{"write", FaultMeta::kWrite},       {"compact", FaultMeta::kCompact},
                           {"namespace", FaultMeta::kNamespace}, {"attr", FaultMeta::kAttrs},
                           {"xattr", FaultMeta::kXattr},       {"lock", FaultMeta::kLock},
                           {"ids", FaultMeta::kIds}};

// A uniform double in [0, 1) from (seed, n): splitmix64.
double Draw(uint64_t seed, uint64_t n) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (n + 1) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) / double(1ull << 53);
}

}  // namespace

Result<FaultMeta::Spec> FaultMeta::Spec::Parse(const std::string& text) {
  Spec spec;
  bool seeded = false;
  auto bad = [&](const std::string& why) { return Status::Err(EINVAL, "metadata fault spec '" + text + "': " + why); };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("expected key=value, got '" + item + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    char* rest = nullptr;
    if (key == "seed") {
      spec.seed = std::strtoull(value.c_str(), &rest, 10);
      seeded = true;
    } else if (key == "error" || key == "lost_reply") {
      const double p = std::strtod(value.c_str(), &rest);
      if (!(p >= 0 && p <= 1)) return bad(key + " must be a probability in [0, 1]");
      (key == "error" ? spec.error : spec.lost_reply) = p;
    } else if (key == "ops") {
      spec.ops = 0;
      size_t p = 0;
      while (p <= value.size()) {
        const size_t e = std::min(value.find('+', p), value.size());
        const std::string name = value.substr(p, e - p);
        p = e + 1;
        bool known = false;
        for (const auto& o : kOps)
          if (name == o.name) spec.ops |= o.op, known = true;
        if (!known) return bad("unknown operation '" + name + "' (write, compact, namespace, attr, xattr, lock)");
      }
      continue;
    } else {
      return bad("unknown key '" + key + "'");
    }
    if (rest == value.c_str() || (rest && *rest)) return bad("bad number '" + value + "'");
  }
  if (spec.error + spec.lost_reply > 1) return bad("error + lost_reply must be at most 1");
  if (!seeded) spec.seed = std::random_device{}();
  return spec;
}

std::string FaultMeta::Spec::ToString() const {
  std::string ops_text;
  for (const auto& o : kOps)
    if (ops & o.op) ops_text += (ops_text.empty() ? "" : "+") + std::string(o.name);
  return fmt::format("seed={},error={},lost_reply={},ops={}", seed, error, lost_reply, ops_text);
}

FaultMeta::FaultMeta(std::unique_ptr<Meta> inner, Spec spec) : inner_(std::move(inner)), spec_(spec) {}

void FaultMeta::FailNext(Op op, Fault fault, int n) {
  std::lock_guard<std::mutex> g(forced_mu_);
  forced_.push_back({op, {fault, n}});
}

FaultMeta::Stats FaultMeta::stats() const { return Stats{errors_.load(), lost_.load()}; }

FaultMeta::Fault FaultMeta::Next(Op op) {
  Fault fault = Fault::kNone;
  {
    std::lock_guard<std::mutex> g(forced_mu_);
    for (auto it = forced_.begin(); it != forced_.end(); ++it) {
      if (it->first != unsigned(op)) continue;
      fault = it->second.first;
      if (--it->second.second <= 0) forced_.erase(it);
      break;
    }
  }
  if (fault == Fault::kNone && (spec_.ops & op) != 0 && spec_.error + spec_.lost_reply > 0) {
    const double p = Draw(spec_.seed, draws_.fetch_add(1, std::memory_order_relaxed));
    if (p < spec_.error) fault = Fault::kError;
    else if (p < spec_.error + spec_.lost_reply) fault = Fault::kLostReply;
  }
  if (fault == Fault::kError) errors_.fetch_add(1, std::memory_order_relaxed);
  if (fault == Fault::kLostReply) lost_.fetch_add(1, std::memory_order_relaxed);
  return fault;
}

}  // namespace tessera::meta
