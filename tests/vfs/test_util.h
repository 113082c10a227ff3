// Helpers shared by the vfs tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "meta/meta.h"

namespace tessera::vfs::testing {

// A formatted volume on the in-memory engine whose data goes to the
// in-memory object store (bucket "x"); block_size 0 keeps the default. Null,
// with a test failure, if that fails.
inline std::unique_ptr<meta::Meta> MemoryVolume(const std::string& name, int trash_days = 0,
                                                uint32_t block_size = 0) {
  auto m = meta::Open("memory://");
  EXPECT_TRUE(m.ok());
  if (!m.ok()) return nullptr;
  meta::Format f;
  f.name = name;
  f.uuid = meta::NewUuid();
  f.storage = "memory";
  f.bucket = "x";
  if (block_size != 0) f.block_size = block_size;
  f.trash_days = trash_days;
  Status st = (*m)->Init(f, false);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? std::move(*m) : nullptr;
}

}  // namespace tessera::vfs::testing
