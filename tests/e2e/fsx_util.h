// Helpers of e2e_fsx (tests/e2e/fsx.cc): size parsing and the seeded
// random generator. A header, not a .cc: every *.cc in tests/e2e is its own
// program.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fsx {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

// Parses "123", "64K", "4M", "1G". Returns false on garbage or overflow.
inline bool ParseSize(const char* s, uint64_t* out) {
  errno = 0;
  char* end = nullptr;
  const bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  unsigned long long v = std::strtoull(s, &end, hex ? 16 : 10);
  if (errno != 0 || end == s || *s == '-') return false;
  uint64_t mult = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = kKiB; ++end; break;
    case 'm': case 'M': mult = kMiB; ++end; break;
    case 'g': case 'G': mult = kKiB * kMiB; ++end; break;
    default: return false;
  }
  if (*end != '\0' || v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

// xoshiro256** seeded through splitmix64: a seed replays the same run on any
// platform (std:: distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n); 0 when n == 0.
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  // Uniform in [lo, hi].
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
  bool OneIn(uint64_t n) { return Below(n) == 0; }
  void Fill(uint8_t* p, size_t n) {
    while (n >= 8) {
      uint64_t v = Next();
      std::memcpy(p, &v, 8);
      p += 8;
      n -= 8;
    }
    if (n > 0) {
      uint64_t v = Next();
      std::memcpy(p, &v, n);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace fsx
