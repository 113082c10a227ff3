// FaultStore: spec parsing, determinism under a seed, fault rates and what
// each kind of fault does to the store underneath.
#include <chrono>
#include <cstdlib>

#include <gtest/gtest.h>

#include "object/fault_store.h"
#include "object/retry_store.h"
#include "object/memory_store.h"

namespace tessera::object {
namespace {

std::unique_ptr<FaultStore> Make(const std::string& spec, MemoryStore** inner = nullptr) {
  auto parsed = FaultSpec::Parse(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto mem = std::make_unique<MemoryStore>("faults");
  if (inner) *inner = mem.get();
  return std::make_unique<FaultStore>(std::move(mem), *parsed);
}

// The codes of a fixed mix of operations (0 = OK).
std::vector<int> RunMix(ObjectStore* s, int n) {
  std::vector<int> codes;
  std::vector<ObjectInfo> out;
  for (int i = 0; i < n; ++i) {
    const std::string key = "k" + std::to_string(i % 10);
    switch (i % 4) {
      case 0: codes.push_back(s->Put(key, "v").code()); break;
      case 1: codes.push_back(s->Get(key, 0, -1).status().code()); break;
      case 2: codes.push_back(s->Head(key).status().code()); break;
      default: codes.push_back(s->List("k", "", 5, &out, nullptr).code()); break;
    }
  }
  return codes;
}

TEST(FaultSpecTest, ParsesAndPrints) {
  auto spec = FaultSpec::Parse("seed=7,error=0.05,delay_ms=0-5,lost_reply=0.01,drop=0.02");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->seed, 7u);
  EXPECT_DOUBLE_EQ(spec->error, 0.05);
  EXPECT_DOUBLE_EQ(spec->lost_reply, 0.01);
  EXPECT_DOUBLE_EQ(spec->drop, 0.02);
  EXPECT_EQ(spec->delay_min_ms, 0);
  EXPECT_EQ(spec->delay_max_ms, 5);
  EXPECT_EQ(spec->ToString(), "seed=7,error=0.05,lost_reply=0.01,drop=0.02,delay_ms=0-5");
  auto again = FaultSpec::Parse(spec->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToString(), spec->ToString());

  auto ops = FaultSpec::Parse("seed=1,error=1,ops=put+delete,delay_ms=3,delay=0.5");
  ASSERT_TRUE(ops.ok()) << ops.status().ToString();
  EXPECT_EQ(ops->ops, unsigned(FaultStore::kPut | FaultStore::kDelete));
  EXPECT_EQ(ops->ToString(), "seed=1,error=1,delay_ms=3,delay=0.5,ops=put+delete");

  auto unseeded = FaultSpec::Parse("error=0.1");
  ASSERT_TRUE(unseeded.ok());
  EXPECT_FALSE(unseeded->seeded);
  EXPECT_TRUE(unseeded->ToString().starts_with("seed="));  // the drawn seed, to replay a run
}

TEST(FaultSpecTest, RejectsBadSpecs) {
  for (const char* bad : {"error", "error=2", "error=-0.1", "error=x", "bogus=1", "seed=-1", "seed=abc",
                          "delay_ms=5-1", "delay_ms=a", "ops=put+fly", "error=0.6,lost_reply=0.5"}) {
    auto spec = FaultSpec::Parse(bad);
    EXPECT_EQ(spec.status().code(), EINVAL) << bad;
  }
}

TEST(FaultStoreTest, SameSeedSameFaults) {
  const std::string spec = "seed=42,error=0.1,lost_reply=0.05,drop=0.05";
  auto a = Make(spec), b = Make(spec), c = Make("seed=43,error=0.1,lost_reply=0.05,drop=0.05");
  std::vector<int> ra = RunMix(a.get(), 2000), rb = RunMix(b.get(), 2000), rc = RunMix(c.get(), 2000);
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
  EXPECT_EQ(a->stats().errors, b->stats().errors);
  EXPECT_EQ(a->stats().requests, 2000u);
}

TEST(FaultStoreTest, ErrorRate) {
  MemoryStore* mem = nullptr;
  auto s = Make("seed=9,error=0.1", &mem);
  ASSERT_TRUE(mem->Put("k", "v").ok());
  constexpr int kN = 20000;
  int failed = 0;
  for (int i = 0; i < kN; ++i) {
    Status st = s->Get("k", 0, -1).status();
    if (!st.ok()) {
      EXPECT_EQ(st.code(), ECONNREFUSED);
      EXPECT_TRUE(st.transient());
      EXPECT_TRUE(st.message().starts_with("injected error")) << st.message();
      ++failed;
    }
  }
  // Binomial(20000, 0.1): mean 2000, sd ~42; 6 sd either way.
  EXPECT_GT(failed, 1750);
  EXPECT_LT(failed, 2250);
  EXPECT_EQ(s->stats().errors, uint64_t(failed));
  EXPECT_EQ(s->stats().requests, uint64_t(kN));
}

TEST(FaultStoreTest, NoFaultsIsTransparent) {
  auto s = Make("seed=1");
  std::vector<int> codes = RunMix(s.get(), 400);
  for (int code : {EIO, ECONNREFUSED, ECONNRESET, ETIMEDOUT}) EXPECT_EQ(std::count(codes.begin(), codes.end(), code), 0);
  EXPECT_EQ(s->stats().requests, 400u);
}

TEST(FaultStoreTest, LostReplyStillPerforms) {
  MemoryStore* mem = nullptr;
  auto s = Make("seed=3,lost_reply=1", &mem);
  Status st = s->Put("k", "stored anyway");
  EXPECT_EQ(st.code(), ETIMEDOUT);
  EXPECT_TRUE(st.outcome_unknown());
  EXPECT_TRUE(st.message().starts_with("injected lost reply")) << st.message();
  EXPECT_EQ(*mem->Get("k", 0, -1), "stored anyway");
  EXPECT_EQ(s->Delete("k").code(), ETIMEDOUT);
  EXPECT_EQ(mem->Get("k", 0, -1).status().code(), ENOENT);
  std::vector<ObjectInfo> out;
  ASSERT_TRUE(mem->Put("a", "1").ok());
  EXPECT_EQ(s->List("", "", 10, &out, nullptr).code(), ETIMEDOUT);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s->stats().lost_replies, 3u);
}

TEST(FaultStoreTest, DropDoesNotWrite) {
  MemoryStore* mem = nullptr;
  auto s = Make("seed=3,drop=1", &mem);
  Status st = s->Put("k", "v");
  EXPECT_EQ(st.code(), ECONNRESET);
  EXPECT_FALSE(st.outcome_unknown());
  EXPECT_TRUE(st.message().starts_with("injected dropped connection")) << st.message();
  EXPECT_EQ(mem->Get("k", 0, -1).status().code(), ENOENT);
  ASSERT_TRUE(mem->Put("k", "v").ok());
  EXPECT_EQ(s->Delete("k").code(), ECONNRESET);
  EXPECT_TRUE(mem->Get("k", 0, -1).ok());
  EXPECT_EQ(s->Get("k", 0, -1).status().code(), ECONNRESET);
}

TEST(FaultStoreTest, OpsFilterAndCreate) {
  auto s = Make("seed=5,error=1,ops=put");
  EXPECT_EQ(s->Put("k", "v").code(), ECONNREFUSED);
  EXPECT_EQ(s->Get("k", 0, -1).status().code(), ENOENT);  // reached the store
  EXPECT_TRUE(s->Create().ok());                    // create is not in ops
  auto all = Make("seed=5,error=1");
  EXPECT_TRUE(all->Create().ok());  // nor by default
}

TEST(FaultStoreTest, Delays) {
  auto s = Make("seed=1,delay_ms=30");
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->Put("k", "v").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_EQ(s->stats().delays, 1u);

  auto some = Make("seed=2,delay_ms=1-2,delay=0.5");
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(some->Put("k", "v").ok());
  EXPECT_GT(some->stats().delays, 60u);
  EXPECT_LT(some->stats().delays, 140u);
}

TEST(FaultStoreTest, OpenWrapsFromOptionsOrEnvironment) {
  auto s = Open({.storage = "memory", .bucket = "f", .faults = "seed=7,error=0.5", .attempts = 1});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(dynamic_cast<FaultStore*>(s->get()), nullptr);
  EXPECT_EQ((*s)->Describe(), "memory://f/ (faults: seed=7,error=0.5)");
  EXPECT_EQ(Open({.storage = "memory", .bucket = "f", .faults = "nope"}).status().code(), EINVAL);

  const char* saved = std::getenv("TESSERA_OBJECT_FAULTS");
  std::string saved_value = saved ? saved : "";
  ::setenv("TESSERA_OBJECT_FAULTS", "seed=1,drop=0.25", 1);
  auto env = Open({.storage = "memory", .bucket = "g", .attempts = 1});
  ::unsetenv("TESSERA_OBJECT_FAULTS");
  auto plain = Open({.storage = "memory", .bucket = "h", .attempts = 1});
  if (saved) ::setenv("TESSERA_OBJECT_FAULTS", saved_value.c_str(), 1);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ((*env)->Describe(), "memory://g/ (faults: seed=1,drop=0.25)");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(dynamic_cast<FaultStore*>(plain->get()), nullptr);

  ::setenv("TESSERA_OBJECT_FAULTS", "seed=1,drop=0.25", 1);
  auto off = Open({.storage = "memory", .bucket = "i", .faults = "off", .attempts = 1});
  if (saved) ::setenv("TESSERA_OBJECT_FAULTS", saved_value.c_str(), 1); else ::unsetenv("TESSERA_OBJECT_FAULTS");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(dynamic_cast<FaultStore*>(off->get()), nullptr);  // "off" beats the environment
}

// What object::Open builds by default: a RetryStore over the faults. With 30%
// of requests failing (and lost replies), every operation still succeeds
// and reads back the right bytes; answers (not found) are not retried.
TEST(FaultStoreTest, RetryStoreRidesOverTransientFaults) {
  auto s = Open({.storage = "memory", .bucket = "r", .faults = "seed=5,error=0.2,lost_reply=0.05,drop=0.05", .attempts = 12});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(dynamic_cast<RetryStore*>(s->get()), nullptr);
  for (int i = 0; i < 200; ++i) {
    std::string key = "k" + std::to_string(i), value(size_t(100 + i), char('a' + i % 26));
    ASSERT_TRUE((*s)->Put(key, value).ok()) << i;
    auto got = (*s)->Get(key, 0, -1);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, value);
    auto part = (*s)->Get(key, 10, 20);
    ASSERT_TRUE(part.ok());
    EXPECT_EQ(*part, value.substr(10, 20));
  }
  for (int i = 0; i < 200; i += 2) ASSERT_TRUE((*s)->Delete("k" + std::to_string(i)).ok());
  for (int i = 0; i < 200; ++i) {
    auto h = (*s)->Head("k" + std::to_string(i));
    if (i % 2 == 0) EXPECT_EQ(h.status().code(), ENOENT) << i;
    else EXPECT_TRUE(h.ok()) << i;
  }
  EXPECT_FALSE(Status::Err(ENOENT).transient());
  EXPECT_FALSE(Status::Err(EACCES).transient());
  EXPECT_FALSE(Status::Err(ENOSPC).transient());
  EXPECT_TRUE(Status::Err(ECONNRESET).transient());
}

}  // namespace
}  // namespace tessera::object
