#include "meta/redis_meta.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "common/log.h"
#include "meta/encoding.h"

namespace tessera::meta {

using chunk::Slice;

namespace {

// The function library (src/meta/redis_functions*.lua), embedded at build time.
constexpr char kLibrary[] =
#include "redis_functions.inc"
    ;

// POSIX lock offsets travel as Lua numbers (doubles): everything from 2^53
// on means "to end of file" (files are at most kMaxFileSize = 2^50 bytes).
constexpr uint64_t kLockEof = 1ull << 53;

std::string Key(char prefix, uint64_t n) { return prefix + std::to_string(n); }
std::string ChunkKey(Ino ino, uint32_t idx) { return "c" + std::to_string(ino) + "_" + std::to_string(idx); }

// Arguments of one request; numbers are formatted into owned storage.
class Args {
 public:
  Args& Str(std::string_view s) {
    views_.push_back(s);
    return *this;
  }
  Args& Num(uint64_t v) { return Own(std::to_string(v)); }
  Args& Own(std::string s) {
    store_.push_back(std::move(s));
    views_.push_back(store_.back());
    return *this;
  }
  Args& Ctx(const Context& c) {
    std::string gids;
    for (uint32_t g : c.gids) gids += std::to_string(g) + ",";
    return Num(c.uid).Num(c.gid).Own(std::move(gids));
  }
  Args& Time(const Timespec& t) { return Own(std::to_string(t.sec)).Num(t.nsec); }
  const std::vector<std::string_view>& views() const { return views_; }

 private:
  std::deque<std::string> store_;  // stable addresses
  std::vector<std::string_view> views_;
};

std::string Records(const std::vector<Slice>& slices) {
  std::string out;
  for (const Slice& s : slices) chunk::AppendSlice(&out, s);
  return out;
}

uint64_t ParseU64(std::string_view s) {
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') break;
    v = v * 10 + uint64_t(c - '0');
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------- plumbing

RedisMeta::RedisMeta(std::unique_ptr<redis::Client> client)
    : client_(std::move(client)),
      inode_ids_(kInodeBatch, [this](uint64_t batch) { return Incr(keys::kNextInode, int64_t(batch)); }),
      slice_ids_(kSliceBatch, [this](uint64_t batch) { return Incr(keys::kNextSlice, int64_t(batch)); }) {}

RedisMeta::~RedisMeta() {
  StopWatching();
  // A client that ends without crashing loses no statistics (the VFS has
  // flushed already; this covers tools and tests).
  Status st = FlushDirStats();
  if (!st.ok()) LOG_WARN("writing directory statistics at exit: {} (tessera fsck --repair recounts them)", st.ToString());
}

Result<std::unique_ptr<Meta>> RedisMeta::Open(const std::string& url) {
  ASSIGN_OR_RETURN(auto opts, redis::Options::Parse(url));
  ASSIGN_OR_RETURN(auto client, redis::Client::Connect(opts));
  std::unique_ptr<RedisMeta> meta(new RedisMeta(std::move(client)));
  RETURN_IF_ERROR(meta->LoadFunctions());
  return std::unique_ptr<Meta>(std::move(meta));
}

Status RedisMeta::LoadFunctions() {
  auto r = Cmd(kOpOther, {"FUNCTION", "LOAD", "REPLACE", kLibrary});
  if (!r.ok())
    return Status::Err(EIO, "redis " + client_->options().display +
                                ": cannot load Tessera's functions (Redis 7.0 or later is needed): " + r.status().message());
  return Status::OK();
}

const char* RedisMeta::OpName(Op op) {
  static constexpr const char* kNames[kOpCount] = {
      "lookup", "getattr", "setattr", "truncate", "fallocate", "mknod", "unlink", "rmdir", "rename", "link",
      "readlink", "readdir", "open", "release", "read", "write", "compact", "xattr", "lock", "session", "cleanup",
      "other"};
  return kNames[op];
}

std::vector<std::pair<std::string, uint64_t>> RedisMeta::RequestStats() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < kOpCount; ++i) {
    uint64_t n = requests_[i].load(std::memory_order_relaxed);
    if (n) out.emplace_back(OpName(Op(i)), n);
  }
  return out;
}

Result<redis::Reply> RedisMeta::Cmd(Op op, const std::vector<std::string_view>& argv) {
  requests_[op].fetch_add(1, std::memory_order_relaxed);
  return client_->Command(argv);
}

Result<redis::Reply> RedisMeta::Fcall(Op op, const char* fn, const std::vector<std::string_view>& args) {
  // Functions registered with no-writes (redis_functions_admin.lua); every other
  // one changes state and is sent with an operation id (redis_client.h).
  static const std::set<std::string_view> kReadOnly = {"lookup", "readdir", "getxattr", "listxattr", "getlk", "dump_inodes",
                                                             "dir_stats", "quota_list"};
  const std::string name = std::string("tessera_") + fn;
  requests_[op].fetch_add(1, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(redis::Reply r,
                   client_->Call(name, args, kReadOnly.count(fn) == 0, {"FUNCTION", "LOAD", "REPLACE", kLibrary}));
  if (!r.is_array() || r.size() == 0) return Status::Err(EIO, "redis: malformed reply from " + name);
  if (int64_t err = r.at(0).integer(); err != 0) return Status::Err(int(err));
  if (kReadOnly.count(fn) != 0) return r;
  // What a state-changing call changed in directory statistics, always its
  // last element (redis_functions.lua, stat_add): gathered here, written by
  // FlushDirStats; the caller reads the reply without it.
  constexpr std::string_view kTag = "TSTAT";
  const std::string_view last = r.size() > 1 ? r.at(r.size() - 1).str() : std::string_view();
  if (!last.starts_with(kTag) || (last.size() - kTag.size()) % 32 != 0)
    return Status::Err(EIO, "redis: reply from " + name + " lacks its statistics (a library of another version?)");
  StatDeltas deltas;
  for (size_t at = kTag.size(); at < last.size(); at += 32) {
    auto i64 = [&](size_t k) { return int64_t(kv::ReadU64BE(last.substr(at + 8 * k, 8))); };
    deltas.emplace_back(Ino(i64(0)), DirStat{i64(1), i64(2), i64(3)});
  }
  dirstats_.Merge(deltas);
  return r.WithoutLast();
}

Status RedisMeta::FlushDirStats() {
  // One flush at a time: a second caller (Check, unmount) returns once the
  // changes in flight are in the engine too.
  std::lock_guard<std::mutex> flushing(flush_mu_);
  auto pending = dirstats_.Take();
  if (pending.empty() && doubtful_.empty()) return Status::OK();
  const uint64_t seq = ++flush_seq_;
  Args a;
  a.Num(client_id_).Num(seq).Num(doubtful_.empty() ? 0 : doubtful_seq_).Num(doubtful_.size());
  auto put = [&](Ino dir, const DirStat& d) {
    a.Num(dir).Own(std::to_string(d.length)).Own(std::to_string(d.space)).Own(std::to_string(d.inodes));
  };
  for (const auto& [dir, d] : doubtful_) put(dir, d);
  for (const auto& [dir, d] : pending) put(dir, d);
  Status st = Fcall(kOpOther, "flush_stats", a.views()).status();
  SettleFlush(st, pending, seq, &dirstats_, &doubtful_, &doubtful_seq_);
  return st;
}

Result<int64_t> RedisMeta::Incr(const char* counter, int64_t delta) {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"INCRBY", counter, std::to_string(delta)}));
  return r.integer();
}

