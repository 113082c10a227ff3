// The metadata dump (dump.h, docs/format.md section 5).
#include "meta/dump.h"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "meta/encoding.h"
#include "meta/meta_util.h"

namespace tessera::meta {

using Json = nlohmann::ordered_json;

namespace {

constexpr size_t kPage = 1024;           // entries per directory page and per line
constexpr size_t kChunksPerLine = 1024;  // more chunks continue on "c" lines
// How far past a dump's slice counter a load starts handing out ids: more
// than any volume could use between a dump and its load (2^40).
constexpr int64_t kLoadSliceGap = int64_t(1) << 40;
constexpr const char* kCounters[] = {keys::kNextInode, keys::kNextSlice, keys::kNextSession, keys::kUsedSpace,
                                     keys::kTotalInodes};

// ---- strings: UTF-8 as JSON strings, anything else as {"b64": ...} ----

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;
    if (n == 4 || i + n >= s.size()) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (size_t k = 1; k <= n; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view s) {
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    if (i + 1 < s.size()) v |= uint32_t(uint8_t(s[i + 1])) << 8;
    if (i + 2 < s.size()) v |= uint8_t(s[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < s.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < s.size() ? kB64[v & 63] : '=';
  }
  return out;
}

Result<std::string> Unbase64(std::string_view s) {
  if (s.size() % 4 != 0) return Status::Err(EINVAL, "bad base64 string");
  std::string out;
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = s[i + k];
      const char* p = c == '=' ? nullptr : std::strchr(kB64, c);
      if (c == '=' && i + 4 == s.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (p == nullptr || c == '\0' || pad > 0) return Status::Err(EINVAL, "bad base64 string");
      v = (v << 6) | uint32_t(p - kB64);
    }
    out += char(v >> 16);
    if (pad < 2) out += char((v >> 8) & 255);
    if (pad < 1) out += char(v & 255);
  }
  return out;
}

Json Str(const std::string& s) {
  if (ValidUtf8(s)) return s;
  return Json{{"b64", Base64(s)}};
}

Result<std::string> StrOf(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("b64") && j["b64"].is_string())
    return Unbase64(j["b64"].get<std::string>());
  return Status::Err(EINVAL, "expected a string");
}

Json Time(const Timespec& t) { return Json::array({t.sec, t.nsec}); }

Json Chunks(const InodeRecord& rec, size_t from, size_t to) {
  Json chunks = Json::array();
  for (size_t i = from; i < to; ++i) {
    Json slices = Json::array();
    for (const auto& s : rec.chunks[i].second) slices.push_back(Json::array({s.pos, s.id, s.size, s.off, s.len}));
    chunks.push_back(Json::array({rec.chunks[i].first, std::move(slices)}));
  }
  return chunks;
}

// ---- writing ----

class Dumper {
 public:
  Dumper(const DumpOptions& opts, const LineWriter& out, DumpStats* stats) : opts_(opts), out_(out), stats_(stats) {}

  Status Line(const Json& j) {
    ++stats_->lines;
    return out_(j.dump());
  }

  Status Tick() {
    if (opts_.cancel != nullptr && opts_.cancel->load(std::memory_order_relaxed))
      return Status::Err(ECANCELED, "interrupted");
    if (opts_.progress && ++ticks_ % 4096 == 0) opts_.progress(*stats_);
    return Status::OK();
  }

  // Reads one inode and writes it.
  Status Inode(TreeReader& r, Ino ino, uint32_t type) {
    InodeRecord rec;
    Status st = r.Inode(ino, type, &rec);
    if (!st.ok()) return Missing(st, ino);
    return Emit(rec);
  }

  // An inode named by an entry could not be read: on Redis (no snapshot)
  // it may have been removed meanwhile; on the SQL engines the entry is
  // dangling (fsck finds it).
  Status Missing(const Status& st, Ino ino) const {
    const std::string which = ino != 0 ? fmt::format("inode {}", ino) : st.message();
    if (st.code() == ENOENT)
      return Status::Err(EAGAIN, fmt::format("{} is named by a directory entry but cannot be read: it was removed while "
                                             "the dump ran (Redis dumps have no snapshot: dump again, on a quiet "
                                             "volume), or the entry is dangling ('tessera fsck' finds it)",
                                             which));
    return st.With("reading " + which);
  }

