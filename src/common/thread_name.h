// Names the calling thread, as `top -H`, `ps -L`, `perf --sort comm` and
// /proc/PID/task/*/comm show it. Linux keeps at most 15 bytes; longer names
// are cut. Every long-lived thread of a mount names itself "ts-<role>"
// (docs/operations.md lists them).
#pragma once

namespace tessera {

void NameThisThread(const char* name);

}  // namespace tessera
