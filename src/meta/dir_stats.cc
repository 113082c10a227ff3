// Directory statistics shared by every engine (meta_util.h): the client's
// buffer of unflushed changes, and what fsck expects the records to be.
#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "meta/meta_util.h"

namespace tessera::meta {

uint64_t NewClientId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t(rd()) << 32) ^ rd();
  return id;
}

void DirStatBuffer::Merge(const StatDeltas& deltas) {
  if (deltas.empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [dir, d] : deltas) pending_[dir] += d;
}

std::unordered_map<Ino, DirStat> DirStatBuffer::Take() {
  std::lock_guard<std::mutex> g(mu_);
  std::unordered_map<Ino, DirStat> out;
  out.swap(pending_);
  std::erase_if(out, [](const auto& kv) { return kv.second == DirStat{}; });
  for (const auto& [dir, d] : out) inflight_[dir] += d;
  return out;
}

void DirStatBuffer::Restore(const std::unordered_map<Ino, DirStat>& taken) {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [dir, d] : taken) {
    pending_[dir] += d;
    inflight_[dir] += Negated(d);
  }
  std::erase_if(inflight_, [](const auto& kv) { return kv.second == DirStat{}; });
}

void DirStatBuffer::Done() {
  std::lock_guard<std::mutex> g(mu_);
  inflight_.clear();
}

DirStat DirStatBuffer::Pending(Ino dir) const {
  std::lock_guard<std::mutex> g(mu_);
  DirStat d;
  if (auto it = pending_.find(dir); it != pending_.end()) d += it->second;
  if (auto it = inflight_.find(dir); it != inflight_.end()) d += it->second;
  return d;
}

UsageRecords ExpectedUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries) {
  UsageRecords u;
  std::unordered_map<Ino, std::map<Ino, uint32_t>> parents;
  for (const auto& [parent, name, child] : entries) {
    auto c = attrs.find(child);
    if (c == attrs.end() || attrs.count(parent) == 0) continue;  // dangling: not counted
    u.dirstats[parent] += EntryUsage(c->second);
    if (!c->second.IsDir()) parents[child][parent]++;
  }
  for (auto& [ino, by_dir] : parents) {
    uint32_t names = 0;
    for (const auto& [dir, n] : by_dir) names += n;
    if (names > 1) u.parents[ino] = ParentCounts(by_dir.begin(), by_dir.end());
  }
  return u;
}

namespace {

std::string Show(const DirStat& d) { return fmt::format("{}/{}/{}", d.length, d.space, d.inodes); }

// The only directory naming a singly-linked non-directory, per inode.
std::unordered_map<Ino, Ino> SoleParents(const std::unordered_map<Ino, Attr>& attrs,
                                         const std::vector<EntryTriple>& entries, const UsageRecords& expected) {
  std::unordered_map<Ino, Ino> sole;
  for (const auto& [parent, name, child] : entries) {
    auto c = attrs.find(child);
    if (c == attrs.end() || attrs.count(parent) == 0 || c->second.IsDir()) continue;
    if (expected.parents.count(child) == 0) sole[child] = parent;
  }
  return sole;
}

}  // namespace

namespace {

// How the stored usage records differ from what the tree says: what fsck
// reports and --repair writes.
struct UsageDiff {
  std::vector<std::tuple<Ino, DirStat, DirStat>> dirstats;        // directory, stored, want
  std::vector<std::pair<Ino, DirStat>> stale_dirstats;            // record of no directory
  std::vector<std::tuple<Ino, ParentCounts, ParentCounts>> parents;  // file, stored, want
  std::vector<std::pair<Ino, ParentCounts>> stale_parents;        // records of a file with one name
  std::vector<std::tuple<Ino, Ino, Ino>> file_parents;            // file, its parent attribute, its directory
};

UsageDiff DiffUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                    const UsageRecords& stored) {
  const UsageRecords want = ExpectedUsage(attrs, entries);
  UsageDiff d;
  for (const auto& [ino, a] : attrs) {
    if (!a.IsDir()) continue;
    auto w = want.dirstats.find(ino);
    auto s = stored.dirstats.find(ino);
    const DirStat wd = w == want.dirstats.end() ? DirStat{} : w->second;
    const DirStat sd = s == stored.dirstats.end() ? DirStat{} : s->second;
    if (wd != sd) d.dirstats.emplace_back(ino, sd, wd);
  }
  for (const auto& [ino, st] : stored.dirstats)
    if (attrs.count(ino) == 0 || !attrs.at(ino).IsDir()) d.stale_dirstats.emplace_back(ino, st);
  for (const auto& [ino, p] : want.parents) {
    auto s = stored.parents.find(ino);
    if (s == stored.parents.end() || s->second != p)
      d.parents.emplace_back(ino, s == stored.parents.end() ? ParentCounts{} : s->second, p);
  }
  for (const auto& [ino, p] : stored.parents)
    if (want.parents.count(ino) == 0) d.stale_parents.emplace_back(ino, p);
  for (const auto& [ino, parent] : SoleParents(attrs, entries, want))
    if (attrs.at(ino).parent != parent) d.file_parents.emplace_back(ino, attrs.at(ino).parent, parent);
  return d;
}

