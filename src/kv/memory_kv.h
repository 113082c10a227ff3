// In-memory kv::Engine: a std::map behind one engine-wide reader/writer lock.
#pragma once

#include <memory>
#include <string>

#include "kv/kv.h"

namespace tessera::kv {

// Opens an in-memory engine. An empty name gives a new private store. Engines
// opened with the same non-empty name in one process share one store (like two
// mounts of one volume) for as long as any of them is alive.
std::unique_ptr<Engine> OpenMemory(const std::string& name);

}  // namespace tessera::kv