  Status Emit(const InodeRecord& rec) {
    const Ino ino = rec.ino;
    const Attr& a = rec.attr;
    Json j;
    j["i"] = ino;
    j["mode"] = a.mode;
    j["uid"] = a.uid;
    j["gid"] = a.gid;
    j["nlink"] = a.nlink;
    j["rdev"] = a.rdev;
    j["length"] = a.length;
    j["parent"] = a.parent;
    j["atime"] = Time(a.atime);
    j["mtime"] = Time(a.mtime);
    j["ctime"] = Time(a.ctime);
    if (a.IsSymlink()) j["target"] = Str(rec.target);
    if (!rec.xattrs.empty()) {
      Json x = Json::array();
      for (const auto& [name, value] : rec.xattrs) x.push_back(Json::array({Str(name), Str(value)}));
      j["xattrs"] = std::move(x);
    }
    for (const auto& c : rec.chunks) stats_->slices += c.second.size();
    if (!rec.chunks.empty()) j["chunks"] = Chunks(rec, 0, std::min(rec.chunks.size(), kChunksPerLine));
    RETURN_IF_ERROR(Line(j));
    for (size_t from = kChunksPerLine; from < rec.chunks.size(); from += kChunksPerLine) {
      Json c;
      c["c"] = ino;
      c["chunks"] = Chunks(rec, from, std::min(rec.chunks.size(), from + kChunksPerLine));
      RETURN_IF_ERROR(Line(c));
    }
    ++stats_->inodes;
    if (!a.IsDir() && a.nlink > 1) linked_.insert(ino);
    return Tick();
  }

  // Depth first, names in bytewise order: the same tree gives the same lines
  // on every engine. Memory: one page per level of depth, plus the set of
  // hard-linked inodes already written.
  Status Tree(TreeReader& r, Ino top) {
    RETURN_IF_ERROR(Inode(r, top, S_IFDIR));
    struct Frame {
      Ino dir;
      std::vector<Entry> page;
      std::vector<InodeRecord> records;  // of the page's non-directories, read in one go
      size_t next = 0;
      size_t next_record = 0;
      bool more = true;
    };
    std::vector<Frame> stack;
    stack.push_back(Frame{top, {}, {}, 0, 0, true});
    std::vector<std::pair<Ino, uint32_t>> which;
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next == f.page.size()) {
        if (!f.more) {
          stack.pop_back();
          continue;
        }
        std::string after = f.page.empty() ? "" : f.page.back().name;
        Status st = r.Entries(f.dir, after, kPage, &f.page, &f.more);
        if (!st.ok()) return st.With(fmt::format("listing directory {}", f.dir));
        f.next = f.next_record = 0;
        if (f.page.empty()) {
          f.more = false;
          continue;
        }
        Json e = Json::array();
        which.clear();
        for (const auto& x : f.page) {
          const uint32_t type = x.attr.mode & S_IFMT;
          e.push_back(Json::array({Str(x.name), x.ino, type >> 12}));
          if (type != S_IFDIR) which.emplace_back(x.ino, type);
        }
        stats_->entries += f.page.size();
        RETURN_IF_ERROR(Line(Json{{"d", f.dir}, {"e", std::move(e)}}));
        if (!which.empty()) {
          Status st2 = r.Inodes(which, &f.records);
          if (!st2.ok()) return Missing(st2, which.size() == 1 ? which.front().first : 0);
        } else {
          f.records.clear();
        }
        continue;
      }
      const Entry& e = f.page[f.next++];
      if ((e.attr.mode & S_IFMT) == S_IFDIR) {
        RETURN_IF_ERROR(Inode(r, e.ino, S_IFDIR));
        stack.push_back(Frame{e.ino, {}, {}, 0, 0, true});  // f is invalid from here
        continue;
      }
      const InodeRecord& rec = f.records[f.next_record++];
      if (linked_.count(e.ino) != 0) continue;  // a hard link to an inode already written
      RETURN_IF_ERROR(Emit(rec));
    }
    return Status::OK();
  }

 private:
  const DumpOptions& opts_;
  const LineWriter& out_;
  DumpStats* stats_;
  uint64_t ticks_ = 0;
  std::unordered_set<Ino> linked_;
};

}  // namespace

