// Helpers shared by the fuzz targets (tests/fuzz/README.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

// An invariant of a decoder: on failure, say which and abort (libFuzzer then
// saves the input as a crash; the replay driver fails its test). Active in
// every build type, unlike assert().
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace tessera::fuzz {

// Takes typed values off the front of a fuzz input (a small
// FuzzedDataProvider: gcc has none). Reading past the end yields zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  explicit Input(std::string_view s) : data_(s.data()), size_(s.size()) {}

  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return remaining() == 0; }

  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), remaining());
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  bool Bool() { return Take<uint8_t>() & 1; }
  // Up to n bytes.
  std::string_view Bytes(size_t n) {
    n = std::min(n, remaining());
    std::string_view out(data_ + pos_, n);
    pos_ += n;
    return out;
  }
  // A string of 0..max bytes, its length taken from one byte.
  std::string_view Str(size_t max = 255) { return Bytes(std::min<size_t>(Take<uint8_t>(), max)); }
  std::string_view Rest() { return Bytes(remaining()); }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline std::string_view AsView(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// True if s is well-formed UTF-8 (what a JSON string can hold).
inline bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c >> 5) == 0x6) {
      n = 1, cp = c & 0x1F;
    } else if ((c >> 4) == 0xE) {
      n = 2, cp = c & 0x0F;
    } else if ((c >> 3) == 0x1E) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = uint8_t(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace tessera::fuzz
