// Directory statistics shared by every engine (meta_util.h): the client's
// buffer of unflushed changes, and what fsck expects the records to be.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "meta/meta_util.h"

namespace tessera::meta {

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
  return out;
}

void DirStatBuffer::Restore(const std::unordered_map<Ino, DirStat>& taken) {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [dir, d] : taken) pending_[dir] += d;
}

DirStat DirStatBuffer::Pending(Ino dir) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = pending_.find(dir);
  return it == pending_.end() ? DirStat{} : it->second;
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

void CheckUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                const UsageRecords& stored, std::vector<std::string>* problems) {
  const UsageRecords want = ExpectedUsage(attrs, entries);
  std::map<Ino, std::string> found;  // ordered output
  for (const auto& [ino, a] : attrs) {
    if (!a.IsDir()) continue;
    auto w = want.dirstats.find(ino);
    auto s = stored.dirstats.find(ino);
    const DirStat wd = w == want.dirstats.end() ? DirStat{} : w->second;
    const DirStat sd = s == stored.dirstats.end() ? DirStat{} : s->second;
    if (wd != sd)
      found[ino] = fmt::format("directory {}: statistics (length/space/entries) {}, its entries add up to {}", ino,
                               Show(sd), Show(wd));
  }
  for (const auto& [ino, d] : stored.dirstats)
    if (attrs.count(ino) == 0 || !attrs.at(ino).IsDir())
      found[ino] = fmt::format("inode {}: statistics record {} of a directory that does not exist", ino, Show(d));
  auto show_parents = [](const ParentCounts& p) {
    std::string s;
    for (const auto& [dir, n] : p) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", dir, n);
    return s.empty() ? std::string("none") : s;
  };
  for (const auto& [ino, p] : want.parents) {
    auto s = stored.parents.find(ino);
    if (s == stored.parents.end() || s->second != p)
      found[ino] = fmt::format("inode {}: parent records {}, its names are in {}", ino,
                               show_parents(s == stored.parents.end() ? ParentCounts{} : s->second), show_parents(p));
  }
  for (const auto& [ino, p] : stored.parents)
    if (want.parents.count(ino) == 0)
      found[ino] = fmt::format("inode {}: parent records {} but it has fewer than two names", ino, show_parents(p));
  for (const auto& [ino, parent] : SoleParents(attrs, entries, want))
    if (attrs.at(ino).parent != parent && found.count(ino) == 0)
      found[ino] = fmt::format("inode {}: parent {}, its name is in directory {}", ino, attrs.at(ino).parent, parent);
  for (auto& [ino, line] : found) problems->push_back(std::move(line));
}

void RepairUsage(const std::unordered_map<Ino, Attr>& attrs, const std::vector<EntryTriple>& entries,
                 const UsageRecords& stored, std::map<Ino, Attr>* fixed,
                 std::vector<std::function<Status(TreeWriter&)>>* ops, std::vector<std::string>* changes) {
  const UsageRecords want = ExpectedUsage(attrs, entries);
  std::map<Ino, std::string> described;
  for (const auto& [ino, a] : attrs) {
    if (!a.IsDir()) continue;
    auto w = want.dirstats.find(ino);
    auto s = stored.dirstats.find(ino);
    const DirStat wd = w == want.dirstats.end() ? DirStat{} : w->second;
    const DirStat sd = s == stored.dirstats.end() ? DirStat{} : s->second;
    if (wd == sd) continue;
    described[ino] = fmt::format("directory {}: statistics {} -> {}", ino, Show(sd), Show(wd));
    ops->push_back([ino, wd](TreeWriter& tw) { return tw.PutDirStat(ino, wd); });
  }
  for (const auto& [ino, d] : stored.dirstats) {
    if (attrs.count(ino) != 0 && attrs.at(ino).IsDir()) continue;
    described[ino] = fmt::format("inode {}: removed the statistics record of a directory that does not exist", ino);
    ops->push_back([ino](TreeWriter& w) { return w.PutDirStat(ino, DirStat{}); });
  }
  for (const auto& [ino, p] : want.parents) {
    auto s = stored.parents.find(ino);
    if (s != stored.parents.end() && s->second == p) continue;
    described[ino] = fmt::format("inode {}: parent records rebuilt ({} directories)", ino, p.size());
    ops->push_back([ino, p](TreeWriter& w) { return w.PutParents(ino, p); });
  }
  for (const auto& [ino, p] : stored.parents) {
    if (want.parents.count(ino) != 0) continue;
    described[ino] = fmt::format("inode {}: removed parent records (fewer than two names)", ino);
    ops->push_back([ino](TreeWriter& w) { return w.PutParents(ino, {}); });
  }
  for (const auto& [ino, parent] : SoleParents(attrs, entries, want)) {
    auto f = fixed->find(ino);
    Attr b = f == fixed->end() ? attrs.at(ino) : f->second;
    if (b.parent == parent) continue;
    described.emplace(ino, fmt::format("inode {}: parent {} -> {}", ino, b.parent, parent));
    b.parent = parent;
    (*fixed)[ino] = b;
  }
  for (auto& [ino, line] : described) changes->push_back(std::move(line));
}

}  // namespace tessera::meta
