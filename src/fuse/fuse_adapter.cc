#define FUSE_USE_VERSION 314
#include "fuse/fuse_adapter.h"

#include <fuse3/fuse_lowlevel.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_export.h"
#include "fuse/coherence.h"
#include "fuse/faults.h"
#include "fuse/internal_files.h"
#include "fuse/long_wait.h"
#include "fuse/uring_loop.h"
#include "fuse/worker_loop.h"

namespace tessera::fuse {

namespace {

using meta::Attr;
using meta::Context;
using meta::Ino;

// Every FUSE operation, for metrics and the access log.
enum FuseOp : size_t {
  kLookup, kForget, kGetattr, kSetattr, kReadlink, kMknod, kMkdir, kUnlink, kRmdir, kSymlink, kRename, kLink,
  kOpen, kCreate, kRead, kWrite, kFlush, kRelease, kFsync, kOpendir, kReaddir, kReaddirplus, kReleasedir,
  kFsyncdir, kStatfs, kSetxattr, kGetxattr, kListxattr, kRemovexattr, kAccess, kGetlk, kSetlk, kFlock,
  kFallocate, kCopyFileRange, kLseek, kFuseOpCount
};
constexpr const char* kFuseOpNames[kFuseOpCount] = {
    "lookup",  "forget",     "getattr",  "setattr",     "readlink", "mknod",    "mkdir",    "unlink",
    "rmdir",   "symlink",    "rename",   "link",        "open",     "create",   "read",     "write",
    "flush",   "release",    "fsync",    "opendir",     "readdir",  "readdirplus", "releasedir", "fsyncdir",
    "statfs",  "setxattr",   "getxattr", "listxattr",   "removexattr", "access", "getlk",   "setlk",
    "flock",   "fallocate",  "copy_file_range", "lseek"};

struct OpMetrics {
  metrics::Histogram* duration = nullptr;
  metrics::Counter* errors = nullptr;
};

struct State {
  vfs::Vfs* vfs;
  MountOptions opts;
  fuse_session* se = nullptr;  // set before the session loop starts
  // Set once the /dev/fuse loop returned (which resets the session's exited
  // flag): the io_uring threads still to be joined must end their waits.
  std::atomic<bool> ending{false};
  InternalFiles* internal = nullptr;
  std::array<OpMetrics, kFuseOpCount> ops{};
  metrics::Counter* read_bytes = nullptr;
  metrics::Counter* written_bytes = nullptr;
  Coherence coherence{};
};

State* S(fuse_req_t req) { return static_cast<State*>(fuse_req_userdata(req)); }
vfs::Vfs* V(fuse_req_t req) { return S(req)->vfs; }
vfs::Handle* H(const fuse_file_info* fi) { return reinterpret_cast<vfs::Handle*>(fi->fh); }

// Whether a request in a long wait (long_wait.h) should end with EINTR: the
// kernel's FUSE_INTERRUPT (libfuse's flag) or, as that does not always come,
// a signal its caller has pending (looked at every 100 ms at most); or the
// session ending (SIGTERM, unmount, an aborted connection), whose requests
// no one waits for any more and whose threads the client joins before it
// exits. It keeps state between calls: for the request's own thread, not
// concurrent calls.
bool SessionEnding(const State* state) { return state->ending.load() || fuse_session_exited(state->se) != 0; }

std::function<bool()> Interrupted(fuse_req_t req) {
  return [req, state = S(req), signals = CallerSignals(uint32_t(fuse_req_ctx(req)->pid)),
          next = std::chrono::steady_clock::time_point{}]() mutable {
    if (fuse_req_interrupted(req) != 0 || SessionEnding(state)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now < next) return false;
    next = now + std::chrono::milliseconds(100);
    return signals.Pending();
  };
}

Context Ctx(fuse_req_t req) {
  const fuse_ctx* c = fuse_req_ctx(req);
  Context ctx;
  ctx.uid = c->uid;
  ctx.gid = c->gid;
  ctx.pid = uint32_t(c->pid);
  if (ctx.uid != 0) {  // supplementary groups only matter for permission checks
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    for (int i = 0; i < n && i < 64; ++i) ctx.gids.push_back(groups[i]);
  }
  return ctx;
}

void FillStat(Ino ino, const Attr& a, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_mode = a.mode;
  st->st_nlink = meta::InTrash(a) ? 0 : a.nlink;  // removed for good as far as POSIX goes
  st->st_uid = a.uid;
  st->st_gid = a.gid;
  st->st_rdev = a.rdev;
  st->st_size = off_t(a.length);
  st->st_blksize = 4096;
  st->st_blocks = a.IsDir() ? 8 : blkcnt_t((a.length + 511) / 512);
  st->st_atim = {a.atime.sec, long(a.atime.nsec)};
  st->st_mtim = {a.mtime.sec, long(a.mtime.nsec)};
  st->st_ctim = {a.ctime.sec, long(a.ctime.nsec)};
}

// The coherence sequence number when the request this thread is serving
// began (see Coherence::For).
thread_local uint64_t t_seq = 0;

// Call while holding Coherence::ReplyLock until the reply is sent.
fuse_entry_param MakeEntry(fuse_req_t req, Ino ino, const Attr& a, Ino parent) {
  const Coherence::Timeouts& t = S(req)->coherence.For(t_seq, ino, parent);
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = ino;
  e.generation = 1;
  e.attr_timeout = t.attr;
  e.entry_timeout = a.IsDir() ? t.dir_entry : t.entry;
  FillStat(ino, a, &e.attr);
  return e;
}

// The result of the request this thread is serving (for OpScope).
thread_local int t_result = 0;
// The inode an entry reply named (lookup, create, mkdir, ...), for the log.
thread_local Ino t_entry = 0;

// Times one request into its operation's histogram, counts its failure
// (ENOENT is an answer, not counted) and, while .accesslog has a reader,
// writes its line there. Arguments are formatted only then.
class OpScope {
 public:
  template <typename... Args>
  OpScope(fuse_req_t req, FuseOp op, fmt::format_string<Args...> f, Args&&... args)
      : state_(S(req)), op_(op), start_(std::chrono::steady_clock::now()) {
    t_result = 0;
    t_entry = 0;
    t_seq = state_->coherence.Begin();
    if (state_->internal->access_log().active()) {
      const fuse_ctx* c = fuse_req_ctx(req);
      uid_ = c->uid, gid_ = c->gid, pid_ = c->pid;
      args_ = fmt::format(f, std::forward<Args>(args)...);
      logging_ = true;
    }
  }
  ~OpScope() {
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    if (internal_) return;
    const OpMetrics& m = state_->ops[op_];
    m.duration->Observe(elapsed);
    if (t_result != 0 && t_result != ENOENT) m.errors->Inc();
    if (logging_) Log(elapsed);
  }
  // Requests on the internal files are neither counted nor logged (each
  // read of .accesslog would log one; tessera stats would count itself).
  void Internal() {
    logging_ = false;
    internal_ = true;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  void Log(std::chrono::steady_clock::duration elapsed) const {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    localtime_r(&now.tv_sec, &tm);
    const char* name = t_result ? strerrorname_np(t_result) : nullptr;
    state_->internal->access_log().Write(fmt::format(
        "{:04}.{:02}.{:02} {:02}:{:02}:{:02}.{:06} [uid:{},gid:{},pid:{}] {} ({}): {} <{:.6f}>\n", tm.tm_year + 1900,
        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000, uid_, gid_, pid_,
        kFuseOpNames[op_], args_,
        t_result != 0 ? (name ? std::string(name) : std::to_string(t_result))
        : t_entry != 0 ? fmt::format("OK [ino {}]", t_entry)
                       : std::string("OK"),
        std::chrono::duration<double>(elapsed).count()));
  }

  State* const state_;
  const FuseOp op_;
  const std::chrono::steady_clock::time_point start_;
  bool logging_ = false;
  bool internal_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  pid_t pid_ = 0;
  std::string args_;
};

void ReplyErrno(fuse_req_t req, int code) {
  t_result = code;
  fuse_reply_err(req, code);
}

// The one place a Status becomes an errno.
void ReplyErr(fuse_req_t req, const Status& st) {
  int code = st.ok() ? 0 : st.code();
  if (code == EIO || code == ENOSPC || code == EROFS) LOG_WARN("request failed: {}", st.ToString());
  ReplyErrno(req, code);
}

InternalFiles* Internal(fuse_req_t req) { return S(req)->internal; }

// Requests an internal file has a fixed answer to (err; 0 = success): sent
// here, uncounted. Returns whether ino was internal (and answered).
bool AnswerInternal(fuse_req_t req, OpScope* scope, fuse_ino_t ino, int err) {
  if (!InternalFiles::IsInternal(ino)) return false;
  scope->Internal();
  ReplyErrno(req, err);
  return true;
}
bool IsInternal(fuse_ino_t ino) { return InternalFiles::IsInternal(ino); }
InternalFiles::Handle* IH(const fuse_file_info* fi) { return reinterpret_cast<InternalFiles::Handle*>(fi->fh); }

// A reply for an internal file: cached by the kernel for no time at all.
void ReplyInternalEntry(fuse_req_t req, Ino ino) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = ino;
  e.generation = 1;
  FillStat(ino, Internal(req)->AttrOf(ino), &e.attr);
  fuse_reply_entry(req, &e);
}

void ReplyEntry(fuse_req_t req, const Status& st, Ino ino, const Attr& a, Ino parent, const char* name) {
  if (!st.ok()) return ReplyErr(req, st);
  t_entry = ino;
  Coherence& co = S(req)->coherence;
  auto lock = co.ReplyLock();
  fuse_entry_param e = MakeEntry(req, ino, a, parent);
  // Count the kernel's reference before it can act on the reply (an rmdir
  // racing with our bookkeeping would otherwise delete a referenced inode).
  vfs::Vfs* vfs = V(req);  // req is freed by the reply
  vfs->AddRef(ino);
  co.Noted(parent, name, ino);
  if (fuse_reply_entry(req, &e) != 0) {
    (void)vfs->Forget(ino, 1);
    co.Forgot(ino, 1);
  }
}

void ReplyAttr(fuse_req_t req, const Status& st, Ino ino, const Attr& a) {
  if (!st.ok()) return ReplyErr(req, st);
  struct stat s;
  FillStat(ino, a, &s);
  Coherence& co = S(req)->coherence;
  auto lock = co.ReplyLock();
  fuse_reply_attr(req, &s, co.For(t_seq, ino).attr);
}

// Close-to-open: the kernel keeps a file's cached pages only when the file
// is unchanged since this client last saw it (same mtime and length).
void ReplyOpen(fuse_req_t req, fuse_file_info* fi, vfs::Handle* h) {
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->keep_cache = h->keep_cache ? 1 : 0;
  vfs::Vfs* vfs = V(req);  // req is freed by the reply
  if (fuse_reply_open(req, fi) == -ENOENT) (void)vfs->Release(Context::Root(), h);  // interrupted open
}

// ---------------------------------------------------------------- ops

void OpInit(void* userdata, fuse_conn_info* conn) {
  auto* s = static_cast<State*>(userdata);
  if (conn->capable & FUSE_CAP_EXPORT_SUPPORT) conn->want |= FUSE_CAP_EXPORT_SUPPORT;
  if (conn->capable & FUSE_CAP_POSIX_LOCKS) conn->want |= FUSE_CAP_POSIX_LOCKS;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS) conn->want |= FUSE_CAP_FLOCK_LOCKS;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  conn->want &= ~unsigned(FUSE_CAP_ATOMIC_O_TRUNC);
  // The kernel's auto_inval_data drops a file's cached pages whenever a
  // GETATTR shows a new mtime, and every write through the kernel marks the
  // mtime stale: a file read back after this client wrote it lost its pages
  // and was read again through FUSE (a GETATTR, a READ and two engine reads
  // per small file). Tessera invalidates pages itself: at open unless the
  // file is as this client last saw it (keep_cache, close-to-open), and when
  // another client's change is reported (coherent caches). A size change
  // still drops pages in the kernel either way.
  if (s->opts.coherent_timeout > 0) conn->want &= ~unsigned(FUSE_CAP_AUTO_INVAL_DATA);
  if (s->opts.writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  else conn->want &= ~unsigned(FUSE_CAP_WRITEBACK_CACHE);
  conn->max_write = 1u << 20;
  // Replies to ring requests go through the writev hook (uring_loop.h), which a spliced reply would bypass.
  if (s->opts.io_uring) conn->want &= ~unsigned(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  conn->max_readahead = 1u << 20;
  LOG_INFO("FUSE init: proto {}.{}, max_write {}, writeback_cache {}, auto_inval_data {}", conn->proto_major,
           conn->proto_minor, conn->max_write, (conn->want & FUSE_CAP_WRITEBACK_CACHE) ? "on" : "off",
           (conn->want & FUSE_CAP_AUTO_INVAL_DATA) ? "on" : "off");
}

void OpDestroy(void* userdata) { static_cast<State*>(userdata)->vfs->Stop(); }

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpScope scope(req, kLookup, "{},{:?}", parent, name);
  Ino ino = 0;
  Attr a;
  const Context ctx = Ctx(req);
  Status st = V(req)->Lookup(ctx, parent, name, &ino, &a);
  if (st.code() == ENOENT && parent == meta::kRootIno && Internal(req)->Visible(ctx)) {
    if (Ino internal = Internal(req)->Find(name)) {
      scope.Internal();
      return ReplyInternalEntry(req, internal);
    }
  }
  // A "no such name" for an internal name is not cached: the kernel's
  // negative entries are shared by every user, and root must still find
  // the internal file after another user's lookup. Nor without
  // default_permissions: the kernel would answer it to callers that may
  // not search the directory. While other clients' changes are reported,
  // the kernel may keep it as long as its entries (coherence.h).
  if (st.code() == ENOENT && !(parent == meta::kRootIno && Internal(req)->Find(name) != 0)) {
    State* s = S(req);
    auto lock = s->coherence.ReplyLock();
    double timeout = V(req)->config().negative_timeout;
    if (s->coherence.on() && s->opts.default_permissions && s->opts.coherent_timeout > 0 &&
        !s->opts.timeouts_given)
      timeout = std::max(timeout, s->coherence.NegativeTimeout(t_seq, parent, name));
    if (timeout > 0) {
      t_result = ENOENT;
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      e.entry_timeout = timeout;
      fuse_reply_entry(req, &e);
      return;
    }
  }
  ReplyEntry(req, st, ino, a, parent, name);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  OpScope scope(req, kForget, "{},{}", ino, nlookup);
  if (IsInternal(ino)) scope.Internal();
  else if (Status st = V(req)->Forget(ino, nlookup); !st.ok()) LOG_WARN("forget inode {}: {}", ino, st.ToString());
  if (!IsInternal(ino)) S(req)->coherence.Forgot(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  OpScope scope(req, kForget, "{} inodes", count);
  for (size_t i = 0; i < count; ++i) {
    if (IsInternal(forgets[i].ino)) continue;
    S(req)->coherence.Forgot(forgets[i].ino, forgets[i].nlookup);
    Status st = V(req)->Forget(forgets[i].ino, forgets[i].nlookup);
    if (!st.ok()) LOG_WARN("forget inode {}: {}", forgets[i].ino, st.ToString());
  }
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  OpScope scope(req, kGetattr, "{}", ino);
  if (IsInternal(ino)) {
    scope.Internal();
    struct stat s;
    FillStat(ino, Internal(req)->AttrOf(ino), &s);
    fuse_reply_attr(req, &s, 0);
    return;
  }
  Attr a;
  Status st = V(req)->GetAttr(Ctx(req), ino, &a);
  ReplyAttr(req, st, ino, a);
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* in, int to_set, fuse_file_info* fi) {
  OpScope scope(req, kSetattr, "{},{:#x}", ino, to_set);
  if (AnswerInternal(req, &scope, ino, EPERM)) return;
  uint32_t mask = 0;
  Attr a;
  if (to_set & FUSE_SET_ATTR_MODE) mask |= meta::kSetMode, a.mode = in->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) mask |= meta::kSetUid, a.uid = in->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) mask |= meta::kSetGid, a.gid = in->st_gid;
  if (to_set & FUSE_SET_ATTR_ATIME) mask |= meta::kSetAtime, a.atime = {in->st_atim.tv_sec, uint32_t(in->st_atim.tv_nsec)};
  if (to_set & FUSE_SET_ATTR_MTIME) mask |= meta::kSetMtime, a.mtime = {in->st_mtim.tv_sec, uint32_t(in->st_mtim.tv_nsec)};
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) mask |= meta::kSetAtime | meta::kSetAtimeNow;
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) mask |= meta::kSetMtime | meta::kSetMtimeNow;
  if (to_set & FUSE_SET_ATTR_CTIME) mask |= meta::kSetCtime, a.ctime = {in->st_ctim.tv_sec, uint32_t(in->st_ctim.tv_nsec)};
  bool has_size = to_set & FUSE_SET_ATTR_SIZE;
  Attr out;
  Status st = V(req)->SetAttr(Ctx(req), ino, fi ? H(fi) : nullptr, mask, a, has_size, uint64_t(in->st_size), &out);
  ReplyAttr(req, st, ino, out);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  OpScope scope(req, kReadlink, "{}", ino);
  std::string target;
  Status st = V(req)->ReadLink(Ctx(req), ino, &target);
  if (!st.ok()) return ReplyErr(req, st);
  fuse_reply_readlink(req, target.c_str());
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  OpScope scope(req, kMknod, "{},{:?},{:o},{}", parent, name, mode, rdev);
  Ino ino = 0;
  Attr a;
  Status st = V(req)->Mknod(Ctx(req), parent, name, mode, 0, uint32_t(rdev), &ino, &a);
  ReplyEntry(req, st, ino, a, parent, name);
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  OpScope scope(req, kMkdir, "{},{:?},{:o}", parent, name, mode);
  Ino ino = 0;
  Attr a;
  Status st = V(req)->Mkdir(Ctx(req), parent, name, mode, 0, &ino, &a);
  ReplyEntry(req, st, ino, a, parent, name);
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpScope scope(req, kUnlink, "{},{:?}", parent, name);
  ReplyErr(req, V(req)->Unlink(Ctx(req), parent, name));
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpScope scope(req, kRmdir, "{},{:?}", parent, name);
  ReplyErr(req, V(req)->Rmdir(Ctx(req), parent, name));
}

void OpSymlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  OpScope scope(req, kSymlink, "{},{:?},{:?}", parent, name, target);
  Ino ino = 0;
  Attr a;
  Status st = V(req)->Symlink(Ctx(req), parent, name, target, &ino, &a);
  ReplyEntry(req, st, ino, a, parent, name);
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
              unsigned int flags) {
  OpScope scope(req, kRename, "{},{:?},{},{:?},{}", parent, name, newparent, newname, flags);
  ReplyErr(req, V(req)->Rename(Ctx(req), parent, name, newparent, newname, flags));
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  OpScope scope(req, kLink, "{},{},{:?}", ino, newparent, newname);
  if (AnswerInternal(req, &scope, ino, EPERM)) return;
  Attr a;
  Status st = V(req)->Link(Ctx(req), ino, newparent, newname, &a);
  ReplyEntry(req, st, ino, a, newparent, newname);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpScope scope(req, kOpen, "{},{:#o}", ino, fi->flags);
  if (IsInternal(ino)) {
    scope.Internal();
    InternalFiles::Handle* h = nullptr;
    Status st = Internal(req)->Open(Ctx(req), ino, fi->flags, &h);
    if (!st.ok()) return ReplyErr(req, st);
    fi->fh = reinterpret_cast<uint64_t>(h);
    fi->direct_io = 1;  // the size is 0: reads must reach us
    fi->nonseekable = h->kind == InternalFiles::kAccessLog;
    InternalFiles* internal = Internal(req);  // req is freed by the reply
    if (fuse_reply_open(req, fi) != 0) internal->Release(h);
    return;
  }
  vfs::Handle* h = nullptr;
  Attr a;
  Status st = V(req)->Open(Ctx(req), ino, fi->flags, &h, &a);
  if (!st.ok()) return ReplyErr(req, st);
  // Close-to-open: the file changed since this client last saw it (maybe in
  // another client), so the kernel's cached attributes (its i_size above
  // all) are stale too; drop them (pages go with !keep_cache). Attributes
  // only (offset < 0): no page locks, safe inside the open.
  if (!h->keep_cache && S(req)->se) (void)fuse_lowlevel_notify_inval_inode(S(req)->se, ino, -1, 0);
  ReplyOpen(req, fi, h);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  OpScope scope(req, kCreate, "{},{:?},{:o},{:#o}", parent, name, mode, fi->flags);
  vfs::Handle* h = nullptr;
  Ino ino = 0;
  Attr a;
  Status st = V(req)->Create(Ctx(req), parent, name, mode, 0, fi->flags, &h, &ino, &a);
  if (!st.ok()) return ReplyErr(req, st);
  t_entry = ino;
  Coherence& co = S(req)->coherence;
  auto lock = co.ReplyLock();
  fuse_entry_param e = MakeEntry(req, ino, a, parent);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->keep_cache = 0;
  vfs::Vfs* vfs = V(req);  // req is freed by the reply
  vfs->AddRef(ino);  // before the kernel can act on the reply (see ReplyEntry)
  co.Noted(parent, name, ino);
  if (fuse_reply_create(req, &e, fi) != 0) {
    co.Forgot(ino, 1);
    (void)vfs->Forget(ino, 1);
    (void)vfs->Release(Context::Root(), h);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpScope scope(req, kRead, "{},{},{}", ino, size, off);
  if (IsInternal(ino)) {
    scope.Internal();
    std::string data = Internal(req)->Read(IH(fi), uint64_t(off), size, Interrupted(req));
    if (data.empty() && IH(fi)->kind == InternalFiles::kAccessLog) return ReplyErrno(req, EINTR);
    fuse_reply_buf(req, data.data(), data.size());
    return;
  }
  std::unique_ptr<char[]> buf(new char[size]);
  auto n = V(req)->Read(Ctx(req), H(fi), uint64_t(off), size, buf.get());
  if (!n.ok()) return ReplyErr(req, n.status());
  S(req)->read_bytes->Inc(*n);
  fuse_reply_buf(req, buf.get(), *n);
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off, fuse_file_info* fi) {
  OpScope scope(req, kWrite, "{},{},{}", ino, size, off);
  if (AnswerInternal(req, &scope, ino, EBADF)) return;
  auto n = V(req)->Write(Ctx(req), H(fi), uint64_t(off), data, size);
  if (!n.ok()) return ReplyErr(req, n.status());
  S(req)->written_bytes->Inc(*n);
  fuse_reply_write(req, *n);
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpScope scope(req, kFlush, "{}", ino);
  if (AnswerInternal(req, &scope, ino, 0)) return;
  ReplyErr(req, V(req)->Flush(Ctx(req), H(fi), fi->lock_owner));
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpScope scope(req, kRelease, "{}", ino);
  if (IsInternal(ino)) {
    scope.Internal();
    Internal(req)->Release(IH(fi));
    return ReplyErrno(req, 0);
  }
  Context ctx = Ctx(req);
  if (fi->flock_release)
    (void)V(req)->Flock(ctx, ino, fi->lock_owner, meta::kUnlock, false, nullptr);
  ReplyErr(req, V(req)->Release(ctx, H(fi)));
}

void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info* fi) {
  OpScope scope(req, kFsync, "{}", ino);
  if (AnswerInternal(req, &scope, ino, 0)) return;
  ReplyErr(req, V(req)->Fsync(Ctx(req), H(fi)));
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpScope scope(req, kOpendir, "{}", ino);
  if (AnswerInternal(req, &scope, ino, ENOTDIR)) return;
  vfs::Handle* h = nullptr;
  Status st = V(req)->OpenDir(Ctx(req), ino, fi->flags, &h);
  if (!st.ok()) return ReplyErr(req, st);
  fi->fh = reinterpret_cast<uint64_t>(h);
  vfs::Vfs* vfs = V(req);  // req is freed by the reply
  if (fuse_reply_open(req, fi) == -ENOENT) (void)vfs->ReleaseDir(h);
}

