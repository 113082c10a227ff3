// WaitWord (common/wait_word.h): a waiter sleeps until the word changes and
// sees what was written before the change; no wake-up is lost when the store
// races the waiter going to sleep (a lost one hangs the test).
#include "common/wait_word.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tessera {
namespace {

TEST(WaitWordTest, ReturnsAtOnceWhenTheWordDiffers) {
  WaitWord w(7);
  EXPECT_EQ(w.WaitWhile(3), 7u);
  EXPECT_EQ(w.Load(), 7u);
}

TEST(WaitWordTest, ASleepingWaiterWakesWithTheNewValueAndWhatWasWrittenBefore) {
  WaitWord w(0);
  int payload = 0;  // plain memory: the word's release/acquire orders it
  std::atomic<bool> returned{false};
  uint32_t seen = 0;
  int payload_seen = -1;
  std::thread waiter([&] {
    seen = w.WaitWhile(0);
    payload_seen = payload;
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load()) << "returned while the word still held the old value";
  payload = 42;
  w.StoreAndWake(2);
  waiter.join();
  EXPECT_EQ(seen, 2u);
  EXPECT_EQ(payload_seen, 42);
}

// Two threads hand a token back and forth through two words, each store
// racing the other side's way into the futex: 20,000 hand-offs.
TEST(WaitWordTest, NoWakeUpIsLostInRacingHandOffs) {
  constexpr uint32_t kRounds = 10000;
  WaitWord ping(0), pong(0);
  std::thread other([&] {
    for (uint32_t i = 1; i <= kRounds; ++i) {
      ASSERT_EQ(ping.WaitWhile(i - 1), i);
      pong.StoreAndWake(i);
    }
  });
  for (uint32_t i = 1; i <= kRounds; ++i) {
    ping.StoreAndWake(i);
    ASSERT_EQ(pong.WaitWhile(i - 1), i);
  }
  other.join();
  EXPECT_EQ(ping.Load(), kRounds);
  EXPECT_EQ(pong.Load(), kRounds);
}

}  // namespace
}  // namespace tessera
