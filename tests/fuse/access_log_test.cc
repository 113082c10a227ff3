#include "fuse/access_log.h"

#include <fcntl.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "fuse/internal_files.h"

namespace tessera::fuse {
namespace {

TEST(AccessLogTest, ReadersGetWholeLinesWrittenWhileOpen) {
  AccessLog log;
  EXPECT_FALSE(log.active());
  log.Write("before\n");  // nobody reads: kept nowhere
  auto r = log.Open();
  ASSERT_TRUE(r);
  EXPECT_TRUE(log.active());
  log.Write("one\n");
  log.Write("two\n");
  auto never = [] { return false; };
  EXPECT_EQ(log.Read(r.get(), 4096, never), "one\ntwo\n");
  log.Write("three\n");
  log.Write("four\n");
  EXPECT_EQ(log.Read(r.get(), 8, never), "three\n");  // whole lines that fit
  EXPECT_EQ(log.Read(r.get(), 8, never), "four\n");
  log.Close(r);
  EXPECT_FALSE(log.active());
}

TEST(AccessLogTest, ReadWaitsForALineAndStopsWhenInterrupted) {
  AccessLog log;
  auto r = log.Open();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    log.Write("late\n");
  });
  EXPECT_EQ(log.Read(r.get(), 4096, [] { return false; }), "late\n");
  writer.join();
  std::atomic<bool> interrupted{false};
  std::thread interrupter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    interrupted = true;
  });
  EXPECT_EQ(log.Read(r.get(), 4096, [&] { return interrupted.load(); }), "");
  interrupter.join();
  log.Close(r);
}

TEST(AccessLogTest, ASlowReaderLosesLinesAndIsTold) {
  AccessLog log;
  auto r = log.Open();
  const std::string line(1000, 'x');
  for (size_t i = 0; i < AccessLog::kMaxBuffered / 1000 + 100; ++i) log.Write(line + "\n");
  const std::string first = log.Read(r.get(), 1 << 20, [] { return false; });
  EXPECT_EQ(first.rfind("#", 0), 0u) << first.substr(0, 80);
  EXPECT_NE(first.find("lines dropped"), std::string::npos);
  // A read smaller than the notice still gets no more than it asked for.
  log.Write(line + "\n");
  auto r2 = log.Open();
  EXPECT_LE(log.Read(r.get(), 10, [] { return false; }).size(), 10u);
  log.Close(r);
  log.Close(r2);
}

TEST(AccessLogTest, ReadersAreBounded) {
  AccessLog log;
  std::vector<std::shared_ptr<AccessLog::Reader>> readers;
  for (int i = 0; i < AccessLog::kMaxReaders; ++i) readers.push_back(log.Open());
  EXPECT_EQ(log.Open(), nullptr);
  log.Close(readers.back());
  EXPECT_NE(log.Open(), nullptr);
}

TEST(InternalFilesTest, NamesModesAndAccess) {
  InternalFiles f(".", false, [] { return std::string("stats text"); }, "{\"k\": 1}\n");
  EXPECT_EQ(f.Find(".stats"), InternalFiles::kBase + InternalFiles::kStats);
  EXPECT_EQ(f.Find(".accesslog"), InternalFiles::kBase + InternalFiles::kAccessLog);
  EXPECT_EQ(f.Find(".config"), InternalFiles::kBase + InternalFiles::kConfig);
  EXPECT_EQ(f.Find("stats"), 0u);
  EXPECT_EQ(f.Find("."), 0u);
  EXPECT_EQ(f.AttrOf(InternalFiles::kBase + 1).mode & 0777, 0400u);
  meta::Context user;
  user.uid = 1000;
  user.gid = 1000;
  InternalFiles::Handle* h = nullptr;
  EXPECT_EQ(f.Open(user, InternalFiles::kBase + InternalFiles::kStats, O_RDONLY, &h).code(), EACCES);
  EXPECT_EQ(f.Open(meta::Context::Root(), InternalFiles::kBase + InternalFiles::kStats, O_WRONLY, &h).code(), EACCES);
  ASSERT_TRUE(f.Open(meta::Context::Root(), InternalFiles::kBase + InternalFiles::kConfig, O_RDONLY, &h).ok());
  EXPECT_EQ(f.Read(h, 0, 4096, [] { return false; }), "{\"k\": 1}\n");
  EXPECT_EQ(f.Read(h, 2, 2, [] { return false; }), "k\"");
  EXPECT_EQ(f.Read(h, 100, 10, [] { return false; }), "");
  f.Release(h);

  InternalFiles pub(".t-", true, [] { return std::string(); }, "{}");
  EXPECT_EQ(pub.Find(".stats"), 0u);
  EXPECT_EQ(pub.Find(".t-stats"), InternalFiles::kBase + InternalFiles::kStats);
  EXPECT_EQ(pub.AttrOf(InternalFiles::kBase + 1).mode & 0777, 0444u);
  ASSERT_TRUE(pub.Open(user, InternalFiles::kBase + InternalFiles::kStats, O_RDONLY, &h).ok());
  pub.Release(h);
}

}  // namespace
}  // namespace tessera::fuse
