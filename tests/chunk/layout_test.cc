#include "chunk/layout.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

namespace tessera::chunk {

void PrintTo(const Slice& s, std::ostream* os) {
  *os << "{pos=" << s.pos << " id=" << s.id << " size=" << s.size << " off=" << s.off << " len=" << s.len << "}";
}

namespace {

using V = std::vector<Slice>;

TEST(LayoutTest, EncodeDecodeRoundTrip) {
  V slices = {{0, 1, 100, 0, 100}, {0xfffffff0u, 0x0102030405060708ull, 0xdeadbeef, 7, 9}, {5, 0, 0, 0, 3}};
  std::string data;
  for (const auto& s : slices) AppendSlice(&data, s);
  ASSERT_EQ(data.size(), 3 * kSliceRecordSize);
  EXPECT_EQ(DecodeSlices(data), slices);
  EXPECT_EQ(DecodeSlices(data + "partial"), slices);  // trailing partial record ignored
  EXPECT_TRUE(DecodeSlices("").empty());
}

TEST(LayoutTest, EncodingIsBigEndian) {
  std::string data;
  AppendSlice(&data, {0x01020304, 0x05060708090a0b0cull, 0x0d0e0f10, 0x11121314, 0x15161718});
  std::string want;
  for (int i = 1; i <= 24; ++i) want.push_back(char(i));
  EXPECT_EQ(data, want);
}

TEST(LayoutTest, BlockKey) {
  EXPECT_EQ(BlockKey(1234, 0, 4194304), "chunks/0/1/1234_0_4194304");
  EXPECT_EQ(BlockKey(7, 3, 100), "chunks/0/0/7_3_100");
  EXPECT_EQ(BlockKey(123456789, 15, 1), "chunks/123/123456/123456789_15_1");
}

TEST(LayoutTest, BlockCountAndLen) {
  EXPECT_EQ(BlockCount(0, 4096), 0u);
  EXPECT_EQ(BlockCount(1, 4096), 1u);
  EXPECT_EQ(BlockCount(4096, 4096), 1u);
  EXPECT_EQ(BlockCount(4097, 4096), 2u);
  EXPECT_EQ(BlockLen(4097, 4096, 0), 4096u);
  EXPECT_EQ(BlockLen(4097, 4096, 1), 1u);
  EXPECT_EQ(BlockLen(4097, 4096, 2), 0u);
}

TEST(LayoutTest, BuildViewSingleAndEmpty) {
  EXPECT_TRUE(BuildView({}).empty());
  EXPECT_EQ(BuildView({{10, 1, 50, 0, 50}}), (V{{10, 1, 50, 0, 50}}));
  EXPECT_TRUE(BuildView({{10, 1, 0, 0, 0}}).empty());  // zero-length slices show nothing
}

TEST(LayoutTest, BuildViewFullOverwrite) {
  EXPECT_EQ(BuildView({{0, 1, 100, 0, 100}, {0, 2, 100, 0, 100}}), (V{{0, 2, 100, 0, 100}}));
  EXPECT_EQ(BuildView({{10, 1, 20, 0, 20}, {0, 2, 100, 0, 100}}), (V{{0, 2, 100, 0, 100}}));
  // Covering several older pieces at once.
  EXPECT_EQ(BuildView({{0, 1, 10, 0, 10}, {20, 2, 10, 0, 10}, {40, 3, 10, 0, 10}, {5, 4, 40, 0, 40}}),
            (V{{0, 1, 10, 0, 5}, {5, 4, 40, 0, 40}, {45, 3, 10, 5, 5}}));
}

TEST(LayoutTest, BuildViewPartialOverlaps) {
  const Slice base{0, 1, 100, 0, 100};
  // Middle: the old slice is split in two.
  EXPECT_EQ(BuildView({base, {40, 2, 10, 0, 10}}), (V{{0, 1, 100, 0, 40}, {40, 2, 10, 0, 10}, {50, 1, 100, 50, 50}}));
  // Left edge.
  EXPECT_EQ(BuildView({base, {0, 2, 30, 0, 30}}), (V{{0, 2, 30, 0, 30}, {30, 1, 100, 30, 70}}));
  // Right edge, reaching past the end.
  EXPECT_EQ(BuildView({base, {80, 2, 50, 0, 50}}), (V{{0, 1, 100, 0, 80}, {80, 2, 50, 0, 50}}));
  // Adjacent slices do not overlap.
  EXPECT_EQ(BuildView({base, {100, 2, 10, 0, 10}}), (V{base, {100, 2, 10, 0, 10}}));
  // Starting before an older slice that itself starts inside a gap.
  EXPECT_EQ(BuildView({{50, 1, 100, 20, 60}, {30, 2, 30, 5, 25}}), (V{{30, 2, 30, 5, 25}, {55, 1, 100, 25, 55}}));
  // Older slice already shown through a non-zero off is trimmed further.
  EXPECT_EQ(BuildView({{10, 1, 100, 30, 50}, {20, 2, 5, 0, 5}}),
            (V{{10, 1, 100, 30, 10}, {20, 2, 5, 0, 5}, {25, 1, 100, 45, 35}}));
}

TEST(LayoutTest, BuildViewHoles) {
  // A hole (id 0, e.g. from truncate) shadows data and stays in the view.
  EXPECT_EQ(BuildView({{0, 1, 100, 0, 100}, {20, 0, 30, 0, 30}}),
            (V{{0, 1, 100, 0, 20}, {20, 0, 30, 0, 30}, {50, 1, 100, 50, 50}}));
  // Data written over a hole shadows it.
  EXPECT_EQ(BuildView({{0, 0, 100, 0, 100}, {0, 5, 10, 0, 10}}), (V{{0, 5, 10, 0, 10}, {10, 0, 100, 10, 90}}));
}

// Brute force: for every byte of the chunk, which (slice, byte within the
// slice's data) is visible; hole bytes are (0, 0).
using ByteMap = std::map<uint32_t, std::pair<uint64_t, uint64_t>>;

ByteMap Model(const V& slices) {
  ByteMap m;
  for (const auto& s : slices) {
    for (uint32_t i = 0; i < s.len; ++i) m[s.pos + i] = {s.id, s.id == 0 ? 0 : uint64_t(s.off) + i};
  }
  return m;
}

ByteMap FromView(const V& view) {
  ByteMap m;
  for (const auto& s : view) {
    for (uint32_t i = 0; i < s.len; ++i) m[s.pos + i] = {s.id, s.id == 0 ? 0 : uint64_t(s.off) + i};
  }
  return m;
}

TEST(LayoutTest, BuildViewRandomAgainstModel) {
  std::mt19937 rng(20240601);
  for (int round = 0; round < 3000; ++round) {
    const uint32_t span = 1 + rng() % 300;
    V slices;
    for (int n = int(rng() % 12); n > 0; --n) {
      Slice s;
      s.pos = rng() % span;
      s.len = rng() % (span - s.pos + 1);
      s.id = rng() % 5 == 0 ? 0 : uint64_t(slices.size() + 1);
      s.off = rng() % 50;
      s.size = s.off + s.len + rng() % 20;
      slices.push_back(s);
    }
    const V view = BuildView(slices);
    ASSERT_EQ(FromView(view), Model(slices)) << "round " << round;
    for (size_t i = 0; i < view.size(); ++i) {
      ASSERT_GT(view[i].len, 0u) << "round " << round;
      ASSERT_LE(uint64_t(view[i].off) + view[i].len, view[i].size) << "round " << round;
      if (i > 0) {
        ASSERT_LE(uint64_t(view[i - 1].pos) + view[i - 1].len, view[i].pos) << "round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::chunk
