// WriteBuffer against a brute-force byte model: every pending byte is tracked
// individually, and after every operation the buffer's ranges must describe
// exactly the model's bytes while keeping the structural invariants (ranges
// within a chunk are sorted, non-empty, disjoint and not touching; no empty
// chunk entries; bytes() is the sum of the range sizes).
#include "vfs/write_buffer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "chunk/layout.h"
#include "common/buffer_pool.h"

namespace tessera::vfs {
namespace {

using chunk::kChunkSize;

// A few windows of the file address space, one of them straddling the first
// chunk boundary and one straddling a later one, so that writes cross chunks.
struct Window {
  uint64_t base;
  uint64_t size;
};
constexpr uint64_t kWin = 64 << 10;
const Window kWindows[] = {
    {0, kWin},
    {kChunkSize - kWin / 2, kWin},
    {3 * kChunkSize - kWin / 2, kWin},
};

// Pending bytes of the windows: data plus a "written" flag per byte.
class Model {
 public:
  Model() {
    for (const Window& w : kWindows) {
      data_.emplace_back(w.size, '\0');
      valid_.emplace_back(w.size, 0);
    }
  }

  void Write(uint64_t off, const std::string& bytes) {
    auto [w, at] = Locate(off);
    ASSERT_LE(at + bytes.size(), kWindows[w].size);
    for (size_t i = 0; i < bytes.size(); ++i) {
      data_[w][at + i] = bytes[i];
      count_ += valid_[w][at + i] ? 0 : 1;
      valid_[w][at + i] = 1;
    }
  }

  void TruncateTo(uint64_t length) {
    for (size_t w = 0; w < std::size(kWindows); ++w) {
      uint64_t from = length <= kWindows[w].base ? 0 : std::min(length - kWindows[w].base, kWindows[w].size);
      for (uint64_t i = from; i < kWindows[w].size; ++i) {
        count_ -= valid_[w][i];
        valid_[w][i] = 0;
      }
    }
  }

  void Clear() {
    for (auto& v : valid_) std::fill(v.begin(), v.end(), 0);
    count_ = 0;
  }

  // Whether byte `off` is pending, and its value.
  bool Get(uint64_t off, char* c) const {
    for (size_t w = 0; w < std::size(kWindows); ++w) {
      if (off >= kWindows[w].base && off < kWindows[w].base + kWindows[w].size) {
        uint64_t at = off - kWindows[w].base;
        if (!valid_[w][at]) return false;
        *c = data_[w][at];
        return true;
      }
    }
    return false;
  }

  // Whether [off, off+bytes.size()) is entirely pending with these contents.
  ::testing::AssertionResult Holds(uint64_t off, const std::string& bytes) const {
    auto [w, at] = Locate(off);
    if (at + bytes.size() > kWindows[w].size) return ::testing::AssertionFailure() << "range leaves its window";
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (!valid_[w][at + i]) return ::testing::AssertionFailure() << "byte " << off + i << " pending but never written";
      if (data_[w][at + i] != bytes[i]) return ::testing::AssertionFailure() << "byte " << off + i << " differs";
    }
    return ::testing::AssertionSuccess();
  }

  size_t Count() const { return count_; }

  uint64_t End() const {
    for (size_t w = std::size(kWindows); w-- > 0;) {
      for (uint64_t i = kWindows[w].size; i-- > 0;) {
        if (valid_[w][i]) return kWindows[w].base + i + 1;
      }
    }
    return 0;
  }

 private:
  static std::pair<size_t, uint64_t> Locate(uint64_t off) {
    for (size_t w = 0; w < std::size(kWindows); ++w) {
      if (off >= kWindows[w].base && off < kWindows[w].base + kWindows[w].size) return {w, off - kWindows[w].base};
    }
    ADD_FAILURE() << "offset " << off << " outside every window";
    return {0, 0};
  }

  std::vector<std::string> data_;
  std::vector<std::vector<uint8_t>> valid_;
  size_t count_ = 0;
};

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(1 + rng() % 255);
  return s;
}

