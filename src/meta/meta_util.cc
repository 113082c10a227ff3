#include "meta/meta_util.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "common/log.h"
#include "common/parallel.h"
#include "common/thread_name.h"
#include "meta/encoding.h"

namespace tessera::meta {

namespace {
constexpr uint64_t kDefaultCapacity = 1ull << 50;  // reported when no capacity is set
constexpr uint64_t kDefaultInodes = 10ull << 20;
}  // namespace

void DeliverChanges(const ChangeFn& fn, const std::vector<std::string>& payloads, std::string_view self, bool lost) {
  std::vector<Change> changes;
  for (const std::string& p : payloads) {
    std::string origin;
    std::vector<Change> one;
    if (p.size() >= 2 && p.compare(p.size() - 2, 2, std::string("\0*", 2)) == 0) {
      if (p.compare(0, p.size() - 2, self) != 0) lost = true;  // "everything"
      continue;
    }
    if (!DecodeChanges(p, &origin, &one)) {
      lost = true;  // cannot tell what changed: everything may have
      continue;
    }
    if (origin == self) continue;
    for (Change& c : one) changes.push_back(std::move(c));
  }
  if (lost || !changes.empty()) fn(changes, lost);
}

Status ValidName(const std::string& name) {
  if (name.empty()) return Status::Err(ENOENT);
  if (name.size() > kMaxName) return Status::Err(ENAMETOOLONG);
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) return Status::Err(EINVAL);
  return Status::OK();
}

bool IsDotName(const std::string& name) { return name == "." || name == ".."; }

Status CheckMknodArgs(const std::string& name, uint32_t mode, const std::string& target, uint32_t* type) {
  if (IsDotName(name)) return Status::Err(EEXIST);
  RETURN_IF_ERROR(ValidName(name));
  uint32_t t = mode & S_IFMT;
  if (t == 0) t = S_IFREG;
  if (t != S_IFREG && t != S_IFDIR && t != S_IFLNK && t != S_IFIFO && t != S_IFSOCK && t != S_IFCHR && t != S_IFBLK)
    return Status::Err(EINVAL);
  if (t == S_IFLNK && (target.empty() || target.size() > kMaxSymlink))
    return Status::Err(target.empty() ? ENOENT : ENAMETOOLONG);
  *type = t;
  return Status::OK();
}

Status CheckRenameArgs(const std::string& nsrc, const std::string& ndst, uint32_t flags) {
  if (flags & ~(kRenameNoReplace | kRenameExchange)) return Status::Err(EINVAL);
  if ((flags & kRenameNoReplace) && (flags & kRenameExchange)) return Status::Err(EINVAL);
  if (IsDotName(nsrc) || IsDotName(ndst)) return Status::Err(EINVAL);
  RETURN_IF_ERROR(ValidName(nsrc));
  return ValidName(ndst);
}

Status CheckFallocateArgs(int mode, uint64_t off, uint64_t len) {
  const int supported = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
  if (mode & ~supported) return Status::Err(EOPNOTSUPP);
  if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE)) return Status::Err(EOPNOTSUPP);
  if ((mode & FALLOC_FL_PUNCH_HOLE) && (mode & FALLOC_FL_ZERO_RANGE)) return Status::Err(EINVAL);
  if (len == 0) return Status::Err(EINVAL);
  // Past the largest file: EFBIG, unless the engine finds first that the
  // space is not there (ENOSPC, FallocateSpace).
  if (off + len < off) return Status::Err(EFBIG);
  return Status::OK();
}

Status CheckXattrName(const std::string& name) {
  if (name.empty() || name.size() > XATTR_NAME_MAX) return Status::Err(ERANGE);
  return Status::OK();
}

int OpenMask(int flags) {
  int mask = 0;
  switch (flags & O_ACCMODE) {
    // execve(2) opens the file read-only with __FMODE_EXEC: it needs execute
    // permission, not read (a mode 0111 program runs for anyone).
    case O_RDONLY: mask = (flags & kOpenForExec) ? X_OK : R_OK; break;
    case O_WRONLY: mask = W_OK; break;
    default: mask = R_OK | W_OK; break;
  }
  if (flags & O_TRUNC) mask |= W_OK;
  return mask;
}

Status CheckOpen(const Context& ctx, const Attr& attr, int flags) {
  int mask = OpenMask(flags);
  if (attr.IsDir() && (mask & W_OK)) return Status::Err(EISDIR);
  return CheckPermission(ctx, attr, mask);
}

