// NameThisThread (common/thread_name.h): the name shows in /proc, where
// `top -H` and `ps -L` read it, and a name past Linux's 15 bytes is cut, not
// refused.
#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace tessera {
namespace {

std::string CommOf(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// The name a new thread shows after naming itself `name`.
std::string NameShownFor(const char* name) {
  std::string seen;
  std::thread t([&] {
    NameThisThread(name);
    seen = CommOf(pid_t(::syscall(SYS_gettid)));
  });
  t.join();
  return seen;
}

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = CommOf(pid_t(::syscall(SYS_gettid)));
  EXPECT_EQ(NameShownFor("ts-test"), "ts-test");
  EXPECT_EQ(CommOf(pid_t(::syscall(SYS_gettid))), before) << "the caller's name changed";
}

TEST(ThreadNameTest, CutsNamesPastFifteenBytes) {
  EXPECT_EQ(NameShownFor("ts-a-name-far-too-long-for-linux"), "ts-a-name-far-t");
}

}  // namespace
}  // namespace tessera