namespace {
Status DumpMarked(Meta* meta, const DumpOptions& opts, const LineWriter& out, DumpStats* stats);
}  // namespace

// While the dump runs, and for the slices it may name afterwards, compaction
// keeps the objects it replaces for trash-days (Meta::BeginBackup).
Status Dump(Meta* meta, const DumpOptions& opts, const LineWriter& out, DumpStats* stats) {
  RETURN_IF_ERROR(meta->BeginBackup().With("marking the dump's slices"));
  Status st = DumpMarked(meta, opts, out, stats);
  Status ended = meta->EndBackup();
  if (!ended.ok() && st.ok()) return ended.With("ending the dump's mark (compaction keeps what it replaces meanwhile)");
  return st;
}

namespace {

Status DumpMarked(Meta* meta, const DumpOptions& opts, const LineWriter& out, DumpStats* stats) {
  ASSIGN_OR_RETURN(Format format, meta->Load());
  // This client's batched statistics and usage counters first, so that the
  // dump's counters match its tree (other clients' may lag a second; load
  // recounts usedSpace and totalInodes anyway).
  RETURN_IF_ERROR(meta->FlushDirStats().With("writing pending statistics"));
  Ino top = kRootIno;
  std::string sub = opts.subdir;
  while (!sub.empty() && sub.back() == '/') sub.pop_back();
  if (!sub.empty()) {
    size_t pos = 0;
    while (pos < sub.size()) {
      size_t slash = sub.find('/', pos);
      if (slash == std::string::npos) slash = sub.size();
      std::string name = sub.substr(pos, slash - pos);
      pos = slash + 1;
      if (name.empty() || name == ".") continue;
      Attr attr;
      Ino child = 0;
      Status st = meta->Lookup(Context::Root(), top, name, &child, &attr);
      if (!st.ok()) return st.With("looking up " + opts.subdir);
      top = child;
      if (!attr.IsDir()) return Status::Err(ENOTDIR, opts.subdir + " is not a directory");
    }
    // The trash's directories do not keep the link counts a loaded root
    // needs (CountSubdir), and what is in them belongs elsewhere.
    if (IsTrashIno(top))
      return Status::Err(EINVAL, opts.subdir + " is in the trash: put its entries back (tessera restore) and dump them "
                                               "from where they belong");
  }
  // Quotas (not part of the tree's snapshot: limits change rarely, and
  // usage is approximate anyway, docs/format.md §3d). A dump of a subtree
  // carries none: its inode numbers change when it is loaded.
  Json quotas = Json::array();
  if (top == kRootIno) {
    std::vector<std::pair<QuotaKey, Quota>> list;
    RETURN_IF_ERROR(meta->ListQuotas(&list).With("listing quotas"));
    for (const auto& [key, q] : list) {
      quotas.push_back({{"kind", key.kind == QuotaKind::kDir ? "dir" : key.kind == QuotaKind::kUser ? "user" : "group"},
                        {"id", key.id},
                        {"max_space", q.max_space},
                        {"max_inodes", q.max_inodes},
                        {"used_space", q.used_space},
                        {"used_inodes", q.used_inodes}});
    }
  }
  int attempts = 0;
  return meta->ReadTree([&](TreeReader& r) -> Status {
    if (++attempts > 1)
      return Status::Err(EAGAIN, "the engine aborted the dump's snapshot (a concurrent change); run the dump again");
    *stats = DumpStats{};
    Dumper d(opts, out, stats);
    Json counters = Json::object();
    for (const char* name : kCounters) {
      ASSIGN_OR_RETURN(int64_t v, r.Counter(name));
      counters[name] = v;
    }
    Json head;
    head["tessera_dump"] = kDumpVersion;
    head["setting"] = Json::parse(format.ToJson());
    head["counters"] = std::move(counters);
    head["root"] = top;
    if (!quotas.empty()) head["quotas"] = quotas;
    RETURN_IF_ERROR(d.Line(head));
    RETURN_IF_ERROR(d.Tree(r, top));
    Json end;
    end["end"] = Json{{"inodes", stats->inodes}, {"entries", stats->entries}, {"slices", stats->slices}};
    RETURN_IF_ERROR(d.Line(end));
    if (opts.progress) opts.progress(*stats);
    return Status::OK();
  });
}

// ---- loading ----

class Loader {
 public:
  Loader(Meta* meta, const LoadOptions& opts, DumpStats* stats) : meta_(meta), opts_(opts), stats_(stats) {}