Result<uint64_t> RedisMeta::NewSliceId() { return slice_ids_.Next(); }

void RedisMeta::AddRef(Ino ino) { refs_.Add(ino); }

void RedisMeta::ReportReply(const Context& ctx, const redis::Reply& r, size_t at, std::initializer_list<Ino> parents,
                            size_t other_at, Ino other) {
  if (ctx.effects == nullptr || r.size() < at + parents.size() || (other_at != 0 && r.size() <= other_at))
    return;  // a library loaded by an older client reports nothing: unknown
  std::vector<std::pair<Ino, Attr>> out;
  size_t i = at;
  for (Ino p : parents) {
    const std::string_view raw = r.at(i++).str();
    if (raw.empty() || (!out.empty() && out.back().first == p)) continue;  // the same parent twice
    Attr a;
    if (!DecodeAttr(raw, &a).ok()) return;
    out.emplace_back(p, a);
  }
  std::vector<Ino> others;
  if (other != 0) others.push_back(other);
  if (other_at != 0 && r.at(other_at).integer() != 0) others.push_back(Ino(r.at(other_at).integer()));
  ReportEffects(ctx, std::move(out), std::move(others));
}

void RedisMeta::ReportRemovedReply(const Context& ctx, const redis::Reply& r, size_t at) {
  if (ctx.effects == nullptr || !ctx.effects->reported || r.size() < at + 2) return;
  Attr before;
  if (DecodeAttr(r.at(at + 1).str(), &before).ok()) ReportRemoved(ctx, Ino(r.at(at).integer()), before);
}

Status RedisMeta::Released(int64_t ino) {
  if (ino == 0 || refs_.Sustain(Ino(ino))) return Status::OK();
  return ReleaseNow(Ino(ino));
}

Status RedisMeta::ReleaseNow(Ino ino) {
  return Fcall(kOpRelease, "release", Args().Num(sid_.load()).Num(ino).views()).status();
}

// ---------------------------------------------------------------- volume

Status RedisMeta::Init(const Format& format, bool force) {
  ASSIGN_OR_RETURN(auto existing, Cmd(kOpOther, {"GET", keys::kSettingKey}));
  Format f = format;
  if (!existing.nil()) {
    if (!force) return Status::Err(EEXIST, "a volume is already formatted here (use --force to overwrite its settings)");
    auto old = Format::FromJson(std::string(existing.str()));
    if (old.ok()) f.uuid = old->uuid;  // reformatting keeps the volume's identity
  }
  RETURN_IF_ERROR(Cmd(kOpOther, {"SET", keys::kSettingKey, f.ToJson()}).status());
  Attr root;
  root.mode = S_IFDIR | 0777;
  root.nlink = 2;
  root.parent = kRootIno;
  root.atime = root.mtime = root.ctime = Now();
  ASSIGN_OR_RETURN(auto created, Cmd(kOpOther, {"SET", Key('i', kRootIno), EncodeAttr(root), "NX"}));
  if (!created.nil()) {  // a new tree (an existing one is kept)
    RETURN_IF_ERROR(Cmd(kOpOther, {"SET", keys::kNextInode, std::to_string(kRootIno)}).status());
    RETURN_IF_ERROR(Cmd(kOpOther, {"SET", keys::kTotalInodes, "1"}).status());
  }
  ASSIGN_OR_RETURN(Format loaded, Load());
  return loaded.trash_days > 0 ? EnsureTrash() : Status::OK();
}

Result<Format> RedisMeta::Load() {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"GET", keys::kSettingKey}));
  if (r.nil()) return Status::Err(ENOENT, "no volume formatted at this META-URL");
  ASSIGN_OR_RETURN(format_, Format::FromJson(std::string(r.str())));
  limits_.Set(format_);
  return format_;
}

Status RedisMeta::StatFS(const Context&, StatFs* out) {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"MGET", keys::kUsedSpace, keys::kTotalInodes}));
  FillStatFs(limits_.Capacity(), limits_.Inodes(), r.at(0).integer(), r.at(1).integer(), out);
  return Status::OK();
}

// ---------------------------------------------------------------- sessions

Status RedisMeta::NewSession(const SessionInfo& in) {
  SessionInfo info = CompleteSession(in);
  // A renewal after others cleaned the old session: what this client did in
  // it since, before it noticed (removed a file it had open, took a lock),
  // is cleaned now, or never (no session list names that sid any more).
  if (const uint64_t old = sid_; old != 0) {
    ASSIGN_OR_RETURN(auto live, Cmd(kOpSession, {"HEXISTS", "sessions", std::to_string(old)}));
    if (live.integer() == 0) RETURN_IF_ERROR(Fcall(kOpSession, "clean_session", Args().Num(old).views()).status());
  }
  ASSIGN_OR_RETURN(int64_t sid, Incr(keys::kNextSession, 1));
  info.sid = uint64_t(sid);
  info.heartbeat = Now().sec;
  std::string id = std::to_string(sid);
  RETURN_IF_ERROR(Cmd(kOpSession, {"HSET", "sessions", id, EncodeSession(info)}).status());
  RETURN_IF_ERROR(Cmd(kOpSession, {"ZADD", "heartbeat", std::to_string(info.heartbeat), id}).status());
  sid_ = uint64_t(sid);
  {
    std::lock_guard g(session_mu_);
    session_ = info;
  }
  if (watching_) {
    // A session renewed after others cleaned the old one: they dropped this
    // client from the watchers too, and sent it nothing since.
    RETURN_IF_ERROR(Cmd(kOpSession, {"HSET", "watchers", client_->origin(), id}).status());
    watch_fn_({}, true);
  }
  return Status::OK();
}

Status RedisMeta::WatchChanges(ChangeFn fn) {
  std::lock_guard lock(watch_mu_);
  if (subscriber_) return Status::Err(EBUSY, "already watching for changes");
  watch_fn_ = std::move(fn);
  const std::string channel = "tessera.changes." + format_.uuid;
  std::vector<std::string> one(1);
  ASSIGN_OR_RETURN(subscriber_, redis::Subscriber::Start(
                                    client_->options(), channel,
                                    [this, one](std::string_view m) mutable {
                                      one[0].assign(m);
                                      DeliverChanges(watch_fn_, one, client_->origin(), false);
                                    },
                                    [this] { watch_fn_({}, true); }));
  // Subscribed first: nothing published after the registration is missed.
  Status st = Cmd(kOpSession, {"SET", "watchchan", channel}).status();
  if (st.ok()) st = Cmd(kOpSession, {"HSET", "watchers", client_->origin(), std::to_string(sid_.load())}).status();
  if (!st.ok()) {
    subscriber_.reset();
    return st;
  }
  watching_ = true;
  return Status::OK();
}

