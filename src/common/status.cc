#include "common/status.h"

#include <cstring>

namespace tessera {

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = std::strerror(code_);
  if (!msg_.empty()) s = msg_ + " (" + s + ")";
  return s;
}

}  // namespace tessera