// Checks the structure of `wb` and that its ranges hold exactly the model's bytes.
void CheckAgainstModel(const WriteBuffer& wb, const Model& model) {
  size_t sum = 0;
  uint64_t end = 0;
  for (const auto& [index, ranges] : wb.chunks()) {
    ASSERT_FALSE(ranges.empty()) << "empty range map left for chunk " << index;
    uint64_t prev_end = 0;
    bool first = true;
    for (const auto& [pos, bytes] : ranges) {
      ASSERT_FALSE(bytes.empty()) << "empty range at chunk " << index << " pos " << pos;
      ASSERT_LE(uint64_t(pos) + bytes.size(), kChunkSize) << "range crosses the end of chunk " << index;
      if (!first) {
        // Adjacent ranges are merged, so consecutive ranges leave a gap.
        ASSERT_LT(prev_end, uint64_t(pos)) << "ranges overlap or touch in chunk " << index << " at " << pos;
      }
      first = false;
      prev_end = uint64_t(pos) + bytes.size();
      uint64_t base = uint64_t(index) * kChunkSize + pos;
      ASSERT_TRUE(model.Holds(base, bytes)) << "range at chunk " << index << " pos " << pos;
      sum += bytes.size();
      end = std::max(end, base + bytes.size());
    }
  }
  // Every range byte is a model byte, so equal counts mean equal sets.
  ASSERT_EQ(sum, model.Count());
  ASSERT_EQ(wb.bytes(), sum);
  ASSERT_EQ(wb.End(), end);
  ASSERT_EQ(wb.End(), model.End());
  ASSERT_EQ(wb.empty(), sum == 0);
}

// Overlay of [off, off+n) onto a buffer of sentinels: pending bytes replace
// them, everything else is untouched.
void CheckOverlay(const WriteBuffer& wb, const Model& model, uint64_t off, size_t n) {
  const char kSentinel = 0;  // model bytes are never 0
  std::string buf(n, kSentinel);
  wb.Overlay(off, n, buf.data());
  for (size_t i = 0; i < n; ++i) {
    char want = kSentinel;
    model.Get(off + i, &want);
    ASSERT_EQ(buf[i], want) << "overlay [" << off << ", +" << n << ") byte " << off + i;
  }
}

// A random offset inside one of the windows, biased toward chunk boundaries.
uint64_t RandomOffset(std::mt19937_64& rng, const Window& w) {
  switch (rng() % 4) {
    case 0: {  // near the window's chunk boundary, if it has one
      uint64_t boundary = (w.base / kChunkSize + 1) * kChunkSize;
      if (boundary < w.base + w.size) {
        uint64_t d = rng() % 64;
        return rng() % 2 ? boundary - std::min(d + 1, boundary - w.base) : std::min(boundary + d, w.base + w.size - 1);
      }
      return w.base + rng() % w.size;
    }
    default:
      return w.base + rng() % w.size;
  }
}