std::string ShowParents(const ParentCounts& p) {
  std::string s;
  for (const auto& [dir, n] : p) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", dir, n);
  return s.empty() ? std::string("none") : s;
}

}  // namespace

void CheckUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                const UsageRecords& stored, std::vector<std::string>* problems) {
  const UsageDiff d = DiffUsage(attrs, entries, stored);
  std::map<Ino, std::string> found;  // ordered output, one line per inode
  for (const auto& [ino, sd, wd] : d.dirstats)
    found[ino] = fmt::format("directory {}: statistics (length/space/entries) {}, its entries add up to {}", ino,
                             Show(sd), Show(wd));
  for (const auto& [ino, sd] : d.stale_dirstats)
    found[ino] = fmt::format("inode {}: statistics record {} of a directory that does not exist", ino, Show(sd));
  for (const auto& [ino, sp, wp] : d.parents)
    found[ino] = fmt::format("inode {}: parent records {}, its names are in {}", ino, ShowParents(sp), ShowParents(wp));
  for (const auto& [ino, sp] : d.stale_parents)
    found[ino] = fmt::format("inode {}: parent records {} but it has fewer than two names", ino, ShowParents(sp));
  for (const auto& [ino, has, in] : d.file_parents)
    found.emplace(ino, fmt::format("inode {}: parent {}, its name is in directory {}", ino, has, in));
  for (auto& [ino, line] : found) problems->push_back(std::move(line));
}

void SettleFlush(const Status& st, const std::unordered_map<Ino, DirStat>& taken, uint64_t seq, DirStatBuffer* buffer,
                 std::unordered_map<Ino, DirStat>* doubtful, uint64_t* doubtful_seq) {
  if (st.ok()) {
    doubtful->clear();
    buffer->Done();
  } else if (st.outcome_unknown()) {
    for (const auto& [dir, d] : taken) (*doubtful)[dir] += d;
    *doubtful_seq = seq;
  } else {
    buffer->Restore(taken);  // not written: tried again at the next flush
  }
}

void CheckCounters(const std::unordered_map<Ino, Attr>& attrs, int64_t used_space, int64_t inodes,
                   std::vector<std::string>* problems) {
  int64_t used = 0;
  for (const auto& [ino, a] : attrs)
    if (a.IsFile()) used += int64_t(Align4K(a.length));
  if (used != used_space)
    problems->push_back(fmt::format("volume: used space counter {}, the files add up to {}", used_space, used));
  if (int64_t(attrs.size()) != inodes)
    problems->push_back(fmt::format("volume: inode counter {}, the volume has {} inodes", inodes, attrs.size()));
}

void RepairUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                 const UsageRecords& stored, std::map<Ino, Attr>* fixed,
                 std::vector<std::function<Status(TreeWriter&)>>* ops, std::vector<std::string>* changes) {
  const UsageDiff d = DiffUsage(attrs, entries, stored);
  std::map<Ino, std::string> described;
  for (const auto& [ino, sd, wd] : d.dirstats) {
    described[ino] = fmt::format("directory {}: statistics {} -> {}", ino, Show(sd), Show(wd));
    ops->push_back([ino, wd](TreeWriter& w) { return w.PutDirStat(ino, wd); });
  }
  for (const auto& [ino, sd] : d.stale_dirstats) {
    described[ino] = fmt::format("inode {}: removed the statistics record of a directory that does not exist", ino);
    ops->push_back([ino](TreeWriter& w) { return w.PutDirStat(ino, DirStat{}); });
  }
  for (const auto& [ino, sp, wp] : d.parents) {
    described[ino] = fmt::format("inode {}: parent records rebuilt ({} directories)", ino, wp.size());
    ops->push_back([ino, wp](TreeWriter& w) { return w.PutParents(ino, wp); });
  }
  for (const auto& [ino, sp] : d.stale_parents) {
    described[ino] = fmt::format("inode {}: removed parent records (fewer than two names)", ino);
    ops->push_back([ino](TreeWriter& w) { return w.PutParents(ino, {}); });
  }
  for (const auto& [ino, has, in] : d.file_parents) {
    auto f = fixed->find(ino);
    Attr b = f == fixed->end() ? attrs.at(ino) : f->second;
    if (b.parent == in) continue;
    described.emplace(ino, fmt::format("inode {}: parent {} -> {}", ino, b.parent, in));
    b.parent = in;
    (*fixed)[ino] = b;
  }
  for (auto& [ino, line] : described) changes->push_back(std::move(line));
}

}  // namespace tessera::meta