void DoReaddir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  const std::vector<meta::Entry>* entries = nullptr;
  uint64_t base = 0;
  // The attributes come from a window read by this request or an earlier
  // one: replies built from them take the sequence number that read began
  // with, so what was reported changed since gets the short timeout.
  uint64_t seq = t_seq;
  Status st = V(req)->ReadDir(Ctx(req), H(fi), uint64_t(off), plus, &entries, &base, &seq);
  if (!st.ok()) return ReplyErr(req, st);
  t_seq = seq;
  std::unique_ptr<char[]> buf(new char[size]);
  size_t used = 0;
  std::vector<Ino> counted;
  const Ino dir = H(fi)->ino;
  Coherence& co = S(req)->coherence;
  auto lock = co.ReplyLock();
  // One window at most: a short reply is fine, the kernel asks again.
  for (uint64_t i = std::max<uint64_t>(uint64_t(off), base); i - base < entries->size(); ++i) {
    const meta::Entry& e = (*entries)[i - base];
    size_t n;
    if (plus && e.gone) {  // listed without attributes: node id 0 makes the kernel look it up if needed
      fuse_entry_param p;
      std::memset(&p, 0, sizeof(p));
      p.attr.st_ino = e.ino;
      p.attr.st_mode = e.attr.mode & S_IFMT;
      n = fuse_add_direntry_plus(req, buf.get() + used, size - used, e.name.c_str(), &p, off_t(i + 1));
    } else if (plus) {
      fuse_entry_param p = MakeEntry(req, e.ino, e.attr, dir);
      n = fuse_add_direntry_plus(req, buf.get() + used, size - used, e.name.c_str(), &p, off_t(i + 1));
    } else {
      struct stat s;
      std::memset(&s, 0, sizeof(s));
      s.st_ino = e.ino;
      s.st_mode = e.attr.mode;
      n = fuse_add_direntry(req, buf.get() + used, size - used, e.name.c_str(), &s, off_t(i + 1));
    }
    if (n > size - used) break;
    used += n;
    if (plus && i >= 2 && !e.gone) {  // the kernel counts all but "." and "..", and those without a node id
      counted.push_back(e.ino);
      co.Noted(dir, e.name, e.ino);
    }
  }
  vfs::Vfs* vfs = V(req);  // req is freed by the reply
  for (Ino ino : counted) vfs->AddRef(ino);  // before the kernel can act on the reply
  if (fuse_reply_buf(req, buf.get(), used) != 0) {
    for (Ino ino : counted) {
      (void)vfs->Forget(ino, 1);
      co.Forgot(ino, 1);
    }
  }
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpScope scope(req, kReaddir, "{},{},{}", ino, size, off);
  DoReaddir(req, size, off, fi, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpScope scope(req, kReaddirplus, "{},{},{}", ino, size, off);
  DoReaddir(req, size, off, fi, true);
}

void OpReleasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpScope scope(req, kReleasedir, "{}", ino);
  ReplyErr(req, V(req)->ReleaseDir(H(fi)));
}
void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info* fi) {
  OpScope scope(req, kFsyncdir, "{}", ino);
  ReplyErr(req, V(req)->FsyncDir(H(fi)));  // commits delayed metadata changes
}

void OpStatfs(fuse_req_t req, fuse_ino_t ino) {
  OpScope scope(req, kStatfs, "{}", ino);
  if (IsInternal(ino)) ino = meta::kRootIno;
  meta::StatFs fs;
  Status st = V(req)->StatFS(Ctx(req), ino, &fs);
  if (!st.ok()) return ReplyErr(req, st);
  struct statvfs s;
  std::memset(&s, 0, sizeof(s));
  s.f_bsize = 4096;
  s.f_frsize = 4096;
  s.f_blocks = fs.total_space / 4096;
  s.f_bfree = fs.avail_space / 4096;
  s.f_bavail = s.f_bfree;
  s.f_files = fs.used_inodes + fs.avail_inodes;
  s.f_ffree = fs.avail_inodes;
  s.f_favail = fs.avail_inodes;
  s.f_namemax = meta::kMaxName;
  fuse_reply_statfs(req, &s);
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  OpScope scope(req, kSetxattr, "{},{:?},{},{}", ino, name, size, flags);
  if (AnswerInternal(req, &scope, ino, EPERM)) return;
  ReplyErr(req, V(req)->SetXattr(Ctx(req), ino, name, std::string(value, size), flags));
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  OpScope scope(req, kGetxattr, "{},{:?},{}", ino, name, size);
  if (AnswerInternal(req, &scope, ino, ENODATA)) return;
  std::string value;
  Status st = V(req)->GetXattr(Ctx(req), ino, name, &value);
  if (!st.ok()) return ReplyErr(req, st);
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (value.size() > size) return ReplyErrno(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  OpScope scope(req, kListxattr, "{},{}", ino, size);
  if (IsInternal(ino)) {
    scope.Internal();
    return size == 0 ? (void)fuse_reply_xattr(req, 0) : (void)fuse_reply_buf(req, nullptr, 0);
  }
  std::vector<std::string> names;
  Status st = V(req)->ListXattr(Ctx(req), ino, &names);
  if (!st.ok()) return ReplyErr(req, st);
  std::string buf;
  for (const auto& n : names) buf.append(n).push_back('\0');
  if (size == 0) return (void)fuse_reply_xattr(req, buf.size());
  if (buf.size() > size) return ReplyErrno(req, ERANGE);
  fuse_reply_buf(req, buf.data(), buf.size());
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  OpScope scope(req, kRemovexattr, "{},{:?}", ino, name);
  if (AnswerInternal(req, &scope, ino, ENODATA)) return;
  ReplyErr(req, V(req)->RemoveXattr(Ctx(req), ino, name));
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  OpScope scope(req, kAccess, "{},{}", ino, mask);
  if (IsInternal(ino)) {
    scope.Internal();
    const bool ok = Internal(req)->Visible(Ctx(req)) && !(mask & (W_OK | X_OK));
    return ReplyErrno(req, ok ? 0 : EACCES);
  }
  ReplyErr(req, V(req)->Access(Ctx(req), ino, mask));
}

// A lock wait ended by the session ending, not by a signal, is ENOTCONN, as
// the kernel answers once the client is gone: the kernel turns a lock's
// EINTR into a restart, which with no signal pending reaches the caller as
// errno 512.
Status LockWaitEnded(fuse_req_t req, const Status& st) {
  if (st.code() == EINTR && SessionEnding(S(req))) return Status::Err(ENOTCONN, "the mount is ending");
  return st;
}

meta::PosixLock ToLock(const struct flock* l) {
  meta::PosixLock lk;
  lk.type = l->l_type == F_RDLCK ? meta::kReadLock : l->l_type == F_WRLCK ? meta::kWriteLock : meta::kUnlock;
  lk.start = uint64_t(l->l_start);
  lk.end = l->l_len == 0 ? UINT64_MAX : uint64_t(l->l_start + l->l_len - 1);
  lk.pid = uint32_t(l->l_pid);
  return lk;
}

void OpGetlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock) {
  OpScope scope(req, kGetlk, "{},{}", ino, lock->l_type);
  if (AnswerInternal(req, &scope, ino, ENOLCK)) return;
  meta::PosixLock lk = ToLock(lock);
  Status st = V(req)->GetLk(Ctx(req), ino, fi->lock_owner, &lk);
  if (!st.ok()) return ReplyErr(req, st);
  if (lk.type == meta::kUnlock) {
    lock->l_type = F_UNLCK;
  } else {
    lock->l_type = lk.type == meta::kReadLock ? F_RDLCK : F_WRLCK;
    lock->l_start = off_t(lk.start);
    lock->l_len = lk.end == UINT64_MAX ? 0 : off_t(lk.end - lk.start + 1);
    lock->l_pid = pid_t(lk.pid);
  }
  fuse_reply_lock(req, lock);
}

