// A kv::Listener that polls a change log (memory and sqlite3 engines):
// poll() runs every `interval` on the listener's thread and returns the
// payloads committed since its previous call. Internal to src/kv.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv.h"

namespace tessera::kv {

class PollingListener final : public Listener {
 public:
  // poll: appends new payloads; sets *lost when some may have been missed.
  // A failing poll counts as lost (the next one starts after what the log
  // holds then).
  using PollFn = std::function<Status(std::vector<std::string>* payloads, bool* lost)>;
  PollingListener(PollFn poll, Engine::NotifyFn fn, std::chrono::milliseconds interval);
  ~PollingListener() override;
  PollingListener(const PollingListener&) = delete;
  PollingListener& operator=(const PollingListener&) = delete;

 private:
  void Loop();

  const PollFn poll_;
  const Engine::NotifyFn fn_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;  // last: started after everything above
};

}  // namespace tessera::kv
