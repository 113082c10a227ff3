// Helpers shared by the commands.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "meta/meta.h"

namespace tessera::cli {

// Prints "tessera: MSG" on stderr and returns exit code 1.
int Fail(const std::string& msg);

// Opens the metadata engine of META-URL. With must_exist, a URL naming a
// local database that does not exist yet is ENOENT ("no volume ...") and
// nothing is created.
Result<std::unique_ptr<meta::Meta>> OpenMeta(const std::string& url, bool must_exist);

}  // namespace tessera::cli