void OpSetlk(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, struct flock* lock, int sleep) {
  OpScope scope(req, kSetlk, "{},{},{},{},{}", ino, lock->l_type, lock->l_start, lock->l_len, sleep);
  if (AnswerInternal(req, &scope, ino, ENOLCK)) return;
  const bool block = sleep != 0;
  LongWait wait(block && lock->l_type != F_UNLCK, ino);  // until the holder lets go
  Status st = V(req)->SetLk(Ctx(req), H(fi), fi->lock_owner, ToLock(lock), block, Interrupted(req));
  ReplyErr(req, LockWaitEnded(req, st));
}

void OpFlock(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi, int op) {
  OpScope scope(req, kFlock, "{},{}", ino, op);
  if (AnswerInternal(req, &scope, ino, ENOLCK)) return;
  meta::LockType type = (op & LOCK_EX) ? meta::kWriteLock : (op & LOCK_SH) ? meta::kReadLock : meta::kUnlock;
  const bool block = !(op & LOCK_NB);
  LongWait wait(block && type != meta::kUnlock, ino);  // until the holder lets go
  Status st = V(req)->Flock(Ctx(req), ino, fi->lock_owner, type, block, Interrupted(req));
  ReplyErr(req, LockWaitEnded(req, st));
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fuse_file_info* fi) {
  OpScope scope(req, kFallocate, "{},{},{},{}", ino, mode, offset, length);
  if (AnswerInternal(req, &scope, ino, EBADF)) return;
  if (offset < 0 || length <= 0) return ReplyErrno(req, EINVAL);
  ReplyErr(req, V(req)->Fallocate(Ctx(req), H(fi), mode, uint64_t(offset), uint64_t(length)));
}

