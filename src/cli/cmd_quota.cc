// tessera quota set|get|list|delete|check: directory, user and group quotas
// (docs/operations.md, "Quotas"). The limits and usage live in the metadata
// engine; mounted clients enforce them (vfs/quota.h) and pick up a new or
// changed quota within 0.4 s.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace tessera::cli {

namespace {

using meta::Ino;
using meta::Quota;
using meta::QuotaKey;
using meta::QuotaKind;
using meta::QuotaUsage;

int64_t SpaceOf(const meta::Attr& a) { return a.IsFile() ? int64_t((a.length + 4095) & ~uint64_t(4095)) : 0; }

// Visits every entry below directory `top`, breadth first, a page of each
// directory at a time (the trash excluded: no quota covers it). Reads the
// tree itself, not the directory statistics: those of a client killed
// before its flush may lag.
Status WalkTree(meta::Meta* m, Ino top, const std::function<void(const meta::Entry&)>& visit) {
  const auto ctx = meta::Context::Root();
  std::deque<Ino> dirs{top};
  Progress progress;
  uint64_t seen = 0;
  while (!dirs.empty()) {
    const Ino dir = dirs.front();
    dirs.pop_front();
    std::string after;
    bool more = true;
    while (more) {
      std::vector<meta::Entry> page;
      Status st = m->ReaddirPage(ctx, dir, true, after, 1000, &page, &more);
      if (st.not_found()) break;  // removed meanwhile
      RETURN_IF_ERROR(st.With(fmt::format("listing directory inode {}", dir)));
      for (const auto& e : page) {
        after = e.name;
        if (meta::IsTrashIno(e.ino)) continue;
        if (e.attr.IsDir()) dirs.push_back(e.ino);
        visit(e);
        if (++seen % 10000 == 0) progress.Show(fmt::format("counted {} entries", seen));
      }
    }
  }
  progress.Done();
  return Status::OK();
}

// Usage by owner: every inode but the root once (hard links too); regular
// files also their length rounded up to 4 KiB.
struct OwnerUsage {
  std::map<uint32_t, QuotaUsage> users, groups;
};

Status WalkOwners(meta::Meta* m, OwnerUsage* out) {
  std::set<Ino> linked;  // files with several names, counted once
  return WalkTree(m, meta::kRootIno, [&](const meta::Entry& e) {
    if (!e.attr.IsDir() && e.attr.nlink > 1 && !linked.insert(e.ino).second) return;
    for (auto* u : {&out->users[e.attr.uid], &out->groups[e.attr.gid]}) {
      u->space += SpaceOf(e.attr);
      u->inodes += 1;
    }
  });
}

// The usage below directory `ino` (not the directory itself): every name
// counts, as in the directory statistics.
Status DirUsage(meta::Meta* m, Ino ino, QuotaUsage* out) {
  *out = {};
  return WalkTree(m, ino, [&](const meta::Entry& e) {
    out->space += SpaceOf(e.attr);
    out->inodes += 1;
  });
}

// The path of directory `ino` in the volume, from its parents (for lists).
std::string PathOf(meta::Meta* m, Ino ino) {
  const auto ctx = meta::Context::Root();
  std::string path;
  for (int depth = 0; ino != meta::kRootIno && depth < 1000; ++depth) {
    meta::Attr attr;
    if (!m->GetAttr(ctx, ino, &attr).ok()) return fmt::format("(inode {}, removed)", ino);
    std::string name;
    std::string after;
    bool more = true;
    while (more && name.empty()) {
      std::vector<meta::Entry> page;
      if (!m->ReaddirPage(ctx, attr.parent, false, after, 1000, &page, &more).ok()) break;
      for (const auto& e : page) {
        after = e.name;
        if (e.ino == ino) name = e.name;
      }
    }
    if (name.empty()) return fmt::format("(inode {})", ino);
    path = "/" + name + path;
    ino = attr.parent;
  }
  return path.empty() ? "/" : path;
}

std::string Target(meta::Meta* m, const QuotaKey& k) {
  switch (k.kind) {
    case QuotaKind::kDir: return "dir " + PathOf(m, Ino(k.id));
    case QuotaKind::kUser: return fmt::format("uid {}", k.id);
    case QuotaKind::kGroup: return fmt::format("gid {}", k.id);
  }
  return "?";
}

std::string Of(int64_t used, int64_t max, bool bytes) {
  std::string u = bytes ? HumanSize(uint64_t(std::max<int64_t>(0, used))) : std::to_string(used);
  if (max <= 0) return u + " (no limit)";
  std::string l = bytes ? HumanSize(uint64_t(max)) : std::to_string(max);
  return fmt::format("{} of {} ({:.0f}%)", u, l, 100.0 * double(used) / double(max));
}

void Print(meta::Meta* m, const QuotaKey& k, const Quota& q) {
  std::printf("%-30s space %-32s inodes %s\n", Target(m, k).c_str(), Of(q.used_space, q.max_space, true).c_str(),
              Of(q.used_inodes, q.max_inodes, false).c_str());
}

}  // namespace

