#include "meta/summary.h"

#include <sys/stat.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "meta/meta_util.h"

namespace tessera::meta {

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();
constexpr size_t kPage = 1000;

// A directory of the tree, in breadth-first order (parents before children).
struct DirNode {
  DirNode(Ino i, size_t p, int l, std::string n, uint32_t nl) : ino(i), parent(p), level(l), name(std::move(n)), nlink(nl) {}
  Ino ino;
  size_t parent;  // index in the list; kNone for the top
  int level;
  std::string name;
  uint32_t nlink;
  bool listed = false;
  int64_t subdirs = 0;
  bool file_rows = false;          // its files are rows of their own
  std::vector<SummaryNode> files;  // when file_rows
  DirStat own;
  TreeUsage total;
};

void Add(TreeUsage* to, const TreeUsage& u) {
  to->length += u.length;
  to->space += u.space;
  to->files += u.files;
  to->dirs += u.dirs;
}

TreeUsage FileUsage(const Attr& a) {
  const DirStat d = EntryUsage(a);
  return TreeUsage{d.length, d.space, 1, 0};
}

// Biggest first; the rest folded into one row.
void Trim(std::vector<SummaryNode>* rows, size_t keep) {
  std::sort(rows->begin(), rows->end(), [](const SummaryNode& a, const SummaryNode& b) {
    if (a.usage.space != b.usage.space) return a.usage.space > b.usage.space;
    if (a.usage.length != b.usage.length) return a.usage.length > b.usage.length;
    return a.name < b.name;
  });
  if (rows->size() <= keep) return;
  SummaryNode rest;
  for (size_t i = keep; i < rows->size(); ++i) Add(&rest.usage, (*rows)[i].usage);
  rest.name = fmt::format("({} more)", rows->size() - keep);
  rows->resize(keep);
  rows->push_back(std::move(rest));
}

}  // namespace

Status Summarize(Meta* meta, Ino top, const std::string& name, const SummaryOptions& opts, SummaryNode* out) {
  const Context root = Context::Root();
  Attr ta;
  RETURN_IF_ERROR(meta->GetAttr(root, top, &ta));
  *out = SummaryNode{name, top, ta.IsDir(), {}, {}};
  if (!ta.IsDir()) {
    out->usage = FileUsage(ta);
    return Status::OK();
  }

  std::vector<DirNode> dirs;
  dirs.emplace_back(top, kNone, 0, name, ta.nlink);
  std::vector<Entry> page;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const bool shown = dirs[i].level < opts.depth;
    bool file_rows = false;
    if (shown) {
      std::vector<DirStat> s;
      RETURN_IF_ERROR(meta->GetDirStats({dirs[i].ino}, &s));
      file_rows = s.at(0).inodes <= int64_t(opts.file_rows_limit);
    }
    // No subdirectory: the statistics say it all. An hour's directory in the
    // trash does not count its subdirectories (CountSubdir): listed.
    if (!file_rows && dirs[i].nlink <= 2 && !IsTrashHourIno(dirs[i].ino)) continue;
    dirs[i].listed = true;
    dirs[i].file_rows = file_rows;
    std::string after;
    bool more = true;
    while (more) {
      RETURN_IF_ERROR(meta->ReaddirPage(root, dirs[i].ino, file_rows, after, kPage, &page, &more)
                          .With(fmt::format("listing directory {}", dirs[i].ino)));
      if (page.empty()) break;
      after = page.back().name;
      for (auto& e : page) {
        if ((e.attr.mode & S_IFMT) == S_IFDIR) {
          Attr a = e.attr;
          if (!file_rows) {
            Status st = meta->GetAttr(root, e.ino, &a);
            if (st.not_found()) continue;  // removed meanwhile
            RETURN_IF_ERROR(st);
          }
          dirs[i].subdirs++;
          dirs.emplace_back(e.ino, i, dirs[i].level + 1, e.name, a.nlink);
        } else if (file_rows) {
          dirs[i].files.push_back(SummaryNode{e.name, e.ino, false, FileUsage(e.attr), {}});
        }
      }
    }
  }

  // The statistics of every directory, then totals from the leaves up.
  std::vector<Ino> inos;
  for (const auto& d : dirs) inos.push_back(d.ino);
  std::vector<DirStat> stats;
  for (size_t from = 0; from < inos.size(); from += kPage) {
    std::vector<Ino> batch(inos.begin() + from, inos.begin() + std::min(inos.size(), from + kPage));
    std::vector<DirStat> s;
    RETURN_IF_ERROR(meta->GetDirStats(batch, &s));
    stats.insert(stats.end(), s.begin(), s.end());
  }
  for (size_t i = dirs.size(); i-- > 0;) {
    DirNode& d = dirs[i];
    d.own = stats[i];
    const int64_t subdirs = d.listed ? d.subdirs : std::max<int64_t>(int64_t(d.nlink) - 2, 0);
    Add(&d.total, TreeUsage{d.own.length, d.own.space, std::max<int64_t>(d.own.inodes - subdirs, 0), 1});
    if (d.parent != kNone) Add(&dirs[d.parent].total, d.total);
  }

  // The rows, down to the requested depth.
  std::vector<std::vector<size_t>> kids(dirs.size());
  for (size_t i = 1; i < dirs.size(); ++i) kids[dirs[i].parent].push_back(i);
  auto build = [&](auto&& self, size_t i, SummaryNode* node) -> void {
    DirNode& d = dirs[i];
    node->usage = d.total;
    if (d.level >= opts.depth) return;
    for (size_t k : kids[i]) {
      SummaryNode child{dirs[k].name, dirs[k].ino, true, {}, {}};
      self(self, k, &child);
      node->children.push_back(std::move(child));
    }
    if (d.file_rows) {
      for (auto& f : d.files) node->children.push_back(std::move(f));
    } else {
      const int64_t subdirs = d.listed ? d.subdirs : 0;
      const int64_t files = std::max<int64_t>(d.own.inodes - subdirs, 0);
      if (files > 0)
        node->children.push_back(
            SummaryNode{fmt::format("({} files)", files), 0, false, TreeUsage{d.own.length, d.own.space, files, 0}, {}});
    }
    Trim(&node->children, opts.entries);
  };
  build(build, 0, out);
  return Status::OK();
}

}  // namespace tessera::meta