  Status Line(const std::string& text) {
    ++line_no_;
    if (ended_) return Bad("text after the end of the dump");
    Json j;
    try {
      j = Json::parse(text);
    } catch (const Json::parse_error& e) {
      return Bad(std::string("not JSON: ") + e.what());
    }
    if (!j.is_object()) return Bad("not a JSON object");
    try {
      if (line_no_ == 1) return Head(j);
      if (j.contains("i")) return InodeLine(j);
      if (j.contains("c")) return ChunkLine(j);
      if (j.contains("d")) return EntryLine(j);
      if (j.contains("end")) return End(j);
      return Bad("unknown record");
    } catch (const Json::exception& e) {
      return Bad(std::string("malformed record: ") + e.what());
    }
  }

  // After the last line: the counters and, last of all, the settings.
  Status Finish(Format* format) {
    if (line_no_ == 0) return Status::Err(EINVAL, "the dump is empty");
    if (!ended_) return Status::Err(EINVAL, "the dump is truncated: its end record is missing");
    if (!root_seen_) return Status::Err(EINVAL, "the dump has no root directory");
    RETURN_IF_ERROR(FlushPending());
    RETURN_IF_ERROR(Flush());
    counters_[keys::kNextInode] = std::max<int64_t>(counters_[keys::kNextInode], int64_t(max_ino_));
    // Slice ids start far past the dump's: the source may have handed out
    // more since it was taken (a backup restored after the volume went on,
    // a --subdir copy beside its source), and objects, cached blocks and
    // staged blocks are named by them: none may be named twice.
    counters_[keys::kNextSlice] = std::max<int64_t>(counters_[keys::kNextSlice], int64_t(max_slice_)) + kLoadSliceGap;
    counters_[keys::kUsedSpace] = int64_t(used_space_);
    counters_[keys::kTotalInodes] = int64_t(stats_->inodes);
    if (!waiting_.empty())
      return Status::Err(EINVAL, fmt::format("the dump is damaged: inode {} has a name but no record",
                                             waiting_.begin()->first));
    RETURN_IF_ERROR(WriteUsage());
    RETURN_IF_ERROR(meta_->WriteTree([&](TreeWriter& w) -> Status {
      for (const auto& [name, v] : counters_) RETURN_IF_ERROR(w.PutCounter(name, v));
      return w.PutSetting(format_);
    }));
    for (const auto& [key, quota] : quotas_) RETURN_IF_ERROR(meta_->SetQuota(key, quota, true).With("loading a quota"));
    *format = format_;
    if (opts_.progress) opts_.progress(*stats_);
    return Status::OK();
  }

 private:
  Status Bad(const std::string& what) const {
    return Status::Err(EINVAL, fmt::format("line {} of the dump: {}", line_no_, what));
  }

  Ino Map(Ino ino) const { return ino == root_ ? kRootIno : ino; }
  std::vector<std::pair<QuotaKey, Quota>> quotas_;  // from the head, set once the tree is in

