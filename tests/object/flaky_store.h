// A memory object store whose puts fail on demand, for tests of the layers
// that upload (staging, writeback).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "object/memory_store.h"

namespace tessera::testing {

// Puts fail with EIO while `blocked` and for the next `fail_next` attempts.
class FlakyStore final : public object::ObjectStore {
 public:
  std::string Describe() const override { return "flaky+" + base_.Describe(); }
  Status Create() override { return Status::OK(); }
  Status Put(const std::string& key, std::string_view data) override {
    put_attempts.fetch_add(1);
    if (blocked.load()) return Status::Err(EIO, "store unavailable");
    if (fail_next.load() > 0 && fail_next.fetch_sub(1) > 0) return Status::Err(EIO, "injected put failure");
    return base_.Put(key, data);
  }
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override { return base_.Get(key, off, len); }
  Status Delete(const std::string& key) override { return base_.Delete(key); }
  Result<object::ObjectInfo> Head(const std::string& key) override { return base_.Head(key); }
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<object::ObjectInfo>* out, bool* more) override {
    return base_.List(prefix, start_after, limit, out, more);
  }
  bool Has(const std::string& key) { return base_.Head(key).ok(); }
  size_t Count() {
    std::vector<object::ObjectInfo> infos;
    EXPECT_TRUE(base_.List("", "", 1000000, &infos, nullptr).ok());
    return infos.size();
  }

  std::atomic<bool> blocked{false};
  std::atomic<int> fail_next{0};
  std::atomic<int> put_attempts{0};

 private:
  object::MemoryStore base_{"flaky"};
};

}  // namespace tessera::testing
