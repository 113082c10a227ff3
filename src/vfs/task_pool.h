// A fixed set of worker threads running submitted jobs in FIFO order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::vfs {

class TaskPool {
 public:
  // `name` labels the workers (NameThisThread), at most 15 bytes.
  TaskPool(size_t threads, const char* name);
  // Runs every job already submitted, then joins the workers.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Submit(std::function<void()> job);

 private:
  void Work();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace tessera::vfs
