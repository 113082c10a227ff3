#include "fuse/long_wait.h"

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace tessera::fuse {
namespace {

// A stopped child process that blocks SIGUSR1, with `threads` threads:
// Python, so that no thread starts in a forked copy of this (sanitized)
// process. Killed when it goes. A stopped process keeps the signals sent to
// it pending.
class Child {
 public:
  explicit Child(int threads) {
    int ready[2];
    if (pipe(ready) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      sigprocmask(SIG_SETMASK, &set, nullptr);  // kept across exec
      signal(SIGTERM, SIG_DFL);
      signal(SIGUSR2, SIG_DFL);
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
    const bool started = pid_ > 0 && read(ready[0], &c, 1) == 1;
    close(ready[0]);
    if (started && kill(pid_, SIGSTOP) == 0) {
      int status = 0;
      stopped_ = waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool ok() const { return stopped_; }
  pid_t pid() const { return pid_; }
  // A thread of the process other than its first (0 if none).
  pid_t OtherThread() const {
    pid_t other = 0;
    const std::string dir = "/proc/" + std::to_string(pid_) + "/task";
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        const pid_t tid = pid_t(std::atoi(e->d_name));
        if (tid > 0 && tid != pid_) other = tid;
      }
      closedir(d);
    }
    return other;
  }

 private:
  pid_t pid_ = -1;
  bool stopped_ = false;
};

TEST(LongWaitTest, ASignalForTheProcessOfOneThreadCountsAtOnce) {
  Child child(1);
  ASSERT_TRUE(child.ok());
  CallerSignals signals{uint32_t(child.pid())};
  EXPECT_FALSE(signals.Pending());
  // Blocked: the kernel would not interrupt the caller's request for it.
  ASSERT_EQ(kill(child.pid(), SIGUSR1), 0);
  EXPECT_FALSE(signals.Pending());
  EXPECT_FALSE(signals.Pending());
  ASSERT_EQ(kill(child.pid(), SIGTERM), 0);
  EXPECT_TRUE(signals.Pending());
}

TEST(LongWaitTest, ASignalForAProcessOfManyThreadsCountsOnTheSecondLook) {
  Child child(2);
  ASSERT_TRUE(child.ok());
  CallerSignals signals{uint32_t(child.pid())};
  ASSERT_EQ(kill(child.pid(), SIGTERM), 0);
  // Another thread may take it: then the kernel interrupts that one.
  EXPECT_FALSE(signals.Pending());
  // Still there at the next look: nobody took it.
  EXPECT_TRUE(signals.Pending());
}

TEST(LongWaitTest, ASignalForTheCallingThreadCountsForItAlone) {
  Child child(2);
  ASSERT_TRUE(child.ok());
  const pid_t other = child.OtherThread();
  ASSERT_GT(other, 0);
  ASSERT_EQ(syscall(SYS_tgkill, child.pid(), other, SIGUSR2), 0);
  CallerSignals caller{uint32_t(other)};
  EXPECT_TRUE(caller.Pending());
  CallerSignals first{uint32_t(child.pid())};
  EXPECT_FALSE(first.Pending());
  EXPECT_FALSE(first.Pending());
}

TEST(LongWaitTest, NoCallerOrAGoneOneIsNotSignalled) {
  EXPECT_FALSE(CallerSignals(0).Pending());
  pid_t gone = 0;
  {
    Child child(1);
    ASSERT_TRUE(child.ok());
    gone = child.pid();
  }
  CallerSignals signals{uint32_t(gone)};
  EXPECT_FALSE(signals.Pending());
}

}  // namespace
}  // namespace tessera::fuse
