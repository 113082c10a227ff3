#include "fuse/long_wait.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tessera::fuse {
namespace {

// A child process that blocks SIGUSR1 and waits, with `threads` threads:
// Python, so that no thread starts in a forked copy of this (sanitized)
// process.
pid_t StartChild(int threads) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, nullptr);  // kept across exec
    dup2(ready[1], 1);
    const char* script =
        "import sys, threading, time\n"
        "if sys.argv[1] == '2': threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "print('x', flush=True)\n"
        "time.sleep(600)\n";
    execlp("python3", "python3", "-c", script, threads == 2 ? "2" : "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  char c = 0;
  const bool started = read(ready[0], &c, 1) == 1;
  close(ready[0]);
  if (!started) {
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

// Stops the child (a stopped process keeps the signals sent to it pending).
void Stop(pid_t pid) {
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
}

void End(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(LongWaitTest, CallerSignalledSeesAPendingSignalItDoesNotBlock) {
  const pid_t pid = StartChild(1);
  ASSERT_GT(pid, 0);
  Stop(pid);
  EXPECT_FALSE(CallerSignalled(uint32_t(pid)));
  // Blocked: the kernel would not interrupt the caller's request for it.
  ASSERT_EQ(kill(pid, SIGUSR1), 0);
  EXPECT_FALSE(CallerSignalled(uint32_t(pid)));
  // Not blocked: pending for the process, which has one thread.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_TRUE(CallerSignalled(uint32_t(pid)));
  End(pid);
  // Gone, or no caller: cannot tell, so no.
  EXPECT_FALSE(CallerSignalled(uint32_t(pid)));
  EXPECT_FALSE(CallerSignalled(0));
}

TEST(LongWaitTest, CallerSignalledLeavesAProcessSignalToAProcessOfManyThreads) {
  const pid_t pid = StartChild(2);
  ASSERT_GT(pid, 0);
  Stop(pid);
  // Another thread of the process may take it: the kernel does not
  // interrupt this one for it, so neither does the check.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_FALSE(CallerSignalled(uint32_t(pid)));
  End(pid);
}

}  // namespace
}  // namespace tessera::fuse