void RedisMeta::StopWatching() {
  std::lock_guard lock(watch_mu_);
  if (!subscriber_) return;
  subscriber_.reset();
  watching_ = false;
  // Others then publish for nothing until this session is cleaned.
  Status st = Cmd(kOpSession, {"HDEL", "watchers", client_->origin()}).status();
  if (!st.ok()) LOG_WARN("leaving the watchers of changes: {}", st.ToString());
}

Status RedisMeta::Heartbeat(const SessionLoad& load) {
  const uint64_t sid = sid_;
  if (sid == 0) return Status::OK();
  std::lock_guard g(session_mu_);
  std::string record = HeartbeatRecord(session_, sid, load);
  Args args;
  args.Num(sid).Own(std::to_string(Now().sec));
  if (!record.empty()) args.Own(record);  // stored only while the session lives
  RETURN_IF_ERROR(Fcall(kOpSession, "heartbeat", args.views()).status());
  if (!record.empty()) session_.load = load;
  // `tessera config` may have changed the limits.
  ASSIGN_OR_RETURN(auto r, Cmd(kOpSession, {"GET", keys::kSettingKey}));
  if (!r.nil())
    if (auto f = Format::FromJson(std::string(r.str())); f.ok()) limits_.Set(*f);
  return Status::OK();
}

Status RedisMeta::CloseSession() {
  if (sid_ == 0) return Status::OK();
  refs_.Clear();
  RETURN_IF_ERROR(Fcall(kOpSession, "clean_session", Args().Num(sid_.load()).views()).status());
  sid_ = 0;
  return Status::OK();
}

Result<std::vector<SessionInfo>> RedisMeta::ListSessions() {
  ASSIGN_OR_RETURN(auto all, Cmd(kOpSession, {"HGETALL", "sessions"}));
  ASSIGN_OR_RETURN(auto beats, Cmd(kOpSession, {"ZRANGE", "heartbeat", "0", "-1", "WITHSCORES"}));
  std::map<uint64_t, int64_t> heartbeat;
  for (size_t i = 0; i + 1 < beats.size(); i += 2)
    heartbeat[ParseU64(beats.at(i).str())] = int64_t(std::stod(std::string(beats.at(i + 1).str())));
  std::vector<SessionInfo> out;
  for (size_t i = 0; i + 1 < all.size(); i += 2) {
    SessionInfo s;
    if (!DecodeSession(all.at(i + 1).str(), &s).ok()) continue;
    s.sid = ParseU64(all.at(i).str());
    if (auto it = heartbeat.find(s.sid); it != heartbeat.end()) s.heartbeat = it->second;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const SessionInfo& a, const SessionInfo& b) { return a.sid < b.sid; });
  return out;
}

Result<int> RedisMeta::CleanStaleSessions(int64_t timeout_sec) {
  ASSIGN_OR_RETURN(auto sessions, ListSessions());
  int64_t now = Now().sec;
  int cleaned = 0;
  for (const auto& s : sessions) {
    if (s.sid == sid_ || !SessionDead(s, now, timeout_sec)) continue;
    RETURN_IF_ERROR(Fcall(kOpSession, "clean_session", Args().Num(s.sid).views()).status());
    ++cleaned;
  }
  return cleaned;
}

Result<int> RedisMeta::CleanupDeleted(const SliceDeleter& deleter, int max_items, size_t parallel) {
  // 1. Chunks of deleted inodes into the slice queue, 256 chunks per call.
  for (int round = 0; round < 1000; ++round) {
    ASSIGN_OR_RETURN(auto r, Fcall(kOpCleanup, "reclaim", Args().Num(256).Num(uint64_t(max_items)).views()));
    if (r.at(2).integer() == 0) break;  // nothing left
  }
  // 2. Objects of queued slices, then forget them.
  // Those due (score: the time not before which; 0 = at once).
  ASSIGN_OR_RETURN(auto queued, Cmd(kOpCleanup, {"ZRANGEBYSCORE", "delslices", "-inf", std::to_string(Now().sec),
                                                 "LIMIT", "0", std::to_string(max_items)}));
  std::vector<std::pair<uint64_t, uint32_t>> slices;
  std::vector<std::string_view> members;
  for (size_t i = 0; i < queued.size(); ++i) {
    std::string_view member = queued.at(i).str();
    auto sep = member.find('_');
    if (sep == std::string_view::npos) continue;
    slices.emplace_back(ParseU64(member.substr(0, sep)), uint32_t(ParseU64(member.substr(sep + 1))));
    members.push_back(member);
  }
  Status failed;
  const std::vector<size_t> deleted = DeleteSlices(deleter, slices, parallel, &failed);
  if (!deleted.empty()) {
    Args done;
    done.Str("ZREM").Str("delslices");
    for (size_t i : deleted) done.Str(members[i]);
    RETURN_IF_ERROR(Cmd(kOpCleanup, done.views()).status());
  }
  if (!failed.ok()) return failed;
  return int(deleted.size());
}

// ---------------------------------------------------------------- namespace

Status RedisMeta::Lookup(const Context& ctx, Ino parent, const std::string& name, Ino* ino, Attr* attr) {
  if (name.size() > kMaxName) return Status::Err(ENAMETOOLONG);
  ASSIGN_OR_RETURN(auto r, Fcall(kOpLookup, "lookup", Args().Ctx(ctx).Num(parent).Str(name).views()));
  *ino = Ino(r.at(1).integer());
  return DecodeAttr(r.at(2).str(), attr);
}

Status RedisMeta::GetAttr(const Context&, Ino ino, Attr* attr) {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpGetAttr, {"GET", Key('i', ino)}));
  if (r.nil()) return Status::Err(ENOENT);
  return DecodeAttr(r.str(), attr);
}

Status RedisMeta::Access(const Context& ctx, Ino ino, int mask) {
  Attr attr;
  RETURN_IF_ERROR(GetAttr(ctx, ino, &attr));
  return CheckPermission(ctx, attr, mask);
}

Status RedisMeta::SetAttr(const Context& ctx, Ino ino, uint32_t mask, const Attr& in, Attr* out) {
  Args a;
  a.Ctx(ctx).Time(Now()).Num(ino).Num(mask).Num(in.mode).Num(in.uid).Num(in.gid).Time(in.atime).Time(in.mtime).Time(
      in.ctime);
  ASSIGN_OR_RETURN(auto r, Fcall(kOpSetAttr, "setattr", a.views()));
  return DecodeAttr(r.at(1).str(), out);
}