uint64_t FallocateSpace(uint64_t capacity) { return capacity ? capacity : kDefaultCapacity; }

void FillStatFs(uint64_t capacity, uint64_t inode_limit, int64_t used, int64_t inodes, StatFs* out) {
  used = std::max<int64_t>(used, 0);
  inodes = std::max<int64_t>(inodes, 0);
  uint64_t cap = capacity ? capacity : kDefaultCapacity;
  out->total_space = std::max<uint64_t>(cap, uint64_t(used));
  out->avail_space = out->total_space - uint64_t(used);
  uint64_t ilimit = inode_limit ? inode_limit : std::max<uint64_t>(kDefaultInodes, uint64_t(inodes) * 2);
  out->used_inodes = uint64_t(inodes);
  out->avail_inodes = ilimit > uint64_t(inodes) ? ilimit - uint64_t(inodes) : 0;
}

void CheckTree(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
               std::vector<std::string>* problems) {
  std::unordered_map<Ino, uint32_t> names;    // entries pointing at each inode
  std::unordered_map<Ino, uint32_t> subdirs;  // directory -> child directories
  for (auto& [parent, name, child] : entries) {
    auto it = attrs.find(child);
    if (it == attrs.end()) {
      problems->push_back(fmt::format("entry {}/{} points to missing inode {}", parent, name, child));
      continue;
    }
    names[child]++;
    if (it->second.IsDir() && it->second.nlink > 0) {
      subdirs[parent]++;
      if (it->second.parent != parent)
        problems->push_back(fmt::format("directory {} is in {} but records parent {}", child, parent, it->second.parent));
    }
  }
  for (auto& [ino, a] : attrs) {
    if (ino == kRootIno || (a.nlink == 0 && names[ino] == 0)) continue;  // unlinked, still referenced
    if (a.IsDir()) {
      if (names[ino] != 1) problems->push_back(fmt::format("directory {} has {} names", ino, names[ino]));
    } else if (a.nlink != names[ino]) {
      problems->push_back(fmt::format("inode {} nlink {} but {} names", ino, a.nlink, names[ino]));
    }
  }
  // An hour's directory in the trash does not count its subdirectories
  // (CountSubdir; one made before that rule counted those entering it), but
  // while it has its name its count is at least 2 (a client older than the
  // rule, taking directories out of it, lowers it).
  for (auto& [ino, a] : attrs)
    if (a.IsDir() && (IsTrashHourIno(ino) ? names[ino] > 0 && a.nlink < 2 : a.nlink > 0 && a.nlink != 2 + subdirs[ino]))
      problems->push_back(fmt::format("directory {} nlink {} but {} subdirectories", ino, a.nlink, subdirs[ino]));
}

bool ProcessAlive(uint32_t pid) {
  if (pid == 0) return false;
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  auto paren = line.rfind(')');
  return !(paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X'));
}

std::string HostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string PidScope() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!std::getline(boot, id) || id.empty()) return "";
  char ns[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  if (n <= 0) return "";
  return id + "/" + std::string(ns, size_t(n));
}

SessionInfo CompleteSession(const SessionInfo& in) {
  SessionInfo info = in;
  if (info.host.empty()) info.host = HostName();
  if (info.pid == 0) {
    info.pid = uint32_t(getpid());
    info.pid_scope = PidScope();
  }
  return info;
}

std::string HeartbeatRecord(const SessionInfo& stored, uint64_t sid, const SessionLoad& load) {
  if (stored.sid != sid || load == stored.load) return "";
  SessionInfo record = stored;
  record.load = load;
  return EncodeSession(record);
}

bool SessionDead(const SessionInfo& s, int64_t now, int64_t timeout_sec) {
  if (now - s.heartbeat > timeout_sec) return true;
  // A client on this host whose process is gone is dead before its timeout,
  // if its pid means the same process here: same host name is not enough
  // (containers with the host's name and PID namespaces of their own, cloned
  // machines), so the boot and the PID namespace must match too.
  static const std::string host = HostName();
  static const std::string scope = PidScope();
  return s.host == host && !scope.empty() && s.pid_scope == scope && !ProcessAlive(s.pid);
}

void RefTable::Add(Ino ino, uint64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  refs_[ino] += n;
}

bool RefTable::Drop(Ino ino, uint64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = refs_.find(ino);
  if (it == refs_.end()) return false;
  if (it->second > n) {
    it->second -= n;
    return false;
  }
  refs_.erase(it);
  return sustained_.erase(ino) > 0;
}

