// The redo journal of a SQLite engine with a commit delay (sqlite_redo.h):
// a change answered before its COMMIT survives a crash of the process. The
// journal's records count only in their generation, a record cut short
// stops a replay, files nobody holds go; and, with a real engine in a
// child process killed with SIGKILL, what it answered is in the database
// once another engine opens or writes, and nothing it did not answer is.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kv/sqlite_kv.h"
#include "kv/sqlite_redo.h"
#include "kv_test_util.h"

namespace tessera::kv {
namespace {

using namespace std::chrono_literals;
using testing::GetValue;
using testing::TempDir;

std::string Body(std::initializer_list<std::pair<std::string, std::string>> puts) {
  std::string body;
  for (const auto& [k, v] : puts) AppendRedoOp('P', k, v, &body);
  return body;
}

std::string Keys(const std::vector<RedoOp>& ops) {
  std::string keys;
  for (const RedoOp& op : ops) keys += std::string(1, op.kind) + op.key + "=" + op.value + ";";
  return keys;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void AppendFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << data;
}

class RedoJournalTest : public ::testing::Test {
 protected:
  std::string Db() const { return (dir_.path() / "meta.db").string(); }
  TempDir dir_;
};

// After a COMMIT the records written before it never count again, though
// still in the file (the next ones are written over them); a record cut
// short or damaged ends the replay; a journal whose owner lives is not read.
TEST_F(RedoJournalTest, OnlyTheCurrentGenerationCounts) {
  auto journal = RedoJournal::Create(Db());
  ASSERT_TRUE(journal.ok()) << journal.status().ToString();
  const std::string path = RedoPath(Db(), (*journal)->id());
  EXPECT_EQ((*journal)->gen(), 1u);
  ASSERT_OK((*journal)->Append(Body({{"a", "1"}, {"b", "2"}})));
  ASSERT_OK((*journal)->Append(Body({{"x", "9"}})));
  (*journal)->Committed();
  EXPECT_EQ((*journal)->gen(), 2u);
  std::vector<RedoOp> ops;
  ASSERT_TRUE(*ReadOrphanedRedo(path, 2, &ops) == false);  // its owner lives
  EXPECT_FALSE(RedoOwnerGone(path));
  const std::string committed = ReadFile(path);
  {
    // A crash right after the COMMIT: the old records are all there, and none counts.
    const std::string copy = path + "-copy";
    AppendFile(copy, committed);
    ASSERT_TRUE(*ReadOrphanedRedo(copy, 2, &ops));
    EXPECT_EQ(Keys(ops), "");
  }
  std::string body = Body({{"c", "3"}});
  AppendRedoOp('D', "a", "", &body);
  AppendRedoOp('N', "", "note", &body);
  ASSERT_OK((*journal)->Append(body));
  ASSERT_OK((*journal)->Append(Body({{"d", "4"}})));
  const std::string whole = ReadFile(path);
  journal->reset();  // the owner dies: its lock goes, its file stays
  EXPECT_TRUE(RedoOwnerGone(path));
  ASSERT_TRUE(*ReadOrphanedRedo(path, 2, &ops));
  EXPECT_EQ(Keys(ops), "Pc=3;Da=;N=note;Pd=4;");  // and not x=9, left after them from gen 1
  ops.clear();
  ASSERT_TRUE(*ReadOrphanedRedo(path, 1, &ops));
  EXPECT_EQ(Keys(ops), "");
  // The last record cut short, then damaged: the replay ends before it.
  const size_t first = 32 + body.size(), second = 32 + Body({{"d", "4"}}).size();
  std::filesystem::remove(path);
  AppendFile(path, whole.substr(0, first + second - 3));
  ops.clear();
  ASSERT_TRUE(*ReadOrphanedRedo(path, 2, &ops));
  EXPECT_EQ(Keys(ops), "Pc=3;Da=;N=note;");
  std::string damaged = whole.substr(0, first + second);
  damaged[first + second - 1] ^= 1;
  std::filesystem::remove(path);
  AppendFile(path, damaged);
  ops.clear();
  ASSERT_TRUE(*ReadOrphanedRedo(path, 2, &ops));
  EXPECT_EQ(Keys(ops), "Pc=3;Da=;N=note;");
  ops.clear();
  auto missing = ReadOrphanedRedo(path + "-missing", 2, &ops);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(*missing);
}

// Undo takes back the last record only; after Discard none of the records
// before it counts, even where the next ones leave them in the file.
TEST_F(RedoJournalTest, UndoAndDiscard) {
  auto journal = RedoJournal::Create(Db());
  ASSERT_TRUE(journal.ok());
  const std::string path = RedoPath(Db(), (*journal)->id());
  ASSERT_OK((*journal)->Append(Body({{"a", "1"}})));
  ASSERT_OK((*journal)->Append(Body({{"b", "2"}})));
  ASSERT_OK((*journal)->Undo());
  std::vector<RedoOp> ops;
  const std::string copy = path + "-copy";
  AppendFile(copy, ReadFile(path));
  ASSERT_TRUE(*ReadOrphanedRedo(copy, 1, &ops));
  EXPECT_EQ(Keys(ops), "Pa=1;");
  ASSERT_OK((*journal)->Append(Body({{"c", "3"}})));  // over b's
  ASSERT_OK((*journal)->Append(Body({{"e", "5"}})));
  ASSERT_OK((*journal)->Discard());
  EXPECT_EQ((*journal)->gen(), 1u);  // nothing was committed
  std::filesystem::remove(copy);
  AppendFile(copy, ReadFile(path));
  ops.clear();
  ASSERT_TRUE(*ReadOrphanedRedo(copy, 1, &ops));
  EXPECT_EQ(Keys(ops), "") << "a discarded record counts";
  ASSERT_OK((*journal)->Append(Body({{"f", "6"}})));  // as long as a's: c's and e's records follow it intact
  journal->reset();
  ops.clear();
  ASSERT_TRUE(*ReadOrphanedRedo(path, 1, &ops));
  EXPECT_EQ(Keys(ops), "Pf=6;");
}

// Files nobody holds go unless a row still names them; a live one stays.
TEST_F(RedoJournalTest, StaleFilesAreRemoved) {
  auto live = RedoJournal::Create(Db());
  auto dead = RedoJournal::Create(Db());
  auto unreplayed = RedoJournal::Create(Db());
  ASSERT_TRUE(live.ok() && dead.ok() && unreplayed.ok());
  const std::string live_path = RedoPath(Db(), (*live)->id());
  const std::string dead_path = RedoPath(Db(), (*dead)->id());
  const std::string unreplayed_path = RedoPath(Db(), (*unreplayed)->id());
  const std::string unreplayed_id = (*unreplayed)->id();
  dead->reset();
  unreplayed->reset();
  RemoveStaleRedoFiles(Db(), {unreplayed_id});
  EXPECT_TRUE(std::filesystem::exists(live_path));
  EXPECT_FALSE(std::filesystem::exists(dead_path));
  EXPECT_TRUE(std::filesystem::exists(unreplayed_path));
  (*live)->Remove();
  EXPECT_FALSE(std::filesystem::exists(live_path));
}

// ---- A real engine, killed.

// Whether key is committed, read with SQLite itself (opening an engine
// would replay the journal).
bool InDatabase(const std::string& db, const std::string& key) {
  sqlite3* conn = nullptr;
  bool found = false;
  if (sqlite3_open_v2(db.c_str(), &conn, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(conn, "SELECT 1 FROM kv WHERE k = ?1", -1, &stmt, nullptr) == SQLITE_OK) {
      sqlite3_bind_blob(stmt, 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
      found = sqlite3_step(stmt) == SQLITE_ROW;
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(conn);
  return found;
}

int JournalRows(const std::string& db) {
  sqlite3* conn = nullptr;
  int rows = -1;
  if (sqlite3_open_v2(db.c_str(), &conn, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(conn, "SELECT count(*) FROM kvredo", -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      rows = sqlite3_column_int(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(conn);
  return rows;
}

int RedoFiles(const std::filesystem::path& dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    n += entry.path().filename().string().find("-redo-") != std::string::npos;
  }
  return n;
}

// In a child process: opens a delayed engine (1 h: nothing is committed but
// by the 256th transaction), runs `work` on it, reports through `ready` and
// dies by SIGKILL. Returns the child's wait status.
template <typename Work>
int RunAndKill(const std::string& db, const Work& work) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(ready[0]);
    SqliteOptions options;
    options.commit_delay = 1h;
    auto engine = OpenSqlite(db, options);
    const char byte = engine.ok() && work(**engine) ? 1 : 2;
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    kill(getpid(), SIGKILL);
    _exit(4);
  }
  close(ready[1]);
  char byte = 0;
  const bool told = read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  return told && byte == 1 ? wstatus : -2;
}

class RedoCrashTest : public ::testing::Test {
 protected:
  std::string Db() const { return (dir_.path() / "meta.db").string(); }
  TempDir dir_;
};

// What a killed engine answered is in the database once another opens;
// what it did not answer (a transaction that failed) is not, and the
// journal's row and file are gone afterwards.
TEST_F(RedoCrashTest, AnsweredChangesSurviveAKill) {
  {
    auto setup = OpenSqlite(Db());
    ASSERT_TRUE(setup.ok());
    ASSERT_OK((*setup)->Run([](Txn& txn) { return txn.Put("doomed", "x"); }));
  }
  const int wstatus = RunAndKill(Db(), [](Engine& engine) {
    for (int i = 0; i < 10; ++i) {
      if (!engine.Run([&](Txn& txn) { return txn.Put("k" + std::to_string(i), "v" + std::to_string(i)); }).ok())
        return false;
    }
    for (int i = 0; i < 3; ++i) {
      if (!engine.Run([](Txn& txn) { return txn.Incr("counter", 1).status(); }).ok()) return false;
    }
    if (!engine.Run([](Txn& txn) { return txn.Delete("doomed"); }).ok()) return false;
    if (!engine.Run([](Txn& txn) { return txn.Delete("k3"); }).ok()) return false;
    const Status failed = engine.Run([](Txn& txn) {
      RETURN_IF_ERROR(txn.Put("unanswered", "x"));
      return Status::Err(EEXIST);
    });
    if (failed.code() != EEXIST) return false;
    // Reads of this engine commit first: none here.
    return true;
  });
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "child status " << wstatus;
  // The kill rolled the changes back: they are only in the journal.
  EXPECT_FALSE(InDatabase(Db(), "k0")) << "committed before the kill: the test proves nothing";
  EXPECT_TRUE(InDatabase(Db(), "doomed"));
  EXPECT_EQ(JournalRows(Db()), 1);
  EXPECT_EQ(RedoFiles(dir_.path()), 1);

  auto engine = OpenSqlite(Db());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  for (int i = 0; i < 10; ++i) {
    auto v = GetValue(**engine, "k" + std::to_string(i));
    if (i == 3) {
      EXPECT_TRUE(v.status().not_found()) << "k3 was deleted";
    } else {
      ASSERT_TRUE(v.ok()) << "k" << i << ": " << v.status().ToString();
      EXPECT_EQ(*v, "v" + std::to_string(i));
    }
  }
  int64_t counter = 0;
  ASSERT_OK((*engine)->Run([&](Txn& txn) {
    ASSIGN_OR_RETURN(counter, txn.Incr("counter", 0));
    return Status::OK();
  }));
  EXPECT_EQ(counter, 3);
  EXPECT_TRUE(GetValue(**engine, "doomed").status().not_found());
  EXPECT_TRUE(GetValue(**engine, "unanswered").status().not_found()) << "a change whose transaction failed came back";
  EXPECT_EQ(JournalRows(Db()), 0);
  EXPECT_EQ(RedoFiles(dir_.path()), 0);
}

// An engine that was open all along replays the killed one's changes at
// its next write, before that write: its own change wins where both wrote.
TEST_F(RedoCrashTest, AnOpenEnginesNextWriteReplaysFirst) {
  auto engine = OpenSqlite(Db());
  ASSERT_TRUE(engine.ok());
  const int wstatus = RunAndKill(Db(), [](Engine& child) {
    return child.Run([](Txn& txn) { return txn.Put("x", "child"); }).ok() &&
           child.Run([](Txn& txn) { return txn.Put("y", "child"); }).ok();
  });
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child status " << wstatus;
  EXPECT_FALSE(InDatabase(Db(), "y"));
  ASSERT_OK((*engine)->Run([](Txn& txn) { return txn.Put("x", "parent"); }));
  EXPECT_EQ(*GetValue(**engine, "x"), "parent");
  EXPECT_EQ(*GetValue(**engine, "y"), "child");
  EXPECT_EQ(JournalRows(Db()), 0);
  EXPECT_EQ(RedoFiles(dir_.path()), 0);
}

// A listening engine (a mount with coherent caches) replays a killed
// engine's changes within a poll, without writing anything itself, and
// hears their change records.
TEST_F(RedoCrashTest, AListenerReplaysWithinAPoll) {
  auto engine = OpenSqlite(Db());  // opened before the child: its own open replays nothing
  ASSERT_TRUE(engine.ok());
  // The child is forked before this process has a thread (the listener's).
  const int wstatus = RunAndKill(Db(), [](Engine& child) {
    return child.Run([](Txn& txn) {
      RETURN_IF_ERROR(txn.Put("z", "child"));
      return txn.Notify("changed z");
    }).ok();
  });
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child status " << wstatus;
  EXPECT_FALSE(InDatabase(Db(), "z"));
  std::mutex mu;
  std::vector<std::string> heard;
  auto listener = (*engine)->Listen([&](const std::vector<std::string>& payloads, bool) {
    std::lock_guard lock(mu);
    heard.insert(heard.end(), payloads.begin(), payloads.end());
  });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  bool replayed = false;
  for (int i = 0; i < 200 && !replayed; ++i) {
    std::this_thread::sleep_for(10ms);
    replayed = InDatabase(Db(), "z");
  }
  EXPECT_TRUE(replayed) << "not replayed 2 s after the kill";
  bool notified = false;
  for (int i = 0; i < 200 && !notified; ++i) {
    {
      std::lock_guard lock(mu);
      notified = std::find(heard.begin(), heard.end(), "changed z") != heard.end();
    }
    if (!notified) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(notified) << "the replayed change record was not heard";
}

// The journal's file system is full: the change that cannot be written to
// it fails with ENOSPC and is not made; the ones before stay and commit;
// the engine works again once there is room. (A tmpfs of 256 KiB: root.)
TEST_F(RedoCrashTest, AJournalWriteThatFailsFailsItsChange) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const std::filesystem::path small = dir_.path() / "small";
  std::filesystem::create_directory(small);
  ASSERT_EQ(mount("tessera-test", small.c_str(), "tmpfs", 0, "size=256k"), 0) << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{small.string()};
  const std::string db = (small / "meta.db").string();
  {
    SqliteOptions options;
    options.commit_delay = 1h;
    auto engine = OpenSqlite(db, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_OK((*engine)->Run([](Txn& txn) { return txn.Put("a", "1"); }));
    // Fill what is left.
    const std::string filler = (small / "filler").string();
    {
      std::ofstream out(filler, std::ios::binary);
      const std::string chunk(4096, 'x');
      while (out.write(chunk.data(), chunk.size())) out.flush();
    }
    const Status st = (*engine)->Run([](Txn& txn) { return txn.Put("b", std::string(64 * 1024, 'b')); });
    EXPECT_EQ(st.code(), ENOSPC) << st.ToString();
    std::filesystem::remove(filler);
    ASSERT_OK((*engine)->Run([](Txn& txn) { return txn.Put("c", "3"); }));
    EXPECT_EQ(*GetValue(**engine, "a"), "1");  // a read commits first
    EXPECT_TRUE(GetValue(**engine, "b").status().not_found()) << "the change that failed was made";
    EXPECT_EQ(*GetValue(**engine, "c"), "3");
  }
  EXPECT_TRUE(InDatabase(db, "a") && InDatabase(db, "c") && !InDatabase(db, "b"));
}

// A clean close commits and leaves neither row nor file; a live delayed
// engine's journal is left alone by another engine's open and writes.
TEST_F(RedoCrashTest, LiveJournalsAreLeftAlone) {
  SqliteOptions options;
  options.commit_delay = 1h;
  auto delayed = OpenSqlite(Db(), options);
  ASSERT_TRUE(delayed.ok());
  ASSERT_OK((*delayed)->Run([](Txn& txn) { return txn.Put("a", "1"); }));
  EXPECT_EQ(RedoFiles(dir_.path()), 1);
  {
    auto other = OpenSqlite(Db());  // does not wait for the delayed transaction's lock
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    EXPECT_TRUE(GetValue(**other, "a").status().not_found());
  }
  ASSERT_OK((*delayed)->Flush());
  {
    auto other = OpenSqlite(Db());
    ASSERT_TRUE(other.ok());
    ASSERT_OK((*other)->Run([](Txn& txn) { return txn.Put("b", "2"); }));  // writes with the journal live
    EXPECT_EQ(*GetValue(**other, "a"), "1");
  }
  EXPECT_EQ(JournalRows(Db()), 1);
  EXPECT_EQ(RedoFiles(dir_.path()), 1);
  ASSERT_OK((*delayed)->Run([](Txn& txn) { return txn.Put("c", "3"); }));
  delayed->reset();
  EXPECT_TRUE(InDatabase(Db(), "c"));
  EXPECT_EQ(JournalRows(Db()), 0);
  EXPECT_EQ(RedoFiles(dir_.path()), 0);
}

}  // namespace
}  // namespace tessera::kv
