// What `tessera --version` prints: generated on every build by
// cmake/BuildInfo.cmake (build/src/generated/build_info.cc).
#pragma once

namespace tessera {
extern const char kVersion[];    // the project VERSION, e.g. "0.1.0"; the Debian package's version
extern const char kGitCommit[];  // 12 hex digits, "-dirty" with local changes; "unknown" outside git
extern const char kBuildType[];  // CMAKE_BUILD_TYPE
}  // namespace tessera
