// Session expiry on every engine: a client cut off from the engine for longer
// than the session timeout is cleaned by another client (its locks go); when
// it comes back, its heartbeat and its writes are refused with ESTALE, so it
// cannot write over what others wrote meanwhile, and a new session works.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "meta/encoding.h"
#include "meta/meta.h"
#include "meta/meta_util.h"
#include "two_clients.h"

namespace tessera::meta {
namespace {

// A session of this host whose process is gone is dead before its timeout,
// but only if its pid was taken in this boot and PID namespace: a container
// with the host's name and a PID namespace of its own used to have its live
// sessions cleaned by every client outside it, and the reverse (review).
TEST(SessionDeadTest, APidCountsOnlyWhereItMeansTheSameProcess) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // a pid no process has now
  SessionInfo s;
  s.host = HostName();
  s.pid = uint32_t(child);
  s.heartbeat = std::time(nullptr);
  const int64_t now = s.heartbeat;
  s.pid_scope = PidScope();
  ASSERT_FALSE(s.pid_scope.empty()) << "no boot id or PID namespace in /proc";
  EXPECT_TRUE(SessionDead(s, now, 300)) << "a session whose process is gone, here";
  s.pid_scope = "another-boot/pid:[4026531836]";
  EXPECT_FALSE(SessionDead(s, now, 300)) << "a pid of another boot or PID namespace was taken for one of here";
  s.pid_scope.clear();
  EXPECT_FALSE(SessionDead(s, now, 300)) << "a session that does not say where its pid is";
  EXPECT_TRUE(SessionDead(s, now + 301, 300)) << "without a heartbeat for longer than the timeout";
  s.pid = uint32_t(getpid());
  s.pid_scope = PidScope();
  EXPECT_FALSE(SessionDead(s, now, 300)) << "this live process";
  // The scope survives the session record.
  SessionInfo back;
  ASSERT_TRUE(DecodeSession(EncodeSession(s), &back).ok());
  EXPECT_EQ(back.pid_scope, s.pid_scope);
}

class SessionExpiryTest : public testing::TwoClientsTest {
 protected:
  SessionExpiryTest() : TwoClientsTest("session") {}
};

TEST_P(SessionExpiryTest, ExpiredClientIsFencedAndStartsAnew) {
  const Context root = Context::Root();
  Ino ino = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  ASSERT_TRUE(a_->Flock(root, ino, 7, kWriteLock).ok());
  EXPECT_EQ(b_->Flock(root, ino, 9, kWriteLock).code(), EAGAIN);
  ASSERT_TRUE(a_->Write(root, ino, 0, chunk::Slice{0, 1001, 10, 0, 10}, Now(), &attr).ok());

  // a is cut off: no heartbeat for longer than b's timeout (1 s here).
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  ASSERT_TRUE(b_->Heartbeat({}).ok());
  auto cleaned = b_->CleanStaleSessions(1);
  ASSERT_TRUE(cleaned.ok()) << cleaned.status().ToString();
  EXPECT_EQ(*cleaned, 1);
  EXPECT_TRUE(b_->Flock(root, ino, 9, kWriteLock).ok()) << "a's lock survived its session";
  ASSERT_TRUE(b_->Write(root, ino, 0, chunk::Slice{0, 2002, 20, 0, 20}, Now(), &attr).ok());

  // a comes back: refused, not written over b's data.
  EXPECT_EQ(a_->Write(root, ino, 0, chunk::Slice{0, 1003, 30, 0, 30}, Now(), &attr).code(), ESTALE);
  EXPECT_EQ(a_->Heartbeat({}).code(), ESTALE);
  ASSERT_TRUE(b_->GetAttr(root, ino, &attr).ok());
  EXPECT_EQ(attr.length, 20u);
  // A new session writes again.
  SessionInfo s;
  s.mount_point = "/mnt/a";
  ASSERT_TRUE(a_->NewSession(s).ok());
  EXPECT_TRUE(a_->Heartbeat({}).ok());
  EXPECT_TRUE(a_->Write(root, ino, 0, chunk::Slice{0, 1004, 40, 0, 40}, Now(), &attr).ok());
  ASSERT_TRUE(a_->FlushDirStats().ok());
  std::vector<std::string> problems;
  ASSERT_TRUE(b_->Check(&problems).ok());
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems.front());
}

// What a client does between the cleanup of its session by others and its
// noticing (it removes a file it has open, takes a lock) is recorded under
// the dead session: its renewal cleans that too. The removed inode and the
// lock used to stay for ever, no session list naming that sid (review).
TEST_P(SessionExpiryTest, TheRenewalCleansWhatTheDeadSessionDidLast) {
  const Context root = Context::Root();
  Ino f = 0, g = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &f, &attr).ok());
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "g", S_IFREG | 0644, 0, 0, "", &g, &attr).ok());
  a_->AddRef(f);  // the kernel looked f up: its removal keeps it while referenced
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  ASSERT_TRUE(b_->Heartbeat({}).ok());
  auto cleaned = b_->CleanStaleSessions(1);
  ASSERT_TRUE(cleaned.ok()) << cleaned.status().ToString();
  ASSERT_EQ(*cleaned, 1);

  // a has not noticed yet.
  ASSERT_TRUE(a_->Unlink(root, kRootIno, "f").ok());
  ASSERT_TRUE(a_->Flock(root, g, 7, kWriteLock).ok());
  EXPECT_EQ(a_->Heartbeat({}).code(), ESTALE);
  SessionInfo s;
  s.mount_point = "/mnt/a";
  ASSERT_TRUE(a_->NewSession(s).ok());
  EXPECT_TRUE(b_->Flock(root, g, 9, kWriteLock).ok()) << "a lock taken in the dead session outlived it";
  EXPECT_EQ(b_->GetAttr(root, f, &attr).code(), ENOENT) << "the file removed in the dead session stayed";
}

