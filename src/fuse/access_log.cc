#include "fuse/access_log.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace tessera::fuse {

AccessLog::AccessLog()
    : readers_gauge_(metrics::NewGauge("tessera_accesslog_readers", "Readers of .accesslog (0: nothing is logged)")) {}

std::shared_ptr<AccessLog::Reader> AccessLog::Open() {
  auto r = std::make_shared<Reader>();
  std::lock_guard<std::mutex> g(mu_);
  if (readers_.size() >= size_t(kMaxReaders)) return nullptr;
  readers_.push_back(r);
  readers_count_.fetch_add(1, std::memory_order_relaxed);
  readers_gauge_->Add(1);
  return r;
}

void AccessLog::Close(const std::shared_ptr<Reader>& reader) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = std::find(readers_.begin(), readers_.end(), reader);
  if (it == readers_.end()) return;
  readers_.erase(it);
  readers_count_.fetch_sub(1, std::memory_order_relaxed);
  readers_gauge_->Add(-1);
}

void AccessLog::Write(const std::string& line) {
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& r : readers_) {
      if (r->buf.size() + line.size() > kMaxBuffered) {
        ++r->dropped;
        continue;
      }
      r->buf += line;
    }
  }
  cv_.notify_all();
}

std::string AccessLog::Read(Reader* reader, size_t size, const std::function<bool()>& interrupted) {
  std::unique_lock<std::mutex> lk(mu_);
  while (reader->buf.empty() && reader->dropped == 0) {
    lk.unlock();  // interrupted() may read /proc: not while every request's Write waits
    const bool stop = interrupted();
    lk.lock();
    if (stop) return "";
    if (reader->buf.empty() && reader->dropped == 0) cv_.wait_for(lk, std::chrono::milliseconds(200));
  }
  std::string out;
  if (reader->dropped > 0) {
    out = fmt::format("#{} lines dropped: this reader fell behind\n", reader->dropped);
    reader->dropped = 0;
  }
  // Whole lines only (a line longer than size goes in pieces).
  size_t take = std::min(reader->buf.size(), size > out.size() ? size - out.size() : 0);
  if (take < reader->buf.size()) {
    const size_t nl = reader->buf.rfind('\n', take == 0 ? 0 : take - 1);
    if (nl != std::string::npos && nl + 1 <= take) take = nl + 1;
  }
  out.append(reader->buf, 0, take);
  reader->buf.erase(0, take);
  if (out.size() > size) out.resize(size);  // a notice longer than the whole read
  return out;
}

}  // namespace tessera::fuse
