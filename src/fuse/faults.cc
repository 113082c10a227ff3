#include "fuse/faults.h"

#include <fmt/format.h>

namespace tessera::fuse {

Result<FuseFaults> ParseFuseFaults(std::string_view spec) {
  FuseFaults f;
  for (bool more = !spec.empty(); more;) {
    const size_t comma = spec.find(',');
    const std::string_view name = spec.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) spec.remove_prefix(comma + 1);
    if (name == "drop-interrupts") {
      f.drop_interrupts = true;
    } else if (name == "slow-ring-growth") {
      f.slow_ring_growth = true;
    } else {
      return Status::Err(EINVAL, fmt::format("TESSERA_FUSE_FAULTS: unknown fault '{}' (known: drop-interrupts, "
                                             "slow-ring-growth; separate several with commas)",
                                             name));
    }
  }
  return f;
}

}  // namespace tessera::fuse
