// Byte buffers of a block's size kept for reuse. A block written or read at
// full speed was a fresh allocation each time: glibc maps a 4 MiB buffer
// anew, and the kernel faults its pages in and zeroes them (12-15% of a
// mount's CPU in 1 MiB sequential writes). Buffers come back here from the
// memory block cache when it lets a block go (Share) and from callers that
// are done with one (Give), and leave again by Take.
//
// A bounded pool: buffers of at least kMinBytes, and at most kMaxBytes
// kept in all; what does not fit is freed as before. Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class BufferPool {
 public:
  static constexpr size_t kMinBytes = 64 << 10;
  static constexpr size_t kMaxBytes = 64 << 20;

  // The process's pool.
  static BufferPool& Default();

  // An empty string with room for at least `capacity` bytes: a kept buffer
  // of up to twice that room when there is one, else a new allocation.
  std::string Take(size_t capacity);
  // A taken buffer holding a copy of data; one of n bytes to read into.
  std::string Copy(std::string_view data);
  // A buffer of n bytes to be overwritten: a kept one's bytes are stale
  // data (not zeros), so the caller writes all n or shrinks it.
  std::string Sized(size_t n);
  // Keeps s's buffer for a later Take when it is big enough and there is
  // room; frees it otherwise. s is left empty.
  void Give(std::string&& s);
  // Give, for a buffer that may have grown as a plain string: kept only if
  // its room is at least `block` (a block's buffer, which the next Take of a
  // block can use); a smaller one would sit in the pool unfit for any block
  // and take its room. Freed otherwise; s is left empty.
  void GiveBlock(std::string&& s, size_t block);
  // s as a shared, immutable block whose buffer is given back here once the
  // last reference goes.
  std::shared_ptr<const std::string> Share(std::string&& s);

  // Bytes of buffer room kept now (tests, stats).
  size_t kept_bytes() const;

 private:
  // A kept buffer of `capacity` to 2x that room, as kept (length and all),
  // or an empty string.
  std::string Pop(size_t capacity);

  mutable std::mutex mu_;
  std::vector<std::string> free_;  // guarded by mu_
  size_t kept_ = 0;                // guarded by mu_: the capacities of free_
};

}  // namespace tessera