Status RedisMeta::Truncate(const Context& ctx, Ino ino, uint64_t length, bool check_perm, Attr* out) {
  if (length > kMaxFileSize) return Status::Err(EFBIG);
  Args a;
  a.Ctx(ctx).Time(Now()).Num(ino).Num(length).Str(check_perm ? "1" : "0").Num(limits_.Capacity());
  ASSIGN_OR_RETURN(auto r, Fcall(kOpTruncate, "truncate", a.views()));
  return DecodeAttr(r.at(1).str(), out);
}

Status RedisMeta::Fallocate(const Context& ctx, Ino ino, int mode, uint64_t off, uint64_t len, Attr* out) {
  RETURN_IF_ERROR(CheckFallocateArgs(mode, off, len));
  Args a;
  a.Ctx(ctx).Time(Now()).Num(ino).Num(uint64_t(mode)).Num(off).Num(len).Num(FallocateSpace(limits_.Capacity()));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpFallocate, "fallocate", a.views()));
  return DecodeAttr(r.at(1).str(), out);
}

Status RedisMeta::Mknod(const Context& ctx, Ino parent, const std::string& name, uint32_t mode, uint32_t cumask,
                        uint32_t rdev, const std::string& target, Ino* ino, Attr* attr) {
  uint32_t type = 0;
  RETURN_IF_ERROR(CheckMknodArgs(name, mode, target, &type));
  uint32_t perm = type == S_IFLNK ? 0777 : (mode & 07777 & ~cumask);
  ASSIGN_OR_RETURN(Ino new_ino, inode_ids_.Next());
  Args a;
  a.Ctx(ctx).Time(Now()).Num(parent).Str(name).Num(new_ino).Num(type).Num(perm).Num(rdev).Str(target).Num(
      limits_.Inodes());
  ASSIGN_OR_RETURN(auto r, Fcall(kOpMknod, "mknod", a.views()));
  *ino = new_ino;
  RETURN_IF_ERROR(DecodeAttr(r.at(1).str(), attr));
  ReportReply(ctx, r, 2, {parent});
  return Status::OK();
}

Status RedisMeta::Clone(const Context& ctx, Ino src, Ino parent, const std::string& name, uint32_t cumask,
                        bool preserve, Ino* ino, Attr* attr, uint64_t* entries) {
  RETURN_IF_ERROR(CheckCloneArgs(ctx, src, parent, name, preserve));
  Args a;
  a.Ctx(ctx).Time(Now()).Num(src).Num(parent).Str(name).Num(cumask).Str(preserve ? "1" : "0").Num(limits_.Capacity())
      .Num(limits_.Inodes()).Num(kMaxCloneEntries);
  ASSIGN_OR_RETURN(auto r, Fcall(kOpMknod, "clone", a.views()));
  *ino = Ino(r.at(1).integer());
  if (entries) *entries = uint64_t(r.at(3).integer());
  RETURN_IF_ERROR(DecodeAttr(r.at(2).str(), attr));
  ReportReply(ctx, r, 4, {parent});
  return Status::OK();
}

std::string RedisMeta::TrashArg(const Context& ctx, const Timespec& now) const {
  return limits_.TrashDays() == 0 || ctx.no_trash ? std::string() : TrashHourName(now.sec);
}

Status RedisMeta::EnsureTrash() {
  return Fcall(kOpOther, "ensure_trash", Args().Time(Now()).views()).status().With("creating /.trash");
}

Status RedisMeta::Unlink(const Context& ctx, Ino parent, const std::string& name) {
  if (IsDotName(name)) return Status::Err(EISDIR);
  if (TouchesTrashRoot(ctx, parent, name)) return Status::Err(EPERM);
  RETURN_IF_ERROR(ValidName(name));
  const Timespec now = Now();
  ASSIGN_OR_RETURN(auto r, Fcall(kOpUnlink, "unlink",
                                 Args().Ctx(ctx).Time(now).Num(sid_.load()).Num(parent).Str(name).Own(TrashArg(ctx, now)).views()));
  ReportReply(ctx, r, 2, {parent});
  ReportRemovedReply(ctx, r, 3);
  return Released(r.at(1).integer());
}

Status RedisMeta::Rmdir(const Context& ctx, Ino parent, const std::string& name) {
  if (name == ".") return Status::Err(EINVAL);
  if (TouchesTrashRoot(ctx, parent, name)) return Status::Err(EPERM);
  if (name == "..") return Status::Err(ENOTEMPTY);
  RETURN_IF_ERROR(ValidName(name));
  const Timespec now = Now();
  ASSIGN_OR_RETURN(auto r, Fcall(kOpRmdir, "rmdir",
                                 Args().Ctx(ctx).Time(now).Num(sid_.load()).Num(parent).Str(name).Own(TrashArg(ctx, now)).views()));
  ReportReply(ctx, r, 2, {parent}, 3);
  ReportRemovedReply(ctx, r, 3);
  return Released(r.at(1).integer());
}

Status RedisMeta::Rename(const Context& ctx, Ino psrc, const std::string& nsrc, Ino pdst, const std::string& ndst,
                         uint32_t flags, Ino* ino, Attr* attr) {
  RETURN_IF_ERROR(CheckRenameArgs(nsrc, ndst, flags));
  if (TouchesTrashRoot(ctx, psrc, nsrc) || TouchesTrashRoot(ctx, pdst, ndst)) return Status::Err(EPERM);
  Args a;
  const Timespec now = Now();
  a.Ctx(ctx).Time(now).Num(sid_.load()).Num(psrc).Str(nsrc).Num(pdst).Str(ndst).Num(flags).Own(TrashArg(ctx, now));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpRename, "rename", a.views()));
  *ino = Ino(r.at(1).integer());
  RETURN_IF_ERROR(DecodeAttr(r.at(2).str(), attr));
  if (r.size() == 4) ReportEffects(ctx, {}, {*ino});  // the same file under both names: nothing changed
  else ReportReply(ctx, r, 4, {psrc, pdst}, 6, *ino);
  return Released(r.at(3).integer());
}

Status RedisMeta::Link(const Context& ctx, Ino ino, Ino parent, const std::string& name, Attr* attr) {
  if (IsDotName(name)) return Status::Err(EEXIST);
  RETURN_IF_ERROR(ValidName(name));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpLink, "link", Args().Ctx(ctx).Time(Now()).Num(ino).Num(parent).Str(name).views()));
  RETURN_IF_ERROR(DecodeAttr(r.at(1).str(), attr));
  ReportReply(ctx, r, 2, {parent});
  return Status::OK();
}

Status RedisMeta::ReadLink(const Context&, Ino ino, std::string* target) {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpReadLink, {"MGET", Key('i', ino), Key('s', ino)}));
  if (r.at(0).nil()) return Status::Err(ENOENT);
  Attr attr;
  RETURN_IF_ERROR(DecodeAttr(r.at(0).str(), &attr));
  if (!attr.IsSymlink()) return Status::Err(EINVAL);
  if (r.at(1).nil()) return Status::Err(EIO, "symlink target missing");
  *target = std::string(r.at(1).str());
  return Status::OK();
}

