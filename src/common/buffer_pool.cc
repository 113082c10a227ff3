#include "common/buffer_pool.h"

#include <algorithm>
#include <iterator>

namespace tessera {

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool();  // never destroyed: blocks may outlive static destruction
  return *pool;
}

std::string BufferPool::Pop(size_t capacity) {
  std::string out;
  if (capacity < kMinBytes) return out;
  std::lock_guard<std::mutex> g(mu_);
  last_asked_ = std::chrono::steady_clock::now();
  for (size_t i = free_.size(); i-- > 0;) {  // the most recently kept first: its pages are warm
    const size_t room = free_[i].capacity();
    if (room < capacity || room > 2 * capacity) continue;
    out = std::move(free_[i]);
    free_[i] = std::move(free_.back());
    free_.pop_back();
    kept_ -= room;
    break;
  }
  return out;
}

std::string BufferPool::Take(size_t capacity) {
  std::string out = Pop(capacity);
  out.clear();
  out.reserve(capacity);
  return out;
}

std::string BufferPool::Copy(std::string_view data) {
  std::string out = Take(data.size());
  out.append(data);
  return out;
}

std::string BufferPool::Sized(size_t n) {
  // A kept buffer keeps its length: its bytes were written before, so
  // resizing within them is no memset (only past them, or of a new one).
  std::string out = Pop(n);
  out.reserve(n);
  out.resize(n);
  return out;
}

void BufferPool::Give(std::string&& s) {
  std::string buf = std::move(s);
  s.clear();
  const size_t room = buf.capacity();
  if (room < kMinBytes) return;
  std::lock_guard<std::mutex> g(mu_);
  if (kept_ + room > limit_) return;  // freed as the lock goes (buf is destroyed after g)
  kept_ += room;
  free_.push_back(std::move(buf));  // with its length, for Sized
}

void BufferPool::GiveBlock(std::string&& s, size_t block) {
  if (s.capacity() >= block) return Give(std::move(s));
  std::string freed = std::move(s);
  s.clear();
}

std::shared_ptr<const std::string> BufferPool::Share(std::string&& s) {
  if (s.capacity() < kMinBytes) return std::make_shared<const std::string>(std::move(s));
  return std::shared_ptr<const std::string>(new std::string(std::move(s)), [this](const std::string* p) {
    // The last reference went: nothing else reads the block any more.
    std::unique_ptr<std::string> owned(const_cast<std::string*>(p));
    Give(std::move(*owned));
  });
}

void BufferPool::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  limit_ = std::max(bytes, kMaxBytes);
}

size_t BufferPool::limit() const {
  std::lock_guard<std::mutex> g(mu_);
  return limit_;
}

size_t BufferPool::TrimIdle(std::chrono::steady_clock::duration idle) {
  std::vector<std::string> freed;  // destroyed after the lock goes
  std::lock_guard<std::mutex> g(mu_);
  if (kept_ <= kMaxBytes || std::chrono::steady_clock::now() - last_asked_ < idle) return 0;
  size_t n = 0, bytes = 0;
  while (n < free_.size() && kept_ - bytes > kMaxBytes) bytes += free_[n++].capacity();
  freed.assign(std::make_move_iterator(free_.begin()), std::make_move_iterator(free_.begin() + ptrdiff_t(n)));
  free_.erase(free_.begin(), free_.begin() + ptrdiff_t(n));
  kept_ -= bytes;
  return bytes;
}

size_t BufferPool::kept_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return kept_;
}

}  // namespace tessera