  Status Head(const Json& j) {
    if (!j.contains("tessera_dump")) return Bad("not a Tessera metadata dump (its first record has no \"tessera_dump\")");
    int version = j["tessera_dump"].get<int>();
    if (version > kDumpVersion || version < 1)
      return Bad(fmt::format("dump format version {} is not supported (this tessera reads version {})", version,
                             kDumpVersion));
    ASSIGN_OR_RETURN(format_, Format::FromJson(j.at("setting").dump()));
    for (const char* name : kCounters) counters_[name] = j.at("counters").value(name, int64_t(0));
    root_ = j.at("root").get<Ino>();
    if (j.contains("quotas")) {
      for (const Json& q : j["quotas"]) {
        const std::string kind = q.at("kind").get<std::string>();
        QuotaKey key;
        if (kind == "dir") key.kind = QuotaKind::kDir;
        else if (kind == "user") key.kind = QuotaKind::kUser;
        else if (kind == "group") key.kind = QuotaKind::kGroup;
        else return Bad("unknown quota kind '" + kind + "'");
        key.id = q.at("id").get<uint64_t>();
        if (key.kind == QuotaKind::kDir) key.id = Map(Ino(key.id));
        Quota quota;
        quota.max_space = q.at("max_space").get<int64_t>();
        quota.max_inodes = q.at("max_inodes").get<int64_t>();
        quota.used_space = q.value("used_space", int64_t(0));
        quota.used_inodes = q.value("used_inodes", int64_t(0));
        quotas_.emplace_back(key, quota);
      }
    }
    return Status::OK();
  }

  Status InodeLine(const Json& j) {
    RETURN_IF_ERROR(FlushPending());
    InodeRecord rec;
    rec.ino = Map(j["i"].get<Ino>());
    Attr& a = rec.attr;
    a.mode = j.at("mode").get<uint32_t>();
    a.uid = j.at("uid").get<uint32_t>();
    a.gid = j.at("gid").get<uint32_t>();
    a.nlink = j.at("nlink").get<uint32_t>();
    a.rdev = j.at("rdev").get<uint32_t>();
    a.length = j.at("length").get<uint64_t>();
    a.parent = Map(j.at("parent").get<Ino>());
    for (auto [name, t] : {std::pair{"atime", &a.atime}, {"mtime", &a.mtime}, {"ctime", &a.ctime}}) {
      const Json& v = j.at(name);
      t->sec = v.at(0).get<int64_t>();
      t->nsec = v.at(1).get<uint32_t>();
    }
    if (rec.ino == 0 || (a.mode & S_IFMT) == 0) return Bad("bad inode record");
    if (rec.ino == kRootIno) {
      if (!a.IsDir()) return Bad("the root is not a directory");
      a.parent = kRootIno;
      root_seen_ = true;
    }
    if (a.IsSymlink()) {
      if (!j.contains("target")) return Bad("symlink without a target");
      ASSIGN_OR_RETURN(rec.target, StrOf(j["target"]));
    }
    if (j.contains("xattrs")) {
      for (const auto& x : j["xattrs"]) {
        ASSIGN_OR_RETURN(std::string name, StrOf(x.at(0)));
        ASSIGN_OR_RETURN(std::string value, StrOf(x.at(1)));
        rec.xattrs.emplace_back(std::move(name), std::move(value));
      }
    }
    if (j.contains("chunks")) RETURN_IF_ERROR(AddChunks(j["chunks"], &rec));
    if (a.IsFile()) used_space_ += Align4K(a.length);
    if (!a.IsDir()) Named(rec.ino, a);
    if (!IsTrashIno(rec.ino)) max_ino_ = std::max(max_ino_, rec.ino);  // the trash's numbers are apart
    ++stats_->inodes;
    pending_ = std::move(rec);
    has_pending_ = true;
    return Tick();
  }

  Status ChunkLine(const Json& j) {
    if (!has_pending_ || Map(j["c"].get<Ino>()) != pending_.ino) return Bad("chunks of an inode not just before");
    return AddChunks(j.at("chunks"), &pending_);
  }

  Status AddChunks(const Json& chunks, InodeRecord* rec) {
    for (const auto& c : chunks) {
      std::vector<chunk::Slice> slices;
      for (const auto& s : c.at(1)) {
        chunk::Slice sl{s.at(0).get<uint32_t>(), s.at(1).get<uint64_t>(), s.at(2).get<uint32_t>(),
                        s.at(3).get<uint32_t>(), s.at(4).get<uint32_t>()};
        if (uint64_t(sl.off) + sl.len > sl.size && sl.id != 0) return Bad("slice beyond its data");
        max_slice_ = std::max(max_slice_, sl.id);
        slices.push_back(sl);
      }
      std::unordered_set<uint64_t> counted;  // one reference per slice per chunk list
      for (const auto& sl : slices)
        if (sl.id != 0 && counted.insert(sl.id).second) {
          auto& use = slice_lists_[sl.id];
          use.first = sl.size;
          use.second++;
        }
      stats_->slices += slices.size();
      batch_bytes_ += slices.size() * 24;
      rec->chunks.emplace_back(c.at(0).get<uint32_t>(), std::move(slices));
    }
    return Status::OK();
  }

