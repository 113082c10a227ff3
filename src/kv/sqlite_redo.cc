#include "kv/sqlite_redo.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "common/endian.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace tessera::kv {
namespace {

constexpr uint32_t kMagic = 0x4f445254;  // "TRDO"
constexpr size_t kHeader = 32;
constexpr std::string_view kInfix = "-redo-";
constexpr std::string_view kNewSuffix = ".new";

// Over the record's gen and seq (16 bytes at gen_seq) and its body.
uint64_t RecordSum(const char* gen_seq, std::string_view body) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, gen_seq, 16);
  XXH64_update(state, body.data(), body.size());
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  return sum;
}

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  PutLE(b, v, 4);
  out->append(b, 4);
}

// Parses a record's ops into *ops; false if the body is malformed.
bool ParseOps(std::string_view body, std::vector<RedoOp>* ops) {
  while (!body.empty()) {
    if (body.size() < 5) return false;
    RedoOp op;
    op.kind = body[0];
    const uint64_t klen = GetLE(body.data() + 1, 4);
    body.remove_prefix(5);
    if (body.size() < klen + 4) return false;
    op.key.assign(body.data(), klen);
    body.remove_prefix(klen);
    const uint64_t vlen = GetLE(body.data(), 4);
    body.remove_prefix(4);
    if (body.size() < vlen) return false;
    op.value.assign(body.data(), vlen);
    body.remove_prefix(vlen);
    if (op.kind != 'P' && op.kind != 'D' && op.kind != 'N') return false;
    ops->push_back(std::move(op));
  }
  return true;
}

Status WriteAll(int fd, const char* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Err(errno, "write the metadata redo journal " + path);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::OK();
}

}  // namespace

void AppendRedoOp(char kind, std::string_view key, std::string_view value, std::string* body) {
  body->push_back(kind);
  PutU32(body, static_cast<uint32_t>(key.size()));
  body->append(key);
  PutU32(body, static_cast<uint32_t>(value.size()));
  body->append(value);
}

std::string RedoPath(const std::string& db_path, std::string_view id) {
  return db_path + std::string(kInfix) + std::string(id);
}

Result<std::unique_ptr<RedoJournal>> RedoJournal::Create(const std::string& db_path) {
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) | rd();
  const std::string id = fmt::format("{:x}-{:016x}", ::getpid(), r);
  const std::string path = RedoPath(db_path, id);
  // Made under a temporary name and locked before it gets its own: a file
  // with the journal's name is always held by its owner while it lives
  // (RemoveStaleRedoFiles removes the ones nobody holds).
  const std::string fresh = path + std::string(kNewSuffix);
  const int fd = ::open(fresh.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Err(errno, "create the metadata redo journal " + fresh);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::rename(fresh.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(fresh.c_str());
    return Status::Err(err, "create the metadata redo journal " + path);
  }
  return std::unique_ptr<RedoJournal>(new RedoJournal(path, id, fd));
}

RedoJournal::~RedoJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Status RedoJournal::Append(std::string_view body) {
  std::string record;
  record.reserve(kHeader + body.size());
  PutU32(&record, kMagic);
  PutU32(&record, static_cast<uint32_t>(body.size()));
  char gen_seq[16];
  PutLE(gen_seq, gen_, 8);
  PutLE(gen_seq + 8, seq_, 8);
  record.append(gen_seq, 16);
  char sum[8];
  PutLE(sum, RecordSum(gen_seq, body), 8);
  record.append(sum, 8);
  record.append(body);
  Status st = WriteAll(fd_, record.data(), record.size(), end_, path_);
  if (!st.ok()) {
    (void)Invalidate(end_);  // a record cut short would stop a replay anyway
    return st;
  }
  last_end_ = end_;
  end_ += record.size();
  ++seq_;
  return Status::OK();
}

Status RedoJournal::Undo() {
  RETURN_IF_ERROR(Invalidate(last_end_));
  end_ = last_end_;
  --seq_;
  return Status::OK();
}

void RedoJournal::Committed() {
  ++gen_;
  seq_ = 1;
  end_ = last_end_ = 0;
}

Status RedoJournal::Discard() {
  RETURN_IF_ERROR(Invalidate(0));
  end_ = last_end_ = 0;  // seq_ goes on: a record of the discarded ones left after new ones never follows them
  return Status::OK();
}

// A replay stops at a record without its magic.
Status RedoJournal::Invalidate(uint64_t offset) {
  static constexpr char kZeros[4] = {};
  return WriteAll(fd_, kZeros, sizeof kZeros, offset, path_);
}

void RedoJournal::Remove() {
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

Result<bool> ReadOrphanedRedo(const std::string& path, uint64_t gen, std::vector<RedoOp>* ops) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return false;
    return Status::Err(errno, "open the metadata redo journal " + path);
  }
  // A shared lock is enough to learn the owner is gone (it holds an
  // exclusive one), and replays are serialized by SQLite's write lock.
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;
    return Status::Err(errno, "lock the metadata redo journal " + path);
  }
  std::string data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Err(errno, "read the metadata redo journal " + path);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  // The records of generation gen are the file's first ones, with seq
  // numbers that follow one another; whatever follows is left from before
  // (records of an older generation or a discarded transaction, pieces).
  std::string_view rest(data);
  uint64_t prev = 0;
  while (rest.size() >= kHeader && GetLE(rest.data(), 4) == kMagic) {
    const uint64_t len = GetLE(rest.data() + 4, 4);
    if (rest.size() < kHeader + len) break;
    const std::string_view body = rest.substr(kHeader, len);
    const uint64_t seq = GetLE(rest.data() + 16, 8);
    if (GetLE(rest.data() + 8, 8) != gen || (prev != 0 && seq != prev + 1) ||
        GetLE(rest.data() + 24, 8) != RecordSum(rest.data() + 8, body)) {
      break;
    }
    if (!ParseOps(body, ops)) return Status::Err(EIO, "the metadata redo journal " + path + " has a malformed record");
    prev = seq;
    rest.remove_prefix(kHeader + len);
  }
  return true;
}

bool RedoOwnerGone(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno == ENOENT;
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0;
}

void RemoveStaleRedoFiles(const std::string& db_path, const std::vector<std::string>& ids) {
  const std::filesystem::path db(db_path);
  const std::string prefix = db.filename().string() + std::string(kInfix);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(db.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string id = name.substr(prefix.size());
    const bool fresh = id.size() > kNewSuffix.size() && id.ends_with(kNewSuffix);
    if (fresh) {
      // Being made right now, maybe (locked only once opened).
      struct stat st;
      if (::stat(entry.path().c_str(), &st) != 0 || ::time(nullptr) - st.st_mtime < 60) continue;
      id.resize(id.size() - kNewSuffix.size());
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) continue;  // not replayed yet
    UniqueFd fd(::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its owner lives
    // A ".new" file not held is one whose creator died before renaming it.
    if (::unlink(entry.path().c_str()) != 0 && errno != ENOENT) {
      LOG_WARN("cannot remove the stale metadata redo journal {}: {}", entry.path().string(), std::strerror(errno));
    }
  }
}

}  // namespace tessera::kv