int QuotaCmd(const QuotaOptions& o) {
  const std::string& a = o.action;
  const int targets = int(!o.path.empty()) + int(o.uid.has_value()) + int(o.gid.has_value());
  if (targets > 1) return Fail("give one of --path, --uid and --gid");
  if (targets == 0 && (a == "set" || a == "get" || a == "delete"))
    return Fail(fmt::format("quota {} needs --path (a directory in the volume), --uid or --gid", a));
  if (a != "set" && (o.capacity_gib || o.inodes)) return Fail("--capacity and --inodes go with quota set");
  if (a == "set" && !o.capacity_gib && !o.inodes) return Fail("quota set needs --capacity GiB and/or --inodes N");
  if (o.capacity_gib && (!std::isfinite(*o.capacity_gib) || *o.capacity_gib < 0 || *o.capacity_gib > 1e9))
    return Fail(fmt::format("--capacity {}: give GiB as a number from 0 (no limit) to 1e9", *o.capacity_gib));
  if (o.repair && a != "check") return Fail("--repair goes with quota check");

  auto vol = OpenVolume(o.meta_url);
  if (!vol.ok()) return Fail(vol.status().message().empty() ? vol.status().ToString() : vol.status().message());
  meta::Meta* m = vol->meta.get();

  std::optional<QuotaKey> key;
  if (!o.path.empty()) {
    auto ino = ResolvePath(m, o.path);
    if (!ino.ok()) return Fail(ino.status().With(o.path).ToString());
    meta::Attr attr;
    Status st = m->GetAttr(meta::Context::Root(), *ino, &attr);
    if (!st.ok()) return Fail(st.With(o.path).ToString());
    if (!attr.IsDir()) return Fail(o.path + ": not a directory (directory quotas are set on directories)");
    key = QuotaKey{QuotaKind::kDir, *ino};
  } else if (o.uid) {
    key = QuotaKey{QuotaKind::kUser, *o.uid};
  } else if (o.gid) {
    key = QuotaKey{QuotaKind::kGroup, *o.gid};
  }

  std::vector<std::pair<QuotaKey, Quota>> all;
  if (Status st = m->ListQuotas(&all); !st.ok()) return Fail(st.With("reading the quotas").ToString());
  std::map<QuotaKey, Quota> quotas(all.begin(), all.end());
  auto found = key ? quotas.find(*key) : quotas.end();

  // What the tree holds now, for a new quota or a check.
  std::optional<OwnerUsage> owners;
  auto actual = [&](const QuotaKey& k, QuotaUsage* u) -> Status {
    if (k.kind == QuotaKind::kDir) return DirUsage(m, Ino(k.id), u);
    if (!owners) {
      owners.emplace();
      RETURN_IF_ERROR(WalkOwners(m, &*owners));
    }
    const auto& by = k.kind == QuotaKind::kUser ? owners->users : owners->groups;
    auto it = by.find(uint32_t(k.id));
    *u = it == by.end() ? QuotaUsage{} : it->second;
    return Status::OK();
  };

  if (a == "set") {
    Quota q = found != quotas.end() ? found->second : Quota{};
    if (o.capacity_gib) q.max_space = int64_t(std::llround(*o.capacity_gib * double(1ull << 30)));
    if (o.inodes) q.max_inodes = int64_t(*o.inodes);
    const bool fresh = found == quotas.end();
    if (fresh) {
      QuotaUsage u;
      if (Status st = actual(*key, &u); !st.ok()) return Fail(st.With("counting the current usage").ToString());
      q.used_space = u.space;
      q.used_inodes = u.inodes;
    }
    if (Status st = m->SetQuota(*key, q, fresh); !st.ok()) return Fail(st.With("writing the quota").ToString());
    Print(m, *key, q);
    if ((q.max_space > 0 && q.used_space > q.max_space) || (q.max_inodes > 0 && q.used_inodes > q.max_inodes))
      std::fprintf(stderr, "tessera: note: the usage is already over the limit: growing it fails with EDQUOT\n");
    return 0;
  }
  if (a == "get") {
    if (found == quotas.end()) return Fail(Target(m, *key) + ": no quota");
    Print(m, found->first, found->second);
    return 0;
  }
  if (a == "delete") {
    if (found == quotas.end()) return Fail(Target(m, *key) + ": no quota");
    if (Status st = m->DeleteQuota(*key); !st.ok()) return Fail(st.With("deleting the quota").ToString());
    std::printf("deleted the quota of %s\n", Target(m, *key).c_str());
    return 0;
  }
  if (a == "list") {
    if (quotas.empty()) std::printf("no quotas\n");
    for (const auto& [k, q] : quotas) Print(m, k, q);
    return 0;
  }
  // check
  if (key && found == quotas.end()) return Fail(Target(m, *key) + ": no quota");
  int wrong = 0;
  for (const auto& [k, q] : quotas) {
    if (key && k != *key) continue;
    QuotaUsage u;
    if (Status st = actual(k, &u); !st.ok()) return Fail(st.With("counting the usage of " + Target(m, k)).ToString());
    if (u.space == q.used_space && u.inodes == q.used_inodes) {
      std::printf("%-30s ok: %s, %lld inodes\n", Target(m, k).c_str(), HumanSize(uint64_t(u.space)).c_str(),
                  static_cast<long long>(u.inodes));
      continue;
    }
    ++wrong;
    std::printf("%-30s recorded %lld bytes, %lld inodes; the tree holds %lld bytes, %lld inodes%s\n",
                Target(m, k).c_str(), static_cast<long long>(q.used_space), static_cast<long long>(q.used_inodes),
                static_cast<long long>(u.space), static_cast<long long>(u.inodes), o.repair ? " (repaired)" : "");
    if (o.repair) {
      Quota fixed = q;
      fixed.used_space = u.space;
      fixed.used_inodes = u.inodes;
      if (Status st = m->SetQuota(k, fixed, true); !st.ok()) return Fail(st.With("repairing the quota").ToString());
    }
  }
  if (wrong > 0 && !o.repair) {
    std::fprintf(stderr, "tessera: %d quota(s) differ from the tree (clients mounted now may have up to 0.4 s of "
                 "changes not sent yet); run with --repair to set them from the tree\n", wrong);
    return 1;
  }
  return 0;
}

}  // namespace tessera::cli