void OpCopyFileRange(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info* fi_in, fuse_ino_t ino_out,
                     off_t off_out, fuse_file_info* fi_out, size_t len, int flags) {
  OpScope scope(req, kCopyFileRange, "{},{},{},{},{}", ino_in, off_in, ino_out, off_out, len);
  if (IsInternal(ino_in) || IsInternal(ino_out)) {
    scope.Internal();
    return ReplyErrno(req, EXDEV);
  }
  if (flags != 0) return ReplyErrno(req, EINVAL);
  auto n = V(req)->CopyFileRange(Ctx(req), H(fi_in), uint64_t(off_in), H(fi_out), uint64_t(off_out), len);
  if (!n.ok()) return ReplyErr(req, n.status());
  fuse_reply_write(req, *n);
}

void OpLseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fuse_file_info* fi) {
  OpScope scope(req, kLseek, "{},{},{}", ino, off, whence);
  if (AnswerInternal(req, &scope, ino, ESPIPE)) return;
  if (whence != SEEK_DATA && whence != SEEK_HOLE) return ReplyErrno(req, EINVAL);
  if (off < 0) return ReplyErrno(req, ENXIO);
  auto r = V(req)->Lseek(Ctx(req), H(fi), uint64_t(off), whence);
  if (!r.ok()) return ReplyErr(req, r.status());
  fuse_reply_lseek(req, off_t(*r));
}