TEST(WriteBufferTest, RandomOperationsMatchByteModel) {
  // Single-threaded: sanitizer runs (TESSERA_TEST_QUICK=1) add little to the
  // normal build's full run here, so they do two seeds of 500 steps.
  const char* quick = std::getenv("TESSERA_TEST_QUICK");
  const bool short_run = quick != nullptr && std::string(quick) == "1";
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    if (short_run && seed > 2) break;
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    WriteBuffer wb;
    Model model;
    for (int step = 0; step < (short_run ? 500 : 1500); ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Window& w = kWindows[rng() % std::size(kWindows)];
      int op = int(rng() % 100);
      if (op < 70) {
        uint64_t off = RandomOffset(rng, w);
        uint64_t room = w.base + w.size - off;
        size_t len;
        switch (rng() % 4) {
          case 0: len = 1 + rng() % 8; break;
          case 1: len = 1 + rng() % 200; break;
          case 2: len = 1 + rng() % 4096; break;
          default: len = 1 + rng() % 20000; break;
        }
        len = size_t(std::min<uint64_t>(len, room));
        std::string data = RandomBytes(rng, len);
        char last = 0;
        const bool had_last = model.Get(off + len - 1, &last);
        const bool extends = wb.Write(off, data.data(), data.size());
        ASSERT_EQ(extends, !had_last) << "Write's answer to whether its last byte was pending before";
        model.Write(off, data);
      } else if (op < 72) {
        wb.Write(RandomOffset(rng, w), "", 0);  // a no-op
      } else if (op < 90) {
        uint64_t off = rng() % 8 == 0 ? 0 : RandomOffset(rng, w);
        size_t n = size_t(std::min<uint64_t>(1 + rng() % 30000, w.base + w.size + 1000 - off));
        ASSERT_NO_FATAL_FAILURE(CheckOverlay(wb, model, off, n));
      } else if (op < 97) {
        uint64_t len = rng() % 10 == 0 ? 0 : RandomOffset(rng, w);
        wb.TruncateTo(len);
        model.TruncateTo(len);
      } else {
        wb.Clear();
        model.Clear();
      }
      ASSERT_NO_FATAL_FAILURE(CheckAgainstModel(wb, model));
    }
  }
}

TEST(WriteBufferTest, EmptyBuffer) {
  WriteBuffer wb;
  EXPECT_TRUE(wb.empty());
  EXPECT_EQ(wb.End(), 0u);
  EXPECT_EQ(wb.bytes(), 0u);
  std::string buf(100, 'x');
  wb.Overlay(0, buf.size(), buf.data());
  EXPECT_EQ(buf, std::string(100, 'x'));
  wb.TruncateTo(0);
  wb.Write(10, "", 0);
  EXPECT_TRUE(wb.empty());
  EXPECT_TRUE(wb.chunks().empty());
}

TEST(WriteBufferTest, AdjacentWritesMergeIntoOneRange) {
  WriteBuffer wb;
  wb.Write(100, "bbbb", 4);
  wb.Write(104, "cccc", 4);  // touches on the right
  wb.Write(96, "aaaa", 4);   // touches on the left
  ASSERT_EQ(wb.chunks().size(), 1u);
  const auto& ranges = wb.chunks().begin()->second;
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges.begin()->first, 96u);
  EXPECT_EQ(ranges.begin()->second, "aaaabbbbcccc");
  EXPECT_EQ(wb.bytes(), 12u);

  wb.Write(200, "zz", 2);
  EXPECT_EQ(wb.chunks().begin()->second.size(), 2u);
  // One write bridging both ranges (and overwriting parts of them) joins them.
  std::string bridge(96, 'm');  // [105, 201): ends inside "zz"
  wb.Write(105, bridge.data(), bridge.size());
  ASSERT_EQ(wb.chunks().begin()->second.size(), 1u);
  std::string want = "aaaabbbbc" + bridge + "z";
  EXPECT_EQ(wb.chunks().begin()->second.begin()->first, 96u);
  EXPECT_EQ(wb.chunks().begin()->second.begin()->second, want);
  EXPECT_EQ(wb.bytes(), want.size());
}

TEST(WriteBufferTest, WriteAcrossChunkBoundarySplits) {
  WriteBuffer wb;
  std::string data(10, 'q');
  wb.Write(kChunkSize - 4, data.data(), data.size());
  ASSERT_EQ(wb.chunks().size(), 2u);
  const auto& c0 = wb.chunks().at(0);
  const auto& c1 = wb.chunks().at(1);
  ASSERT_EQ(c0.size(), 1u);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c0.begin()->first, kChunkSize - 4);
  EXPECT_EQ(c0.begin()->second, "qqqq");
  EXPECT_EQ(c1.begin()->first, 0u);
  EXPECT_EQ(c1.begin()->second, "qqqqqq");
  EXPECT_EQ(wb.End(), kChunkSize + 6);
  EXPECT_EQ(wb.bytes(), 10u);

  // Truncating exactly at the boundary drops the whole second chunk.
  wb.TruncateTo(kChunkSize);
  EXPECT_EQ(wb.chunks().size(), 1u);
  EXPECT_EQ(wb.End(), kChunkSize);
  EXPECT_EQ(wb.bytes(), 4u);
  wb.TruncateTo(kChunkSize - 4);
  EXPECT_TRUE(wb.empty());
  EXPECT_TRUE(wb.chunks().empty());
  EXPECT_EQ(wb.bytes(), 0u);
}

