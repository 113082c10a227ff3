// Reading fields of the JSON records (volume settings, sessions) without
// exceptions or undefined behaviour: nlohmann's value()/get() throw on a
// field of the wrong type and convert out-of-range numbers with a plain cast
// (undefined for a double too big for the integer). Internal to src/meta.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::meta::json_fields {

// An absent field leaves *out alone and is fine. A present one must be a JSON
// integer within T's range (not a fraction, not 1e10), else false.
template <typename T>
bool Int(const nlohmann::json& j, const char* key, T* out) {
  static_assert(std::is_integral_v<T>);
  auto it = j.find(key);
  if (it == j.end()) return true;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->template get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<T>::max())) return false;
    *out = T(v);
    return true;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->template get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (v < 0 || uint64_t(v) > uint64_t(std::numeric_limits<T>::max())) return false;
    } else {
      if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max())) return false;
    }
    *out = T(v);
    return true;
  }
  return false;
}

// An absent field leaves *out alone; a present one must be a string.
inline bool Str(const nlohmann::json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) return true;
  if (!it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

}  // namespace tessera::meta::json_fields
