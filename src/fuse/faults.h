// Fault injection for tests, from the TESSERA_FUSE_FAULTS environment
// variable: a comma-separated list of
//   drop-interrupts   the /dev/fuse loop reads and ignores every
//                     FUSE_INTERRUPT, as when the kernel sends none
//   slow-ring-growth  an entry added to a CPU's io_uring queue (uring_loop.h)
//                     registers 2 s late, so requests made on that CPU in
//                     the meantime wait in the kernel's queue with no entry
#pragma once

#include <string_view>

#include "common/status.h"

namespace tessera::fuse {

struct FuseFaults {
  bool drop_interrupts = false;
  bool slow_ring_growth = false;
  bool any() const { return drop_interrupts || slow_ring_growth; }
};

// An unknown name is an EINVAL that lists the known ones.
Result<FuseFaults> ParseFuseFaults(std::string_view spec);

}  // namespace tessera::fuse