Status RedisMeta::ReaddirPage(const Context& ctx, Ino ino, bool plus, const std::string& after, size_t limit,
                              std::vector<Entry>* entries, bool* more) {
  entries->clear();
  ASSIGN_OR_RETURN(auto r, Fcall(kOpReaddir, "readdir",
                                 Args().Ctx(ctx).Num(ino).Str(plus ? "1" : "0").Str(after).Num(limit).views()));
  *more = r.at(1).integer() != 0;
  redis::Reply names = r.at(2), values = r.at(3), attrs = r.at(4);
  size_t next_attr = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (values.at(i).nil()) continue;  // removed between the two reads of the page: cannot happen in one call
    Entry e;
    e.name = std::string(names.at(i).str());
    uint32_t type = 0;
    if (!DecodeEntry(values.at(i).str(), &e.ino, &type).ok()) continue;
    e.attr.mode = type;
    if (plus) {
      redis::Reply a = attrs.at(next_attr++);
      if (!a.nil()) RETURN_IF_ERROR(DecodeAttr(a.str(), &e.attr));
    }
    entries->push_back(std::move(e));
  }
  return Status::OK();
}

// ---------------------------------------------------------------- open files

Status RedisMeta::Open(const Context& ctx, Ino ino, int flags, Attr* attr) {
  refs_.Add(ino);
  Status st = GetAttr(ctx, ino, attr);
  if (st.ok()) st = CheckOpen(ctx, *attr, flags);
  if (!st.ok()) (void)Close(ctx, ino);
  return st;
}

Status RedisMeta::Close(const Context&, Ino ino) { return Forget(ino, 1); }

Status RedisMeta::Forget(Ino ino, uint64_t n) {
  if (!refs_.Drop(ino, n) || sid_ == 0) return Status::OK();
  return ReleaseNow(ino);
}

// ---------------------------------------------------------------- data

Status RedisMeta::Read(Ino ino, uint32_t chunk_index, std::vector<Slice>* slices) {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpRead, {"MGET", ChunkKey(ino, chunk_index), Key('i', ino)}));
  if (!r.at(0).nil()) {
    *slices = chunk::DecodeSlices(r.at(0).str());
    return Status::OK();
  }
  if (r.at(1).nil()) return Status::Err(ENOENT);  // no such inode, not just no data
  slices->clear();
  return Status::OK();
}

Status RedisMeta::ScanAllSlices(const SliceVisitor& visit) {
  // Chunk lists, then the deletion queue. SCAN returns the keys that exist
  // for the whole scan, no more: a clone made meanwhile may put its copy's
  // lists behind the cursor while the source's go (a removal, an overwrite)
  // before the cursor reaches them, and their slices would look leaked. So
  // the lists are scanned again until one scan ran with no clone made
  // during it ('clones' counts them); earlier scans' visits stand too.
  constexpr int kMaxScans = 8;
  auto clones = [&]() -> Result<std::string> {
    ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"GET", "clones"}));
    return r.nil() ? std::string() : std::string(r.str());
  };
  for (int scan = 1;; ++scan) {
    ASSIGN_OR_RETURN(const std::string before, clones());
    RETURN_IF_ERROR(ForEachChunkList([&](std::string_view list) {
      for (const Slice& s : chunk::DecodeSlices(list))
        if (s.id != 0) visit(s.id, s.size, false);
    }));
    ASSIGN_OR_RETURN(const std::string after, clones());
    if (after == before) break;
    if (scan == kMaxScans)
      return Status::Err(EAGAIN, "files were cloned during each of " + std::to_string(kMaxScans) +
                                     " scans of the chunk lists; run again when cloning pauses");
  }
  // ZSCAN, not pages by rank: the mounts remove due entries from the front
  // meanwhile, and ranks would shift past entries never seen.
  std::string cursor = "0";
  do {
    ASSIGN_OR_RETURN(auto page, Cmd(kOpOther, {"ZSCAN", "delslices", cursor, "COUNT", "1000"}));
    cursor = std::string(page.at(0).str());
    redis::Reply queued = page.at(1);  // member, score, member, score, ...
    for (size_t i = 0; i + 1 < queued.size(); i += 2) {
      std::string_view m = queued.at(i).str();
      const auto sep = m.find('_');
      if (sep != std::string_view::npos) visit(ParseU64(m.substr(0, sep)), uint32_t(ParseU64(m.substr(sep + 1))), true);
    }
  } while (cursor != "0");
  return Status::OK();
}

Status RedisMeta::ForEachChunkList(const std::function<void(std::string_view list)>& fn) {
  // c<ino>_<idx> keys, a SCAN page at a time, their values in one MGET each.
  std::string cursor = "0";
  do {
    ASSIGN_OR_RETURN(auto page, Cmd(kOpOther, {"SCAN", cursor, "MATCH", "c[0-9]*_[0-9]*", "COUNT", "1000"}));
    cursor = std::string(page.at(0).str());
    redis::Reply keys = page.at(1);
    if (keys.size() == 0) continue;
    Args get;
    get.Str("MGET");
    for (size_t i = 0; i < keys.size(); ++i) get.Own(std::string(keys.at(i).str()));
    ASSIGN_OR_RETURN(auto values, Cmd(kOpOther, get.views()));
    for (size_t i = 0; i < values.size(); ++i)
      if (!values.at(i).nil()) fn(values.at(i).str());  // removed since the SCAN
  } while (cursor != "0");
  return Status::OK();
}

Status RedisMeta::CollectSlices(SliceHolds* holds) {
  RETURN_IF_ERROR(ForEachChunkList([&](std::string_view list) { HoldSlices(list, holds); }));
  auto slice_of = [](std::string_view m) -> std::pair<uint64_t, uint32_t> {
    const auto sep = m.find('_');
    if (sep == std::string_view::npos) return {0, 0};
    return {ParseU64(m.substr(0, sep)), uint32_t(ParseU64(m.substr(sep + 1)))};
  };
  ASSIGN_OR_RETURN(auto refs, Cmd(kOpOther, {"HGETALL", "slicerefs"}));
  for (size_t i = 0; i + 1 < refs.size(); i += 2)
    (*holds)[slice_of(refs.at(i).str())].extra = int64_t(std::strtoll(std::string(refs.at(i + 1).str()).c_str(), nullptr, 10));
  ASSIGN_OR_RETURN(auto queued, Cmd(kOpOther, {"ZRANGE", "delslices", "0", "-1", "WITHSCORES"}));
  for (size_t i = 0; i + 1 < queued.size(); i += 2)
    (*holds)[slice_of(queued.at(i).str())].queued.push_back(int64_t(std::stod(std::string(queued.at(i + 1).str()))));
  holds->erase({0, 0});  // undecodable names
  return Status::OK();
}