fuse_lowlevel_ops MakeOps(bool xattrs) {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.destroy = OpDestroy;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.open = OpOpen;
  ops.create = OpCreate;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  if (xattrs) {  // else libfuse answers ENOSYS
    ops.setxattr = OpSetxattr;
    ops.getxattr = OpGetxattr;
    ops.listxattr = OpListxattr;
    ops.removexattr = OpRemovexattr;
  }
  ops.access = OpAccess;
  ops.getlk = OpGetlk;
  ops.setlk = OpSetlk;
  ops.flock = OpFlock;
  ops.fallocate = OpFallocate;
  ops.copy_file_range = OpCopyFileRange;
  ops.lseek = OpLseek;
  return ops;
}

}  // namespace

// Watches for other clients' changes when asked to, and picks the kernel
// cache timeouts accordingly (a failed watch keeps the configured ones).
void StartCoherence(State* state) {
  const vfs::Config& cfg = state->vfs->config();
  const Coherence::Timeouts configured{cfg.attr_timeout, cfg.entry_timeout, cfg.dir_entry_timeout};
  state->coherence.Configure(false, configured, configured);
  if (state->opts.coherent_timeout <= 0) return;
  Status st = state->vfs->meta()->WatchChanges([state](const std::vector<meta::Change>& changes, bool lost) {
    // First: a request that begins later must not find the old state.
    state->vfs->OthersChanged(changes, lost, state->coherence.BriefAfterLossMs());
    state->coherence.Apply(state->se, changes, lost);
  });
  if (!st.ok()) {
    LOG_WARN("kernel caches stay short ({}s attributes, {}s entries): {}", cfg.attr_timeout, cfg.entry_timeout,
             st.ToString());
    return;
  }
  const double t = state->opts.coherent_timeout;
  const Coherence::Timeouts lasting = state->opts.timeouts_given ? configured : Coherence::Timeouts{t, t, t};
  const Coherence::Timeouts brief{std::min(cfg.attr_timeout, 1.0), std::min(cfg.entry_timeout, 1.0),
                                  std::min(cfg.dir_entry_timeout, 1.0)};
  state->coherence.Configure(true, lasting, brief, state->vfs->meta()->WatchGraceMs());
  state->vfs->WatchStarted(state->vfs->meta()->WatchGraceMs());
  LOG_INFO("coherent kernel caches: attributes {}s, entries {}s, directory entries {}s while other clients' changes "
           "are reported",
           lasting.attr, lasting.entry, lasting.dir_entry);
}