  Status EntryLine(const Json& j) {
    RETURN_IF_ERROR(FlushPending());
    Ino parent = Map(j["d"].get<Ino>());
    for (const auto& e : j.at("e")) {
      ASSIGN_OR_RETURN(std::string name, StrOf(e.at(0)));
      if (!ValidName(name).ok() || IsDotName(name)) return Bad("bad entry name");
      Ino ino = Map(e.at(1).get<Ino>());
      uint32_t type = e.at(2).get<uint32_t>();
      if (ino == 0 || type == 0 || type > (S_IFMT >> 12)) return Bad("bad entry");
      batch_bytes_ += name.size() + 32;
      dirstats_[parent].inodes++;
      if ((type << 12) != S_IFDIR) {
        auto known = linked_.find(ino);
        if (known != linked_.end()) Charge(parent, ino, known->second.first);
        else waiting_[ino].push_back(parent);
      }
      entries_.push_back(PendingEntry{parent, std::move(name), ino, type << 12});
      ++stats_->entries;
    }
    if (entries_.size() >= opts_.batch_records || batch_bytes_ > (4u << 20)) RETURN_IF_ERROR(Flush());
    return Tick();
  }

  Status End(const Json& j) {
    RETURN_IF_ERROR(FlushPending());
    const Json& e = j["end"];
    if (e.at("inodes").get<uint64_t>() != stats_->inodes || e.at("entries").get<uint64_t>() != stats_->entries ||
        e.at("slices").get<uint64_t>() != stats_->slices)
      return Bad(fmt::format("the dump is damaged: its end record counts {} inodes, {} entries, {} slices; it holds "
                             "{}, {}, {}",
                             e.at("inodes").get<uint64_t>(), e.at("entries").get<uint64_t>(),
                             e.at("slices").get<uint64_t>(), stats_->inodes, stats_->entries, stats_->slices));
    ended_ = true;
    return Status::OK();
  }

  Status FlushPending() {
    if (!has_pending_) return Status::OK();
    has_pending_ = false;
    batch_bytes_ += 100 + pending_.target.size();
    for (const auto& [n, v] : pending_.xattrs) batch_bytes_ += n.size() + v.size();
    inodes_.push_back(std::move(pending_));
    pending_ = InodeRecord{};
    if (inodes_.size() >= opts_.batch_records || batch_bytes_ > (4u << 20)) return Flush();
    return Status::OK();
  }

  Status Flush() {
    if (inodes_.empty() && entries_.empty()) return Status::OK();
    RETURN_IF_ERROR(meta_->WriteTree([&](TreeWriter& w) -> Status {
      for (const auto& rec : inodes_) RETURN_IF_ERROR(w.PutInode(rec));
      for (const auto& e : entries_) RETURN_IF_ERROR(w.PutEntry(e.parent, e.name, e.ino, e.mode));
      return Status::OK();
    }));
    inodes_.clear();
    entries_.clear();
    batch_bytes_ = 0;
    return Status::OK();
  }

  Status Tick() {
    if (opts_.cancel != nullptr && opts_.cancel->load(std::memory_order_relaxed))
      return Status::Err(ECANCELED, "interrupted");
    if (opts_.progress && ++ticks_ % 4096 == 0) opts_.progress(*stats_);
    return Status::OK();
  }

