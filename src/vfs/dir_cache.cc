#include "vfs/dir_cache.h"

#include <algorithm>
#include <chrono>

namespace tessera::vfs {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void DirCache::Enable(int grace_ms) {
  usable_from_ms_ = NowMs() + std::max(grace_ms, 0);
  enabled_.store(true, std::memory_order_release);
}

bool DirCache::Usable() const {
  return enabled() && NowMs() >= usable_from_ms_.load(std::memory_order_relaxed);
}

bool DirCache::Get(meta::Ino ino, meta::Attr* out) {
  if (!Usable()) return false;
  std::shared_lock lock(mu_);
  auto it = dirs_.find(ino);
  if (it == dirs_.end()) return false;
  *out = it->second.attr;
  attr_hits_->Inc();
  return true;
}

bool DirCache::Absent(meta::Ino dir, const std::string& name, meta::Attr* dir_attr) {
  if (!Usable() || name.empty() || name.size() > meta::kMaxName) return false;
  std::shared_lock lock(mu_);
  auto it = dirs_.find(dir);
  if (it == dirs_.end() || !it->second.complete || it->second.names.count(name) != 0) return false;
  *dir_attr = it->second.attr;
  absent_hits_->Inc();
  return true;
}

DirCache::Ticket DirCache::Begin(meta::Ino a, meta::Ino b) {
  Ticket t;
  if (!enabled()) return t;
  std::lock_guard lock(mu_);
  t.armed = true;
  t.epoch = epoch_;
  t.changes = changes_;
  t.dirs = {a, b == a ? 0 : b};
  for (size_t i = 0; i < 2; ++i)
    if (t.dirs[i] != 0) t.gens[i] = ++gens_[Slot(t.dirs[i])];
  return t;
}

void DirCache::ForgetNamesLocked(Dir& d) {
  if (d.complete) names_ -= d.names.size();
  d.complete = false;
  d.names = {};
}

void DirCache::AddNameLocked(Dir& d, const std::string& name) {
  if (!d.complete) return;
  if (d.names.size() >= kMaxNamesPerDir || names_ >= kMaxNames) return ForgetNamesLocked(d);
  if (d.names.insert(name).second) ++names_;
}

void DirCache::DropLocked(meta::Ino ino) {
  ++gens_[Slot(ino)];
  auto it = dirs_.find(ino);
  if (it == dirs_.end()) return;
  ForgetNamesLocked(it->second);
  dirs_.erase(it);
}

void DirCache::ClearLocked() {
  dirs_.clear();
  names_ = 0;
  ++epoch_;
}

DirCache::Dir& DirCache::PutLocked(meta::Ino ino, const meta::Attr& attr) {
  if (dirs_.size() >= kMaxDirs && dirs_.count(ino) == 0) {
    dirs_.clear();
    names_ = 0;
  }
  Dir& d = dirs_[ino];
  d.attr = attr;
  return d;
}

void DirCache::End(const Ticket& t, const meta::Context::Effects* effects, const Names& names) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  if (effects != nullptr && !effects->reported) return ClearLocked();  // the engine did not say what it changed
  // Valid only if nothing else touched the slot since Begin.
  const bool same_epoch = t.armed && t.epoch == epoch_;
  bool valid[2];
  for (size_t i = 0; i < 2; ++i) valid[i] = same_epoch && gens_[Slot(t.dirs[i])] == t.gens[i];
  // What the change touched is forgotten unless the report puts it back,
  // with the names it had when it was complete.
  std::array<std::unordered_set<std::string>, 2> carried;
  std::array<bool, 2> complete{false, false};
  for (size_t i = 0; i < 2; ++i) {
    if (t.dirs[i] == 0) continue;
    auto it = dirs_.find(t.dirs[i]);
    if (valid[i] && it != dirs_.end() && it->second.complete) {
      complete[i] = true;
      names_ -= it->second.names.size();
      carried[i] = std::move(it->second.names);
      it->second.complete = false;
    }
    DropLocked(t.dirs[i]);
  }
  if (effects == nullptr) return;
  for (meta::Ino ino : effects->others) DropLocked(ino);
  const bool usable = Usable();
  for (const auto& [ino, attr] : effects->parents) {
    if (!attr.IsDir() || meta::IsTrashIno(ino)) continue;
    const size_t i = ino == t.dirs[0] ? 0 : ino == t.dirs[1] ? 1 : 2;
    if (i == 2) {  // not announced at Begin: it may race with anything
      DropLocked(ino);
      continue;
    }
    if (!valid[i] || !usable) continue;
    Dir& d = PutLocked(ino, attr);
    if (complete[i]) {
      d.complete = true;
      d.names = std::move(carried[i]);
      names_ += d.names.size();
      if (names.removed_from == ino && d.names.erase(names.removed) != 0) --names_;
      if (names.added_to == ino) AddNameLocked(d, names.added);
    }
  }
  // A directory just made is empty, unless another client changed anything
  // since Begin (its changes may be in it already).
  if (names.made_dir != 0 && usable && same_epoch && t.changes == changes_ && !meta::IsTrashIno(names.made_dir)) {
    Dir& d = PutLocked(names.made_dir, names.made_attr);
    ForgetNamesLocked(d);
    d.complete = true;
  }
}

void DirCache::End(const Ticket& t, const meta::Context::Effects* effects) { End(t, effects, Names()); }

void DirCache::Changed(const std::vector<meta::Change>& changes) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  ++changes_;
  for (const meta::Change& c : changes) {
    if (c.parent != 0) DropLocked(c.parent);  // an entry changed: so did its directory
    if (c.ino != 0) DropLocked(c.ino);
  }
}

void DirCache::Lost(int brief_ms) {
  if (!enabled()) return;
  usable_from_ms_ = std::max(usable_from_ms_.load(), NowMs() + std::max(brief_ms, 0));
  std::lock_guard lock(mu_);
  ClearLocked();
}

}  // namespace tessera::vfs
