// Text made from the command-line definitions themselves (main.cc's CLI11
// app), so that it cannot drift from `--help`: man pages, shell completion,
// and the /etc/fstab options of a parsed `tessera mount`.
#pragma once

#include <string>

#include "cli/system_mount.h"
#include "common/status.h"

namespace CLI {
class App;
}

namespace tessera::cli {

// Writes tessera.1, tessera-COMMAND.1 for each visible command and
// mount.tessera.8 into dir.
Status WriteManPages(const CLI::App& app, const std::string& dir);

// The completion script for shell ("bash" or "zsh"); EINVAL otherwise.
Result<std::string> CompletionScript(const CLI::App& app, const std::string& shell);

// What `tessera mount` makes of a long option name (mount.tessera's -o).
OptionKind MountOptionKind(const CLI::App& mount, const std::string& name);

// The options given to a parsed `tessera mount`, as fstab options
// ("cache-size=1024,writeback,..."), leaving out the arguments, -d and
// --update-fstab; FUSE's -o options are appended as given.
std::string FstabOptions(const CLI::App& mount);

}  // namespace tessera::cli