Status RedisMeta::ListChunks(Ino ino, uint32_t from, uint32_t limit, std::vector<uint32_t>* out) {
  out->clear();
  ASSIGN_OR_RETURN(auto r, Cmd(kOpRead, {"ZRANGEBYSCORE", Key('k', ino), std::to_string(from), "+inf", "LIMIT", "0",
                                         std::to_string(limit)}));
  for (size_t i = 0; i < r.size(); ++i) out->push_back(uint32_t(ParseU64(r.at(i).str())));
  return Status::OK();
}

Status RedisMeta::WriteSlices(const Context&, Ino ino, const std::vector<SliceWrite>& slices, const Timespec& mtime,
                              Attr* attr, std::vector<uint32_t>* slice_counts) {
  for (const auto& w : slices)
    if (uint64_t(w.slice.pos) + w.slice.len > chunk::kChunkSize)
      return Status::Err(EINVAL, "slice crosses a chunk boundary");
  std::map<uint32_t, std::vector<Slice>> by_chunk;  // keeps each chunk's order
  for (const auto& w : slices) by_chunk[w.chunk_index].push_back(w.slice);
  Args a;
  a.Num(ino).Time(mtime).Num(limits_.Capacity()).Num(sid_.load());
  for (const auto& [index, added] : by_chunk) a.Num(index).Own(Records(added));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpWrite, "write", a.views()));
  RETURN_IF_ERROR(DecodeAttr(r.at(1).str(), attr));
  if (slice_counts) {
    std::map<uint32_t, uint32_t> counts;
    size_t i = 0;
    for (const auto& entry : by_chunk) counts[entry.first] = uint32_t(r.at(2).at(i++).integer());
    slice_counts->clear();
    for (const auto& w : slices) slice_counts->push_back(counts[w.chunk_index]);
  }
  return Status::OK();
}

Status RedisMeta::CompactChunk(Ino ino, uint32_t chunk_index, const std::vector<Slice>& expected,
                               const std::vector<Slice>& replacement) {
  const int days = limits_.TrashDays();
  const uint64_t not_before = days > 0 ? uint64_t(Now().sec) + uint64_t(days) * 86400 : 0;
  Status st = Fcall(kOpCompact, "compact",
                    Args().Num(ino).Num(chunk_index).Own(Records(expected)).Own(Records(replacement)).Num(not_before).views())
                  .status();
  if (st.code() == EAGAIN) return Status::Err(EAGAIN, "chunk changed during compaction");
  return st;
}

// ---------------------------------------------------------------- xattrs

Status RedisMeta::GetXattr(const Context& ctx, Ino ino, const std::string& name, std::string* value) {
  RETURN_IF_ERROR(CheckXattrName(name));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpXattr, "getxattr", Args().Ctx(ctx).Num(ino).Str(name).views()));
  *value = std::string(r.at(1).str());
  return Status::OK();
}

Status RedisMeta::SetXattr(const Context& ctx, Ino ino, const std::string& name, const std::string& value, int flags) {
  RETURN_IF_ERROR(CheckXattrName(name));
  if (value.size() > XATTR_SIZE_MAX) return Status::Err(E2BIG);
  if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) return Status::Err(EINVAL);
  return Fcall(kOpXattr, "setxattr",
               Args().Ctx(ctx).Time(Now()).Num(ino).Str(name).Str(value).Num(uint64_t(flags)).views())
      .status();
}

Status RedisMeta::ListXattr(const Context& ctx, Ino ino, std::vector<std::string>* names) {
  ASSIGN_OR_RETURN(auto r, Fcall(kOpXattr, "listxattr", Args().Ctx(ctx).Num(ino).views()));
  names->clear();
  redis::Reply list = r.at(1);
  for (size_t i = 0; i < list.size(); ++i) names->emplace_back(list.at(i).str());
  std::sort(names->begin(), names->end());
  return Status::OK();
}

Status RedisMeta::RemoveXattr(const Context& ctx, Ino ino, const std::string& name) {
  RETURN_IF_ERROR(CheckXattrName(name));
  return Fcall(kOpXattr, "removexattr", Args().Ctx(ctx).Time(Now()).Num(ino).Str(name).views()).status();
}

// ---------------------------------------------------------------- locks

Status RedisMeta::Flock(const Context& ctx, Ino ino, uint64_t owner, LockType type) {
  return Fcall(kOpLock, "flock", Args().Num(sid_.load()).Num(ino).Num(owner).Num(type).Num(ctx.pid).views()).status();
}

Status RedisMeta::GetLk(const Context&, Ino ino, uint64_t owner, PosixLock* lock) {
  Args a;
  a.Num(sid_.load()).Num(ino).Num(owner).Num(lock->type).Num(std::min(lock->start, kLockEof)).Num(std::min(lock->end, kLockEof));
  ASSIGN_OR_RETURN(auto r, Fcall(kOpLock, "getlk", a.views()));
  int64_t type = r.at(1).integer();
  if (type == 0) {
    lock->type = kUnlock;
    return Status::OK();
  }
  uint64_t end = ParseU64(r.at(3).str());
  *lock = PosixLock{LockType(type), ParseU64(r.at(2).str()), end >= kLockEof ? UINT64_MAX : end,
                    uint32_t(r.at(4).integer())};
  return Status::OK();
}

Status RedisMeta::SetLk(const Context&, Ino ino, uint64_t owner, const PosixLock& lock) {
  if (lock.start > lock.end) return Status::Err(EINVAL);
  Args a;
  a.Num(sid_.load()).Num(ino).Num(owner).Num(lock.type).Num(std::min(lock.start, kLockEof)).Num(std::min(lock.end, kLockEof)).Num(
      lock.pid);
  return Fcall(kOpLock, "setlk", a.views()).status();
}

// ---------------------------------------------------------------- fsck

Status RedisMeta::Reset() { return Cmd(kOpOther, {"FLUSHDB"}).status(); }

// ---------------------------------------------------------------- dump / load

namespace {

class RedisTreeReader final : public TreeReader {
 public:
  using CallFn = std::function<Result<redis::Reply>(const char* fn, const std::vector<std::string_view>& args)>;
  using CmdFn = std::function<Result<redis::Reply>(const std::vector<std::string_view>& argv)>;
  RedisTreeReader(Meta* meta, CallFn call, CmdFn cmd) : meta_(meta), call_(std::move(call)), cmd_(std::move(cmd)) {}

