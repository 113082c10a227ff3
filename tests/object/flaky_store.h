// A memory object store whose puts fail on demand, for tests of the layers
// that upload (staging, writeback).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "chunk/layout.h"
#include "object/memory_store.h"

namespace tessera::testing {

// Puts fail with put_error (EIO by default) while `blocked` and for the next
// `fail_next` attempts, or once the bucket holds put_room_bytes (a full
// disk); gets fail with EIO while `gets_blocked`.
class FlakyStore final : public object::ObjectStore {
 public:
  std::string Describe() const override { return "flaky+" + base_.Describe(); }
  Status Create() override { return Status::OK(); }
  Status Put(const std::string& key, std::string_view data) override {
    put_attempts.fetch_add(1);
    {
      std::lock_guard<std::mutex> g(thread_mu_);
      put_threads.push_back(std::this_thread::get_id());
    }
    if (const uint64_t id = SliceIdOf(key); id != 0 && id >= hold_puts_from.load()) {
      puts_held++;
      while (id >= hold_puts_from.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      puts_held--;
    }
    if (blocked.load()) return Status::Err(put_error.load(), "store unavailable");
    if (fail_next.load() > 0 && fail_next.fetch_sub(1) > 0) return Status::Err(put_error.load(), "injected put failure");
    if (put_room_bytes.load() >= 0) {
      // Checked and stored under one lock: concurrent uploads must not all
      // see the room that only one of them can have.
      std::lock_guard<std::mutex> g(room_mu_);
      if (Bytes() + int64_t(data.size()) > put_room_bytes.load()) return Status::Err(ENOSPC, "bucket full");
      return base_.Put(key, data);
    }
    return base_.Put(key, data);
  }
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override {
    if (gets_blocked.load()) return Status::Err(EIO, "injected get failure");
    return base_.Get(key, off, len);
  }
  Status Delete(const std::string& key) override {
    if (deletes_hang.load()) {  // an endpoint that stalls
      deletes_hanging++;
      while (deletes_hang.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      deletes_hanging--;
    }
    return base_.Delete(key);
  }
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

  int64_t Bytes() {
    std::vector<object::ObjectInfo> infos;
    EXPECT_TRUE(base_.List("", "", 1000000, &infos, nullptr).ok());
    int64_t n = 0;
    for (const auto& i : infos) n += i.size;
    return n;
  }

  std::atomic<bool> blocked{false};
  std::atomic<int> put_error{EIO};
  std::atomic<int> fail_next{0};
  std::atomic<int> put_attempts{0};
  std::atomic<int64_t> put_room_bytes{-1};  // < 0: no limit
  std::atomic<bool> gets_blocked{false};
  std::atomic<bool> deletes_hang{false};  // Delete waits while set
  // Puts of a slice's blocks wait while the slice id is at least this (an
  // upload that takes long: a slow object store).
  std::atomic<uint64_t> hold_puts_from{UINT64_MAX};
  std::atomic<int> puts_held{0};
  std::atomic<int> deletes_hanging{0};
  // The thread of every put attempt, in order.
  std::vector<std::thread::id> PutThreads() {
    std::lock_guard<std::mutex> g(thread_mu_);
    return put_threads;
  }

 private:
  // The slice id of a block's key (chunk::BlockKey); 0 if it is none.
  static uint64_t SliceIdOf(const std::string& key) {
    uint64_t id = 0;
    uint32_t index = 0, len = 0;
    return chunk::ParseBlockKey(key, &id, &index, &len) ? id : 0;
  }

  std::mutex room_mu_;
  std::mutex thread_mu_;
  std::vector<std::thread::id> put_threads;  // guarded by thread_mu_
  object::MemoryStore base_{"flaky"};
};

}  // namespace tessera::testing
