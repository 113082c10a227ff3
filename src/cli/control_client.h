// The client side of a mount's control channel (vfs/control.h), for the
// commands that ask the mount serving a path to do work: rmr, warmup.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tessera::cli {

// Sends `request` to the client of the mount at mount_point (`path`, what
// the user named, is for messages); calls on_progress with each progress
// object (and with the partial result of a failure); returns the "done"
// object, or the error the mount answered as a Status.
Result<nlohmann::json> ControlCall(const std::string& mount_point, const std::string& path,
                                   const nlohmann::json& request,
                                   const std::function<void(const nlohmann::json&)>& on_progress);

}  // namespace tessera::cli