Status Serve(vfs::Vfs* vfs, const MountOptions& opts, const std::function<void(const Status&)>& on_mounted) {
  const char* fault_spec = std::getenv("TESSERA_FUSE_FAULTS");
  Result<FuseFaults> faults = ParseFuseFaults(fault_spec ? fault_spec : "");
  if (!faults.ok()) {
    on_mounted(faults.status());
    return faults.status();
  }
  if (faults->any()) LOG_WARN("FUSE: injecting faults ({})", fault_spec);
  WorkerLoopOptions loop;
  loop.drop_interrupts = faults->drop_interrupts;
  State state{vfs, opts};
  InternalFiles internal(opts.internal_prefix, opts.internal_files_public,
                         [labels = opts.metrics_labels] { return metrics::TextFormat(labels); }, opts.config_json);
  state.internal = &internal;
  metrics::Registration process = metrics::RegisterProcessMetrics();
  for (size_t i = 0; i < kFuseOpCount; ++i) {
    const metrics::Labels labels = {{"op", kFuseOpNames[i]}};
    state.ops[i].duration =
        metrics::NewHistogram("tessera_fuse_op_duration_seconds", "FUSE requests: latency (count: requests)", labels);
    state.ops[i].errors =
        metrics::NewCounter("tessera_fuse_op_errors_total", "FUSE requests answered with an error other than ENOENT", labels);
  }
  state.read_bytes = metrics::NewCounter("tessera_fuse_read_bytes_total", "Bytes read through the mount");
  state.written_bytes = metrics::NewCounter("tessera_fuse_written_bytes_total", "Bytes written through the mount");
  std::vector<std::string> argv_s = {"tessera"};
  std::string fs_name;  // commas escaped: libfuse splits the option string at the others
  for (char c : opts.fs_name) {
    if (c == ',' || c == '\\') fs_name += '\\';
    fs_name += c;
  }
  std::string o = "fsname=" + fs_name + ",subtype=tessera";
  if (opts.allow_other) o += ",allow_other";
  if (opts.default_permissions) o += ",default_permissions";
  for (const auto& e : opts.extra) o += "," + e;
  argv_s.push_back("-o");
  argv_s.push_back(o);
  if (opts.debug) argv_s.push_back("-d");
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(int(argv.size()), argv.data());

  fuse_lowlevel_ops ops = MakeOps(opts.xattrs);
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &state);
  state.se = se;
  // Pending writes discarded after a failed commit: the kernel's pages and
  // size of the file show them; drop both (offset 0, length 0: everything).
  if (se) vfs->SetCacheInvalidator([se](Ino ino) { (void)fuse_lowlevel_notify_inval_inode(se, ino, 0, 0); });
  if (se)
    vfs->SetEntryInvalidator([se](Ino parent, const std::string& name, Ino child) {
      if (child == 0) {  // a new entry: any cached "no such name" goes, and the parent's attributes
        (void)fuse_lowlevel_notify_inval_entry(se, parent, name.data(), name.size());
        (void)fuse_lowlevel_notify_inval_inode(se, parent, -1, 0);
      } else {
        (void)fuse_lowlevel_notify_delete(se, parent, child, name.data(), name.size());
      }
    });
  if (se) StartCoherence(&state);
  if (!se) {
    Status st = Status::Err(EINVAL, "cannot create FUSE session (bad mount options?)");
    on_mounted(st);
    return st;
  }
  // Undoes the setup as far as it got (mounted, signal handlers installed).
  auto teardown = [&](bool handlers, bool mounted) {
    vfs->meta()->StopWatching();  // before the session it notifies goes
    if (mounted) fuse_session_unmount(se);
    if (handlers) fuse_remove_signal_handlers(se);
    vfs->SetCacheInvalidator(nullptr);
    vfs->SetEntryInvalidator(nullptr);
    fuse_session_destroy(se);
  };
  auto failed = [&](const Status& st, bool handlers, bool mounted) {
    teardown(handlers, mounted);
    on_mounted(st);
    return st;
  };
  if (fuse_set_signal_handlers(se) != 0) return failed(Status::Err(EIO, "cannot install signal handlers"), false, false);
  if (fuse_session_mount(se, opts.mount_point.c_str()) != 0)
    return failed(Status::Err(EIO, "cannot mount at " + opts.mount_point + " (is /dev/fuse available?)"), true, false);
  UringHandle uring;
  if (opts.io_uring) {
    UringOptions uring_opts;
    uring_opts.slow_growth = faults->slow_ring_growth;
    auto q = StartUring(se, uring_opts);
    if (!q.ok()) return failed(q.status(), true, true);
    uring = std::move(q).value();
  }
  on_mounted(Status::OK());
  loop.max_workers = unsigned(std::max(opts.max_threads, 1));
  loop.readers = std::min(std::max(2 * std::thread::hardware_concurrency(), 4u), loop.max_workers);
  int rc = RunWorkerLoop(se, loop);
  state.ending.store(true);
  uring.reset();  // its threads stop before the session goes
  teardown(true, true);
  return rc == 0 ? Status::OK() : Status::Err(EIO, "FUSE session ended with an error");
}

}  // namespace tessera::fuse