  // Directory statistics and parent records, derived as the tree streams
  // by (docs/format.md, "Directory statistics"): a non-directory's entries
  // come before its record, except later names of a hard-linked inode.
  void Named(Ino ino, const Attr& a) {
    const uint64_t length = a.IsFile() ? a.length : 0;
    if (a.nlink > 1) linked_[ino] = {length, {}};
    auto w = waiting_.find(ino);
    if (w == waiting_.end()) return;
    for (Ino parent : w->second) Charge(parent, ino, length);
    waiting_.erase(w);
  }
  void Charge(Ino parent, Ino ino, uint64_t length) {
    dirstats_[parent].length += int64_t(length);
    dirstats_[parent].space += int64_t(Align4K(length));
    auto l = linked_.find(ino);
    if (l != linked_.end()) l->second.second[parent]++;
  }
  Status WriteUsage() {
    std::vector<std::function<Status(TreeWriter&)>> ops;
    for (const auto& [dir, d] : dirstats_) ops.push_back([dir, d](TreeWriter& w) { return w.PutDirStat(dir, d); });
    for (const auto& [ino, l] : linked_) {
      ParentCounts p(l.second.begin(), l.second.end());
      uint32_t names = 0;
      for (const auto& [dir, n] : p) names += n;
      if (names > 1) ops.push_back([ino, p](TreeWriter& w) { return w.PutParents(ino, p); });
    }
    // Slices shared by clones (docs/format.md, "Clones"): their reference
    // counts, from how many chunk lists hold each.
    for (const auto& [id, use] : slice_lists_)
      if (use.second > 1)
        ops.push_back([id = id, size = use.first, n = use.second](TreeWriter& w) { return w.PutSliceRef(id, size, n - 1); });
    for (size_t from = 0; from < ops.size(); from += opts_.batch_records) {
      RETURN_IF_ERROR(meta_->WriteTree([&](TreeWriter& w) -> Status {
        for (size_t i = from; i < std::min(ops.size(), from + opts_.batch_records); ++i) RETURN_IF_ERROR(ops[i](w));
        return Status::OK();
      }));
    }
    return Status::OK();
  }

  struct PendingEntry {
    Ino parent;
    std::string name;
    Ino ino;
    uint32_t mode;
  };

  // Slice id -> (size, chunk lists holding it).
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> slice_lists_;
  Meta* meta_;
  const LoadOptions& opts_;
  DumpStats* stats_;
  uint64_t line_no_ = 0;
  uint64_t ticks_ = 0;
  bool ended_ = false;
  bool root_seen_ = false;
  Format format_;
  std::map<std::string, int64_t> counters_;
  Ino root_ = kRootIno;
  Ino max_ino_ = 0;
  uint64_t max_slice_ = 0;
  uint64_t used_space_ = 0;
  InodeRecord pending_;  // the last inode read: "c" lines may add chunks to it
  bool has_pending_ = false;
  std::vector<InodeRecord> inodes_;
  std::vector<PendingEntry> entries_;
  size_t batch_bytes_ = 0;
  std::unordered_map<Ino, DirStat> dirstats_;          // one per directory with entries
  std::unordered_map<Ino, std::vector<Ino>> waiting_;  // named, record not read yet -> its directories
  std::unordered_map<Ino, std::pair<uint64_t, std::map<Ino, uint32_t>>> linked_;  // nlink > 1: length, names per dir
};

}  // namespace

Status Load(Meta* meta, const LoadOptions& opts, const LineReader& in, DumpStats* stats, Format* format) {
  ASSIGN_OR_RETURN(bool empty, meta->IsEmpty());
  if (!empty)
    return Status::Err(EEXIST, "the metadata engine is not empty: load needs an empty one (a new database, an empty "
                               "Redis database); nothing was changed");
  *stats = DumpStats{};
  Loader loader(meta, opts, stats);
  Status st;
  std::string line;
  for (;;) {
    auto more = in(&line);
    if (!more.ok()) {
      st = more.status().With("reading the dump");
      break;
    }
    if (!*more) {
      st = loader.Finish(format);
      break;
    }
    st = loader.Line(line);
    if (!st.ok()) break;
  }
  if (st.ok()) return st;
  Status undo = meta->Reset();
  if (!undo.ok())
    return Status::Err(EIO, fmt::format("{}; emptying the engine again failed too ({}): it holds part of the dump, "
                                        "empty it before loading again",
                                        st.ToString(), undo.ToString()));
  return st.With("nothing was loaded");
}

}  // namespace tessera::meta
