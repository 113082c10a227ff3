// FaultStore: an ObjectStore wrapper that injects seeded faults (STYLE.md
// principle 6), so the layers above can be tested against a store that fails
// the way a remote one does once its own retries are used up.
//
// Spec: comma-separated key=value pairs, e.g.
//   "seed=7,error=0.05,lost_reply=0.01,drop=0.01,delay_ms=0-5"
//   seed=N        decisions are a pure function of (seed, request number);
//                 without it a random seed is drawn (shown by Describe(), so a
//                 failing run can be repeated)
//   error=P       the request fails before reaching the store (ECONNREFUSED)
//   lost_reply=P  the request is performed, then the reply is lost: "it
//                 worked but nobody knows" (ETIMEDOUT, outcome unknown; a Put
//                 stored the object, a Delete removed it; for reads the
//                 result is thrown away)
//   drop=P        the connection drops mid-way (ECONNRESET after half the
//                 delay); reads have been performed, writes have not (a PUT
//                 cut off mid-body stores nothing)
//   delay_ms=A-B  sleep a uniform A..B ms (or exactly A for "delay_ms=A")
//                 before the request
//   delay=P       probability of that delay (default 1)
//   ops=put+get+head+delete+list+create
//                 the operations faults apply to (default all but create)
// At most one of error, lost_reply and drop happens to a request (their sum
// must be <= 1). Injected errors are transient (Status::transient(), so the
// RetryStore above retries them) with a message starting "injected".
//
// object::Open wraps a store in a FaultStore when StoreOptions::faults, or
// else the environment variable TESSERA_OBJECT_FAULTS, is a non-empty spec
// (StoreOptions::faults = "off" disables both).
//
// Determinism: request n (counted across all operations in the order they
// start) gets the decision hash(seed, n). One thread replays exactly; with
// several threads the same sequence of decisions is handed out, but which
// request gets which depends on scheduling.
//
// Thread-safe: the spec is immutable, the counters are atomic, the inner
// store must be thread-safe itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "object/object_store.h"

namespace tessera::object {

struct FaultSpec {
  uint64_t seed = 0;
  bool seeded = false;  // seed given in the spec
  double error = 0;
  double lost_reply = 0;
  double drop = 0;
  double delay = 1;
  int delay_min_ms = 0;
  int delay_max_ms = 0;
  unsigned ops = 0;  // bit set of FaultStore::Op

  // EINVAL naming the bad field.
  static Result<FaultSpec> Parse(const std::string& spec);
  // The canonical spec, always with the seed.
  std::string ToString() const;
};

class FaultStore final : public ObjectStore {
 public:
  enum Op : unsigned { kPut = 1, kGet = 2, kHead = 4, kDelete = 8, kList = 16, kCreate = 32 };
  enum class Fault { kNone, kError, kLostReply, kDrop };

  FaultStore(std::unique_ptr<ObjectStore> inner, FaultSpec spec);

  std::string Describe() const override;
  Status Create() override;
  Status Put(const std::string& key, std::string_view data) override;
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override;
  Status Delete(const std::string& key) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<ObjectInfo>* out, bool* more) override;
  bool cheap_ranges() const override { return inner_->cheap_ranges(); }

  struct Stats {
    uint64_t requests = 0;  // requests faults applied to (ops)
    uint64_t errors = 0;
    uint64_t lost_replies = 0;
    uint64_t drops = 0;
    uint64_t delays = 0;
  };
  Stats stats() const;
  const FaultSpec& spec() const { return spec_; }
  ObjectStore* inner() const { return inner_.get(); }

 private:
  struct Decision {
    Fault fault = Fault::kNone;
    int delay_ms = 0;
  };
  // Draws the next decision for op (kNone without delay if op is not subject
  // to faults) and counts it.
  Decision Next(Op op);
  // Runs call under decision d: is_write tells what a drop does.
  template <typename Fn>
  auto Run(Op op, bool is_write, const std::string& what, Fn&& call) -> decltype(call());

  const std::unique_ptr<ObjectStore> inner_;
  const FaultSpec spec_;  // immutable
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> requests_{0}, errors_{0}, lost_{0}, drops_{0}, delays_{0};
};

}  // namespace tessera::object
