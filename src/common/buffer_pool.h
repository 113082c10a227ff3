// Byte buffers of a block's size kept for reuse. A block written or read at
// full speed was a fresh allocation each time: glibc maps a 4 MiB buffer
// anew, and the kernel faults its pages in and zeroes them (12-15% of a
// mount's CPU in 1 MiB sequential writes). Buffers come back here from the
// memory block cache when it lets a block go (Share) and from callers that
// are done with one (Give), and leave again by Take.
//
// A bounded pool: buffers of at least kMinBytes, and at most limit() bytes
// kept in all (kMaxBytes unless a mount sets it from its write buffer's
// size); what does not fit is freed as before. A pool that keeps more than
// kMaxBytes gives the excess back to the allocator once nothing has been
// taken from it for a while (TrimIdle). Thread-safe.
#pragma once

#include <chrono>
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

  // The most buffer room kept at once; never below kMaxBytes. A mount sets
  // it to half its write buffer: two files committing 64 MiB buffers at
  // once each pack them into a pool's worth of blocks, and with 64 MiB kept
  // the second took fresh memory every time (16,000 page faults, 150-400 ms
  // for the write that froze it, on a VM where a fault costs ~15 us).
  void set_limit(size_t bytes);
  size_t limit() const;
  // Frees kept buffers beyond kMaxBytes (those kept longest, mostly) when no Take,
  // Copy or Sized has asked the pool for `idle` (so that memory a burst of
  // writes left here goes back once the writing stops). Returns the bytes
  // freed.
  size_t TrimIdle(std::chrono::steady_clock::duration idle);

  // Bytes of buffer room kept now (tests, stats).
  size_t kept_bytes() const;

 private:
  // A kept buffer of `capacity` to 2x that room, as kept (length and all),
  // or an empty string.
  std::string Pop(size_t capacity);

  mutable std::mutex mu_;
  std::vector<std::string> free_;  // guarded by mu_: the most recently kept last
  size_t kept_ = 0;                // guarded by mu_: the capacities of free_
  size_t limit_ = kMaxBytes;       // guarded by mu_
  std::chrono::steady_clock::time_point last_asked_;  // guarded by mu_
};

}  // namespace tessera
