#include "vfs/task_pool.h"

#include "common/thread_name.h"

namespace tessera::vfs {

TaskPool::TaskPool(size_t threads, const char* name) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this, name] {
      NameThisThread(name);
      Work();
    });
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void TaskPool::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> g(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void TaskPool::Work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace tessera::vfs
