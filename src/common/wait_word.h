// A 32-bit word that threads sleep on until it changes (Linux futex).
//
// std::atomic<T>::wait does the same, but libstdc++ first spins, calling
// sched_yield a dozen times: on a machine with more runnable threads than
// CPUs each yield hands the CPU to another thread, a context switch the
// waiter did not need. Measured with group commit (sql_kv.h), 4 processes
// removing directories on 2 CPUs: ~2 sched_yield calls per transaction and
// ~8% of the daemon's CPU in the switches they caused (docs/benchmarks.md).
// A waiter here goes to sleep at once; the waker pays one system call.
#pragma once

#include <atomic>
#include <cstdint>

namespace tessera {

class WaitWord {
 public:
  explicit WaitWord(uint32_t value) : word_(value) {}
  WaitWord(const WaitWord&) = delete;
  WaitWord& operator=(const WaitWord&) = delete;

  uint32_t Load() const { return word_.load(std::memory_order_acquire); }
  // Sleeps while the word holds `old`; returns the value it changed to
  // (acquire: what the storer wrote before it is visible).
  uint32_t WaitWhile(uint32_t old) const;
  // Stores value (release) and wakes the thread sleeping on the word, if any.
  // The caller must not touch the word after a waiter may have returned
  // unless it keeps the word alive (sql_kv.h shares it).
  void StoreAndWake(uint32_t value);

 private:
  std::atomic<uint32_t> word_;
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
                "futex needs a plain 32-bit word");
};

}  // namespace tessera
