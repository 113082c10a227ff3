#include "fuse/faults.h"

#include <gtest/gtest.h>

namespace tessera::fuse {
namespace {

TEST(FuseFaultsTest, NoneWhenEmpty) {
  auto f = ParseFuseFaults("");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->any());
}

TEST(FuseFaultsTest, OneOrSeveralByName) {
  auto one = ParseFuseFaults("slow-ring-growth");
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->slow_ring_growth);
  EXPECT_FALSE(one->drop_interrupts);
  auto both = ParseFuseFaults("drop-interrupts,slow-ring-growth");
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->slow_ring_growth);
  EXPECT_TRUE(both->drop_interrupts);
}

TEST(FuseFaultsTest, AnUnknownNameIsAnErrorThatListsTheKnownOnes) {
  for (const char* spec : {"drop-interrupt", "drop-interrupts,", "drop-interrupts,,slow-ring-growth", "x"}) {
    auto f = ParseFuseFaults(spec);
    ASSERT_FALSE(f.ok()) << spec;
    EXPECT_EQ(f.status().code(), EINVAL) << spec;
    EXPECT_NE(f.status().message().find("known: drop-interrupts, slow-ring-growth"), std::string::npos)
        << f.status().message();
  }
}

}  // namespace
}  // namespace tessera::fuse