  Status Inode(Ino ino, uint32_t type, InodeRecord* out) override {
    std::vector<InodeRecord> recs;
    RETURN_IF_ERROR(Inodes({{ino, type}}, &recs));
    *out = std::move(recs[0]);
    return Status::OK();
  }
  // One FCALL for all of them (tessera_dump_inodes).
  Status Inodes(const std::vector<std::pair<Ino, uint32_t>>& which, std::vector<InodeRecord>* out) override {
    out->clear();
    Args args;
    for (const auto& w : which) args.Num(w.first);
    ASSIGN_OR_RETURN(auto r, call_("dump_inodes", args.views()));
    if (r.size() != which.size() + 1) return Status::Err(EIO, "redis: malformed reply from tessera_dump_inodes");
    out->resize(which.size());
    for (size_t k = 0; k < which.size(); ++k) {
      redis::Reply rec = r.at(k + 1);
      InodeRecord& o = (*out)[k];
      o.ino = which[k].first;
      if (rec.size() < 5 || rec.at(0).nil()) return Status::Err(ENOENT, "no inode " + std::to_string(o.ino));
      RETURN_IF_ERROR(DecodeAttr(rec.at(0).str(), &o.attr));
      if (o.attr.IsSymlink()) o.target = std::string(rec.at(1).str());
      redis::Reply x = rec.at(2);
      for (size_t i = 0; i + 1 < x.size(); i += 2) o.xattrs.emplace_back(x.at(i).str(), x.at(i + 1).str());
      std::sort(o.xattrs.begin(), o.xattrs.end());
      redis::Reply idx = rec.at(3), lists = rec.at(4);
      for (size_t i = 0; i < idx.size() && i < lists.size(); ++i)
        o.chunks.emplace_back(uint32_t(idx.at(i).integer()), chunk::DecodeSlices(lists.at(i).str()));
    }
    return Status::OK();
  }
  Status Entries(Ino dir, const std::string& after, size_t limit, std::vector<Entry>* out, bool* more) override {
    return meta_->ReaddirPage(Context::Root(), dir, false, after, limit, out, more);
  }
  Result<int64_t> Counter(const std::string& name) override {
    ASSIGN_OR_RETURN(auto r, cmd_({"GET", name}));
    return r.nil() ? int64_t(0) : r.integer();
  }

 private:
  Meta* meta_;
  CallFn call_;
  CmdFn cmd_;
};

// Collects the records of one batch as the arguments of one FCALL of
// tessera_load (redis_functions_admin.lua).
class RedisTreeWriter final : public TreeWriter {
 public:
  Status PutInode(const InodeRecord& rec) override {
    args_.Str("i").Num(rec.ino).Own(EncodeAttr(rec.attr));
    if (rec.attr.IsSymlink()) args_.Str("s").Num(rec.ino).Own(rec.target);
    for (const auto& [name, value] : rec.xattrs) args_.Str("x").Num(rec.ino).Own(name).Own(value);
    for (const auto& [index, slices] : rec.chunks) args_.Str("c").Num(rec.ino).Num(index).Own(Records(slices));
    return Status::OK();
  }
  Status PutEntry(Ino parent, const std::string& name, Ino ino, uint32_t mode) override {
    args_.Str("e").Num(parent).Own(name).Own(EncodeEntry(ino, mode & S_IFMT));
    return Status::OK();
  }
  Status PutCounter(const std::string& name, int64_t value) override {
    args_.Str("n").Own(name).Own(std::to_string(value));
    return Status::OK();
  }
  Status PutAttr(Ino ino, const Attr& attr) override {
    args_.Str("i").Num(ino).Own(EncodeAttr(attr));
    return Status::OK();
  }
  Status DeleteEntry(Ino parent, const std::string& name) override {
    args_.Str("de").Num(parent).Own(name);
    return Status::OK();
  }
  Status PutSetting(const Format& format) override {
    args_.Str("setting").Own(format.ToJson());
    return Status::OK();
  }
  Status PutDirStat(Ino dir, const DirStat& d) override {
    args_.Str("u").Num(dir).Own(std::to_string(d.length)).Own(std::to_string(d.space)).Own(std::to_string(d.inodes));
    return Status::OK();
  }
  Status PutParents(Ino ino, const ParentCounts& parents) override {
    args_.Str("p").Num(ino).Num(parents.size());
    for (const auto& [dir, n] : parents) args_.Num(dir).Num(n);
    return Status::OK();
  }
  Status PutSliceRef(uint64_t id, uint32_t size, int64_t extra) override {
    args_.Str("r").Own(std::to_string(id) + "_" + std::to_string(size)).Own(std::to_string(std::max<int64_t>(extra, 0)));
    return Status::OK();
  }
  Status UnqueueSlice(uint64_t id, uint32_t size, int64_t) override {
    args_.Str("uq").Own(std::to_string(id) + "_" + std::to_string(size));
    return Status::OK();
  }
  const std::vector<std::string_view>& views() const { return args_.views(); }

 private:
  Args args_;
};

}  // namespace

Status RedisMeta::ReadTree(const std::function<Status(TreeReader&)>& fn) {
  RedisTreeReader reader(
      this, [this](const char* f, const std::vector<std::string_view>& args) { return Fcall(kOpOther, f, args); },
      [this](const std::vector<std::string_view>& argv) { return Cmd(kOpOther, argv); });
  return fn(reader);
}

Status RedisMeta::WriteTree(const std::function<Status(TreeWriter&)>& fn) {
  RedisTreeWriter writer;
  RETURN_IF_ERROR(fn(writer));
  if (writer.views().empty()) return Status::OK();
  return Fcall(kOpOther, "load", writer.views()).status();
}

Result<bool> RedisMeta::ClaimJob(const std::string& name, int64_t interval_sec) {
  ASSIGN_OR_RETURN(auto r, Fcall(kOpSession, "claim_job", Args().Own(name).Num(uint64_t(Now().sec)).Num(uint64_t(interval_sec)).views()));
  return r.at(1).integer() == 1;
}

Status RedisMeta::BeginBackup() {
  return Fcall(kOpSession, "backup_mark", Args().Str("begin").Num(uint64_t(Now().sec)).Num(0).views()).status();
}

Status RedisMeta::EndBackup() {
  return Fcall(kOpSession, "backup_mark",
               Args().Str("end").Num(uint64_t(Now().sec)).Num(uint64_t(kBackupGiveUpSec)).views())
      .status();
}

Result<bool> RedisMeta::IsEmpty() {
  ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"DBSIZE"}));
  return r.integer() == 0;
}

Status RedisMeta::GetDirStats(const std::vector<Ino>& dirs, std::vector<DirStat>* out) {
  out->assign(dirs.size(), DirStat{});
  constexpr size_t kBatch = 1000;
  for (size_t from = 0; from < dirs.size(); from += kBatch) {
    Args a;
    const size_t to = std::min(dirs.size(), from + kBatch);
    for (size_t i = from; i < to; ++i) a.Num(dirs[i]);
    ASSIGN_OR_RETURN(auto r, Fcall(kOpOther, "dir_stats", a.views()));
    const auto& v = r.at(1);
    if (v.size() != 3 * (to - from)) return Status::Err(EIO, "redis: malformed reply from tessera_dir_stats");
    for (size_t i = from; i < to; ++i) {
      (*out)[i] = DirStat{v.at(3 * (i - from)).integer(), v.at(3 * (i - from) + 1).integer(),
                          v.at(3 * (i - from) + 2).integer()};
      (*out)[i] += dirstats_.Pending(dirs[i]);  // this client's changes not flushed yet
    }
  }
  return Status::OK();
}