TEST(WriteBufferTest, FullChunkWrite) {
  WriteBuffer wb;
  std::string data(kChunkSize + 2, 'f');
  wb.Write(kChunkSize - 1, data.data(), data.size());
  ASSERT_EQ(wb.chunks().size(), 3u);
  EXPECT_EQ(wb.chunks().at(1).begin()->second.size(), kChunkSize);
  EXPECT_EQ(wb.bytes(), data.size());
  EXPECT_EQ(wb.End(), 2 * kChunkSize + 1);
  wb.Clear();
  EXPECT_TRUE(wb.empty());
  EXPECT_EQ(wb.bytes(), 0u);
  EXPECT_EQ(wb.End(), 0u);
}

// Appending small writes to one range must not copy the whole range each time
// (that made filling a 64 MiB buffer with 4 KiB writes quadratic).
TEST(WriteBufferTest, SequentialSmallWritesAreLinear) {
  WriteBuffer wb;
  std::string piece(4096, 's');
  auto start = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < kChunkSize; off += piece.size()) wb.Write(off, piece.data(), piece.size());
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(wb.chunks().at(0).size(), 1u);
  EXPECT_EQ(wb.bytes(), kChunkSize);
  // Linear: tens of milliseconds even under sanitizers; quadratic: minutes.
  EXPECT_LT(took, std::chrono::seconds(20));
}

TEST(WriteBufferTest, SmallRangesGrowWithoutTakingABlock) {
  // Random 4 KiB writes that happen to touch grow their range as a string
  // does; only a range grown past 64 KiB by appends (a stream's) reserves a
  // whole block, so that it is not copied again on the way to one.
  constexpr uint32_t kBlock = 4u << 20;
  WriteBuffer wb(kBlock);
  const std::string piece(4096, 'r');
  wb.Write(40960, piece.data(), piece.size());
  wb.Write(40960 + 4096, piece.data(), piece.size());  // touches the first: one range
  ASSERT_EQ(wb.chunks().at(0).size(), 1u);
  EXPECT_LT(wb.chunks().at(0).begin()->second.capacity(), size_t(64) << 10);

  for (uint64_t off = 40960 + 8192; off < 40960 + (128u << 10); off += piece.size())
    wb.Write(off, piece.data(), piece.size());
  ASSERT_EQ(wb.chunks().at(0).size(), 1u);
  EXPECT_GE(wb.chunks().at(0).begin()->second.capacity(), size_t(kBlock));
  EXPECT_EQ(wb.bytes(), size_t(128) << 10);
}

TEST(WriteBufferTest, AStreamsOutgrownStringIsNotKeptInThePool) {
  // The string a range outgrows when it reserves a block is 64 KiB: kept in
  // the pool it would fit no block, and enough of them would fill it.
  constexpr uint32_t kBlock = 4u << 20;
  BufferPool& pool = BufferPool::Default();
  std::string spare;
  spare.reserve(kBlock);
  const size_t empty = pool.kept_bytes();
  pool.Give(std::move(spare));  // the block buffer the range will take
  const size_t before = pool.kept_bytes();
  ASSERT_EQ(before, empty + kBlock);
  WriteBuffer wb(kBlock);
  const std::string piece(4096, 's');
  for (uint64_t off = 0; off < (128u << 10); off += piece.size()) wb.Write(off, piece.data(), piece.size());
  ASSERT_EQ(wb.chunks().at(0).size(), 1u);
  EXPECT_GE(wb.chunks().at(0).begin()->second.capacity(), size_t(kBlock));
  EXPECT_EQ(pool.kept_bytes(), before - kBlock);
}

}  // namespace
}  // namespace tessera::vfs
