// Test doubles and helpers shared by the chunk tests.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "object/object_store.h"

namespace tessera::chunk::testing {

// A fresh temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-chunk-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Forwards to another store, counting calls; Get can be slowed down so that
// concurrent readers pile up behind it, or made to fail.
class CountingStore final : public object::ObjectStore {
 public:
  explicit CountingStore(object::ObjectStore* base) : base_(base) {}

  std::string Describe() const override { return "counting+" + base_->Describe(); }
  Status Create() override { return base_->Create(); }
  Status Put(const std::string& key, std::string_view data) override {
    puts.fetch_add(1);
    return base_->Put(key, data);
  }
  Result<std::string> Get(const std::string& key, int64_t off, int64_t len) override {
    if (gets.fetch_add(1) >= fail_gets_after) return Status::Err(EIO, "injected get failure");
    if (get_delay.count() > 0) std::this_thread::sleep_for(get_delay);
    return base_->Get(key, off, len);
  }
  Status Delete(const std::string& key) override { return base_->Delete(key); }
  Result<object::ObjectInfo> Head(const std::string& key) override { return base_->Head(key); }
  Status List(const std::string& prefix, const std::string& start_after, size_t limit,
              std::vector<object::ObjectInfo>* out, bool* more) override {
    return base_->List(prefix, start_after, limit, out, more);
  }

  std::atomic<int> gets{0};
  std::atomic<int> puts{0};
  std::chrono::milliseconds get_delay{0};  // set before concurrent use
  int fail_gets_after = INT32_MAX;         // gets that succeed before EIO; set before concurrent use

 private:
  object::ObjectStore* const base_;
};

inline std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

// Text-like bytes that compress well.
inline std::string CompressibleBytes(std::mt19937& rng, size_t n) {
  static const char* const kWords[] = {"tessera ", "chunk ", "slice ", "block ", "cache ", "\n"};
  std::string s;
  while (s.size() < n) s += kWords[rng() % 6];
  s.resize(n);
  return s;
}

// Inverts bit 6 of the byte at offset `at` of the file.
inline void FlipByte(const std::string& path, off_t at) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c;
  EXPECT_EQ(::pread(fd, &c, 1, at), 1);
  c = char(c ^ 0x40);
  EXPECT_EQ(::pwrite(fd, &c, 1, at), 1);
  ::close(fd);
}

// Sum of the sizes of the regular files under dir.
inline uint64_t DiskUsage(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->path().filename() != ".lock") total += it->file_size();
  }
  return total;
}

}  // namespace tessera::chunk::testing