Status RedisMeta::ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) {
  ASSIGN_OR_RETURN(auto r, Fcall(kOpOther, "quota_list", {}));
  const auto& v = r.at(1);
  if (v.size() % 6 != 0) return Status::Err(EIO, "redis: malformed reply from tessera_quota_list");
  out->clear();
  for (size_t i = 0; i < v.size(); i += 6) {
    const int64_t kind = v.at(i).integer();
    if (kind < 1 || kind > 3) continue;
    QuotaKey key{QuotaKind(kind), std::strtoull(std::string(v.at(i + 1).str()).c_str(), nullptr, 10)};
    out->emplace_back(key, Quota{v.at(i + 2).integer(), v.at(i + 3).integer(), v.at(i + 4).integer(),
                                 v.at(i + 5).integer()});
  }
  return Status::OK();
}

Status RedisMeta::SetQuota(const QuotaKey& key, const Quota& q, bool with_usage) {
  return Fcall(kOpOther, "quota_set",
               Args().Num(uint64_t(key.kind)).Num(key.id).Own(std::to_string(q.max_space))
                   .Own(std::to_string(q.max_inodes)).Own(std::to_string(q.used_space))
                   .Own(std::to_string(q.used_inodes)).Str(with_usage ? "1" : "0").views())
      .status();
}

Status RedisMeta::DeleteQuota(const QuotaKey& key) {
  return Fcall(kOpOther, "quota_delete", Args().Num(uint64_t(key.kind)).Num(key.id).views()).status();
}

Status RedisMeta::AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) {
  if (deltas.empty()) return Status::OK();
  Args a;
  for (const auto& [key, d] : deltas)
    a.Num(uint64_t(key.kind)).Num(key.id).Own(std::to_string(d.space)).Own(std::to_string(d.inodes));
  return Fcall(kOpOther, "quota_add", a.views()).status();
}

Status RedisMeta::CollectTree(std::unordered_map<Ino, Attr>* attrs_out, std::vector<EntryTriple>* entries_out,
                              UsageRecords* usage, std::vector<std::string>* problems) {
  // Not a snapshot: run it on a quiet volume (like fsck).
  auto scan = [&](const char* pattern, std::vector<std::string>* keys) -> Status {
    std::string cursor = "0";
    do {
      ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}));
      cursor = std::string(r.at(0).str());
      for (size_t i = 0; i < r.at(1).size(); ++i) keys->emplace_back(r.at(1).at(i).str());
    } while (cursor != "0");
    return Status::OK();
  };
  std::vector<std::string> inode_keys, dir_keys, stat_keys, parent_keys;
  RETURN_IF_ERROR(scan("i[0-9]*", &inode_keys));
  RETURN_IF_ERROR(scan("d[0-9]*", &dir_keys));
  RETURN_IF_ERROR(scan("u[0-9]*", &stat_keys));
  RETURN_IF_ERROR(scan("p[0-9]*", &parent_keys));
  for (const auto& k : stat_keys) {
    ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"HMGET", k, "l", "s", "i"}));
    auto num = [&](size_t i) {  // signed: a damaged record may be negative
      return r.at(i).nil() ? int64_t(0) : int64_t(std::strtoll(std::string(r.at(i).str()).c_str(), nullptr, 10));
    };
    usage->dirstats[ParseU64(std::string_view(k).substr(1))] = DirStat{num(0), num(1), num(2)};
  }
  for (const auto& k : parent_keys) {
    ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"HGETALL", k}));
    ParentCounts p;
    for (size_t i = 0; i + 1 < r.size(); i += 2) p.emplace_back(ParseU64(r.at(i).str()), uint32_t(ParseU64(r.at(i + 1).str())));
    std::sort(p.begin(), p.end());
    usage->parents[ParseU64(std::string_view(k).substr(1))] = std::move(p);
  }
  RETURN_IF_ERROR(CollectSlices(&usage->slices));
  std::unordered_map<Ino, Attr> attrs;
  for (size_t i = 0; i < inode_keys.size(); i += 500) {
    Args a;
    a.Str("MGET");
    for (size_t j = i; j < std::min(inode_keys.size(), i + 500); ++j) a.Str(inode_keys[j]);
    ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, a.views()));
    for (size_t j = 0; j < r.size(); ++j) {
      if (r.at(j).nil()) continue;
      Ino ino = ParseU64(std::string_view(inode_keys[i + j]).substr(1));
      Attr attr;
      if (DecodeAttr(r.at(j).str(), &attr).ok()) attrs[ino] = attr;
      else problems->push_back("inode " + std::to_string(ino) + ": undecodable attributes");
    }
  }
  std::vector<EntryTriple> entries;
  for (const auto& k : dir_keys) {
    Ino parent = ParseU64(std::string_view(k).substr(1));
    ASSIGN_OR_RETURN(auto r, Cmd(kOpOther, {"HGETALL", k}));
    for (size_t i = 0; i + 1 < r.size(); i += 2) {
      Ino child = 0;
      uint32_t type = 0;
      if (DecodeEntry(r.at(i + 1).str(), &child, &type).ok()) entries.emplace_back(parent, r.at(i).str(), child);
    }
  }
  *attrs_out = std::move(attrs);
  *entries_out = std::move(entries);
  return Status::OK();
}

Status RedisMeta::Check(std::vector<std::string>* problems) {
  RETURN_IF_ERROR(FlushDirStats());
  problems->clear();
  std::unordered_map<Ino, Attr> attrs;
  std::vector<EntryTriple> entries;
  UsageRecords usage;
  RETURN_IF_ERROR(CollectTree(&attrs, &entries, &usage, problems));
  CheckTree(attrs, entries, problems);
  CheckUsage(attrs, entries, usage, problems);
  CheckSlices(usage.slices, problems);
  ASSIGN_OR_RETURN(auto counters, Cmd(kOpOther, {"MGET", keys::kUsedSpace, keys::kTotalInodes}));
  auto num = [&](size_t i) {
    return counters.at(i).nil() ? int64_t(0) : int64_t(std::strtoll(std::string(counters.at(i).str()).c_str(), nullptr, 10));
  };
  CheckCounters(attrs, num(0), num(1), problems);
  return Status::OK();
}

Status RedisMeta::Repair(std::vector<std::string>* changes) {
  RETURN_IF_ERROR(FlushDirStats());
  std::unordered_map<Ino, Attr> attrs;
  std::vector<EntryTriple> entries;
  UsageRecords usage;
  std::vector<std::string> problems;
  RETURN_IF_ERROR(CollectTree(&attrs, &entries, &usage, &problems));
  if (!problems.empty()) return Status::Err(EIO, "cannot repair: " + problems.front());
  return RepairTree(this, std::move(attrs), std::move(entries), std::move(usage), changes);
}

}  // namespace tessera::meta