bool RefTable::Sustain(Ino ino) {
  std::lock_guard<std::mutex> g(mu_);
  if (refs_.count(ino) == 0) return false;
  sustained_.insert(ino);
  return true;
}

void RefTable::Clear() {
  std::lock_guard<std::mutex> g(mu_);
  refs_.clear();
  sustained_.clear();
}

ReleaseQueue::ReleaseQueue(ReleaseFn release) : release_(std::move(release)) {}

ReleaseQueue::~ReleaseQueue() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  (void)Flush();
}

void ReleaseQueue::Push(Ino ino) {
  bool wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!pending_.insert(ino).second) return;
    npending_.store(pending_.size(), std::memory_order_relaxed);
    queue_.push_back(ino);
    if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { Loop(); });
    // Only the first inode (the thread starts gathering) and a full batch
    // need the thread: waking it for every push costs a context switch each.
    wake = queue_.size() == 1 || queue_.size() == kBatch;
  }
  if (wake) cv_.notify_one();
}

bool ReleaseQueue::Pending(Ino ino) const {
  if (npending_.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> g(mu_);
  return pending_.count(ino) > 0;
}

Status ReleaseQueue::Flush() {
  std::unique_lock<std::mutex> run(run_mu_);
  return RunBatch(run);
}

Status ReleaseQueue::RunBatch(std::unique_lock<std::mutex>& /*run: held*/) {
  std::vector<Ino> batch;
  {
    std::lock_guard<std::mutex> g(mu_);
    batch.swap(queue_);
  }
  if (batch.empty()) return Status::OK();
  Status st = release_(batch);
  if (!st.ok()) LOG_WARN("releasing {} unlinked inodes failed (session cleanup will): {}", batch.size(), st.ToString());
  std::lock_guard<std::mutex> g(mu_);
  for (Ino ino : batch) pending_.erase(ino);
  npending_.store(pending_.size(), std::memory_order_relaxed);
  return st;
}

void ReleaseQueue::Loop() {
  NameThisThread("ts-release");
  // A short pause after the first inode lets a burst of FORGETs (rm -r, an
  // mdtest removal phase) share one transaction.
  constexpr auto kGather = std::chrono::milliseconds(2);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    cv_.wait_for(lock, kGather, [&] { return stop_ || queue_.size() >= kBatch; });
    lock.unlock();
    {
      std::unique_lock<std::mutex> run(run_mu_);
      (void)RunBatch(run);
    }
    lock.lock();
  }
}

Result<uint64_t> IdPool::Next() {
  std::lock_guard<std::mutex> g(mu_);
  if (next_ >= end_) {
    ASSIGN_OR_RETURN(int64_t last, reserve_(batch_));
    // Counters hold the last id handed out; ids start after the initial value.
    next_ = uint64_t(last) - batch_ + 1;
    end_ = uint64_t(last) + 1;
  }
  return next_++;
}

Status CheckCloneArgs(const Context& ctx, Ino src, Ino parent, const std::string& name, bool preserve) {
  if (name.empty() || name.size() > kMaxName) return Status::Err(name.empty() ? EINVAL : ENAMETOOLONG);
  if (name == "." || name == ".." || name.find('/') != std::string::npos) return Status::Err(EINVAL);
  if (IsTrashIno(src) || IsTrashIno(parent)) return Status::Err(EPERM, "the trash cannot be cloned or cloned into");
  if (preserve && !ctx.IsRoot()) return Status::Err(EPERM, "only root may keep the owners (--preserve)");
  return Status::OK();
}

std::vector<size_t> DeleteSlices(const SliceDeleter& deleter, const std::vector<std::pair<uint64_t, uint32_t>>& slices,
                                 size_t parallel, Status* failed) {
  // After a failure (the store is down) no new deletion starts, as when
  // they ran one at a time; the next cleanup round tries again.
  std::vector<char> ok(slices.size(), 0);
  std::atomic<bool> stop{false};
  std::mutex mu;
  ParallelFor(slices.size(), int(std::min<size_t>(parallel, (slices.size() + 3) / 4)), [&](size_t i) {
    if (stop.load()) return;
    Status st = deleter(slices[i].first, slices[i].second);
    if (st.ok()) {
      ok[i] = 1;
      return;
    }
    stop = true;
    std::lock_guard<std::mutex> g(mu);
    if (failed->ok()) *failed = st;
  });
  std::vector<size_t> done;
  for (size_t i = 0; i < slices.size(); ++i)
    if (ok[i]) done.push_back(i);
  return done;
}

}  // namespace tessera::meta