// A client's writeback backlog travels with its heartbeat (`tessera
// status` on any host shows it): stored when it changes, cleared when
// writeback has nothing staged or is off, gone with a new session.
TEST_P(SessionExpiryTest, HeartbeatStoresTheClientsLoad) {
  auto load_of = [&](const std::string& mount_point) {
    auto all = b_->ListSessions();
    EXPECT_TRUE(all.ok());
    for (const auto& s : *all)
      if (s.mount_point == mount_point) return s.load;
    ADD_FAILURE() << "no session of " << mount_point;
    return SessionLoad{};
  };
  EXPECT_FALSE(load_of("/mnt/a").writeback) << "a new session reports no load";
  const SessionLoad busy{true, 3, 12 << 20};
  ASSERT_TRUE(a_->Heartbeat(busy).ok());
  EXPECT_EQ(load_of("/mnt/a"), busy);
  EXPECT_FALSE(load_of("/mnt/b").writeback) << "one client's load shown on another's session";
  ASSERT_TRUE(a_->Heartbeat(busy).ok());  // unchanged: the record stays
  EXPECT_EQ(load_of("/mnt/a"), busy);
  const SessionLoad drained{true, 0, 0};
  ASSERT_TRUE(a_->Heartbeat(drained).ok());
  EXPECT_EQ(load_of("/mnt/a"), drained);
  ASSERT_TRUE(a_->Heartbeat({}).ok());
  EXPECT_FALSE(load_of("/mnt/a").writeback);
  ASSERT_TRUE(a_->Heartbeat(busy).ok());
  SessionInfo s;
  s.mount_point = "/mnt/a2";
  ASSERT_TRUE(a_->NewSession(s).ok());
  EXPECT_FALSE(load_of("/mnt/a2").writeback) << "a new session inherited the old one's load";
  ASSERT_TRUE(a_->Heartbeat(busy).ok());
  EXPECT_EQ(load_of("/mnt/a2"), busy) << "the load was not stored again for the new session";
}

// `tessera config` on one client (Init with force): another client applies
// the new limits at its next heartbeat, not before (its cached settings).
TEST_P(SessionExpiryTest, NewLimitsReachOtherClientsAtTheirHeartbeat) {
  const Context root = Context::Root();
  StatFs fs;
  ASSERT_TRUE(b_->StatFS(root, &fs).ok());
  const uint64_t used = fs.used_inodes;
  auto f = a_->Load();
  ASSERT_TRUE(f.ok());
  f->inodes = used + 2;
  f->capacity = 64 << 20;
  ASSERT_TRUE(a_->Init(*f, /*force=*/true).ok());
  ASSERT_TRUE(b_->StatFS(root, &fs).ok());
  EXPECT_NE(fs.total_space, uint64_t(64) << 20) << "applied before a heartbeat (not wrong, but not what is tested)";
  ASSERT_TRUE(b_->Heartbeat({}).ok());
  ASSERT_TRUE(b_->StatFS(root, &fs).ok());
  EXPECT_EQ(fs.total_space, uint64_t(64) << 20);
  EXPECT_EQ(fs.used_inodes + fs.avail_inodes, used + 2);
  Ino ino = 0;
  Attr attr;
  EXPECT_TRUE(b_->Mknod(root, kRootIno, "one", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  EXPECT_TRUE(b_->Mknod(root, kRootIno, "two", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  Ino other = 0;
  EXPECT_EQ(b_->Mknod(root, kRootIno, "three", S_IFREG | 0644, 0, 0, "", &other, &attr).code(), ENOSPC);
  const chunk::Slice big{0, 77, 40u << 20, 0, 40u << 20};
  EXPECT_EQ(b_->WriteSlices(root, ino, {{0, big}, {1, big}}, Now(), &attr, nullptr).code(), ENOSPC);
  EXPECT_TRUE(b_->WriteSlices(root, ino, {{0, big}}, Now(), &attr, nullptr).ok());
}

// `tessera destroy`: Reset removes every record; the volume is gone for all.
TEST_P(SessionExpiryTest, ResetRemovesTheVolume) {
  const Context root = Context::Root();
  Ino ino = 0;
  Attr attr;
  ASSERT_TRUE(a_->Mknod(root, kRootIno, "f", S_IFREG | 0644, 0, 0, "", &ino, &attr).ok());
  ASSERT_TRUE(a_->CloseSession().ok());
  ASSERT_TRUE(b_->CloseSession().ok());
  ASSERT_TRUE(a_->Reset().ok());
  EXPECT_EQ(b_->Load().status().code(), ENOENT);
  auto fresh = Open(url_);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->Load().status().code(), ENOENT);
}

INSTANTIATE_TEST_SUITE_P(Engines, SessionExpiryTest, ::testing::Values("memory", "sqlite3", "redis", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tessera::meta
